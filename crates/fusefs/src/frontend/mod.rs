//! The FUSE front end, one layer under both transports.
//!
//! A request arrives as bytes, from a read of /dev/fuse ([`devfuse`]) or in
//! an io_uring queue entry ([`crate::uring`]); the transport only splits
//! them into the `fuse_in_header`, the opcode's argument struct and the
//! payload, and hands them to [`Frontend::answer`]. Everything between
//! those bytes and the file system happens here, once: decoding
//! ([`proto`]), the session's access rule, op counting
//! ([`crate::opcount`]), tracing, a panic fence, and the reply policy INIT
//! settled ([`Policy`]: open flags, entry and attribute validity, who
//! drops set-id bits). The file system ([`FsHandler`]) and the benchmark's
//! no-op ceiling each implement [`Handler`] once, so both transports — and
//! ceiling and subject — get the same requests and give the same replies by
//! construction.
//!
//! ```
//! use std::sync::Arc;
//! use ptsd_fs::frontend::proto::{opcode, InHeader, Request, Response};
//! use ptsd_fs::frontend::{Frontend, Handler, Policy};
//!
//! struct Hello;
//! impl Handler for Hello {
//!     fn handle(&self, _p: &Policy, _h: &InHeader, req: Request<'_>) -> Response {
//!         match req {
//!             Request::Statfs => Response::Empty,
//!             _ => Response::Error(libc::ENOSYS),
//!         }
//!     }
//! }
//! let fe = Frontend::new(Arc::new(Hello), Policy::default(), None);
//! let h = InHeader { len: 40, opcode: opcode::STATFS, unique: 7, nodeid: 1, uid: 0, gid: 0, pid: 1 };
//! assert_eq!(fe.answer(&h, &[], &[]), Some(Response::Empty));
//! // FORGET is answered by no reply at all.
//! let forget = InHeader { opcode: opcode::FORGET, ..h };
//! assert_eq!(fe.answer(&forget, &1u64.to_le_bytes(), &[]), None);
//! ```

pub mod devfuse;
mod handler;
pub mod notify;
pub mod proto;
pub mod serve;

use std::sync::Arc;
use std::time::Duration;

pub use handler::FsHandler;
pub use notify::Notifier;
pub use serve::{serve, Mount, ServeError, ServeOptions, Served};

use crate::opcount::{Op, OpCounts};
use crate::openflags::open_reply_flags;
use proto::{opcode, EntryOut, FuseAttr, InHeader, Request, Response, SetattrIn};

/// What answers the requests of a mount, whichever transport brings them.
pub trait Handler: Send + Sync + 'static {
    /// Answers one request, under the reply policy INIT settled.
    fn handle(&self, policy: &Policy, h: &InHeader, req: Request<'_>) -> Response;
    /// Whether work is due that the serving thread should do once its
    /// reply is on its way ([`after_reply`](Self::after_reply)); asked
    /// after every request, so it must be cheap. Default: never.
    fn work_due(&self) -> bool {
        false
    }
    /// The work [`work_due`](Self::work_due) announced.
    fn after_reply(&self) {}
    /// The mount's [`Notifier`], given once before the first request
    /// (after INIT). Default: unused.
    fn connected(&self, notifier: Notifier) {
        let _ = notifier;
    }
}

/// How long the kernel may cache attributes and entries. Only this process
/// changes the file system, and the kernel drops what an operation changes.
pub const TTL: Duration = Duration::from_secs(5);

/// The reply policy of a mount, as INIT settled it: the same for every
/// request, on both transports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// The kernel agreed to `FUSE_HANDLE_KILLPRIV_V2`: it leaves dropping
    /// setuid/setgid/capabilities on write, truncate and chown to the file
    /// system, and marks inodes it has checked `S_NOSEC`, so writes stop
    /// asking for `security.capability` first.
    pub killpriv_v2: bool,
    /// Write-only opens bypass the page cache ([`open_reply_flags`]).
    pub direct_writes: bool,
    /// The kernel agreed to `FUSE_SETXATTR_EXT`: SETXATTR's argument
    /// struct is the longer one, with `setxattr_flags`.
    pub setxattr_ext: bool,
}

impl Default for Policy {
    /// What a kernel of today agrees to (the in-process tests' policy).
    fn default() -> Self {
        Policy {
            killpriv_v2: true,
            direct_writes: true,
            setxattr_ext: true,
        }
    }
}

impl Policy {
    /// Entry and attribute validity, in seconds.
    pub fn valid(&self) -> u64 {
        TTL.as_secs()
    }

    /// The `fuse_open_out` flags for a file opened with `open_flags`.
    pub fn open_flags(&self, open_flags: u32) -> u32 {
        open_reply_flags(open_flags, self.direct_writes)
    }

    /// An entry reply for `attr`.
    pub fn entry(&self, nodeid: u64, generation: u64, attr: FuseAttr) -> EntryOut {
        EntryOut {
            nodeid,
            generation,
            valid: self.valid(),
            attr,
        }
    }

    /// The reply to a LOOKUP of a missing name: a negative entry (node id
    /// 0), which the kernel caches as "no such name" for the TTL (only this
    /// daemon changes the tree, through the kernel).
    pub fn negative_entry(&self) -> Response {
        Response::Entry(self.entry(
            0,
            0,
            FuseAttr {
                mode: libc::S_IFREG,
                blksize: 4096,
                ..FuseAttr::default()
            },
        ))
    }

