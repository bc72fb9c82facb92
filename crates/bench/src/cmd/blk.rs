//! `ptsd bench blk TARGET`: a block load generator with fio's basic knobs,
//! built on tokio-uring. Each job is a thread with its own io_uring
//! runtime, in which `--qd` tasks each keep one request in flight, so the
//! device always sees QD requests per job. Reports IOPS, bandwidth and
//! hdrhistogram latency percentiles (submission to completion, as fio's
//! `clat` plus the submission) as a table, JSON, and a CDF plot.

use std::cell::{Cell, RefCell};
use std::fs::OpenOptions;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use super::{invalid, BenchCmdError, Doing, Result};
use clap::Args;
use hdrhistogram::Histogram;
use ptsd_blockdev::size::{parse_size, ByteSize};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use super::blkbuf::AlignedBuf;

/// Options of `ptsd bench blk`.
#[derive(Args, Debug, Clone)]
pub struct BlkArgs {
    /// File or block device (e.g. /dev/ublkb0). A missing file is created
    /// and written out to --size first, as fio lays out its files.
    target: PathBuf,
    /// read, write (sequential), randread, randwrite, randrw, or randrw:R (random
    /// mix with R% reads, default 50; fio's --rwmixread).
    #[arg(long, default_value = "randread", value_parser = parse_rw)]
    rw: Pattern,
    /// Request size.
    #[arg(long, default_value = "4KiB", value_parser = parse_size)]
    bs: u64,
    /// Requests in flight per job.
    #[arg(long, default_value_t = 1)]
    qd: u32,
    /// O_DIRECT: bypass the page cache.
    #[arg(long)]
    direct: bool,
    /// Run this long (fio's --runtime with --time_based) [default: 10,
    /// unless --size bounds the run].
    #[arg(long)]
    seconds: Option<f64>,
    /// Bytes of TARGET to use, from offset 0 [default: all of it]. Without
    /// --seconds, also how much each job transfers (as fio's --size).
    #[arg(long, value_parser = parse_size)]
    size: Option<u64>,
    /// Jobs (threads), each with its own ring and --qd requests.
    #[arg(long, default_value_t = 1)]
    jobs: u32,
    /// Print JSON on stdout (the table goes to stderr).
    #[arg(long)]
    json: bool,
    /// Write the latency CDF (SVG) here.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Seed of the random offsets and the read/write mix.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// The access pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Pattern {
    Read,
    Write,
    RandRead,
    RandWrite,
    /// Random offsets, this percentage of reads.
    RandRw(u32),
}

impl Pattern {
    fn random(self) -> bool {
        !matches!(self, Pattern::Read | Pattern::Write)
    }

    fn read_pct(self) -> u32 {
        match self {
            Pattern::Read | Pattern::RandRead => 100,
            Pattern::Write | Pattern::RandWrite => 0,
            Pattern::RandRw(r) => r,
        }
    }

    fn name(self) -> String {
        match self {
            Pattern::Read => "read".into(),
            Pattern::Write => "write".into(),
            Pattern::RandRead => "randread".into(),
            Pattern::RandWrite => "randwrite".into(),
            Pattern::RandRw(r) => format!("randrw:{r}"),
        }
    }
}

fn parse_rw(s: &str) -> Result<Pattern, String> {
    Ok(match s {
        "read" => Pattern::Read,
        "write" => Pattern::Write,
        "randread" => Pattern::RandRead,
        "randwrite" => Pattern::RandWrite,
        "randrw" | "rw" => Pattern::RandRw(50),
        _ => match s.strip_prefix("randrw:") {
            Some(r) => match r.parse() {
                Ok(r) if r <= 100 => Pattern::RandRw(r),
                _ => return Err(format!("randrw:{r}: the read share must be 0..=100")),
            },
            None => {
                return Err(format!(
                    "unknown --rw {s:?} (read, write, randread, randwrite, randrw[:R])"
                ))
            }
        },
    })
}

/// Latency summary of one operation kind, in microseconds.
#[derive(Debug, Serialize)]
pub struct OpReport {
    pub ios: u64,
    pub iops: f64,
    pub mib_per_s: f64,
    pub mb_per_s: f64,
    pub lat_mean_us: f64,
    pub lat_p50_us: f64,
    pub lat_p90_us: f64,
    pub lat_p99_us: f64,
    pub lat_p999_us: f64,
    pub lat_p9999_us: f64,
    pub lat_max_us: f64,
}

