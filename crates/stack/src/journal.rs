//! Where a file system's journal is, whether it is there, and the one
//! decision about it that mount and fsck share.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ptsd_blockdev::BlockDevice;
use ptsd_fs::format::{Superblock, STATE_CLEAN, STATE_DIRTY};
use ptsd_fs::{DirectStore, Store};
use ptsd_nvjournal::{Journal, JournalConfig, Persist, PmemRegion, RecoveryReport};

use crate::error::StackError;
use crate::lock::{Holder, LockMode, PathLock};

/// Where the journal lives.
#[derive(Clone)]
pub enum JournalSpec {
    /// A persistent-memory region given as an object (a `CrashRegion` in
    /// tests). A region whose first cache line is all zeroes holds no
    /// journal (as a RAM journal after a reboot).
    Region(Arc<dyn Persist>),
    /// A journal file (mapped as persistent memory), locked while open.
    File(PathBuf),
    /// `/dev/shm/ptsd-UUID.journal` when `/dev/shm` exists, else
    /// `ptsd-UUID.journal` in `data_dir`: named by the file system's uuid,
    /// so a journal never meets a file system it does not belong to.
    Default {
        /// Where the journal goes when there is no `/dev/shm`.
        data_dir: PathBuf,
    },
}

impl JournalSpec {
    /// Whether the journal (as this spec places it) survives a power cut,
    /// so that an fsync must also flush the device: a journal file off a
    /// RAM file system, or a region in DAX or msync mode.
    pub(crate) fn survives_power_loss(&self) -> bool {
        match self {
            JournalSpec::Region(r) => r.mode().survives_power_loss(),
            JournalSpec::File(p) => !on_ram_fs(p),
            JournalSpec::Default { data_dir } => {
                !ptsd_blockdev::dir_on_ram_fs(default_journal_dir(data_dir))
            }
        }
    }
}

impl std::fmt::Debug for JournalSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JournalSpec::Region(r) => write!(f, "Region({} bytes, {})", r.len(), r.mode()),
            JournalSpec::File(p) => write!(f, "File({})", p.display()),
            JournalSpec::Default { data_dir } => write!(f, "Default({})", data_dir.display()),
        }
    }
}

/// What to do when the file system was not unmounted cleanly and its
/// journal is gone (a RAM journal after a reboot, a deleted journal file).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MissingJournal {
    /// Refuse to mount ([`StackError::JournalMissing`]).
    Refuse,
    /// Go on without it (what was committed but not yet checkpointed is
    /// lost): repair the device as `fsck --repair` does, mark it clean,
    /// start a new journal, and say so in [`crate::OpenInfo::notes`].
    Discard,
    /// [`Discard`](Self::Discard) when the journal lived on a RAM file
    /// system (losing it at a reboot is its documented behaviour),
    /// [`Refuse`](Self::Refuse) otherwise.
    DiscardIfRam,
}

/// What a journal that is gone costs, in the words every tool prints.
pub const LOST_NOTE: &str =
    "journal missing; changes not yet checkpointed before the crash are lost";

/// The decision, made once from the superblock state and whether the
/// journal is there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Plan {
    /// Unmounted cleanly: the device holds everything; a journal starts
    /// afresh.
    Fresh,
    /// Not unmounted cleanly, journal present: replay what it committed.
    Replay,
    /// Not unmounted cleanly, journal gone: the device is as the last
    /// checkpoints left it and may be inconsistent.
    Lost,
}

pub(crate) fn plan(sb: &Superblock, present: bool) -> Plan {
    match (sb.state == STATE_DIRTY, present) {
        (false, _) => Plan::Fresh,
        (true, true) => Plan::Replay,
        (true, false) => Plan::Lost,
    }
}

