//! A tokubench-like workload: many small-file creates, 1000 per directory.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rand::seq::index::sample;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use super::error::io_err;
use super::{
    create_fresh_dir, new_histogram, pattern, record, syncfs, Bound, FsBenchError, LatencySummary,
    Phase, Result,
};

/// Parameters of [`run_tokubench`].
#[derive(Clone, Debug, Serialize)]
pub struct TokubenchConfig {
    /// Worker threads; each fills its own directory tree.
    pub threads: usize,
    /// Files per directory before a thread starts the next one.
    pub files_per_dir: usize,
    /// Bytes written into each file (one `write`).
    pub file_size: usize,
    /// How long each thread runs; one op is one file created.
    pub bound: Bound,
    /// `syncfs` once after the last create; its time is reported apart.
    pub sync_at_end: bool,
    /// Files per thread read back and compared afterwards (all if larger
    /// than what was created); the names are drawn from `seed`.
    pub verify_per_thread: usize,
    /// Seeds which files are verified; contents derive from it too.
    pub seed: u64,
    /// Remove the workload's directory afterwards (not timed).
    pub cleanup: bool,
}

impl Default for TokubenchConfig {
    fn default() -> Self {
        TokubenchConfig {
            threads: 2,
            files_per_dir: 1000,
            file_size: 4096,
            bound: Bound::Duration(Duration::from_secs(10)),
            sync_at_end: true,
            verify_per_thread: 1000,
            seed: 1,
            cleanup: true,
        }
    }
}

/// What one [`run_tokubench`] measured.
#[derive(Clone, Debug, Serialize)]
pub struct TokubenchResult {
    /// Worker threads.
    pub threads: usize,
    /// Files created over all threads.
    pub files: u64,
    /// Directories created.
    pub dirs: u64,
    /// Wall time of the create phase, seconds.
    pub elapsed_s: f64,
    /// `files / elapsed_s`.
    pub files_per_sec: f64,
    /// Time of the final `syncfs` (0 when not asked for), seconds.
    pub sync_s: f64,
    /// `files / (elapsed_s + sync_s)`.
    pub files_per_sec_incl_sync: f64,
    /// Latency of one create + write + close.
    pub create: LatencySummary,
    /// Files read back and found equal to what was written.
    pub verified_files: u64,
}

struct ThreadStats {
    files: u64,
    dirs: u64,
    end: Instant,
    create: Histogram<u64>,
}

fn dir_of(root: &Path, thread: usize, index: u64, per_dir: usize) -> PathBuf {
    root.join(format!("t{thread:02}"))
        .join(format!("d{:05}", index / per_dir as u64))
}

fn file_of(root: &Path, thread: usize, index: u64, per_dir: usize) -> PathBuf {
    dir_of(root, thread, index, per_dir).join(format!("f{:04}", index % per_dir as u64))
}

fn stamp_of(seed: u64, thread: usize, index: u64) -> u64 {
    seed.rotate_left(23) ^ ((thread as u64) << 48) ^ index
}

/// Runs the tokubench-like workload in a new directory `dir/tokubench`.
///
/// Each thread creates files `tNN/dKKKKK/fJJJJ` in order, starting a new
/// directory every `files_per_dir` files; a file is `open(O_CREAT|O_EXCL)`,
/// one write of `file_size` bytes, close. Afterwards every directory's
/// entry count is checked and a seeded sample of files is read back.
pub fn run_tokubench(dir: &Path, cfg: &TokubenchConfig) -> Result<TokubenchResult> {
    run_tokubench_observed(dir, cfg, &mut |_| {})
}

