//! In-process tests of the file-system operations (no kernel).

use std::sync::Arc;

use ptsd_blockdev::{BlockDevice, MemDevice};
use ptsd_fs::{
    fsck, Caller, DirectStore, Errno, FileSystem, SetAttr, Store, RENAME_EXCHANGE, RENAME_NOREPLACE,
};
use rand::{Rng, SeedableRng};

mod common;
use common::{fresh, fsck_clean, remount};

const ME: Caller = Caller { uid: 0, gid: 0 };

#[test]
fn files_dirs_links_and_persistence() {
    let (dev, fs) = fresh(4096);
    let root = fs.root();
    let d = fs.mkdir(root, b"dir", 0o755, ME).unwrap();
    let f = fs.create(d.ino, b"file", 0o644, ME).unwrap();
    let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    assert_eq!(fs.write(f.ino, 10, &data).unwrap(), data.len() as u32);
    assert_eq!(fs.read(f.ino, 10, 200_000).unwrap(), data);
    assert_eq!(fs.read(f.ino, 0, 10).unwrap(), vec![0u8; 10]);
    fs.release(f.ino).unwrap();
    fs.link(f.ino, root, b"hard").unwrap();
    assert_eq!(fs.getattr(f.ino).unwrap().nlink, 2);
    fs.symlink(root, b"sym", b"dir/file", ME).unwrap();
    fs.setxattr(f.ino, b"user.k", b"v", 0).unwrap();
    assert_eq!(fs.mkdir(root, b"dir", 0o755, ME), Err(Errno::EEXIST));
    assert_eq!(
        fs.create(root, &[b'x'; 256], 0o644, ME),
        Err(Errno::ENAMETOOLONG)
    );
    assert_eq!(fs.rmdir(root, b"dir"), Err(Errno::ENOTEMPTY));
    assert_eq!(fs.unlink(root, b"dir"), Err(Errno::EISDIR));
    assert_eq!(fs.rmdir(root, b"hard"), Err(Errno::ENOTDIR));
    assert_eq!(fs.lookup(root, b"nope"), Err(Errno::ENOENT));
    assert_eq!(fs.getattr(root).unwrap().nlink, 3);
    fs.close().unwrap();
    drop(fs);
    fsck_clean(&dev);
    let fs = remount(&dev);
    let root = fs.root();
    let d = fs.lookup(root, b"dir").unwrap();
    let f = fs.lookup(d.ino, b"file").unwrap();
    assert_eq!(fs.read(f.ino, 10, 200_000).unwrap(), data);
    assert_eq!(
        fs.readlink(fs.lookup(root, b"sym").unwrap().ino).unwrap(),
        b"dir/file"
    );
    assert_eq!(fs.getxattr(f.ino, b"user.k").unwrap(), b"v");
    fs.setattr(
        f.ino,
        SetAttr {
            size: Some(5000),
            ..Default::default()
        },
    )
    .unwrap();
    fs.setattr(
        f.ino,
        SetAttr {
            size: Some(9000),
            ..Default::default()
        },
    )
    .unwrap();
    let back = fs.read(f.ino, 0, 9000).unwrap();
    assert_eq!(&back[10..5000], &data[..4990]);
    assert!(back[5000..].iter().all(|&b| b == 0));
    fs.unlink(root, b"hard").unwrap();
    fs.unlink(d.ino, b"file").unwrap();
    fs.rmdir(root, b"dir").unwrap();
    fs.unlink(root, b"sym").unwrap();
    assert_eq!(fs.readdir(root, 0, 100).unwrap().len(), 2);
    fs.close().unwrap();
    drop(fs);
    fsck_clean(&dev);
}