/// The JSON of a run.
#[derive(Debug, Serialize)]
pub struct BlkReport {
    pub target: String,
    pub rw: String,
    pub bs: u64,
    pub qd: u32,
    pub jobs: u32,
    pub direct: bool,
    pub span_bytes: u64,
    pub seconds: f64,
    pub read: Option<OpReport>,
    pub write: Option<OpReport>,
}

/// How a job knows it is done.
#[derive(Clone, Copy, Debug)]
enum Stop {
    At(Duration),
    Bytes(u64),
}

/// One job's shared state: its tasks run on one thread, hence `Cell`s.
struct Job {
    rw: Pattern,
    bs: u64,
    span_blocks: u64,
    next_seq: Cell<u64>,
    rng: RefCell<SmallRng>,
    /// Bytes still to be issued (`Stop::Bytes`).
    budget: Cell<u64>,
    deadline: Option<Instant>,
    read_lat: RefCell<Histogram<u64>>,
    write_lat: RefCell<Histogram<u64>>,
}

impl Job {
    /// The next request, or `None` once the job is done.
    fn next(&self) -> Option<(bool, u64)> {
        match self.deadline {
            Some(d) if Instant::now() >= d => return None,
            Some(_) => {}
            None => {
                let left = self.budget.get();
                if left == 0 {
                    return None;
                }
                self.budget.set(left.saturating_sub(self.bs));
            }
        }
        let mut rng = self.rng.borrow_mut();
        let block = if self.rw.random() {
            rng.gen_range(0..self.span_blocks)
        } else {
            let b = self.next_seq.get();
            self.next_seq.set((b + 1) % self.span_blocks);
            b
        };
        let read = match self.rw.read_pct() {
            100 => true,
            0 => false,
            pct => rng.gen_range(0..100) < pct,
        };
        Some((read, block * self.bs))
    }
}

/// One task: one request in flight at a time, its buffer reused.
async fn task(file: Rc<tokio_uring::fs::File>, job: Rc<Job>, mut buf: AlignedBuf) -> Result<()> {
    while let Some((read, off)) = job.next() {
        let t0 = Instant::now();
        let (res, b) = if read {
            file.read_at(buf, off).await
        } else {
            file.write_at(buf, off).submit().await
        };
        let ns = t0.elapsed().as_nanos() as u64;
        buf = b;
        let n = res.doing(|| {
            format!(
                "{} of {} bytes at {off}",
                if read { "read" } else { "write" },
                job.bs
            )
        })?;
        if n as u64 != job.bs {
            return Err(BenchCmdError::Failed(format!(
                "short {} at {off}: {n} of {} bytes",
                if read { "read" } else { "write" },
                job.bs
            )));
        }
        let h = if read { &job.read_lat } else { &job.write_lat };
        h.borrow_mut().saturating_record(ns.max(1));
    }
    Ok(())
}

struct JobResult {
    read_lat: Histogram<u64>,
    write_lat: Histogram<u64>,
    done: Instant,
}

fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid histogram bounds")
}

fn run_job(
    a: &BlkArgs,
    j: u32,
    file: std::fs::File,
    span_blocks: u64,
    stop: Stop,
    start: &Barrier,
) -> Result<JobResult> {
    let builder = {
        let mut b = tokio_uring::builder();
        b.entries(a.qd.next_power_of_two().max(8));
        b
    };
    let rt = tokio_uring::Runtime::new(&builder)
        .doing(|| "io_uring runtime (is io_uring allowed here?)".into())?;
    rt.block_on(async {
        let file = Rc::new(tokio_uring::fs::File::from_std(file));
        let per_job_seq = span_blocks / u64::from(a.jobs);
        let bufs: Vec<AlignedBuf> = (0..a.qd)
            .map(|t| AlignedBuf::new(a.bs as usize, a.seed ^ (u64::from(j) << 32) ^ u64::from(t)))
            .collect();
        start.wait();
        let job = Rc::new(Job {
            rw: a.rw,
            bs: a.bs,
            span_blocks,
            next_seq: Cell::new(per_job_seq * u64::from(j)),
            rng: RefCell::new(SmallRng::seed_from_u64(a.seed.wrapping_add(u64::from(j)))),
            budget: Cell::new(match stop {
                Stop::Bytes(b) => b,
                Stop::At(_) => 0,
            }),
            deadline: match stop {
                Stop::At(d) => Some(Instant::now() + d),
                Stop::Bytes(_) => None,
            },
            read_lat: RefCell::new(hist()),
            write_lat: RefCell::new(hist()),
        });
        let tasks: Vec<_> = bufs
            .into_iter()
            .map(|buf| tokio_uring::spawn(task(file.clone(), job.clone(), buf)))
            .collect();
        for t in tasks {
            t.await
                .map_err(|_| BenchCmdError::Failed("a load task panicked".into()))??;
        }
        let done = Instant::now();
        let job = Rc::try_unwrap(job).ok().expect("every task has finished");
        Ok(JobResult {
            read_lat: job.read_lat.into_inner(),
            write_lat: job.write_lat.into_inner(),
            done,
        })
    })
}

