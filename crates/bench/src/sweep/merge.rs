//! Merging the shard files of a sweep: every run present exactly once, then
//! one table, one JSON and the plots.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{Line, SweepError};

/// A merged sweep, in run order.
#[derive(Clone, Debug, Serialize)]
pub struct MergeReport {
    pub fingerprint: String,
    pub shards: usize,
    pub axes: Vec<String>,
    pub runs: Vec<MergedRun>,
}

/// One run of a merged sweep.
#[derive(Clone, Debug, Serialize)]
pub struct MergedRun {
    pub index: usize,
    pub id: String,
    pub options: BTreeMap<String, toml::Value>,
    pub result: serde_json::Value,
}

/// The measured phase of a run (its last one) in a few numbers.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct Summary {
    pub iops: f64,
    pub mb_per_s: f64,
    pub read_p99_us: f64,
    pub read_p999_us: f64,
    pub write_p99_us: f64,
    pub waf: f64,
}

impl Summary {
    /// Reads `report.phases[last]` of a `ptsd sim --json` result.
    pub(super) fn of(result: &serde_json::Value) -> Option<Summary> {
        let phase = result["report"]["phases"].as_array()?.last()?;
        let f = |v: &serde_json::Value| v.as_f64().unwrap_or(0.0);
        Some(Summary {
            iops: f(&phase["throughput"]["iops"]),
            mb_per_s: f(&phase["throughput"]["mb_per_s"]),
            read_p99_us: f(&phase["read"]["p99_us"]),
            read_p999_us: f(&phase["read"]["p999_us"]),
            write_p99_us: f(&phase["write"]["p99_us"]),
            waf: f(&phase["device"]["waf"]),
        })
    }
}

/// Wall-clock fields differ between two runs of the same simulation; drop
/// them to compare results (a sharded sweep against an unsharded one).
pub fn strip_wall_clock(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(map) => {
            map.retain(|k, _| !k.starts_with("wall_") && !k.ends_with("_per_wall_second"));
            map.values_mut().for_each(strip_wall_clock);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(strip_wall_clock),
        _ => {}
    }
}

struct Header {
    fingerprint: String,
    shards: usize,
    axes: Vec<String>,
    ids: Vec<String>,
}

