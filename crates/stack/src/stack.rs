//! [`Stack::open`] and [`Stack::close`]: everything `ptsd mount` does
//! around serving FUSE.

use std::sync::Arc;
use std::time::Duration;

use ptsd_blockdev::BlockDevice;
use ptsd_fs::coalesce::CoalescingStore;
use ptsd_fs::{ChecksumStore, FileSystem, FsError, JournalStore, MkfsOptions, Store};
use ptsd_ftl::SsdDevice;
use ptsd_nvjournal::JournalConfig;

use crate::device::{self, DeviceSpec, OpenHow, Opened};
use crate::error::StackError;
use crate::journal::{self, JournalSpec, MissingJournal, Place, Plan, LOST_NOTE};
use crate::lock::{Holder, LockMode};

/// How long after an fsync a commit window stages each transaction at
/// once (see [`StackSpec::coalesce`]): an fsync at least this often keeps
/// windows out of its way.
pub const DIRECT_AFTER_SYNC: std::time::Duration = std::time::Duration::from_millis(20);

/// What to assemble.
#[derive(Clone, Debug)]
pub struct StackSpec {
    /// Where the file system lives.
    pub device: DeviceSpec,
    /// Where its journal lives.
    pub journal: JournalSpec,
    /// Size of a journal file when one is created (at least 8 MiB).
    pub journal_bytes: u64,
    /// Partitions and background checkpointing of a journal created now
    /// (a recovered one keeps its partition count).
    pub journal_config: JournalConfig,
    /// Partitions of a journal created on a disk file (msync mode) instead
    /// of `journal_config`'s: there every partition's ring is one more
    /// disk write per commit, and a commit waits for the disk, not for
    /// the CPU. `None`: `journal_config`'s everywhere.
    pub disk_journal_partitions: Option<u32>,
    /// Not unmounted cleanly and the journal is gone: refuse or go on.
    pub missing_journal: MissingJournal,
    /// How long to wait for another process to release the image or
    /// journal when it is not serving a mount (a daemon finishing its
    /// unmount); one that serves a mount is refused at once.
    pub lock_wait: Duration,
    /// Owner `(uid, gid)` of the root directory when opening formats a
    /// blank emulated SSD (default: this process's effective user and
    /// group, so that a user's own mount is writable by them).
    pub root_owner: (u32, u32),
    /// Wraps the journaled store before the file system mounts on it. Only
    /// crash tests set it (a simulated fsync of another thread landing
    /// between two transactions of one operation); `None` in production.
    pub store_hook: Option<StoreHook>,
    /// Coalesce the file system's transactions in commit windows
    /// (`ptsd_fs::coalesce`): each block staged once per window, not once
    /// per operation, except within [`DIRECT_AFTER_SYNC`] of an fsync,
    /// when each is staged at once (fsync-heavy work gains nothing from a
    /// window but a longer fsync). On by default (`ptsd mount -o
    /// nocommit_window` turns it off).
    pub coalesce: bool,
}

/// This process's effective user and group: who a file system made now is
/// for, unless told otherwise.
///
/// ```
/// // Root's tests see (0, 0); a user's process, their own ids.
/// let (uid, _gid) = ptsd_stack::invoking_user();
/// // SAFETY: geteuid has no preconditions.
/// assert_eq!(uid, unsafe { libc::geteuid() });
/// ```
pub fn invoking_user() -> (u32, u32) {
    // SAFETY: geteuid and getegid have no preconditions and cannot fail.
    unsafe { (libc::geteuid(), libc::getegid()) }
}

/// See [`StackSpec::store_hook`].
#[derive(Clone)]
pub struct StoreHook(pub Arc<WrapStore>);

/// What a [`StoreHook`] calls: the store the file system would mount on,
/// in; the one it mounts on, out.
pub type WrapStore = dyn Fn(Arc<dyn Store>) -> Arc<dyn Store> + Send + Sync;

