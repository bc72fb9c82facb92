//! The batch-scheduler files in deploy/ stay valid: the sbatch script parses
//! as bash and asks for an array, the Kubernetes Job is an Indexed Job whose
//! shard count matches its completions, and the example sweep expands.

use std::path::Path;
use std::process::Command;

use ptsd_bench::sweep::SweepSpec;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn slurm_script_is_valid_bash_and_an_array_job() {
    let path = root().join("deploy/slurm/sweep.sbatch");
    let out = Command::new("bash").arg("-n").arg(&path).output().unwrap();
    assert!(
        out.status.success(),
        "bash -n: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("#SBATCH --array="), "no job array");
    assert!(text.contains("sim --sweep"), "does not run a sweep");
}

/// The array's size is the example sweep's shard count, so that a task
/// rerun alone runs the same shard; and the script's comment and the
/// README tell the same commands (rerun, requeue, PTSD, logs).
#[test]
fn slurm_array_matches_the_example_and_the_readme_says_the_same() {
    let text = std::fs::read_to_string(root().join("deploy/slurm/sweep.sbatch")).unwrap();
    let range = text
        .lines()
        .find_map(|l| l.strip_prefix("#SBATCH --array="))
        .unwrap();
    let (lo, hi) = range.split_once('-').unwrap();
    assert_eq!(lo, "0", "array ids are shard indices: they start at 0");
    let tasks = hi.parse::<usize>().unwrap() + 1;
    let spec = SweepSpec::load(&root().join("deploy/examples/sweep.toml")).unwrap();
    assert_eq!(spec.shards, Some(tasks));
    // Slurm's own log would land in the submit directory.
    assert!(text.contains("#SBATCH --output=/dev/null"));
    assert!(text.contains(r#"exec >>"$out/logs/task-"#));

    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    for said in [
        "scontrol requeue JOBID_K",
        "PTSD_SHARD_COUNT=8 sbatch --array=K deploy/slurm/sweep.sbatch",
        "PTSD=$PWD/target/release/ptsd sbatch deploy/slurm/sweep.sbatch",
        "OUT/logs/task-K-JOBID.log",
        "sbatch --array=0-15 --mem=8G",
    ] {
        assert!(text.contains(said), "sweep.sbatch does not say {said:?}");
        assert!(readme.contains(said), "README.md does not say {said:?}");
    }
}

#[test]
fn kubernetes_job_is_indexed_with_a_matching_shard_count() {
    let text = std::fs::read_to_string(root().join("deploy/k8s/sweep-job.yaml")).unwrap();
    let job: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).expect("valid YAML");
    assert_eq!(job["apiVersion"].as_str(), Some("batch/v1"));
    assert_eq!(job["kind"].as_str(), Some("Job"));
    let spec = &job["spec"];
    assert_eq!(spec["completionMode"].as_str(), Some("Indexed"));
    let completions = spec["completions"].as_u64().expect("completions");
    let container = &spec["template"]["spec"]["containers"][0];
    let command: Vec<&str> = container["command"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(&command[..3], ["ptsd", "sim", "--sweep"]);
    let count = container["env"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|e| e["name"].as_str() == Some("PTSD_SHARD_COUNT"))
        .and_then(|e| e["value"].as_str())
        .expect("PTSD_SHARD_COUNT");
    assert_eq!(count.parse::<u64>().unwrap(), completions);
}

#[test]
fn example_sweep_expands() {
    let spec = SweepSpec::load(&root().join("deploy/examples/sweep.toml")).unwrap();
    let runs = spec.runs().unwrap();
    assert_eq!(runs.len(), 24);
    assert_eq!(spec.axis_names(), ["ftl", "map-memory", "qd", "sched"]);
}
