use std::path::PathBuf;

use thiserror::Error;

use crate::lock::Holder;

/// "PID 42 (ptsd mount); unmount it first", or what is known of the holder.
fn in_use_by(pid: Option<i32>, holder: Option<Holder>, serving: bool) -> String {
    let Some(pid) = pid else {
        return "another program (mounted or opened exclusively)".into();
    };
    match holder {
        Some(h) => format!("PID {pid} ({h}){}", h.advice()),
        None if serving => format!("PID {pid} (it serves a ptsd mount; unmount it first)"),
        None => format!("PID {pid}"),
    }
}

/// Why a stack could not be opened, formatted, checked or closed.
#[derive(Debug, Error)]
pub enum StackError {
    /// Another process (or another stack in this one) holds the image,
    /// device or journal.
    #[error("{} is in use by {}", .path.display(), in_use_by(*.pid, *.holder, *.serving))]
    InUse {
        /// The locked image, device or journal.
        path: PathBuf,
        /// The holder, when /proc/locks names it.
        pid: Option<i32>,
        /// The ptsd command holding it, when it recorded itself.
        holder: Option<Holder>,
        /// The holder still serves a FUSE mount or a ublk device.
        serving: bool,
    },
    /// The file system was not unmounted cleanly and its journal is gone.
    #[error("the file system on {device} was not unmounted cleanly and its journal {journal} is missing{}; \
             to mount it without the changes that were not yet checkpointed, run `ptsd fsck --repair` \
             or mount with --discard-missing-journal", if *.ram { " (a RAM journal does not survive a reboot)" } else { "" })]
    JournalMissing {
        /// The file system's device.
        device: String,
        /// Where its journal should be.
        journal: String,
        /// The journal lived on a RAM file system.
        ram: bool,
    },
    /// The device is an emulated SSD's image file, named where a file
    /// system's device was expected.
    #[error(
        "{device} is an emulated SSD's image, not a file system image: name its data \
             directory instead (`--data-dir DIR`, or nothing for the default one)"
    )]
    SsdImage {
        /// The image that was named.
        device: String,
    },
    /// The device holds no ptsd file system (or a damaged superblock).
    #[error("{device} holds no usable ptsd-fs")]
    NoFileSystem {
        /// The device that was read.
        device: String,
        /// Why its superblock was rejected.
        #[source]
        source: ptsd_fs::FsError,
    },
    /// Mounting found damage that needs `ptsd fsck --repair`.
    #[error("cannot mount {device} (run `ptsd fsck --repair`)")]
    NeedsRepair {
        /// The damaged device.
        device: String,
        /// The damage found.
        #[source]
        source: ptsd_fs::FsError,
    },
    /// The file system layer failed.
    #[error("{what}")]
    Fs {
        /// What the stack was doing.
        what: String,
        /// The file system's error.
        #[source]
        source: ptsd_fs::FsError,
    },
    /// The journal could not be created or recovered.
    #[error("{what} {path}")]
    Journal {
        /// What the stack was doing ("creating", "recovering"...).
        what: &'static str,
        /// The journal file.
        path: String,
        /// The journal's error.
        #[source]
        source: ptsd_nvjournal::JournalError,
    },
    /// The journal file could not be mapped.
    #[error("mapping journal {}", .path.display())]
    Region {
        /// The journal file.
        path: PathBuf,
        /// Why it could not be mapped.
        #[source]
        source: ptsd_nvjournal::RegionError,
    },
    /// The emulated SSD failed to open, recover or shut down.
    #[error("{what} the emulated SSD {image}")]
    Ssd {
        /// What the stack was doing ("opening", "recovering"...).
        what: &'static str,
        /// The SSD's persistent image.
        image: String,
        /// The FTL's error.
        #[source]
        source: ptsd_ftl::FtlError,
    },
    /// The block device failed.
    #[error("{what} {device}")]
    Device {
        /// What the stack was doing.
        what: &'static str,
        /// The block device.
        device: String,
        /// The device's error.
        #[source]
        source: ptsd_blockdev::BlockError,
    },
    /// A file operation failed.
    #[error("{op} {}", .path.display())]
    Io {
        /// The file operation ("open", "create"...).
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The request does not make sense (e.g. `--size` on a block device).
    #[error("{0}")]
    Invalid(String),
}
