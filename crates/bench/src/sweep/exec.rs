//! Running a sweep: each run's options become `ptsd sim` words, parsed
//! into [`RunArgs`] and simulated with the FTLs of a [`Registry`] (so a
//! researcher's own binary sweeps its scheme beside the built-ins); the
//! command-line front ([`SweepCommand`]) that `ptsd sim --sweep`/`ptsd sim
//! merge` and such binaries share.

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::{Args, Parser, Subcommand};

use super::{merge, RunSpec, Shard, ShardWriter, SweepError, SweepSpec};
use crate::sim::{Registry, RunArgs};

/// Options a sweep may not set: they choose what `ptsd sim` does, not what
/// one run simulates.
pub const NOT_SWEEPABLE: &[&str] = &[
    "paper",
    "zoned",
    "compare",
    "zoned-out",
    "json",
    "sweep",
    "shard",
    "sweep-out",
    "out",
    "threads",
];

/// The `ptsd sim` words of one run: `--option value` per option (`true`
/// flags as `--option`, `false` ones left out, lists as repeated options).
pub fn words(run: &RunSpec) -> Result<Vec<String>, SweepError> {
    let mut words = Vec::new();
    for (key, value) in &run.options {
        let flag = key.replace('_', "-");
        if NOT_SWEEPABLE.contains(&flag.as_str()) {
            return Err(SweepError::Invalid(format!(
                "run \"{}\": option {key:?} cannot be part of a sweep",
                run.id
            )));
        }
        let one = |v: &toml::Value| -> Result<Option<String>, SweepError> {
            Ok(match v {
                toml::Value::Boolean(_) => None,
                toml::Value::String(s) => Some(s.clone()),
                toml::Value::Integer(_) | toml::Value::Float(_) => Some(v.to_string()),
                other => {
                    return Err(SweepError::Invalid(format!(
                        "run \"{}\": option {key:?} has a value of type {} (expected text, a number or true/false)",
                        run.id,
                        other.type_str()
                    )))
                }
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

/// One run's options, as `ptsd sim` parses them.
fn parse_run(run: &RunSpec, words: &[String]) -> Result<RunArgs, SweepError> {
    #[derive(Parser)]
    #[command(no_binary_name = true)]
    struct One {
        #[command(flatten)]
        run: RunArgs,
    }
    One::try_parse_from(words)
        .map(|o| o.run)
        .map_err(|e| SweepError::Invalid(format!("run \"{}\": {e}", run.id)))
}

/// Run this process's shard of the sweep in `file` (`shard` as `I/N`, or
/// from the environment: see [`Shard::from_env`]), each run's `ftl` looked
/// up in `registry`; one JSON-lines file goes into `out`. Progress goes to
/// stderr, a line per run. Returns the file written.
///
/// ```
/// use ptsd_bench::sim::Registry;
/// use ptsd_bench::sweep::{merge, run_shard};
///
/// let dir = tempfile::tempdir().unwrap();
/// let file = dir.path().join("sweep.toml");
/// std::fs::write(&file, r#"
///     [base]
///     size = "64MiB"
///     precondition = "0"
///     requests = 300
///     [axes]
///     ftl = ["page", "dftl"]
/// "#).unwrap();
/// let out = dir.path().join("out");
/// run_shard(&file, Some("0/1"), &out, &Registry::builtins()).unwrap();
/// let (report, _files) = merge(&out, &out.join("merged")).unwrap();
/// assert_eq!(report.runs.len(), 2);
/// ```
pub fn run_shard(
    file: &Path,
    shard: Option<&str>,
    out: &Path,
    registry: &Registry,
) -> Result<PathBuf, SweepError> {
    let spec = SweepSpec::load(file)?;
    let runs = spec.runs()?;
    let shard = match shard {
        Some(s) => Shard::parse(s)?,
        None => Shard::from_env(|k| std::env::var(k).ok(), spec.shards)?.unwrap_or(Shard::ALL),
    };
    // Every run's options are checked before the first one starts: a typo
    // in the last corner should not cost the whole sweep.
    let mine: Vec<&RunSpec> = shard.select(&runs).collect();
    let mut parsed = Vec::with_capacity(mine.len());
    for run in &mine {
        let words = words(run)?;
        let args = parse_run(run, &words)?;
        args.config(registry).map_err(|source| SweepError::Run {
            index: run.index,
            id: run.id.clone(),
            words: words.join(" "),
            source: Box::new(source),
        })?;
        parsed.push((words, args));
    }
    note(format_args!(
        "sweep {}: {} runs, shard {shard} runs {} into {}",
        file.display(),
        runs.len(),
        mine.len(),
        out.display()
    ));
    let mut writer = ShardWriter::create(out, &spec, &runs, shard)?;
    for (n, (run, (words, args))) in mine.iter().zip(&parsed).enumerate() {
        let t = Instant::now();
        let (config, report) = args
            .simulate(registry, None)
            .map_err(|source| SweepError::Run {
                index: run.index,
                id: run.id.clone(),
                words: words.join(" "),
                source: Box::new(source),
            })?;
        writer.run(
            run,
            serde_json::json!({ "config": config, "report": report }),
        )?;
        note(format_args!(
            "[{}/{}] run {} \"{}\" done in {:.1} s",
            n + 1,
            mine.len(),
            run.index,
            run.id,
            t.elapsed().as_secs_f64()
        ));
    }
    writer.finish()
}

/// A progress line on stderr (lost, not a panic, if stderr is gone).
fn note(args: std::fmt::Arguments<'_>) {
    crate::cmd::out::write_ignoring_errors(std::io::stderr().lock(), args, true);
}

/// `… run SWEEP.toml` and `… merge DIR`: a sweep binary's commands.
#[derive(Subcommand, Debug)]
pub enum SweepCommand {
    /// Run (this task's shard of) a sweep: a TOML file with `[base]`
    /// options and `[axes]` (option = list of values; the cartesian
    /// product) or `[[runs]]`; any option of `ptsd sim` may appear, and
    /// `ftl` may name a scheme the binary registered.
    Run(RunShardArgs),
    /// Merge the shard files of a sweep: check that every run is present
    /// exactly once, then write a table, one JSON and plots against each axis.
    Merge(MergeArgs),
}

/// `… run SWEEP.toml [--shard I/N] [--sweep-out DIR]`.
#[derive(Args, Debug)]
pub struct RunShardArgs {
    /// The sweep file.
    #[arg(value_name = "SWEEP.toml")]
    pub file: PathBuf,
    /// Run the I-th of N disjoint slices (`I/N`) [default: I from
    /// SLURM_ARRAY_TASK_ID or JOB_COMPLETION_INDEX, N from PTSD_SHARD_COUNT,
    /// the sweep's `shards`, or a Slurm array of ids 0..N-1; else the whole
    /// sweep].
    #[arg(long, value_name = "I/N")]
    pub shard: Option<String>,
    /// Directory of the shard files (`merge` reads it).
    #[arg(long, default_value = "target/sweep")]
    pub sweep_out: PathBuf,
}

/// `… merge DIR [--out DIR]`.
#[derive(Args, Debug)]
pub struct MergeArgs {
    /// The directory the shards wrote (their --sweep-out).
    pub dir: PathBuf,
    /// Where to write table.txt, sweep.json and the plots [default: DIR/merged].
    #[arg(long)]
    pub out: Option<PathBuf>,
}

impl SweepCommand {
    /// Run the command with the FTLs of `registry`; returns what to print
    /// on stdout (`wrote FILE`, or the merged table and the files written).
    ///
    /// ```
    /// use clap::Parser;
    /// use ptsd_bench::sim::Registry;
    /// use ptsd_bench::sweep::SweepCommand;
    ///
    /// #[derive(Parser)]
    /// struct Cli {
    ///     #[command(subcommand)]
    ///     cmd: SweepCommand,
    /// }
    /// let dir = tempfile::tempdir().unwrap();
    /// let cli = Cli::try_parse_from(["my-sweep", "merge", dir.path().to_str().unwrap()]).unwrap();
    /// // Nothing to merge in an empty directory: a clear error.
    /// assert!(cli.cmd.run(&Registry::builtins()).is_err());
    /// ```
    pub fn run(&self, registry: &Registry) -> Result<String, SweepError> {
        match self {
            SweepCommand::Run(a) => {
                let path = run_shard(&a.file, a.shard.as_deref(), &a.sweep_out, registry)?;
                Ok(format!("wrote {}", path.display()))
            }
            SweepCommand::Merge(a) => merge_command(a),
        }
    }
}

/// `merge DIR`: the table, then the files written.
pub fn merge_command(a: &MergeArgs) -> Result<String, SweepError> {
    let out = a.out.clone().unwrap_or_else(|| a.dir.join("merged"));
    let (report, files) = merge(&a.dir, &out)?;
    let mut text = report.table();
    text.push_str(&format!(
        "{} runs from {} shard(s); wrote:",
        report.runs.len(),
        report.shards
    ));
    for f in &files {
        text.push_str(&format!(" {}", f.display()));
    }
    Ok(text)
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

    #[test]
    fn an_unknown_ftl_fails_before_any_run() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("s.toml");
        std::fs::write(
            &file,
            "[base]\nsize = \"64MiB\"\n[axes]\nftl = [\"dftl\", \"nosuch\"]\n",
        )
        .unwrap();
        let out = dir.path().join("out");
        let err = run_shard(&file, None, &out, &Registry::builtins()).unwrap_err();
        let chain = format!("{err}: {}", std::error::Error::source(&err).unwrap());
        assert!(
            chain.contains("ftl=nosuch") && chain.contains("expected one of"),
            "{chain}"
        );
        assert!(!out.exists(), "no shard file for a sweep that cannot run");
    }
}
