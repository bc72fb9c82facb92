//! Runs both workloads on each target and renders the comparison.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde::Serialize;

use super::noopfs::{NoopMount, NoopOptions};
use super::target::{Ext4Loop, SpawnedMount};
use super::{
    run_tokubench, run_varmail, FsBenchError, Result, TokubenchConfig, TokubenchResult,
    VarmailConfig, VarmailResult,
};

/// Name of the ptsd target in reports; ratios are taken against it.
pub const PTSD: &str = "ptsd";
/// Name of the ext4-on-loop target.
pub const EXT4: &str = "ext4";
/// Name of the reference row: a directory on the host's own file system.
pub const HOST: &str = "host-fs";
/// Name of the no-op FUSE target.
pub const NOOP: &str = "noop-fuse";

/// Target: varmail-like ops/s on ptsd at least this many times ext4's.
pub const VARMAIL_TARGET_VS_EXT4: f64 = 1.3;
/// Target: tokubench-like files/s on ptsd at least this share of the no-op FUSE fs's.
pub const TOKUBENCH_TARGET_VS_NOOP: f64 = 0.9;

/// A daemon to spawn that mounts FUSE on `mountpoint` (e.g. `ptsd mount`).
#[derive(Clone, Debug)]
pub struct SpawnSpec {
    /// The program (e.g. the ptsd binary).
    pub program: PathBuf,
    /// Its arguments, mount point included.
    pub args: Vec<OsString>,
    /// Where it mounts (created if missing).
    pub mountpoint: PathBuf,
    /// How long to wait for the mount to appear.
    pub timeout: Duration,
}

/// One file system to measure.
#[derive(Clone, Debug)]
pub enum TargetSpec {
    /// A directory that is already there (any file system, e.g. a ptsd
    /// mount started by hand).
    Dir {
        /// Row label.
        name: String,
        /// The directory.
        path: PathBuf,
    },
    /// ext4 on a loop device over an image of `size` bytes in `image_dir`.
    Ext4Loop {
        /// Where the image file goes (put it on the same disk as the ptsd data).
        image_dir: PathBuf,
        /// Image size in bytes.
        size: u64,
    },
    /// The bench crate's own no-op FUSE file system.
    Noop(NoopOptions),
    /// A spawned FUSE daemon.
    Spawned {
        /// Row label.
        name: String,
        /// What to run.
        spec: SpawnSpec,
    },
}