    /// Whether a WRITE with `write_flags` must drop the file's set-id bits
    /// (the kernel says so under KILLPRIV_V2; without it the kernel drops
    /// them itself, with a SETATTR before the write).
    pub fn write_kills_suidgid(&self, write_flags: u32) -> bool {
        self.killpriv_v2 && write_flags & proto::WRITE_KILL_SUIDGID != 0
    }

    /// Whether a SETATTR must drop set-id bits and capabilities: a
    /// truncate by a caller without `CAP_FSETID`, which the kernel flags
    /// under KILLPRIV_V2 (without it the kernel sends the new mode itself).
    pub fn setattr_kills_priv(&self, s: &SetattrIn) -> bool {
        self.killpriv_v2 && s.size.is_some() && s.mode.is_none() && s.kill_suidgid
    }
}

/// The one layer between a transport's bytes and a [`Handler`].
pub struct Frontend {
    handler: Arc<dyn Handler>,
    policy: Policy,
    counts: Option<Arc<OpCounts>>,
    /// Only requests of these users (and the kernel's own) are served:
    /// the mount's access rule (see [`Access`]).
    access: Access,
}

/// Whose requests a mount serves. The kernel already keeps other users
/// out of a mount without `allow_other`; this is the daemon's own check
/// (as libfuse and fuser make it), for `allow_root`-style mounts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Everyone the kernel lets through.
    All,
    /// The owner (this process's effective uid) and root.
    RootAndOwner(u32),
    /// The owner only.
    Owner(u32),
}

impl Frontend {
    /// Answers through `handler` under `policy`, counting into `counts`;
    /// serves every user the kernel lets through.
    pub fn new(handler: Arc<dyn Handler>, policy: Policy, counts: Option<Arc<OpCounts>>) -> Self {
        Frontend {
            handler,
            policy,
            counts,
            access: Access::All,
        }
    }

    /// Serves only the requests `access` allows.
    pub fn with_access(mut self, access: Access) -> Self {
        self.access = access;
        self
    }

    /// The policy replies follow.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The handler's [`Handler::work_due`].
    pub fn work_due(&self) -> bool {
        self.handler.work_due()
    }

    /// The handler's [`Handler::after_reply`].
    pub fn after_reply(&self) {
        self.handler.after_reply()
    }

    /// Answers one request given as its three parts; `None` for a request
    /// the kernel wants no reply to (FORGET, BATCH_FORGET, INTERRUPT).
    /// Bad bytes are EIO, a panic in the handler is EIO, never a crash.
    pub fn answer(&self, h: &InHeader, op_in: &[u8], payload: &[u8]) -> Option<Response> {
        let silent = matches!(
            h.opcode,
            opcode::FORGET | opcode::BATCH_FORGET | opcode::INTERRUPT
        );
        if h.opcode == opcode::INTERRUPT {
            // Every request is answered promptly; nothing to interrupt.
            return None;
        }
        if !self.allowed(h) {
            return Some(Response::Error(libc::EACCES));
        }
        // Without FUSE_SETXATTR_EXT, a ring entry's SETXATTR argument
        // space holds only the short struct; what follows is stale.
        let op_in = if h.opcode == opcode::SETXATTR && !self.policy.setxattr_ext {
            &op_in[..op_in.len().min(proto::op_in_len(opcode::SETXATTR))]
        } else {
            op_in
        };
        let resp = match proto::decode(h, op_in, payload) {
            Ok(req) => {
                if let (Some(c), Some(op)) = (&self.counts, Op::of_opcode(h.opcode)) {
                    // A BATCH_FORGET counts as its forgets.
                    let n = match &req {
                        Request::BatchForget { nodes } => nodes.len() as u64,
                        _ => 1,
                    };
                    c.add(op, n);
                }
                tracing::trace!(unique = h.unique, nodeid = h.nodeid, "FUSE {req:?}");
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    self.handler.handle(&self.policy, h, req)
                }));
                r.unwrap_or_else(|_| {
                    tracing::error!("FUSE request {} panicked", h.opcode);
                    Response::Error(libc::EIO)
                })
            }
            Err(e) => {
                tracing::warn!("bad FUSE request: {e}");
                Response::Error(libc::EIO)
            }
        };
        (!silent).then_some(resp)
    }

    fn allowed(&self, h: &InHeader) -> bool {
        let ok = match self.access {
            Access::All => return true,
            Access::Owner(o) => h.uid == o,
            Access::RootAndOwner(o) => h.uid == o || h.uid == 0,
        };
        // What the kernel may send without the caller's uid (writeback,
        // read-ahead, releases at exit, reclaim).
        ok || matches!(
            h.opcode,
            opcode::DESTROY
                | opcode::READ
                | opcode::READDIR
                | opcode::READDIRPLUS
                | opcode::BATCH_FORGET
                | opcode::FORGET
                | opcode::WRITE
                | opcode::FSYNC
                | opcode::FSYNCDIR
                | opcode::RELEASE
                | opcode::RELEASEDIR
        )
    }
}

/// Frontend-level tests: the same request bytes through both adapters.
#[cfg(test)]
mod adapters_tests;
