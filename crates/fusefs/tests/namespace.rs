//! Namespace semantics of issue 45: stable readdir cookies, open-but-removed
//! directories, lookups by node id for file handles, read-only and sync
//! modes.

use std::collections::HashSet;
use std::sync::Arc;

use ptsd_blockdev::{BlockDevice, MemDevice};
use ptsd_fs::{fsck, mkfs, Caller, DirectStore, Errno, FileSystem, MkfsOptions, Store};

mod common;
use common::{fresh, fsck_clean, remount};

const ME: Caller = Caller { uid: 0, gid: 0 };

/// Item 3: a reader that renames every entry in place between getdents
/// calls (as xfstests generic/736 does) sees each inode at most once and
/// finishes; before, every rename moved the entry past the reader's cookie.
#[test]
fn readdir_finishes_while_entries_are_renamed_in_place() {
    let (dev, fs) = fresh(4096);
    let d = fs.mkdir(fs.root(), b"d", 0o755, ME).unwrap().ino;
    for i in 0..100 {
        let f = fs.create(d, format!("f{i}").as_bytes(), 0o644, ME).unwrap();
        fs.release(f.ino).unwrap();
    }
    let mut seen = HashSet::new();
    let mut offset = 0;
    let mut round = 0u32;
    loop {
        let batch = fs.readdir(d, offset, 7).unwrap();
        let Some(last) = batch.last() else { break };
        offset = last.next;
        for e in &batch {
            assert!(seen.insert(e.ino), "inode {} listed twice", e.ino);
        }
        assert!(seen.len() <= 102, "readdir does not finish");
        // Rename every entry to a new name in the same directory.
        round += 1;
        let names: Vec<Vec<u8>> = fs
            .readdir(d, 2, usize::MAX)
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect();
        for n in names {
            let mut new = n.split(|&b| b == b'.').next().unwrap().to_vec();
            new.extend_from_slice(format!(".{round}").as_bytes());
            fs.rename(d, &n, d, &new, 0).unwrap();
        }
    }
    assert_eq!(seen.len(), 102, "every entry (and . ..) listed once");
    // Positions survive a remount: the same cookies resume the same place.
    let before: Vec<(u64, Vec<u8>)> = fs
        .readdir(d, 0, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|e| (e.next, e.name))
        .collect();
    fs.close().unwrap();
    drop(fs);
    fsck_clean(&dev);
    let fs = remount(&dev);
    let after: Vec<(u64, Vec<u8>)> = fs
        .readdir(d, 0, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|e| (e.next, e.name))
        .collect();
    assert_eq!(before, after);
}

/// Item 6: a directory removed, or renamed over, while open keeps working
/// through its node id until the last close: getattr (fstat) gives nlink
/// 0, readdir lists nothing, creating in it is ENOENT; the close frees it,
/// and a crash while it is open leaves an orphan the next mount frees.
#[test]
fn open_directory_removed_or_renamed_over_stays_usable_until_released() {
    let (dev, fs) = fresh(4096);
    let root = fs.root();
    let a = fs.mkdir(root, b"a", 0o755, ME).unwrap().ino;
    let b = fs.mkdir(root, b"b", 0o755, ME).unwrap().ino;
    fs.opendir(a).unwrap();
    fs.opendir(b).unwrap();
    fs.rmdir(root, b"a").unwrap();
    // `c` replaces `b`: b is renamed over.
    let c = fs.mkdir(root, b"c", 0o755, ME).unwrap().ino;
    fs.rename(root, b"c", root, b"b", 0).unwrap();
    assert_eq!(fs.lookup(root, b"b").unwrap().ino, c);
    for d in [a, b] {
        let at = fs.getattr(d).unwrap();
        assert_eq!(at.nlink, 0);
        assert_eq!(at.mode & libc::S_IFMT, libc::S_IFDIR);
        assert!(fs.readdir(d, 0, 100).unwrap().is_empty());
        assert_eq!(fs.create(d, b"x", 0o644, ME).err(), Some(Errno::ENOENT));
        assert_eq!(fs.mkdir(d, b"x", 0o755, ME).err(), Some(Errno::ENOENT));
    }
    assert_eq!(fs.getattr(root).unwrap().nlink, 3, "root: . .. and b");
    fs.releasedir(a).unwrap();
    assert_eq!(fs.getattr(a).err(), Some(Errno::ENOENT));
    // `b` is still open when the daemon stops: the next mount frees it
    // (and fsck, at the end, finds every block accounted for).
    drop(fs);
    let store: Arc<dyn Store> = Arc::new(DirectStore::new(dev.clone()).unwrap());
    let r = fsck::check(store, false).unwrap();
    assert!(
        matches!(&r.problems[..], [fsck::Finding::Orphan { ino, nlink: 0 }] if *ino == b),
        "only the orphan directory itself: {:#?}",
        r.problems
    );
    let fs = remount(&dev);
    assert_eq!(fs.orphans_freed, 1);
    assert_eq!(fs.getattr(b).err(), Some(Errno::ENOENT));
    fs.rmdir(root, b"b").unwrap();
    assert_eq!(fs.opendir(fs.root()).map(|_| ()), Ok(()));
    let f = fs.create(root, b"f", 0o644, ME).unwrap().ino;
    assert_eq!(fs.opendir(f).err(), Some(Errno::ENOTDIR));
    fs.release(f).unwrap();
    fs.releasedir(fs.root()).unwrap();
    fs.close().unwrap();
    drop(fs);
    fsck_clean(&dev);
}

