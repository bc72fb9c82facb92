// Over 800 lines: the table, the JSON and the verdicts read the same per-round data; splitting them would pass it through three files.
//! From the suite's runs to the comparison: per-target medians and spread,
//! ratios paired per round within a durability class (or against the FUSE
//! ceiling), goals judged on the median, and the table.
//!
//! Which pairs are compared follows from the targets' declared roles and
//! classes, not from their names: every subject against every anchor of its
//! class, and every FUSE subject against the ceiling. A new target (say a
//! ptsd over FUSE io_uring) declares its class and role and is compared
//! like the others; [`GOALS`] only adds bars to some of those pairs.

use std::fmt::Write as _;

use serde::Serialize;

use super::suite::{
    over_uring, Durability, MachineLoad, Role, SuiteConfig, SuiteRuns, TargetInfo, TargetRun, EXT4,
    EXT4_RAMJOURNAL, EXT4_SHM, NOOP, PTSD, PTSD_DURABLE, PTSD_URING,
};
use super::{FsBenchError, Result};

/// A figure of one target's run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Metric {
    /// varmail-like ops/s.
    VarmailOps,
    /// varmail-like fsync latency, median.
    VarmailFsyncP50,
    /// tokubench-like files/s (creates, before the final syncfs).
    TokubenchFiles,
    /// Bulk sequential write + fsync, MB/s.
    BulkWrite,
    /// Bulk cold sequential read, MB/s.
    BulkRead,
    /// Bulk cold 4 KiB random reads/s.
    BulkRandRead,
}

impl Metric {
    fn label(self) -> &'static str {
        match self {
            Metric::VarmailOps => "varmail ops/s",
            Metric::VarmailFsyncP50 => "varmail fsync p50",
            Metric::TokubenchFiles => "tokubench files/s",
            Metric::BulkWrite => "seq write MB/s",
            Metric::BulkRead => "cold seq read MB/s",
            Metric::BulkRandRead => "4k rand read/s",
        }
    }

    fn value(self, run: &TargetRun) -> Option<f64> {
        match self {
            Metric::VarmailOps => run.varmail.as_ref().map(|v| v.result.ops_per_sec),
            Metric::VarmailFsyncP50 => run
                .varmail
                .as_ref()
                .filter(|v| v.result.fsync.count > 0)
                .map(|v| v.result.fsync.p50_us),
            Metric::TokubenchFiles => run.tokubench.as_ref().map(|t| t.result.files_per_sec),
            Metric::BulkWrite => run.bulk.as_ref().map(|b| b.result.write_mb_per_sec),
            Metric::BulkRead => run.bulk.as_ref().map(|b| b.result.read_mb_per_sec),
            Metric::BulkRandRead => run.bulk.as_ref().map(|b| b.result.rand_iops),
        }
    }

    /// Larger is better (a rate), or smaller (a latency).
    fn higher_is_better(self) -> bool {
        !matches!(self, Metric::VarmailFsyncP50)
    }
}

/// The bar a ratio must clear.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Bar {
    /// ratio >= this.
    AtLeast(f64),
    /// ratio <= this.
    AtMost(f64),
}

impl Bar {
    fn met(self, ratio: f64) -> bool {
        match self {
            Bar::AtLeast(b) => ratio >= b,
            Bar::AtMost(b) => ratio <= b,
        }
    }

    fn text(self) -> String {
        match self {
            Bar::AtLeast(b) => format!(">= {b}x"),
            Bar::AtMost(b) => format!("<= {b}x"),
        }
    }
}

/// A published target: `num / den` of `metric` must clear `bar`.
#[derive(Clone, Copy, Debug)]
pub struct Goal {
    /// The figure.
    pub metric: Metric,
    /// Numerator target.
    pub num: &'static str,
    /// Denominator target (an anchor of the same class, or the ceiling).
    pub den: &'static str,
    /// The bar.
    pub bar: Bar,
}

