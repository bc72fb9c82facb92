//! Large directories and inode eviction, in-process (no kernel).
//!
//! The bounded CI-sized proof that a directory stays fast as it grows: at
//! 100 000 entries an insertion still writes a handful of blocks (never a
//! rewrite of the directory's extent chain or of its other blocks), lookups
//! hit and miss by name, readdir visits every entry once, and the directory
//! reloads after a remount. `ptsd bench dir` measures the time per entry up
//! to a million.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ptsd_blockdev::{BlockDevice, MemDevice};
use ptsd_fs::store::StoreTxn;
use ptsd_fs::{fsck, mkfs, Caller, DirectStore, Errno, FileSystem, MkfsOptions, Store};

const ME: Caller = Caller { uid: 0, gid: 0 };

/// A store that counts the blocks each transaction writes.
struct Counting {
    inner: DirectStore,
    last_txn_blocks: Arc<AtomicU64>,
}

struct CountingTxn<'a> {
    inner: Box<dyn StoreTxn + 'a>,
    blocks: u64,
    out: Arc<AtomicU64>,
}

impl StoreTxn for CountingTxn<'_> {
    fn write(&mut self, blk: u64, data: &[u8]) -> Result<(), ptsd_fs::FsStoreError> {
        self.blocks += 1;
        self.inner.write(blk, data)
    }
    fn finish(self: Box<Self>) -> Result<(), ptsd_fs::FsStoreError> {
        self.out.store(self.blocks, Ordering::SeqCst);
        self.inner.finish()
    }
}

impl Store for Counting {
    fn num_blocks(&self) -> u64 {
        self.inner.num_blocks()
    }
    fn read(&self, blk: u64, buf: &mut [u8]) -> Result<(), ptsd_fs::FsStoreError> {
        self.inner.read(blk, buf)
    }
    fn begin(&self) -> Box<dyn StoreTxn + '_> {
        Box::new(CountingTxn {
            inner: self.inner.begin(),
            blocks: 0,
            out: self.last_txn_blocks.clone(),
        })
    }
    fn sync(&self) -> Result<(), ptsd_fs::FsStoreError> {
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

fn name(i: u64) -> Vec<u8> {
    format!("entry-{i:08}-of-a-big-directory").into_bytes()
}

#[test]
fn directory_of_100k_entries_stays_flat() {
    const ENTRIES: u64 = 100_000;
    // Hard links keep the device small (an inode is a block); one new file
    // every 64 entries is allocated between the directory's blocks, so the
    // directory's extent list grows long (an overflow chain) as it would
    // among other allocations.
    const LINKS_PER_FILE: u64 = 64;
    let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(4096, 8192).unwrap());
    let count = Arc::new(AtomicU64::new(0));
    let store = Arc::new(Counting {
        inner: DirectStore::new(dev.clone()).unwrap(),
        last_txn_blocks: count.clone(),
    });
    mkfs(&*store, &MkfsOptions::default()).unwrap();
    let fs = FileSystem::mount(store).unwrap();
    let root = fs.root();
    let dir = fs.mkdir(root, b"big", 0o755, ME).unwrap().ino;
    let mut target = 0;
    let mut max_late = 0;
    for i in 0..ENTRIES {
        if i % LINKS_PER_FILE == 0 {
            target = fs.create(dir, &name(i), 0o644, ME).unwrap().ino;
            fs.release(target).unwrap();
        } else {
            fs.link(target, dir, &name(i)).unwrap();
        }
        if i >= ENTRIES - 2_000 {
            max_late = max_late.max(count.load(Ordering::SeqCst));
        }
    }
    // An insertion writes the entry's directory block, the directory's and
    // the file's inode, and when the directory grows a new block, the
    // bitmap and at most one overflow block of the extent list.
    assert!(
        max_late <= 6,
        "an insertion into a directory of {ENTRIES} entries wrote {max_late} blocks"
    );
    let dir_blocks = fs.getattr(dir).unwrap().blocks / 8;
    assert!(dir_blocks > 500, "the directory has {dir_blocks} blocks");

    let check = |fs: &FileSystem| {
        for i in (0..ENTRIES).step_by(997) {
            fs.lookup(dir, &name(i)).unwrap();
        }
        assert_eq!(fs.lookup(dir, &name(ENTRIES)), Err(Errno::ENOENT));
        let mut seen = HashSet::new();
        let mut cookie = 0;
        loop {
            let page = fs.readdir(dir, cookie, 4096).unwrap();
            let Some(last) = page.last() else { break };
            cookie = last.next;
            for e in page {
                if e.name != b"." && e.name != b".." {
                    assert!(seen.insert(e.name), "readdir repeated an entry");
                }
            }
        }
        assert_eq!(seen.len() as u64, ENTRIES);
    };
    check(&fs);
    // Removing entries rewrites only their blocks, too.
    for i in (0..ENTRIES).step_by(10) {
        fs.unlink(dir, &name(i)).unwrap();
        assert!(count.load(Ordering::SeqCst) <= 4);
        fs.link(fs.lookup(dir, &name(i + 1)).unwrap().ino, dir, &name(i))
            .unwrap();
    }
    fs.close().unwrap();
    drop(fs);
    let store: Arc<dyn Store> = Arc::new(DirectStore::new(dev.clone()).unwrap());
    let r = fsck::check(store.clone(), false).unwrap();
    assert!(r.problems.is_empty(), "fsck: {:#?}", r.problems);
    let fs = FileSystem::mount(store).unwrap();
    check(&fs);
}

