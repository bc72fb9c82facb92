// Over 800 lines: the round loop, each target's setup and teardown, and the run records share one suite state; the report lives apart.
//! Runs both workloads on each target, in rounds, and collects what each
//! run measured; [`report`](super::report) turns the runs into the table.
//!
//! A round runs every target once, in an order rotated by one each round,
//! so no target always runs first (on a cold machine) or last (after the
//! others' writeback). For each target: set up (format, mount), then for
//! each workload `sync`, a settle pause, counters read, the timed run,
//! counters read again; then tear down.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde::Serialize;

use super::bulk::{run_bulk_observed, BulkConfig, BulkPart, BulkResult};
use super::devstat::{FlushCounter, ProcCost};
use super::noopfs::{NoopMount, NoopOptions};
use super::target::{remove_path, Ext4Loop, Ext4Setup, SpawnedMount};
use super::{
    run_tokubench_observed, run_varmail_observed, Phase, Result, TokubenchConfig, TokubenchResult,
    VarmailConfig, VarmailResult,
};

/// ptsd over /dev/fuse (fuser, `-o nouring`), its journal on /dev/shm
/// (process-crash class).
pub const PTSD: &str = "ptsd";
/// ptsd over FUSE io_uring (`-o uring`), its journal on /dev/shm
/// (process-crash class).
pub const PTSD_URING: &str = "ptsd-uring";
/// ptsd over FUSE io_uring busy-polling its queues (`-o uring_poll`).
pub const PTSD_URING_POLL: &str = "ptsd-uring-poll";
/// ptsd, its journal a disk file in msync mode (power-loss class).
pub const PTSD_DURABLE: &str = "ptsd-durable";
/// ext4 on a loop over a disk image (power-loss class).
pub const EXT4: &str = "ext4";
/// ext4 on a loop over a /dev/shm image (process-crash class).
pub const EXT4_SHM: &str = "ext4-shm";
/// ext4 `data=journal`, external journal on a /dev/shm loop, data on a
/// disk image: the kernel's version of ptsd's design (process-crash class).
pub const EXT4_RAMJOURNAL: &str = "ext4-ramjournal";
/// A directory on the host's own file system (power-loss class).
pub const HOST: &str = "host-fs";
/// The no-op FUSE fs over /dev/fuse: the ceiling.
pub const NOOP: &str = "noop-fuse";
/// The no-op FUSE fs over io_uring: the ceiling of the io_uring transport.
pub const NOOP_URING: &str = "noop-fuse-uring";

/// True for the targets served over FUSE io_uring (named `*-uring*`): a
/// FUSE subject is held against the ceiling of its own transport.
pub fn over_uring(name: &str) -> bool {
    name.contains("-uring")
}

/// What an acknowledged fsync survives: only targets of one class are
/// compared with each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Durability {
    /// fsync ends in RAM (tmpfs, the kernel's memory): survives a crash of
    /// the process, not a power cut or a kernel crash.
    ProcessCrash,
    /// fsync reaches a device cache flush: survives a power cut.
    PowerLoss,
    /// Keeps nothing: the no-op ceiling.
    None,
    /// Not declared (a `--dir` target): compared with nothing.
    Unknown,
}

impl Durability {
    /// Short label for tables.
    pub fn label(self) -> &'static str {
        match self {
            Durability::ProcessCrash => "process-crash",
            Durability::PowerLoss => "power-loss",
            Durability::None => "none",
            Durability::Unknown => "unknown",
        }
    }

    /// What the class means.
    pub fn meaning(self) -> &'static str {
        match self {
            Durability::ProcessCrash => {
                "fsync ends in RAM (tmpfs, kernel memory): survives a process crash, not a power cut"
            }
            Durability::PowerLoss => "fsync reaches a device cache flush: survives a power cut",
            Durability::None => "keeps nothing (no-op): a ceiling, not an anchor",
            Durability::Unknown => "not declared: compared with nothing",
        }
    }

    /// Parses a label (as printed by [`label`](Self::label)).
    pub fn parse(s: &str) -> Option<Self> {
        [
            Durability::ProcessCrash,
            Durability::PowerLoss,
            Durability::None,
            Durability::Unknown,
        ]
        .into_iter()
        .find(|d| d.label() == s)
    }
}

/// What a target is in the comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// Measured against the anchors of its class (and the ceiling if FUSE).
    Subject,
    /// A kernel file system of a class: what subjects of that class are
    /// compared with.
    Anchor,
    /// The FUSE ceiling: what no FUSE file system should beat.
    Ceiling,
    /// Shown, compared with nothing.
    Reference,
}

