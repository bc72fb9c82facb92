//! `ptsd bench fs`: the varmail-like and tokubench-like workloads on ptsd
//! mounts and on kernel anchors of the same durability class, with the
//! no-op FUSE ceiling, in rounds (see `crates/bench/README.md`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{invalid, BenchCmdError, Doing, Result};
use crate::fsbench::bulk::BulkConfig;
use crate::fsbench::devstat::FlushCounter;
use crate::fsbench::noopfs::NoopOptions;
use crate::fsbench::report;
use crate::fsbench::suite::{self, Durability, Role, Setup, SpawnSpec, SuiteConfig, TargetSpec};
use crate::fsbench::target::{self, Ext4Setup};
use crate::fsbench::{Bound, SyncKind, TokubenchConfig, VarmailConfig};
use clap::{Args, ValueEnum};
use ptsd_blockdev::size::parse_size;

/// The targets `ptsd bench fs` can set up. Each one's class, role and
/// setup are in [`spec`]; comparisons follow from class and role.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Target {
    /// ptsd over /dev/fuse (spawned `ptsd mount -o nouring`, or
    /// `--ptsd-dir`), journal on /dev/shm: process-crash class.
    Ptsd,
    /// ptsd over FUSE io_uring (`ptsd mount -o uring`; turns the kernel's
    /// `fuse.enable_uring` on, as root): process-crash class.
    PtsdUring,
    /// ptsd over FUSE io_uring busy-polling its queues (`-o uring_poll`,
    /// 100 us after each reply): what polling buys, and its CPU.
    PtsdUringPoll,
    /// ptsd with its journal a file in the work dir (written and fdatasync'ed at each commit): power-loss class.
    PtsdDurable,
    /// ext4 on a loop over a disk image in the work dir: power-loss anchor.
    Ext4,
    /// ext4 on a loop over a /dev/shm image: process-crash anchor.
    Ext4Shm,
    /// ext4 data=journal, external journal on a /dev/shm loop, data on a
    /// disk image: process-crash anchor (the kernel's version of ptsd).
    Ext4Ramjournal,
    /// The bench crate's no-op in-memory FUSE fs over /dev/fuse: the ceiling.
    Noop,
    /// The no-op fs over FUSE io_uring: the io_uring transport's ceiling.
    NoopUring,
    /// A directory in the work dir on the host's own file system: a
    /// power-loss reference row.
    Host,
}

