//! Bulk data: sequential write + fsync, cold sequential read, and cold
//! 4 KiB random read, each thread on a large file of its own.
//!
//! Contents are checked on every read: each 4 KiB block starts with a word
//! naming its file and offset and is otherwise a fixed per-file pattern, so
//! a misplaced, stale, zeroed or torn block is caught without hashing every
//! byte in the timed loop (which would cap the rate at the hash's speed).
//!
//! "Cold" means the page cache holds none of it: after the files are
//! written and fsync'd, each is `posix_fadvise(DONTNEED)`-ed (drops the
//! FUSE or ext4 file's cached pages) and, when allowed (root),
//! `/proc/sys/vm/drop_caches` is written (drops the image files' pages under
//! a loop device or a FUSE daemon too). The result says which was done.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Barrier;
use std::time::Instant;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use super::error::io_err;
use super::{
    create_fresh_dir, new_histogram, pattern, record, Bound, FsBenchError, LatencySummary, Phase,
    Result,
};

/// Block size of the per-block check word and of the random reads.
pub const BLOCK: usize = 4096;

/// Parameters of [`run_bulk`].
#[derive(Clone, Debug, Serialize)]
pub struct BulkConfig {
    /// Worker threads; each writes and reads a file of its own.
    pub threads: usize,
    /// Bytes of each thread's file (a multiple of [`BLOCK`]).
    pub file_size: u64,
    /// Bytes per `write`/`read` call of the sequential parts.
    pub io_size: usize,
    /// How long the random-read part runs (ops are 4 KiB reads per thread).
    pub rand_bound: Bound,
    /// Seeds contents and random offsets.
    pub seed: u64,
    /// Write `/proc/sys/vm/drop_caches` before the read parts (root only;
    /// it empties every cache of the machine, so tests leave it off).
    pub drop_caches: bool,
    /// Remove the files afterwards (not timed).
    pub cleanup: bool,
}

impl Default for BulkConfig {
    fn default() -> Self {
        BulkConfig {
            threads: 2,
            file_size: 256 << 20,
            io_size: 1 << 20,
            rand_bound: Bound::Duration(std::time::Duration::from_secs(10)),
            seed: 1,
            drop_caches: true,
            cleanup: true,
        }
    }
}

/// The three timed parts, in the order run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BulkPart {
    /// Sequential writes of `io_size`, then `fsync`, per thread.
    SeqWrite,
    /// Sequential reads of `io_size` from a cold cache.
    SeqRead,
    /// 4 KiB reads at random block offsets from a cold cache.
    RandRead,
}

/// How the cache was emptied before the read parts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Cold {
    /// `posix_fadvise(DONTNEED)` on the files and `drop_caches` = 3.
    DropCaches,
    /// Only `posix_fadvise(DONTNEED)` (not root, or not asked): the pages of images
    /// under loop devices or FUSE daemons may still be cached.
    FadviseOnly,
}

/// What one [`run_bulk`] measured.
#[derive(Clone, Debug, Serialize)]
pub struct BulkResult {
    /// Worker threads.
    pub threads: usize,
    /// Bytes written (and read back) over all threads.
    pub bytes: u64,
    /// Writes + fsync, all threads, seconds.
    pub write_s: f64,
    /// `bytes / write_s`, MB/s (10^6).
    pub write_mb_per_sec: f64,
    /// Cold sequential read, all threads, seconds.
    pub read_s: f64,
    /// `bytes / read_s`, MB/s.
    pub read_mb_per_sec: f64,
    /// Random 4 KiB reads done.
    pub rand_ops: u64,
    /// Random reads per second.
    pub rand_iops: f64,
    /// Latency of one random read.
    pub rand_read: LatencySummary,
    /// How the cache was emptied.
    pub cold: Cold,
}

fn file_of(root: &Path, t: usize) -> PathBuf {
    root.join(format!("bulk{t:02}"))
}

fn stamp_of(seed: u64, t: usize) -> u64 {
    seed.rotate_left(17) ^ ((t as u64) << 40) ^ 0xb0_1c
}

/// The check word of the block at `offset` of file `stamp`.
fn check_word(stamp: u64, offset: u64) -> [u8; 8] {
    (stamp ^ offset.rotate_left(29) ^ 0x5eed_0000_0000_0001).to_le_bytes()
}

/// Fills `buf` (a whole number of blocks) with the file's contents at
/// `offset`, given the file's `io_size` base pattern.
fn fill_blocks(stamp: u64, offset: u64, base: &[u8], buf: &mut [u8]) {
    for (i, b) in buf.chunks_mut(BLOCK).enumerate() {
        let o = offset + (i * BLOCK) as u64;
        b.copy_from_slice(&base[i * BLOCK..(i + 1) * BLOCK]);
        b[..8].copy_from_slice(&check_word(stamp, o));
    }
}