/// The published targets of `ptsd bench fs`.
pub const GOALS: &[Goal] = &[
    Goal {
        metric: Metric::VarmailOps,
        num: PTSD,
        den: EXT4_SHM,
        bar: Bar::AtLeast(1.3),
    },
    Goal {
        metric: Metric::VarmailFsyncP50,
        num: PTSD,
        den: EXT4_SHM,
        bar: Bar::AtMost(0.2),
    },
    Goal {
        metric: Metric::VarmailOps,
        num: PTSD_DURABLE,
        den: EXT4,
        bar: Bar::AtLeast(1.5),
    },
    Goal {
        metric: Metric::TokubenchFiles,
        num: PTSD,
        den: NOOP,
        bar: Bar::AtLeast(0.9),
    },
    // FUSE over io_uring against the same ptsd over /dev/fuse.
    Goal {
        metric: Metric::TokubenchFiles,
        num: PTSD_URING,
        den: PTSD,
        bar: Bar::AtLeast(1.5),
    },
    // Creates at the kernel's speed: small files as fast as ext4 on RAM
    // over io_uring, 0.7x of it over /dev/fuse.
    Goal {
        metric: Metric::TokubenchFiles,
        num: PTSD_URING,
        den: EXT4_SHM,
        bar: Bar::AtLeast(1.0),
    },
    Goal {
        metric: Metric::TokubenchFiles,
        num: PTSD,
        den: EXT4_SHM,
        bar: Bar::AtLeast(0.7),
    },
    Goal {
        metric: Metric::VarmailOps,
        num: PTSD_URING,
        den: PTSD,
        bar: Bar::AtLeast(1.3),
    },
    Goal {
        metric: Metric::VarmailFsyncP50,
        num: PTSD_URING,
        den: PTSD,
        bar: Bar::AtMost(1.0),
    },
    Goal {
        metric: Metric::BulkWrite,
        num: PTSD,
        den: EXT4_RAMJOURNAL,
        bar: Bar::AtLeast(0.5),
    },
    Goal {
        metric: Metric::BulkRead,
        num: PTSD,
        den: EXT4_RAMJOURNAL,
        bar: Bar::AtLeast(0.5),
    },
    Goal {
        metric: Metric::BulkWrite,
        num: PTSD_DURABLE,
        den: EXT4,
        bar: Bar::AtLeast(0.5),
    },
    Goal {
        metric: Metric::BulkRead,
        num: PTSD_DURABLE,
        den: EXT4,
        bar: Bar::AtLeast(0.5),
    },
];

/// Minimum, median and maximum of some values.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Spread {
    /// Smallest.
    pub min: f64,
    /// Middle value (mean of the middle two for an even count).
    pub median: f64,
    /// Largest.
    pub max: f64,
    /// How many.
    pub n: usize,
}

impl Spread {
    /// None for no values.
    pub fn of(values: &[f64]) -> Option<Self> {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        Some(Spread {
            min: v[0],
            median: if n % 2 == 1 {
                v[n / 2]
            } else {
                (v[n / 2 - 1] + v[n / 2]) / 2.0
            },
            max: v[n - 1],
            n,
        })
    }
}

/// How a comparison came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// The median clears the bar.
    Met,
    /// It does not.
    Missed,
    /// The subject beat the ceiling in every round: the ceiling is no
    /// ceiling, and no ratio against it is given.
    CeilingInvalid,
    /// No round measured both targets.
    NotMeasured,
    /// No bar: shown for information.
    Info,
}

/// `num / den` of `metric`, one ratio per round that measured both.
#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    /// The figure.
    pub metric: Metric,
    /// Numerator target.
    pub num: String,
    /// Denominator target.
    pub den: String,
    /// The class both belong to, or `ceiling`.
    pub class: String,
    /// One ratio per round.
    pub ratios: Vec<f64>,
    /// Their spread (None when the ceiling is invalid or nothing paired).
    pub spread: Option<Spread>,
    /// The bar, if this pair has a published target.
    pub bar: Option<Bar>,
    /// The outcome.
    pub verdict: Verdict,
}

/// One target over all rounds.
#[derive(Clone, Debug, Serialize)]
pub struct TargetSummary {
    /// The target.
    pub target: TargetInfo,
    /// varmail-like ops/s over the rounds.
    pub varmail_ops: Option<Spread>,
    /// varmail-like fsync p50 (us) over the rounds.
    pub fsync_p50_us: Option<Spread>,
    /// varmail-like fsync p99 (us) over the rounds.
    pub fsync_p99_us: Option<Spread>,
    /// Flushes of the disk under test per fsync (all rounds).
    pub disk_flushes_per_fsync: Option<f64>,
    /// Flushes of the target's own loop devices per fsync (all rounds).
    pub loop_flushes_per_fsync: Option<f64>,
    /// FUSE requests per varmail op, per opcode (all rounds; FUSE only).
    pub varmail_requests_per_op: Vec<(String, f64)>,
    /// tokubench-like files/s over the rounds.
    pub tokubench_files: Option<Spread>,
    /// tokubench-like create p99 (us) over the rounds.
    pub create_p99_us: Option<Spread>,
    /// FUSE requests per created file, per opcode (all rounds; FUSE only).
    pub tokubench_requests_per_file: Vec<(String, f64)>,
    /// The spawned daemon's CPU per varmail op (us) and in CPUs busy
    /// (all rounds).
    pub varmail_daemon_cpu: Option<DaemonCpu>,
    /// The spawned daemon's CPU per created file (us) and in CPUs busy.
    pub tokubench_daemon_cpu: Option<DaemonCpu>,
    /// The bulk-data figures.
    pub bulk: super::bulkreport::BulkSummary,
}

