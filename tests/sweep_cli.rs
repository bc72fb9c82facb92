//! `ptsd sim --sweep` sharded over processes as a batch scheduler would run
//! it, merged by `ptsd sim merge`: the same output as one unsharded process,
//! and a missing shard named.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use ptsd_bench::sweep::strip_wall_clock;

const SWEEP: &str = r#"
# 16 small runs: 2 schemes x 2 schedulers x 2 queue depths x 2 map sizes.
[base]
size = "64MiB"
channels = 2
chips = 2
requests = 1500
precondition = "0.2x"
workload = "mixed:70"
[axes]
ftl = ["dftl", "ptsd"]
sched = ["fifo", "read-priority"]
qd = [4, 16]
map-memory = ["20%", "40%"]
"#;

/// What a batch scheduler sets, cleared for every child.
const SCHEDULER_VARS: [&str; 9] = [
    "SLURM_ARRAY_TASK_ID",
    "SLURM_ARRAY_TASK_MIN",
    "SLURM_ARRAY_TASK_MAX",
    "SLURM_ARRAY_TASK_COUNT",
    "SLURM_ARRAY_JOB_ID",
    "SLURM_JOB_ID",
    "JOB_COMPLETION_INDEX",
    "PTSD_SHARD_COUNT",
    "PTSD",
];

fn ptsd(args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ptsd"));
    c.args(args).env("RUST_BACKTRACE", "0");
    for var in SCHEDULER_VARS {
        c.env_remove(var);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

fn ok(out: Output, what: &str) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{what} failed:\n{stderr}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn merged_json(dir: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(dir.join("merged/sweep.json")).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    strip_wall_clock(&mut v);
    v
}

#[test]
fn four_shard_processes_merge_to_the_unsharded_result() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("sweep.toml");
    std::fs::write(&file, SWEEP).unwrap();
    let file = file.to_str().unwrap();
    let whole = tmp.path().join("whole");
    let sharded = tmp.path().join("sharded");
    let sharded_s = sharded.to_str().unwrap();

    // Four shard processes at once: two by flag, one as a task of a Slurm
    // array of 4, one as a Kubernetes Indexed Job pod.
    let children = vec![
        ptsd(
            &[
                "sim",
                "--sweep",
                file,
                "--shard",
                "0/4",
                "--sweep-out",
                sharded_s,
            ],
            &[],
        ),
        ptsd(
            &[
                "sim",
                "--sweep",
                file,
                "--shard",
                "1/4",
                "--sweep-out",
                sharded_s,
            ],
            &[],
        ),
        ptsd(
            &["sim", "--sweep", file, "--sweep-out", sharded_s],
            &[
                ("SLURM_ARRAY_TASK_ID", "2"),
                ("SLURM_ARRAY_TASK_MIN", "0"),
                ("SLURM_ARRAY_TASK_MAX", "3"),
                ("SLURM_ARRAY_TASK_COUNT", "4"),
            ],
        ),
        ptsd(
            &["sim", "--sweep", file, "--sweep-out", sharded_s],
            &[("JOB_COMPLETION_INDEX", "3"), ("PTSD_SHARD_COUNT", "4")],
        ),
    ]
    .into_iter()
    .map(|mut c| c.output_spawned())
    .collect::<Vec<_>>();
    for (i, child) in children.into_iter().enumerate() {
        ok(child.wait_with_output().unwrap(), &format!("shard {i}"));
    }
    for i in 0..4 {
        assert!(
            sharded.join(format!("shard-{i:04}-of-0004.jsonl")).exists(),
            "shard {i} wrote no file"
        );
    }
    ok(
        ptsd(
            &[
                "sim",
                "--sweep",
                file,
                "--sweep-out",
                whole.to_str().unwrap(),
            ],
            &[],
        )
        .output()
        .unwrap(),
        "unsharded sweep",
    );

    let table_sharded = ok(
        ptsd(&["sim", "merge", sharded_s], &[]).output().unwrap(),
        "merge",
    );
    assert!(
        table_sharded.contains("16 runs from 4 shard(s)"),
        "{table_sharded}"
    );
    ok(
        ptsd(&["sim", "merge", whole.to_str().unwrap()], &[])
            .output()
            .unwrap(),
        "merge",
    );
    // Byte for byte: the table and the plots have no wall-clock figures;
    // the JSON does, and is compared without them.
    for file in ["table.txt", "throughput_vs_qd.svg", "tail_vs_ftl.svg"] {
        let a = std::fs::read(sharded.join("merged").join(file)).unwrap();
        let b = std::fs::read(whole.join("merged").join(file)).unwrap();
        assert!(
            a == b,
            "{file} differs between the sharded and the whole sweep"
        );
    }
    let (a, b) = (merged_json(&sharded), merged_json(&whole));
    assert_eq!(a["runs"].as_array().unwrap().len(), 16);
    assert!(a["runs"] == b["runs"], "merged runs differ");
    // The runs really differ from each other (no constant result).
    let iops: std::collections::BTreeSet<u64> = a["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            r["result"]["report"]["phases"]
                .as_array()
                .unwrap()
                .last()
                .unwrap()["throughput"]["iops"]
                .as_f64()
                .unwrap() as u64
        })
        .collect();
    assert!(
        iops.len() > 4,
        "suspiciously few distinct results: {iops:?}"
    );

    // A shard that never ran is reported by name, with its runs.
    std::fs::remove_file(sharded.join("shard-0002-of-0004.jsonl")).unwrap();
    let out = ptsd(&["sim", "merge", sharded_s], &[]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("4 of 16 runs are not there exactly once"),
        "{err}"
    );
    assert!(
        err.contains("missing run 2 \"ftl=dftl map-memory=20% qd=16 sched=fifo\" (shard 2/4: its shard file is missing)"),
        "{err}"
    );
}

