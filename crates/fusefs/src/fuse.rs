//! The mount and INIT: what fuser still does for ptsd. fuser mounts (with
//! mount(2) as root, through fusermount3 otherwise) and answers INIT on
//! /dev/fuse with [`Init`], the one INIT step of every ptsd mount (the
//! file system's and the benchmark's no-op ceiling's alike); from then on
//! the requests go through ptsd's own front end ([`crate::frontend`]) on
//! either transport.

use std::path::Path;
use std::sync::Arc;

use fuser::{Config, Filesystem, InitFlags, KernelConfig, MountOption, Request, SessionACL};

use crate::filesystem::{AtimePolicy, FileSystem, SyncMode};
use crate::uring::UringInit;

pub use crate::frontend::TTL;

/// The INIT capabilities ptsd-fs asks for (those the kernel offers): the
/// bench's no-op ceiling asks for the same, so both get the same requests.
pub const INIT_FLAGS: InitFlags = InitFlags::FUSE_DO_READDIRPLUS
    .union(InitFlags::FUSE_READDIRPLUS_AUTO)
    .union(InitFlags::FUSE_PARALLEL_DIROPS)
    .union(InitFlags::FUSE_ASYNC_DIO)
    .union(InitFlags::FUSE_HANDLE_KILLPRIV_V2)
    // File handles (open_by_handle_at, NFS) of inodes the kernel dropped:
    // it looks them up by node id as "." (see `FileSystem::lookup`).
    .union(InitFlags::FUSE_EXPORT_SUPPORT)
    // The kernel checks permissions against POSIX ACLs (as on ext4), and
    // with DONT_MASK leaves applying the umask, or a default ACL instead,
    // to us (it passes the umask apart).
    .union(InitFlags::FUSE_POSIX_ACL)
    .union(InitFlags::FUSE_DONT_MASK)
    // SETXATTR says when setting an ACL clears setgid (the caller is not
    // in the file's group), as Linux's posix_acl_update_mode does.
    .union(InitFlags::FUSE_SETXATTR_EXT);

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
        let caps_added = config.add_capabilities(got).is_ok();
        let killpriv_v2 = caps_added && got.contains(InitFlags::FUSE_HANDLE_KILLPRIV_V2);
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
        u.record_setxattr_ext(got.contains(InitFlags::FUSE_SETXATTR_EXT) && caps_added);
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
    /// The generic mount(8) flags the kernel mount gets.
    pub flags: MountFlags,
}

pub use crate::filesystem::Atime;

/// The generic mount(8) options that are the kernel's business: what
/// `-o ro,nosuid,nodev,noexec,sync,dirsync` and the atime family ask of the
/// mount. (`ptsd mount` parses them; the file system's own side of `ro`,
/// `sync` and the atime family is the `FileSystem`'s.)
///
/// ```
/// use ptsd_fs::fuse::{Atime, MountFlags};
/// let mut f = MountFlags::default();
/// for o in ["ro", "nosuid", "noatime", "nodiratime", "remount"] {
///     assert!(f.apply(o), "{o}");
/// }
/// assert!(f.read_only && f.nosuid && f.nodiratime && f.remount);
/// assert_eq!(f.atime, Atime::Noatime);
/// assert!(!f.apply("journal"));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MountFlags {
    /// `ro` (`rw` clears it).
    pub read_only: bool,
    /// `nosuid` (`suid` clears it).
    pub nosuid: bool,
    /// `nodev` (`dev` clears it).
    pub nodev: bool,
    /// `noexec` (`exec` clears it).
    pub noexec: bool,
    /// `sync` (`async` clears it).
    pub sync: bool,
    /// `dirsync`.
    pub dirsync: bool,
    /// The atime family.
    pub atime: Atime,
    /// `nodiratime` (`diratime` clears it).
    pub nodiratime: bool,
    /// `lazytime` (`nolazytime` clears it).
    pub lazytime: bool,
    /// `remount`: change the flags of the mount on the mount point
    /// instead of mounting.
    pub remount: bool,
}

