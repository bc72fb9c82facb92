//! `tpftl-sweep`: a sweep naming TPFTL beside DFTL, run in two shards by
//! the binary and merged, names both with sane figures.

use std::path::Path;
use std::process::Command;

fn sweep(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_tpftl-sweep"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "tpftl-sweep {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn a_sharded_sweep_of_tpftl_and_dftl_merges() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("sweep.toml");
    std::fs::write(
        &file,
        r#"
        [base]
        size = "64MiB"
        workload = "mixed:70"
        precondition = "1x"
        requests = 4000
        [axes]
        ftl = ["dftl", "tpftl"]
        request-pages = [1, 8]
        "#,
    )
    .unwrap();
    let out = dir.path().join("out");
    let (f, o) = (file.to_str().unwrap(), out.to_str().unwrap());
    for shard in ["0/2", "1/2"] {
        let printed = sweep(&["run", f, "--shard", shard, "--sweep-out", o]);
        assert!(printed.starts_with("wrote "), "{printed}");
    }
    let table = sweep(&["merge", o]);
    assert!(table.contains("4 runs from 2 shard(s)"), "{table}");

    let merged: serde_json::Value =
        serde_json::from_slice(&std::fs::read(Path::new(o).join("merged/sweep.json")).unwrap())
            .unwrap();
    let runs = merged["runs"].as_array().unwrap();
    let ids: Vec<&str> = runs.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(
        ids,
        [
            "ftl=dftl request-pages=1",
            "ftl=dftl request-pages=8",
            "ftl=tpftl request-pages=1",
            "ftl=tpftl request-pages=8",
        ]
    );
    for r in runs {
        let id = r["id"].as_str().unwrap();
        assert!(table.contains(id), "{id} missing from\n{table}");
        let report = &r["result"]["report"];
        let scheme = if id.contains("tpftl") {
            "tpftl "
        } else {
            "dftl "
        };
        assert!(
            report["label"].as_str().unwrap().starts_with(scheme),
            "{report}"
        );
        let phase = report["phases"].as_array().unwrap().last().unwrap();
        assert_eq!(phase["throughput"]["requests"], 4000, "{id}");
        let iops = phase["throughput"]["iops"].as_f64().unwrap();
        let waf = phase["device"]["waf"].as_f64().unwrap();
        assert!(iops > 1000.0 && iops < 1e7, "{id}: {iops} IOPS");
        assert!((1.0..20.0).contains(&waf), "{id}: WAF {waf}");
        // TPFTL's own counters reach the JSON.
        let scheme_counters = &phase["device"]["scheme"];
        assert_eq!(
            id.contains("tpftl"),
            scheme_counters.get("prefetched").is_some(),
            "{id}: {scheme_counters}"
        );
    }
}