#[test]
fn bad_sweeps_and_shards_are_clear_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("s.toml");
    let out_dir = tmp.path().join("o");
    let out_s = out_dir.to_str().unwrap();
    let run = |toml: &str, extra: &[&str], env: &[(&str, &str)]| {
        std::fs::write(&file, toml).unwrap();
        let mut args = vec![
            "sim",
            "--sweep",
            file.to_str().unwrap(),
            "--sweep-out",
            out_s,
        ];
        args.extend_from_slice(extra);
        let out = ptsd(&args, env).output().unwrap();
        assert!(!out.status.success(), "{toml} {extra:?} succeeded");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = run("[axes]\nqd = [1]\nbogus-option = [1]", &[], &[]);
    assert!(err.contains("bogus-option"), "{err}");
    let err = run("[axes]\nqd = [1]", &["--shard", "4/4"], &[]);
    assert!(err.contains("expected I/N"), "{err}");
    let err = run("[axes]\nqd = [1]", &[], &[("JOB_COMPLETION_INDEX", "0")]);
    assert!(err.contains("PTSD_SHARD_COUNT"), "{err}");
    let err = run("[axes\n", &[], &[]);
    assert!(err.contains("sweep file"), "{err}");
    // Nothing half-written is left that merge would take for a shard.
    assert!(!out_dir.join("shard-0000-of-0001.jsonl").exists());
}

/// 4 tiny runs, `shards = 4` unless `declared` is false.
fn small_sweep(declared: bool) -> String {
    format!(
        "{}[base]\nsize = \"64MiB\"\nchannels = 2\nchips = 2\nrequests = 800\n\
         precondition = \"0.1x\"\nworkload = \"mixed:70\"\n\
         [axes]\nftl = [\"dftl\", \"ptsd\"]\nqd = [4, 16]\n",
        if declared { "shards = 4\n" } else { "" }
    )
}

/// A temporary directory with a submit directory, `small_sweep(true)` as
/// the sweep file and the output directory's path: what an array runs in.
fn slurm_dirs() -> (tempfile::TempDir, PathBuf, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let submit = tmp.path().join("submit");
    std::fs::create_dir(&submit).unwrap();
    let sweep = tmp.path().join("sweep.toml");
    std::fs::write(&sweep, small_sweep(true)).unwrap();
    let out = tmp.path().join("out");
    (tmp, submit, sweep, out)
}

/// `deploy/slurm/sweep.sbatch SWEEP OUT` run as Slurm runs a task: in the
/// submit directory, with the array's variables (`sbatch --array=LO-HI`,
/// job `job`) and PTSD naming the binary.
fn sbatch_task(
    submit: &Path,
    sweep: &Path,
    out: &Path,
    job: u32,
    (lo, hi): (u32, u32),
    id: u32,
    extra: &[(&str, &str)],
) -> Command {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/slurm/sweep.sbatch");
    let mut c = Command::new("bash");
    c.arg(script).arg(sweep).arg(out).current_dir(submit);
    for var in SCHEDULER_VARS {
        c.env_remove(var);
    }
    let vars = [
        ("SLURM_ARRAY_JOB_ID", job.to_string()),
        ("SLURM_JOB_ID", (job + id).to_string()),
        ("SLURM_ARRAY_TASK_ID", id.to_string()),
        ("SLURM_ARRAY_TASK_MIN", lo.to_string()),
        ("SLURM_ARRAY_TASK_MAX", hi.to_string()),
        ("SLURM_ARRAY_TASK_COUNT", (hi - lo + 1).to_string()),
        ("PTSD", env!("CARGO_BIN_EXE_ptsd").to_string()),
        ("RUST_BACKTRACE", "0".to_string()),
    ];
    c.envs(vars);
    c.envs(extra.iter().copied());
    c
}

fn shard_without_wall_clock(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            strip_wall_clock(&mut v);
            v
        })
        .collect()
}

