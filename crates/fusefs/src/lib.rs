//! ptsd-fs: a POSIX file system for FUSE whose every change is one
//! all-or-nothing journal transaction.
//!
//! The home location is any [`ptsd_blockdev::BlockDevice`]. The layers:
//! [`format`](mod@format) (on-device structures, all checksummed), per-group
//! allocation bitmaps, hash-indexed directories and extent maps (internal),
//! [`filesystem`] (the operations, each one transaction on a
//! [`store::Store`]), [`frontend`] (the FUSE front end: one request model and handler under
//! both transports), [`fuse`] (mount and INIT), [`uring`] (FUSE over io_uring), [`fsck`].
//!
//! ```
//! use std::sync::Arc;
//! use ptsd_blockdev::MemDevice;
//! use ptsd_fs::{mkfs, Caller, DirectStore, FileSystem, MkfsOptions};
//!
//! let dev = Arc::new(MemDevice::new(4096, 1024).unwrap());
//! let store = Arc::new(DirectStore::new(dev).unwrap());
//! mkfs(&*store, &MkfsOptions::default()).unwrap();
//! let fs = FileSystem::mount(store).unwrap();
//! let root = fs.root();
//! let f = fs.create(root, b"hello", 0o644, Caller::default()).unwrap();
//! fs.write(f.ino, 0, b"world").unwrap();
//! assert_eq!(fs.read(f.ino, 0, 100).unwrap(), b"world");
//! fs.release(f.ino).unwrap();
//! fs.close().unwrap();
//! ```

pub mod acl;
pub(crate) mod alloc;
mod bugs;
pub mod caps;
mod chain;
pub mod coalesce;
pub mod csum;
pub(crate) mod dir;
pub mod error;
pub(crate) mod extent;
pub mod filesystem;
pub mod format;
pub mod frontend;
pub mod fsck;
pub mod fuse;
pub mod mountwatch;
pub mod opcount;
mod openflags;
mod readahead;
mod sealcrc;
pub mod stagestats;
pub mod store;
pub mod uring;
pub(crate) mod writes;
pub mod xattr_chain;

pub use csum::ChecksumStore;
pub use error::{Damage, Errno, FsError, FsFormatError, FsStoreError};
pub use filesystem::{
    mkfs, Attr, AttrInvalidator, Caller, DirEntry, FileSystem, MkfsOptions, Seek, SetAttr, SetTime,
    StatFs, AUTO_TRIM_BLOCKS, FITRIM, RENAME_EXCHANGE, RENAME_NOREPLACE, RENAME_WHITEOUT,
};
pub use store::{CountingStore, DirectStore, JournalStore, Store, StoreTxn};