/// Item 8: what file handles need. `.` looks any inode up by its number
/// (files too), `..` a directory's parent; a number that is no inode is
/// ENOENT (the kernel's ESTALE); an inode number reused after a delete has
/// a new generation, and numbers and generations survive a remount.
#[test]
fn lookup_by_node_id_and_generations_for_file_handles() {
    let (dev, fs) = fresh(4096);
    let root = fs.root();
    let d = fs.mkdir(root, b"d", 0o755, ME).unwrap();
    let f = fs.create(d.ino, b"f", 0o644, ME).unwrap();
    fs.release(f.ino).unwrap();
    assert_eq!(fs.lookup(f.ino, b".").unwrap(), f);
    assert_eq!(fs.lookup(d.ino, b"..").unwrap().ino, root);
    assert_eq!(fs.lookup(root, b"..").unwrap().ino, root);
    assert_eq!(fs.lookup(f.ino, b"..").err(), Some(Errno::ENOTDIR));
    // Not an inode: a data block, past the end, the superblock.
    fs.write(f.ino, 0, &[7u8; 4096]).unwrap();
    for bogus in [0, 1, 1 << 40, u64::MAX] {
        assert_eq!(fs.lookup(bogus, b".").err(), Some(Errno::ENOENT), "{bogus}");
    }
    // After a remount (nothing cached) the same numbers and generations.
    fs.close().unwrap();
    drop(fs);
    let fs = remount(&dev);
    let again = fs.lookup(f.ino, b".").unwrap();
    assert_eq!((again.ino, again.generation), (f.ino, f.generation));
    assert_eq!(fs.lookup(d.ino, b".").unwrap().generation, d.generation);
    assert_eq!(fs.lookup(d.ino, b"..").unwrap().ino, root);
    // Deleted: gone; its number reused by a new inode gets a new generation.
    fs.unlink(d.ino, b"f").unwrap();
    assert_eq!(fs.lookup(f.ino, b".").err(), Some(Errno::ENOENT));
    let mut reused = None;
    for i in 0..64 {
        let g = fs
            .create(d.ino, format!("g{i}").as_bytes(), 0o644, ME)
            .unwrap();
        fs.release(g.ino).unwrap();
        if g.ino == f.ino {
            reused = Some(g);
            break;
        }
    }
    let g = reused.expect("the freed inode number is reused");
    assert_ne!(g.generation, f.generation);
    fs.close().unwrap();
    drop(fs);
    let fs = remount(&dev);
    assert_eq!(fs.lookup(g.ino, b".").unwrap().generation, g.generation);
    fs.close().unwrap();
    drop(fs);
    fsck_clean(&dev);
}

/// A store that counts `sync` calls (durability points).
struct CountingStore {
    inner: DirectStore,
    syncs: std::sync::atomic::AtomicU64,
}