#[test]
fn rename_flags() {
    let (dev, fs) = fresh(2048);
    let root = fs.root();
    let a = fs.mkdir(root, b"a", 0o755, ME).unwrap();
    let b = fs.mkdir(root, b"b", 0o755, ME).unwrap();
    let x = fs.create(a.ino, b"x", 0o644, ME).unwrap();
    fs.release(x.ino).unwrap();
    let y = fs.create(b.ino, b"y", 0o644, ME).unwrap();
    fs.release(y.ino).unwrap();
    assert_eq!(
        fs.rename(a.ino, b"x", b.ino, b"y", RENAME_NOREPLACE),
        Err(Errno::EEXIST)
    );
    fs.rename(a.ino, b"x", b.ino, b"y", RENAME_EXCHANGE)
        .unwrap();
    assert_eq!(fs.lookup(a.ino, b"x").unwrap().ino, y.ino);
    assert_eq!(fs.lookup(b.ino, b"y").unwrap().ino, x.ino);
    fs.rename(a.ino, b"x", b.ino, b"y", 0).unwrap();
    assert_eq!(fs.lookup(a.ino, b"x"), Err(Errno::ENOENT));
    assert_eq!(fs.lookup(b.ino, b"y").unwrap().ino, y.ino);
    // Directory into its own subtree.
    assert_eq!(
        fs.rename(root, b"a", a.ino, b"inside", 0),
        Err(Errno::EINVAL)
    );
    // Move a directory across parents and replace an empty one.
    let e = fs.mkdir(b.ino, b"e", 0o755, ME).unwrap();
    fs.rename(root, b"a", b.ino, b"e", 0).unwrap();
    assert_eq!(fs.lookup(b.ino, b"e").unwrap().ino, a.ino);
    assert_eq!(fs.getattr(e.ino), Err(Errno::ENOENT));
    assert_eq!(fs.lookup(a.ino, b"..").unwrap().ino, b.ino);
    assert_eq!(fs.getattr(b.ino).unwrap().nlink, 3);
    assert_eq!(fs.getattr(root).unwrap().nlink, 3);
    fs.close().unwrap();
    drop(fs);
    fsck_clean(&dev);
}

#[test]
fn unlinked_open_file_lives_until_release_and_crash_orphans_are_freed() {
    let (dev, fs) = fresh(2048);
    let root = fs.root();
    let f = fs.create(root, b"tmp", 0o644, ME).unwrap();
    fs.write(f.ino, 0, &[7u8; 50_000]).unwrap();
    fs.unlink(root, b"tmp").unwrap();
    assert_eq!(fs.read(f.ino, 0, 10).unwrap(), vec![7u8; 10]);
    let free_before = fs.statfs().bfree;
    fs.release(f.ino).unwrap();
    assert!(fs.statfs().bfree > free_before);
    // Now "crash" with an unlinked open file: the next mount frees it.
    let g = fs.create(root, b"tmp2", 0o644, ME).unwrap();
    fs.write(g.ino, 0, &[1u8; 10_000]).unwrap();
    fs.unlink(root, b"tmp2").unwrap();
    std::mem::forget(fs);
    let fs = remount(&dev);
    assert_eq!(fs.orphans_freed, 1);
    fs.close().unwrap();
    drop(fs);
    fsck_clean(&dev);
}

#[test]
fn full_device_gives_enospc_not_corruption() {
    let (dev, fs) = fresh(300);
    let root = fs.root();
    let f = fs.create(root, b"big", 0o644, ME).unwrap();
    let chunk = vec![3u8; 64 * 1024];
    let mut off = 0u64;
    let err = loop {
        match fs.write(f.ino, off, &chunk) {
            Ok(n) => off += u64::from(n),
            Err(e) => break e,
        }
    };
    assert_eq!(err, Errno::ENOSPC);
    let mut names = 0;
    loop {
        match fs.create(root, format!("f{names}").as_bytes(), 0o644, ME) {
            Ok(a) => {
                fs.release(a.ino).unwrap();
                names += 1;
            }
            Err(e) => {
                assert_eq!(e, Errno::ENOSPC);
                break;
            }
        }
    }
    assert_eq!(
        fs.read(f.ino, 0, off as u32).unwrap(),
        vec![3u8; off as usize]
    );
    fs.release(f.ino).unwrap();
    fs.unlink(root, b"big").unwrap();
    assert!(fs.create(root, b"after", 0o644, ME).is_ok());
    fs.close().unwrap();
    drop(fs);
    fsck_clean(&dev);
}

#[test]
fn fallocate_punch_and_sparse_reads() {
    let (dev, fs) = fresh(2048);
    let root = fs.root();
    let f = fs.create(root, b"f", 0o644, ME).unwrap();
    fs.fallocate(f.ino, 0, 40_000, 0).unwrap();
    assert_eq!(fs.getattr(f.ino).unwrap().size, 40_000);
    assert_eq!(fs.read(f.ino, 0, 40_000).unwrap(), vec![0u8; 40_000]);
    fs.write(f.ino, 5000, &[9u8; 3000]).unwrap();
    fs.fallocate(
        f.ino,
        6000,
        10_000,
        libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
    )
    .unwrap();
    let r = fs.read(f.ino, 0, 40_000).unwrap();
    assert!(r[5000..6000].iter().all(|&b| b == 9));
    assert!(r[6000..].iter().all(|&b| b == 0));
    fs.write(f.ino, 1 << 30, b"far").unwrap();
    assert_eq!(fs.read(f.ino, (1 << 30) - 2, 5).unwrap(), b"\0\0far");
    fs.release(f.ino).unwrap();
    fs.close().unwrap();
    drop(fs);
    fsck_clean(&dev);
}

