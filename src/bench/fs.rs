//! `ptsd bench fs`: the varmail-like and tokubench-like workloads on a ptsd
//! mount, ext4 on a loop device and the no-op FUSE fs (see
//! `crates/bench/README.md`).

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use ptsd_bench::fsbench::noopfs::NoopOptions;
use ptsd_bench::fsbench::suite::{self, SpawnSpec, SuiteConfig, TargetSpec};
use ptsd_bench::fsbench::target;
use ptsd_bench::fsbench::{Bound, SyncKind, TokubenchConfig, VarmailConfig};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Target {
    /// A ptsd mount: spawned `ptsd mount` with its own data dir, or `--ptsd-dir`.
    Ptsd,
    /// ext4 on a loop device over an image in the work dir.
    Ext4,
    /// The bench crate's no-op in-memory FUSE fs (the FUSE ceiling).
    Noop,
    /// A directory in the work dir on the host's own file system (same
    /// disk, no loop device in between): a reference row.
    Host,
}

#[derive(Args, Debug)]
pub struct FsArgs {
    /// Targets to run, in order.
    #[arg(long, value_delimiter = ',', default_values = ["ext4", "host", "noop", "ptsd"])]
    targets: Vec<Target>,
    /// Also run on an existing directory: NAME=DIR (repeatable).
    #[arg(long = "dir", value_name = "NAME=DIR")]
    dirs: Vec<String>,
    /// Use this already-mounted directory as the ptsd target instead of
    /// spawning `ptsd mount`.
    #[arg(long, value_name = "DIR")]
    ptsd_dir: Option<PathBuf>,
    /// Extra argument for the spawned `ptsd mount` (repeatable).
    #[arg(
        long = "ptsd-mount-arg",
        value_name = "ARG",
        allow_hyphen_values = true
    )]
    ptsd_mount_args: Vec<OsString>,
    /// Where the ext4 image, the ptsd data dir (`ptsd-data`) and the mount
    /// points go (one disk for both). Default: a new directory under
    /// /var/tmp, removed afterwards. The ptsd journal goes to /dev/shm (as
    /// `ptsd mount`'s default does) and is removed afterwards.
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// Size of the ext4 image, MiB (written in full before the run).
    #[arg(long, default_value_t = 4096)]
    ext4_size_mib: u64,
    /// Worker threads of each workload.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Seconds each workload runs per target.
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
    /// Seed of the workloads' choices and contents.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// FUSE threads of the no-op fs.
    #[arg(long, default_value_t = 4)]
    noop_threads: usize,
    /// Kernel writeback cache on the no-op fs.
    #[arg(long)]
    noop_writeback_cache: bool,
    /// Mount the no-op fs without `default_permissions` (ptsd-fs always
    /// has it; without it the kernel skips the GETATTR of a directory
    /// before each create).
    #[arg(long)]
    noop_no_default_permissions: bool,
    /// The no-op fs answers FLUSH with ENOSYS, as ptsd-fs does (then both
    /// skip the round trip at close; by default the no-op fs answers it).
    #[arg(long)]
    noop_flush_enosys: bool,
    /// Serve the no-op fs from this process instead of a daemon process
    /// of its own (`ptsd bench noop-mount`). A daemon of its own is what
    /// ptsd-fs is, and measured faster here, so it is the default ceiling.
    #[arg(long)]
    noop_in_process: bool,
    /// Leave the workloads' files in place (for a look afterwards; on the
    /// mounts this run makes they go with the mount anyway).
    #[arg(long)]
    keep: bool,
    /// Print the report as JSON on stdout (progress still on stderr).
    #[arg(long)]
    json: bool,
    /// Run the whole list of targets this many times, interleaved (ext4,
    /// host, noop, ptsd, ext4, host, …); ratios compare each target's
    /// median, so a burst of load from elsewhere moves one row, not the
    /// verdict.
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// Seconds to wait for the spawned ptsd mount to appear.
    #[arg(long, default_value_t = 60)]
    mount_timeout: u64,
}