impl std::fmt::Debug for StoreHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StoreHook")
    }
}

impl StackSpec {
    /// `device` with `journal` and the defaults of `ptsd mount`: a 256 MiB
    /// journal of 4 partitions (1 on a disk file) checkpointed every 5 s, a missing RAM
    /// journal discarded (after saying so), 60 s of waiting for a daemon
    /// that is finishing its unmount.
    pub fn new(device: DeviceSpec, journal: JournalSpec) -> Self {
        Self {
            device,
            journal,
            journal_bytes: 256 << 20,
            journal_config: JournalConfig {
                checkpoint_interval: Some(Duration::from_secs(5)),
                ..JournalConfig::partitioned(4)
            },
            disk_journal_partitions: Some(1),
            missing_journal: MissingJournal::DiscardIfRam,
            lock_wait: Duration::from_secs(60),
            root_owner: invoking_user(),
            store_hook: None,
            coalesce: true,
        }
    }
}

/// What opening found and did, for the caller to print.
#[derive(Clone, Debug, Default)]
pub struct OpenInfo {
    /// The device, e.g. "d.img" or "DATA/ssd.img (emulated SSD, PTSD FTL, new)".
    pub device: String,
    /// The image or device file, canonical (what a FUSE mount should name
    /// as its source: a new mount that finds the image locked tells a live
    /// mount, which it refuses, from a daemon finishing its unmount, which
    /// it waits for, by this entry in the mount table).
    pub source: Option<std::path::PathBuf>,
    /// The journal file or region.
    pub journal: String,
    /// A blank emulated SSD was formatted and got a new file system.
    pub formatted: bool,
    /// Blocks the journal replayed (None: a new journal was created).
    pub replayed_blocks: Option<u64>,
    /// Unlinked-but-open inodes a crash left, now freed.
    pub orphans_freed: u64,
    /// Things the user must be told (e.g. [`LOST_NOTE`] and what repair did).
    pub notes: Vec<String>,
}

/// A mounted file system with its journal and device, recovered and ready.
///
/// Dropping it without [`close`](Self::close) still tries a clean close;
/// a test simulates a power cut by crashing its devices first.
pub struct Stack {
    fs: Arc<FileSystem>,
    store: Arc<JournalStore>,
    opened: Option<Opened>,
    place: Option<Place>,
    info: OpenInfo,
}

fn fs_err(desc: &str, e: FsError) -> StackError {
    match e {
        FsError::NeedsRepair(_) => StackError::NeedsRepair {
            device: desc.to_string(),
            source: e,
        },
        FsError::Format(_) => StackError::NoFileSystem {
            device: desc.to_string(),
            source: e,
        },
        _ => StackError::Fs {
            what: format!("mounting {desc}"),
            source: e,
        },
    }
}

/// `base` with the block checksums it holds (a table at the end of a plain
/// device that `mkfs` made), or `base` itself if it holds none.
pub(crate) fn checked(base: Arc<dyn Store>, desc: &str) -> Result<Arc<dyn Store>, StackError> {
    match ChecksumStore::open(base.clone()) {
        Ok(Some(c)) => Ok(Arc::new(c)),
        Ok(None) => Ok(base),
        Err(e) => Err(StackError::Fs {
            what: format!("opening the block checksums of {desc}"),
            source: e.into(),
        }),
    }
}

/// Direct (unjournaled) access to the file system on `dev`, checksums
/// included: mkfs, fsck and repair.
pub(crate) fn direct(dev: &Arc<dyn BlockDevice>, desc: &str) -> Result<Arc<dyn Store>, StackError> {
    let d = ptsd_fs::DirectStore::new(dev.clone()).map_err(|e| StackError::Fs {
        what: format!("opening {desc}"),
        source: e.into(),
    })?;
    checked(Arc::new(d), desc)
}