impl CountingStore {
    fn syncs(&self) -> u64 {
        self.syncs.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Store for CountingStore {
    fn num_blocks(&self) -> u64 {
        self.inner.num_blocks()
    }
    fn read(&self, blk: u64, buf: &mut [u8]) -> Result<(), ptsd_fs::FsStoreError> {
        self.inner.read(blk, buf)
    }
    fn begin(&self) -> Box<dyn ptsd_fs::StoreTxn + '_> {
        self.inner.begin()
    }
    fn sync(&self) -> Result<(), ptsd_fs::FsStoreError> {
        self.syncs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.inner.sync()
    }
    fn checkpoint(&self) -> Result<(), ptsd_fs::FsStoreError> {
        self.inner.checkpoint()
    }
    fn write_super(&self, block: &[u8]) -> Result<(), ptsd_fs::FsStoreError> {
        self.inner.write_super(block)
    }
    fn close(&self) -> Result<(), ptsd_fs::FsStoreError> {
        self.inner.close()
    }
    fn describe(&self) -> String {
        "counting".into()
    }
}

/// Item 9, core side: `sync` makes every change durable before it returns,
/// `dirsync` every directory change (and only those), the default none.
#[test]
fn sync_and_dirsync_modes_commit_before_returning() {
    use ptsd_fs::filesystem::SyncMode;
    let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(4096, 4096).unwrap());
    let store = Arc::new(CountingStore {
        inner: DirectStore::new(dev.clone()).unwrap(),
        syncs: 0.into(),
    });
    mkfs(&*store, &MkfsOptions::default()).unwrap();
    let fs = FileSystem::mount(store.clone()).unwrap();
    let root = fs.root();
    // What each kind of change costs in syncs under a mode.
    let mut n = 0;
    let mut run = |mode: SyncMode| -> (u64, u64, u64) {
        fs.set_sync_mode(mode);
        n += 1;
        let s0 = store.syncs();
        let f = fs
            .create(root, format!("f{n}").as_bytes(), 0o644, ME)
            .unwrap()
            .ino;
        fs.rename(
            root,
            format!("f{n}").as_bytes(),
            root,
            format!("g{n}").as_bytes(),
            0,
        )
        .unwrap();
        let s1 = store.syncs();
        fs.write(f, 0, b"data").unwrap();
        fs.setxattr(f, b"user.a", b"v", 0).unwrap();
        let s2 = store.syncs();
        fs.unlink(root, format!("g{n}").as_bytes()).unwrap();
        let s3 = store.syncs();
        fs.release(f).unwrap();
        (s1 - s0, s2 - s1, s3 - s2)
    };
    assert_eq!(run(SyncMode::Async), (0, 0, 0));
    assert_eq!(
        run(SyncMode::Dirs),
        (2, 0, 1),
        "dirsync: directory changes only"
    );
    let (dirs, data, unlink) = run(SyncMode::All);
    assert!(dirs >= 2 && data >= 2 && unlink >= 1, "sync: every change");
    assert_eq!(fs.sync_mode(), SyncMode::All);
}

