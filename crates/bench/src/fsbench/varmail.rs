//! A varmail-like workload (filebench `varmail.f`'s flow, per thread).

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use super::error::io_err;
use super::{
    create_fresh_dir, new_histogram, pattern, record, syncfs, Bound, FsBenchError, LatencySummary,
    Phase, Result, SyncKind,
};

/// Parameters of [`run_varmail`].
#[derive(Clone, Debug, Serialize)]
pub struct VarmailConfig {
    /// Worker threads; each owns its own directory of files.
    pub threads: usize,
    /// Files (slots) per thread; filebench's varmail uses 1000 over 16 threads.
    pub files_per_thread: usize,
    /// Share of the slots that hold a file before the timed phase (filebench: 80 %).
    pub prealloc_percent: u8,
    /// Preallocated files get a uniform size in `1..=2 * mean_file_size` bytes.
    pub mean_file_size: usize,
    /// Each append writes a uniform `1..=append_max` bytes (filebench's
    /// `appendfilerand` with `iosize=16k`).
    pub append_max: usize,
    /// Read buffer for "read whole file" (filebench: 1 MiB).
    pub read_size: usize,
    /// The sync call after each append.
    pub sync: SyncKind,
    /// How long each thread runs; one op is one of the four steps.
    pub bound: Bound,
    /// Seeds every thread's choices (file picked, sizes).
    pub seed: u64,
    /// Remove the workload's directory afterwards (not timed).
    pub cleanup: bool,
}

impl Default for VarmailConfig {
    fn default() -> Self {
        VarmailConfig {
            threads: 2,
            files_per_thread: 300,
            prealloc_percent: 80,
            mean_file_size: 16 * 1024,
            append_max: 16 * 1024,
            read_size: 1 << 20,
            sync: SyncKind::Fsync,
            bound: Bound::Duration(Duration::from_secs(10)),
            seed: 1,
            cleanup: true,
        }
    }
}

/// What one [`run_varmail`] measured. An op is one of: delete;
/// create + append + fsync + close; open + append + fsync + close;
/// open + read whole file + close.
#[derive(Clone, Debug, Serialize)]
pub struct VarmailResult {
    /// Worker threads.
    pub threads: usize,
    /// Wall time of the timed phase, seconds.
    pub elapsed_s: f64,
    /// Ops completed over all threads.
    pub ops: u64,
    /// `ops / elapsed_s`.
    pub ops_per_sec: f64,
    /// Every fsync/fdatasync call.
    pub fsync: LatencySummary,
    /// Whole-op latencies, per step.
    pub delete: LatencySummary,
    /// Create + append + fsync + close.
    pub create_append_fsync: LatencySummary,
    /// Open + append + fsync + close.
    pub append_fsync: LatencySummary,
    /// Open + read whole file (verified) + close.
    pub read_whole: LatencySummary,
    /// Bytes appended in the timed phase.
    pub bytes_written: u64,
    /// Bytes read back and found equal to what was written.
    pub bytes_verified: u64,
    /// Files present at the end, each checked to exist (and no others).
    pub files_at_end: u64,
}

struct ThreadStats {
    ops: u64,
    end: Instant,
    fsync: Histogram<u64>,
    steps: [Histogram<u64>; 4],
    bytes_written: u64,
    bytes_verified: u64,
    files_at_end: u64,
}

/// One thread's view of its files: which slots hold a file, and what.
struct Worker<'a> {
    cfg: &'a VarmailConfig,
    dir: PathBuf,
    rng: ChaCha8Rng,
    /// Per slot: the stamp its contents were written under, and length.
    slots: Vec<(u64, u64)>,
    present: Vec<usize>,
    absent: Vec<usize>,
    next_stamp: u64,
    buf: Vec<u8>,
    scratch: Vec<u8>,
    fsync: Histogram<u64>,
    bytes_written: u64,
    bytes_verified: u64,
}