#[derive(Args, Debug)]
pub struct FsArgs {
    /// Targets to run (each round rotates this order).
    #[arg(
        long,
        value_delimiter = ',',
        default_values = ["ext4-shm", "ext4-ramjournal", "ext4", "noop", "noop-uring", "ptsd", "ptsd-uring", "ptsd-durable"]
    )]
    targets: Vec<Target>,
    /// Also run on an existing directory: NAME=DIR, or NAME:CLASS=DIR with
    /// CLASS process-crash or power-loss to compare it with that class's
    /// anchors (repeatable).
    #[arg(long = "dir", value_name = "NAME[:CLASS]=DIR")]
    dirs: Vec<String>,
    /// Use this already-mounted directory as the ptsd target instead of
    /// spawning `ptsd mount`.
    #[arg(long, value_name = "DIR")]
    ptsd_dir: Option<PathBuf>,
    /// Extra argument for the spawned `ptsd mount`s (repeatable; after the
    /// transport's `-o uring`/`-o nouring`).
    #[arg(
        long = "ptsd-mount-arg",
        value_name = "ARG",
        allow_hyphen_values = true
    )]
    ptsd_mount_args: Vec<OsString>,
    /// Where the disk images, the ptsd data dirs and the durable journal
    /// go (one disk for all). Default: a new directory under /var/tmp,
    /// removed afterwards. RAM images and journals go to /dev/shm.
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// Size of each ext4 data image (written in full once, reformatted
    /// every round).
    #[arg(long, value_parser = parse_size, default_value = "4GiB")]
    ext4_size: u64,
    /// Size of ext4-ramjournal's external journal (ptsd's journal is
    /// 256 MiB by default).
    #[arg(long, value_parser = parse_size, default_value = "256MiB")]
    ramjournal_size: u64,
    /// Worker threads of each workload.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Seconds each workload runs per target and round.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Bound the varmail-like run by ops per thread instead of seconds.
    #[arg(long)]
    varmail_ops: Option<u64>,
    /// Bound the tokubench-like run by files per thread instead of seconds.
    #[arg(long)]
    tokubench_files: Option<u64>,
    /// Files per thread in the varmail-like workload.
    #[arg(long, default_value_t = 300)]
    files_per_thread: usize,
    /// fdatasync instead of fsync.
    #[arg(long)]
    fdatasync: bool,
    /// No syncfs at the end of the tokubench-like run.
    #[arg(long)]
    no_final_sync: bool,
    /// Only the varmail-like workload.
    #[arg(long, conflicts_with = "only_tokubench")]
    only_varmail: bool,
    /// Only the tokubench-like workload.
    #[arg(long)]
    only_tokubench: bool,
    /// Also run the bulk-data workload (sequential write + fsync, cold
    /// sequential read, cold 4 KiB random read).
    #[arg(long)]
    bulk: bool,
    /// Only the bulk-data workload.
    #[arg(long, conflicts_with_all = ["only_varmail", "only_tokubench"])]
    only_bulk: bool,
    /// Size of each bulk thread's file.
    #[arg(long, value_parser = parse_size, default_value = "256MiB")]
    bulk_size: u64,
    /// Bytes per read/write call of the bulk sequential parts.
    #[arg(long, value_parser = parse_size, default_value = "1MiB")]
    bulk_io: u64,
    /// Bound the bulk random reads by reads per thread instead of seconds.
    #[arg(long)]
    bulk_rand_reads: Option<u64>,
    /// Seed of the workloads' choices and contents.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// FUSE threads of the no-op fs (default: ptsd-fs's, 1 per CPU, at least 2).
    #[arg(long)]
    noop_threads: Option<usize>,
    /// Kernel writeback cache on the no-op fs (ptsd-fs does not ask for it).
    #[arg(long)]
    noop_writeback_cache: bool,
    /// Serve the no-op fs from this process instead of a daemon process
    /// of its own (`ptsd bench noop-mount`), which is what ptsd-fs is.
    #[arg(long)]
    noop_in_process: bool,
    /// Leave the workloads' files in place (for a look afterwards; on the
    /// mounts this run makes they go with the mount anyway).
    #[arg(long)]
    keep: bool,
    /// Print the report as JSON on stdout (progress still on stderr).
    #[arg(long)]
    json: bool,
    /// Rounds: each runs every target once, the order rotated by one per
    /// round; ratios are paired per round and judged on their median
    /// (odd, so the median is a measured round).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Seconds of pause after `sync`, right before each timed run.
    #[arg(long, default_value_t = 2.0)]
    settle: f64,
    /// Seconds to wait for a spawned mount to appear.
    #[arg(long, default_value_t = 60)]
    mount_timeout: u64,
}

/// Paths a run creates, shared by the target definitions.
struct Paths {
    work_dir: PathBuf,
    scratch: PathBuf,
    shm: PathBuf,
    tag: String,
}

impl Paths {
    fn shm_file(&self, what: &str) -> PathBuf {
        self.shm.join(format!("ptsd-bench-{}-{what}", self.tag))
    }
}

fn ptsd_spawn(
    a: &FsArgs,
    p: &Paths,
    name: &str,
    journal: PathBuf,
    counts: &Path,
    uring: bool,
) -> Result<SpawnSpec> {
    let poll = name == suite::PTSD_URING_POLL;
    let mountpoint = p.scratch.join(name);
    // In the foreground, so the daemon is our child and its exit after
    // `umount` (a clean checkpoint) is waited for.
    let mut args: Vec<OsString> = vec!["mount".into(), "--foreground".into()];
    let data_dir = p.work_dir.join(format!("{name}-data"));
    args.extend(["--data-dir".into(), data_dir.clone().into_os_string()]);
    args.extend(["--journal".into(), journal.clone().into_os_string()]);
    args.extend(["--op-counts".into(), counts.as_os_str().to_owned()]);
    let transport = match (uring, poll) {
        (_, true) => "uring_poll",
        (true, false) => "uring",
        (false, false) => "nouring",
    };
    args.extend(["-o".into(), transport.into()]);
    args.extend(a.ptsd_mount_args.iter().cloned());
    args.push(mountpoint.clone().into());
    Ok(SpawnSpec {
        program: std::env::current_exe().doing(|| "locating the ptsd binary".into())?,
        args,
        mountpoint,
        timeout: Duration::from_secs(a.mount_timeout),
        // A new file system each round (the ext4 targets are formatted
        // anew): the image and its journal go.
        fresh: vec![data_dir, journal],
    })
}

