//! Mount modes switchable while mounted: read-only (`ro`, `remount,ro`,
//! `remount,rw`) and synchronous changes (`sync`, `dirsync`).

use std::sync::atomic::Ordering;

use super::FileSystem;
use crate::error::Errno;

/// Asks the mount whether it is read-only now (see
/// [`FileSystem::set_remount_probe`]).
pub type RemountProbe = Box<dyn Fn() -> Option<bool> + Send + Sync>;

/// When a change is made durable before it returns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SyncMode {
    /// At the journal's next commit, an `fsync`, or the unmount (default).
    #[default]
    Async,
    /// Directory changes (create, link, unlink, rename, mkdir, rmdir,
    /// mknod, symlink) are durable when they return (`-o dirsync`).
    Dirs,
    /// Every change is durable when it returns (`-o sync`).
    All,
}

impl SyncMode {
    fn to_u8(self) -> u8 {
        match self {
            SyncMode::Async => 0,
            SyncMode::Dirs => 1,
            SyncMode::All => 2,
        }
    }
    fn from_u8(v: u8) -> Self {
        match v {
            1 => SyncMode::Dirs,
            2 => SyncMode::All,
            _ => SyncMode::Async,
        }
    }
}

impl FileSystem {
    /// Switch the mounted file system read-only (every change then fails
    /// with EROFS) or back to read-write. Nothing is lost: every change
    /// made before is a finished transaction; one in flight finishes first
    /// (it checked before this call) or fails.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use ptsd_blockdev::MemDevice;
    /// # use ptsd_fs::{mkfs, Caller, DirectStore, Errno, FileSystem, MkfsOptions};
    /// # let dev = Arc::new(MemDevice::new(4096, 256).unwrap());
    /// # let store = Arc::new(DirectStore::new(dev).unwrap());
    /// # mkfs(&*store, &MkfsOptions::default()).unwrap();
    /// # let fs = FileSystem::mount(store).unwrap();
    /// fs.set_read_only(true);
    /// assert_eq!(fs.mkdir(fs.root(), b"d", 0o755, Caller::default()).err(), Some(Errno::EROFS));
    /// fs.set_read_only(false);
    /// fs.mkdir(fs.root(), b"d", 0o755, Caller::default()).unwrap();
    /// ```
    pub fn set_read_only(&self, ro: bool) {
        if ro {
            if let Err(e) = self.flush_lazy_atimes() {
                tracing::error!("writing lazy atimes for read-only: {e}");
            }
        }
        self.read_only.store(ro, Ordering::SeqCst);
        if ro {
            // What was finished before the switch is durable when it
            // returns, as a remount,ro syncs.
            if let Err(e) = self.store.sync() {
                tracing::error!("syncing for read-only: {e}");
            }
        }
    }

    /// Whether the file system refuses changes: switched read-only, or
    /// stopped by a failed transaction.
    pub fn is_read_only(&self) -> bool {
        self.refuses_changes()
    }

    /// Install the way to ask the mount whether it is read-only now
    /// (`Some(true)`), writable (`Some(false)`) or unknown (`None`), once
    /// per mount. A change that reaches the file system while it is
    /// switched read-only asks it: the kernel may have made the mount
    /// writable a moment ago (`remount,rw`), before the file system heard
    /// (see [`crate::mountwatch`]), and the change must not fail then.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use ptsd_blockdev::MemDevice;
    /// # use ptsd_fs::{mkfs, Caller, DirectStore, FileSystem, MkfsOptions};
    /// # let dev = Arc::new(MemDevice::new(4096, 256).unwrap());
    /// # let store = Arc::new(DirectStore::new(dev).unwrap());
    /// # mkfs(&*store, &MkfsOptions::default()).unwrap();
    /// # let fs = FileSystem::mount(store).unwrap();
    /// fs.set_read_only(true);
    /// fs.set_remount_probe(Box::new(|| Some(false))); // remounted rw
    /// fs.mkdir(fs.root(), b"d", 0o755, Caller::default()).unwrap();
    /// assert!(!fs.is_read_only());
    /// ```
    pub fn set_remount_probe(&self, probe: RemountProbe) {
        if self.remount_probe.set(probe).is_err() {
            tracing::warn!("remount probe already set; keeping the first");
        }
    }

    /// Switched read-only, but the mount says it is writable now: switch
    /// back (only a change asks, never a read).
    pub(super) fn remounted_writable(&self) -> bool {
        if self.failed.load(Ordering::Relaxed) || self.closing.load(Ordering::Relaxed) {
            return false;
        }
        match self.remount_probe.get().and_then(|p| p()) {
            Some(false) => {
                self.set_read_only(false);
                true
            }
            _ => false,
        }
    }

    /// Choose when changes become durable (see [`SyncMode`]).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use ptsd_blockdev::MemDevice;
    /// # use ptsd_fs::{mkfs, DirectStore, FileSystem, MkfsOptions};
    /// use ptsd_fs::filesystem::SyncMode;
    /// # let dev = Arc::new(MemDevice::new(4096, 256).unwrap());
    /// # let store = Arc::new(DirectStore::new(dev).unwrap());
    /// # mkfs(&*store, &MkfsOptions::default()).unwrap();
    /// # let fs = FileSystem::mount(store).unwrap();
    /// fs.set_sync_mode(SyncMode::Dirs);
    /// assert_eq!(fs.sync_mode(), SyncMode::Dirs);
    /// ```
    pub fn set_sync_mode(&self, mode: SyncMode) {
        self.sync_mode.store(mode.to_u8(), Ordering::SeqCst);
    }

    /// The current [`SyncMode`].
    pub fn sync_mode(&self) -> SyncMode {
        SyncMode::from_u8(self.sync_mode.load(Ordering::Relaxed))
    }

    /// After a finished transaction: make it durable if every change must be.
    pub(super) fn after_commit(&self) -> Result<(), Errno> {
        if self.sync_mode() == SyncMode::All {
            self.store.sync()?;
        }
        Ok(())
    }

    /// After a finished directory change: make it durable under `dirsync`
    /// (under `sync` [`after_commit`](Self::after_commit) already did).
    pub(super) fn after_dir_change(&self) -> Result<(), Errno> {
        if self.sync_mode() == SyncMode::Dirs {
            self.store.sync()?;
        }
        Ok(())
    }
}