impl<'a> Worker<'a> {
    fn new(cfg: &'a VarmailConfig, dir: PathBuf, thread: usize) -> Self {
        let stream = cfg.seed ^ (thread as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        Worker {
            cfg,
            dir,
            rng: ChaCha8Rng::seed_from_u64(stream),
            slots: vec![(0, 0); cfg.files_per_thread],
            present: Vec::new(),
            absent: (0..cfg.files_per_thread).collect(),
            // Stamps are unique across threads and runs with other seeds.
            next_stamp: stream.rotate_left(17) ^ ((thread as u64) << 48),
            buf: Vec::new(),
            scratch: Vec::new(),
            fsync: new_histogram(),
            bytes_written: 0,
            bytes_verified: 0,
        }
    }

    fn path(&self, slot: usize) -> PathBuf {
        self.dir.join(format!("f{slot:05}"))
    }

    fn prealloc(&mut self) -> Result<()> {
        create_fresh_dir(&self.dir)?;
        let n = (self.cfg.files_per_thread * usize::from(self.cfg.prealloc_percent)).div_ceil(100);
        for _ in 0..n.max(1) {
            let size = self.rng.gen_range(1..=2 * self.cfg.mean_file_size);
            self.create(size, false)?;
        }
        Ok(())
    }

    /// Creates a file in a free slot with `size` bytes, optionally synced.
    fn create(&mut self, size: usize, sync: bool) -> Result<()> {
        let i = self.rng.gen_range(0..self.absent.len());
        let slot = self.absent.swap_remove(i);
        let path = self.path(slot);
        let stamp = self.next_stamp;
        self.next_stamp = self.next_stamp.wrapping_add(1);
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(io_err("create", &path))?;
        self.write_pattern(&mut f, &path, stamp, 0, size)?;
        if sync {
            self.timed_sync(&f, &path)?;
        }
        drop(f);
        self.slots[slot] = (stamp, size as u64);
        self.present.push(slot);
        Ok(())
    }

    fn write_pattern(
        &mut self,
        f: &mut File,
        path: &Path,
        stamp: u64,
        offset: u64,
        len: usize,
    ) -> Result<()> {
        self.buf.resize(len, 0);
        pattern::fill(stamp, offset, &mut self.buf);
        f.write_all(&self.buf).map_err(io_err("write", path))?;
        self.bytes_written += len as u64;
        Ok(())
    }

    fn timed_sync(&mut self, f: &File, path: &Path) -> Result<()> {
        let t = Instant::now();
        self.cfg.sync.sync(f, path)?;
        record(&mut self.fsync, t.elapsed());
        Ok(())
    }

    fn delete(&mut self) -> Result<()> {
        let i = self.rng.gen_range(0..self.present.len());
        let slot = self.present.swap_remove(i);
        let path = self.path(slot);
        std::fs::remove_file(&path).map_err(io_err("unlink", &path))?;
        self.absent.push(slot);
        Ok(())
    }

    fn append_fsync(&mut self) -> Result<()> {
        let slot = self.present[self.rng.gen_range(0..self.present.len())];
        let path = self.path(slot);
        let (stamp, len) = self.slots[slot];
        let n = self.rng.gen_range(1..=self.cfg.append_max);
        let mut f = OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(io_err("open", &path))?;
        self.write_pattern(&mut f, &path, stamp, len, n)?;
        self.timed_sync(&f, &path)?;
        drop(f);
        self.slots[slot].1 = len + n as u64;
        Ok(())
    }

    fn read_whole(&mut self) -> Result<()> {
        let slot = self.present[self.rng.gen_range(0..self.present.len())];
        let path = self.path(slot);
        let (stamp, len) = self.slots[slot];
        let mut f = File::open(&path).map_err(io_err("open", &path))?;
        self.buf.resize(self.cfg.read_size, 0);
        let mut offset = 0u64;
        loop {
            let n = f.read(&mut self.buf).map_err(io_err("read", &path))?;
            if n == 0 {
                break;
            }
            if let Some(at) =
                pattern::first_mismatch(stamp, offset, &self.buf[..n], &mut self.scratch)
            {
                return Err(FsBenchError::Verify {
                    path,
                    detail: format!("byte {at} differs from what was written"),
                });
            }
            offset += n as u64;
        }
        if offset != len {
            return Err(FsBenchError::Verify {
                path,
                detail: format!("read {offset} bytes, wrote {len}"),
            });
        }
        self.bytes_verified += offset;
        Ok(())
    }

    /// Checks that exactly the files the model holds are in the directory.
    fn check_directory(&self) -> Result<u64> {
        let mut found = BTreeSet::new();
        for entry in std::fs::read_dir(&self.dir).map_err(io_err("readdir", &self.dir))? {
            let entry = entry.map_err(io_err("readdir", &self.dir))?;
            found.insert(entry.file_name().to_string_lossy().into_owned());
        }
        let expected: BTreeSet<String> = self.present.iter().map(|&s| format!("f{s:05}")).collect();
        if found != expected {
            let missing: Vec<_> = expected.difference(&found).take(5).collect();
            let extra: Vec<_> = found.difference(&expected).take(5).collect();
            return Err(FsBenchError::Verify {
                path: self.dir.clone(),
                detail: format!("missing {missing:?}, unexpected {extra:?}"),
            });
        }
        Ok(found.len() as u64)
    }
}

/// Runs the varmail-like workload in a new directory `dir/varmail`.
///
/// Each thread preallocates its files (not timed; a `syncfs` follows), then
/// all threads start together and loop: delete a file; create a file, append,
/// fsync, close; open a file, append, fsync, close; open a file, read it
/// whole and compare with what was written, close. Afterwards each thread
/// checks its directory holds exactly the files it expects.
pub fn run_varmail(dir: &Path, cfg: &VarmailConfig) -> Result<VarmailResult> {
    run_varmail_observed(dir, cfg, &mut |_| {})
}

/// [`run_varmail`], calling `observe` right before the timed phase starts
/// (after the preallocation is written and synced, with the workers
/// waiting) and right after it ends (before cleanup): where a caller
/// settles the machine and reads its counters.
pub fn run_varmail_observed(
    dir: &Path,
    cfg: &VarmailConfig,
    observe: &mut dyn FnMut(Phase),
) -> Result<VarmailResult> {
    if cfg.threads == 0
        || cfg.files_per_thread < 2
        || cfg.mean_file_size == 0
        || cfg.append_max == 0
        || cfg.read_size == 0
    {
        return Err(FsBenchError::Config(format!(
            "varmail needs threads, ≥ 2 files, non-zero sizes: {cfg:?}"
        )));
    }
    if cfg.prealloc_percent > 100 {
        return Err(FsBenchError::Config("prealloc_percent above 100".into()));
    }
    cfg.bound.validate()?;
    let root = dir.join("varmail");
    create_fresh_dir(&root)?;

    let ready = Barrier::new(cfg.threads + 1);
    let go = Barrier::new(cfg.threads + 1);
    let abort = AtomicBool::new(false);
    let (synced, start, outcomes) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..cfg.threads)
            .map(|t| {
                let (ready, go, abort, root) = (&ready, &go, &abort, &root);
                s.spawn(move || {
                    let mut w = Worker::new(cfg, root.join(format!("t{t:02}")), t);
                    let setup = w.prealloc();
                    if setup.is_err() {
                        abort.store(true, Ordering::Relaxed);
                    }
                    ready.wait();
                    go.wait();
                    setup?;
                    run_thread(&mut w, abort)
                })
            })
            .collect();
        ready.wait();
        // Preallocated data goes to stable storage before the clock starts,
        // so its writeback does not land in the timed phase.
        let synced = if abort.load(Ordering::Relaxed) {
            Ok(())
        } else {
            syncfs(&root)
        };
        if synced.is_err() {
            abort.store(true, Ordering::Relaxed);
        }
        observe(Phase::Start);
        let start = Instant::now();
        go.wait();
        let outcomes: Vec<Result<ThreadStats>> = handles
            .into_iter()
            .map(|h| h.join().unwrap_or(Err(FsBenchError::ThreadPanicked)))
            .collect();
        observe(Phase::End);
        (synced, start, outcomes)
    });

    let mut stats = Vec::new();
    for o in outcomes {
        stats.push(o?);
    }
    synced?;
    let end = stats.iter().map(|s| s.end).max().unwrap_or(start);
    let elapsed_s = end.duration_since(start).as_secs_f64().max(1e-9);
    let mut fsync = new_histogram();
    let mut steps: [Histogram<u64>; 4] = std::array::from_fn(|_| new_histogram());
    for s in &stats {
        let _ = fsync.add(&s.fsync);
        for (acc, h) in steps.iter_mut().zip(&s.steps) {
            let _ = acc.add(h);
        }
    }
    let ops: u64 = stats.iter().map(|s| s.ops).sum();
    let result = VarmailResult {
        threads: cfg.threads,
        elapsed_s,
        ops,
        ops_per_sec: ops as f64 / elapsed_s,
        fsync: LatencySummary::from_histogram(&fsync),
        delete: LatencySummary::from_histogram(&steps[0]),
        create_append_fsync: LatencySummary::from_histogram(&steps[1]),
        append_fsync: LatencySummary::from_histogram(&steps[2]),
        read_whole: LatencySummary::from_histogram(&steps[3]),
        bytes_written: stats.iter().map(|s| s.bytes_written).sum(),
        bytes_verified: stats.iter().map(|s| s.bytes_verified).sum(),
        files_at_end: stats.iter().map(|s| s.files_at_end).sum(),
    };
    if cfg.cleanup {
        std::fs::remove_dir_all(&root).map_err(io_err("remove", &root))?;
    }
    Ok(result)
}