#[test]
fn big_directory_and_many_extents() {
    let (dev, fs) = fresh(16384);
    let root = fs.root();
    let d = fs.mkdir(root, b"d", 0o755, ME).unwrap();
    for i in 0..3000 {
        let a = fs
            .create(
                d.ino,
                format!("some-longish-file-name-{i:06}").as_bytes(),
                0o644,
                ME,
            )
            .unwrap();
        fs.release(a.ino).unwrap();
    }
    // A fragmented file: interleave writes to two files.
    let f1 = fs.create(root, b"f1", 0o644, ME).unwrap();
    let f2 = fs.create(root, b"f2", 0o644, ME).unwrap();
    for i in 0..600u64 {
        fs.write(f1.ino, i * 4096, &[(i % 256) as u8; 4096])
            .unwrap();
        fs.write(f2.ino, i * 4096, &[1u8; 4096]).unwrap();
    }
    fs.release(f1.ino).unwrap();
    fs.release(f2.ino).unwrap();
    fs.close().unwrap();
    drop(fs);
    fsck_clean(&dev);
    let fs = remount(&dev);
    let root = fs.root();
    let d = fs.lookup(root, b"d").unwrap();
    let mut seen = 0;
    let mut off = 0;
    loop {
        let batch = fs.readdir(d.ino, off, 100).unwrap();
        if batch.is_empty() {
            break;
        }
        off = batch.last().unwrap().next;
        seen += batch.len();
    }
    assert_eq!(seen, 3002);
    let f1 = fs.lookup(root, b"f1").unwrap();
    for i in [0u64, 300, 599] {
        assert_eq!(
            fs.read(f1.ino, i * 4096, 4096).unwrap(),
            vec![(i % 256) as u8; 4096]
        );
    }
    for i in 0..3000 {
        fs.unlink(d.ino, format!("some-longish-file-name-{i:06}").as_bytes())
            .unwrap();
    }
    fs.rmdir(root, b"d").unwrap();
    fs.close().unwrap();
    drop(fs);
    fsck_clean(&dev);
}

#[test]
fn concurrent_operations_stay_consistent() {
    let (dev, fs) = fresh(16384);
    let fs = Arc::new(fs);
    let root = fs.root();
    let mut handles = Vec::new();
    for t in 0..4u64 {
        let fs = fs.clone();
        handles.push(std::thread::spawn(move || {
            let mut rng = rand::rngs::StdRng::seed_from_u64(t);
            let d = fs
                .mkdir(root, format!("t{t}").as_bytes(), 0o755, ME)
                .unwrap();
            for i in 0..300 {
                let name = format!("f{}", rng.gen_range(0..40));
                match rng.gen_range(0..4) {
                    0 => {
                        if let Ok(a) = fs.create(d.ino, name.as_bytes(), 0o644, ME) {
                            fs.write(a.ino, 0, &vec![t as u8; rng.gen_range(1..20000)])
                                .unwrap();
                            fs.release(a.ino).unwrap();
                        }
                    }
                    1 => {
                        let _ = fs.unlink(d.ino, name.as_bytes());
                    }
                    2 => {
                        let _ = fs.rename(
                            d.ino,
                            name.as_bytes(),
                            root,
                            format!("moved-{t}-{i}").as_bytes(),
                            0,
                        );
                    }
                    _ => fs.fsync().unwrap(),
                }
            }
        }));
    }
    for h in handles {
        h.join().unwrap();
    }
    let fs = Arc::try_unwrap(fs).ok().unwrap();
    fs.close().unwrap();
    drop(fs);
    fsck_clean(&dev);
}

