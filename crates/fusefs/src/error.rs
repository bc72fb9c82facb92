use thiserror::Error;

/// What is wrong with an image.
#[derive(Debug, Error)]
pub enum FsFormatError {
    /// Block 0 does not carry the ptsd-fs magic.
    #[error("not a ptsd-fs image (no ptsd-fs superblock magic in block 0)")]
    NotPtsd,
    /// A metadata block failed validation.
    #[error("corrupt {what} at block {block}: {why}")]
    Corrupt {
        what: &'static str,
        block: u64,
        why: String,
    },
    /// A metadata block does not start with its kind's magic: another kind
    /// of block (a freed and reused inode number, say) or one never written.
    #[error("corrupt {what} at block {block}: bad magic")]
    BadMagic { what: &'static str, block: u64 },
    /// The image was made by an unknown format version.
    #[error("unsupported ptsd-fs format version {0}")]
    Version(u32),
    /// The image needs features this build does not know.
    #[error("image uses unknown incompatible features {0:#x}")]
    Features(u64),
    /// The superblock describes more blocks than the device has.
    #[error("file system has {fs_blocks} blocks but the device only {device_blocks}")]
    DeviceTooSmall { fs_blocks: u64, device_blocks: u64 },
}

/// Errors of the block store under the file system (device or journal).
#[derive(Debug, Error)]
pub enum FsStoreError {
    /// The block device failed.
    #[error("block device")]
    Device(#[from] ptsd_blockdev::BlockError),
    /// The journal failed.
    #[error("journal")]
    Journal(#[from] ptsd_nvjournal::JournalError),
    /// A block failed its checksum, or the checksum table is unusable.
    #[error("block {block}: {what}")]
    Checksum {
        /// The block.
        block: u64,
        /// What is wrong.
        what: &'static str,
    },
    /// An earlier flush of a commit window failed, so its transactions
    /// are lost and the store accepts nothing more.
    #[error("an earlier commit window failed to reach the journal")]
    WindowLost,
}

/// Errors of mkfs, mount (opening a file system) and fsck.
#[derive(Debug, Error)]
pub enum FsError {
    /// The image is not a valid ptsd-fs image.
    #[error(transparent)]
    Format(#[from] FsFormatError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] FsStoreError),
    /// The device cannot hold a file system with these parameters.
    #[error("invalid parameters: {0}")]
    Invalid(String),
    /// The file system must be repaired before mounting.
    #[error(transparent)]
    NeedsRepair(Damage),
}

/// Damage that keeps a file system from being mounted (or fsck from
/// repairing it).
#[derive(Debug, Error)]
pub enum Damage {
    /// The root or orphan directory's inode is not marked in use.
    #[error("the {what} (inode {ino}) is not marked in use")]
    NotInUse { what: &'static str, ino: u64 },
    /// The root or orphan directory cannot be loaded at mount.
    #[error("cannot load the {what}")]
    Unloadable {
        what: &'static str,
        #[source]
        source: FsFormatError,
    },
    /// The root or orphan directory is unreadable to fsck.
    #[error("the {what} directory (inode {ino}) is unreadable; cannot repair")]
    Unrepairable { what: &'static str, ino: u64 },
    /// Freeing the inodes a crash left in the orphan directory failed.
    #[error("freeing orphan inodes")]
    FreeingOrphans(#[source] Errno),
}

impl From<ptsd_blockdev::BlockError> for FsError {
    fn from(e: ptsd_blockdev::BlockError) -> Self {
        FsError::Store(FsStoreError::Device(e))
    }
}

/// An errno returned by a file-system operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Errno(pub i32);

impl Errno {
    pub const ENOENT: Errno = Errno(libc::ENOENT);
    pub const EEXIST: Errno = Errno(libc::EEXIST);
    pub const ENOTDIR: Errno = Errno(libc::ENOTDIR);
    pub const EISDIR: Errno = Errno(libc::EISDIR);
    pub const ENOTEMPTY: Errno = Errno(libc::ENOTEMPTY);
    pub const ENOSPC: Errno = Errno(libc::ENOSPC);
    pub const ENAMETOOLONG: Errno = Errno(libc::ENAMETOOLONG);
    pub const EINVAL: Errno = Errno(libc::EINVAL);
    pub const EIO: Errno = Errno(libc::EIO);
    pub const EPERM: Errno = Errno(libc::EPERM);
    pub const EFBIG: Errno = Errno(libc::EFBIG);
    pub const ENODATA: Errno = Errno(libc::ENODATA);
    pub const ERANGE: Errno = Errno(libc::ERANGE);
    pub const E2BIG: Errno = Errno(libc::E2BIG);
    pub const EOPNOTSUPP: Errno = Errno(libc::EOPNOTSUPP);
    pub const EMLINK: Errno = Errno(libc::EMLINK);
    pub const EROFS: Errno = Errno(libc::EROFS);
    pub const ESTALE: Errno = Errno(libc::ESTALE);
    pub const ENOTTY: Errno = Errno(libc::ENOTTY);
}

impl std::fmt::Display for Errno {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", std::io::Error::from_raw_os_error(self.0))
    }
}

impl std::error::Error for Errno {}

impl From<FsFormatError> for Errno {
    fn from(e: FsFormatError) -> Self {
        tracing::error!("metadata error: {e}");
        Errno::EIO
    }
}

impl FsStoreError {
    /// The errno a user sees for this failure: ENOSPC when the device ran
    /// out of space (an `io::Error` of kind `StorageFull` anywhere in the
    /// cause chain: an emulated SSD whose flash is full, or a file device on
    /// a full host file system), EIO for everything else (media errors, a
    /// device gone, a failed journal).
    pub fn errno(&self) -> Errno {
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(self);
        while let Some(e) = cause {
            if let Some(io) = e.downcast_ref::<std::io::Error>() {
                if io.kind() == std::io::ErrorKind::StorageFull {
                    return Errno::ENOSPC;
                }
            }
            cause = e.source();
        }
        Errno::EIO
    }
}

impl From<FsStoreError> for Errno {
    fn from(e: FsStoreError) -> Self {
        tracing::error!("store error: {}", ptsd_blockdev::ErrorChain(&e));
        e.errno()
    }
}