/// A daemon to spawn that mounts FUSE on `mountpoint` (e.g. `ptsd mount`).
#[derive(Clone, Debug, Serialize)]
pub struct SpawnSpec {
    /// The program (e.g. the ptsd binary).
    pub program: PathBuf,
    /// Its arguments, mount point included.
    pub args: Vec<OsString>,
    /// Where it mounts (created if missing).
    pub mountpoint: PathBuf,
    /// How long to wait for the mount to appear.
    pub timeout: Duration,
    /// State the daemon keeps between mounts (an image, a journal file),
    /// removed before each start: every round begins on a new file system,
    /// as the ext4 targets are formatted anew each round.
    pub fresh: Vec<PathBuf>,
}

/// How a target is set up.
#[derive(Clone, Debug)]
pub enum Setup {
    /// A directory that is already there (any file system).
    Dir(PathBuf),
    /// ext4 on loop devices (images kept across rounds, reformatted each).
    Ext4(Ext4Setup),
    /// The bench crate's no-op FUSE fs, served by this process.
    Noop(NoopOptions),
    /// A spawned FUSE daemon.
    Spawned(SpawnSpec),
}

/// One file system to measure.
#[derive(Clone, Debug)]
pub struct TargetSpec {
    /// Row label.
    pub name: String,
    /// What its fsync survives.
    pub durability: Durability,
    /// Its part in the comparison.
    pub role: Role,
    /// Served by a FUSE daemon (compared with the FUSE ceiling).
    pub fuse: bool,
    /// The daemon counts its requests per opcode into this file
    /// ([`ptsd_fs::opcount`]).
    pub op_counts: Option<PathBuf>,
    /// How to set it up.
    pub setup: Setup,
}

impl TargetSpec {
    /// A directory that is already there, compared with nothing unless a
    /// class is given.
    pub fn dir(name: &str, path: PathBuf, durability: Durability) -> Self {
        TargetSpec {
            name: name.into(),
            durability,
            role: if durability == Durability::Unknown {
                Role::Reference
            } else {
                Role::Subject
            },
            fuse: false,
            op_counts: None,
            setup: Setup::Dir(path),
        }
    }
}

/// A mounted target; dropping it tears it down.
enum Mounted {
    Dir(PathBuf),
    Ext4(Ext4Loop),
    Noop(NoopMount),
    Spawned(SpawnedMount),
}

impl Mounted {
    fn dir(&self) -> &Path {
        match self {
            Mounted::Dir(p) => p,
            Mounted::Ext4(m) => m.dir(),
            Mounted::Noop(m) => m.dir(),
            Mounted::Spawned(m) => m.dir(),
        }
    }

    /// The FUSE daemon's process, when it is one of its own.
    fn daemon_pid(&self) -> Option<u32> {
        match self {
            Mounted::Spawned(m) => m.pid(),
            _ => None,
        }
    }

    fn loop_devices(&self) -> &[String] {
        match self {
            Mounted::Ext4(m) => m.devices(),
            _ => &[],
        }
    }

    fn teardown(self) -> Result<()> {
        match self {
            Mounted::Dir(_) => Ok(()),
            Mounted::Ext4(m) => m.teardown(),
            Mounted::Noop(m) => m.unmount(),
            Mounted::Spawned(m) => m.stop(),
        }
    }
}

/// This process's nice value.
pub fn current_nice() -> i32 {
    // SAFETY: getpriority has no memory arguments; errno is cleared first
    // because -1 is also a valid result.
    unsafe {
        *libc::__errno_location() = 0;
        libc::getpriority(libc::PRIO_PROCESS, 0)
    }
}