/// Issue 49 §3: `sbatch --array=0-3`, task 2 lost, then rerun as the
/// script's comment says (`sbatch --array=2`: an array of one task, id 2)
/// rewrites exactly shard 2 of 4, and the directory merges.
#[test]
fn a_slurm_task_rerun_as_an_array_of_one_rewrites_its_own_shard() {
    let (tmp, submit, sweep, out) = slurm_dirs();

    let tasks: Vec<_> = (0..4)
        .map(|id| sbatch_task(&submit, &sweep, &out, 100, (0, 3), id, &[]).output_spawned())
        .collect();
    for (id, t) in tasks.into_iter().enumerate() {
        ok(t.wait_with_output().unwrap(), &format!("array task {id}"));
        let log = out.join(format!("logs/task-{id}-100.log"));
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(text.contains(&format!("shard {id}/4")), "{text}");
    }
    // The logs are under the output directory, none in the submit one.
    assert_eq!(std::fs::read_dir(&submit).unwrap().count(), 0);
    let lost = out.join("shard-0002-of-0004.jsonl");
    let before = shard_without_wall_clock(&lost);
    std::fs::remove_file(&lost).unwrap();
    let err = String::from_utf8_lossy(
        &ptsd(&["sim", "merge", out.to_str().unwrap()], &[])
            .output()
            .unwrap()
            .stderr,
    )
    .into_owned();
    assert!(
        err.contains("(shard 2/4: its shard file is missing)"),
        "{err}"
    );

    // `sbatch --array=2`: Slurm says TASK_COUNT=1, MIN=MAX=2.
    ok(
        sbatch_task(&submit, &sweep, &out, 200, (2, 2), 2, &[])
            .output()
            .unwrap(),
        "rerun of task 2",
    );
    assert!(out.join("logs/task-2-200.log").exists());
    assert_eq!(shard_without_wall_clock(&lost), before);
    let names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("shard-"))
        .collect();
    assert_eq!(names.len(), 4, "{names:?}");
    let table = ok(
        ptsd(&["sim", "merge", out.to_str().unwrap()], &[])
            .output()
            .unwrap(),
        "merge",
    );
    assert!(table.contains("4 runs from 4 shard(s)"), "{table}");

    // A sweep without `shards`: the first array's size gave the count, a
    // rerun as an array of one cannot know it, says how, and writes nothing;
    // with PTSD_SHARD_COUNT it runs shard 1 of 4 of the same sweep.
    let undeclared = tmp.path().join("undeclared.toml");
    std::fs::write(&undeclared, small_sweep(false)).unwrap();
    std::fs::remove_file(out.join("shard-0001-of-0004.jsonl")).unwrap();
    let o = sbatch_task(&submit, &undeclared, &out, 300, (1, 1), 1, &[])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let log = std::fs::read_to_string(out.join("logs/task-1-300.log")).unwrap();
    assert!(
        log.contains("an array of one task")
            && log.contains("PTSD_SHARD_COUNT=N sbatch --array=1")
            && log.contains("shards = N"),
        "{log}"
    );
    assert!(!out.join("shard-0000-of-0001.jsonl").exists());
    ok(
        sbatch_task(
            &submit,
            &undeclared,
            &out,
            400,
            (1, 1),
            1,
            &[("PTSD_SHARD_COUNT", "4")],
        )
        .output()
        .unwrap(),
        "rerun of task 1 with PTSD_SHARD_COUNT",
    );
    let table = ok(
        ptsd(&["sim", "merge", out.to_str().unwrap()], &[])
            .output()
            .unwrap(),
        "merge",
    );
    assert!(table.contains("4 runs from 4 shard(s)"), "{table}");
    assert_eq!(std::fs::read_dir(&submit).unwrap().count(), 0);
}

trait SpawnOutput {
    fn output_spawned(&mut self) -> std::process::Child;
}

impl SpawnOutput for Command {
    fn output_spawned(&mut self) -> std::process::Child {
        self.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn ptsd")
    }
}

/// `SWEEP_BIN=...`: the script runs a sweep binary of one's own
/// (`ptsd_bench::sweep::SweepCommand`: `run SWEEP --sweep-out OUT`) in
/// place of `ptsd sim --sweep`, the task's shard from the Slurm variables.
/// Here the binary is a stand-in that says how it was called and hands the
/// run to ptsd.
#[test]
fn the_slurm_script_runs_a_sweep_binary_of_ones_own() {
    let (tmp, submit, sweep, out) = slurm_dirs();
    let bin = tmp.path().join("my-sweep");
    std::fs::write(
        &bin,
        "#!/bin/sh\necho \"my-sweep $*\"\n[ \"$1\" = run ] && [ \"$3\" = --sweep-out ] || exit 9\n\
         exec \"$PTSD\" sim --sweep \"$2\" --sweep-out \"$4\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&bin, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let task = sbatch_task(
        &submit,
        &sweep,
        &out,
        400,
        (0, 3),
        1,
        &[("SWEEP_BIN", bin.to_str().unwrap())],
    )
    .output()
    .unwrap();
    ok(task, "array task 1 with SWEEP_BIN");
    let log = std::fs::read_to_string(out.join("logs/task-1-400.log")).unwrap();
    let called = format!(
        "my-sweep run {} --sweep-out {}",
        sweep.display(),
        out.display()
    );
    assert!(log.contains(&called) && log.contains("shard 1/4"), "{log}");
    assert!(out.join("shard-0001-of-0004.jsonl").exists());
}