/// Bytes of `path` (a block device or a regular file).
fn target_bytes(file: &std::fs::File) -> Result<u64> {
    use std::io::Seek;
    let mut f = file;
    f.seek(std::io::SeekFrom::End(0))
        .doing(|| "finding the target's size".into())
}

/// Create a missing file, or extend a short one, writing it out to `size`
/// (a sparse file would serve reads of holes without touching storage).
fn lay_out(path: &Path, size: u64) -> Result<()> {
    use std::io::Write;
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .doing(|| format!("create {}", path.display()))?;
    let have = f
        .metadata()
        .doing(|| format!("stat {}", path.display()))?
        .len();
    if have >= size {
        return Ok(());
    }
    eoutln!("laying out {} to {}", path.display(), ByteSize(size));
    let chunk: Vec<u8> = (0..1u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let mut left = size - have;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        f.write_all(&chunk[..n])
            .doing(|| format!("write {}", path.display()))?;
        left -= n as u64;
    }
    f.sync_all().doing(|| format!("fsync {}", path.display()))
}

fn op_report(h: &Histogram<u64>, bs: u64, secs: f64) -> Option<OpReport> {
    if h.is_empty() {
        return None;
    }
    let us = |v: u64| v as f64 / 1000.0;
    let ios = h.len();
    Some(OpReport {
        ios,
        iops: ios as f64 / secs,
        mib_per_s: (ios * bs) as f64 / secs / f64::from(1u32 << 20),
        mb_per_s: (ios * bs) as f64 / secs / 1e6,
        lat_mean_us: h.mean() / 1000.0,
        lat_p50_us: us(h.value_at_quantile(0.5)),
        lat_p90_us: us(h.value_at_quantile(0.9)),
        lat_p99_us: us(h.value_at_quantile(0.99)),
        lat_p999_us: us(h.value_at_quantile(0.999)),
        lat_p9999_us: us(h.value_at_quantile(0.9999)),
        lat_max_us: us(h.max()),
    })
}

fn table(r: &BlkReport) -> String {
    let mut t = format!(
        "ptsd bench blk {}: rw={} bs={} qd={} jobs={} direct={} span={} time={:.2}s\n",
        r.target,
        r.rw,
        ByteSize(r.bs),
        r.qd,
        r.jobs,
        r.direct,
        ByteSize(r.span_bytes),
        r.seconds
    );
    t += &format!(
        "{:<6} {:>10} {:>11} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}\n",
        "op",
        "ios",
        "IOPS",
        "MiB/s",
        "mean us",
        "p50 us",
        "p90 us",
        "p99 us",
        "p99.9",
        "p99.99",
        "max us"
    );
    for (name, op) in [("read", &r.read), ("write", &r.write)] {
        if let Some(o) = op {
            t += &format!(
                "{:<6} {:>10} {:>11.0} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1}\n",
                name,
                o.ios,
                o.iops,
                o.mib_per_s,
                o.lat_mean_us,
                o.lat_p50_us,
                o.lat_p90_us,
                o.lat_p99_us,
                o.lat_p999_us,
                o.lat_p9999_us,
                o.lat_max_us
            );
        }
    }
    t
}