/// Item 9, core side: switched read-only, every change is EROFS and
/// nothing changes; reads still work; switched back, changes work again.
#[test]
fn read_only_switch_refuses_every_change_and_switches_back() {
    let (dev, fs) = fresh(4096);
    let root = fs.root();
    let d = fs.mkdir(root, b"d", 0o755, ME).unwrap().ino;
    let f = fs.create(root, b"f", 0o644, ME).unwrap().ino;
    fs.write(f, 0, b"before").unwrap();
    // Open and unlinked before the switch: its last close, while read-only,
    // still frees it (no orphan left for fsck).
    let gone = fs.create(root, b"gone", 0o644, ME).unwrap().ino;
    fs.write(gone, 0, &[1u8; 8192]).unwrap();
    fs.unlink(root, b"gone").unwrap();
    let free = fs.statfs().bfree;
    fs.set_read_only(true);
    fs.release(gone).unwrap();
    assert_eq!(fs.getattr(gone).err(), Some(Errno::ENOENT));
    assert_eq!(fs.statfs().bfree, free + 3, "inode and two data blocks");
    assert!(fs.is_read_only());
    let rofs = Some(Errno::EROFS);
    assert_eq!(fs.create(root, b"n", 0o644, ME).err(), rofs);
    assert_eq!(fs.mkdir(root, b"n", 0o755, ME).err(), rofs);
    assert_eq!(
        fs.mknod(root, b"n", libc::S_IFIFO | 0o644, 0, ME).err(),
        rofs
    );
    assert_eq!(fs.symlink(root, b"n", b"t", ME).err(), rofs);
    assert_eq!(fs.link(f, root, b"n").err(), rofs);
    assert_eq!(fs.tmpfile(root, 0o600, ME).err(), rofs);
    assert_eq!(fs.unlink(root, b"f").err(), rofs);
    assert_eq!(fs.rmdir(root, b"d").err(), rofs);
    assert_eq!(fs.rename(root, b"f", root, b"g", 0).err(), rofs);
    assert_eq!(fs.write(f, 0, b"x").err(), rofs);
    assert_eq!(fs.fallocate(f, 0, 4096, 0).err(), rofs);
    let chmod = ptsd_fs::SetAttr {
        mode: Some(0o600),
        ..Default::default()
    };
    assert_eq!(fs.setattr(f, chmod).err(), rofs);
    assert_eq!(fs.setxattr(f, b"user.a", b"v", 0).err(), rofs);
    assert_eq!(fs.removexattr(f, b"user.a").err(), rofs);
    // Reads work.
    assert_eq!(fs.read(f, 0, 100).unwrap(), b"before");
    assert_eq!(fs.lookup(root, b"d").unwrap().ino, d);
    assert_eq!(fs.readdir(root, 0, 100).unwrap().len(), 4);
    fs.set_read_only(false);
    assert!(!fs.is_read_only());
    fs.write(f, 0, b"after!").unwrap();
    fs.rename(root, b"f", root, b"g", 0).unwrap();
    fs.release(f).unwrap();
    fs.close().unwrap();
    drop(fs);
    fsck_clean(&dev);
    let fs = remount(&dev);
    let g = fs.lookup(root, b"g").unwrap().ino;
    assert_eq!(fs.read(g, 0, 100).unwrap(), b"after!");
}

/// RENAME_WHITEOUT (what overlayfs asks of its upper layer): the source
/// name becomes a character device 0:0 in the same transaction, within a
/// directory, across directories and over an existing target; with
/// RENAME_EXCHANGE it is EINVAL.
#[test]
fn rename_whiteout_leaves_a_whiteout_at_the_source() {
    use ptsd_fs::{RENAME_EXCHANGE, RENAME_NOREPLACE, RENAME_WHITEOUT};
    let (dev, fs) = fresh(4096);
    let root = fs.root();
    let d = fs.mkdir(root, b"d", 0o755, ME).unwrap().ino;
    let mut files = Vec::new();
    for n in [&b"a"[..], b"b", b"c"] {
        let f = fs.create(root, n, 0o644, ME).unwrap().ino;
        fs.release(f).unwrap();
        files.push(f);
    }
    let is_whiteout = |dir: u64, name: &[u8]| {
        let a = fs.lookup(dir, name).unwrap();
        a.mode == libc::S_IFCHR && a.rdev == 0 && a.nlink == 1
    };
    assert_eq!(
        fs.rename(root, b"a", root, b"x", RENAME_WHITEOUT | RENAME_EXCHANGE),
        Err(Errno::EINVAL)
    );
    fs.rename(root, b"a", root, b"a2", RENAME_WHITEOUT).unwrap();
    assert!(is_whiteout(root, b"a"));
    assert_eq!(fs.lookup(root, b"a2").unwrap().ino, files[0]);
    fs.rename(root, b"b", d, b"b", RENAME_WHITEOUT | RENAME_NOREPLACE)
        .unwrap();
    assert!(is_whiteout(root, b"b"));
    assert_eq!(fs.lookup(d, b"b").unwrap().ino, files[1]);
    // Over an existing target (which is freed).
    fs.rename(root, b"c", d, b"b", RENAME_WHITEOUT).unwrap();
    assert!(is_whiteout(root, b"c"));
    assert_eq!(fs.lookup(d, b"b").unwrap().ino, files[2]);
    assert_eq!(fs.getattr(files[1]).err(), Some(Errno::ENOENT));
    assert_eq!(fs.readdir(root, 2, 100).unwrap().len(), 5, "d a a2 b c");
    fs.close().unwrap();
    drop(fs);
    fsck_clean(&dev);
    let fs = remount(&dev);
    assert_eq!(fs.lookup(root, b"c").unwrap().mode, libc::S_IFCHR);
}