impl TargetSpec {
    /// The row label of this target.
    pub fn name(&self) -> &str {
        match self {
            TargetSpec::Dir { name, .. } | TargetSpec::Spawned { name, .. } => name,
            TargetSpec::Ext4Loop { .. } => EXT4,
            TargetSpec::Noop(_) => NOOP,
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

    fn teardown(self) -> Result<()> {
        match self {
            Mounted::Dir(_) => Ok(()),
            Mounted::Ext4(m) => m.teardown(),
            Mounted::Noop(m) => m.unmount(),
            Mounted::Spawned(m) => m.stop(),
        }
    }
}

fn set_up(spec: &TargetSpec, scratch: &Path) -> Result<(Mounted, String)> {
    Ok(match spec {
        TargetSpec::Dir { path, .. } => (
            Mounted::Dir(path.clone()),
            format!("directory {}", path.display()),
        ),
        TargetSpec::Ext4Loop { image_dir, size } => {
            let image = image_dir.join(format!("ptsd-bench-ext4-{}.img", std::process::id()));
            let m = Ext4Loop::create(&image, *size, &scratch.join("ext4"))?;
            let what = format!(
                "ext4 on {} over {} ({} MiB)",
                m.device().unwrap_or("?"),
                image.display(),
                size >> 20
            );
            (Mounted::Ext4(m), what)
        }
        TargetSpec::Noop(options) => {
            let dir = scratch.join("noop");
            std::fs::create_dir_all(&dir).map_err(super::error::io_err("mkdir", &dir))?;
            let what = format!(
                "no-op in-memory fuser fs in this process, {} threads, ttl {:?}, keep cache {}, writeback cache {}, default_permissions {}",
                options.threads,
                options.ttl,
                options.keep_cache,
                options.writeback_cache,
                options.default_permissions
            );
            (
                Mounted::Noop(NoopMount::mount(&dir, options.clone())?),
                what,
            )
        }
        TargetSpec::Spawned { spec, .. } => {
            std::fs::create_dir_all(&spec.mountpoint)
                .map_err(super::error::io_err("mkdir", &spec.mountpoint))?;
            let mut cmd = Command::new(&spec.program);
            cmd.args(&spec.args);
            let line = format!("{cmd:?}").replace('"', "");
            (
                Mounted::Spawned(SpawnedMount::start(
                    cmd,
                    &spec.mountpoint,
                    spec.timeout,
                    None,
                )?),
                line,
            )
        }
    })
}

/// Both workloads' parameters and where scratch mounts go.
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
}

/// One target's results (or why it has none).
#[derive(Clone, Debug, Serialize)]
pub struct TargetReport {
    /// Row label.
    pub name: String,
    /// What was mounted, or the command run.
    pub description: String,
    /// The varmail-like result.
    pub varmail: Option<VarmailResult>,
    /// The tokubench-like result.
    pub tokubench: Option<TokubenchResult>,
    /// Errors met (setup, a workload, teardown).
    pub errors: Vec<String>,
}

/// A ratio between two targets and the bar it should clear.
#[derive(Clone, Debug, Serialize)]
pub struct Ratio {
    /// e.g. `varmail ops/s ptsd/ext4`.
    pub what: String,
    /// The ratio.
    pub value: f64,
    /// The target it must reach, if there is one.
    pub target: Option<f64>,
}

/// Everything one `ptsd bench fs` measured.
#[derive(Clone, Debug, Serialize)]
pub struct SuiteReport {
    /// Parameters.
    pub config: SuiteConfig,
    /// One entry per target, in the order run.
    pub targets: Vec<TargetReport>,
    /// ptsd against ext4 and against the no-op FUSE fs.
    pub ratios: Vec<Ratio>,
    /// CPUs online and /proc/loadavg before and after: other work on the
    /// machine moves every figure, so the report says how busy it was.
    pub machine: MachineLoad,
}

/// How busy the machine was around the run.
#[derive(Clone, Debug, Serialize)]
pub struct MachineLoad {
    /// CPUs online.
    pub cpus: usize,
    /// `/proc/loadavg` when the suite started.
    pub loadavg_before: String,
    /// `/proc/loadavg` when it ended.
    pub loadavg_after: String,
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|e| format!("unknown ({e})"))
}

/// Sets up each target in turn, runs the workloads on it, tears it down.
/// A target that fails is reported with its error; the others still run.
/// `scratch` holds mount points (it must exist).
pub fn run_suite(
    targets: &[TargetSpec],
    cfg: &SuiteConfig,
    scratch: &Path,
    mut progress: impl FnMut(&str),
) -> SuiteReport {
    let loadavg_before = loadavg();
    let mut reports = Vec::new();
    for spec in targets {
        let name = spec.name().to_string();
        // Start every target with nothing left to write back from the one
        // before (ext4's image, host-fs's files): otherwise the kernel's
        // flusher competes with whichever target comes next.
        // SAFETY: sync(2) has no preconditions.
        unsafe { libc::sync() };
        progress(&format!("[{name}] setting up"));
        let mut report = TargetReport {
            name: name.clone(),
            description: String::new(),
            varmail: None,
            tokubench: None,
            errors: Vec::new(),
        };
        match set_up(spec, scratch) {
            Err(e) => report.errors.push(format!("setup: {e}")),
            Ok((mounted, description)) => {
                report.description = description;
                progress(&format!("[{name}] {}", report.description));
                if !cfg.skip_varmail {
                    progress(&format!("[{name}] varmail-like"));
                    match run_varmail(mounted.dir(), &cfg.varmail) {
                        Ok(r) => report.varmail = Some(r),
                        Err(e) => report.errors.push(format!("varmail: {e}")),
                    }
                }
                if !cfg.skip_tokubench {
                    progress(&format!("[{name}] tokubench-like"));
                    match run_tokubench(mounted.dir(), &cfg.tokubench) {
                        Ok(r) => report.tokubench = Some(r),
                        Err(e) => report.errors.push(format!("tokubench: {e}")),
                    }
                }
                if let Err(e) = mounted.teardown() {
                    report.errors.push(format!("teardown: {e}"));
                }
            }
        }
        for e in &report.errors {
            progress(&format!("[{name}] error: {e}"));
        }
        reports.push(report);
    }
    let ratios = ratios(&reports);
    SuiteReport {
        config: cfg.clone(),
        targets: reports,
        ratios,
        machine: MachineLoad {
            cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
            loadavg_before,
            loadavg_after: loadavg(),
        },
    }
}