fn run_thread(w: &mut Worker<'_>, abort: &AtomicBool) -> Result<ThreadStats> {
    // The preallocation's bytes are not the timed phase's.
    w.bytes_written = 0;
    let start = Instant::now();
    let mut steps: [Histogram<u64>; 4] = std::array::from_fn(|_| new_histogram());
    let mut ops = 0u64;
    let outcome = (|| {
        'run: loop {
            for (step, hist) in steps.iter_mut().enumerate() {
                if w.cfg.bound.done(ops, start.elapsed()) || abort.load(Ordering::Relaxed) {
                    break 'run;
                }
                let t = Instant::now();
                match step {
                    0 => w.delete()?,
                    1 => {
                        let n = w.rng.gen_range(1..=w.cfg.append_max);
                        w.create(n, true)?
                    }
                    2 => w.append_fsync()?,
                    _ => w.read_whole()?,
                }
                record(hist, t.elapsed());
                ops += 1;
            }
        }
        Ok(())
    })();
    let end = Instant::now();
    if outcome.is_err() {
        abort.store(true, Ordering::Relaxed);
    }
    outcome?;
    let files_at_end = w.check_directory()?;
    Ok(ThreadStats {
        ops,
        end,
        fsync: std::mem::replace(&mut w.fsync, new_histogram()),
        steps,
        bytes_written: w.bytes_written,
        bytes_verified: w.bytes_verified,
        files_at_end,
    })
}
