//! The `fuser` adapter: translates FUSE requests into [`FileSystem`] calls.
//!
//! `fuser` calls every method through `&self` from several threads
//! ([`mount_config`] asks for `n_threads` with `clone_fd`), so requests from
//! different processes run — and journal — concurrently.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use fuser::{
    AccessFlags, Config, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation,
    INodeNo, InitFlags, KernelConfig, LockOwner, MountOption, OpenFlags, RenameFlags, ReplyAttr,
    ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyLseek,
    ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, SessionACL, TimeOrNow, WriteFlags,
};

use crate::error::Errno;
use crate::filesystem::{Attr, Caller, FileSystem, Seek, SetAttr, SetTime};
use crate::format::Ts;
use crate::uring::UringInit;

/// How long the kernel may cache attributes and entries. Only this process
/// changes the file system, and the kernel drops what an operation changes.
pub const TTL: Duration = Duration::from_secs(5);

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
    .union(InitFlags::FUSE_DONT_MASK);

pub use crate::openflags::{
    direct_writes_coherent, open_reply_flags, FOPEN_DIRECT_IO, FOPEN_KEEP_CACHE,
};

/// A [`FileSystem`] served over FUSE.
pub struct FuseFs {
    fs: Arc<FileSystem>,
    root: u64,
    /// The kernel agreed to `FUSE_HANDLE_KILLPRIV_V2`: it leaves dropping
    /// setuid/setgid/capabilities on write, truncate and chown to us, and
    /// marks inodes it has checked `S_NOSEC`, so writes stop asking for
    /// `security.capability` first.
    killpriv_v2: bool,
    /// Ask for FUSE over io_uring at INIT, and say how it went.
    uring: Option<Arc<UringInit>>,
    /// Write-only opens bypass the page cache ([`open_reply_flags`]).
    direct_writes: bool,
}

fn errno(e: Errno) -> fuser::Errno {
    fuser::Errno::from_i32(e.0)
}

fn kind_of(mode: u32) -> FileType {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => FileType::Directory,
        libc::S_IFLNK => FileType::Symlink,
        libc::S_IFIFO => FileType::NamedPipe,
        libc::S_IFCHR => FileType::CharDevice,
        libc::S_IFBLK => FileType::BlockDevice,
        libc::S_IFSOCK => FileType::Socket,
        _ => FileType::RegularFile,
    }
}

fn set_time(t: TimeOrNow) -> SetTime {
    match t {
        TimeOrNow::Now => SetTime::Now,
        TimeOrNow::SpecificTime(t) => SetTime::At(Ts::from_system(t)),
    }
}

impl FuseFs {
    /// Serve `fs`.
    pub fn new(fs: Arc<FileSystem>) -> Self {
        let root = fs.root();
        Self {
            fs,
            root,
            killpriv_v2: false,
            uring: None,
            direct_writes: true,
        }
    }

    /// Whether write-only opens bypass the kernel's page cache (on by
    /// default where the kernel keeps readers coherent, see
    /// [`open_reply_flags`] and [`direct_writes_coherent`]).
    pub fn direct_writes(mut self, on: bool) -> Self {
        self.direct_writes = on;
        self
    }

    fn open_flags(&self, open_flags: u32) -> FopenFlags {
        FopenFlags::from_bits_retain(open_reply_flags(open_flags, self.direct_writes))
    }

    /// Serve `fs`, asking at INIT for the io_uring transport if
    /// `uring.wanted()`; `uring` then tells whether the kernel agreed (the
    /// caller starts [`crate::uring::start`] if so).
    pub fn with_uring(fs: Arc<FileSystem>, uring: Arc<UringInit>) -> Self {
        Self {
            uring: Some(uring),
            ..Self::new(fs)
        }
    }

    fn ino(&self, i: INodeNo) -> u64 {
        if i.0 == 1 {
            self.root
        } else {
            i.0
        }
    }

