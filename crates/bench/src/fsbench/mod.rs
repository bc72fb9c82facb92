//! `ptsd bench fs`: file-system workloads and the targets they run on.
//!
//! Workloads operate on any directory through `std::fs` (fsync/fdatasync
//! are the plain syscalls), with N threads, a seed, and a bound in
//! operations or seconds:
//!
//! - [`run_varmail`]: filebench varmail's flow over a few hundred files per
//!   thread — delete, create + append + fsync, open + append + fsync,
//!   open + read whole file (verified against what was written). Reports
//!   ops/s and fsync latency p50/p99.
//! - [`run_tokubench`]: create many 4 KiB files in directories of 1000
//!   (write + close, optionally one `syncfs` at the end). Reports files/s.
//!
//! - [`bulk::run_bulk`]: sequential write + fsync, cold sequential read
//!   and cold 4 KiB random read of one large file per thread. Reports MB/s
//!   and reads/s.
//!
//! Targets ([`target`]): ext4 on loop devices over image files (on disk,
//! on /dev/shm, or with its journal on /dev/shm), a
//! [`NoopFs`](noopfs::NoopFs) FUSE mount (in-memory, no work: the FUSE
//! ceiling), a spawned `ptsd mount`, or any directory. Each declares a
//! durability class ([`suite::Durability`]). [`suite`] runs both workloads
//! on each target in rounds; [`report`] pairs the rounds' ratios within a
//! class and renders the table.
//!
//! ```
//! use ptsd_bench::fsbench::{run_tokubench, Bound, TokubenchConfig};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let cfg = TokubenchConfig { threads: 2, bound: Bound::Ops(50), ..TokubenchConfig::default() };
//! let result = run_tokubench(dir.path(), &cfg).unwrap();
//! assert_eq!(result.files, 100);
//! assert_eq!(result.verified_files, 100);
//! ```

pub mod bulk;
mod bulkreport;
pub mod devstat;
mod error;
pub mod noopfs;
mod pattern;
pub mod report;
pub mod suite;
pub mod target;
mod tokubench;
mod varmail;

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

pub use error::{FsBenchError, Result};
pub use tokubench::{run_tokubench, run_tokubench_observed, TokubenchConfig, TokubenchResult};
pub use varmail::{run_varmail, run_varmail_observed, VarmailConfig, VarmailResult};

use error::io_err;

/// How long a workload runs: operations per thread, or wall-clock time.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub enum Bound {
    /// Each thread stops after this many operations.
    Ops(u64),
    /// Each thread stops at the first operation boundary after this long.
    Duration(Duration),
}

impl Bound {
    fn done(&self, ops: u64, elapsed: Duration) -> bool {
        match *self {
            Bound::Ops(n) => ops >= n,
            Bound::Duration(d) => elapsed >= d,
        }
    }

    fn validate(&self) -> Result<()> {
        match *self {
            Bound::Ops(0) => Err(FsBenchError::Config("bound of 0 ops".into())),
            Bound::Duration(d) if d.is_zero() => {
                Err(FsBenchError::Config("bound of 0 seconds".into()))
            }
            _ => Ok(()),
        }
    }
}

/// Where a workload is when it calls its observer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Set up and synced; the timed phase starts when the observer returns.
    Start,
    /// The timed phase (and, for tokubench, its final syncfs) is over.
    End,
}

/// Which sync call the workload makes after its appends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum SyncKind {
    /// `fsync(2)`: data and metadata.
    Fsync,
    /// `fdatasync(2)`: data and the metadata needed to read it.
    Fdatasync,
}

impl SyncKind {
    fn sync(self, file: &File, path: &Path) -> Result<()> {
        match self {
            SyncKind::Fsync => file.sync_all().map_err(io_err("fsync", path)),
            SyncKind::Fdatasync => file.sync_data().map_err(io_err("fdatasync", path)),
        }
    }
}

/// Latency percentiles of one kind of call, in microseconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct LatencySummary {
    /// Calls measured.
    pub count: u64,
    /// Mean.
    pub mean_us: f64,
    /// Median.
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// Slowest call.
    pub max_us: f64,
}

impl LatencySummary {
    fn from_histogram(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return LatencySummary::default();
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        LatencySummary {
            count: h.len(),
            mean_us: h.mean() / 1000.0,
            p50_us: us(h.value_at_quantile(0.5)),
            p99_us: us(h.value_at_quantile(0.99)),
            max_us: us(h.max()),
        }
    }
}

/// A histogram of nanosecond latencies from 1 ns to 100 s, 3 significant digits.
fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 100_000_000_000, 3).expect("static histogram bounds are valid")
}

fn record(h: &mut Histogram<u64>, d: Duration) {
    // Saturates at the upper bound instead of failing: a 100 s call is
    // already far past anything the report distinguishes.
    h.saturating_record(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1));
}

/// `syncfs(2)` on the file system holding `dir`.
pub fn syncfs(dir: &Path) -> Result<()> {
    let f = File::open(dir).map_err(io_err("open", dir))?;
    // SAFETY: `f` is an open descriptor for the whole call; syncfs reads no
    // memory of ours.
    let rc = unsafe { libc::syncfs(f.as_raw_fd()) };
    if rc != 0 {
        return Err(io_err("syncfs", dir)(std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Creates `dir` (which must not exist yet) for one workload run.
fn create_fresh_dir(dir: &Path) -> Result<()> {
    std::fs::create_dir(dir).map_err(io_err("mkdir", dir))
}