pub fn run(a: FsArgs) -> Result<()> {
    if !(a.seconds.is_finite() && a.seconds > 0.0) {
        bail!("--seconds must be positive");
    }
    let seconds = Bound::Duration(Duration::from_secs_f64(a.seconds));
    let work_dir = match &a.work_dir {
        Some(d) => d.clone(),
        None => PathBuf::from(format!("/var/tmp/ptsd-bench-{}", std::process::id())),
    };
    std::fs::create_dir_all(&work_dir)
        .with_context(|| format!("creating {}", work_dir.display()))?;
    let scratch = work_dir.join("mnt");
    std::fs::create_dir_all(&scratch).with_context(|| format!("creating {}", scratch.display()))?;

    let ptsd_data = work_dir.join("ptsd-data");
    // Where `ptsd mount` puts its journal by default (tmpfs when there is
    // one), under a name this run can remove afterwards.
    let shm = PathBuf::from("/dev/shm");
    let journal_dir = if shm.is_dir() { shm } else { work_dir.clone() };
    let ptsd_journal = journal_dir.join(format!("ptsd-bench-{}.journal", std::process::id()));

    let mut targets = Vec::new();
    for t in &a.targets {
        targets.push(match t {
            Target::Ext4 => TargetSpec::Ext4Loop {
                image_dir: work_dir.clone(),
                size: a.ext4_size_mib << 20,
            },
            Target::Host => {
                let path = work_dir.join("host");
                std::fs::create_dir_all(&path)
                    .with_context(|| format!("creating {}", path.display()))?;
                TargetSpec::Dir {
                    name: suite::HOST.into(),
                    path,
                }
            }
            Target::Noop if a.noop_in_process => TargetSpec::Noop(NoopOptions {
                threads: a.noop_threads,
                writeback_cache: a.noop_writeback_cache,
                default_permissions: !a.noop_no_default_permissions,
                flush_enosys: a.noop_flush_enosys,
                ..NoopOptions::default()
            }),
            Target::Noop => {
                let mountpoint = scratch.join("noop");
                let mut args: Vec<OsString> = vec![
                    "bench".into(),
                    "noop-mount".into(),
                    "--threads".into(),
                    a.noop_threads.to_string().into(),
                ];
                if a.noop_writeback_cache {
                    args.push("--writeback-cache".into());
                }
                if a.noop_no_default_permissions {
                    args.push("--no-default-permissions".into());
                }
                if a.noop_flush_enosys {
                    args.push("--flush-enosys".into());
                }
                args.push(mountpoint.clone().into());
                TargetSpec::Spawned {
                    name: suite::NOOP.into(),
                    spec: SpawnSpec {
                        program: std::env::current_exe().context("locating the ptsd binary")?,
                        args,
                        mountpoint,
                        timeout: Duration::from_secs(a.mount_timeout),
                    },
                }
            }
            Target::Ptsd => match &a.ptsd_dir {
                Some(dir) => TargetSpec::Dir {
                    name: suite::PTSD.into(),
                    path: dir.clone(),
                },
                None => {
                    let mountpoint = scratch.join("ptsd");
                    // In the foreground, so the daemon is our child and its
                    // exit after `umount` (a clean checkpoint) is waited for.
                    let mut args: Vec<OsString> = vec!["mount".into(), "--foreground".into()];
                    args.extend(["--data-dir".into(), ptsd_data.clone().into_os_string()]);
                    args.extend(["--journal".into(), ptsd_journal.clone().into_os_string()]);
                    args.extend(a.ptsd_mount_args.iter().cloned());
                    args.push(mountpoint.clone().into());
                    TargetSpec::Spawned {
                        name: suite::PTSD.into(),
                        spec: SpawnSpec {
                            program: std::env::current_exe().context("locating the ptsd binary")?,
                            args,
                            mountpoint,
                            timeout: Duration::from_secs(a.mount_timeout),
                        },
                    }
                }
            },
        });
    }
    if a.rounds == 0 {
        bail!("--rounds must be at least 1");
    }
    let once = targets.clone();
    for _ in 1..a.rounds {
        targets.extend(once.iter().cloned());
    }
    for d in &a.dirs {
        let Some((name, path)) = d.split_once('=') else {
            bail!("--dir wants NAME=DIR, got {d:?}");
        };
        targets.push(TargetSpec::Dir {
            name: name.into(),
            path: path.into(),
        });
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
        skip_varmail: a.only_tokubench,
        skip_tokubench: a.only_varmail,
    };
    let report = suite::run_suite(&targets, &cfg, &scratch, |msg| eoutln!("{msg}"));
    // Clean up what this run created, never descending into a mount that
    // failed to come down.
    let mountpoints = ["ptsd", "ext4", "noop"].map(|m| scratch.join(m));
    if let Some(still) = mountpoints
        .iter()
        .find(|m| target::mounted_fstype(m).is_some())
    {
        eoutln!(
            "{} is still mounted; leaving {} in place",
            still.display(),
            work_dir.display()
        );
    } else if a.work_dir.is_none() {
        let _ = std::fs::remove_dir_all(&work_dir);
    } else {
        for m in &mountpoints {
            let _ = std::fs::remove_dir(m);
        }
        let _ = std::fs::remove_dir(&scratch);
    }
    if ptsd_journal.exists() && target::mounted_fstype(&scratch.join("ptsd")).is_none() {
        let _ = std::fs::remove_file(&ptsd_journal);
    }
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        out!("{}", suite::render_table(&report));
    }
    suite::first_error(&report)?;
    Ok(())
}
