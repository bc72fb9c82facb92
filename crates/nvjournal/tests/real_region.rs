//! The journal on a real mapped region (`PmemRegion`), not the simulated
//! one: the mode it got, commit/stage correctness with several threads,
//! and recovery after a `kill -9` of the process holding the mapping.
//!
//! By default the region files go to a temporary directory (whatever mode
//! that gives). The VM test (`tests/vm/dax.sh`) runs this binary on an
//! emulated NVDIMM with `PTSD_REGION_DIR=/mnt/pmem` (ext4 `-o dax`) and
//! `PTSD_EXPECT_REGION_MODE=dax`, which makes the first test fail unless
//! the region really is DAX with `MAP_SYNC` (no silent fallback).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ptsd_blockdev::{BlockDevice, FileDeviceOptions, MemDevice};
use ptsd_nvjournal::{Journal, JournalConfig, Persist, PmemRegion, RegionMode};

const BS: usize = 4096;
const REGION: u64 = 4 << 20;

/// Where the region files go, and the directory guard keeping a temporary
/// one alive.
fn region_dir() -> (PathBuf, Option<tempfile::TempDir>) {
    match std::env::var_os("PTSD_REGION_DIR") {
        Some(d) => {
            let d = PathBuf::from(d).join(format!("real-region-{}", std::process::id()));
            std::fs::create_dir_all(&d).unwrap();
            (d, None)
        }
        None => {
            let t = tempfile::tempdir().unwrap();
            (t.path().to_path_buf(), Some(t))
        }
    }
}

fn expected_mode() -> Option<RegionMode> {
    let m = std::env::var("PTSD_EXPECT_REGION_MODE").ok()?;
    Some(match m.as_str() {
        "dax" => RegionMode::Dax,
        "msync" => RegionMode::Msync,
        "tmpfs" => RegionMode::Tmpfs,
        other => panic!("PTSD_EXPECT_REGION_MODE={other}: not dax, msync or tmpfs"),
    })
}

/// The region files are checked as the mode requires: under DAX the
/// mapping is `MAP_SYNC` (VmFlags `sf` in smaps) and the file DAX.
fn check_mode(region: &PmemRegion, path: &Path) {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap_or_default();
    let name = path.to_str().unwrap();
    let sync_flag = smaps
        .split_inclusive('\n')
        .skip_while(|l| !l.trim_end().ends_with(name))
        .find(|l| l.starts_with("VmFlags:"))
        .is_some_and(|l| l.split_whitespace().any(|f| f == "sf"));
    println!(
        "REGION: mode={} map_sync_vmflag_sf={} statx_dax={} flush={} path={}",
        region.mode(),
        sync_flag,
        region.dax_file(),
        region.flush_instr(),
        path.display()
    );
    assert_eq!(
        sync_flag,
        region.mode() == RegionMode::Dax,
        "MAP_SYNC (VmFlags sf) iff DAX mode"
    );
    if let Some(want) = expected_mode() {
        assert_eq!(region.mode(), want, "region mode (no silent fallback)");
        if want == RegionMode::Dax {
            assert!(region.dax_file(), "statx does not report the file as DAX");
        }
    }
}