impl MountFlags {
    /// Applies one generic option; false if `o` is not one.
    pub fn apply(&mut self, o: &str) -> bool {
        match o {
            "ro" => self.read_only = true,
            "rw" => self.read_only = false,
            "nosuid" => self.nosuid = true,
            "suid" => self.nosuid = false,
            "nodev" => self.nodev = true,
            "dev" => self.nodev = false,
            "noexec" => self.noexec = true,
            "exec" => self.noexec = false,
            "sync" => self.sync = true,
            "async" => self.sync = false,
            "dirsync" => self.dirsync = true,
            "atime" | "relatime" => self.atime = Atime::Relatime,
            "noatime" => self.atime = Atime::Noatime,
            "strictatime" => self.atime = Atime::Strictatime,
            "norelatime" | "nostrictatime" => self.atime = Atime::Relatime,
            "nodiratime" => self.nodiratime = true,
            "diratime" => self.nodiratime = false,
            "lazytime" => self.lazytime = true,
            "nolazytime" => self.lazytime = false,
            "remount" => self.remount = true,
            _ => return false,
        }
        true
    }

    /// The per-mount `MS_*` flags (what a bind remount sets).
    fn per_mount(&self) -> libc::c_ulong {
        let mut f = 0;
        for (on, bit) in [
            (self.read_only, libc::MS_RDONLY),
            (self.nosuid, libc::MS_NOSUID),
            (self.nodev, libc::MS_NODEV),
            (self.noexec, libc::MS_NOEXEC),
            (self.nodiratime, libc::MS_NODIRATIME),
            (self.atime == Atime::Noatime, libc::MS_NOATIME),
            (self.atime == Atime::Strictatime, libc::MS_STRICTATIME),
            (self.atime == Atime::Relatime, libc::MS_RELATIME),
        ] {
            if on {
                f |= bit;
            }
        }
        f
    }

    /// The superblock's `MS_*` flags.
    fn per_sb(&self) -> libc::c_ulong {
        let mut f = 0;
        for (on, bit) in [
            (self.read_only, libc::MS_RDONLY),
            (self.sync, libc::MS_SYNCHRONOUS),
            (self.dirsync, libc::MS_DIRSYNC),
            (self.lazytime, libc::MS_LAZYTIME),
        ] {
            if on {
                f |= bit;
            }
        }
        f
    }

    /// What fuser's mount cannot say (`strictatime`, `nodiratime`,
    /// `lazytime`): set by a remount right after the mount.
    pub fn need_remount(&self) -> bool {
        self.atime == Atime::Strictatime || self.nodiratime || self.lazytime
    }

    /// When changes become durable under these flags: `sync` every
    /// change, `dirsync` directory changes, before they return.
    pub fn sync_mode(&self) -> SyncMode {
        if self.sync {
            SyncMode::All
        } else if self.dirsync {
            SyncMode::Dirs
        } else {
            SyncMode::Async
        }
    }

    /// The atime updates these flags ask of the file system (FUSE leaves
    /// them to it).
    pub fn atime_policy(&self) -> AtimePolicy {
        AtimePolicy {
            atime: self.atime,
            nodiratime: self.nodiratime,
            lazytime: self.lazytime,
        }
    }