/// Read every shard file of `dir`, check that each run of the sweep is there
/// exactly once (naming what is missing or duplicated, and where), and write
/// `table.txt`, `sweep.json` and one throughput and one tail-latency plot
/// per axis into `out`. Returns the merged sweep and the files written.
pub fn merge(dir: &Path, out: &Path) -> Result<(MergeReport, Vec<PathBuf>), SweepError> {
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| SweepError::Io { path, source }
    };
    let mut files: Vec<PathBuf> = Vec::new();
    let mut partial: Vec<String> = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io(dir))? {
        let path = entry.map_err(io(dir))?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with("shard-") && name.ends_with(".jsonl") {
            files.push(path);
        } else if name.starts_with(".shard-") && name.ends_with(".partial") {
            partial.push(
                name.trim_start_matches('.')
                    .trim_end_matches(".partial")
                    .into(),
            );
        }
    }
    files.sort();
    partial.sort();
    if files.is_empty() {
        let running = if partial.is_empty() {
            String::new()
        } else {
            format!(
                "; {} still partial ({}): their tasks are running or were cut short \
                 (squeue / sacct -j JOBID say which); merge when they are done",
                partial.len(),
                partial.join(", ")
            )
        };
        return Err(SweepError::Incomplete(format!(
            "{}: no finished shard file (shard-*.jsonl){running}",
            dir.display()
        )));
    }

    let mut header: Option<(Header, PathBuf)> = None;
    // Every (sweep, shard count) the files belong to, with their files.
    let mut groups: Vec<(String, usize, Vec<String>)> = Vec::new();
    let mut shards_seen = vec![];
    let mut by_index: BTreeMap<usize, Vec<(MergedRun, PathBuf)>> = BTreeMap::new();
    for path in &files {
        let text = std::fs::read_to_string(path).map_err(io(path))?;
        for (n, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            let parsed: Line = serde_json::from_str(line).map_err(|source| SweepError::Record {
                path: path.clone(),
                line: n + 1,
                source,
            })?;
            match parsed {
                Line::Header {
                    fingerprint,
                    shard,
                    shards,
                    axes,
                    ids,
                } => {
                    shards_seen.push(shard);
                    let name = path
                        .file_name()
                        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
                    match groups
                        .iter_mut()
                        .find(|(f, n, _)| *f == fingerprint && *n == shards)
                    {
                        Some((_, _, names)) => names.push(name),
                        None => groups.push((fingerprint.clone(), shards, vec![name])),
                    }
                    let h = Header {
                        fingerprint,
                        shards,
                        axes,
                        ids,
                    };
                    if header.is_none() {
                        header = Some((h, path.clone()));
                    }
                }
                Line::Run {
                    index,
                    id,
                    options,
                    result,
                } => by_index.entry(index).or_default().push((
                    MergedRun {
                        index,
                        id,
                        options,
                        result,
                    },
                    path.clone(),
                )),
            }
        }
    }
    if groups.len() > 1 {
        return Err(SweepError::Incomplete(mixed(dir, &groups)));
    }
    let (header, _) = header.ok_or_else(|| {
        SweepError::Incomplete(format!(
            "{}: no shard file has a header line",
            dir.display()
        ))
    })?;

    let mut problems = Vec::new();
    let mut runs = Vec::with_capacity(header.ids.len());
    for (index, id) in header.ids.iter().enumerate() {
        let owner = index % header.shards;
        match by_index.remove(&index).unwrap_or_default().as_slice() {
            [] => {
                let why = if partial
                    .iter()
                    .any(|p| p.starts_with(&format!("shard-{owner:04}-")))
                {
                    "its shard file is still partial (running or cut short)"
                } else if shards_seen.contains(&owner) {
                    "its shard file lacks it"
                } else {
                    "its shard file is missing"
                };
                problems.push(format!(
                    "missing run {index} \"{id}\" (shard {owner}/{}: {why})",
                    header.shards
                ));
            }
            [(run, path)] => {
                if run.id != *id {
                    problems.push(format!(
                        "run {index} in {} is \"{}\", the sweep names it \"{id}\"",
                        path.display(),
                        run.id
                    ));
                }
                runs.push(run.clone());
            }
            many => problems.push(format!(
                "duplicate run {index} \"{id}\" in {}",
                many.iter()
                    .map(|(_, p)| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
    }
    for (index, extra) in by_index {
        problems.push(format!(
            "run {index} \"{}\" in {} is not part of the sweep",
            extra[0].0.id,
            extra[0].1.display()
        ));
    }
    if !problems.is_empty() {
        return Err(SweepError::Incomplete(format!(
            "{} of {} runs are not there exactly once:\n  {}",
            problems.len(),
            header.ids.len(),
            problems.join("\n  ")
        )));
    }

    let report = MergeReport {
        fingerprint: header.fingerprint,
        shards: header.shards,
        axes: header.axes,
        runs,
    };
    std::fs::create_dir_all(out).map_err(io(out))?;
    let mut written = Vec::new();
    let table = out.join("table.txt");
    std::fs::write(&table, report.table()).map_err(io(&table))?;
    written.push(table);
    let json = out.join("sweep.json");
    let text = serde_json::to_string_pretty(&report).map_err(SweepError::Encode)?;
    std::fs::write(&json, text + "\n").map_err(io(&json))?;
    written.push(json);
    written.extend(super::plot::write_axis_plots(&report, out)?);
    Ok((report, written))
}

/// The error for a directory holding shard files of more than one sweep or
/// shard count: which files are which, and how to get one merge out of it.
fn mixed(dir: &Path, groups: &[(String, usize, Vec<String>)]) -> String {
    let mut text = format!(
        "{} holds shard files of {} different sweeps or shardings:",
        dir.display(),
        groups.len()
    );
    for (fingerprint, shards, names) in groups {
        let _ = write!(
            text,
            "\n  sweep {fingerprint} cut into {shards} shard(s): {}",
            names.join(", ")
        );
    }
    let same_sweep = groups.iter().all(|(f, _, _)| *f == groups[0].0);
    text.push_str(if same_sweep {
        "\nThe same sweep, sharded two ways (a run of the whole sweep writes \
         shard-0000-of-0001.jsonl; so did a Slurm task rerun as an array of one, \
         `sbatch --array=K`, before the count came from the sweep). Keep one sharding: move \
         the other's files out of the directory, and rerun a missing task with its count \
         given: `PTSD_SHARD_COUNT=N sbatch --array=K ...`, `shards = N` in the sweep file, \
         or `scontrol requeue JOBID_K` for a task of a job Slurm still knows."
    } else {
        "\nTwo different sweeps (or a sweep file edited between runs) wrote here: give each \
         sweep its own --sweep-out directory, and move the files of the one you do not merge \
         out of this one."
    });
    text
}

impl MergeReport {
    /// One line per run: its name and the measured phase's figures.
    pub fn table(&self) -> String {
        let width = self
            .runs
            .iter()
            .map(|r| r.id.len())
            .max()
            .unwrap_or(3)
            .max(3);
        let mut t = format!(
            "{:<width$} {:>11} {:>9} {:>12} {:>13} {:>13} {:>6}\n",
            "run", "IOPS", "MB/s", "read p99 us", "read p99.9 us", "write p99 us", "WAF"
        );
        for r in &self.runs {
            let s = Summary::of(&r.result).unwrap_or_default();
            let _ = writeln!(
                t,
                "{:<width$} {:>11.0} {:>9.1} {:>12.1} {:>13.1} {:>13.1} {:>6.2}",
                r.id, s.iops, s.mb_per_s, s.read_p99_us, s.read_p999_us, s.write_p99_us, s.waf
            );
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Shard, ShardWriter, SweepSpec};
    use super::*;

    fn fake_result(iops: f64) -> serde_json::Value {
        serde_json::json!({
            "report": {"phases": [{
                "throughput": {"iops": iops, "mb_per_s": iops * 0.004},
                "read": {"p99_us": 100.0, "p999_us": 200.0},
                "write": {"p99_us": 300.0},
                "device": {"waf": 1.5},
                "wall_seconds": iops,
            }]}
        })
    }

    fn write_shards(dir: &Path, spec: &SweepSpec, count: usize, skip: Option<usize>) {
        let runs = spec.runs().unwrap();
        for index in 0..count {
            if Some(index) == skip {
                continue;
            }
            let shard = Shard { index, count };
            let mut w = ShardWriter::create(dir, spec, &runs, shard).unwrap();
            for r in shard.select(&runs) {
                w.run(r, fake_result(1000.0 * (r.index + 1) as f64))
                    .unwrap();
            }
            w.finish().unwrap();
        }
    }

    fn spec() -> SweepSpec {
        SweepSpec::parse("[axes]\nftl=[\"page\",\"dftl\"]\nqd=[1,2,4]").unwrap()
    }

    #[test]
    fn merges_and_plots() {
        let dir = tempfile::tempdir().unwrap();
        write_shards(dir.path(), &spec(), 4, None);
        let out = dir.path().join("merged");
        let (report, files) = merge(dir.path(), &out).unwrap();
        assert_eq!(report.runs.len(), 6);
        assert!(report.runs.iter().enumerate().all(|(i, r)| r.index == i));
        let table = std::fs::read_to_string(out.join("table.txt")).unwrap();
        assert!(
            table.contains("ftl=dftl qd=4") && table.contains("6000"),
            "{table}"
        );
        for name in ["throughput_vs_ftl.svg", "tail_vs_qd.svg", "sweep.json"] {
            assert!(files.iter().any(|f| f.ends_with(name)), "{name}: {files:?}");
        }
        // Every plot's legend is right of all its data (it used to sit
        // over the top-right points).
        use crate::plot::svg_probe::{data_xs, label_x};
        for (name, labels) in [
            ("throughput_vs_qd.svg", ["ftl=page", "ftl=dftl"]),
            ("tail_vs_ftl.svg", ["qd=1", "qd=4"]),
        ] {
            let svg = std::fs::read_to_string(out.join(name)).unwrap();
            let data = data_xs(&svg);
            assert!(!data.is_empty(), "{name}: no data marks");
            let rightmost = data.iter().copied().fold(0.0, f64::max);
            for label in labels {
                let x = label_x(&svg, label).unwrap_or_else(|| panic!("{name}: no {label}"));
                // Right of the 900-pixel chart, too, not only of its points.
                assert!(
                    x > rightmost && x > 900.0,
                    "{name}: {label} at x={x}, data up to {rightmost}"
                );
            }
        }
    }

    #[test]
    fn names_a_missing_shard_and_a_duplicate() {
        let dir = tempfile::tempdir().unwrap();
        write_shards(dir.path(), &spec(), 3, Some(1));
        let err = merge(dir.path(), &dir.path().join("m"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("missing run 1 \"ftl=page qd=2\" (shard 1/3: its shard file is missing)"),
            "{err}"
        );
        assert!(err.contains("missing run 4 \"ftl=dftl qd=2\""), "{err}");

        // The same shard file twice under another name.
        let dir = tempfile::tempdir().unwrap();
        write_shards(dir.path(), &spec(), 2, None);
        std::fs::copy(
            dir.path().join("shard-0000-of-0002.jsonl"),
            dir.path().join("shard-0000-of-0002-copy.jsonl"),
        )
        .unwrap();
        let err = merge(dir.path(), &dir.path().join("m"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("duplicate run 0 \"ftl=page qd=1\""), "{err}");
    }

    #[test]
    fn refuses_shards_of_different_sweeps() {
        let dir = tempfile::tempdir().unwrap();
        write_shards(dir.path(), &spec(), 2, Some(1));
        let other = SweepSpec::parse("[axes]\nftl=[\"page\",\"dftl\"]\nqd=[1,2,8]").unwrap();
        let runs = other.runs().unwrap();
        let shard = Shard { index: 1, count: 2 };
        ShardWriter::create(dir.path(), &other, &runs, shard)
            .unwrap()
            .finish()
            .unwrap();
        let err = merge(dir.path(), &dir.path().join("m"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("different sweeps"), "{err}");
        assert!(err.contains("give each sweep its own --sweep-out"), "{err}");
    }

    #[test]
    fn a_mixed_sharding_says_which_files_and_how_to_fix_it() {
        let dir = tempfile::tempdir().unwrap();
        // Shards 0 and 2 of 3, and the whole sweep as "shard 0/1": what a
        // rerun of task 1 as an array of one used to write.
        write_shards(dir.path(), &spec(), 3, Some(1));
        write_shards(dir.path(), &spec(), 1, None);
        let err = merge(dir.path(), &dir.path().join("m"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("shard files of 2 different sweeps or shardings")
                && err.contains(
                    "cut into 3 shard(s): shard-0000-of-0003.jsonl, shard-0002-of-0003.jsonl"
                )
                && err.contains("cut into 1 shard(s): shard-0000-of-0001.jsonl")
                && err.contains("PTSD_SHARD_COUNT=N sbatch --array=K")
                && err.contains("scontrol requeue"),
            "{err}"
        );
        // Moving the stray file out and rerunning shard 1 of 3 mends it.
        std::fs::remove_file(dir.path().join("shard-0000-of-0001.jsonl")).unwrap();
        let runs = spec().runs().unwrap();
        let shard = Shard { index: 1, count: 3 };
        let mut w = ShardWriter::create(dir.path(), &spec(), &runs, shard).unwrap();
        for r in shard.select(&runs) {
            w.run(r, fake_result(1.0)).unwrap();
        }
        w.finish().unwrap();
        let (report, _) = merge(dir.path(), &dir.path().join("m")).unwrap();
        assert_eq!(report.runs.len(), 6);
    }

    #[test]
    fn shards_still_running_are_counted() {
        let dir = tempfile::tempdir().unwrap();
        let runs = spec().runs().unwrap();
        // Two tasks started, none finished: their files are still partial.
        let _writers: Vec<_> = (0..2)
            .map(|index| {
                ShardWriter::create(dir.path(), &spec(), &runs, Shard { index, count: 2 }).unwrap()
            })
            .collect();
        let err = merge(dir.path(), &dir.path().join("m"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("no finished shard file")
                && err.contains(
                    "2 still partial (shard-0000-of-0002.jsonl, shard-0001-of-0002.jsonl)"
                )
                && err.contains("running or were cut short"),
            "{err}"
        );
    }

    #[test]
    fn wall_clock_fields_are_stripped() {
        let mut v = fake_result(5.0);
        strip_wall_clock(&mut v);
        let text = v.to_string();
        assert!(!text.contains("wall") && text.contains("iops"), "{text}");
    }
}
