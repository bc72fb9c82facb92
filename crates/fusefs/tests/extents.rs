//! Extent maps survive the trip through their on-device form: files built by
//! fallocate, scattered writes, punches and truncates read back the same
//! after the inode leaves the cache and after a remount.

use std::sync::Arc;

use ptsd_blockdev::{BlockDevice, MemDevice};
use ptsd_fs::{fsck, mkfs, Caller, DirectStore, FileSystem, MkfsOptions, Store};

const ME: Caller = Caller { uid: 0, gid: 0 };
const BS: u64 = 4096;

fn fresh(blocks: u64) -> (Arc<dyn BlockDevice>, FileSystem) {
    let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(4096, blocks).unwrap());
    let store = Arc::new(DirectStore::new(dev.clone()).unwrap());
    mkfs(&*store, &MkfsOptions::default()).unwrap();
    (dev, FileSystem::mount(store).unwrap())
}

fn remount(dev: &Arc<dyn BlockDevice>) -> FileSystem {
    FileSystem::mount(Arc::new(DirectStore::new(dev.clone()).unwrap())).unwrap()
}

fn fsck_problems(dev: &Arc<dyn BlockDevice>) -> Vec<String> {
    let store: Arc<dyn Store> = Arc::new(DirectStore::new(dev.clone()).unwrap());
    let r = fsck::check(store, false).unwrap();
    r.problems.iter().map(|p| format!("{p:?}")).collect()
}

/// The kernel forgets the inode (drop_caches): the next use reloads it.
fn drop_from_cache(fs: &FileSystem, ino: u64) {
    fs.release(ino).unwrap();
    fs.forget(ino, 1);
}

/// Issue 11 §1: posix_fallocate 1024 blocks, write the even blocks then the
/// odd ones, let the kernel forget the inode, read back.
#[test]
fn fallocated_file_with_scattered_writes_survives_reload() {
    let n = 1024u64;
    let (dev, fs) = fresh(8192);
    let f = fs.create(fs.root(), b"f", 0o644, ME).unwrap();
    fs.fallocate(f.ino, 0, n * BS, 0).unwrap();
    let order = (0..n).step_by(2).chain((1..n).step_by(2));
    for b in order {
        fs.write(f.ino, b * BS, &[(b % 251) as u8; BS as usize])
            .unwrap();
    }
    let want: Vec<u8> = (0..n)
        .flat_map(|b| std::iter::repeat((b % 251) as u8).take(BS as usize))
        .collect();
    assert_eq!(fs.read(f.ino, 0, (n * BS) as u32).unwrap(), want);
    drop_from_cache(&fs, f.ino);
    if let Err(e) = fs.lookup(fs.root(), b"f") { fs.close().unwrap(); panic!("reload: {e:?}; fsck: {:#?}", fsck_problems(&dev)); }
    let a = fs.lookup(fs.root(), b"f").expect("f reloads from its inode block");
    assert_eq!(a.size, n * BS);
    assert!(
        fs.read(f.ino, 0, (n * BS) as u32).unwrap() == want,
        "contents after a cache drop"
    );
    fs.close().unwrap();
    drop(fs);
    assert_eq!(fsck_problems(&dev), Vec::<String>::new());
    let fs = remount(&dev);
    let a = fs.lookup(fs.root(), b"f").unwrap();
    fs.open(a.ino).unwrap();
    assert!(fs.read(a.ino, 0, (n * BS) as u32).unwrap() == want);
    fs.release(a.ino).unwrap();
}
