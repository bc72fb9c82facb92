//! Device flush counters from `/sys/block/*/stat`: how many cache flushes
//! (REQ_PREFLUSH / FUA-less flush requests) a block device completed, to
//! say how many of them one fsync costs on each target.
//!
//! Field 15 of the stat file (flush requests completed, Linux >= 5.5).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::Serialize;

/// A block device whose flush count is watched.
#[derive(Clone, Debug, Serialize)]
pub struct FlushCounter {
    /// Short name (`vda`, `loop3`).
    pub name: String,
    /// Its stat file.
    pub stat: PathBuf,
}

impl FlushCounter {
    /// The whole disk holding `path` (a partition counts for its disk):
    /// the device a power-loss-safe fsync must flush. None if `path` is on
    /// no block device (tmpfs) or sysfs does not say.
    pub fn disk_of(path: &Path) -> Option<Self> {
        let dev = std::fs::metadata(path).ok()?.dev();
        let (major, minor) = (libc::major(dev), libc::minor(dev));
        let node = Path::new("/sys/dev/block")
            .join(format!("{major}:{minor}"))
            .canonicalize()
            .ok()?;
        // A partition's directory sits inside its disk's and has a
        // `partition` file.
        let disk = if node.join("partition").exists() {
            node.parent()?.to_path_buf()
        } else {
            node
        };
        Self::at(&disk)
    }

    /// The device `/dev/NAME` (e.g. a loop device), by its sysfs entry.
    pub fn device(dev: &str) -> Option<Self> {
        let name = Path::new(dev).file_name()?.to_str()?;
        Self::at(&Path::new("/sys/block").join(name))
    }

    fn at(sys: &Path) -> Option<Self> {
        let stat = sys.join("stat");
        let me = FlushCounter {
            name: sys.file_name()?.to_string_lossy().into_owned(),
            stat,
        };
        me.read().map(|_| me)
    }

    /// Flush requests completed so far.
    pub fn read(&self) -> Option<u64> {
        parse_flushes(&std::fs::read_to_string(&self.stat).ok()?)
    }
}

/// The flush count (field 15) of a `/sys/block/*/stat` line.
pub fn parse_flushes(stat: &str) -> Option<u64> {
    stat.split_whitespace().nth(15)?.parse().ok()
}

/// What a daemon process (all its threads) spent: context switches and
/// read/write-class syscalls (`/proc/PID/task/*/{status,io}`), to say what
/// one workload op costs in kernel crossings. `syscr`/`syscw` count every
/// read- and write-class syscall (`/dev/fuse` reads and writes, `pread` and
/// `pwrite` on images), not io_uring submissions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ProcCost {
    /// Voluntary context switches (a thread blocked).
    pub voluntary_ctxt: u64,
    /// Involuntary ones (preempted).
    pub nonvoluntary_ctxt: u64,
    /// Read-class syscalls.
    pub syscr: u64,
    /// Write-class syscalls.
    pub syscw: u64,
}

impl ProcCost {
    /// The sums over the live threads of process `pid` (None if it is gone
    /// or `/proc` does not say). Threads that exited are not counted.
    pub fn read(pid: u32) -> Option<Self> {
        let mut c = ProcCost::default();
        for t in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
            let t = t.ok()?.path();
            let (Ok(status), Ok(io)) = (
                std::fs::read_to_string(t.join("status")),
                std::fs::read_to_string(t.join("io")),
            ) else {
                continue;
            };
            c.add(&parse_proc(&status, &io));
        }
        Some(c)
    }

    fn add(&mut self, o: &ProcCost) {
        self.voluntary_ctxt += o.voluntary_ctxt;
        self.nonvoluntary_ctxt += o.nonvoluntary_ctxt;
        self.syscr += o.syscr;
        self.syscw += o.syscw;
    }

    /// `self - earlier`, field by field (0 where a thread went away).
    pub fn since(&self, earlier: &ProcCost) -> ProcCost {
        ProcCost {
            voluntary_ctxt: self.voluntary_ctxt.saturating_sub(earlier.voluntary_ctxt),
            nonvoluntary_ctxt: self
                .nonvoluntary_ctxt
                .saturating_sub(earlier.nonvoluntary_ctxt),
            syscr: self.syscr.saturating_sub(earlier.syscr),
            syscw: self.syscw.saturating_sub(earlier.syscw),
        }
    }
}

/// One task's counters from its `status` and `io` files.
pub fn parse_proc(status: &str, io: &str) -> ProcCost {
    let field = |text: &str, key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    ProcCost {
        voluntary_ctxt: field(status, "voluntary_ctxt_switches:"),
        nonvoluntary_ctxt: field(status, "nonvoluntary_ctxt_switches:"),
        syscr: field(io, "syscr:"),
        syscw: field(io, "syscw:"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_counters_are_parsed_and_summed() {
        let status = "Name:\tptsd\nvoluntary_ctxt_switches:\t120\nnonvoluntary_ctxt_switches:\t7\n";
        let io = "rchar: 1\nwchar: 2\nsyscr: 30\nsyscw: 40\nread_bytes: 0\n";
        let c = parse_proc(status, io);
        assert_eq!(
            c,
            ProcCost {
                voluntary_ctxt: 120,
                nonvoluntary_ctxt: 7,
                syscr: 30,
                syscw: 40
            }
        );
        let mine = ProcCost::read(std::process::id()).expect("own /proc entry");
        assert!(mine.voluntary_ctxt + mine.nonvoluntary_ctxt > 0);
        assert_eq!(c.since(&c), ProcCost::default());
    }

    #[test]
    fn the_flush_field_is_the_sixteenth() {
        let line = "   51765     8019  3491530    18946    37187    94571 47574472   286359        0    20748   309548     6800       99   732352     3936     4326      305\n";
        assert_eq!(parse_flushes(line), Some(4326));
        // An old kernel without the flush fields.
        assert_eq!(parse_flushes("1 2 3 4 5 6 7 8 9 10 11"), None);
    }

    #[test]
    fn the_root_disk_is_found_or_absent() {
        // On a machine with a block-device root this reads a count; in a
        // container on overlayfs there may be none. Either way no panic,
        // and a found counter reads.
        if let Some(c) = FlushCounter::disk_of(Path::new("/")) {
            assert!(c.read().is_some(), "{c:?}");
        }
        assert!(FlushCounter::device("/dev/definitely-not-a-device").is_none());
    }
}