fn set_up(spec: &TargetSpec, scratch: &Path) -> Result<(Mounted, String)> {
    Ok(match &spec.setup {
        Setup::Dir(path) => (
            Mounted::Dir(path.clone()),
            format!("directory {}", path.display()),
        ),
        Setup::Ext4(setup) => {
            let m = Ext4Loop::create(setup, &scratch.join(&spec.name))?;
            let what = match &setup.journal {
                None => format!(
                    "ext4 on {} over {} ({} MiB)",
                    m.devices().join(", "),
                    setup.image.display(),
                    setup.size >> 20
                ),
                Some((j, jsize)) => format!(
                    "ext4 data=journal,barrier=0 on {} over {} ({} MiB), external journal over {} ({} MiB)",
                    m.devices().join(" + "),
                    setup.image.display(),
                    setup.size >> 20,
                    j.display(),
                    jsize >> 20
                ),
            };
            (Mounted::Ext4(m), what)
        }
        Setup::Noop(options) => {
            let dir = scratch.join(&spec.name);
            std::fs::create_dir_all(&dir).map_err(super::error::io_err("mkdir", &dir))?;
            let what = format!(
                "no-op in-memory FUSE fs in this process, {} threads, writeback cache {}",
                options.threads, options.writeback_cache
            );
            let options = NoopOptions {
                op_counts: spec.op_counts.clone(),
                ..options.clone()
            };
            (Mounted::Noop(NoopMount::mount(&dir, options)?), what)
        }
        Setup::Spawned(s) => {
            std::fs::create_dir_all(&s.mountpoint)
                .map_err(super::error::io_err("mkdir", &s.mountpoint))?;
            for path in &s.fresh {
                remove_path(path)?;
            }
            // Every target gets the scheduling priority of the kernel's own
            // threads (jbd2, loop workers, flushers: nice 0): if the bench
            // runs niced, its daemons are put back to 0.
            let nice = current_nice();
            let mut cmd = if nice != 0 {
                let mut c = Command::new("nice");
                c.arg("-n").arg((-nice).to_string()).arg(&s.program);
                c
            } else {
                Command::new(&s.program)
            };
            cmd.args(&s.args);
            let line = format!("{cmd:?}").replace('"', "");
            (
                Mounted::Spawned(SpawnedMount::start(cmd, &s.mountpoint, s.timeout, None)?),
                line,
            )
        }
    })
}

/// Both workloads' parameters and the rounds.
#[derive(Clone, Debug, Serialize)]
pub struct SuiteConfig {
    /// The varmail-like run on every target.
    pub varmail: VarmailConfig,
    /// The tokubench-like run on every target.
    pub tokubench: TokubenchConfig,
    /// Skip the varmail-like workload.
    pub skip_varmail: bool,
    /// Skip the tokubench-like workload.
    pub skip_tokubench: bool,
    /// The bulk-data run on every target.
    pub bulk: BulkConfig,
    /// Skip the bulk-data workload.
    pub skip_bulk: bool,
    /// Rounds (every target once per round).
    pub rounds: usize,
    /// Pause after `sync`, right before each timed run.
    pub settle: Duration,
    /// The disk whose flushes every fsync is charged with (the one under
    /// the work directory); None if there is no such block device.
    pub disk: Option<FlushCounter>,
}

/// Device flushes and FUSE requests during one timed run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Counters {
    /// Flushes completed by the disk under test.
    pub disk_flushes: Option<u64>,
    /// Flushes completed by the target's own loop devices, by name.
    pub loop_flushes: Vec<(String, u64)>,
    /// Requests the FUSE daemon received, per opcode (nonzero only).
    pub requests: Vec<(String, u64)>,
    /// CPU seconds (user + system) the spawned daemon used; what polling
    /// costs (`ptsd mount -o uring_poll`).
    pub daemon_cpu_s: Option<f64>,
    /// What the FUSE daemon process spent (a spawned daemon only).
    pub daemon: Option<ProcCost>,
}

/// One workload run on one target in one round.
#[derive(Clone, Debug, Serialize)]
pub struct WorkloadRun<T> {
    /// What the workload measured.
    pub result: T,
    /// Flushes and requests during it.
    pub counters: Counters,
}

/// One target in one round.
#[derive(Clone, Debug, Serialize)]
pub struct TargetRun {
    /// Round (0-based).
    pub round: usize,
    /// Position in the round's order (0-based).
    pub position: usize,
    /// Row label.
    pub name: String,
    /// What was mounted, or the command run.
    pub description: String,
    /// The varmail-like run.
    pub varmail: Option<WorkloadRun<VarmailResult>>,
    /// The tokubench-like run.
    pub tokubench: Option<WorkloadRun<TokubenchResult>>,
    /// The bulk-data run, with the counters of each of its parts.
    pub bulk: Option<WorkloadRun<BulkResult>>,
    /// Counters of the bulk run's parts (sequential write, read, random read).
    pub bulk_parts: Vec<(BulkPart, Counters)>,
    /// Errors met (setup, a workload, teardown).
    pub errors: Vec<String>,
}

/// A target as the report shows it.
#[derive(Clone, Debug, Serialize)]
pub struct TargetInfo {
    /// Row label.
    pub name: String,
    /// What its fsync survives.
    pub durability: Durability,
    /// Its part in the comparison.
    pub role: Role,
    /// Served by FUSE.
    pub fuse: bool,
}