#[test]
fn region_mode_is_the_one_expected() {
    let (dir, _guard) = region_dir();
    let path = dir.join("mode");
    let region = PmemRegion::open_file(&path, REGION).unwrap();
    check_mode(&region, &path);
    // A store, write-back and fence through the real instructions.
    region.write(4096, &[7u8; 64]);
    region.persist(4096, 64);
    let mut b = [0u8; 64];
    region.read(4096, &mut b);
    assert_eq!(b, [7u8; 64]);
    drop(region);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The region's blocks are claimed when it is created (no holes): a store
/// into a hole the file system cannot back is a SIGBUS, so a full disk must
/// show as an error at open instead. Where the file system allocates
/// (not every one does, e.g. some network ones), every block is allocated.
#[test]
fn a_new_region_file_has_no_holes() {
    use std::os::unix::fs::MetadataExt;
    let (dir, _guard) = region_dir();
    let path = dir.join("reserved");
    let region = PmemRegion::open_file(&path, REGION).unwrap();
    let m = std::fs::metadata(&path).unwrap();
    assert_eq!(m.len(), REGION);
    assert!(
        m.blocks() * 512 >= REGION,
        "{} of {REGION} bytes allocated",
        m.blocks() * 512
    );
    drop(region);
    let _ = std::fs::remove_file(&path);
}

/// The region at `path`, or None (saying SKIP) where it is not in msync
/// mode (a DAX or RAM file system).
fn msync_region(path: &Path) -> Option<PmemRegion> {
    let region = PmemRegion::open_file(path, REGION).unwrap();
    if region.mode() != RegionMode::Msync {
        println!("SKIP: region mode {} (not msync)", region.mode());
        return None;
    }
    Some(region)
}

/// In msync mode the file is written zeroes at creation, not fallocated:
/// a sync's write into an unwritten extent would convert it, a metadata
/// change that `fdatasync` then commits through the file system's journal.
#[test]
fn an_msync_region_file_has_no_unwritten_extents() {
    let (dir, _guard) = region_dir();
    let path = dir.join("written");
    let Some(region) = msync_region(&path) else {
        return;
    };
    let Some(extents) = extent_flags(&path) else {
        println!("SKIP: no FIEMAP here");
        return;
    };
    const FIEMAP_EXTENT_UNWRITTEN: u32 = 0x800;
    assert!(!extents.is_empty());
    let unwritten = extents
        .iter()
        .filter(|&&f| f & FIEMAP_EXTENT_UNWRITTEN != 0)
        .count();
    assert_eq!(
        unwritten,
        0,
        "{unwritten} of {} extents unwritten",
        extents.len()
    );
    drop(region);
    let _ = std::fs::remove_file(&path);
}

/// The flags of the file's extents (`FS_IOC_FIEMAP`, synced first), or
/// None where the file system does not answer it.
fn extent_flags(path: &Path) -> Option<Vec<u32>> {
    use std::os::fd::AsRawFd;
    const FS_IOC_FIEMAP: libc::c_ulong = 0xC020_660B;
    const FIEMAP_FLAG_SYNC: u32 = 1;
    const MAX: usize = 256;
    // struct fiemap (32 bytes) then MAX struct fiemap_extent (56 bytes).
    let mut buf = vec![0u64; (32 + 56 * MAX) / 8];
    buf[1] = u64::MAX; // fm_length
    buf[2] = u64::from(FIEMAP_FLAG_SYNC); // fm_flags; fm_mapped_extents = 0
    buf[3] = MAX as u64; // fm_extent_count (low half of the fourth word)
    let file = std::fs::File::open(path).unwrap();
    // SAFETY: the buffer holds a struct fiemap with room for MAX extents,
    // as fm_extent_count tells the kernel.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), FS_IOC_FIEMAP, buf.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    let mapped = (buf[2] >> 32) as usize;
    Some(
        (0..mapped.min(MAX))
            .map(|i| {
                // fe_flags: bytes 40..44 of the i-th 56-byte extent.
                buf[(32 + 56 * i + 40) / 8] as u32
            })
            .collect(),
    )
}

/// How many of the file's first `pages` pages are in the page cache.
fn cached_pages(path: &Path, pages: usize) -> usize {
    let file = std::fs::File::open(path).unwrap();
    let cached = ptsd_blockdev::cached_pages(&file, pages * BS).unwrap();
    cached.iter().filter(|&&c| c).count()
}

/// In msync mode a sync writes the dirty pages with direct I/O where the
/// file system allows it: they go from the journal's memory to the disk,
/// and the page cache (which the kernel would copy into and write back
/// again) is left out.
#[test]
fn an_msync_region_syncs_bypass_the_page_cache() {
    let (dir, _guard) = region_dir();
    let path = dir.join("direct");
    let Some(region) = msync_region(&path) else {
        return;
    };
    if !region.writes_direct() {
        println!("SKIP: the file system refuses O_DIRECT here");
        return;
    }
    const PAGES: usize = 16;
    for page in 0..PAGES {
        region.write(page * BS + 8, &(page as u64).to_le_bytes());
    }
    region.sync().unwrap();
    let cached = cached_pages(&path, PAGES);
    assert_eq!(
        cached, 0,
        "{cached} of {PAGES} synced pages in the page cache"
    );
    drop(region);
    let mut word = [0u8; 8];
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::open(&path).unwrap();
    for page in 0..PAGES {
        file.read_exact_at(&mut word, (page * BS + 8) as u64)
            .unwrap();
        assert_eq!(u64::from_le_bytes(word), page as u64, "page {page}");
    }
    let _ = std::fs::remove_file(&path);
}

/// Bytes this process has dirtied in the page cache (`write_bytes` of
/// `/proc/thread-self/io`: the kernel counts a whole folio when a store dirties it).
fn page_cache_bytes_dirtied() -> Option<u64> {
    let io = std::fs::read_to_string("/proc/thread-self/io").ok()?;
    io.lines()
        .find_map(|l| l.strip_prefix("write_bytes: "))
        .and_then(|v| v.trim().parse().ok())
}

/// In msync mode a commit writes back what it dirtied, page by page: a
/// file system with large page-cache folios (ext4 on Linux 6.16+) would
/// otherwise write up to 2 MiB back for each 4 KiB slot stored.
#[test]
fn an_msync_region_writes_back_single_pages() {
    use std::os::unix::fs::FileExt;
    let (dir, _guard) = region_dir();
    let path = dir.join("small-pages");
    // The file's page cache as ordinary I/O leaves it: written and read
    // with readahead, so in large folios where the file system has them.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    file.write_all_at(&vec![7u8; REGION as usize], 0).unwrap();
    file.sync_all().unwrap();
    let mut buf = vec![0u8; REGION as usize];
    file.read_exact_at(&mut buf, 0).unwrap();
    drop(file);
    let Some(region) = msync_region(&path) else {
        return;
    };
    let Some(before) = page_cache_bytes_dirtied() else {
        println!("SKIP: no /proc/thread-self/io");
        return;
    };
    const STORES: u64 = 32;
    for i in 0..STORES {
        region.write((i * 96 * 1024) as usize, &i.to_le_bytes());
        region.sync().unwrap();
    }
    let dirtied = page_cache_bytes_dirtied().unwrap() - before;
    println!("{STORES} one-word stores, each synced: {dirtied} bytes dirtied");
    assert!(
        dirtied <= STORES * BS as u64,
        "{dirtied} bytes dirtied for {STORES} stores of 8 bytes (more than a page each)"
    );
    let mut word = [0u8; 8];
    region.read(31 * 96 * 1024, &mut word);
    assert_eq!(u64::from_le_bytes(word), 31);
    drop(region);
    let _ = std::fs::remove_file(&path);
}

/// Msync mode: when `sync` returns, the file holds every store made before
/// the call, also while other threads store and sync at the same time (a
/// sync may return early when one begun after it was called has finished).
#[test]
fn a_sync_writes_every_earlier_store_to_the_file_under_concurrent_syncs() {
    use std::os::unix::fs::FileExt;
    let (dir, _guard) = region_dir();
    let path = dir.join("concurrent-syncs");
    let Some(region) = msync_region(&path) else {
        return;
    };
    let region = Arc::new(region);
    let file = std::fs::File::open(&path).unwrap();
    const THREADS: u64 = 4;
    const ROUNDS: u64 = 200;
    let pages = REGION / BS as u64;
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (region, file) = (region.clone(), file.try_clone().unwrap());
            std::thread::spawn(move || {
                for round in 1..=ROUNDS {
                    // Two pages of this thread's own, one of them shared
                    // with the previous round's neighbour (same page,
                    // other word), so syncs race over the same pages.
                    let page = (t * 7 + round * 13) % pages;
                    let word = (page * BS as u64 + t * 8) as usize;
                    let v = (t << 32) | round;
                    region.write(word, &v.to_le_bytes());
                    region.sync().unwrap();
                    let mut got = [0u8; 8];
                    file.read_exact_at(&mut got, word as u64).unwrap();
                    assert_eq!(
                        u64::from_le_bytes(got),
                        v,
                        "thread {t} round {round}: the synced store is not in the file"
                    );
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    drop(region);
    let _ = std::fs::remove_file(&path);
}

fn value(tag: u64) -> Vec<u8> {
    let mut b = vec![0u8; BS];
    for (i, c) in b.chunks_exact_mut(8).enumerate() {
        c.copy_from_slice(&(tag ^ ((i as u64) << 48)).to_le_bytes());
    }
    b
}

#[test]
fn commits_and_reads_with_four_threads_on_a_real_region() {
    let (dir, _guard) = region_dir();
    let path = dir.join("concurrent");
    let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(BS as u32, 256).unwrap());
    let region = PmemRegion::open_file(&path, REGION).unwrap();
    check_mode(&region, &path);
    let cfg = JournalConfig {
        checkpoint_interval: Some(Duration::from_millis(5)),
        ..JournalConfig::partitioned(4)
    };
    let j = Journal::create(region, dev.clone(), cfg.clone()).unwrap();
    // Thread t owns blocks t, t+4, ...: the last tag of each block is known.
    let last: Vec<Vec<(u64, u64)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4u64)
            .map(|t| {
                let j = &j;
                s.spawn(move || {
                    let mut wrote = Vec::new();
                    for i in 0..150u64 {
                        let mut tx = j.begin();
                        let blocks = [t + 4 * (i % 16), t + 4 * ((i * 7 + 3) % 64)];
                        for &b in &blocks {
                            tx.write(b, &value((t << 32) | (i << 8) | b)).unwrap();
                        }
                        let mut buf = vec![0u8; BS];
                        tx.read(blocks[0], &mut buf).unwrap();
                        assert_eq!(buf, value((t << 32) | (i << 8) | blocks[0]));
                        tx.finish().unwrap();
                        if i % 2 == 0 {
                            j.commit().unwrap();
                        }
                        for &b in &blocks {
                            wrote.push((b, (t << 32) | (i << 8) | b));
                        }
                    }
                    wrote
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    j.commit().unwrap();
    let mut expect = std::collections::HashMap::new();
    for (b, tag) in last.into_iter().flatten() {
        expect.insert(b, tag);
    }
    let mut buf = vec![0u8; BS];
    for (&b, &tag) in &expect {
        j.read(b, &mut buf).unwrap();
        assert!(buf == value(tag), "block {b} before reopen");
    }
    // Reopen without a clean close: recovery replays what was committed.
    drop(j);
    let region = PmemRegion::open_file(&path, REGION).unwrap();
    let (j, report) = Journal::open(region, dev.clone(), cfg).unwrap();
    assert!(!report.clean);
    for (&b, &tag) in &expect {
        j.read(b, &mut buf).unwrap();
        assert!(buf == value(tag), "block {b} after recovery");
    }
    j.close().unwrap();
    for (&b, &tag) in &expect {
        dev.read(b, &mut buf).unwrap();
        assert!(buf == value(tag), "block {b} on the device after close");
    }
    drop(j);
    let _ = std::fs::remove_dir_all(&dir);
}

const KILL_BLOCKS: u64 = 64;

fn kill_cfg() -> JournalConfig {
    JournalConfig {
        // Checkpoints run while the writer is killed, too.
        checkpoint_interval: Some(Duration::from_millis(3)),
        ..JournalConfig::partitioned(4)
    }
}

/// The blocks transaction `i` writes.
fn kill_blocks(i: u64) -> [u64; 3] {
    [
        i % KILL_BLOCKS,
        (i * 13 + 5) % KILL_BLOCKS,
        (i * 29 + 11) % KILL_BLOCKS,
    ]
}

/// The child of the kill test: one writer, a commit after every
/// transaction, "committed N" printed once commit N has returned. Runs
/// until killed. Ignored unless the parent starts it.
#[test]
#[ignore = "run by recovery_after_kill_9_keeps_every_acknowledged_commit"]
fn kill_9_child() {
    let Some(dir) = std::env::var_os("PTSD_KILL9_DIR") else {
        return;
    };
    let dir = PathBuf::from(dir);
    let dev = FileDeviceOptions::new()
        .direct(false)
        .io_uring(false)
        .create(dir.join("home"), KILL_BLOCKS)
        .unwrap();
    let region = PmemRegion::open_file(dir.join("journal"), REGION).unwrap();
    let j = Journal::create(region, Arc::new(dev), kill_cfg()).unwrap();
    for i in 1.. {
        let mut tx = j.begin();
        for b in kill_blocks(i) {
            tx.write(b, &value((i << 8) | b)).unwrap();
        }
        tx.finish().unwrap();
        j.commit().unwrap();
        println!("committed {i}");
    }
}

#[test]
fn recovery_after_kill_9_keeps_every_acknowledged_commit() {
    let (dir, _guard) = region_dir();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "kill_9_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("PTSD_KILL9_DIR", &dir)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut acked = 0u64;
    let start = Instant::now();
    let mut line = String::new();
    // Kill it once it has acknowledged a few hundred commits (or after a
    // while: the VM is slow).
    while acked < 300 && start.elapsed() < Duration::from_secs(20) {
        line.clear();
        if out.read_line(&mut line).unwrap() == 0 {
            panic!("the child exited before it was killed");
        }
        if let Some(n) = line.trim().strip_prefix("committed ") {
            acked = n.parse().unwrap();
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    // Lines written before the kill count as acknowledged too.
    for l in out.lines() {
        if let Some(n) = l.unwrap().trim().strip_prefix("committed ") {
            acked = n.parse().unwrap();
        }
    }
    assert!(acked > 0, "no commit acknowledged before the kill");
    let dev = Arc::new(
        FileDeviceOptions::new()
            .direct(false)
            .io_uring(false)
            .open(dir.join("home"))
            .unwrap(),
    );
    let region = PmemRegion::open_file(dir.join("journal"), REGION).unwrap();
    check_mode(&region, &dir.join("journal"));
    let (j, report) = Journal::open(region, dev, kill_cfg()).unwrap();
    // Commit `acked + 1` may have returned unprinted; none later began.
    let state = |upto: u64| {
        let mut newest = vec![None; KILL_BLOCKS as usize];
        for i in 1..=upto {
            for b in kill_blocks(i) {
                newest[b as usize] = Some((i << 8) | b);
            }
        }
        newest
    };
    let mut buf = vec![0u8; BS];
    let mut found = Vec::new();
    for b in 0..KILL_BLOCKS {
        j.read(b, &mut buf).unwrap();
        found.push(buf.clone());
    }
    let matches = |upto: u64| {
        state(upto)
            .iter()
            .zip(&found)
            .all(|(want, got)| match want {
                Some(tag) => *got == value(*tag),
                None => got.iter().all(|&x| x == 0),
            })
    };
    println!(
        "kill -9 after {acked} acknowledged commits: recovery replayed {} blocks ({:?})",
        report.replayed_blocks, report
    );
    assert!(
        matches(acked) || matches(acked + 1),
        "after kill -9 the journal holds neither the state of commit {acked} nor of {}",
        acked + 1
    );
    j.close().unwrap();
    drop(j);
    let _ = std::fs::remove_dir_all(&dir);
}