/// Median of the values (mean of the middle two for an even count).
fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// A target's `metric`: the median over its rows (a target listed several
/// times, e.g. with `--rounds`, is measured several times and compared by
/// its median, so one disturbed run does not decide).
fn median_rate(
    reports: &[TargetReport],
    name: &str,
    metric: impl Fn(&TargetReport) -> Option<f64>,
) -> Option<f64> {
    median(
        reports
            .iter()
            .filter(|r| r.name == name)
            .filter_map(metric)
            .collect(),
    )
}

/// A target's varmail-like ops/s (median over its rows).
fn varmail_rate(reports: &[TargetReport], name: &str) -> Option<f64> {
    median_rate(reports, name, |r| r.varmail.as_ref().map(|v| v.ops_per_sec))
}

/// A target's tokubench-like files/s (median over its rows).
fn toku_rate(reports: &[TargetReport], name: &str) -> Option<f64> {
    median_rate(reports, name, |r| {
        r.tokubench.as_ref().map(|t| t.files_per_sec)
    })
}

fn ratios(reports: &[TargetReport]) -> Vec<Ratio> {
    let mut out = Vec::new();
    let mut push = |what: &str, a: Option<f64>, b: Option<f64>, target: Option<f64>| {
        if let (Some(a), Some(b)) = (a, b) {
            if b > 0.0 {
                out.push(Ratio {
                    what: what.into(),
                    value: a / b,
                    target,
                });
            }
        }
    };
    push(
        "varmail ops/s ptsd/ext4",
        varmail_rate(reports, PTSD),
        varmail_rate(reports, EXT4),
        Some(VARMAIL_TARGET_VS_EXT4),
    );
    push(
        "varmail ops/s ptsd/noop",
        varmail_rate(reports, PTSD),
        varmail_rate(reports, NOOP),
        None,
    );
    push(
        "varmail ops/s ptsd/host-fs",
        varmail_rate(reports, PTSD),
        varmail_rate(reports, HOST),
        None,
    );
    push(
        "varmail ops/s noop/ext4",
        varmail_rate(reports, NOOP),
        varmail_rate(reports, EXT4),
        None,
    );
    push(
        "tokubench files/s ptsd/noop",
        toku_rate(reports, PTSD),
        toku_rate(reports, NOOP),
        Some(TOKUBENCH_TARGET_VS_NOOP),
    );
    push(
        "tokubench files/s ptsd/ext4",
        toku_rate(reports, PTSD),
        toku_rate(reports, EXT4),
        None,
    );
    push(
        "tokubench files/s noop/ext4",
        toku_rate(reports, NOOP),
        toku_rate(reports, EXT4),
        None,
    );
    out
}

fn ratio_cell(value: f64, base: Option<f64>) -> String {
    match base {
        Some(b) if b > 0.0 => format!("{:.2}x", value / b),
        _ => "-".into(),
    }
}

