//! Tests of the file device under every option set: round trips, errors, discard and zeroes, batches against a model, threads, tmpfs, a block-device node.

use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::*;

const BS: usize = 4096;

fn pattern(tag: u64, blocks: usize) -> Vec<u8> {
    (0..BS * blocks)
        .map(|i| (tag as usize * 131 + i * 7 + i / BS) as u8)
        .collect()
}

/// A copy of `data` that starts one byte past an aligned address, so
/// O_DIRECT must bounce it.
fn misaligned(data: &[u8]) -> (Vec<u8>, usize) {
    let mut v = vec![0u8; data.len() + 1];
    let start = if v.as_ptr() as usize % 2 == 0 { 1 } else { 0 };
    v[start..start + data.len()].copy_from_slice(data);
    (v, start)
}

fn all_options() -> Vec<FileDeviceOptions> {
    let mut v = Vec::new();
    for direct in [true, false] {
        for uring in [true, false] {
            v.push(
                FileDeviceOptions::new()
                    .direct(direct)
                    .io_uring(uring)
                    .io_uring_buffered(uring),
            );
        }
    }
    // Buffered io_uring batches written uncached (RWF_DONTCACHE, or plain
    // writes where the kernel refuses it).
    v.push(
        FileDeviceOptions::new()
            .direct(false)
            .io_uring_buffered(true)
            .uncached_writes(Some(0)),
    );
    v
}

#[test]
fn round_trip_aligned_and_unaligned() {
    let dir = tempfile::tempdir().unwrap();
    for (n, opts) in all_options().into_iter().enumerate() {
        let path = dir.path().join(format!("d{n}.img"));
        let dev = opts.create(&path, 32).unwrap();
        let data = pattern(n as u64, 3);
        dev.write(4, &data).unwrap();
        let (v, start) = misaligned(&pattern(99, 2));
        dev.write(20, &v[start..start + 2 * BS]).unwrap();

        let mut back = vec![0u8; 3 * BS];
        dev.read(4, &mut back).unwrap();
        assert_eq!(back, data, "{dev:?}");
        let mut v = vec![0u8; 2 * BS + 1];
        let start = if v.as_ptr() as usize % 2 == 0 { 1 } else { 0 };
        dev.read(20, &mut v[start..start + 2 * BS]).unwrap();
        assert_eq!(&v[start..start + 2 * BS], &pattern(99, 2)[..], "{dev:?}");
        dev.flush().unwrap();
        drop(dev);

        let dev = opts.open(&path).unwrap();
        assert_eq!(dev.num_blocks(), 32);
        let mut back = vec![0u8; 3 * BS];
        dev.read(4, &mut back).unwrap();
        assert_eq!(back, data);
        dev.read(0, &mut back).unwrap();
        assert!(back.iter().all(|&b| b == 0));
    }
}

#[test]
fn bad_requests_and_files_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let dev = FileDevice::create(dir.path().join("a.img"), 4096, 8).unwrap();
    let buf = vec![0u8; BS];
    assert!(matches!(
        dev.write(8, &buf),
        Err(BlockError::OutOfRange { .. })
    ));
    assert!(matches!(
        dev.write(0, &buf[..100]),
        Err(BlockError::Misaligned { .. })
    ));
    assert!(matches!(
        dev.write(0, &[]),
        Err(BlockError::Misaligned { .. })
    ));
    assert!(matches!(
        dev.discard(7, 2),
        Err(BlockError::OutOfRange { .. })
    ));
    assert!(matches!(
        dev.write_zeroes(u64::MAX, 1),
        Err(BlockError::OutOfRange { .. })
    ));
    // A bad extent anywhere in a batch writes nothing at all.
    let good = pattern(1, 1);
    let err = dev.write_batch(&[(0, &good), (9, &good)]).unwrap_err();
    assert!(matches!(err, BlockError::OutOfRange { .. }));
    let mut back = vec![0u8; BS];
    dev.read(0, &mut back).unwrap();
    assert!(back.iter().all(|&b| b == 0));

    let odd = dir.path().join("odd.img");
    std::fs::write(&odd, vec![0u8; BS + 1]).unwrap();
    let err = FileDevice::open(&odd, 4096).unwrap_err();
    assert!(matches!(err, BlockError::InvalidConfig(ref m) if m.contains("whole number")));
    let empty = dir.path().join("empty.img");
    std::fs::write(&empty, b"").unwrap();
    assert!(matches!(
        FileDevice::open(&empty, 4096),
        Err(BlockError::InvalidConfig(_))
    ));
    assert!(matches!(
        FileDevice::open(dir.path(), 4096),
        Err(BlockError::Io(_))
    )); // EISDIR
    assert!(matches!(
        FileDevice::open(dir.path().join("none"), 4096),
        Err(BlockError::Io(_))
    ));
    assert!(matches!(
        FileDevice::open(&odd, 1000),
        Err(BlockError::InvalidConfig(_))
    ));
    assert!(matches!(
        FileDevice::create(dir.path().join("z"), 4096, 0),
        Err(BlockError::InvalidConfig(_))
    ));
    assert!(matches!(
        FileDevice::create(dir.path().join("huge"), 4096, u64::MAX / 2),
        Err(BlockError::InvalidConfig(_))
    ));
}