    fn fuse_ino(&self, i: u64) -> INodeNo {
        INodeNo(if i == self.root { 1 } else { i })
    }

    fn attr(&self, a: &Attr) -> FileAttr {
        FileAttr {
            ino: self.fuse_ino(a.ino),
            size: a.size,
            blocks: a.blocks,
            atime: a.atime.to_system(),
            mtime: a.mtime.to_system(),
            ctime: a.ctime.to_system(),
            crtime: a.crtime.to_system(),
            kind: kind_of(a.mode),
            perm: (a.mode & 0o7777) as u16,
            nlink: a.nlink,
            uid: a.uid,
            gid: a.gid,
            rdev: a.rdev,
            blksize: 4096,
            flags: 0,
        }
    }

    fn entry(&self, r: Result<Attr, Errno>, reply: ReplyEntry) {
        match r {
            Ok(a) => reply.entry(&TTL, &self.attr(&a), Generation(a.generation)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn empty(r: Result<(), Errno>, reply: ReplyEmpty) {
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }
}

fn caller(req: &Request) -> Caller {
    Caller {
        uid: req.uid(),
        gid: req.gid(),
    }
}

impl Filesystem for FuseFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let got = INIT_FLAGS & config.capabilities();
        if config.add_capabilities(got).is_ok() {
            self.killpriv_v2 = got.contains(InitFlags::FUSE_HANDLE_KILLPRIV_V2);
        }
        self.direct_writes &= direct_writes_coherent(config.capabilities());
        if let Some(u) = &self.uring {
            let offered = config
                .capabilities()
                .contains(InitFlags::FUSE_OVER_IO_URING);
            let negotiated = u.wanted()
                && offered
                && config
                    .add_capabilities(InitFlags::FUSE_OVER_IO_URING)
                    .is_ok();
            if negotiated {
                // Every ring entry holds a max_write payload buffer.
                let _ = config.set_max_write(crate::uring::MAX_WRITE);
            }
            // The kernel's offer is the most it takes.
            let ra = config.set_max_readahead(u32::MAX).unwrap_or_else(|max| max);
            u.record(offered, negotiated, ra, self.killpriv_v2);
            u.record_direct_writes(self.direct_writes);
        }
        Ok(())
    }

    fn destroy(&mut self) {
        if let Err(e) = self.fs.close() {
            tracing::error!("clean unmount failed: {e}");
        }
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.fs.lookup(self.ino(parent), name.as_bytes()) {
            // A negative entry (node id 0) lets the kernel cache "no such
            // name" too: only this daemon changes the tree, through the kernel.
            Err(Errno::ENOENT) => {
                let none = Attr {
                    ino: 0,
                    size: 0,
                    blocks: 0,
                    atime: Ts::default(),
                    mtime: Ts::default(),
                    ctime: Ts::default(),
                    crtime: Ts::default(),
                    mode: libc::S_IFREG,
                    nlink: 0,
                    uid: 0,
                    gid: 0,
                    rdev: 0,
                    generation: 0,
                };
                let mut attr = self.attr(&none);
                attr.ino = INodeNo(0);
                reply.entry(&TTL, &attr, Generation(0));
            }
            r => self.entry(r, reply),
        }
    }

    // fuser's default `batch_forget` calls this for each node.
    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.fs.forget(self.ino(ino), nlookup);
        self.fs.trim_if_due();
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.fs.getattr(self.ino(ino)) {
            Ok(a) => reply.attr(&TTL, &self.attr(&a)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<std::time::SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<std::time::SystemTime>,
        _chgtime: Option<std::time::SystemTime>,
        _bkuptime: Option<std::time::SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let set = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime: atime.map(set_time),
            mtime: mtime.map(set_time),
            // fuser does not pass FATTR_KILL_SUIDGID on; under KILLPRIV_V2
            // the kernel sets it for callers without CAP_FSETID, which
            // uid 0 stands for here. Without V2 the kernel sends the new
            // mode itself.
            kill_priv: self.killpriv_v2 && size.is_some() && mode.is_none() && req.uid() != 0,
        };
        match self.fs.setattr(self.ino(ino), set) {
            Ok(a) => reply.attr(&TTL, &self.attr(&a)),
            Err(e) => reply.error(errno(e)),
        }
        self.fs.trim_if_due();
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.fs.readlink(self.ino(ino)) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        self.entry(
            self.fs.mknod_umask(
                self.ino(parent),
                name.as_bytes(),
                mode,
                rdev,
                umask,
                caller(req),
            ),
            reply,
        );
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        self.entry(
            self.fs
                .mkdir_umask(self.ino(parent), name.as_bytes(), mode, umask, caller(req)),
            reply,
        );
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        Self::empty(self.fs.unlink(self.ino(parent), name.as_bytes()), reply);
        // After the reply: the caller does not wait for a trim.
        self.fs.trim_if_due();
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        Self::empty(self.fs.rmdir(self.ino(parent), name.as_bytes()), reply);
        self.fs.trim_if_due();
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        self.entry(
            self.fs.symlink(
                self.ino(parent),
                link_name.as_bytes(),
                target.as_os_str().as_bytes(),
                caller(req),
            ),
            reply,
        );
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        Self::empty(
            self.fs.rename(
                self.ino(parent),
                name.as_bytes(),
                self.ino(newparent),
                newname.as_bytes(),
                flags.bits(),
            ),
            reply,
        );
        self.fs.trim_if_due();
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        self.entry(
            self.fs
                .link(self.ino(ino), self.ino(newparent), newname.as_bytes()),
            reply,
        );
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        match self.fs.open(self.ino(ino)) {
            Ok(_) => reply.opened(FileHandle(0), self.open_flags(flags.0 as u32)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock: Option<LockOwner>,
        reply: ReplyData,
    ) {
        match self.fs.read(self.ino(ino), offset, size) {
            Ok(d) => reply.data(&d),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        wf: WriteFlags,
        _flags: OpenFlags,
        _lock: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        // Without KILLPRIV_V2 the kernel itself drops the privileges (a
        // setattr and a removexattr before the write) when it should.
        let kill = self.killpriv_v2 && wf.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID);
        match self.fs.write_as(self.ino(ino), offset, data, kill) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock: LockOwner,
        reply: ReplyEmpty,
    ) {
        // Nothing to do at close: every write is already a finished
        // transaction, and POSIX locks stay in the kernel. ENOSYS tells the
        // kernel so once, and it stops sending FLUSH (a synchronous round
        // trip on every close).
        reply.error(fuser::Errno::ENOSYS);
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        Self::empty(self.fs.release(self.ino(ino)), reply);
        self.fs.trim_if_due();
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        Self::empty(self.fs.fsync(), reply);
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.fs.opendir(self.ino(ino)) {
            Ok(_) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        Self::empty(self.fs.releasedir(self.ino(ino)), reply);
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        match self.fs.readdir(self.ino(ino), offset, 512) {
            Ok(entries) => {
                for e in entries {
                    let kind = kind_of(u32::from(e.kind) << 12);
                    if reply.add(
                        self.fuse_ino(e.ino),
                        e.next,
                        kind,
                        OsStr::from_bytes(&e.name),
                    ) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let dir = self.ino(ino);
        match self.fs.readdir(dir, offset, 256) {
            Ok(entries) => {
                for e in entries {
                    let attr = match self.fs.getattr(e.ino) {
                        Ok(a) => a,
                        Err(_) => continue,
                    };
                    if reply.add(
                        self.fuse_ino(e.ino),
                        e.next,
                        OsStr::from_bytes(&e.name),
                        &TTL,
                        &self.attr(&attr),
                        Generation(attr.generation),
                    ) {
                        break;
                    }
                    // The kernel takes a reference to every entry but `.`
                    // and `..`, and will FORGET it.
                    if e.name != b"." && e.name != b".." {
                        let _ = self.fs.remember(e.ino);
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        Self::empty(self.fs.fsync(), reply);
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let s = self.fs.statfs();
        reply.statfs(
            s.blocks, s.bfree, s.bfree, s.files, s.ffree, s.bsize, s.namelen, s.bsize,
        );
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        Self::empty(
            self.fs
                .setxattr(self.ino(ino), name.as_bytes(), value, flags),
            reply,
        );
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        match self.fs.getxattr(self.ino(ino), name.as_bytes()) {
            Ok(v) if size == 0 => reply.size(v.len() as u32),
            Ok(v) if v.len() <= size as usize => reply.data(&v),
            Ok(_) => reply.error(fuser::Errno::ERANGE),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        match self.fs.listxattr(self.ino(ino)) {
            Ok(v) if size == 0 => reply.size(v.len() as u32),
            Ok(v) if v.len() <= size as usize => reply.data(&v),
            Ok(_) => reply.error(fuser::Errno::ERANGE),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        Self::empty(self.fs.removexattr(self.ino(ino), name.as_bytes()), reply);
    }

    fn lseek(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        // The kernel sends only SEEK_DATA and SEEK_HOLE; it moves the file
        // position itself for the others.
        let what = match whence {
            libc::SEEK_DATA => Seek::Data,
            libc::SEEK_HOLE => Seek::Hole,
            _ => return reply.error(fuser::Errno::EINVAL),
        };
        let Ok(offset) = u64::try_from(offset) else {
            return reply.error(fuser::Errno::ENXIO);
        };
        match self.fs.seek(self.ino(ino), offset, what) {
            Ok(at) => reply.offset(at as i64),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn access(&self, _req: &Request, ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        // The kernel checks permissions (default_permissions); this only
        // says whether the inode exists.
        Self::empty(self.fs.getattr(self.ino(ino)).map(|_| ()), reply);
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        match self
            .fs
            .create_umask(self.ino(parent), name.as_bytes(), mode, umask, caller(req))
        {
            Ok(a) => reply.created(
                &TTL,
                &self.attr(&a),
                Generation(a.generation),
                FileHandle(0),
                self.open_flags(flags as u32),
            ),
            Err(e) => reply.error(errno(e)),
        }
    }

    /// FITRIM (`fstrim DIR`); every other ioctl is ENOTTY.
    fn ioctl(
        &self,
        req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: fuser::IoctlFlags,
        cmd: u32,
        in_data: &[u8],
        _out_size: u32,
        reply: fuser::ReplyIoctl,
    ) {
        match self.fs.ioctl(caller(req), cmd, in_data) {
            Ok(out) => reply.ioctl(0, &out),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        // Under KILLPRIV_V2 the kernel leaves set-id to us and FALLOCATE
        // carries no flag for it: ask about the caller's CAP_FSETID.
        let kill = self.killpriv_v2 && crate::caps::lacks_fsetid(req.pid(), req.uid());
        Self::empty(
            self.fs
                .fallocate_as(self.ino(ino), offset, length, mode, kill),
            reply,
        );
        self.fs.trim_if_due();
    }
}

/// The [`FileSystem::set_attr_invalidator`] of a mount served by
/// `notifier`'s session (either transport: notifications go to /dev/fuse):
/// `NOTIFY_INVAL_INODE` of the attributes only (offset -1 keeps the pages).
pub fn attr_invalidator(
    notifier: fuser::Notifier,
    root: u64,
) -> crate::filesystem::AttrInvalidator {
    Box::new(move |ino| {
        let id = INodeNo(if ino == root { 1 } else { ino });
        if let Err(e) = notifier.inval_inode(id, -1, 0) {
            // ENOENT: the kernel holds no such inode, nothing is stale.
            tracing::debug!("invalidating the attributes of inode {ino}: {e}");
        }
    })
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

pub use crate::readahead::{raise_readahead, READAHEAD_KIB};