/// Check and repair the device alone (journal gone), then mark it clean.
/// Shared by a mount that discards a missing journal and `fsck --repair`.
pub(crate) fn repair_device(
    dev: &Arc<dyn BlockDevice>,
    desc: &str,
) -> Result<ptsd_fs::fsck::Report, StackError> {
    let store = direct(dev, desc)?;
    let report = ptsd_fs::fsck::check(store, true).map_err(|e| StackError::Fs {
        what: format!("repairing {desc}"),
        source: e,
    })?;
    journal::mark_clean(dev, desc)?;
    Ok(report)
}

impl Stack {
    /// Open the device (creating and formatting a blank emulated SSD;
    /// recovering the SSD's map from its OOB area after a power cut), lock
    /// it and the journal, bring the journal back (replay after an unclean
    /// stop, a new one after a clean unmount; a missing one per
    /// [`StackSpec::missing_journal`]), and mount the file system (its
    /// preflight checks, orphans freed).
    pub fn open(spec: StackSpec) -> Result<Stack, StackError> {
        let opened = device::open(
            &spec.device,
            &OpenHow {
                mode: LockMode::Exclusive,
                holder: Holder::Mount,
                create: true,
                wait: spec.lock_wait,
                uncached_image: spec.journal.survives_power_loss(),
            },
        )?;
        let desc = opened.desc.clone();
        let res = Self::open_on(&spec, &opened);
        match res {
            Ok((fs, store, place, mut info)) => {
                info.device = desc;
                info.formatted = opened.fresh;
                info.source = opened.source.clone();
                Ok(Stack {
                    fs,
                    store,
                    opened: Some(opened),
                    place: Some(place),
                    info,
                })
            }
            Err(e) => {
                // Leave the SSD image as cleanly shut down as we found it.
                let _ = opened.shutdown_ssd();
                Err(e)
            }
        }
    }