/// [`run_tokubench`], calling `observe` right before the creates start
/// (directories made, workers waiting) and right after the final `syncfs`
/// (before the read-back check and cleanup).
pub fn run_tokubench_observed(
    dir: &Path,
    cfg: &TokubenchConfig,
    observe: &mut dyn FnMut(Phase),
) -> Result<TokubenchResult> {
    if cfg.threads == 0 || cfg.files_per_dir == 0 {
        return Err(FsBenchError::Config(format!(
            "tokubench needs threads and files per directory: {cfg:?}"
        )));
    }
    cfg.bound.validate()?;
    let root = dir.join("tokubench");
    create_fresh_dir(&root)?;
    for t in 0..cfg.threads {
        create_fresh_dir(&root.join(format!("t{t:02}")))?;
    }
    let go = Barrier::new(cfg.threads + 1);
    let abort = AtomicBool::new(false);
    let (start, outcomes) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..cfg.threads)
            .map(|t| {
                let (go, abort, root) = (&go, &abort, &root);
                s.spawn(move || {
                    go.wait();
                    let r = create_files(root, t, cfg, abort);
                    if r.is_err() {
                        abort.store(true, Ordering::Relaxed);
                    }
                    r
                })
            })
            .collect();
        observe(Phase::Start);
        let start = Instant::now();
        go.wait();
        let outcomes: Vec<Result<ThreadStats>> = handles
            .into_iter()
            .map(|h| h.join().unwrap_or(Err(FsBenchError::ThreadPanicked)))
            .collect();
        (start, outcomes)
    });
    let mut stats = Vec::new();
    for o in outcomes {
        stats.push(o?);
    }
    let end = stats.iter().map(|s| s.end).max().unwrap_or(start);
    let elapsed_s = end.duration_since(start).as_secs_f64().max(1e-9);
    let sync_s = if cfg.sync_at_end {
        let t = Instant::now();
        syncfs(&root)?;
        t.elapsed().as_secs_f64()
    } else {
        0.0
    };
    observe(Phase::End);

    let mut verified_files = 0;
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    for (t, st) in stats.iter().enumerate() {
        verified_files += verify_thread(&root, t, st.files, cfg, &mut rng)?;
    }

    let mut create = new_histogram();
    for s in &stats {
        let _ = create.add(&s.create);
    }
    let files: u64 = stats.iter().map(|s| s.files).sum();
    let result = TokubenchResult {
        threads: cfg.threads,
        files,
        dirs: stats.iter().map(|s| s.dirs).sum(),
        elapsed_s,
        files_per_sec: files as f64 / elapsed_s,
        sync_s,
        files_per_sec_incl_sync: files as f64 / (elapsed_s + sync_s),
        create: LatencySummary::from_histogram(&create),
        verified_files,
    };
    if cfg.cleanup {
        std::fs::remove_dir_all(&root).map_err(io_err("remove", &root))?;
    }
    Ok(result)
}

fn create_files(
    root: &Path,
    t: usize,
    cfg: &TokubenchConfig,
    abort: &AtomicBool,
) -> Result<ThreadStats> {
    let start = Instant::now();
    let mut create = new_histogram();
    let mut buf = vec![0u8; cfg.file_size];
    let (mut files, mut dirs) = (0u64, 0u64);
    while !cfg.bound.done(files, start.elapsed()) && !abort.load(Ordering::Relaxed) {
        if files % cfg.files_per_dir as u64 == 0 {
            let d = dir_of(root, t, files, cfg.files_per_dir);
            std::fs::create_dir(&d).map_err(io_err("mkdir", &d))?;
            dirs += 1;
        }
        let path = file_of(root, t, files, cfg.files_per_dir);
        pattern::fill(stamp_of(cfg.seed, t, files), 0, &mut buf);
        let began = Instant::now();
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(io_err("create", &path))?;
        f.write_all(&buf).map_err(io_err("write", &path))?;
        drop(f);
        record(&mut create, began.elapsed());
        files += 1;
    }
    Ok(ThreadStats {
        files,
        dirs,
        end: Instant::now(),
        create,
    })
}

/// Checks thread `t`'s directories hold the right number of entries and
/// reads back a seeded sample of its files; returns how many were read.
fn verify_thread(
    root: &Path,
    t: usize,
    files: u64,
    cfg: &TokubenchConfig,
    rng: &mut ChaCha8Rng,
) -> Result<u64> {
    let per_dir = cfg.files_per_dir as u64;
    let dirs = files.div_ceil(per_dir);
    for d in 0..dirs {
        let dir = dir_of(root, t, d * per_dir, cfg.files_per_dir);
        let count = std::fs::read_dir(&dir)
            .map_err(io_err("readdir", &dir))?
            .count() as u64;
        let want = per_dir.min(files - d * per_dir);
        if count != want {
            return Err(FsBenchError::Verify {
                path: dir,
                detail: format!("{count} entries, created {want}"),
            });
        }
    }
    let n = usize::try_from(files).unwrap_or(usize::MAX);
    let picks = sample(rng, n, cfg.verify_per_thread.min(n));
    let mut buf = Vec::with_capacity(cfg.file_size + 1);
    let mut scratch = Vec::new();
    for i in picks.iter() {
        let path = file_of(root, t, i as u64, cfg.files_per_dir);
        buf.clear();
        File::open(&path)
            .and_then(|mut f| f.read_to_end(&mut buf))
            .map_err(io_err("read", &path))?;
        if buf.len() != cfg.file_size {
            return Err(FsBenchError::Verify {
                path,
                detail: format!("{} bytes, wrote {}", buf.len(), cfg.file_size),
            });
        }
        if let Some(at) =
            pattern::first_mismatch(stamp_of(cfg.seed, t, i as u64), 0, &buf, &mut scratch)
        {
            return Err(FsBenchError::Verify {
                path,
                detail: format!("byte {at} differs from what was written"),
            });
        }
    }
    Ok(picks.len() as u64)
}