/// Counter readings at one moment.
struct Snapshot {
    cpu: Option<f64>,
    disk: Option<u64>,
    loops: Vec<(String, Option<u64>)>,
    requests: Option<Vec<u64>>,
    daemon: Option<ProcCost>,
}

/// CPU seconds (utime + stime, all threads) of process `pid`.
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesized name; utime and stime are the 14th
    // and 15th of the line, the 12th and 13th after it.
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no memory arguments.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (hz > 0).then(|| ticks as f64 / hz as f64)
}

/// What a run watches besides the disk: the target's loop devices, its
/// request-count file and its daemon.
#[derive(Clone, Copy)]
struct Watch<'a> {
    loops: &'a [FlushCounter],
    op_counts: Option<&'a Path>,
    pid: Option<u32>,
}

fn snapshot(cfg: &SuiteConfig, w: Watch<'_>) -> Snapshot {
    Snapshot {
        cpu: w.pid.and_then(cpu_seconds),
        disk: cfg.disk.as_ref().and_then(FlushCounter::read),
        loops: w.loops.iter().map(|l| (l.name.clone(), l.read())).collect(),
        requests: w
            .op_counts
            .and_then(|p| ptsd_fs::opcount::read_counts(p).ok()),
        daemon: w.pid.and_then(ProcCost::read),
    }
}

fn counters(a: &Snapshot, b: &Snapshot) -> Counters {
    Counters {
        disk_flushes: a.disk.zip(b.disk).map(|(a, b)| b.saturating_sub(a)),
        loop_flushes: a
            .loops
            .iter()
            .zip(&b.loops)
            .filter_map(|((n, a), (_, b))| Some((n.clone(), (*b)?.saturating_sub((*a)?))))
            .collect(),
        daemon_cpu_s: a.cpu.zip(b.cpu).map(|(a, b)| (b - a).max(0.0)),
        requests: match (&a.requests, &b.requests) {
            (Some(a), Some(b)) => ptsd_fs::opcount::OP_NAMES
                .iter()
                .zip(a.iter().zip(b))
                .map(|(n, (a, b))| (n.to_string(), b.saturating_sub(*a)))
                .filter(|(_, d)| *d > 0)
                .collect(),
            _ => Vec::new(),
        },
        daemon: a.daemon.zip(b.daemon).map(|(a, b)| b.since(&a)),
    }
}

/// Syncs, settles, reads the counters at [`Phase::Start`]; reads them again
/// at [`Phase::End`].
fn observer<'a>(
    cfg: &'a SuiteConfig,
    watch: Watch<'a>,
    out: &'a mut Option<Counters>,
) -> impl FnMut(Phase) + 'a {
    let mut start = None;
    move |phase| match phase {
        Phase::Start => {
            // SAFETY: sync(2) has no preconditions.
            unsafe { libc::sync() };
            std::thread::sleep(cfg.settle);
            start = Some(snapshot(cfg, watch));
        }
        Phase::End => {
            if let Some(s) = &start {
                *out = Some(counters(s, &snapshot(cfg, watch)));
            }
        }
    }
}