#[test]
fn corrupt_images_are_refused_with_a_reason() {
    // Not a ptsd-fs image at all.
    let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(4096, 256).unwrap());
    let err = FileSystem::mount(Arc::new(DirectStore::new(dev.clone()).unwrap()))
        .err()
        .unwrap();
    assert!(err.to_string().contains("not a ptsd-fs image"), "{err}");
    // A flipped bit in the root inode.
    let (dev, fs) = fresh(1024);
    let root = fs.root();
    fs.close().unwrap();
    drop(fs);
    let mut b = vec![0u8; 4096];
    dev.read(root, &mut b).unwrap();
    b[300] ^= 0x10;
    dev.write(root, &b).unwrap();
    let err = FileSystem::mount(Arc::new(DirectStore::new(dev.clone()).unwrap()))
        .err()
        .unwrap();
    // The damage and its cause (the source), each once.
    let msg = ptsd_blockdev::ErrorChain(&err).to_string();
    assert!(
        msg.contains("root directory") && msg.contains("checksum mismatch"),
        "{msg}"
    );
    // A damaged superblock.
    dev.read(0, &mut b).unwrap();
    b[20] ^= 1;
    dev.write(0, &b).unwrap();
    let err = FileSystem::mount(Arc::new(DirectStore::new(dev.clone()).unwrap()))
        .err()
        .unwrap();
    assert!(err.to_string().contains("superblock"), "{err}");
    // Random garbage everywhere: never a panic.
    let mut rng = rand::rngs::StdRng::seed_from_u64(99);
    for _ in 0..20 {
        let (dev, fs) = fresh(256);
        let f = fs.create(fs.root(), b"f", 0o644, ME).unwrap();
        fs.write(f.ino, 0, &[1u8; 9000]).unwrap();
        fs.close().unwrap();
        drop(fs);
        let blk = rng.gen_range(1..12);
        dev.read(blk, &mut b).unwrap();
        let i = rng.gen_range(0..4096);
        b[i] = b[i].wrapping_add(1 + rng.gen_range(0..250));
        dev.write(blk, &b).unwrap();
        if let Ok(fs) = FileSystem::mount(Arc::new(DirectStore::new(dev.clone()).unwrap())) {
            let _ = fs.readdir(fs.root(), 0, 100);
            if let Ok(a) = fs.lookup(fs.root(), b"f") {
                let _ = fs.read(a.ino, 0, 10_000);
            }
        }
        let store: Arc<dyn Store> = Arc::new(DirectStore::new(dev.clone()).unwrap());
        let _ = fsck::check(store, false);
    }
}

#[test]
fn fsck_repairs_link_counts_bitmaps_and_orphans() {
    let (dev, fs) = fresh(1024);
    let root = fs.root();
    let f = fs.create(root, b"f", 0o644, ME).unwrap();
    fs.write(f.ino, 0, &[5u8; 10_000]).unwrap();
    fs.release(f.ino).unwrap();
    // An open, unlinked file left behind by a "crash".
    let g = fs.create(root, b"g", 0o644, ME).unwrap();
    fs.write(g.ino, 0, &[6u8; 10_000]).unwrap();
    fs.unlink(root, b"g").unwrap();
    fs.fsync().unwrap();
    std::mem::forget(fs);
    // Break f's link count and leak a block in the bitmap.
    let mut b = vec![0u8; 4096];
    dev.read(f.ino, &mut b).unwrap();
    let mut d = ptsd_fs::format::DiskInode::decode(&b, f.ino).unwrap();
    d.nlink = 5;
    dev.write(f.ino, &d.encode()).unwrap();
    dev.read(1, &mut b).unwrap();
    b[100] = 0xff;
    ptsd_fs::format::seal_bitmap(&mut b);
    dev.write(1, &b).unwrap();
    let store: Arc<dyn Store> = Arc::new(DirectStore::new(dev.clone()).unwrap());
    let r = fsck::check(store.clone(), false).unwrap();
    let all = r
        .problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n");
    assert!(all.contains("link count 5 should be 1"), "{all}");
    assert!(all.contains("orphan inode"), "{all}");
    assert!(all.contains("marked used but owned by nothing"), "{all}");
    // The same findings, typed.
    use ptsd_fs::fsck::Finding;
    assert!(r.problems.iter().any(|p| matches!(
        p,
        Finding::LinkCount {
            have: 5,
            want: 1,
            ..
        }
    )));
    assert!(r
        .problems
        .iter()
        .any(|p| matches!(p, Finding::Orphan { .. })));
    assert!(r
        .problems
        .iter()
        .any(|p| matches!(p, Finding::BitmapLeaked { count, .. } if *count > 0)));
    let r = fsck::check(store.clone(), true).unwrap();
    assert!(r.repaired);
    fsck_clean(&dev);
    let fs = remount(&dev);
    let f = fs.lookup(fs.root(), b"f").unwrap();
    assert_eq!(f.nlink, 1);
    assert_eq!(fs.read(f.ino, 0, 20_000).unwrap(), vec![5u8; 10_000]);
}
