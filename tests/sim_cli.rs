//! End-to-end runs of `ptsd sim` on tiny devices: the paper's experiment
//! keeps its shape, single runs and trace replays work, bad input is a clean
//! error.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

fn ptsd(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ptsd"))
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("run ptsd")
}

fn phase<'a>(variant: &'a Value, name: &str) -> &'a Value {
    variant["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("{} has no phase {name}", variant["name"]))
}

fn sum_over_phases(variant: &Value, f: impl Fn(&Value) -> u64) -> u64 {
    variant["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| f(&p["device"]))
        .sum()
}

#[test]
fn paper_experiment_has_the_papers_shape() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    // 64 MiB on 2x2 chips: PaperOptions::tiny().
    let run = ptsd(&[
        "sim",
        "--paper",
        "--scale",
        "0.00390625",
        "--channels",
        "2",
        "--chips",
        "2",
        "--qd",
        "32",
        "--out",
        out,
    ]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "ptsd sim --paper failed: {stderr}");
    let table = String::from_utf8_lossy(&run.stdout);
    for name in [
        "PAGE",
        "DFTL",
        "PART",
        "PART-SCHED",
        "WRITEOPT",
        "phase randread",
        "phase mixed70",
    ] {
        assert!(table.contains(name), "table lacks {name}:\n{table}");
    }
    for file in [
        "paper_ftl.json",
        "table.txt",
        "read_cdf_randread.svg",
        "read_cdf_mixed70.svg",
    ] {
        assert!(Path::new(out).join(file).exists(), "{file} not written");
    }
    let svg = std::fs::read_to_string(Path::new(out).join("read_cdf_mixed70.svg")).unwrap();
    assert!(svg.contains("WRITEOPT") && svg.contains("from p80"));

    let json: Value = serde_json::from_str(
        &std::fs::read_to_string(Path::new(out).join("paper_ftl.json")).unwrap(),
    )
    .unwrap();
    let variants = json["variants"].as_array().unwrap();
    let names: Vec<&str> = variants
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["PAGE", "DFTL", "PART", "PART-SCHED", "WRITEOPT"]);
    for v in variants {
        for p in ["randread", "mixed70"] {
            let cdf = phase(v, p)["read_cdf"].as_array().unwrap();
            assert!(
                cdf.len() > 5,
                "{} {p}: CDF has {} points",
                v["name"],
                cdf.len()
            );
            assert_eq!(cdf.last().unwrap()["quantile"], 1.0);
        }
        assert_eq!(phase(v, "randwrite")["read"]["count"], 0);
    }
    // PAGE holds its whole map: no mapping-page traffic at all.
    let page = &variants[0];
    assert_eq!(
        sum_over_phases(page, |d| {
            ["map_reads", "map_programs"]
                .iter()
                .flat_map(|k| {
                    ["host_read", "host_write", "gc", "checkpoint"]
                        .map(|c| d[k][c].as_u64().unwrap())
                })
                .sum()
        }),
        0
    );
    // DFTL writes dirty mapping pages back while serving reads ...
    let dftl = &variants[1];
    assert!(sum_over_phases(dftl, |d| d["programs_issued_by_reads"].as_u64().unwrap()) > 0);
    assert!(sum_over_phases(dftl, |d| d["map_programs"]["host_read"].as_u64().unwrap()) > 0);
    // ... PTSD never programs on the read path.
    for v in &variants[2..] {
        assert_eq!(
            sum_over_phases(v, |d| d["programs_issued_by_reads"].as_u64().unwrap()),
            0,
            "{} programmed on the read path",
            v["name"]
        );
        assert_eq!(
            sum_over_phases(v, |d| d["map_programs"]["host_read"].as_u64().unwrap()),
            0
        );
        // ... but does read mapping pages on read misses.
        assert!(
            phase(v, "randread")["device"]["map_reads"]["host_read"]
                .as_u64()
                .unwrap()
                > 0
        );
    }
}