#[test]
fn discard_and_write_zeroes_read_as_zero() {
    let dir = tempfile::tempdir().unwrap();
    for (n, opts) in all_options().into_iter().enumerate() {
        let dev = opts.create(dir.path().join(format!("z{n}")), 16).unwrap();
        dev.write(0, &pattern(5, 16)).unwrap();
        dev.discard(2, 3).unwrap();
        dev.write_zeroes(10, 2).unwrap();
        dev.discard(0, 0).unwrap();
        let mut back = vec![0u8; 16 * BS];
        dev.read(0, &mut back).unwrap();
        let expect = pattern(5, 16);
        for b in 0..16 {
            let got = &back[b * BS..(b + 1) * BS];
            if (2..5).contains(&b) || (10..12).contains(&b) {
                assert!(got.iter().all(|&x| x == 0), "block {b} of {dev:?}");
            } else {
                assert_eq!(got, &expect[b * BS..(b + 1) * BS], "block {b}");
            }
        }
    }
}

#[test]
fn batches_match_a_model() {
    let seed = 0xb10c_u64;
    let dir = tempfile::tempdir().unwrap();
    for (n, opts) in all_options().into_iter().enumerate() {
        // Four ring entries force a 60-extent batch through many
        // submissions.
        let opts = opts.ring_entries(4);
        let dev = opts.create(dir.path().join(format!("b{n}")), 256).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(seed + n as u64);
        let mut model = vec![0u8; 256 * BS];
        for round in 0..3u64 {
            let mut owned = Vec::new();
            for i in 0..60u64 {
                let blocks = rng.gen_range(1..4usize);
                let block = rng.gen_range(0..=256 - blocks as u64);
                let data = pattern(round * 1000 + i, blocks);
                let off = block as usize * BS;
                model[off..off + data.len()].copy_from_slice(&data);
                // Every third extent sits at an odd address.
                let (v, start) = if i % 3 == 0 {
                    misaligned(&data)
                } else {
                    (data.clone(), 0)
                };
                owned.push((block, v, start, data.len()));
            }
            let batch: Vec<(u64, &[u8])> = owned
                .iter()
                .map(|(b, v, s, len)| (*b, &v[*s..*s + *len]))
                .collect();
            dev.write_batch(&batch).unwrap();
        }
        dev.flush().unwrap();
        // Read everything back as a batch of 64 single blocks, half of
        // them into odd addresses.
        let mut bufs: Vec<Vec<u8>> = (0..256).map(|_| vec![0u8; BS + 1]).collect();
        for chunk in 0..4 {
            let mut reads: Vec<(u64, &mut [u8])> = bufs[chunk * 64..(chunk + 1) * 64]
                .iter_mut()
                .enumerate()
                .map(|(i, v)| {
                    let s = i % 2;
                    ((chunk * 64 + i) as u64, &mut v[s..s + BS])
                })
                .collect();
            dev.read_batch(&mut reads).unwrap();
        }
        for (b, v) in bufs.iter().enumerate() {
            let s = b % 64 % 2;
            assert_eq!(
                &v[s..s + BS],
                &model[b * BS..(b + 1) * BS],
                "seed {seed}: block {b} of {dev:?}"
            );
        }
    }
}