/// Runs both workloads on one set-up target.
fn run_workloads(spec: &TargetSpec, mounted: &Mounted, cfg: &SuiteConfig, run: &mut TargetRun) {
    let loops: Vec<FlushCounter> = mounted
        .loop_devices()
        .iter()
        .filter_map(|d| FlushCounter::device(d))
        .collect();
    let watch = Watch {
        loops: &loops,
        op_counts: spec.op_counts.as_deref(),
        pid: mounted.daemon_pid(),
    };
    if !cfg.skip_varmail {
        let mut c = None;
        let r = run_varmail_observed(
            mounted.dir(),
            &cfg.varmail,
            &mut observer(cfg, watch, &mut c),
        );
        match r {
            Ok(result) => {
                run.varmail = Some(WorkloadRun {
                    result,
                    counters: c.unwrap_or_default(),
                })
            }
            Err(e) => run
                .errors
                .push(format!("varmail: {}", ptsd_blockdev::ErrorChain(&e))),
        }
    }
    if !cfg.skip_tokubench {
        let mut c = None;
        let r = run_tokubench_observed(
            mounted.dir(),
            &cfg.tokubench,
            &mut observer(cfg, watch, &mut c),
        );
        match r {
            Ok(result) => {
                run.tokubench = Some(WorkloadRun {
                    result,
                    counters: c.unwrap_or_default(),
                })
            }
            Err(e) => run
                .errors
                .push(format!("tokubench: {}", ptsd_blockdev::ErrorChain(&e))),
        }
    }
    if !cfg.skip_bulk {
        let mut parts = Vec::new();
        let mut current: Option<(BulkPart, Snapshot)> = None;
        let r = run_bulk_observed(mounted.dir(), &cfg.bulk, &mut |part, phase| match phase {
            Phase::Start => {
                // SAFETY: sync(2) has no preconditions.
                unsafe { libc::sync() };
                std::thread::sleep(cfg.settle);
                current = Some((part, snapshot(cfg, watch)));
            }
            Phase::End => {
                if let Some((p, s)) = current.take() {
                    parts.push((p, counters(&s, &snapshot(cfg, watch))));
                }
            }
        });
        match r {
            Ok(result) => {
                let mut all = Counters::default();
                for (_, c) in &parts {
                    all = all.plus(c);
                }
                run.bulk = Some(WorkloadRun {
                    result,
                    counters: all,
                });
                run.bulk_parts = parts;
            }
            Err(e) => run
                .errors
                .push(format!("bulk: {}", ptsd_blockdev::ErrorChain(&e))),
        }
    }
}