/// What a spawned FUSE daemon's CPU time came to during a workload.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct DaemonCpu {
    /// CPU microseconds per workload op.
    pub us_per_op: f64,
    /// CPU seconds per second of the run: 1.0 is one CPU kept busy.
    pub cpus: f64,
}

/// Sums of (CPU s, ops, elapsed s) over runs that measured the daemon.
fn daemon_cpu(runs: &[(Option<f64>, u64, f64)]) -> Option<DaemonCpu> {
    let m: Vec<_> = runs
        .iter()
        .filter_map(|&(c, o, e)| Some((c?, o, e)))
        .collect();
    let (cpu, ops, secs) = m.iter().fold((0.0, 0u64, 0.0), |a, &(c, o, e)| {
        (a.0 + c, a.1 + o, a.2 + e)
    });
    (ops > 0 && secs > 0.0).then(|| DaemonCpu {
        us_per_op: cpu * 1e6 / ops as f64,
        cpus: cpu / secs,
    })
}

/// Everything one `ptsd bench fs` measured, and what it means.
#[derive(Clone, Debug, Serialize)]
pub struct SuiteReport {
    /// Parameters.
    pub config: SuiteConfig,
    /// The targets, with class and role.
    pub targets: Vec<TargetInfo>,
    /// Each target over the rounds.
    pub summary: Vec<TargetSummary>,
    /// Paired ratios.
    pub comparisons: Vec<Comparison>,
    /// Every run, in order.
    pub runs: Vec<TargetRun>,
    /// Load, CPUs, priority.
    pub machine: MachineLoad,
}

/// Sum over runs of per-opcode requests, divided by the sum of `ops`.
pub(super) fn per_op(pairs: &[(&[(String, u64)], u64)]) -> Vec<(String, f64)> {
    let ops: u64 = pairs.iter().map(|p| p.1).sum();
    if ops == 0 {
        return Vec::new();
    }
    let mut sums: Vec<(String, u64)> = Vec::new();
    for (reqs, _) in pairs {
        for (name, n) in reqs.iter() {
            match sums.iter_mut().find(|(m, _)| m == name) {
                Some((_, s)) => *s += n,
                None => sums.push((name.clone(), *n)),
            }
        }
    }
    sums.into_iter()
        .map(|(n, s)| (n, s as f64 / ops as f64))
        .collect()
}

fn summarize(t: &TargetInfo, runs: &[&TargetRun]) -> TargetSummary {
    let vm: Vec<_> = runs.iter().filter_map(|r| r.varmail.as_ref()).collect();
    let tb: Vec<_> = runs.iter().filter_map(|r| r.tokubench.as_ref()).collect();
    let fsyncs: u64 = vm.iter().map(|v| v.result.fsync.count).sum();
    let disk: Option<u64> = vm.iter().map(|v| v.counters.disk_flushes).sum();
    let loops: u64 = vm
        .iter()
        .flat_map(|v| v.counters.loop_flushes.iter().map(|l| l.1))
        .sum();
    let has_loops = vm.iter().any(|v| !v.counters.loop_flushes.is_empty());
    let per_fsync = |n: u64| (fsyncs > 0).then(|| n as f64 / fsyncs as f64);
    TargetSummary {
        target: t.clone(),
        varmail_ops: Spread::of(&vm.iter().map(|v| v.result.ops_per_sec).collect::<Vec<_>>()),
        fsync_p50_us: Spread::of(&vm.iter().map(|v| v.result.fsync.p50_us).collect::<Vec<_>>()),
        fsync_p99_us: Spread::of(&vm.iter().map(|v| v.result.fsync.p99_us).collect::<Vec<_>>()),
        disk_flushes_per_fsync: disk.and_then(per_fsync),
        loop_flushes_per_fsync: if has_loops { per_fsync(loops) } else { None },
        varmail_requests_per_op: per_op(
            &vm.iter()
                .map(|v| (v.counters.requests.as_slice(), v.result.ops))
                .collect::<Vec<_>>(),
        ),
        tokubench_files: Spread::of(
            &tb.iter()
                .map(|t| t.result.files_per_sec)
                .collect::<Vec<_>>(),
        ),
        create_p99_us: Spread::of(
            &tb.iter()
                .map(|t| t.result.create.p99_us)
                .collect::<Vec<_>>(),
        ),
        tokubench_requests_per_file: per_op(
            &tb.iter()
                .map(|t| (t.counters.requests.as_slice(), t.result.files))
                .collect::<Vec<_>>(),
        ),
        varmail_daemon_cpu: daemon_cpu(
            &vm.iter()
                .map(|v| (v.counters.daemon_cpu_s, v.result.ops, v.result.elapsed_s))
                .collect::<Vec<_>>(),
        ),
        tokubench_daemon_cpu: daemon_cpu(
            &tb.iter()
                .map(|t| (t.counters.daemon_cpu_s, t.result.files, t.result.elapsed_s))
                .collect::<Vec<_>>(),
        ),
        bulk: super::bulkreport::summarize(runs),
    }
}