pub(crate) fn read_superblock(
    dev: &Arc<dyn BlockDevice>,
    desc: &str,
) -> Result<Superblock, StackError> {
    let mut b = vec![0u8; 4096];
    dev.read(0, &mut b).map_err(|source| StackError::Device {
        what: "reading the superblock of",
        device: desc.to_string(),
        source,
    })?;
    if ptsd_ftl::image::is_image_header(&b) {
        return Err(StackError::SsdImage {
            device: desc.to_string(),
        });
    }
    Superblock::decode(&b, dev.num_blocks()).map_err(|e| StackError::NoFileSystem {
        device: desc.to_string(),
        source: e.into(),
    })
}

/// Rewrite the superblock with the state clean (after a replay or repair
/// left the device holding the whole file system).
pub(crate) fn mark_clean(dev: &Arc<dyn BlockDevice>, desc: &str) -> Result<(), StackError> {
    let mut sb = read_superblock(dev, desc)?;
    if sb.state == STATE_CLEAN {
        return Ok(());
    }
    sb.state = STATE_CLEAN;
    let store = DirectStore::new(dev.clone()).map_err(|e| StackError::Fs {
        what: format!("opening {desc}"),
        source: e.into(),
    })?;
    store.write_super(&sb.encode()).map_err(|e| StackError::Fs {
        what: format!("marking {desc} clean"),
        source: e.into(),
    })
}

/// The journal of one file system, located (and, for a file, locked).
pub(crate) struct Place {
    target: Target,
    /// For messages.
    pub label: String,
    /// It lived (or would live) on a RAM file system.
    pub ram: bool,
}

enum Target {
    Region(Arc<dyn Persist>),
    File {
        path: PathBuf,
        lock: Option<PathLock>,
    },
}

/// The path `JournalSpec::Default` names for `sb`.
pub fn default_journal_path(sb: &Superblock, data_dir: &Path) -> PathBuf {
    default_journal_dir(data_dir).join(format!("ptsd-{}.journal", sb.uuid_hex()))
}

/// Where `JournalSpec::Default` puts journals: `/dev/shm` when it exists.
fn default_journal_dir(data_dir: &Path) -> &Path {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm
    } else {
        data_dir
    }
}

/// Whether `path` is (or would be) on tmpfs or ramfs.
fn on_ram_fs(path: &Path) -> bool {
    ptsd_blockdev::dir_on_ram_fs(path.parent().unwrap_or(Path::new("/")))
}

impl Place {
    /// Locate the journal `spec` names for `sb`. With `lock`, a journal
    /// file is locked exclusively for that holder (created empty if missing
    /// when `create`).
    pub fn locate(
        spec: &JournalSpec,
        sb: &Superblock,
        lock: Option<Holder>,
        create: bool,
        wait: Duration,
    ) -> Result<Place, StackError> {
        let path = match spec {
            JournalSpec::Region(r) => {
                return Ok(Place {
                    target: Target::Region(r.clone()),
                    label: format!("region of {} bytes", r.len()),
                    ram: r.mode() == ptsd_nvjournal::RegionMode::Tmpfs,
                })
            }
            JournalSpec::File(p) => p.clone(),
            JournalSpec::Default { data_dir } => default_journal_path(sb, data_dir),
        };
        if create {
            if let Some(parent) = path.parent() {
                let _ = std::fs::create_dir_all(parent);
            }
        }
        let lock = match lock {
            Some(holder) if create || path.exists() => Some(PathLock::acquire(
                &path,
                LockMode::Exclusive,
                holder,
                create,
                wait,
            )?),
            _ => None,
        };
        Ok(Place {
            label: path.display().to_string(),
            ram: on_ram_fs(&path),
            target: Target::File { path, lock },
        })
    }

    /// Whether a journal is there: a file that exists and is not empty, a
    /// region whose superblock line is not all zeroes.
    pub fn present(&self) -> bool {
        let mut head = [0u8; 64];
        match &self.target {
            Target::Region(r) => {
                if r.len() < head.len() {
                    return false;
                }
                r.read(0, &mut head);
            }
            Target::File { path, .. } => {
                use std::io::Read;
                let Ok(mut f) = std::fs::File::open(path) else {
                    return false;
                };
                if f.read_exact(&mut head).is_err() {
                    return false;
                }
            }
        }
        head.iter().any(|&b| b != 0)
    }

