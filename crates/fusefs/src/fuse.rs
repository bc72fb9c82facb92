//! The mount and INIT: what fuser still does for ptsd. fuser mounts (with
//! mount(2) as root, through fusermount3 otherwise) and answers INIT on
//! /dev/fuse with [`Init`], the one INIT step of every ptsd mount (the
//! file system's and the benchmark's no-op ceiling's alike); from then on
//! the requests go through ptsd's own front end ([`crate::frontend`]) on
//! either transport.

use std::sync::Arc;

use fuser::{Config, Filesystem, InitFlags, KernelConfig, MountOption, Request, SessionACL};

use crate::uring::UringInit;

pub use crate::frontend::TTL;

/// The INIT capabilities ptsd-fs asks for (those the kernel offers): the
/// bench's no-op ceiling asks for the same, so both get the same requests.
pub const INIT_FLAGS: InitFlags = InitFlags::FUSE_DO_READDIRPLUS
    .union(InitFlags::FUSE_READDIRPLUS_AUTO)
    .union(InitFlags::FUSE_PARALLEL_DIROPS)
    .union(InitFlags::FUSE_ASYNC_DIO)
    .union(InitFlags::FUSE_HANDLE_KILLPRIV_V2);

pub use crate::openflags::{
    direct_writes_coherent, open_reply_flags, FOPEN_DIRECT_IO, FOPEN_KEEP_CACHE,
};

/// The INIT step: asks for [`INIT_FLAGS`] (and io_uring, and the
/// writeback cache, when wanted) of what the kernel offers, and records
/// the outcome in a [`UringInit`] the transports and the reply
/// [`Policy`](crate::frontend::Policy) are set up from. fuser answers no
/// other request through it.
pub struct Init {
    out: Arc<UringInit>,
    direct_writes: bool,
    writeback_cache: bool,
}

impl Init {
    /// Records into `out`; write-only opens bypass the page cache if
    /// `direct_writes` (and the kernel keeps readers coherent).
    pub fn new(out: Arc<UringInit>, direct_writes: bool) -> Self {
        Init {
            out,
            direct_writes,
            writeback_cache: false,
        }
    }

    /// Also ask for the kernel's writeback cache (the no-op ceiling's
    /// option; ptsd-fs does not).
    pub fn writeback_cache(mut self, on: bool) -> Self {
        self.writeback_cache = on;
        self
    }
}

impl Filesystem for Init {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let mut want = INIT_FLAGS;
        if self.writeback_cache {
            want |= InitFlags::FUSE_WRITEBACK_CACHE;
        }
        let got = want & config.capabilities();
        let killpriv_v2 = config.add_capabilities(got).is_ok()
            && got.contains(InitFlags::FUSE_HANDLE_KILLPRIV_V2);
        let u = &self.out;
        let offered = config
            .capabilities()
            .contains(InitFlags::FUSE_OVER_IO_URING);
        let negotiated = u.wanted()
            && offered
            && config
                .add_capabilities(InitFlags::FUSE_OVER_IO_URING)
                .is_ok();
        // Every ring entry holds a max_write payload buffer, and every
        // /dev/fuse thread a read buffer of that size; the kernel caps
        // requests at max_pages (256 pages) anyway.
        let _ = config.set_max_write(crate::uring::MAX_WRITE);
        // The kernel's offer is the most it takes.
        let ra = config.set_max_readahead(u32::MAX).unwrap_or_else(|max| max);
        u.record(offered, negotiated, ra, killpriv_v2);
        u.record_direct_writes(self.direct_writes && direct_writes_coherent(config.capabilities()));
        Ok(())
    }
}

/// Options for [`mount_config`].
#[derive(Clone, Debug)]
pub struct MountOpts {
    /// Let other users use the mount (needs `user_allow_other` for non-root).
    pub allow_other: bool,
    /// FUSE worker threads.
    pub threads: usize,
    /// Source name shown in /proc/mounts.
    pub fsname: String,
    /// Unmount when the daemon exits (through fusermount3).
    pub auto_unmount: bool,
}

impl Default for MountOpts {
    fn default() -> Self {
        let cpus = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2);
        Self {
            allow_other: false,
            // One per CPU: a second idle thread per CPU only adds wake-ups
            // (measured on 2 CPUs: varmail +10%, tokubench +11%, the
            // disk-journal varmail +58% against 2 per CPU; bulk data the
            // same within the spread).
            threads: cpus.clamp(2, 16),
            fsname: "ptsd".into(),
            auto_unmount: false,
        }
    }
}

/// The `fuser` configuration ptsd-fs mounts with.
pub fn mount_config(o: &MountOpts) -> Config {
    mount_config_with(o, &[])
}

/// [`mount_config`] with `extra` kernel mount options.
pub fn mount_config_with(o: &MountOpts, extra: &[MountOption]) -> Config {
    let mut c = Config::default();
    c.mount_options = vec![
        MountOption::FSName(o.fsname.clone()),
        // The mount's type is fuse.ptsd (mount -t, findmnt -t, umount -a -t,
        // df -T see it). fuser's own Subtype reaches only fusermount3: its
        // direct mount(2), used as root, passes type "fuse" and drops it. The
        // kernel's FUSE mount takes `subtype=` itself (as fusermount3 does
        // with it), so pass it as a kernel option on both paths.
        MountOption::CUSTOM("subtype=ptsd".into()),
        MountOption::DefaultPermissions,
        MountOption::NoAtime,
        MountOption::Dev,
        MountOption::Suid,
    ];
    c.mount_options.extend_from_slice(extra);
    if o.auto_unmount {
        c.mount_options.push(MountOption::AutoUnmount);
    }
    c.acl = if o.allow_other {
        SessionACL::All
    } else if o.auto_unmount {
        SessionACL::RootAndOwner
    } else {
        SessionACL::Owner
    };
    c.n_threads = Some(o.threads.max(1));
    c.clone_fd = true;
    c
}

/// The daemon's own access rule for `c`'s ACL (see
/// [`crate::frontend::Access`]).
pub fn access_of(c: &Config) -> crate::frontend::Access {
    use crate::frontend::Access;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    match c.acl {
        SessionACL::All => Access::All,
        SessionACL::RootAndOwner => Access::RootAndOwner(me),
        SessionACL::Owner => Access::Owner(me),
    }
}

pub use crate::readahead::{raise_readahead, READAHEAD_KIB};