/// Run `ptsd bench blk`.
pub fn run(a: BlkArgs) -> Result<()> {
    if a.bs == 0 || a.bs % 512 != 0 {
        invalid!("--bs must be a non-zero multiple of 512 (got {})", a.bs);
    }
    if a.qd == 0 || a.qd > 4096 || a.jobs == 0 || a.jobs > 1024 {
        invalid!("--qd must be 1..=4096 and --jobs 1..=1024");
    }
    let is_dev = std::fs::metadata(&a.target)
        .map(|m| m.file_type().is_block_device())
        .unwrap_or(false);
    if !is_dev {
        match (a.target.exists(), a.size) {
            (false, None) => invalid!(
                "{} does not exist: give --size to create it",
                a.target.display()
            ),
            (_, Some(size)) => lay_out(&a.target, size)?,
            (true, None) => {}
        }
    }
    let open = || {
        OpenOptions::new()
            .read(true)
            .write(a.rw.read_pct() < 100)
            .custom_flags(if a.direct { libc::O_DIRECT } else { 0 })
            .open(&a.target)
            .doing(|| {
                format!(
                    "open {}{}",
                    a.target.display(),
                    if a.direct { " with O_DIRECT" } else { "" }
                )
            })
    };
    let first = open()?;
    let whole = target_bytes(&first)?;
    let span = a.size.map_or(whole, |s| s.min(whole));
    let span_blocks = span / a.bs;
    if span_blocks == 0 {
        invalid!(
            "{} has no whole {}-byte block in its first {span} bytes",
            a.target.display(),
            a.bs
        );
    }
    let stop = match (a.seconds, a.size) {
        (Some(s), _) if !(s.is_finite() && s > 0.0) => invalid!("--seconds must be positive"),
        (Some(s), _) => Stop::At(Duration::from_secs_f64(s)),
        (None, Some(size)) => Stop::Bytes(size / a.bs * a.bs),
        (None, None) => Stop::At(Duration::from_secs(10)),
    };
    let files = (0..a.jobs)
        .map(|j| {
            if j == 0 {
                first
                    .try_clone()
                    .doing(|| format!("open {}", a.target.display()))
            } else {
                open()
            }
        })
        .collect::<Result<Vec<_>>>()?;
    let barrier = Arc::new(Barrier::new(a.jobs as usize + 1));
    let results = std::thread::scope(|s| {
        let handles: Vec<_> = files
            .into_iter()
            .enumerate()
            .map(|(j, f)| {
                let (a, barrier) = (&a, &barrier);
                s.spawn(move || run_job(a, j as u32, f, span_blocks, stop, barrier))
            })
            .collect();
        barrier.wait();
        let t0 = Instant::now();
        let r: Vec<Result<JobResult>> = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(BenchCmdError::Failed("a job thread panicked".into())))
            })
            .collect();
        (t0, r)
    });
    let (t0, results) = results;
    let mut read_lat = hist();
    let mut write_lat = hist();
    let mut end = t0;
    for r in results {
        let r = r?;
        read_lat
            .add(&r.read_lat)
            .map_err(BenchCmdError::Histogram)?;
        write_lat
            .add(&r.write_lat)
            .map_err(BenchCmdError::Histogram)?;
        end = end.max(r.done);
    }
    let secs = (end - t0).as_secs_f64().max(1e-9);
    let report = BlkReport {
        target: a.target.display().to_string(),
        rw: a.rw.name(),
        bs: a.bs,
        qd: a.qd,
        jobs: a.jobs,
        direct: a.direct,
        span_bytes: span_blocks * a.bs,
        seconds: secs,
        read: op_report(&read_lat, a.bs, secs),
        write: op_report(&write_lat, a.bs, secs),
    };
    let t = table(&report);
    if a.json {
        eout!("{t}");
        outln!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(BenchCmdError::Json)?
        );
    } else {
        out!("{t}");
    }
    if let Some(path) = &a.plot {
        let read = ptsd_ftl::stats::cdf_points(&read_lat);
        let write = ptsd_ftl::stats::cdf_points(&write_lat);
        let mut curves = Vec::new();
        if !read.is_empty() {
            curves.push(crate::plot::Curve {
                label: "read",
                points: &read,
            });
        }
        if !write.is_empty() {
            curves.push(crate::plot::Curve {
                label: "write",
                points: &write,
            });
        }
        let title = format!(
            "{} {} bs={} qd={} jobs={}",
            report.target,
            report.rw,
            ByteSize(a.bs),
            a.qd,
            a.jobs
        );
        crate::plot::write_cdf_svg(path, &title, "latency (us)", &curves, 0.9)
            .map_err(BenchCmdError::Plot)?;
        eoutln!("wrote {}", path.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rw_syntax() {
        assert_eq!(parse_rw("randrw:70"), Ok(Pattern::RandRw(70)));
        assert_eq!(parse_rw("randrw"), Ok(Pattern::RandRw(50)));
        assert_eq!(parse_rw("read"), Ok(Pattern::Read));
        assert!(parse_rw("randrw:101").is_err());
        assert!(parse_rw("trim").is_err());
    }
}
