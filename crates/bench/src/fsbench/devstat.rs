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

#[cfg(test)]
mod tests {
    use super::*;

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