/// Which pairs are compared: every subject with every anchor of its class
/// (a class that survives something: process-crash or power-loss), every
/// FUSE subject with every ceiling of its transport ([`over_uring`]), and
/// every goal's pair of one class (ptsd over io_uring against ptsd over
/// /dev/fuse), and beside a goal on io_uring against /dev/fuse the no-op
/// fs's own io_uring gain (class [`TRANSPORT`]).
fn pairs(targets: &[TargetInfo]) -> Vec<(Metric, String, String, String)> {
    let mut out: Vec<(Metric, String, String, String)> = Vec::new();
    let mut add = |m: Metric, n: &str, d: &str, class: &str| {
        if !out.iter().any(|p| p.0 == m && p.1 == n && p.2 == d) {
            out.push((m, n.into(), d.into(), class.into()));
        }
    };
    let all = [
        Metric::VarmailOps,
        Metric::VarmailFsyncP50,
        Metric::TokubenchFiles,
        Metric::BulkWrite,
        Metric::BulkRead,
        Metric::BulkRandRead,
    ];
    for s in targets.iter().filter(|t| t.role == Role::Subject) {
        let classed = matches!(
            s.durability,
            Durability::ProcessCrash | Durability::PowerLoss
        );
        for a in targets
            .iter()
            .filter(|a| classed && a.role == Role::Anchor && a.durability == s.durability)
        {
            for m in all {
                add(m, &s.name, &a.name, s.durability.label());
            }
        }
        if s.fuse {
            for c in targets
                .iter()
                .filter(|c| c.role == Role::Ceiling && over_uring(&c.name) == over_uring(&s.name))
            {
                for m in [
                    Metric::VarmailOps,
                    Metric::TokubenchFiles,
                    Metric::BulkWrite,
                    Metric::BulkRead,
                ] {
                    add(m, &s.name, &c.name, "ceiling");
                }
            }
        }
    }
    // Each no-op over io_uring with each over /dev/fuse.
    let ceilings = |uring: bool| {
        targets
            .iter()
            .filter(move |c| c.role == Role::Ceiling && c.fuse && over_uring(&c.name) == uring)
    };
    let ceiling_pairs: Vec<(&str, &str)> = ceilings(true)
        .flat_map(|u| ceilings(false).map(move |c| (u.name.as_str(), c.name.as_str())))
        .collect();
    for g in GOALS {
        let of = |n: &str| targets.iter().find(|t| t.name == n);
        if let (Some(n), Some(d)) = (of(g.num), of(g.den)) {
            if n.role == Role::Subject && d.role == Role::Subject && n.durability == d.durability {
                add(g.metric, g.num, g.den, n.durability.label());
                // What io_uring gains the no-op fs bounds what it can gain
                // a file system that does work: shown beside the goal.
                if over_uring(g.num) && !over_uring(g.den) {
                    for (u, c) in &ceiling_pairs {
                        add(g.metric, u, c, TRANSPORT);
                    }
                }
            }
        }
    }
    out
}

/// The class shown for the no-op fs over io_uring against it over
/// /dev/fuse: the transport alone.
const TRANSPORT: &str = "transport";

/// One ratio per round in which both targets measured `metric`.
fn paired(runs: &[TargetRun], metric: Metric, num: &str, den: &str) -> Vec<f64> {
    let rounds = runs.iter().map(|r| r.round + 1).max().unwrap_or(0);
    (0..rounds)
        .filter_map(|round| {
            let of = |name: &str| {
                runs.iter()
                    .find(|r| r.round == round && r.name == name)
                    .and_then(|r| metric.value(r))
            };
            let (a, b) = (of(num)?, of(den)?);
            (b > 0.0).then(|| a / b)
        })
        .collect()
}