#[test]
fn single_run_prints_table_and_json() {
    let run = ptsd(&[
        "sim",
        "--ftl",
        "dftl",
        "--size",
        "64MiB",
        "--channels",
        "2",
        "--chips",
        "2",
        "--pages-per-block",
        "32",
        "--workload",
        "mixed:70",
        "--qd",
        "16",
        "--requests",
        "4000",
        "--precondition",
        "1x",
        "--json",
    ]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let json: Value = serde_json::from_slice(&run.stdout).unwrap();
    let phases = json["report"]["phases"].as_array().unwrap();
    let names: Vec<&str> = phases.iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["fill", "precondition", "mixed:70"]);
    assert_eq!(phases[2]["throughput"]["requests"], 4000);
    assert!(phases[2]["read"]["count"].as_u64().unwrap() > 2000);
    assert!(String::from_utf8_lossy(&run.stderr).contains("mixed:70"));
}

#[test]
fn trace_replay_and_bad_line() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.csv");
    let lines: String = (0..500u64)
        .map(|i| {
            let op = if i % 3 == 0 { "Write" } else { "Read" };
            format!(
                "{},src,0,{op},{},4096,100\n",
                128_166_372_000_000_000 + i * 2_000,
                (i * 7919 % 10_000) * 4096
            )
        })
        .collect::<Vec<_>>()
        .concat();
    std::fs::write(&good, lines).unwrap();
    let base = [
        "sim",
        "--ftl",
        "ptsd",
        "--size",
        "64MiB",
        "--channels",
        "2",
        "--chips",
        "2",
        "--pages-per-block",
        "32",
        "--precondition",
        "0",
        "--json",
        "--trace",
    ];
    for extra in [&[][..], &["--trace-speed", "1.0"][..]] {
        let mut args = base.to_vec();
        args.push(good.to_str().unwrap());
        args.extend_from_slice(extra);
        let run = ptsd(&args);
        assert!(
            run.status.success(),
            "{}",
            String::from_utf8_lossy(&run.stderr)
        );
        let json: Value = serde_json::from_slice(&run.stdout).unwrap();
        let trace = &json["report"]["phases"][0];
        assert_eq!(trace["name"], "trace");
        assert_eq!(trace["throughput"]["requests"], 500);
    }

    let bad = dir.path().join("bad.csv");
    std::fs::write(&bad, "0,src,0,Read,0,4096,1\n1,src,0,Read,zero,4096,1\n").unwrap();
    let mut args = base.to_vec();
    args.push(bad.to_str().unwrap());
    let run = ptsd(&args);
    assert!(!run.status.success());
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.contains("bad.csv:2: field Offset is \"zero\", not a number"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn bad_options_are_errors() {
    for args in [
        &["sim", "--size", "12 parsecs"][..],
        &["sim", "--workload", "sideways"][..],
        &["sim", "--ftl", "page", "--entry-dirty"][..],
        &["sim", "--paper", "--scale=-1"][..],
        &["sim", "--size", "64MiB", "--page-size", "3000"][..],
    ] {
        let run = ptsd(args);
        assert!(!run.status.success(), "{args:?} succeeded");
        let stderr = String::from_utf8_lossy(&run.stderr);
        // clap's own value errors say `error:`, ours `ptsd: error:`.
        assert!(
            stderr.starts_with("error:") || stderr.starts_with("ptsd: error:"),
            "{args:?}: {stderr}"
        );
    }
}

/// A failed command prints one line — the error and its causes — and exits
/// with status 1, also when the user's environment asks for backtraces
/// (an ordinary error is not a crash of the binary).
#[test]
fn errors_are_one_line_without_a_backtrace() {
    let out = Command::new(env!("CARGO_BIN_EXE_ptsd"))
        .args(["fsck", "/nonexistent/ptsd-test.img"])
        .env("RUST_BACKTRACE", "1")
        .output()
        .expect("run ptsd");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("ptsd: error: "), "stderr: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "stderr: {err}");
    assert!(err.contains("ptsd-test.img"), "stderr: {err}");
    assert!(!err.contains("backtrace"), "stderr: {err}");
}
