//! `ptsd sim --sweep` and `ptsd sim merge`: the binary's side of a sweep
//! (turning a run's options into `ptsd sim` words, printing progress); the
//! sweep model, sharding and merging are `ptsd_bench::sweep`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use ptsd_bench::sweep::{self, RunSpec, Shard, ShardWriter, SweepSpec};

/// `ptsd sim merge DIR`.
#[derive(Args, Debug)]
pub struct MergeArgs {
    /// The directory the shards wrote (their --sweep-out).
    dir: PathBuf,
    /// Where to write table.txt, sweep.json and the plots [default: DIR/merged].
    #[arg(long)]
    out: Option<PathBuf>,
}

/// The `ptsd sim` words of one run: `--option value` per option (`true`
/// flags as `--option`, `false` ones left out, lists as repeated options).
pub fn words(run: &RunSpec) -> Result<Vec<String>> {
    let mut words = Vec::new();
    for (key, value) in &run.options {
        let flag = key.replace('_', "-");
        if crate::sim::NOT_SWEEPABLE.contains(&flag.as_str()) {
            bail!(
                "run \"{}\": option {key:?} cannot be part of a sweep",
                run.id
            );
        }
        let one = |v: &toml::Value| -> Result<Option<String>> {
            Ok(match v {
                toml::Value::Boolean(_) => None,
                toml::Value::String(s) => Some(s.clone()),
                toml::Value::Integer(_) | toml::Value::Float(_) => Some(v.to_string()),
                other => bail!(
                    "run \"{}\": option {key:?} has a value of type {} (expected text, a number or true/false)",
                    run.id,
                    other.type_str()
                ),
            })
        };
        match value {
            toml::Value::Boolean(false) => {}
            toml::Value::Boolean(true) => words.push(format!("--{flag}")),
            toml::Value::Array(items) => {
                for item in items {
                    words.push(format!("--{flag}"));
                    words.extend(one(item)?);
                }
            }
            v => {
                words.push(format!("--{flag}"));
                words.extend(one(v)?);
            }
        }
    }
    Ok(words)
}

/// Run this process's shard of the sweep in `file`.
pub fn run(file: &Path, shard: Option<&str>, out: &Path) -> Result<()> {
    let spec = SweepSpec::load(file)?;
    let runs = spec.runs()?;
    let shard = match shard {
        Some(s) => Shard::parse(s)?,
        None => Shard::from_env(|k| std::env::var(k).ok(), spec.shards)?.unwrap_or(Shard::ALL),
    };
    // Every run's options are checked before the first one starts: a typo
    // in the last corner should not cost the whole sweep.
    let mine: Vec<&RunSpec> = shard.select(&runs).collect();
    let all_words = mine.iter().map(|r| words(r)).collect::<Result<Vec<_>>>()?;
    eoutln!(
        "sweep {}: {} runs, shard {shard} runs {} into {}",
        file.display(),
        runs.len(),
        mine.len(),
        out.display()
    );
    let mut writer = ShardWriter::create(out, &spec, &runs, shard)?;
    for (n, (run, words)) in mine.iter().zip(&all_words).enumerate() {
        let t = Instant::now();
        let result = crate::sim::simulate_words(words).with_context(|| {
            format!(
                "run {} \"{}\" (ptsd sim {})",
                run.index,
                run.id,
                words.join(" ")
            )
        })?;
        writer.run(run, result)?;
        eoutln!(
            "[{}/{}] run {} \"{}\" done in {:.1} s",
            n + 1,
            mine.len(),
            run.index,
            run.id,
            t.elapsed().as_secs_f64()
        );
    }
    let path = writer.finish()?;
    print_line(&format!("wrote {}", path.display()))
}

/// `ptsd sim merge DIR`.
pub fn merge(a: &MergeArgs) -> Result<()> {
    let out = a.out.clone().unwrap_or_else(|| a.dir.join("merged"));
    let (report, files) = sweep::merge(&a.dir, &out)?;
    let mut text = report.table();
    text.push_str(&format!(
        "{} runs from {} shard(s); wrote:",
        report.runs.len(),
        report.shards
    ));
    for f in &files {
        text.push_str(&format!(" {}", f.display()));
    }
    print_line(&text)
}

/// stdout may be a closed pipe: that is an error to report, not a panic.
fn print_line(text: &str) -> Result<()> {
    use std::io::Write as _;
    writeln!(std::io::stdout().lock(), "{text}").context("writing to stdout")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_become_sim_words() {
        let spec = SweepSpec::parse(
            r#"
            [base]
            size = "64MiB"
            entry_dirty = true
            adaptive = false
            [axes]
            qd = [8]
            map-memory = ["10%"]
            "#,
        )
        .unwrap();
        let runs = spec.runs().unwrap();
        assert_eq!(
            words(&runs[0]).unwrap(),
            [
                "--entry-dirty",
                "--map-memory",
                "10%",
                "--qd",
                "8",
                "--size",
                "64MiB"
            ]
        );
        let bad = SweepSpec::parse("[base]\npaper = true").unwrap();
        let err = words(&bad.runs().unwrap()[0]).unwrap_err().to_string();
        assert!(err.contains("cannot be part of a sweep"), "{err}");
        let bad = SweepSpec::parse("[base]\nqd = { a = 1 }").unwrap();
        let err = words(&bad.runs().unwrap()[0]).unwrap_err().to_string();
        assert!(err.contains("type table"), "{err}");
    }
}