impl Counters {
    /// Both runs' counts added (for a workload timed in parts).
    fn plus(&self, o: &Counters) -> Counters {
        let add = |a: &[(String, u64)], b: &[(String, u64)]| {
            let mut out = a.to_vec();
            for (n, v) in b {
                match out.iter_mut().find(|(m, _)| m == n) {
                    Some((_, x)) => *x += v,
                    None => out.push((n.clone(), *v)),
                }
            }
            out
        };
        Counters {
            disk_flushes: match (self.disk_flushes, o.disk_flushes) {
                (None, None) => None,
                (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
            },
            loop_flushes: add(&self.loop_flushes, &o.loop_flushes),
            daemon_cpu_s: match (self.daemon_cpu_s, o.daemon_cpu_s) {
                (None, None) => None,
                (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
            },
            requests: add(&self.requests, &o.requests),
            daemon: match (self.daemon, o.daemon) {
                (None, None) => None,
                (a, b) => {
                    let (a, b) = (a.unwrap_or_default(), b.unwrap_or_default());
                    Some(ProcCost {
                        voluntary_ctxt: a.voluntary_ctxt + b.voluntary_ctxt,
                        nonvoluntary_ctxt: a.nonvoluntary_ctxt + b.nonvoluntary_ctxt,
                        syscr: a.syscr + b.syscr,
                        syscw: a.syscw + b.syscw,
                    })
                }
            },
        }
    }
}

/// The order of round `round`: the targets rotated left by `round`.
pub fn round_order(n: usize, round: usize) -> Vec<usize> {
    (0..n).map(|i| (i + round) % n.max(1)).collect()
}

/// Everything one suite run measured.
#[derive(Clone, Debug, Serialize)]
pub struct SuiteRuns {
    /// The targets, in the order given.
    pub targets: Vec<TargetInfo>,
    /// Every (round, target) run, in the order run.
    pub runs: Vec<TargetRun>,
    /// How busy the machine was.
    pub machine: MachineLoad,
}

/// How busy the machine was around the run, and at what priority.
#[derive(Clone, Debug, Serialize)]
pub struct MachineLoad {
    /// CPUs online.
    pub cpus: usize,
    /// `/proc/loadavg` when the suite started.
    pub loadavg_before: String,
    /// `/proc/loadavg` when it ended.
    pub loadavg_after: String,
    /// The bench's nice value (its spawned daemons run at 0, as the
    /// kernel's threads do).
    pub nice: i32,
    /// `/proc/self/autogroup` (an autogroup nice other than 0 is not
    /// shared by kernel threads).
    pub autogroup: String,
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|e| format!("unknown ({e})"))
}

/// Runs `cfg.rounds` rounds over `targets`. A target that fails is reported
/// with its error; the others still run. `scratch` holds mount points (it
/// must exist).
pub fn run_suite(
    targets: &[TargetSpec],
    cfg: &SuiteConfig,
    scratch: &Path,
    mut progress: impl FnMut(&str),
) -> SuiteRuns {
    let loadavg_before = loadavg();
    let mut runs = Vec::new();
    for round in 0..cfg.rounds.max(1) {
        for (position, i) in round_order(targets.len(), round).into_iter().enumerate() {
            let spec = &targets[i];
            let name = spec.name.clone();
            progress(&format!(
                "[round {}/{} {name}] setting up",
                round + 1,
                cfg.rounds
            ));
            let mut run = TargetRun {
                round,
                position,
                name: name.clone(),
                description: String::new(),
                varmail: None,
                tokubench: None,
                bulk: None,
                bulk_parts: Vec::new(),
                errors: Vec::new(),
            };
            match set_up(spec, scratch) {
                Err(e) => run
                    .errors
                    .push(format!("setup: {}", ptsd_blockdev::ErrorChain(&e))),
                Ok((mounted, description)) => {
                    run.description = description;
                    progress(&format!("[round {} {name}] {}", round + 1, run.description));
                    run_workloads(spec, &mounted, cfg, &mut run);
                    if let Err(e) = mounted.teardown() {
                        run.errors
                            .push(format!("teardown: {}", ptsd_blockdev::ErrorChain(&e)));
                    }
                }
            }
            if let Some(v) = &run.varmail {
                progress(&format!(
                    "[round {} {name}] varmail {:.0} ops/s, fsync p50 {:.0} us",
                    round + 1,
                    v.result.ops_per_sec,
                    v.result.fsync.p50_us
                ));
            }
            if let Some(t) = &run.tokubench {
                progress(&format!(
                    "[round {} {name}] tokubench {:.0} files/s",
                    round + 1,
                    t.result.files_per_sec
                ));
            }
            if let Some(b) = &run.bulk {
                progress(&format!(
                    "[round {} {name}] bulk write+fsync {:.0} MB/s, cold read {:.0} MB/s, 4 KiB random read {:.0}/s",
                    round + 1,
                    b.result.write_mb_per_sec,
                    b.result.read_mb_per_sec,
                    b.result.rand_iops
                ));
            }
            for e in &run.errors {
                progress(&format!("[round {} {name}] error: {e}", round + 1));
            }
            runs.push(run);
        }
    }
    SuiteRuns {
        targets: targets
            .iter()
            .map(|t| TargetInfo {
                name: t.name.clone(),
                durability: t.durability,
                role: t.role,
                fuse: t.fuse,
            })
            .collect(),
        runs,
        machine: MachineLoad {
            cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
            loadavg_before,
            loadavg_after: loadavg(),
            nice: current_nice(),
            autogroup: std::fs::read_to_string("/proc/self/autogroup")
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_rotate_the_order() {
        assert_eq!(round_order(4, 0), vec![0, 1, 2, 3]);
        assert_eq!(round_order(4, 1), vec![1, 2, 3, 0]);
        assert_eq!(round_order(4, 5), vec![1, 2, 3, 0]);
        // Over n rounds each target runs once in each position.
        for pos in 0..3 {
            let mut at: Vec<usize> = (0..3).map(|r| round_order(3, r)[pos]).collect();
            at.sort();
            assert_eq!(at, vec![0, 1, 2]);
        }
    }

    #[test]
    fn classes_round_trip_their_labels() {
        for d in [
            Durability::ProcessCrash,
            Durability::PowerLoss,
            Durability::None,
            Durability::Unknown,
        ] {
            assert_eq!(Durability::parse(d.label()), Some(d));
        }
        assert_eq!(Durability::parse("bogus"), None);
    }

    #[test]
    fn counters_are_differences() {
        let a = Snapshot {
            cpu: Some(1.5),
            disk: Some(10),
            loops: vec![("loop0".into(), Some(5))],
            requests: Some(vec![1; ptsd_fs::opcount::OPS]),
            daemon: None,
        };
        let mut req = vec![1; ptsd_fs::opcount::OPS];
        req[0] = 4;
        let b = Snapshot {
            cpu: Some(2.0),
            disk: Some(13),
            loops: vec![("loop0".into(), Some(9))],
            requests: Some(req),
            daemon: None,
        };
        let c = counters(&a, &b);
        assert_eq!(c.disk_flushes, Some(3));
        assert_eq!(c.daemon_cpu_s, Some(0.5));
        // This process's own CPU time reads (and only grows).
        let me = cpu_seconds(std::process::id()).unwrap();
        assert!(me >= 0.0 && cpu_seconds(std::process::id()).unwrap() >= me);
        assert_eq!(c.loop_flushes, vec![("loop0".to_string(), 4)]);
        assert_eq!(
            c.requests,
            vec![(ptsd_fs::opcount::OP_NAMES[0].to_string(), 3)]
        );
    }
}