/// Checks `buf` read at `offset` of file `stamp`: each block's check word
/// and the rest of its pattern. Returns the first wrong byte's offset.
fn check_blocks(stamp: u64, offset: u64, base: &[u8], buf: &[u8]) -> Option<u64> {
    for (i, b) in buf.chunks(BLOCK).enumerate() {
        let o = offset + (i * BLOCK) as u64;
        if b[..8] != check_word(stamp, o) {
            return Some(o);
        }
        let off_in_base = (o as usize) % base.len();
        let want = &base[off_in_base..off_in_base + b.len()];
        if let Some(p) = b[8..].iter().zip(&want[8..]).position(|(x, y)| x != y) {
            return Some(o + 8 + p as u64);
        }
    }
    None
}

fn verify_err(path: &Path, at: u64) -> FsBenchError {
    FsBenchError::Verify {
        path: path.to_path_buf(),
        detail: format!("byte {at} differs from what was written"),
    }
}

/// Empties the cache of `files` (see the module doc).
fn make_cold(files: &[PathBuf], drop_caches: bool) -> Result<Cold> {
    for p in files {
        let f = File::open(p).map_err(io_err("open", p))?;
        // SAFETY: `f` is open for the call; fadvise reads no memory of ours.
        let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        if rc != 0 {
            return Err(io_err("posix_fadvise", p)(
                std::io::Error::from_raw_os_error(rc),
            ));
        }
    }
    // SAFETY: sync(2) has no preconditions.
    unsafe { libc::sync() };
    if drop_caches && std::fs::write("/proc/sys/vm/drop_caches", b"3\n").is_ok() {
        Ok(Cold::DropCaches)
    } else {
        Ok(Cold::FadviseOnly)
    }
}

/// Runs the bulk workload in a new directory `dir/bulk`.
pub fn run_bulk(dir: &Path, cfg: &BulkConfig) -> Result<BulkResult> {
    run_bulk_observed(dir, cfg, &mut |_, _| {})
}

/// Runs `work(t)` on `threads` threads released together after
/// `observe(part, Start)`; returns the wall time until the last finished
/// and the threads' results, then calls `observe(part, End)`.
fn timed<T: Send>(
    threads: usize,
    part: BulkPart,
    observe: &mut dyn FnMut(BulkPart, Phase),
    work: impl Fn(usize) -> Result<T> + Sync,
) -> Result<(f64, Vec<T>)> {
    let go = Barrier::new(threads + 1);
    let (start, outs) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (go, work) = (&go, &work);
                s.spawn(move || {
                    go.wait();
                    let r = work(t);
                    (r, Instant::now())
                })
            })
            .collect();
        observe(part, Phase::Start);
        let start = Instant::now();
        go.wait();
        let outs: Vec<_> = handles
            .into_iter()
            .map(|h| h.join().map_err(|_| FsBenchError::ThreadPanicked))
            .collect();
        (start, outs)
    });
    let mut end = start;
    let mut results = Vec::new();
    for o in outs {
        let (r, t) = o?;
        results.push(r?);
        end = end.max(t);
    }
    observe(part, Phase::End);
    Ok((end.duration_since(start).as_secs_f64().max(1e-9), results))
}

