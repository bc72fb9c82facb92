//! `ptsd sim --sweep` sharded over processes as a batch scheduler would run
//! it, merged by `ptsd sim merge`: the same output as one unsharded process,
//! and a missing shard named.

use std::path::Path;
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

fn ptsd(args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ptsd"));
    c.args(args).env("RUST_BACKTRACE", "0");
    for var in [
        "SLURM_ARRAY_TASK_ID",
        "SLURM_ARRAY_TASK_MIN",
        "SLURM_ARRAY_TASK_COUNT",
        "JOB_COMPLETION_INDEX",
        "PTSD_SHARD_COUNT",
    ] {
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

    // Four shard processes at once: two by flag, one as a Slurm array task
    // (ids 10..13), one as a Kubernetes Indexed Job pod.
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
                ("SLURM_ARRAY_TASK_ID", "12"),
                ("SLURM_ARRAY_TASK_MIN", "10"),
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