/// The definition of each target: class, role, setup.
fn spec(t: Target, a: &FsArgs, p: &Paths) -> Result<TargetSpec> {
    let size = a.ext4_size;
    let ext4 = |name: &str, durability, image: PathBuf, journal| TargetSpec {
        name: name.into(),
        durability,
        role: Role::Anchor,
        fuse: false,
        op_counts: None,
        setup: Setup::Ext4(Ext4Setup {
            image,
            size,
            journal,
        }),
    };
    Ok(match t {
        Target::Ext4 => ext4(
            suite::EXT4,
            Durability::PowerLoss,
            p.work_dir.join("ext4.img"),
            None,
        ),
        Target::Ext4Shm => ext4(
            suite::EXT4_SHM,
            Durability::ProcessCrash,
            p.shm_file("ext4-shm.img"),
            None,
        ),
        Target::Ext4Ramjournal => ext4(
            suite::EXT4_RAMJOURNAL,
            Durability::ProcessCrash,
            p.work_dir.join("ext4-ramjournal.img"),
            Some((p.shm_file("ext4-ramjournal.journal"), a.ramjournal_size)),
        ),
        Target::Host => {
            let path = p.work_dir.join("host");
            std::fs::create_dir_all(&path).doing(|| format!("creating {}", path.display()))?;
            TargetSpec {
                role: Role::Reference,
                ..TargetSpec::dir(suite::HOST, path, Durability::PowerLoss)
            }
        }
        Target::Noop | Target::NoopUring => {
            let uring = t == Target::NoopUring;
            let name = if uring {
                suite::NOOP_URING
            } else {
                suite::NOOP
            };
            let counts = p.shm_file(&format!("{name}.opcounts"));
            let defaults = NoopOptions::default();
            let threads = a.noop_threads.unwrap_or(defaults.threads);
            let setup = if a.noop_in_process && !uring {
                Setup::Noop(NoopOptions {
                    threads,
                    writeback_cache: a.noop_writeback_cache,
                    op_counts: None,
                    uring: false,
                })
            } else {
                let mountpoint = p.scratch.join(name);
                let mut args: Vec<OsString> = vec![
                    "bench".into(),
                    "noop-mount".into(),
                    "--threads".into(),
                    threads.to_string().into(),
                    "--op-counts".into(),
                    counts.clone().into_os_string(),
                ];
                if a.noop_writeback_cache {
                    args.push("--writeback-cache".into());
                }
                if uring {
                    args.push("--uring".into());
                }
                args.push(mountpoint.clone().into());
                Setup::Spawned(SpawnSpec {
                    program: std::env::current_exe().doing(|| "locating the ptsd binary".into())?,
                    args,
                    mountpoint,
                    timeout: Duration::from_secs(a.mount_timeout),
                    fresh: Vec::new(),
                })
            };
            TargetSpec {
                name: name.into(),
                durability: Durability::None,
                role: Role::Ceiling,
                fuse: true,
                op_counts: Some(counts),
                setup,
            }
        }
        Target::Ptsd => match &a.ptsd_dir {
            Some(dir) => TargetSpec {
                fuse: true,
                ..TargetSpec::dir(suite::PTSD, dir.clone(), Durability::ProcessCrash)
            },
            None => {
                let counts = p.shm_file("ptsd.opcounts");
                let journal = p.shm_file("ptsd.journal");
                TargetSpec {
                    name: suite::PTSD.into(),
                    durability: Durability::ProcessCrash,
                    role: Role::Subject,
                    fuse: true,
                    setup: Setup::Spawned(ptsd_spawn(a, p, suite::PTSD, journal, &counts, false)?),
                    op_counts: Some(counts),
                }
            }
        },
        Target::PtsdUring | Target::PtsdUringPoll => {
            let name = if t == Target::PtsdUring {
                suite::PTSD_URING
            } else {
                suite::PTSD_URING_POLL
            };
            let counts = p.shm_file(&format!("{name}.opcounts"));
            let journal = p.shm_file(&format!("{name}.journal"));
            TargetSpec {
                name: name.into(),
                durability: Durability::ProcessCrash,
                role: Role::Subject,
                fuse: true,
                setup: Setup::Spawned(ptsd_spawn(a, p, name, journal, &counts, true)?),
                op_counts: Some(counts),
            }
        }
        Target::PtsdDurable => {
            let counts = p.shm_file("ptsd-durable.opcounts");
            let journal = p.work_dir.join("ptsd-durable.journal");
            TargetSpec {
                name: suite::PTSD_DURABLE.into(),
                durability: Durability::PowerLoss,
                role: Role::Subject,
                fuse: true,
                // /dev/fuse, as it was measured before io_uring.
                setup: Setup::Spawned(ptsd_spawn(
                    a,
                    p,
                    suite::PTSD_DURABLE,
                    journal,
                    &counts,
                    false,
                )?),
                op_counts: Some(counts),
            }
        }
    })
}