    /// The flags of a mount as `/proc/self/mountinfo` shows them: its
    /// per-mount options (`rw,nosuid,relatime`) and its superblock's
    /// (`ro,sync,user_id=0,…`). The superblock decides `ro` (a bind
    /// mount made read-only alone leaves the file system writable); no
    /// `relatime` nor `noatime` means `strictatime`.
    ///
    /// ```
    /// use ptsd_fs::fuse::{Atime, MountFlags};
    /// let f = MountFlags::from_mountinfo("rw,nosuid,noatime", "ro,user_id=0,lazytime");
    /// assert!(f.read_only && f.nosuid && f.lazytime);
    /// assert_eq!(f.atime, Atime::Noatime);
    /// let f = MountFlags::from_mountinfo("ro,nodiratime", "rw,user_id=0");
    /// assert!(!f.read_only && f.nodiratime);
    /// assert_eq!(f.atime, Atime::Strictatime);
    /// ```
    pub fn from_mountinfo(per_mount: &str, per_sb: &str) -> MountFlags {
        let mut f = MountFlags {
            atime: Atime::Strictatime,
            ..MountFlags::default()
        };
        for o in per_mount.split(',').chain(per_sb.split(',')) {
            // Unknown ones (user_id=0, default_permissions) are the
            // kernel FUSE mount's own.
            f.apply(o);
        }
        f
    }

    /// Gives the file system what it enforces itself of these flags, at
    /// mount and at a remount: `ro` (EROFS for every change, whatever
    /// reaches it), the [`sync_mode`](Self::sync_mode) and the
    /// [`atime_policy`](Self::atime_policy). The kernel mount gets them
    /// too.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use ptsd_blockdev::MemDevice;
    /// # use ptsd_fs::{mkfs, Caller, DirectStore, Errno, FileSystem, MkfsOptions};
    /// use ptsd_fs::filesystem::SyncMode;
    /// use ptsd_fs::fuse::MountFlags;
    /// # let dev = Arc::new(MemDevice::new(4096, 256).unwrap());
    /// # let store = Arc::new(DirectStore::new(dev).unwrap());
    /// # mkfs(&*store, &MkfsOptions::default()).unwrap();
    /// # let fs = FileSystem::mount(store).unwrap();
    /// let mut f = MountFlags::default();
    /// assert!(f.apply("ro") && f.apply("dirsync"));
    /// f.apply_to(&fs);
    /// assert_eq!(fs.sync_mode(), SyncMode::Dirs);
    /// assert_eq!(fs.mkdir(fs.root(), b"d", 0o755, Caller::default()).err(), Some(Errno::EROFS));
    /// ```
    pub fn apply_to(&self, fs: &FileSystem) {
        fs.set_read_only(self.read_only);
        fs.set_sync_mode(self.sync_mode());
        fs.set_atime_policy(self.atime_policy());
    }
}

/// Sets the flags of the mount on `dir` to `f` (its superblock's with
/// `MS_REMOUNT`, then the mount point's own with a bind remount): `mount
/// -o remount,...`, and what fuser's mount cannot pass.
pub fn remount(dir: &Path, f: &MountFlags) -> std::io::Result<()> {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())
        .map_err(std::io::Error::other)?;
    for flags in [
        libc::MS_REMOUNT | f.per_sb(),
        libc::MS_REMOUNT | libc::MS_BIND | f.per_mount(),
    ] {
        // SAFETY: `c` is a NUL-terminated path; the other pointers may be
        // null for a remount.
        let r = unsafe {
            libc::mount(
                std::ptr::null(),
                c.as_ptr(),
                std::ptr::null(),
                flags,
                std::ptr::null(),
            )
        };
        if r != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
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
            flags: MountFlags::default(),
        }
    }
}

/// The `fuser` configuration ptsd-fs mounts with.
pub fn mount_config(o: &MountOpts) -> Config {
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
    ];
    let f = &o.flags;
    for (on, yes, no) in [
        (f.nodev, MountOption::NoDev, Some(MountOption::Dev)),
        (f.nosuid, MountOption::NoSuid, Some(MountOption::Suid)),
        (f.read_only, MountOption::RO, None),
        (f.noexec, MountOption::NoExec, None),
        (f.sync, MountOption::Sync, None),
        (f.dirsync, MountOption::DirSync, None),
        (f.atime == Atime::Noatime, MountOption::NoAtime, None),
    ] {
        c.mount_options.extend(if on { Some(yes) } else { no });
    }
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