#[test]
fn forgotten_inodes_leave_the_cache_and_come_back_intact() {
    let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(4096, 4096).unwrap());
    let store = Arc::new(DirectStore::new(dev).unwrap());
    mkfs(&*store, &MkfsOptions::default()).unwrap();
    let fs = FileSystem::mount(store).unwrap();
    let root = fs.root();
    let base = fs.cached_inodes();
    let d = fs.mkdir(root, b"d", 0o755, ME).unwrap().ino;
    let mut inos = Vec::new();
    for i in 0..200u64 {
        let f = fs.create(d, format!("f{i}").as_bytes(), 0o644, ME).unwrap();
        fs.write(f.ino, 0, &i.to_le_bytes()).unwrap();
        fs.setxattr(f.ino, b"user.i", &i.to_le_bytes(), 0).unwrap();
        fs.release(f.ino).unwrap();
        inos.push(f.ino);
    }
    assert_eq!(fs.cached_inodes(), base + 201);
    // The kernel forgets what it was given (one reference per create).
    for &ino in &inos {
        fs.forget(ino, 1);
    }
    fs.forget(d, 1);
    assert_eq!(fs.cached_inodes(), base, "forgotten inodes stay cached");
    // They load again with everything they had.
    for (i, &ino) in inos.iter().enumerate() {
        let a = fs.lookup(d, format!("f{i}").as_bytes()).unwrap();
        assert_eq!(a.ino, ino);
        assert_eq!(fs.read(ino, 0, 8).unwrap(), (i as u64).to_le_bytes());
        assert_eq!(
            fs.getxattr(ino, b"user.i").unwrap(),
            (i as u64).to_le_bytes()
        );
    }
    // A reference still held, or an open file, keeps an inode cached.
    let kept = inos[0];
    fs.forget(kept, 0);
    fs.open(inos[1]).unwrap();
    fs.forget(inos[1], 1);
    let cached = fs.cached_inodes();
    for &ino in &inos[2..] {
        fs.forget(ino, 1);
    }
    assert_eq!(fs.cached_inodes(), cached - (inos.len() - 2));
    // Unlinked while open and forgotten: freed at the last close.
    let free_before = fs.statfs().bfree;
    fs.unlink(d, b"f1").unwrap();
    assert!(fs.statfs().bfree < free_before + 2, "freed while open");
    fs.release(inos[1]).unwrap();
    // Its inode, data and xattr blocks (the orphan directory may have
    // taken a block).
    assert!(fs.statfs().bfree >= free_before + 2);
    assert_eq!(fs.getattr(inos[1]), Err(Errno::ENOENT));
    // Freeing leaves no cache entry behind.
    let f = fs.create(d, b"gone", 0o644, ME).unwrap();
    fs.release(f.ino).unwrap();
    fs.unlink(d, b"gone").unwrap();
    fs.forget(f.ino, 1);
    assert_eq!(fs.getattr(f.ino), Err(Errno::ENOENT));
    fs.close().unwrap();
}

#[test]
fn long_extent_lists_survive_random_changes_and_remounts() {
    use rand::{Rng, SeedableRng};
    let seed = 7u64;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(4096, 16384).unwrap());
    let store = Arc::new(DirectStore::new(dev.clone()).unwrap());
    mkfs(&*store, &MkfsOptions::default()).unwrap();
    let mut fs = FileSystem::mount(store).unwrap();
    let root = fs.root();
    let f = fs.create(root, b"holes", 0o644, ME).unwrap().ino;
    fs.release(f).unwrap();
    // Every other block written: 2 000 extents, an overflow chain of 8.
    let mut model = std::collections::BTreeMap::new();
    for k in 0..2_000u64 {
        fs.write(f, k * 2 * 4096, &[k as u8 | 1]).unwrap();
        model.insert(k * 2, k as u8 | 1);
    }
    let verify = |fs: &FileSystem, model: &std::collections::BTreeMap<u64, u8>, when: &str| {
        for lblk in 0..4_000u64 {
            let got = fs.read(f, lblk * 4096, 1).unwrap();
            let want = model.get(&lblk).copied().unwrap_or(0);
            assert_eq!(
                got.first().copied().unwrap_or(0),
                want,
                "seed {seed}, {when}: block {lblk}"
            );
        }
    };
    for round in 0..4 {
        for _ in 0..150 {
            let lblk = rng.gen_range(0..4_000u64);
            if rng.gen_bool(0.5) {
                let v = rng.gen::<u8>() | 1;
                fs.write(f, lblk * 4096, &[v]).unwrap();
                model.insert(lblk, v);
            } else if lblk * 4096 + 4096 <= 3_999 * 2 * 4096 {
                fs.fallocate(
                    f,
                    lblk * 4096,
                    4096,
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                )
                .unwrap();
                model.remove(&lblk);
            }
        }
        verify(&fs, &model, &format!("round {round} before remount"));
        fs.close().unwrap();
        drop(fs);
        let store: Arc<dyn Store> = Arc::new(DirectStore::new(dev.clone()).unwrap());
        let r = fsck::check(store.clone(), false).unwrap();
        assert!(
            r.problems.is_empty(),
            "seed {seed} round {round}: {:#?}",
            r.problems
        );
        fs = FileSystem::mount(store).unwrap();
        verify(&fs, &model, &format!("round {round} after remount"));
    }
    fs.close().unwrap();
}
