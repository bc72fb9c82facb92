//! Simulator sweeps: a sweep file names a base configuration and the axes to
//! vary; the runs are its cartesian product (or an explicit list), each
//! deterministic and named by its axis values. A sweep is cut into `N`
//! disjoint shards so that a Slurm job array or a Kubernetes Indexed Job runs
//! it unchanged ([`Shard::from_env`]); every shard writes one JSON-lines file
//! ([`ShardWriter`]), and [`merge`] checks that every run is present exactly
//! once before writing one table, one JSON and the plots.
//!
//! A run is a list of `option = value` pairs, the options of `ptsd sim`
//! ([`crate::sim::RunArgs`]); [`run_shard`] simulates a shard's runs with
//! the FTLs of a [`crate::sim::Registry`] (the built-ins, plus any custom
//! scheme the calling binary registered), and [`SweepCommand`] is the
//! `run`/`merge` command line a researcher's own sweep binary needs.
//!
//! ```
//! use ptsd_bench::sweep::{Shard, SweepSpec};
//!
//! let spec = SweepSpec::parse(r#"
//!     [base]
//!     size = "64MiB"
//!     workload = "randwrite"
//!     [axes]
//!     ftl = ["page", "dftl"]
//!     qd = [8, 32]
//! "#).unwrap();
//! let runs = spec.runs().unwrap();
//! assert_eq!(runs.len(), 4);
//! assert_eq!(runs[0].id, "ftl=page qd=8");
//! // Shard 1 of 2 takes every other run.
//! let mine: Vec<_> = Shard { index: 1, count: 2 }.select(&runs).collect();
//! assert_eq!(mine.len(), 2);
//! assert_eq!(mine[0].id, "ftl=page qd=32");
//! ```

mod exec;
mod merge;
mod plot;

use std::collections::BTreeMap;
use std::fmt;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

pub use exec::{
    merge_command, run_shard, words, MergeArgs, RunShardArgs, SweepCommand, NOT_SWEEPABLE,
};
pub use merge::{merge, strip_wall_clock, MergeReport};

/// A sweep could not be read, expanded, sharded or merged.
#[derive(Debug, Error)]
pub enum SweepError {
    #[error("sweep file {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("sweep file")]
    Parse(#[from] toml::de::Error),
    #[error("sweep file: {0}")]
    Invalid(String),
    #[error("shard {0}")]
    BadShard(String),
    #[error("{path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}, line {line}")]
    Record {
        path: PathBuf,
        line: usize,
        #[source]
        source: serde_json::Error,
    },
    #[error("encoding a record")]
    Encode(#[source] serde_json::Error),
    #[error("{0}")]
    Incomplete(String),
    #[error(transparent)]
    Plot(#[from] crate::plot::PlotError),
    #[error("run {index} \"{id}\" (ptsd sim {words})")]
    Run {
        index: usize,
        id: String,
        words: String,
        // Boxed: a simulation's errors are large, the sweep's small.
        #[source]
        source: Box<crate::sim::SimRunError>,
    },
}

/// A sweep file: optionally `shards = N` (the shard count a batch
/// scheduler's tasks take: see [`Shard::from_env`]), `[base]` options shared
/// by every run, then either `[axes]` (option = list of values; the runs are
/// the cartesian product, axes in key order, the last axis varying fastest)
/// or `[[runs]]` (an explicit list; each run's options override the base).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SweepSpec {
    /// How many shards a job array cuts the sweep into (the array's size):
    /// a task rerun alone (`sbatch --array=K`) still runs shard K of N.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards: Option<usize>,
    #[serde(default)]
    pub base: toml::Table,
    #[serde(default)]
    pub axes: toml::Table,
    #[serde(default)]
    pub runs: Vec<toml::Table>,
}

/// One run of a sweep: its position, its name (the varied options) and every
/// option it runs with (base plus varied).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunSpec {
    pub index: usize,
    pub id: String,
    pub options: BTreeMap<String, toml::Value>,
}

/// A sweep's run list is capped: a typo in an axis should not start a
/// million simulations.
pub const MAX_RUNS: usize = 100_000;

impl SweepSpec {
    /// Parse the text of a sweep file.
    pub fn parse(text: &str) -> Result<Self, SweepError> {
        let spec: SweepSpec = toml::from_str(text)?;
        if !spec.axes.is_empty() && !spec.runs.is_empty() {
            return Err(SweepError::Invalid(
                "give either [axes] or [[runs]], not both".into(),
            ));
        }
        if spec.shards == Some(0) {
            return Err(SweepError::Invalid("shards must be at least 1".into()));
        }
        Ok(spec)
    }