    #[allow(clippy::type_complexity)]
    fn open_on(
        spec: &StackSpec,
        opened: &Opened,
    ) -> Result<(Arc<FileSystem>, Arc<JournalStore>, Place, OpenInfo), StackError> {
        let dev = opened.dev.clone();
        let desc = &opened.desc;
        if opened.fresh {
            let store = ptsd_fs::DirectStore::new(dev.clone()).map_err(|e| StackError::Fs {
                what: format!("opening {desc}"),
                source: e.into(),
            })?;
            let opts = MkfsOptions {
                root_owner: spec.root_owner,
                ..MkfsOptions::default()
            };
            ptsd_fs::mkfs(&store, &opts).map_err(|e| StackError::Fs {
                what: format!("formatting {desc}"),
                source: e,
            })?;
        }
        let sb = journal::read_superblock(&dev, desc)?;
        let place = Place::locate(
            &spec.journal,
            &sb,
            Some(Holder::Mount),
            true,
            spec.lock_wait,
        )?;
        let mut info = OpenInfo {
            journal: place.label.clone(),
            ..OpenInfo::default()
        };
        let mut plan = journal::plan(&sb, place.present());
        if plan == Plan::Lost {
            let discard = match spec.missing_journal {
                MissingJournal::Refuse => false,
                MissingJournal::Discard => true,
                MissingJournal::DiscardIfRam => place.ram,
            };
            if !discard {
                place.remove_if_empty();
                return Err(StackError::JournalMissing {
                    device: desc.clone(),
                    journal: place.label.clone(),
                    ram: place.ram,
                });
            }
            info.notes.push(format!("{LOST_NOTE} ({})", place.label));
            tracing::warn!("{LOST_NOTE} ({})", place.label);
            let report = repair_device(&dev, desc)?;
            info.notes
                .extend(report.problems.iter().map(|p| format!("repaired: {p}")));
            info.notes.push(report.summary());
            plan = Plan::Fresh;
        }
        // Coalesced, the window's thread checkpoints on the interval (a
        // flush of the window first): the journal's own timer would not
        // see the window, so what finished before a checkpoint would no
        // longer be durable after it.
        let mut jcfg = spec.journal_config.clone();
        let checkpoint_every = if spec.coalesce {
            jcfg.checkpoint_interval.take()
        } else {
            None
        };
        let journal = match plan {
            Plan::Replay => {
                let (j, report) = place.replay(dev.clone(), jcfg.clone())?;
                info.replayed_blocks = Some(report.replayed_blocks);
                j
            }
            Plan::Fresh | Plan::Lost => place.create(
                dev.clone(),
                jcfg,
                spec.journal_bytes,
                spec.disk_journal_partitions,
            )?,
        };
        let how = match info.replayed_blocks {
            Some(n) => format!("recovered, {n} blocks replayed"),
            None => "new".to_string(),
        };
        let mode = journal.mode();
        let durable = mode.durability();
        let partitions = journal.geometry().partitions;
        let plural = if partitions == 1 { "" } else { "s" };
        let what = format!(
            "journal {} [{mode}, {partitions} partition{plural}, {how}]: {durable}; fsync = journal commit",
            place.label,
        );
        // A window of at most an eighth of a partition's ring: one
        // transaction of twice that (the most a window holds, with the
        // block checksums it brings) always fits. 1024 blocks already
        // stage a directory block or bitmap once per hundreds of creates.
        let window_blocks = (journal.geometry().slots / 8).min(1024) as usize;
        let store = Arc::new(JournalStore::new(journal, dev, what));
        let below: Arc<dyn Store> = if spec.coalesce {
            let window = CoalescingStore::new(store.clone(), window_blocks, checkpoint_every);
            window.set_direct_after_sync(DIRECT_AFTER_SYNC);
            window
        } else {
            store.clone()
        };
        let base = checked(below, desc)?;
        let under = match &spec.store_hook {
            Some(hook) => (hook.0)(base),
            None => base,
        };
        let fs = FileSystem::mount(under).map_err(|e| fs_err(desc, e))?;
        info.orphans_freed = fs.orphans_freed;
        Ok((Arc::new(fs), store, place, info))
    }

    /// The mounted file system.
    pub fn fs(&self) -> &Arc<FileSystem> {
        &self.fs
    }

    /// The journaled store under the file system (journal statistics).
    pub fn store(&self) -> &Arc<JournalStore> {
        &self.store
    }

    /// The emulated SSD, when the device is one (FTL statistics).
    pub fn ssd(&self) -> Option<&Arc<SsdDevice>> {
        self.opened.as_ref().and_then(|o| o.ssd.as_ref())
    }

    /// What opening found and did.
    pub fn info(&self) -> &OpenInfo {
        &self.info
    }

    /// One line on the journal and how durable a commit is.
    pub fn durability(&self) -> String {
        self.fs.describe_store()
    }

    /// Clean shutdown: checkpoint everything, mark the file system clean,
    /// remove the journal file (only if this mount still owns it), shut
    /// the emulated SSD down (map checkpoint), release the locks.
    pub fn close(mut self) -> Result<(), StackError> {
        self.close_inner()
    }

    fn close_inner(&mut self) -> Result<(), StackError> {
        let Some(opened) = self.opened.take() else {
            return Ok(());
        };
        let place = self.place.take();
        let res = self.fs.close().map_err(|e| StackError::Fs {
            what: format!("unmounting {}", opened.desc),
            source: e,
        });
        if self.fs.is_clean() {
            if let Some(p) = &place {
                p.remove();
            }
        }
        let ssd = opened.shutdown_ssd();
        // The journal's lock goes before the device's: a mount waiting for
        // the device then finds the journal free.
        drop(place);
        drop(opened);
        res.and(ssd)
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        if let Err(e) = self.close_inner() {
            tracing::error!("closing the stack: {}", ptsd_blockdev::ErrorChain(&e));
        }
    }
}