fn compare(
    runs: &[TargetRun],
    metric: Metric,
    num: &str,
    den: &str,
    class: &str,
    bar: Option<Bar>,
) -> Comparison {
    let ratios = paired(runs, metric, num, den);
    let mut spread = Spread::of(&ratios);
    // A FUSE file system doing real work cannot beat one doing none; if it
    // did in every round, the "ceiling" measures something else.
    let invalid =
        class == "ceiling" && metric.higher_is_better() && spread.is_some_and(|s| s.min > 1.0);
    let verdict = match (spread, bar) {
        _ if invalid => {
            spread = None;
            Verdict::CeilingInvalid
        }
        (None, _) => Verdict::NotMeasured,
        (Some(s), Some(b)) if b.met(s.median) => Verdict::Met,
        (Some(_), Some(_)) => Verdict::Missed,
        (Some(_), None) => Verdict::Info,
    };
    Comparison {
        metric,
        num: num.into(),
        den: den.into(),
        class: class.into(),
        ratios,
        spread,
        bar,
        verdict,
    }
}

/// Summaries and paired comparisons of a suite's runs.
pub fn build(config: &SuiteConfig, runs: SuiteRuns) -> SuiteReport {
    let summary = runs
        .targets
        .iter()
        .map(|t| {
            let mine: Vec<&TargetRun> = runs.runs.iter().filter(|r| r.name == t.name).collect();
            summarize(t, &mine)
        })
        .collect();
    let mut comparisons: Vec<Comparison> = pairs(&runs.targets)
        .into_iter()
        .map(|(m, n, d, class)| {
            let bar = GOALS
                .iter()
                .find(|g| g.metric == m && g.num == n && g.den == d)
                .map(|g| g.bar);
            compare(&runs.runs, m, &n, &d, &class, bar)
        })
        .collect();
    // A goal whose pair was not run (or is not comparable) still shows.
    for g in GOALS {
        if !comparisons
            .iter()
            .any(|c| c.metric == g.metric && c.num == g.num && c.den == g.den)
        {
            comparisons.push(Comparison {
                metric: g.metric,
                num: g.num.into(),
                den: g.den.into(),
                class: "-".into(),
                ratios: Vec::new(),
                spread: None,
                bar: Some(g.bar),
                verdict: Verdict::NotMeasured,
            });
        }
    }
    SuiteReport {
        config: config.clone(),
        targets: runs.targets,
        summary,
        comparisons,
        runs: runs.runs,
        machine: runs.machine,
    }
}

pub(super) fn spread_cell(s: Option<Spread>, digits: usize) -> String {
    match s {
        Some(s) if s.n > 1 => format!(
            "{:.*} ({:.*}..{:.*})",
            digits, s.median, digits, s.min, digits, s.max
        ),
        Some(s) => format!("{:.*}", digits, s.median),
        None => "-".into(),
    }
}

pub(super) fn requests_line(v: &[(String, f64)]) -> String {
    let total: f64 = v.iter().map(|x| x.1).sum();
    let mut parts: Vec<&(String, f64)> = v.iter().filter(|x| x.1 >= 0.005).collect();
    parts.sort_by(|a, b| b.1.total_cmp(&a.1));
    let list: Vec<String> = parts.iter().map(|(n, x)| format!("{n} {x:.2}")).collect();
    format!("total {total:.2}: {}", list.join(", "))
}