/// The report as a plain-text table.
pub fn render_table(report: &SuiteReport) -> String {
    let mut s = String::new();
    let v = &report.config.varmail;
    let t = &report.config.tokubench;
    let _ = writeln!(
        s,
        "varmail-like: {} threads x {} files, appends 1..{} B, {:?}, {:?}, seed {}",
        v.threads, v.files_per_thread, v.append_max, v.sync, v.bound, v.seed
    );
    let _ = writeln!(
        s,
        "tokubench-like: {} threads, {} B files, {} per dir, {:?}, syncfs at end: {}",
        t.threads, t.file_size, t.files_per_dir, t.bound, t.sync_at_end
    );
    let m = &report.machine;
    let _ = writeln!(
        s,
        "machine: {} CPUs, load average {} before, {} after",
        m.cpus, m.loadavg_before, m.loadavg_after
    );
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "{:<10} {:<10} {:>11} {:>10} {:>10} {:>10} {:>9} {:>9}",
        "workload", "target", "ops/s", "fsync p50", "fsync p99", "ops", "vs ext4", "vs noop"
    );
    let reports = &report.targets;
    let (ve, vn) = (varmail_rate(reports, EXT4), varmail_rate(reports, NOOP));
    for r in reports {
        match &r.varmail {
            Some(m) => {
                let _ = writeln!(
                    s,
                    "{:<10} {:<10} {:>11.0} {:>8.0}us {:>8.0}us {:>10} {:>9} {:>9}",
                    "varmail",
                    r.name,
                    m.ops_per_sec,
                    m.fsync.p50_us,
                    m.fsync.p99_us,
                    m.ops,
                    ratio_cell(m.ops_per_sec, ve),
                    ratio_cell(m.ops_per_sec, vn)
                );
            }
            None if report.config.skip_varmail => {}
            None => {
                let _ = writeln!(s, "{:<10} {:<10} {:>11}", "varmail", r.name, "failed");
            }
        }
    }
    let _ = writeln!(
        s,
        "{:<10} {:<10} {:>11} {:>10} {:>10} {:>10} {:>9} {:>9}",
        "", "", "files/s", "w/ syncfs", "create p99", "files", "vs ext4", "vs noop"
    );
    let (te, tn) = (toku_rate(reports, EXT4), toku_rate(reports, NOOP));
    for r in reports {
        match &r.tokubench {
            Some(m) => {
                let _ = writeln!(
                    s,
                    "{:<10} {:<10} {:>11.0} {:>10.0} {:>8.0}us {:>10} {:>9} {:>9}",
                    "tokubench",
                    r.name,
                    m.files_per_sec,
                    m.files_per_sec_incl_sync,
                    m.create.p99_us,
                    m.files,
                    ratio_cell(m.files_per_sec, te),
                    ratio_cell(m.files_per_sec, tn)
                );
            }
            None if report.config.skip_tokubench => {}
            None => {
                let _ = writeln!(s, "{:<10} {:<10} {:>11}", "tokubench", r.name, "failed");
            }
        }
    }
    if !report.ratios.is_empty() {
        let _ = writeln!(s);
    }
    for r in &report.ratios {
        let verdict = match r.target {
            Some(t) if r.value >= t => format!("  (target >= {t}x: met)"),
            Some(t) => format!("  (target >= {t}x: MISSED)"),
            None => String::new(),
        };
        let _ = writeln!(s, "{:<30} {:>6.2}x{verdict}", r.what, r.value);
    }
    for r in reports {
        for e in &r.errors {
            let _ = writeln!(s, "{}: {e}", r.name);
        }
    }
    s
}

/// Fails with the first error any target met (for a non-zero exit status).
pub fn first_error(report: &SuiteReport) -> Result<()> {
    match report
        .targets
        .iter()
        .find_map(|t| t.errors.first().map(|e| (t.name.clone(), e.clone())))
    {
        Some((target, detail)) => Err(FsBenchError::TargetFailed { target, detail }),
        None => Ok(()),
    }
}