/// [`run_bulk`], calling `observe(part, Start)` right before each timed
/// part (files set up, cache emptied, workers waiting) and
/// `observe(part, End)` right after it.
pub fn run_bulk_observed(
    dir: &Path,
    cfg: &BulkConfig,
    observe: &mut dyn FnMut(BulkPart, Phase),
) -> Result<BulkResult> {
    if cfg.threads == 0
        || cfg.file_size == 0
        || cfg.file_size % BLOCK as u64 != 0
        || cfg.io_size == 0
        || cfg.io_size % BLOCK != 0
        || cfg.file_size % cfg.io_size as u64 != 0
    {
        return Err(FsBenchError::Config(format!(
            "bulk needs threads, and file size a multiple of the I/O size, a multiple of {BLOCK}: {cfg:?}"
        )));
    }
    cfg.rand_bound.validate()?;
    let root = dir.join("bulk");
    create_fresh_dir(&root)?;
    let files: Vec<PathBuf> = (0..cfg.threads).map(|t| file_of(&root, t)).collect();
    let bases: Vec<Vec<u8>> = (0..cfg.threads)
        .map(|t| {
            let mut b = vec![0u8; cfg.io_size];
            pattern::fill(stamp_of(cfg.seed, t), 0, &mut b);
            b
        })
        .collect();
    for p in &files {
        File::create(p).map_err(io_err("create", p))?;
    }

    let (write_s, _) = timed(cfg.threads, BulkPart::SeqWrite, observe, |t| {
        let p = &files[t];
        let f = OpenOptions::new()
            .write(true)
            .open(p)
            .map_err(io_err("open", p))?;
        let stamp = stamp_of(cfg.seed, t);
        let mut buf = vec![0u8; cfg.io_size];
        let mut off = 0u64;
        while off < cfg.file_size {
            fill_blocks(stamp, off, &bases[t], &mut buf);
            f.write_all_at(&buf, off).map_err(io_err("write", p))?;
            off += cfg.io_size as u64;
        }
        f.sync_all().map_err(io_err("fsync", p))
    })?;

    let cold = make_cold(&files, cfg.drop_caches)?;
    let (read_s, _) = timed(cfg.threads, BulkPart::SeqRead, observe, |t| {
        let p = &files[t];
        let f = File::open(p).map_err(io_err("open", p))?;
        let stamp = stamp_of(cfg.seed, t);
        let mut buf = vec![0u8; cfg.io_size];
        let mut off = 0u64;
        while off < cfg.file_size {
            f.read_exact_at(&mut buf, off).map_err(io_err("read", p))?;
            if let Some(at) = check_blocks(stamp, off, &bases[t], &buf) {
                return Err(verify_err(p, at));
            }
            off += cfg.io_size as u64;
        }
        // The file ends where it was written to.
        let mut probe = [0u8; 1];
        match f.read_at(&mut probe, cfg.file_size) {
            Ok(0) => Ok(()),
            Ok(_) => Err(FsBenchError::Verify {
                path: p.clone(),
                detail: format!("longer than the {} bytes written", cfg.file_size),
            }),
            Err(e) => Err(io_err("read", p)(e)),
        }
    })?;

    make_cold(&files, cfg.drop_caches)?;
    let blocks = cfg.file_size / BLOCK as u64;
    let (rand_s, hists) = timed(cfg.threads, BulkPart::RandRead, observe, |t| {
        let p = &files[t];
        let f = File::open(p).map_err(io_err("open", p))?;
        let stamp = stamp_of(cfg.seed, t);
        let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed ^ ((t as u64) << 32) ^ 0x7a4d);
        let mut hist = new_histogram();
        let mut buf = vec![0u8; BLOCK];
        let start = Instant::now();
        let mut ops = 0u64;
        while !cfg.rand_bound.done(ops, start.elapsed()) {
            let off = rng.gen_range(0..blocks) * BLOCK as u64;
            let began = Instant::now();
            f.read_exact_at(&mut buf, off).map_err(io_err("read", p))?;
            record(&mut hist, began.elapsed());
            if let Some(at) = check_blocks(stamp, off, &bases[t], &buf) {
                return Err(verify_err(p, at));
            }
            ops += 1;
        }
        Ok(hist)
    })?;
    let mut rand = new_histogram();
    for h in &hists {
        let _ = rand.add(h);
    }
    let bytes = cfg.file_size * cfg.threads as u64;
    let result = BulkResult {
        threads: cfg.threads,
        bytes,
        write_s,
        write_mb_per_sec: bytes as f64 / write_s / 1e6,
        read_s,
        read_mb_per_sec: bytes as f64 / read_s / 1e6,
        rand_ops: rand.len(),
        rand_iops: rand.len() as f64 / rand_s,
        rand_read: LatencySummary::from_histogram(&rand),
        cold,
    };
    if cfg.cleanup {
        std::fs::remove_dir_all(&root).map_err(io_err("remove", &root))?;
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_reads_back_and_counts() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = BulkConfig {
            threads: 2,
            file_size: 1 << 20,
            io_size: 64 << 10,
            rand_bound: Bound::Ops(100),
            drop_caches: false,
            ..BulkConfig::default()
        };
        let mut seen = Vec::new();
        let r = run_bulk_observed(dir.path(), &cfg, &mut |p, ph| seen.push((p, ph))).unwrap();
        assert_eq!(r.bytes, 2 << 20);
        assert_eq!(r.rand_ops, 200);
        assert!(r.write_mb_per_sec > 0.0 && r.read_mb_per_sec > 0.0);
        assert_eq!(
            seen,
            vec![
                (BulkPart::SeqWrite, Phase::Start),
                (BulkPart::SeqWrite, Phase::End),
                (BulkPart::SeqRead, Phase::Start),
                (BulkPart::SeqRead, Phase::End),
                (BulkPart::RandRead, Phase::Start),
                (BulkPart::RandRead, Phase::End),
            ]
        );
        assert!(!dir.path().join("bulk").exists(), "cleaned up");
    }

    #[test]
    fn a_misplaced_or_changed_block_is_caught() {
        let base = {
            let mut b = vec![0u8; 4 * BLOCK];
            pattern::fill(9, 0, &mut b);
            b
        };
        let mut buf = vec![0u8; 4 * BLOCK];
        fill_blocks(5, 8 * BLOCK as u64, &base, &mut buf);
        assert_eq!(check_blocks(5, 8 * BLOCK as u64, &base, &buf), None);
        // The same bytes claimed for another offset: the check word differs.
        assert_eq!(
            check_blocks(5, 4 * BLOCK as u64, &base, &buf),
            Some(4 * BLOCK as u64)
        );
        buf[2 * BLOCK + 100] ^= 1;
        assert_eq!(
            check_blocks(5, 8 * BLOCK as u64, &base, &buf),
            Some(10 * BLOCK as u64 + 100)
        );
        // Zeroes (a hole where data was written) are caught too.
        let zero = vec![0u8; BLOCK];
        assert_eq!(check_blocks(5, 0, &base, &zero), Some(0));
    }

    #[test]
    fn bad_sizes_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = BulkConfig {
            file_size: 1000,
            ..BulkConfig::default()
        };
        assert!(matches!(
            run_bulk(dir.path(), &cfg),
            Err(FsBenchError::Config(_))
        ));
    }
}