/// `NAME=DIR` or `NAME:CLASS=DIR`.
fn parse_dir(d: &str) -> Result<TargetSpec> {
    let Some((name, path)) = d.split_once('=') else {
        invalid!("--dir wants NAME=DIR or NAME:CLASS=DIR, got {d:?}");
    };
    let (name, class) = match name.split_once(':') {
        Some((n, c)) => match Durability::parse(c) {
            Some(d @ (Durability::ProcessCrash | Durability::PowerLoss)) => (n, d),
            _ => invalid!("--dir {d:?}: class must be process-crash or power-loss"),
        },
        None => (name, Durability::Unknown),
    };
    let is_fuse = target::mounted_fstype(Path::new(path)).is_some_and(|t| t.starts_with("fuse"));
    Ok(TargetSpec {
        fuse: is_fuse,
        ..TargetSpec::dir(name, path.into(), class)
    })
}

pub fn run(a: FsArgs) -> Result<()> {
    if !(a.seconds.is_finite() && a.seconds > 0.0) {
        invalid!("--seconds must be positive");
    }
    if !(a.settle.is_finite() && a.settle >= 0.0) {
        invalid!("--settle must be a number of seconds >= 0");
    }
    if a.rounds == 0 || a.rounds % 2 == 0 {
        invalid!(
            "--rounds must be odd (the median is then a measured round), got {}",
            a.rounds
        );
    }
    let seconds = Bound::Duration(Duration::from_secs_f64(a.seconds));
    let work_dir = match &a.work_dir {
        Some(d) => d.clone(),
        None => PathBuf::from(format!("/var/tmp/ptsd-bench-{}", std::process::id())),
    };
    std::fs::create_dir_all(&work_dir).doing(|| format!("creating {}", work_dir.display()))?;
    let scratch = work_dir.join("mnt");
    std::fs::create_dir_all(&scratch).doing(|| format!("creating {}", scratch.display()))?;
    let shm = PathBuf::from("/dev/shm");
    let paths = Paths {
        work_dir: work_dir.clone(),
        scratch: scratch.clone(),
        shm: if shm.is_dir() { shm } else { work_dir.clone() },
        tag: std::process::id().to_string(),
    };
    if !target::on_ram_fs(&paths.shm) {
        eoutln!(
            "warning: {} is not a RAM file system: the process-crash targets are not what they say",
            paths.shm.display()
        );
    }

    if a.targets.iter().any(|t| {
        matches!(
            t,
            Target::PtsdUring | Target::PtsdUringPoll | Target::NoopUring
        )
    }) {
        // Off by default; an io_uring target that silently fell back to
        // /dev/fuse would measure the wrong thing.
        use ptsd_fs::uring::{enable, Availability};
        match Availability::probe() {
            Availability::Enabled => {}
            Availability::Disabled => enable().doing(|| {
                format!(
                    "the io_uring targets need FUSE over io_uring, which is off: {}",
                    Availability::Disabled.reason()
                )
            })?,
            Availability::Missing => invalid!(
                "the io_uring targets (ptsd-uring, noop-uring) need FUSE over io_uring: {}",
                Availability::Missing.reason()
            ),
        }
    }
    let mut targets = Vec::new();
    for &t in &a.targets {
        targets.push(spec(t, &a, &paths)?);
    }
    for d in &a.dirs {
        targets.push(parse_dir(d)?);
    }
    for (i, t) in targets.iter().enumerate() {
        if targets[..i].iter().any(|u| u.name == t.name) {
            invalid!("target {} listed twice (--rounds repeats targets)", t.name);
        }
    }

    let cfg = SuiteConfig {
        varmail: VarmailConfig {
            threads: a.threads,
            files_per_thread: a.files_per_thread,
            sync: if a.fdatasync {
                SyncKind::Fdatasync
            } else {
                SyncKind::Fsync
            },
            bound: a.varmail_ops.map_or(seconds, Bound::Ops),
            seed: a.seed,
            cleanup: !a.keep,
            ..VarmailConfig::default()
        },
        tokubench: TokubenchConfig {
            threads: a.threads,
            bound: a.tokubench_files.map_or(seconds, Bound::Ops),
            sync_at_end: !a.no_final_sync,
            seed: a.seed,
            cleanup: !a.keep,
            ..TokubenchConfig::default()
        },
        bulk: BulkConfig {
            threads: a.threads,
            file_size: a.bulk_size,
            io_size: usize::try_from(a.bulk_io).map_err(|_| {
                BenchCmdError::Invalid(format!("--bulk-io {} is too large", a.bulk_io))
            })?,
            rand_bound: a.bulk_rand_reads.map_or(seconds, Bound::Ops),
            seed: a.seed,
            drop_caches: true,
            cleanup: !a.keep,
        },
        skip_varmail: a.only_tokubench || a.only_bulk,
        skip_tokubench: a.only_varmail || a.only_bulk,
        skip_bulk: !(a.bulk || a.only_bulk),
        rounds: a.rounds,
        settle: Duration::from_secs_f64(a.settle),
        disk: FlushCounter::disk_of(&work_dir),
    };
    let runs = suite::run_suite(&targets, &cfg, &scratch, |msg| eoutln!("{msg}"));
    // Clean up what this run created, never descending into a mount that
    // failed to come down.
    let mountpoints: Vec<PathBuf> = targets.iter().map(|t| scratch.join(&t.name)).collect();
    let still = mountpoints
        .iter()
        .find(|m| target::mounted_fstype(m).is_some());
    for t in &targets {
        if let Setup::Ext4(e) = &t.setup {
            target::remove_images(e);
        }
        if let Some(c) = &t.op_counts {
            let _ = std::fs::remove_file(c);
        }
    }
    if let Some(still) = still {
        eoutln!(
            "{} is still mounted; leaving {} in place",
            still.display(),
            work_dir.display()
        );
    } else {
        for name in [
            suite::PTSD,
            suite::PTSD_URING,
            suite::PTSD_URING_POLL,
            suite::PTSD_DURABLE,
        ] {
            let _ = std::fs::remove_file(paths.shm_file(&format!("{name}.journal")));
        }
        if a.work_dir.is_none() {
            let _ = std::fs::remove_dir_all(&work_dir);
        } else {
            for m in &mountpoints {
                let _ = std::fs::remove_dir(m);
            }
            let _ = std::fs::remove_dir(&scratch);
        }
    }
    let report = report::build(&cfg, runs);
    if a.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(BenchCmdError::Json)?
        );
    } else {
        out!("{}", report::render_table(&report));
    }
    report::first_error(&report).map_err(BenchCmdError::FsBench)?;
    Ok(())
}
