//! Notifications to the kernel: written on /dev/fuse whichever transport
//! serves the requests (the io_uring transport has no notification path).

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, RwLock};

/// `fuse_notify_code::FUSE_NOTIFY_INVAL_INODE`.
const FUSE_NOTIFY_INVAL_INODE: i32 = 2;

/// Sends notifications on a mount's /dev/fuse connection, until the mount
/// is served no more ([`close`](Self::close)). Cheap to clone.
#[derive(Clone, Debug)]
pub struct Notifier {
    fd: Arc<RwLock<Option<OwnedFd>>>,
}

impl Notifier {
    /// Notifies through `fd`, a descriptor of the connection's /dev/fuse.
    pub fn new(fd: OwnedFd) -> Self {
        Notifier {
            fd: Arc::new(RwLock::new(Some(fd))),
        }
    }

    /// `FUSE_NOTIFY_INVAL_INODE`: the kernel drops its cached attributes
    /// of node `nodeid` and, unless `offset` is negative, its cached pages
    /// of `[offset, offset + len)` (`len` 0: to the end of the file).
    /// ENOENT means the kernel holds no such inode (nothing was stale);
    /// after [`close`](Self::close) this does nothing.
    pub fn inval_inode(&self, nodeid: u64, offset: i64, len: i64) -> io::Result<()> {
        let mut msg = [0u8; 40];
        msg[0..4].copy_from_slice(&40u32.to_ne_bytes());
        msg[4..8].copy_from_slice(&FUSE_NOTIFY_INVAL_INODE.to_ne_bytes());
        // unique (8..16) 0: a notification, not a reply.
        msg[16..24].copy_from_slice(&nodeid.to_ne_bytes());
        msg[24..32].copy_from_slice(&offset.to_ne_bytes());
        msg[32..40].copy_from_slice(&len.to_ne_bytes());
        let guard = self.fd.read().unwrap_or_else(|e| e.into_inner());
        let Some(fd) = guard.as_ref() else {
            return Ok(());
        };
        // SAFETY: an open descriptor we hold, and a buffer of msg's length.
        let n = unsafe { libc::write(fd.as_raw_fd(), msg.as_ptr().cast(), msg.len()) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Closes the descriptor (when the mount is no longer served, so that
    /// nothing keeps the connection open).
    pub fn close(&self) {
        self.fd.write().unwrap_or_else(|e| e.into_inner()).take();
    }
}
