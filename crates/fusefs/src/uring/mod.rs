//! FUSE over io_uring (Linux 6.14+, `CONFIG_FUSE_IO_URING`, module
//! parameter `fuse.enable_uring`): requests arrive as completions of
//! `IORING_OP_URING_CMD` on per-CPU queues and replies go back with the next
//! fetch, with no `read`/`write` on /dev/fuse per request.
//!
//! The mount and INIT still go over /dev/fuse ([`crate::fuse`] asks for
//! `FUSE_OVER_IO_URING` there, see [`UringInit`]), and the /dev/fuse
//! threads keep serving what the kernel still sends that way (FORGET,
//! INTERRUPT, requests before every queue has an entry). Both transports
//! only move bytes: [`ring`]'s queue threads hand each entry's request to
//! the same [`crate::frontend::Frontend`] as /dev/fuse does.

#[doc(hidden)]
pub mod fuzz;
pub mod ring;

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// The codec, shared with /dev/fuse (here for the paths of old callers).
pub use crate::frontend::proto;
pub use ring::{possible_cpus, start, RingConfig, RingStats, Rings};

/// The module parameter that turns the kernel side on.
pub const ENABLE_PARAM: &str = "/sys/module/fuse/parameters/enable_uring";

/// Whether this kernel can serve a mount over io_uring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Availability {
    /// `enable_uring` is on.
    Enabled,
    /// The kernel has it, the parameter is off (the default).
    Disabled,
    /// The kernel lacks it (older than 6.14 or built without
    /// `CONFIG_FUSE_IO_URING`), or the fuse module is not loaded.
    Missing,
}

impl Availability {
    /// Reads [`ENABLE_PARAM`].
    pub fn probe() -> Self {
        match std::fs::read_to_string(ENABLE_PARAM) {
            Ok(s) if s.trim() == "Y" || s.trim() == "1" => Availability::Enabled,
            Ok(_) => Availability::Disabled,
            Err(_) => Availability::Missing,
        }
    }

    /// Why a mount uses /dev/fuse instead, for the one line ptsd says.
    pub fn reason(self) -> &'static str {
        match self {
            Availability::Enabled => "the kernel did not offer it at INIT",
            Availability::Disabled => {
                "the kernel has it but it is off (as root: echo Y > /sys/module/fuse/parameters/enable_uring)"
            }
            Availability::Missing => "this kernel lacks it (needs Linux 6.14+ with CONFIG_FUSE_IO_URING)",
        }
    }
}

/// Turns the kernel side on (root only); the tests and the benchmark do.
pub fn enable() -> std::io::Result<()> {
    std::fs::write(ENABLE_PARAM, "Y")
}

/// The largest WRITE a ring mount asks for: the kernel caps requests at
/// `max_pages` (256 pages) anyway, and every ring entry holds a payload
/// buffer of `max_write` bytes, so fuser's 16 MiB default would cost 16 MiB
/// per entry.
pub const MAX_WRITE: u32 = 1 << 20;

/// INIT's outcome, shared between the INIT step ([`crate::fuse`]) and the
/// code that starts the transports.
#[derive(Debug, Default)]
pub struct UringInit {
    want: bool,
    offered: AtomicBool,
    negotiated: AtomicBool,
    max_readahead: AtomicU32,
    killpriv_v2: AtomicBool,
    direct_writes: AtomicBool,
    setxattr_ext: AtomicBool,
}

impl UringInit {
    /// Ask for io_uring at INIT when `want` (and the kernel offers it).
    pub fn new(want: bool) -> Self {
        UringInit {
            want,
            ..Default::default()
        }
    }

    /// True if io_uring was asked for.
    pub fn wanted(&self) -> bool {
        self.want
    }

    /// The kernel offered `FUSE_OVER_IO_URING` at INIT.
    pub fn offered(&self) -> bool {
        self.offered.load(Ordering::SeqCst)
    }

    /// INIT agreed on io_uring: the kernel holds every request until each
    /// CPU queue has an entry registered (or a REGISTER fails).
    pub fn negotiated(&self) -> bool {
        self.negotiated.load(Ordering::SeqCst)
    }

    /// Payload bytes each ring entry needs: the kernel's
    /// `max(8 KiB, max_write, max_pages * 4 KiB)`.
    pub fn payload_bytes(&self) -> usize {
        let ra = self.max_readahead.load(Ordering::SeqCst) as usize;
        (MAX_WRITE as usize)
            .max(ra.next_multiple_of(4096))
            .max(8192)
    }

    /// INIT agreed on `FUSE_HANDLE_KILLPRIV_V2` (see
    /// [`crate::frontend::Policy`]).
    pub fn killpriv_v2(&self) -> bool {
        self.killpriv_v2.load(Ordering::SeqCst)
    }

    /// Whether write-only opens bypass the page cache, as INIT settled it
    /// (asked for, and the kernel keeps cached readers coherent:
    /// [`crate::fuse::direct_writes_coherent`]).
    pub fn direct_writes(&self) -> bool {
        self.direct_writes.load(Ordering::SeqCst)
    }

    /// Records INIT's decision on direct writes.
    pub fn record_direct_writes(&self, on: bool) {
        self.direct_writes.store(on, Ordering::SeqCst);
    }

    /// Records whether INIT agreed on `FUSE_SETXATTR_EXT`.
    pub fn record_setxattr_ext(&self, on: bool) {
        self.setxattr_ext.store(on, Ordering::SeqCst);
    }

    /// Records INIT's outcome (the INIT step calls this).
    pub fn record(&self, offered: bool, negotiated: bool, max_readahead: u32, killpriv_v2: bool) {
        self.killpriv_v2.store(killpriv_v2, Ordering::SeqCst);
        self.offered.store(offered, Ordering::SeqCst);
        self.negotiated.store(negotiated, Ordering::SeqCst);
        self.max_readahead.store(max_readahead, Ordering::SeqCst);
    }
}

impl UringInit {
    /// The reply policy INIT settled.
    pub fn policy(&self) -> crate::frontend::Policy {
        crate::frontend::Policy {
            killpriv_v2: self.killpriv_v2(),
            direct_writes: self.direct_writes(),
            setxattr_ext: self.setxattr_ext.load(Ordering::SeqCst),
        }
    }
}