    /// Read and parse a sweep file.
    pub fn load(path: &Path) -> Result<Self, SweepError> {
        let text = std::fs::read_to_string(path).map_err(|source| SweepError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text)
    }

    /// Every run of the sweep, in a fixed order.
    pub fn runs(&self) -> Result<Vec<RunSpec>, SweepError> {
        let varied: Vec<Vec<(String, toml::Value)>> = if !self.runs.is_empty() {
            self.runs
                .iter()
                .map(|r| r.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
                .collect()
        } else {
            let mut product: Vec<Vec<(String, toml::Value)>> = vec![Vec::new()];
            for (name, values) in &self.axes {
                let values = values.as_array().ok_or_else(|| {
                    SweepError::Invalid(format!("axis {name:?} must be a list of values"))
                })?;
                if values.is_empty() {
                    return Err(SweepError::Invalid(format!("axis {name:?} has no values")));
                }
                if product.len().saturating_mul(values.len()) > MAX_RUNS {
                    return Err(SweepError::Invalid(format!(
                        "more than {MAX_RUNS} runs; split the sweep"
                    )));
                }
                product = product
                    .into_iter()
                    .flat_map(|prefix| {
                        values.iter().map(move |v| {
                            let mut p = prefix.clone();
                            p.push((name.clone(), v.clone()));
                            p
                        })
                    })
                    .collect();
            }
            product
        };
        let mut seen = BTreeMap::new();
        let mut runs = Vec::with_capacity(varied.len());
        for (index, varied) in varied.into_iter().enumerate() {
            let id = if varied.is_empty() {
                "base".to_string()
            } else {
                varied
                    .iter()
                    .map(|(k, v)| format!("{k}={}", value_text(v)))
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            if let Some(first) = seen.insert(id.clone(), index) {
                return Err(SweepError::Invalid(format!(
                    "runs {first} and {index} are both {id:?}"
                )));
            }
            let mut options: BTreeMap<String, toml::Value> = self
                .base
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            options.extend(varied);
            runs.push(RunSpec { index, id, options });
        }
        Ok(runs)
    }

    /// Names the axes (or, for an explicit list, every option some run
    /// sets), in order: the x axes of the plots.
    pub fn axis_names(&self) -> Vec<String> {
        if self.runs.is_empty() {
            self.axes.keys().cloned().collect()
        } else {
            let mut names: Vec<String> = Vec::new();
            for r in &self.runs {
                for k in r.keys() {
                    if !names.contains(k) {
                        names.push(k.clone());
                    }
                }
            }
            names
        }
    }

    /// A short fingerprint of the sweep's content, so that merge can refuse
    /// shards of two different sweeps in one directory. The shard count is
    /// not part of it (each shard file names its count apart): adding
    /// `shards = N` to rerun one task keeps the sweep the same.
    pub fn fingerprint(&self) -> String {
        let runs_only = SweepSpec {
            shards: None,
            ..self.clone()
        };
        let text = toml::to_string(&runs_only).unwrap_or_default();
        format!("{:08x}", crc32c::crc32c(text.as_bytes()))
    }
}

/// A value as it appears in a run's name and on a command line.
pub fn value_text(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The slice of a sweep one process runs: runs whose index is `index`
/// modulo `count` (round-robin, so that slow and fast corners spread).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
}

impl Shard {
    /// The whole sweep in one process.
    pub const ALL: Shard = Shard { index: 0, count: 1 };

    /// `I/N`, with `0 <= I < N`.
    pub fn parse(s: &str) -> Result<Self, SweepError> {
        let bad = || SweepError::BadShard(format!("{s:?}: expected I/N with 0 <= I < N"));
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        let index: usize = i.trim().parse().map_err(|_| bad())?;
        let count: usize = n.trim().parse().map_err(|_| bad())?;
        if count == 0 || index >= count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }

    /// The shard a batch scheduler assigned to this process, if any.
    ///
    /// The index is the task's own: `SLURM_ARRAY_TASK_ID` of a Slurm job
    /// array (ids 0 to N-1), `JOB_COMPLETION_INDEX` of a Kubernetes Indexed
    /// Job. The count N must not depend on which tasks run now — rerunning
    /// task K alone (`sbatch --array=K`: an array of one, `TASK_COUNT=1`)
    /// must still run shard K of N — so it is, first found:
    /// `PTSD_SHARD_COUNT`, the sweep's `shards` (`declared`), and, for a
    /// Slurm array only, the size of an array that runs every id from 0 to
    /// N-1 at once (`--array=0-7`: `TASK_COUNT=8`, `TASK_MIN=0`,
    /// `TASK_MAX=7`). Anything else (an array of one, a part of an array)
    /// without a count is an error saying how to give it.
    ///
    /// ```
    /// use ptsd_bench::sweep::Shard;
    ///
    /// // `sbatch --array=3` reruns task 3 of a sweep declaring 8 shards.
    /// let env = |k: &str| match k {
    ///     "SLURM_ARRAY_TASK_ID" | "SLURM_ARRAY_TASK_MIN" | "SLURM_ARRAY_TASK_MAX" => Some("3".into()),
    ///     "SLURM_ARRAY_TASK_COUNT" => Some("1".into()),
    ///     _ => None,
    /// };
    /// assert_eq!(Shard::from_env(env, Some(8)).unwrap(), Some(Shard { index: 3, count: 8 }));
    /// assert!(Shard::from_env(env, None).unwrap_err().to_string().contains("PTSD_SHARD_COUNT"));
    /// ```
    pub fn from_env(
        get: impl Fn(&str) -> Option<String>,
        declared: Option<usize>,
    ) -> Result<Option<Self>, SweepError> {
        let num = |name: &str| -> Result<Option<usize>, SweepError> {
            match get(name) {
                None => Ok(None),
                Some(v) => v.trim().parse().map(Some).map_err(|_| {
                    SweepError::BadShard(format!("{name}={v:?} is not a non-negative integer"))
                }),
            }
        };
        // The count and where it came from, for the messages.
        let given = match num("PTSD_SHARD_COUNT")? {
            Some(n) => Some((n, "PTSD_SHARD_COUNT")),
            None => declared.map(|n| (n, "the sweep's `shards`")),
        };
        let checked = |index: usize, count: usize, from: &str| {
            if count == 0 || index >= count {
                Err(SweepError::BadShard(format!(
                    "{from}: index {index} is not below the shard count {count}; \
                     the tasks' ids run from 0 to {}",
                    count.saturating_sub(1)
                )))
            } else {
                Ok(Some(Shard { index, count }))
            }
        };
        if let Some(id) = num("SLURM_ARRAY_TASK_ID")? {
            if let Some((count, from)) = given {
                return checked(id, count, &format!("Slurm array task (count from {from})"));
            }
            let count = num("SLURM_ARRAY_TASK_COUNT")?;
            let min = num("SLURM_ARRAY_TASK_MIN")?;
            let max = num("SLURM_ARRAY_TASK_MAX")?;
            let whole =
                matches!((count, min, max), (Some(n), Some(0), Some(m)) if n > 1 && m + 1 == n);
            if let (true, Some(count)) = (whole, count) {
                return checked(id, count, "Slurm job array");
            }
            let what = match (count, min, max) {
                (Some(1), ..) => "an array of one task (as `sbatch --array=K` makes)".to_string(),
                (Some(n), Some(lo), Some(hi)) => {
                    format!("an array of {n} tasks with ids {lo}-{hi}, not every id from 0")
                }
                _ => "an array whose size Slurm does not give (SLURM_ARRAY_TASK_COUNT/_MIN/_MAX)"
                    .to_string(),
            };
            return Err(SweepError::BadShard(format!(
                "for Slurm array task {id}: {what} cannot tell how many shards the sweep has: \
                 set PTSD_SHARD_COUNT=N (`PTSD_SHARD_COUNT=N sbatch --array={id} ...`) \
                 or put `shards = N` at the top of the sweep file, N being the array size \
                 the sweep was first submitted with"
            )));
        }
        if let Some(index) = num("JOB_COMPLETION_INDEX")? {
            let (count, _) = given.ok_or_else(|| {
                SweepError::BadShard(
                    "JOB_COMPLETION_INDEX is set but not PTSD_SHARD_COUNT (set it to the Job's completions) \
                     and the sweep has no `shards`"
                        .into(),
                )
            })?;
            return checked(index, count, "Kubernetes Indexed Job");
        }
        Ok(None)
    }

    /// This shard's runs, in sweep order.
    pub fn select<'a>(&self, runs: &'a [RunSpec]) -> impl Iterator<Item = &'a RunSpec> + 'a {
        let Shard { index, count } = *self;
        runs.iter().filter(move |r| r.index % count == index)
    }

    /// The file this shard writes into the output directory.
    pub fn file_name(&self) -> String {
        format!("shard-{:04}-of-{:04}.jsonl", self.index, self.count)
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// One line of a shard file.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Line {
    /// First line: which sweep, which shard, and every run's name, so that
    /// merge can tell what is missing even when a whole shard is.
    Header {
        fingerprint: String,
        shard: usize,
        shards: usize,
        axes: Vec<String>,
        ids: Vec<String>,
    },
    /// One finished run and its result (whatever JSON the runner produced).
    Run {
        index: usize,
        id: String,
        options: BTreeMap<String, toml::Value>,
        result: serde_json::Value,
    },
}

/// Writes one shard's JSON-lines file: the header, then a line per finished
/// run, each flushed, under a temporary name renamed into place when the
/// shard completes (a shard cut short is never mistaken for a whole one).
pub struct ShardWriter {
    tmp: PathBuf,
    path: PathBuf,
    file: std::io::BufWriter<std::fs::File>,
}

impl ShardWriter {
    /// Start `dir/<shard file>` for `spec`'s `runs`.
    pub fn create(
        dir: &Path,
        spec: &SweepSpec,
        runs: &[RunSpec],
        shard: Shard,
    ) -> Result<Self, SweepError> {
        let io = |path: &Path| {
            let path = path.to_owned();
            move |source| SweepError::Io { path, source }
        };
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let path = dir.join(shard.file_name());
        let tmp = dir.join(format!(".{}.partial", shard.file_name()));
        let file = std::fs::File::create(&tmp).map_err(io(&tmp))?;
        let mut w = ShardWriter {
            tmp,
            path,
            file: std::io::BufWriter::new(file),
        };
        w.line(&Line::Header {
            fingerprint: spec.fingerprint(),
            shard: shard.index,
            shards: shard.count,
            axes: spec.axis_names(),
            ids: runs.iter().map(|r| r.id.clone()).collect(),
        })?;
        Ok(w)
    }

    /// Append one finished run.
    pub fn run(&mut self, run: &RunSpec, result: serde_json::Value) -> Result<(), SweepError> {
        self.line(&Line::Run {
            index: run.index,
            id: run.id.clone(),
            options: run.options.clone(),
            result,
        })
    }

    fn line(&mut self, line: &Line) -> Result<(), SweepError> {
        let text = serde_json::to_string(line).map_err(SweepError::Encode)?;
        let tmp = self.tmp.clone();
        writeln!(self.file, "{text}")
            .and_then(|()| self.file.flush())
            .map_err(|source| SweepError::Io { path: tmp, source })
    }

    /// Sync the file and give it its final name; returns that name.
    pub fn finish(mut self) -> Result<PathBuf, SweepError> {
        let tmp = self.tmp.clone();
        let io = |source| SweepError::Io {
            path: tmp.clone(),
            source,
        };
        self.file.flush().map_err(io)?;
        self.file.get_ref().sync_all().map_err(io)?;
        std::fs::rename(&self.tmp, &self.path).map_err(io)?;
        Ok(self.path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> SweepSpec {
        SweepSpec::parse(
            r#"
            [base]
            size = "64MiB"
            [axes]
            qd = [8, 32, 128]
            ftl = ["page", "ptsd"]
            "#,
        )
        .unwrap()
    }

    #[test]
    fn product_in_key_order_last_axis_fastest() {
        let runs = spec().runs().unwrap();
        let ids: Vec<_> = runs.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "ftl=page qd=8",
                "ftl=page qd=32",
                "ftl=page qd=128",
                "ftl=ptsd qd=8",
                "ftl=ptsd qd=32",
                "ftl=ptsd qd=128"
            ]
        );
        assert_eq!(runs[4].options["size"].as_str(), Some("64MiB"));
        assert_eq!(runs[4].options["qd"].as_integer(), Some(32));
    }

    #[test]
    fn explicit_runs_override_the_base() {
        let s = SweepSpec::parse(
            r#"
            [base]
            qd = 8
            [[runs]]
            ftl = "page"
            [[runs]]
            ftl = "ptsd"
            qd = 64
            "#,
        )
        .unwrap();
        let runs = s.runs().unwrap();
        assert_eq!(runs[0].options["qd"].as_integer(), Some(8));
        assert_eq!(runs[1].options["qd"].as_integer(), Some(64));
        assert_eq!(runs[1].id, "ftl=ptsd qd=64");
        assert_eq!(s.axis_names(), ["ftl", "qd"]);
    }

    #[test]
    fn bad_sweeps_are_clear_errors() {
        for (text, want) in [
            ("[axes]\nqd = 8", "must be a list"),
            ("[axes]\nqd = []", "has no values"),
            ("[axes]\nqd=[1]\n[[runs]]\nqd=1", "not both"),
            ("[[runs]]\nqd=1\n[[runs]]\nqd=1", "are both"),
            ("[axis]\nqd=[1]", "unknown field"),
            ("[axes]\na=[1,2,3,4,5,6,7,8,9,10]\nb=[1,2,3,4,5,6,7,8,9,10]\nc=[1,2,3,4,5,6,7,8,9,10]\nd=[1,2,3,4,5,6,7,8,9,10]\ne=[1,2,3,4,5,6,7,8,9,10]\nf=[1,2]", "more than"),
        ] {
            let err = SweepSpec::parse(text)
                .and_then(|s| s.runs().map(|_| s))
                .expect_err(text);
            // The cause is the source: the whole chain says what is wrong.
            let err = ptsd_blockdev::ErrorChain(&err).to_string();
            assert!(err.contains(want), "{text:?}: {err}");
        }
    }

    #[test]
    fn shards_partition_the_runs() {
        let runs = spec().runs().unwrap();
        for count in 1..=8 {
            let mut seen = vec![0; runs.len()];
            for index in 0..count {
                for r in (Shard { index, count }).select(&runs) {
                    seen[r.index] += 1;
                }
            }
            assert!(seen.iter().all(|&n| n == 1), "{count} shards: {seen:?}");
        }
    }

    #[test]
    fn shard_from_flag_and_environment() {
        assert_eq!(Shard::parse("2/4").unwrap(), Shard { index: 2, count: 4 });
        for bad in ["4/4", "1/0", "x/2", "3", "-1/2"] {
            assert!(Shard::parse(bad).is_err(), "{bad}");
        }
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(Shard::from_env(env(&[]), None).unwrap(), None);
        assert_eq!(Shard::from_env(env(&[]), Some(4)).unwrap(), None);
        // `sbatch --array=0-7`: the array's size is the count.
        let task5_of_8 = env(&[
            ("SLURM_ARRAY_TASK_ID", "5"),
            ("SLURM_ARRAY_TASK_MIN", "0"),
            ("SLURM_ARRAY_TASK_MAX", "7"),
            ("SLURM_ARRAY_TASK_COUNT", "8"),
        ]);
        assert_eq!(
            Shard::from_env(task5_of_8, None).unwrap(),
            Some(Shard { index: 5, count: 8 })
        );
        // `sbatch --array=5` alone: the count comes from the sweep or the
        // variable, never from the array of one.
        let rerun5 = &[
            ("SLURM_ARRAY_TASK_ID", "5"),
            ("SLURM_ARRAY_TASK_MIN", "5"),
            ("SLURM_ARRAY_TASK_MAX", "5"),
            ("SLURM_ARRAY_TASK_COUNT", "1"),
        ];
        assert_eq!(
            Shard::from_env(env(rerun5), Some(8)).unwrap(),
            Some(Shard { index: 5, count: 8 })
        );
        let err = Shard::from_env(env(rerun5), None).unwrap_err().to_string();
        assert!(
            err.contains("an array of one task")
                && err.contains("PTSD_SHARD_COUNT=N sbatch --array=5")
                && err.contains("shards = N"),
            "{err}"
        );
        let with_var = [rerun5.as_slice(), &[("PTSD_SHARD_COUNT", "6")]].concat();
        let with_var = move |k: &str| {
            with_var
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        };
        // The variable wins over the sweep's count.
        assert_eq!(
            Shard::from_env(&with_var, Some(8)).unwrap(),
            Some(Shard { index: 5, count: 6 })
        );
        // `--array=4-6` (a part) or `--array=0` (one task): no count.
        let part = env(&[
            ("SLURM_ARRAY_TASK_ID", "5"),
            ("SLURM_ARRAY_TASK_MIN", "4"),
            ("SLURM_ARRAY_TASK_MAX", "6"),
            ("SLURM_ARRAY_TASK_COUNT", "3"),
        ]);
        let err = Shard::from_env(part, None).unwrap_err().to_string();
        assert!(err.contains("ids 4-6, not every id from 0"), "{err}");
        assert_eq!(
            Shard::from_env(part, Some(8)).unwrap(),
            Some(Shard { index: 5, count: 8 })
        );
        // An id past the declared count names the range.
        let err = Shard::from_env(task5_of_8, Some(4))
            .unwrap_err()
            .to_string();
        assert!(err.contains("ids run from 0 to 3"), "{err}");
        assert_eq!(
            Shard::from_env(
                env(&[("JOB_COMPLETION_INDEX", "3"), ("PTSD_SHARD_COUNT", "4")]),
                None
            )
            .unwrap(),
            Some(Shard { index: 3, count: 4 })
        );
        assert_eq!(
            Shard::from_env(env(&[("JOB_COMPLETION_INDEX", "3")]), Some(4)).unwrap(),
            Some(Shard { index: 3, count: 4 })
        );
        assert!(Shard::from_env(env(&[("JOB_COMPLETION_INDEX", "3")]), None).is_err());
        assert!(Shard::from_env(
            env(&[("JOB_COMPLETION_INDEX", "4"), ("PTSD_SHARD_COUNT", "4")]),
            None
        )
        .is_err());
        assert!(Shard::from_env(env(&[("SLURM_ARRAY_TASK_ID", "1")]), None).is_err());
    }

    #[test]
    fn the_shard_count_is_not_part_of_the_fingerprint() {
        let a = spec();
        let b = SweepSpec {
            shards: Some(8),
            ..spec()
        };
        assert_eq!(a.fingerprint(), b.fingerprint());
        let c = SweepSpec::parse("shards = 8\n[axes]\nqd = [8, 32, 128]\nftl = [\"page\", \"ptsd\"]\n[base]\nsize = \"64MiB\"").unwrap();
        assert_eq!(c.shards, Some(8));
        assert_eq!(c.fingerprint(), a.fingerprint());
        assert!(SweepSpec::parse("shards = 0").is_err());
    }
}