/// The report as a plain-text table.
pub fn render_table(report: &SuiteReport) -> String {
    let mut s = String::new();
    let c = &report.config;
    let (v, t) = (&c.varmail, &c.tokubench);
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
        "machine: {} CPUs, load average {} before, {} after; bench nice {} (daemons at 0, like the kernel's threads), {}",
        m.cpus, m.loadavg_before, m.loadavg_after, m.nice, m.autogroup
    );
    let _ = writeln!(
        s,
        "rounds: {} (target order rotated each round); before each timed run: set up, sync, {:.1} s settle; flushes counted on {}",
        c.rounds,
        c.settle.as_secs_f64(),
        c.disk.as_ref().map_or("no disk (none under the work dir)".to_string(), |d| d.name.clone())
    );
    if m.nice != 0 || !m.autogroup.ends_with("nice 0") && !m.autogroup.is_empty() {
        let _ = writeln!(
            s,
            "WARNING: the bench runs at a priority the kernel's threads (jbd2, loop, flushers) do not share; run it at nice 0"
        );
    }
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "{:<16} {:<14} {:<10} set up as (round 1)",
        "target", "class", "role"
    );
    for ti in &report.targets {
        let desc = report
            .runs
            .iter()
            .find(|r| r.name == ti.name && !r.description.is_empty())
            .map_or("-", |r| r.description.as_str());
        let role = match ti.role {
            Role::Subject => "subject",
            Role::Anchor => "anchor",
            Role::Ceiling => "ceiling",
            Role::Reference => "reference",
        };
        let _ = writeln!(
            s,
            "{:<16} {:<14} {:<10} {}",
            ti.name,
            ti.durability.label(),
            role,
            desc
        );
    }
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "medians over rounds (min..max); disk flush/fsync = flushes of the disk under test per fsync, loop = of the target's own loop devices"
    );
    if !c.skip_varmail {
        let _ = writeln!(
            s,
            "{:<16} {:<14} {:>26} {:>22} {:>10} {:>10} {:>6}",
            "varmail", "class", "ops/s", "fsync p50 us", "p99 us", "disk fl/fs", "loop"
        );
        for sm in &report.summary {
            let f = |x: Option<f64>| x.map_or("-".into(), |x| format!("{x:.2}"));
            let _ = writeln!(
                s,
                "{:<16} {:<14} {:>26} {:>22} {:>10} {:>10} {:>6}",
                sm.target.name,
                sm.target.durability.label(),
                spread_cell(sm.varmail_ops, 0),
                spread_cell(sm.fsync_p50_us, 0),
                sm.fsync_p99_us
                    .map_or("-".into(), |x| format!("{:.0}", x.median)),
                f(sm.disk_flushes_per_fsync),
                f(sm.loop_flushes_per_fsync),
            );
        }
    }
    if !c.skip_tokubench {
        let _ = writeln!(
            s,
            "{:<16} {:<14} {:>26} {:>22}",
            "tokubench", "class", "files/s", "create p99 us"
        );
        for sm in &report.summary {
            let _ = writeln!(
                s,
                "{:<16} {:<14} {:>26} {:>22}",
                sm.target.name,
                sm.target.durability.label(),
                spread_cell(sm.tokubench_files, 0),
                sm.create_p99_us
                    .map_or("-".into(), |x| format!("{:.0}", x.median)),
            );
        }
    }
    if !c.skip_bulk {
        super::bulkreport::render(&mut s, report);
    }
    let counted: Vec<&TargetSummary> = report
        .summary
        .iter()
        .filter(|t| {
            !t.varmail_requests_per_op.is_empty() || !t.tokubench_requests_per_file.is_empty()
        })
        .collect();
    if !counted.is_empty() {
        let _ = writeln!(s);
        let _ = writeln!(s, "FUSE requests per workload op (all rounds):");
        for sm in counted {
            if !sm.varmail_requests_per_op.is_empty() {
                let _ = writeln!(
                    s,
                    "  varmail   {:<16} {}",
                    sm.target.name,
                    requests_line(&sm.varmail_requests_per_op)
                );
            }
            if !sm.tokubench_requests_per_file.is_empty() {
                let _ = writeln!(
                    s,
                    "  tokubench {:<16} {}",
                    sm.target.name,
                    requests_line(&sm.tokubench_requests_per_file)
                );
            }
        }
    }
    let cpu: Vec<_> = report
        .summary
        .iter()
        .filter(|t| t.varmail_daemon_cpu.is_some() || t.tokubench_daemon_cpu.is_some())
        .collect();
    if !cpu.is_empty() {
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "FUSE daemon CPU (user+system, all rounds): us per workload op, and CPUs kept busy"
        );
        let show = |c: Option<DaemonCpu>| {
            c.map_or("-".to_string(), |c| {
                format!("{:.1} us/op, {:.2} CPUs", c.us_per_op, c.cpus)
            })
        };
        for t in cpu {
            let _ = writeln!(
                s,
                "  {:<16} varmail {:<28} tokubench {}",
                t.target.name,
                show(t.varmail_daemon_cpu),
                show(t.tokubench_daemon_cpu)
            );
        }
    }
    if !report.comparisons.is_empty() {
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "ratios paired per round, within a class, against the ceiling, or of the ceiling over both transports: median (min..max); a target is judged on the median"
        );
    }
    for cmp in &report.comparisons {
        let what = format!("{:<18} {} / {}", cmp.metric.label(), cmp.num, cmp.den);
        let bar = cmp.bar.map(|b| format!("target {}", b.text()));
        let line = match cmp.verdict {
            Verdict::CeilingInvalid => {
                let r = Spread::of(&cmp.ratios).expect("invalid only with ratios");
                format!(
                    "CEILING INVALID: {} beat the no-op fs in every round ({:.2}x..{:.2}x), so no ratio against it is given{}",
                    cmp.num,
                    r.min,
                    r.max,
                    bar.map_or(String::new(), |b| format!("; {b}: not judged"))
                )
            }
            Verdict::NotMeasured => format!(
                "not measured (no round ran both{}){}",
                if cmp.class == "-" {
                    " in comparable classes"
                } else {
                    ""
                },
                bar.map_or(String::new(), |b| format!("; {b}: not judged"))
            ),
            _ => {
                let sp = cmp.spread.expect("measured");
                let ratio = if sp.n > 1 {
                    format!(
                        "{:.2}x ({:.2}x..{:.2}x, {} rounds)",
                        sp.median, sp.min, sp.max, sp.n
                    )
                } else {
                    format!("{:.2}x (1 round: no spread)", sp.median)
                };
                match (cmp.verdict, bar) {
                    (Verdict::Met, Some(b)) => format!("{ratio}  {b}: met"),
                    (Verdict::Missed, Some(b)) => format!("{ratio}  {b}: MISSED"),
                    _ => ratio,
                }
            }
        };
        let _ = writeln!(s, "{what:<48} [{}] {line}", cmp.class);
    }
    let _ = writeln!(s);
    let _ = writeln!(s, "classes:");
    for d in [
        Durability::ProcessCrash,
        Durability::PowerLoss,
        Durability::None,
    ] {
        if report.targets.iter().any(|t| t.durability == d) {
            let _ = writeln!(s, "  {:<14} {}", d.label(), d.meaning());
        }
    }
    for r in &report.runs {
        for e in &r.errors {
            let _ = writeln!(s, "round {} {}: {e}", r.round + 1, r.name);
        }
    }
    s
}

