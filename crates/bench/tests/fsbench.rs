//! CI-sized runs of both workloads: on a temp dir, and on the no-op FUSE fs
//! (skipped, saying why, where FUSE cannot be mounted).

use std::path::Path;
use std::time::Duration;

use ptsd_bench::fsbench::bulk::{BulkConfig, BulkPart};
use ptsd_bench::fsbench::devstat::FlushCounter;
use ptsd_bench::fsbench::noopfs::{NoopMount, NoopOptions};
use ptsd_bench::fsbench::report;
use ptsd_bench::fsbench::suite::{self, Durability, Role, SuiteConfig, TargetSpec};
use ptsd_bench::fsbench::{
    run_tokubench, run_varmail, Bound, FsBenchError, SyncKind, TokubenchConfig, VarmailConfig,
};

fn varmail_cfg(sync: SyncKind) -> VarmailConfig {
    VarmailConfig {
        threads: 2,
        files_per_thread: 20,
        mean_file_size: 2048,
        append_max: 3000,
        bound: Bound::Ops(100),
        sync,
        seed: 42,
        cleanup: false,
        ..VarmailConfig::default()
    }
}

fn toku_cfg() -> TokubenchConfig {
    TokubenchConfig {
        threads: 2,
        files_per_dir: 100,
        bound: Bound::Ops(250),
        verify_per_thread: 1000,
        seed: 42,
        cleanup: false,
        ..TokubenchConfig::default()
    }
}

fn count_entries(dir: &Path) -> usize {
    std::fs::read_dir(dir).unwrap().count()
}

/// Runs both workloads in `dir` and checks what they report and leave.
fn check_both(dir: &Path) {
    let cfg = varmail_cfg(SyncKind::Fsync);
    let r = run_varmail(dir, &cfg).unwrap();
    assert_eq!(r.ops, 2 * 100, "every op of every thread counted");
    // 100 ops = 25 loops of 4 steps, each loop with two fsyncs.
    assert_eq!(r.fsync.count, 2 * 25 * 2);
    assert_eq!(r.read_whole.count, 2 * 25);
    assert!(r.bytes_verified > 0 && r.bytes_written > 0);
    assert!(r.fsync.p50_us > 0.0 && r.fsync.p99_us >= r.fsync.p50_us);
    // Each loop deletes one file and creates one: the 80 % preallocated remain.
    assert_eq!(r.files_at_end, 2 * 16);
    assert_eq!(count_entries(&dir.join("varmail/t00")), 16);
    assert_eq!(count_entries(&dir.join("varmail/t01")), 16);

    let t = run_tokubench(dir, &toku_cfg()).unwrap();
    assert_eq!(t.files, 500);
    assert_eq!(t.dirs, 2 * 3, "250 files per thread, 100 per directory");
    assert_eq!(t.verified_files, 500, "every file read back");
    assert_eq!(count_entries(&dir.join("tokubench/t01/d00002")), 50);
    let f = dir.join("tokubench/t00/d00001/f0042");
    assert_eq!(std::fs::metadata(&f).unwrap().len(), 4096);
    assert!(t.files_per_sec > 0.0 && t.create.count == 500);
}

#[test]
fn workloads_on_a_plain_directory() {
    let dir = tempfile::tempdir().unwrap();
    check_both(dir.path());
}

#[test]
fn cleanup_removes_the_workload_directories() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = VarmailConfig {
        cleanup: true,
        sync: SyncKind::Fdatasync,
        ..varmail_cfg(SyncKind::Fdatasync)
    };
    let r = run_varmail(dir.path(), &cfg).unwrap();
    assert_eq!(r.ops, 200);
    let t = run_tokubench(
        dir.path(),
        &TokubenchConfig {
            cleanup: true,
            ..toku_cfg()
        },
    )
    .unwrap();
    assert_eq!(t.files, 500);
    assert_eq!(count_entries(dir.path()), 0);
}

#[test]
fn same_seed_same_choices() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let cfg = VarmailConfig {
        threads: 1,
        ..varmail_cfg(SyncKind::Fdatasync)
    };
    let ra = run_varmail(a.path(), &cfg).unwrap();
    let rb = run_varmail(b.path(), &cfg).unwrap();
    assert_eq!(
        (ra.bytes_written, ra.bytes_verified),
        (rb.bytes_written, rb.bytes_verified)
    );
    let names = |d: &Path| {
        let mut v: Vec<_> = std::fs::read_dir(d.join("varmail/t00"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        v.sort();
        v
    };
    assert_eq!(names(a.path()), names(b.path()));
}

#[test]
fn duration_bound_stops() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = TokubenchConfig {
        bound: Bound::Duration(Duration::from_millis(100)),
        ..toku_cfg()
    };
    let t = run_tokubench(dir.path(), &cfg).unwrap();
    assert!(t.files > 0);
    assert!(t.elapsed_s < 30.0, "stopped in {} s", t.elapsed_s);
}

#[test]
fn bad_configurations_and_paths_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let zero = VarmailConfig {
        bound: Bound::Ops(0),
        ..varmail_cfg(SyncKind::Fsync)
    };
    assert!(matches!(
        run_varmail(dir.path(), &zero),
        Err(FsBenchError::Config(_))
    ));
    let no_threads = TokubenchConfig {
        threads: 0,
        ..toku_cfg()
    };
    assert!(matches!(
        run_tokubench(dir.path(), &no_threads),
        Err(FsBenchError::Config(_))
    ));
    let missing = dir.path().join("not/there");
    let err = run_varmail(&missing, &varmail_cfg(SyncKind::Fsync)).unwrap_err();
    assert!(matches!(err, FsBenchError::Io { op: "mkdir", .. }), "{err}");
    // A second run refuses to reuse a directory it did not create.
    run_tokubench(dir.path(), &toku_cfg()).unwrap();
    assert!(matches!(
        run_tokubench(dir.path(), &toku_cfg()),
        Err(FsBenchError::Io { .. })
    ));
}