#[test]
fn many_threads_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let dev = Arc::new(FileDevice::create(dir.path().join("t.img"), 4096, 256).unwrap());
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let dev = Arc::clone(&dev);
            std::thread::spawn(move || {
                let data: Vec<Vec<u8>> = (0..64).map(|i| pattern(t * 64 + i, 1)).collect();
                let batch: Vec<(u64, &[u8])> = data
                    .iter()
                    .enumerate()
                    .map(|(i, d)| (t * 64 + i as u64, &d[..]))
                    .collect();
                dev.write_batch(&batch[..32]).unwrap();
                for &(b, d) in &batch[32..] {
                    dev.write(b, d).unwrap();
                }
                dev.flush().unwrap();
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut buf = vec![0u8; BS];
    for b in 0..256u64 {
        dev.read(b, &mut buf).unwrap();
        assert_eq!(buf, pattern(b, 1), "block {b}");
    }
}

#[test]
fn tmpfs_is_buffered_and_works() {
    // /dev/shm is tmpfs on Linux: O_DIRECT is skipped there (it only
    // adds copies), and unaligned buffers must still work.
    let Ok(dir) = tempfile::tempdir_in("/dev/shm") else {
        return;
    };
    let dev = FileDevice::create(dir.path().join("s.img"), 4096, 8).unwrap();
    let (v, s) = misaligned(&pattern(3, 2));
    dev.write_batch(&[(0, &v[s..s + 2 * BS]), (5, &pattern(4, 1))])
        .unwrap();
    let mut back = vec![0u8; 2 * BS];
    dev.read(0, &mut back).unwrap();
    assert_eq!(back, pattern(3, 2), "{dev:?}");
    assert!(!dev.is_direct(), "tmpfs gains nothing from O_DIRECT");
}

#[test]
fn uncached_writes_read_back_and_stay_off_on_tmpfs() {
    let dir = tempfile::tempdir().unwrap();
    let opts = FileDeviceOptions::new()
        .direct(false)
        .io_uring_buffered(true)
        .uncached_writes(Some(2 * BS));
    let dev = opts.create(dir.path().join("u.img"), 16).unwrap();
    // A single-extent batch goes through the ring too when uncached; a
    // batch below the size stays cached.
    dev.write_batch(&[(3, &pattern(7, 2)[..])]).unwrap();
    dev.write_batch(&[(14, &pattern(6, 1)[..])]).unwrap();
    dev.write_batch(&[(0, &pattern(8, 1)[..]), (9, &pattern(9, 4)[..])])
        .unwrap();
    dev.flush().unwrap();
    for (block, tag, blocks) in [(3u64, 7u64, 2usize), (14, 6, 1), (0, 8, 1), (9, 9, 4)] {
        let mut back = vec![0u8; blocks * BS];
        dev.read(block, &mut back).unwrap();
        assert_eq!(back, pattern(tag, blocks), "block {block} of {dev:?}");
    }
    let Ok(shm) = tempfile::tempdir_in("/dev/shm") else {
        return;
    };
    let dev = opts.create(shm.path().join("u.img"), 4).unwrap();
    assert!(
        !dev.writes_uncached(),
        "a RAM file system has nothing to drop"
    );
}

#[test]
fn cache_window_applies_where_it_can_and_loses_nothing() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let opts = FileDeviceOptions::new()
        .direct(false)
        .io_uring_buffered(true)
        .cache_window(Some(4 * BS as u64));
    let dev = opts.create(dir.path().join("w.img"), 64).unwrap();
    assert_eq!(
        dev.cache_window_active(),
        !file_on_ram_fs(&dev.file),
        "buffered, on a disk file system: {dev:?}"
    );
    // Six times the window, in batches of one to three blocks: ranges
    // leave the window (written back, then dropped) while later ones land.
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let mut model = vec![None; 64];
    for tag in 0..16u64 {
        let blocks = rng.gen_range(1..=3usize);
        let block = rng.gen_range(0..=64 - blocks) as u64;
        dev.write_batch(&[(block, &pattern(tag, blocks)[..])])
            .unwrap();
        for b in 0..blocks {
            model[block as usize + b] = Some((tag, b));
        }
    }
    for (block, want) in model.iter().enumerate() {
        let Some((tag, nth)) = want else { continue };
        let mut back = vec![0u8; BS];
        dev.read(block as u64, &mut back).unwrap();
        let whole = pattern(*tag, nth + 1);
        assert_eq!(back, whole[nth * BS..], "block {block} of {dev:?}");
    }
    // O_DIRECT has no page cache to bound; nor has a RAM file system.
    let direct = FileDeviceOptions::new()
        .direct(true)
        .cache_window(Some(4 * BS as u64))
        .create(dir.path().join("d.img"), 4)
        .unwrap();
    assert!(!direct.is_direct() || !direct.cache_window_active());
    if let Ok(shm) = tempfile::tempdir_in("/dev/shm") {
        let dev = opts.create(shm.path().join("w.img"), 4).unwrap();
        assert!(!dev.cache_window_active(), "tmpfs: the cache is the file");
    }
}

