//! Namespace semantics of issue 45: stable readdir cookies, open-but-removed
//! directories, lookups by node id for file handles, read-only and sync
//! modes.

use std::collections::HashSet;
use std::sync::Arc;

use ptsd_blockdev::{BlockDevice, MemDevice};
use ptsd_fs::{fsck, mkfs, Caller, DirectStore, Errno, FileSystem, MkfsOptions, Store};

const ME: Caller = Caller { uid: 0, gid: 0 };

fn fresh(blocks: u64) -> (Arc<dyn BlockDevice>, FileSystem) {
    let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(4096, blocks).unwrap());
    let store = Arc::new(DirectStore::new(dev.clone()).unwrap());
    mkfs(&*store, &MkfsOptions::default()).unwrap();
    (dev, FileSystem::mount(store).unwrap())
}

fn remount(dev: &Arc<dyn BlockDevice>) -> FileSystem {
    FileSystem::mount(Arc::new(DirectStore::new(dev.clone()).unwrap())).unwrap()
}

fn fsck_clean(dev: &Arc<dyn BlockDevice>) {
    let store: Arc<dyn Store> = Arc::new(DirectStore::new(dev.clone()).unwrap());
    let r = fsck::check(store, false).unwrap();
    assert!(r.problems.is_empty(), "fsck: {:#?}", r.problems);
}

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
