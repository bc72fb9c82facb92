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

use std::path::Path;
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
        Self::probe_at(Path::new(ENABLE_PARAM))
    }

    /// Reads the module parameter at `param` (a stand-in path in tests).
    ///
    /// ```
    /// use ptsd_fs::uring::Availability;
    /// let missing = std::path::Path::new("/nonexistent/enable_uring");
    /// assert_eq!(Availability::probe_at(missing), Availability::Missing);
    /// ```
    pub fn probe_at(param: &Path) -> Self {
        match std::fs::read_to_string(param) {
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

/// What a mount asked for with `-o uring` / `-o nouring`, or neither.
///
/// ```
/// use ptsd_fs::uring::{choose_transport, UringWish};
/// // `-o nouring` never asks INIT for io_uring, whatever the kernel has.
/// let param = std::path::Path::new("/nonexistent/enable_uring");
/// assert!(!choose_transport(UringWish::Off, param, true).uring);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UringWish {
    /// Neither: io_uring where the kernel has it on, /dev/fuse otherwise.
    Default,
    /// `-o uring`: io_uring; as root, turn the kernel's switch on first.
    Asked,
    /// `-o nouring`: /dev/fuse only.
    Off,
}

/// The transport a mount will ask INIT for ([`choose_transport`]).
///
/// ```
/// use ptsd_fs::uring::{choose_transport, TransportChoice, UringWish};
/// // A kernel without the parameter: ask anyway (INIT will say no, and
/// // the mount line why); nothing was done to say.
/// let param = std::path::Path::new("/nonexistent/enable_uring");
/// assert_eq!(
///     choose_transport(UringWish::Asked, param, true),
///     TransportChoice { uring: true, note: None }
/// );
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransportChoice {
    /// Ask for FUSE over io_uring at INIT.
    pub uring: bool,
    /// What was done to the kernel on the way, to be said once (the
    /// switch was turned on), or why asking was not enough.
    pub note: Option<String>,
}

/// Chooses the transport for `wish`, reading (and for [`UringWish::Asked`]
/// with `may_enable`, i.e. as root, writing) the module parameter at
/// `param` ([`ENABLE_PARAM`] outside tests). A mount that cannot get
/// io_uring still mounts, over /dev/fuse, and its mount line says why.
///
/// ```
/// use ptsd_fs::uring::{choose_transport, UringWish};
/// let dir = std::env::temp_dir().join(format!("ptsd-doc-uring-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let param = dir.join("enable_uring");
/// std::fs::write(&param, "N\n").unwrap();
/// // The default leaves the kernel's switch alone.
/// assert!(choose_transport(UringWish::Default, &param, true).note.is_none());
/// // `-o uring` as root turns it on, and says so.
/// let c = choose_transport(UringWish::Asked, &param, true);
/// assert!(c.uring && c.note.is_some());
/// assert_eq!(std::fs::read_to_string(&param).unwrap().trim(), "Y");
/// # std::fs::remove_dir_all(&dir).unwrap();
/// ```
pub fn choose_transport(wish: UringWish, param: &Path, may_enable: bool) -> TransportChoice {
    let plain = |uring| TransportChoice { uring, note: None };
    match (wish, Availability::probe_at(param)) {
        (UringWish::Off, _) => plain(false),
        // Asked for at INIT all the same: a kernel that does not offer it
        // gets /dev/fuse, and the mount line says why (`Served::transport`).
        (UringWish::Default, _)
        | (UringWish::Asked, Availability::Enabled | Availability::Missing) => plain(true),
        (UringWish::Asked, Availability::Disabled) if !may_enable => plain(true),
        (UringWish::Asked, Availability::Disabled) => match std::fs::write(param, "Y") {
            Ok(()) => TransportChoice {
                uring: true,
                note: Some(format!(
                    "turned FUSE over io_uring on in the kernel for -o uring (Y > {})",
                    param.display()
                )),
            },
            Err(e) => TransportChoice {
                uring: true,
                note: Some(format!(
                    "-o uring: could not turn FUSE over io_uring on ({}: {e})",
                    param.display()
                )),
            },
        },
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Ask INIT for io_uring, nothing to say.
    const ASK: TransportChoice = TransportChoice {
        uring: true,
        note: None,
    };
    /// /dev/fuse only.
    const DEV_FUSE: TransportChoice = TransportChoice {
        uring: false,
        note: None,
    };

    /// A stand-in module parameter holding `value` (None: absent).
    fn param(tag: &str, value: Option<&str>) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::Builder::new().prefix(tag).tempdir().unwrap();
        let p = dir.path().join("enable_uring");
        if let Some(v) = value {
            std::fs::write(&p, v).unwrap();
        }
        (dir, p)
    }

    fn read(p: &Path) -> Option<String> {
        std::fs::read_to_string(p)
            .ok()
            .map(|s| s.trim().to_string())
    }

    #[test]
    fn nouring_never_asks_nor_touches_the_switch() {
        let (_d, p) = param("off", Some("N\n"));
        assert_eq!(choose_transport(UringWish::Off, &p, true), DEV_FUSE);
        assert_eq!(read(&p).as_deref(), Some("N"));
    }

    #[test]
    fn default_asks_but_leaves_the_switch_alone() {
        for v in ["Y\n", "N\n"] {
            let (_d, p) = param("default", Some(v));
            let c = choose_transport(UringWish::Default, &p, true);
            assert_eq!(c, ASK, "{v}");
            assert_eq!(read(&p).as_deref(), Some(v.trim()));
        }
    }

    #[test]
    fn asked_as_root_turns_the_switch_on_and_says_so_once() {
        let (_d, p) = param("asked", Some("N\n"));
        let c = choose_transport(UringWish::Asked, &p, true);
        assert!(c.uring);
        assert!(c
            .note
            .as_deref()
            .unwrap()
            .contains("turned FUSE over io_uring on"));
        assert_eq!(read(&p).as_deref(), Some("Y"));
        // Now on: nothing more to say.
        assert_eq!(choose_transport(UringWish::Asked, &p, true), ASK);
    }

    #[test]
    fn asked_without_root_or_kernel_support_falls_back_untouched() {
        let (_d, p) = param("user", Some("N\n"));
        assert_eq!(choose_transport(UringWish::Asked, &p, false), ASK);
        assert_eq!(read(&p).as_deref(), Some("N"));
        let (_d, missing) = param("missing", None);
        assert_eq!(choose_transport(UringWish::Asked, &missing, true), ASK);
        assert!(!missing.exists());
    }
}