/// Runs on a real block device only when one is named (it is
/// overwritten!): `PTSD_TEST_BLOCKDEV=/dev/loop0 cargo test`.
#[test]
fn block_device_when_given() {
    let Ok(path) = std::env::var("PTSD_TEST_BLOCKDEV") else {
        return;
    };
    let dev = FileDevice::open(&path, 4096).unwrap();
    eprintln!("{dev:?}");
    assert!(dev.is_block_device());
    assert!(dev.num_blocks() >= 16);
    dev.write(0, &pattern(8, 16)).unwrap();
    dev.discard(1, 2).unwrap();
    dev.write_zeroes(5, 1).unwrap();
    dev.flush().unwrap();
    let mut back = vec![0u8; 16 * BS];
    dev.read(0, &mut back).unwrap();
    assert!(back[BS..3 * BS].iter().all(|&b| b == 0));
    assert!(back[5 * BS..6 * BS].iter().all(|&b| b == 0));
    assert_eq!(&back[..BS], &pattern(8, 16)[..BS]);
    assert!(FileDevice::create(&path, 4096, 1).is_err());
}

/// `preallocate`: a created file's blocks are allocated at once where the
/// file system allocates (not on tmpfs, where it would take RAM); without
/// it the file is sparse. Prefetch hints never fail, in or out of range.
#[test]
fn preallocated_files_are_allocated_and_prefetch_is_a_harmless_hint() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    const BLOCKS: u64 = 1024;
    let bytes = BLOCKS * BS as u64;
    let sparse = FileDeviceOptions::new()
        .direct(false)
        .create(dir.path().join("sparse"), BLOCKS)
        .unwrap();
    let full = FileDeviceOptions::new()
        .direct(false)
        .preallocate(true)
        .create(dir.path().join("full"), BLOCKS)
        .unwrap();
    let allocated = |name: &str| std::fs::metadata(dir.path().join(name)).unwrap().blocks() * 512;
    assert!(
        allocated("sparse") < bytes,
        "a created file is sparse by default"
    );
    let file = File::open(dir.path().join("full")).unwrap();
    if crate::file_on_ram_fs(&file) {
        assert_eq!(allocated("full"), 0, "nothing allocated ahead on a RAM fs");
    } else {
        assert!(
            allocated("full") >= bytes,
            "{} of {bytes} bytes allocated",
            allocated("full")
        );
    }
    for dev in [&sparse, &full] {
        dev.write(7, &pattern(7, 1)).unwrap();
        dev.prefetch(0, BLOCKS);
        dev.prefetch(BLOCKS - 1, 2);
        dev.prefetch(u64::MAX, 1);
        let mut buf = vec![0u8; BS];
        dev.read(7, &mut buf).unwrap();
        assert_eq!(buf, pattern(7, 1));
    }
}

/// Which of the file's first `blocks` blocks are in the page cache.
fn resident(file: &File, blocks: usize) -> Vec<bool> {
    let pages = crate::cached_pages(file, blocks * BS).unwrap();
    (0..blocks).map(|b| pages[b * BS / 4096]).collect()
}

/// `await_prefetch` returns once a prefetched range is in the page cache
/// (its last block at least), and is a harmless hint out of range.
#[test]
fn awaited_prefetch_leaves_the_range_cached() {
    use std::os::fd::AsRawFd;
    const BLOCKS: u64 = 64;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dev");
    let dev = FileDeviceOptions::new()
        .direct(false)
        .create(&path, BLOCKS)
        .unwrap();
    dev.write(0, &pattern(1, BLOCKS as usize)).unwrap();
    dev.flush().unwrap();
    let file = File::open(&path).unwrap();
    // SAFETY: a plain syscall on a descriptor we own.
    unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if resident(&file, BLOCKS as usize).iter().any(|&r| r) {
        println!("SKIP: this file system keeps the pages (a RAM file system?)");
        return;
    }
    dev.prefetch(8, 16);
    dev.await_prefetch(8, 16);
    assert!(
        resident(&file, BLOCKS as usize)[23],
        "the range's last block is cached"
    );
    dev.await_prefetch(BLOCKS - 1, 2);
    dev.await_prefetch(u64::MAX, 1);
    dev.await_prefetch(0, 0);
    let mut buf = vec![0u8; 16 * BS];
    dev.read(8, &mut buf).unwrap();
    assert_eq!(buf, pattern(1, BLOCKS as usize)[8 * BS..24 * BS]);
}