#[test]
fn suite_reports_a_directory_target_and_a_failing_one() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = SuiteConfig {
        varmail: VarmailConfig {
            cleanup: true,
            ..varmail_cfg(SyncKind::Fsync)
        },
        tokubench: TokubenchConfig {
            cleanup: true,
            ..toku_cfg()
        },
        skip_varmail: false,
        skip_tokubench: false,
        bulk: BulkConfig {
            threads: 2,
            file_size: 1 << 20,
            io_size: 256 << 10,
            rand_bound: Bound::Ops(50),
            drop_caches: false,
            ..BulkConfig::default()
        },
        skip_bulk: false,
        rounds: 3,
        settle: Duration::ZERO,
        disk: FlushCounter::disk_of(dir.path()),
    };
    let targets = [
        TargetSpec {
            role: Role::Anchor,
            ..TargetSpec::dir(
                suite::EXT4_SHM,
                dir.path().to_path_buf(),
                Durability::ProcessCrash,
            )
        },
        TargetSpec::dir(
            suite::PTSD,
            dir.path().join("missing"),
            Durability::ProcessCrash,
        ),
    ];
    let runs = suite::run_suite(&targets, &cfg, dir.path(), |_| {});
    // Three rounds of two targets, the order rotated each round.
    let order: Vec<&str> = runs.runs.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(
        order,
        [
            suite::EXT4_SHM,
            suite::PTSD,
            suite::PTSD,
            suite::EXT4_SHM,
            suite::EXT4_SHM,
            suite::PTSD
        ]
    );
    let ok = &runs.runs[0];
    assert_eq!(ok.varmail.as_ref().unwrap().result.ops, 200);
    assert_eq!(ok.tokubench.as_ref().unwrap().result.files, 500);
    let bulk = ok.bulk.as_ref().unwrap();
    assert_eq!(bulk.result.bytes, 2 << 20);
    assert_eq!(bulk.result.rand_ops, 100);
    assert_eq!(
        ok.bulk_parts.iter().map(|p| p.0).collect::<Vec<_>>(),
        [BulkPart::SeqWrite, BulkPart::SeqRead, BulkPart::RandRead]
    );
    assert!(ok.errors.is_empty());
    assert_eq!(
        runs.runs[1].errors.len(),
        3,
        "all three workloads failed on the missing dir"
    );
    let report = report::build(&cfg, runs);
    assert!(report::first_error(&report).is_err());
    let anchor = &report.summary[0];
    assert_eq!(anchor.varmail_ops.unwrap().n, 3, "one figure per round");
    let cmp = report
        .comparisons
        .iter()
        .find(|c| c.num == suite::PTSD && c.den == suite::EXT4_SHM)
        .unwrap();
    assert_eq!(cmp.verdict, report::Verdict::NotMeasured);
    let table = report::render_table(&report);
    assert!(
        table.contains("ext4-shm")
            && table.contains("round 1 ptsd: varmail")
            && table.contains("cold read MB/s"),
        "{table}"
    );
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["runs"][0]["varmail"]["result"]["ops"], 200);
    assert_eq!(json["targets"][0]["durability"], "process-crash");
}

/// Why FUSE cannot be mounted here, if it cannot.
fn fuse_unavailable() -> Option<String> {
    if !Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse is missing".into());
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root (the no-op fs mounts with mount(2), not fusermount)".into());
    }
    None
}

#[test]
fn workloads_on_the_noop_fuse_fs() {
    if let Some(why) = fuse_unavailable() {
        eprintln!("skipping workloads_on_the_noop_fuse_fs: {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let counts = dir.path().join("counts");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let mount = NoopMount::mount(
        &mnt,
        NoopOptions {
            threads: 2,
            op_counts: Some(counts.clone()),
            ..NoopOptions::default()
        },
    )
    .unwrap();
    check_both(mount.dir());
    // Every request was counted; a cached negative entry spares the second
    // lookup of a missing name.
    let names = ptsd_fs::opcount::OP_NAMES;
    let read = ptsd_fs::opcount::read_counts(&counts).unwrap();
    let count = |op: &str| read[names.iter().position(|n| *n == op).unwrap()];
    assert!(count("create") >= 500, "{read:?}");
    assert_eq!(count("fsync"), 100, "one FSYNC per fsync(2) of varmail");
    // ENOSYS, then the kernel stops sending FLUSH; but closes already in
    // flight on the two workload threads may send theirs before the first
    // ENOSYS is seen (one run in several here counted 2).
    assert!(
        (1..=2).contains(&count("flush")),
        "FLUSH until the first ENOSYS: {read:?}"
    );
    let missing = mount.dir().join("no-such-name");
    let before = count("lookup");
    assert!(!missing.exists());
    assert!(!missing.exists());
    let read = ptsd_fs::opcount::read_counts(&counts).unwrap();
    let lookups = read[names.iter().position(|n| *n == "lookup").unwrap()];
    assert_eq!(lookups, before + 1, "the negative entry was cached");
    std::fs::remove_dir_all(mount.dir().join("varmail")).unwrap();
    std::fs::remove_dir_all(mount.dir().join("tokubench")).unwrap();
    assert_eq!(count_entries(mount.dir()), 0);
    mount.unmount().unwrap();
    assert!(
        ptsd_bench::fsbench::target::mounted_fstype(&mnt).is_none_or(|t| !t.starts_with("fuse"))
    );
}