/// Fails with the first error any run met (for a non-zero exit status).
pub fn first_error(report: &SuiteReport) -> Result<()> {
    match report
        .runs
        .iter()
        .find_map(|r| r.errors.first().map(|e| (r.name.clone(), e.clone())))
    {
        Some((target, detail)) => Err(FsBenchError::TargetFailed { target, detail }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fsbench::suite::{Counters, WorkloadRun};
    use crate::fsbench::{LatencySummary, VarmailResult};

    fn info(name: &str, durability: Durability, role: Role, fuse: bool) -> TargetInfo {
        TargetInfo {
            name: name.into(),
            durability,
            role,
            fuse,
        }
    }

    fn run(round: usize, name: &str, ops: f64, p50: f64) -> TargetRun {
        TargetRun {
            round,
            position: 0,
            name: name.into(),
            description: String::new(),
            varmail: Some(WorkloadRun {
                result: VarmailResult {
                    threads: 1,
                    elapsed_s: 1.0,
                    ops: ops as u64,
                    ops_per_sec: ops,
                    fsync: LatencySummary {
                        count: 10,
                        p50_us: p50,
                        ..LatencySummary::default()
                    },
                    delete: LatencySummary::default(),
                    create_append_fsync: LatencySummary::default(),
                    append_fsync: LatencySummary::default(),
                    read_whole: LatencySummary::default(),
                    bytes_written: 0,
                    bytes_verified: 0,
                    files_at_end: 0,
                },
                counters: Counters {
                    disk_flushes: Some(20),
                    loop_flushes: Vec::new(),
                    requests: vec![("lookup".into(), ops as u64 * 2)],
                    daemon_cpu_s: Some(0.25),
                    daemon: None,
                },
            }),
            tokubench: None,
            bulk: None,
            bulk_parts: Vec::new(),
            errors: Vec::new(),
        }
    }

    #[test]
    fn each_transport_meets_its_own_ceiling_and_uring_meets_classic() {
        let t = [
            info(PTSD, Durability::ProcessCrash, Role::Subject, true),
            info(PTSD_URING, Durability::ProcessCrash, Role::Subject, true),
            info(NOOP, Durability::None, Role::Ceiling, true),
            info("noop-fuse-uring", Durability::None, Role::Ceiling, true),
        ];
        let p = pairs(&t);
        let has = |m: Metric, n: &str, d: &str| p.iter().any(|x| x.0 == m && x.1 == n && x.2 == d);
        assert!(has(Metric::TokubenchFiles, PTSD_URING, PTSD));
        assert!(has(Metric::VarmailFsyncP50, PTSD_URING, PTSD));
        assert!(has(Metric::TokubenchFiles, PTSD, NOOP));
        assert!(has(Metric::TokubenchFiles, PTSD_URING, "noop-fuse-uring"));
        assert!(!has(Metric::TokubenchFiles, PTSD, "noop-fuse-uring"));
        assert!(!has(Metric::TokubenchFiles, PTSD_URING, NOOP));
        // The ceiling's own io_uring gain, beside the goal's.
        assert!(p.iter().any(|x| x.0 == Metric::TokubenchFiles
            && x.1 == "noop-fuse-uring"
            && x.2 == NOOP
            && x.3 == TRANSPORT));
        assert!(!has(Metric::BulkRead, "noop-fuse-uring", NOOP));
    }

    #[test]
    fn only_same_class_pairs_and_the_ceiling_are_compared() {
        let targets = vec![
            info(PTSD, Durability::ProcessCrash, Role::Subject, true),
            info(EXT4_SHM, Durability::ProcessCrash, Role::Anchor, false),
            info(EXT4, Durability::PowerLoss, Role::Anchor, false),
            info(NOOP, Durability::None, Role::Ceiling, true),
            info("mystery", Durability::Unknown, Role::Reference, false),
        ];
        let p = pairs(&targets);
        assert!(p.iter().all(|(_, n, _, _)| n == PTSD));
        assert!(p
            .iter()
            .any(|(_, _, d, c)| d == EXT4_SHM && c == "process-crash"));
        assert!(p.iter().any(|(_, _, d, c)| d == NOOP && c == "ceiling"));
        assert!(!p.iter().any(|(_, _, d, _)| d == EXT4 || d == "mystery"));
    }

    #[test]
    fn ratios_pair_rounds_and_goals_judge_the_median() {
        let targets = vec![
            info(PTSD, Durability::ProcessCrash, Role::Subject, true),
            info(EXT4_SHM, Durability::ProcessCrash, Role::Anchor, false),
            info(NOOP, Durability::None, Role::Ceiling, true),
        ];
        // Round 2 is disturbed for both ptsd and ext4-shm: paired ratios
        // stay 2x, 2x, 1x (median 2x) although the rates vary.
        let runs = vec![
            run(0, PTSD, 200.0, 10.0),
            run(0, EXT4_SHM, 100.0, 100.0),
            run(0, NOOP, 150.0, 5.0),
            run(1, EXT4_SHM, 50.0, 100.0),
            run(1, PTSD, 100.0, 10.0),
            run(1, NOOP, 90.0, 5.0),
            run(2, PTSD, 100.0, 30.0),
            run(2, EXT4_SHM, 100.0, 100.0),
            run(2, NOOP, 120.0, 5.0),
        ];
        let cfg = SuiteConfig {
            varmail: Default::default(),
            tokubench: Default::default(),
            skip_varmail: false,
            skip_tokubench: true,
            bulk: Default::default(),
            skip_bulk: true,
            rounds: 3,
            settle: std::time::Duration::ZERO,
            disk: None,
        };
        let report = build(
            &cfg,
            SuiteRuns {
                targets,
                runs,
                machine: MachineLoad {
                    cpus: 2,
                    loadavg_before: String::new(),
                    loadavg_after: String::new(),
                    nice: 0,
                    autogroup: String::new(),
                },
            },
        );
        let get = |m: Metric, d: &str| {
            report
                .comparisons
                .iter()
                .find(|c| c.metric == m && c.num == PTSD && c.den == d)
                .unwrap()
        };
        let ops = get(Metric::VarmailOps, EXT4_SHM);
        assert_eq!(ops.ratios, vec![2.0, 2.0, 1.0]);
        let sp = ops.spread.unwrap();
        assert_eq!((sp.min, sp.median, sp.max), (1.0, 2.0, 2.0));
        assert_eq!(ops.verdict, Verdict::Met);
        let p50 = get(Metric::VarmailFsyncP50, EXT4_SHM);
        assert_eq!(p50.spread.unwrap().median, 0.1);
        assert_eq!(p50.verdict, Verdict::Met);
        // ptsd beat the no-op fs in rounds 1 and 2 only: the ceiling holds.
        let ceil = get(Metric::VarmailOps, NOOP);
        assert_eq!(ceil.verdict, Verdict::Info);
        // The durable goal's targets were not run: said, not dropped.
        assert!(report
            .comparisons
            .iter()
            .any(|c| c.num == PTSD_DURABLE && c.verdict == Verdict::NotMeasured));
        let s = &report.summary[0];
        assert_eq!(s.disk_flushes_per_fsync, Some(2.0));
        assert_eq!(s.varmail_requests_per_op, vec![("lookup".to_string(), 2.0)]);
        let table = render_table(&report);
        assert!(table.contains("target >= 1.3x: met"), "{table}");
        assert!(table.contains("ptsd-durable / ext4"), "{table}");
    }

    #[test]
    fn a_ceiling_beaten_every_round_is_invalid() {
        let runs = vec![
            run(0, PTSD, 110.0, 1.0),
            run(0, NOOP, 100.0, 1.0),
            run(1, PTSD, 120.0, 1.0),
            run(1, NOOP, 100.0, 1.0),
        ];
        let c = compare(&runs, Metric::VarmailOps, PTSD, NOOP, "ceiling", None);
        assert_eq!(c.verdict, Verdict::CeilingInvalid);
        assert!(c.spread.is_none());
        let c = compare(
            &runs,
            Metric::VarmailOps,
            PTSD,
            NOOP,
            "ceiling",
            Some(Bar::AtLeast(0.9)),
        );
        assert_eq!(c.verdict, Verdict::CeilingInvalid);
    }
}