    fn region(&self, bytes: Option<u64>) -> Result<Arc<dyn Persist>, StackError> {
        match &self.target {
            Target::Region(r) => Ok(r.clone()),
            Target::File { path, .. } => {
                let len = match bytes {
                    Some(b) => b.max(8 << 20) / 4096 * 4096,
                    None => std::fs::metadata(path)
                        .map_err(|source| StackError::Io {
                            op: "reading the size of journal",
                            path: path.clone(),
                            source,
                        })?
                        .len(),
                };
                let r = PmemRegion::open_file(path, len).map_err(|source| StackError::Region {
                    path: path.clone(),
                    source,
                })?;
                Ok(Arc::new(r))
            }
        }
    }

    /// Recover the journal: replay exactly what it committed to `dev`.
    pub fn replay(
        &self,
        dev: Arc<dyn BlockDevice>,
        cfg: JournalConfig,
    ) -> Result<(Arc<Journal>, RecoveryReport), StackError> {
        Journal::open(self.region(None)?, dev, cfg).map_err(|source| StackError::Journal {
            what: "recovering journal",
            path: self.label.clone(),
            source,
        })
    }

    /// Format a new journal of `bytes` (a file journal; a region keeps its
    /// size), of `disk_partitions` partitions instead of `cfg`'s if given
    /// and the region is a file on a disk (msync mode).
    pub fn create(
        &self,
        dev: Arc<dyn BlockDevice>,
        mut cfg: JournalConfig,
        bytes: u64,
        disk_partitions: Option<u32>,
    ) -> Result<Arc<Journal>, StackError> {
        let region = self.region(Some(bytes))?;
        if let Some(p) = disk_partitions {
            if region.mode() == ptsd_nvjournal::RegionMode::Msync {
                cfg.partitions = p.max(1);
            }
        }
        Journal::create(region, dev, cfg).map_err(|source| StackError::Journal {
            what: "creating journal",
            path: self.label.clone(),
            source,
        })
    }

    /// Remove the journal file after a clean unmount (nothing in it is
    /// needed any more, and in /dev/shm it holds RAM) — only while this
    /// mount still holds it and the path still names it.
    pub fn remove(&self) {
        if let Target::File {
            lock: Some(lock), ..
        } = &self.target
        {
            lock.remove_if_ours();
        }
    }

    /// Remove an empty file this mount created only to lock it (a refused
    /// mount leaves nothing behind).
    pub fn remove_if_empty(&self) {
        if let Target::File {
            lock: Some(lock), ..
        } = &self.target
        {
            if lock.file().metadata().is_ok_and(|m| m.len() == 0) {
                lock.remove_if_ours();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_journal_survives_power_loss_off_ram_only() {
        let disk = tempfile::tempdir().unwrap();
        let on_disk = JournalSpec::File(disk.path().join("j"));
        assert_eq!(
            on_disk.survives_power_loss(),
            !ptsd_blockdev::dir_on_ram_fs(disk.path())
        );
        if Path::new("/dev/shm").is_dir() {
            assert!(!JournalSpec::File("/dev/shm/j".into()).survives_power_loss());
            let default = JournalSpec::Default {
                data_dir: disk.path().into(),
            };
            assert!(!default.survives_power_loss(), "the default is /dev/shm");
        }
        let ram = JournalSpec::Region(Arc::new(ptsd_nvjournal::CrashRegion::new(4096)));
        assert!(!ram.survives_power_loss());
        let msync = JournalSpec::Region(Arc::new(ptsd_nvjournal::CrashRegion::new_msync(4096)));
        assert!(msync.survives_power_loss());
    }
}
