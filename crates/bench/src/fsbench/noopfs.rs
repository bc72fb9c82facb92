// Over 800 lines: one FUSE handler per opcode ptsd-fs answers, kept together so the ceiling's replies can be read against ptsd-fs's.
//! A minimal in-memory FUSE file system that does no real work: the FUSE
//! ceiling of the machine, for comparison with ptsd-fs.
//!
//! A ceiling must ask the kernel for the same things ptsd-fs does, or the
//! two get different requests and "ptsd / no-op" measures the difference:
//! it mounts with ptsd-fs's own `mount_config` (noatime,
//! default_permissions, threads, cloned fds), asks for the same INIT
//! capabilities ([`INIT_FLAGS`]: READDIRPLUS, PARALLEL_DIROPS, ASYNC_DIO,
//! HANDLE_KILLPRIV_V2), caches negative entries, answers FLUSH with ENOSYS
//! (the kernel then stops sending it), getxattr with ENODATA, and opens
//! with ptsd-fs's default flags (`FOPEN_KEEP_CACHE`, and `FOPEN_DIRECT_IO`
//! for write-only opens: [`open_reply_flags`]), all as ptsd-fs does. Its state is sharded by
//! inode (no global lock) and every reply is sent after the shard lock is
//! released, so one slow reply never holds up another thread.
//!
//! Inodes, directories and file bytes live in memory; `fsync` and
//! `fsyncdir` reply at once. It serves enough of POSIX for the
//! [`fsbench`](super) workloads (and `ls`, `cat`, `rm -r`): lookup,
//! getattr, setattr, mkdir, create, open, read, write, unlink, rmdir,
//! rename, readdir(plus), statfs, xattr reads.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use fuser::{
    AccessFlags, BackgroundSession, Config, Errno, FileAttr, FileHandle, FileType, FopenFlags,
    Generation, INodeNo, KernelConfig, LockOwner, MountOption, OpenFlags, RenameFlags, ReplyAttr,
    ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen,
    ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use parking_lot::{Mutex, MutexGuard};
use ptsd_fs::fuse::{
    direct_writes_coherent, mount_config as ptsd_mount_config, open_reply_flags, raise_readahead,
    MountOpts, INIT_FLAGS, TTL,
};
use ptsd_fs::opcount::{Counted, OpCounts};
use ptsd_fs::uring::UringInit;

use super::{FsBenchError, Result};

mod uring;

/// Inode shards: enough that 2..16 FUSE threads rarely meet on one lock.
const SHARDS: usize = 64;

/// How the no-op file system is served.
#[derive(Clone, Debug)]
pub struct NoopOptions {
    /// FUSE worker threads (fuser's `n_threads`, each with a cloned fd).
    /// Default: ptsd-fs's default (1 per CPU, 2..16).
    pub threads: usize,
    /// Ask for the kernel's writeback cache (ptsd-fs does not; off by
    /// default).
    pub writeback_cache: bool,
    /// Count requests per opcode into this file (see
    /// [`ptsd_fs::opcount`]).
    pub op_counts: Option<PathBuf>,
    /// Serve over FUSE io_uring where the kernel offers it, as ptsd-fs
    /// does (`ptsd bench noop-mount --uring`; the in-process mount
    /// ignores it).
    pub uring: bool,
}

impl Default for NoopOptions {
    fn default() -> Self {
        NoopOptions {
            threads: MountOpts::default().threads,
            writeback_cache: false,
            op_counts: None,
            uring: false,
        }
    }
}

#[derive(Clone)]
struct Node {
    attr: FileAttr,
    content: Content,
}

#[derive(Clone)]
enum Content {
    File(Vec<u8>),
    Dir { parent: u64, entries: Entries },
}

/// A directory's entries: name -> (inode, kind) (the kind is here so that
/// unlink and rmdir check it without locking the child's shard), each with
/// a readdir cookie that stays valid while other entries come and go (a
/// position would shift under `rm -r`'s read-while-deleting).
#[derive(Clone)]
struct Entries {
    by_name: HashMap<OsString, (u64, FileType, u64)>,
    by_cookie: BTreeMap<u64, OsString>,
    next_cookie: u64,
}

impl Entries {
    /// Cookies 1 and 2 are `.` and `..`.
    fn new() -> Self {
        Entries {
            by_name: HashMap::new(),
            by_cookie: BTreeMap::new(),
            next_cookie: 3,
        }
    }

    fn get(&self, name: &OsStr) -> Option<(u64, FileType)> {
        self.by_name.get(name).map(|&(i, k, _)| (i, k))
    }

    fn contains_key(&self, name: &OsStr) -> bool {
        self.by_name.contains_key(name)
    }

    fn insert(&mut self, name: OsString, (ino, kind): (u64, FileType)) {
        let cookie = self.next_cookie;
        self.next_cookie += 1;
        if let Some((_, _, old)) = self.by_name.insert(name.clone(), (ino, kind, cookie)) {
            self.by_cookie.remove(&old);
        }
        self.by_cookie.insert(cookie, name);
    }

    fn remove(&mut self, name: &OsStr) -> Option<(u64, FileType)> {
        let (ino, kind, cookie) = self.by_name.remove(name)?;
        self.by_cookie.remove(&cookie);
        Some((ino, kind))
    }

    fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }
}

type Shard = HashMap<u64, Node>;

/// The in-memory file system; mount it with [`NoopMount::mount`] or
/// [`serve`].
///
/// A clone shares the state: fuser's session and the io_uring queues serve
/// one file system.
#[derive(Clone)]
pub struct NoopFs {
    shards: Arc<[Mutex<Shard>]>,
    next_ino: Arc<AtomicU64>,
    nodes: Arc<AtomicU64>,
    /// Renames change two directories in steps; they take this first, so
    /// two renames never interleave (the workloads do not rename).
    tree_lock: Arc<Mutex<()>>,
    options: NoopOptions,
    /// INIT's io_uring outcome when `options.uring`.
    uring_init: Arc<UringInit>,
}

fn new_attr(kind: FileType, perm: u16, (uid, gid): (u32, u32)) -> FileAttr {
    let now = SystemTime::now();
    FileAttr {
        ino: INodeNo(0),
        size: 0,
        blocks: 0,
        atime: now,
        mtime: now,
        ctime: now,
        crtime: now,
        kind,
        perm,
        nlink: if kind == FileType::Directory { 2 } else { 1 },
        uid,
        gid,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

/// The entry ptsd-fs returns for a missing name: node id 0, which the
/// kernel caches as "no such name" for the TTL.
fn negative_entry() -> FileAttr {
    FileAttr {
        ino: INodeNo(0),
        size: 0,
        blocks: 0,
        atime: SystemTime::UNIX_EPOCH,
        mtime: SystemTime::UNIX_EPOCH,
        ctime: SystemTime::UNIX_EPOCH,
        crtime: SystemTime::UNIX_EPOCH,
        kind: FileType::RegularFile,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

fn set_size(attr: &mut FileAttr, size: u64) {
    attr.size = size;
    attr.blocks = size.div_ceil(512);
}

fn touch(attr: &mut FileAttr) {
    attr.mtime = SystemTime::now();
    attr.ctime = attr.mtime;
}

impl NoopFs {
    /// An empty file system with a root directory owned by the caller.
    pub fn new(options: NoopOptions) -> Self {
        let now = SystemTime::now();
        // SAFETY: getuid/getgid have no preconditions and cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let root = Node {
            attr: FileAttr {
                ino: INodeNo::ROOT,
                size: 0,
                blocks: 0,
                atime: now,
                mtime: now,
                ctime: now,
                crtime: now,
                kind: FileType::Directory,
                perm: 0o755,
                nlink: 2,
                uid,
                gid,
                rdev: 0,
                blksize: 4096,
                flags: 0,
            },
            content: Content::Dir {
                parent: INodeNo::ROOT.0,
                entries: Entries::new(),
            },
        };
        let shards: Arc<[Mutex<Shard>]> = (0..SHARDS).map(|_| Mutex::default()).collect();
        shards[INodeNo::ROOT.0 as usize % SHARDS]
            .lock()
            .insert(INodeNo::ROOT.0, root);
        NoopFs {
            shards,
            next_ino: Arc::new(AtomicU64::new(INodeNo::ROOT.0 + 1)),
            nodes: Arc::new(AtomicU64::new(1)),
            tree_lock: Arc::new(Mutex::new(())),
            uring_init: Arc::new(UringInit::new(options.uring)),
            options,
        }
    }

    fn shard(&self, ino: u64) -> MutexGuard<'_, Shard> {
        self.shards[ino as usize % SHARDS].lock()
    }

    /// A copy of `ino`'s attributes (the lock is released on return).
    fn attr(&self, ino: u64) -> std::result::Result<FileAttr, Errno> {
        self.shard(ino)
            .get(&ino)
            .map(|n| n.attr)
            .ok_or(Errno::ENOENT)
    }

    fn child(&self, parent: u64, name: &OsStr) -> std::result::Result<(u64, FileType), Errno> {
        match self.shard(parent).get(&parent).map(|n| &n.content) {
            Some(Content::Dir { entries, .. }) => entries.get(name).ok_or(Errno::ENOENT),
            Some(Content::File(_)) => Err(Errno::ENOTDIR),
            None => Err(Errno::ENOENT),
        }
    }

    /// Adds a new node under `parent`: the node first (nobody knows its
    /// number yet), then the name, so a lookup that finds the name finds
    /// the node.
    fn insert(
        &self,
        parent: u64,
        name: &OsStr,
        mut attr: FileAttr,
        content: Content,
    ) -> std::result::Result<FileAttr, Errno> {
        if name.len() > 255 {
            return Err(Errno::ENAMETOOLONG);
        }
        let ino = self.next_ino.fetch_add(1, Ordering::Relaxed);
        attr.ino = INodeNo(ino);
        let kind = attr.kind;
        self.shard(ino).insert(ino, Node { attr, content });
        let linked = {
            let mut shard = self.shard(parent);
            match shard.get_mut(&parent) {
                Some(Node {
                    attr: pattr,
                    content: Content::Dir { entries, .. },
                }) => {
                    if entries.contains_key(name) {
                        Err(Errno::EEXIST)
                    } else {
                        entries.insert(name.to_owned(), (ino, kind));
                        touch(pattr);
                        if kind == FileType::Directory {
                            pattr.nlink += 1;
                        }
                        Ok(())
                    }
                }
                Some(_) => Err(Errno::ENOTDIR),
                None => Err(Errno::ENOENT),
            }
        };
        match linked {
            Ok(()) => {
                self.nodes.fetch_add(1, Ordering::Relaxed);
                Ok(attr)
            }
            Err(e) => {
                self.shard(ino).remove(&ino);
                Err(e)
            }
        }
    }

    /// Removes `name` from `parent` (rmdir semantics when `want_dir`) and
    /// frees its node.
    fn remove(&self, parent: u64, name: &OsStr, want_dir: bool) -> std::result::Result<(), Errno> {
        let (ino, kind) = self.child(parent, name)?;
        match (kind == FileType::Directory, want_dir) {
            (true, false) => return Err(Errno::EISDIR),
            (false, true) => return Err(Errno::ENOTDIR),
            _ => {}
        }
        if want_dir {
            // The child must be seen empty and unlinked with no create into
            // it in between: hold both shards (in index order; one lock
            // when they are the same shard).
            let (pi, ci) = (parent as usize % SHARDS, ino as usize % SHARDS);
            let is_empty = |s: &Shard| match s.get(&ino).map(|n| &n.content) {
                Some(Content::Dir { entries, .. }) => entries.is_empty(),
                _ => true,
            };
            if pi == ci {
                let mut s = self.shards[pi].lock();
                if !is_empty(&s) {
                    return Err(Errno::ENOTEMPTY);
                }
                unlink_in(&mut s, parent, name, ino, true)?;
                s.remove(&ino);
            } else {
                let (first, second) = (
                    self.shards[pi.min(ci)].lock(),
                    self.shards[pi.max(ci)].lock(),
                );
                let (mut ps, mut cs) = if pi < ci {
                    (first, second)
                } else {
                    (second, first)
                };
                if !is_empty(&cs) {
                    return Err(Errno::ENOTEMPTY);
                }
                unlink_in(&mut ps, parent, name, ino, true)?;
                cs.remove(&ino);
            }
        } else {
            unlink_in(&mut self.shard(parent), parent, name, ino, false)?;
            self.shard(ino).remove(&ino);
        }
        self.nodes.fetch_sub(1, Ordering::Relaxed);
        Ok(())
    }

    /// As ptsd-fs answers (direct write-only opens where the kernel keeps
    /// readers coherent).
    fn open_flags(&self, open_flags: u32) -> u32 {
        open_reply_flags(open_flags, self.uring_init.direct_writes())
    }

    /// Up to `max` entries of `dir` from readdir offset `offset` (0, or a
    /// `next` returned before), `.` and `..` first, each with its `next`.
    #[allow(clippy::type_complexity)]
    fn list(
        &self,
        dir: u64,
        offset: u64,
        max: usize,
    ) -> std::result::Result<Vec<(u64, FileType, OsString, u64)>, Errno> {
        let shard = self.shard(dir);
        let Some(Content::Dir { parent, entries }) = shard.get(&dir).map(|n| &n.content) else {
            return Err(Errno::ENOTDIR);
        };
        let dots = [
            (dir, FileType::Directory, OsString::from("."), 1),
            (*parent, FileType::Directory, OsString::from(".."), 2),
        ];
        let rest = entries.by_cookie.range(offset.max(2)..).map(|(&c, name)| {
            let (ino, kind) = entries.get(name).expect("both maps hold every entry");
            (ino, kind, name.clone(), c + 1)
        });
        Ok(dots
            .into_iter()
            .filter(|d| d.3 > offset)
            .chain(rest)
            .take(max)
            .collect())
    }
}

/// Removes `name` (naming `ino`) from directory `parent` in its shard.
fn unlink_in(
    shard: &mut Shard,
    parent: u64,
    name: &OsStr,
    ino: u64,
    was_dir: bool,
) -> std::result::Result<(), Errno> {
    match shard.get_mut(&parent) {
        Some(Node {
            attr,
            content: Content::Dir { entries, .. },
        }) => {
            // Gone or replaced since the caller looked it up: not ours.
            if entries.get(name).map(|e| e.0) != Some(ino) {
                return Err(Errno::ENOENT);
            }
            entries.remove(name);
            touch(attr);
            if was_dir {
                attr.nlink -= 1;
            }
            Ok(())
        }
        Some(_) => Err(Errno::ENOTDIR),
        None => Err(Errno::ENOENT),
    }
}

impl fuser::Filesystem for NoopFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let mut want = INIT_FLAGS;
        if self.options.writeback_cache {
            want |= fuser::InitFlags::FUSE_WRITEBACK_CACHE;
        }
        // Only what the kernel offers (an old kernel just runs without).
        let _ = config.add_capabilities(want & config.capabilities());
        let u = &self.uring_init;
        let offered = config
            .capabilities()
            .contains(fuser::InitFlags::FUSE_OVER_IO_URING);
        let negotiated = u.wanted()
            && offered
            && config
                .add_capabilities(fuser::InitFlags::FUSE_OVER_IO_URING)
                .is_ok();
        if negotiated {
            // As ptsd-fs: each ring entry holds a max_write buffer.
            let _ = config.set_max_write(ptsd_fs::uring::MAX_WRITE);
        }
        let ra = config.set_max_readahead(u32::MAX).unwrap_or_else(|max| max);
        u.record(offered, negotiated, ra, true);
        u.record_direct_writes(direct_writes_coherent(config.capabilities()));
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self
            .child(parent.0, name)
            .and_then(|(ino, _)| self.attr(ino))
        {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(Errno::ENOENT) => reply.entry(&TTL, &negative_entry(), Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.attr(ino.0) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let result = self.set_attr(ino.0, mode, uid, gid, size, atime, mtime);
        match result {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
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
        let attr = new_attr(
            FileType::Directory,
            (mode & !umask & 0o7777) as u16,
            (req.uid(), req.gid()),
        );
        let content = Content::Dir {
            parent: parent.0,
            entries: Entries::new(),
        };
        match self.insert(parent.0, name, attr, content) {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.remove(parent.0, name, false) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.remove(parent.0, name, true) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
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
        if !flags.is_empty() {
            // The workloads never ask for NOREPLACE/EXCHANGE.
            return reply.error(Errno::EINVAL);
        }
        let result = self.rename_entry(parent.0, name, newparent.0, newname);
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        match self.attr(ino.0).map(|a| a.kind) {
            Ok(FileType::Directory) => reply.error(Errno::EISDIR),
            Ok(_) => reply.opened(
                FileHandle(0),
                FopenFlags::from_bits_retain(self.open_flags(flags.0 as u32)),
            ),
            Err(e) => reply.error(e),
        }
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
        let attr = new_attr(
            FileType::RegularFile,
            (mode & !umask & 0o7777) as u16,
            (req.uid(), req.gid()),
        );
        match self.insert(parent.0, name, attr, Content::File(Vec::new())) {
            Ok(attr) => reply.created(
                &TTL,
                &attr,
                Generation(0),
                FileHandle(0),
                FopenFlags::from_bits_retain(self.open_flags(flags as u32)),
            ),
            Err(e) => reply.error(e),
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
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let result = self.read_at(ino.0, offset, size);
        match result {
            Ok(bytes) => reply.data(&bytes),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let result = self.write_at(ino.0, offset, data);
        match result {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // ptsd-fs's answer: nothing to do at close; the kernel stops asking.
        reply.error(Errno::ENOSYS);
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.attr(ino.0).map(|a| a.kind) {
            Ok(FileType::Directory) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Ok(_) => reply.error(Errno::ENOTDIR),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        match self.list(ino.0, offset, 512) {
            Ok(entries) => {
                for (child, kind, name, next) in &entries {
                    if reply.add(INodeNo(*child), *next, *kind, name) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(e),
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
        match self.list(ino.0, offset, 256) {
            Ok(entries) => {
                for (child, _, name, next) in &entries {
                    let Ok(attr) = self.attr(*child) else {
                        continue;
                    };
                    if reply.add(INodeNo(*child), *next, name, &TTL, &attr, Generation(0)) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(e),
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
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let files = self.nodes.load(Ordering::Relaxed);
        // Reports a large, mostly free device so df and space checks pass.
        reply.statfs(
            1 << 30,
            1 << 29,
            1 << 29,
            files + (1 << 24),
            1 << 24,
            4096,
            255,
            4096,
        );
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, _name: &OsStr, _size: u32, reply: ReplyXattr) {
        // No xattrs here; ptsd-fs answers a file without them the same way
        // (the kernel asks for security.capability before writes unless
        // KILLPRIV_V2 marked the inode S_NOSEC).
        match self.attr(ino.0) {
            Ok(_) => reply.error(Errno::ENODATA),
            Err(e) => reply.error(e),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        match self.attr(ino.0) {
            Ok(_) if size == 0 => reply.size(0),
            Ok(_) => reply.data(&[]),
            Err(e) => reply.error(e),
        }
    }

    fn access(&self, _req: &Request, ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        // As ptsd-fs: the kernel checks permissions (default_permissions);
        // this says whether the inode exists.
        match self.attr(ino.0) {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }
}

impl NoopFs {
    /// SETATTR: the changes asked for, the attributes after.
    #[allow(clippy::too_many_arguments)]
    fn set_attr(
        &self,
        ino: u64,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
    ) -> std::result::Result<FileAttr, Errno> {
        {
            let mut shard = self.shard(ino);
            match shard.get_mut(&ino) {
                None => Err(Errno::ENOENT),
                Some(node) => {
                    let now = SystemTime::now();
                    let resolve = |t: TimeOrNow| match t {
                        TimeOrNow::SpecificTime(t) => t,
                        TimeOrNow::Now => now,
                    };
                    let mut r = Ok(());
                    if let Some(size) = size {
                        match &mut node.content {
                            Content::File(data) => {
                                data.resize(usize::try_from(size).unwrap_or(usize::MAX), 0);
                                set_size(&mut node.attr, size);
                                node.attr.mtime = now;
                            }
                            Content::Dir { .. } => r = Err(Errno::EISDIR),
                        }
                    }
                    r.map(|()| {
                        if let Some(mode) = mode {
                            node.attr.perm = (mode & 0o7777) as u16;
                        }
                        node.attr.uid = uid.unwrap_or(node.attr.uid);
                        node.attr.gid = gid.unwrap_or(node.attr.gid);
                        if let Some(t) = atime {
                            node.attr.atime = resolve(t);
                        }
                        if let Some(t) = mtime {
                            node.attr.mtime = resolve(t);
                        }
                        node.attr.ctime = now;
                        node.attr
                    })
                }
            }
        }
    }

    /// READ: up to `size` bytes at `offset`.
    fn read_at(&self, ino: u64, offset: u64, size: u32) -> std::result::Result<Vec<u8>, Errno> {
        match self.shard(ino).get(&ino).map(|n| &n.content) {
            Some(Content::File(data)) => {
                let start = usize::try_from(offset)
                    .unwrap_or(usize::MAX)
                    .min(data.len());
                let end = start.saturating_add(size as usize).min(data.len());
                Ok(data[start..end].to_vec())
            }
            Some(Content::Dir { .. }) => Err(Errno::EISDIR),
            None => Err(Errno::ENOENT),
        }
    }

    /// WRITE: `data` at `offset`; the bytes written.
    fn write_at(&self, ino: u64, offset: u64, data: &[u8]) -> std::result::Result<u32, Errno> {
        {
            let mut shard = self.shard(ino);
            match shard.get_mut(&ino) {
                None => Err(Errno::ENOENT),
                Some(Node {
                    content: Content::Dir { .. },
                    ..
                }) => Err(Errno::EISDIR),
                Some(Node {
                    attr,
                    content: Content::File(bytes),
                }) => match usize::try_from(offset)
                    .ok()
                    .and_then(|o| o.checked_add(data.len()))
                {
                    None => Err(Errno::EFBIG),
                    Some(end) => {
                        if bytes.len() < end {
                            bytes.resize(end, 0);
                        }
                        bytes[end - data.len()..end].copy_from_slice(data);
                        set_size(attr, bytes.len() as u64);
                        touch(attr);
                        Ok(data.len() as u32)
                    }
                },
            }
        }
    }

    /// RENAME (no flags): `name` in `parent` becomes `newname` in
    /// `newparent`, replacing what was there.
    fn rename_entry(
        &self,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
    ) -> std::result::Result<(), Errno> {
        let _tree = self.tree_lock.lock();
        let (ino, kind) = self.child(parent, name)?;
        if let Ok((target, tkind)) = self.child(newparent, newname) {
            if target == ino {
                return Ok(());
            }
            self.remove(newparent, newname, tkind == FileType::Directory)?;
            return self.move_entry(parent, name, newparent, newname, ino, kind);
        }
        self.move_entry(parent, name, newparent, newname, ino, kind)
    }

    /// Moves the entry `name` of `parent` (inode `ino`) to `newname` in
    /// `newparent` (which has no such name now).
    fn move_entry(
        &self,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        ino: u64,
        kind: FileType,
    ) -> std::result::Result<(), Errno> {
        let is_dir = kind == FileType::Directory;
        {
            let mut shard = self.shard(newparent);
            match shard.get_mut(&newparent) {
                Some(Node {
                    attr,
                    content: Content::Dir { entries, .. },
                }) => {
                    entries.insert(newname.to_owned(), (ino, kind));
                    touch(attr);
                    if is_dir && parent != newparent {
                        attr.nlink += 1;
                    }
                }
                Some(_) => return Err(Errno::ENOTDIR),
                None => return Err(Errno::ENOENT),
            }
        }
        {
            let mut shard = self.shard(parent);
            if let Some(Node {
                attr,
                content: Content::Dir { entries, .. },
            }) = shard.get_mut(&parent)
            {
                entries.remove(name);
                touch(attr);
                if is_dir && parent != newparent {
                    attr.nlink -= 1;
                }
            }
        }
        if is_dir && parent != newparent {
            if let Some(Node {
                content: Content::Dir { parent: p, .. },
                ..
            }) = self.shard(ino).get_mut(&ino)
            {
                *p = newparent;
            }
        }
        Ok(())
    }
}

/// A mounted [`NoopFs`]; dropping it unmounts.
pub struct NoopMount {
    session: Option<BackgroundSession>,
    dir: PathBuf,
}

fn mount_config(options: &NoopOptions) -> Config {
    let mut config = ptsd_mount_config(&MountOpts {
        threads: options.threads,
        fsname: "ptsd-bench-noop".into(),
        ..MountOpts::default()
    });
    // Same options as ptsd-fs but the subtype, so the two are told apart.
    for o in &mut config.mount_options {
        if let MountOption::Subtype(s) = o {
            *s = "noop".into();
        }
    }
    config
}

fn check(options: &NoopOptions) -> Result<Option<Arc<OpCounts>>> {
    if options.threads == 0 {
        return Err(FsBenchError::Config(
            "the no-op FUSE fs needs at least one thread".into(),
        ));
    }
    options
        .op_counts
        .as_deref()
        .map(OpCounts::create)
        .transpose()
        .map_err(|e| FsBenchError::Config(e.to_string()))
}

/// Serves a fresh [`NoopFs`] on `dir` in this process until it is
/// unmounted (`umount DIR`): the no-op fs as a daemon process of its own,
/// like any real FUSE file system (`ptsd bench noop-mount`, which the
/// `noop` target of `ptsd bench fs` spawns).
pub fn serve(dir: &Path, options: NoopOptions) -> Result<()> {
    let counts = check(&options)?;
    let mut config = mount_config(&options);
    let (want_uring, threads) = (options.uring, options.threads);
    if want_uring {
        // As ptsd-fs: /dev/fuse keeps only FORGET, INTERRUPT and what
        // comes before the queues are ready.
        config.n_threads = Some(2);
    }
    let noop = NoopFs::new(options);
    let fs = Counted::new(noop.clone(), counts.clone());
    let err = |e: std::io::Error| FsBenchError::Mount {
        path: dir.to_path_buf(),
        detail: format!("serving the no-op fs: {e}"),
    };
    let session = fuser::Session::new(fs, dir, &config).map_err(err)?;
    let rings = if noop.uring_init.negotiated() {
        let dev = session.as_fd().try_clone_to_owned().map_err(err)?;
        let queues = ptsd_fs::uring::possible_cpus();
        let cfg = ptsd_fs::uring::RingConfig {
            // The same split as a ptsd-fs mount: its FUSE threads per queue.
            threads_per_queue: (threads / queues).max(1),
            poll: None,
            payload: noop.uring_init.payload_bytes(),
        };
        Some(
            ptsd_fs::uring::start(dev, Arc::new(uring::Ring::new(noop, counts)), &cfg)
                .map_err(err)?,
        )
    } else {
        if want_uring {
            eprintln!(
                "no-op fs: FUSE over io_uring: {}; serving /dev/fuse",
                ptsd_fs::uring::Availability::probe().reason()
            );
        }
        None
    };
    // The same read-ahead window as a ptsd-fs mount (like with like).
    raise_readahead(dir);
    let res = session.run().map_err(err);
    if let Some(r) = rings {
        r.join();
    }
    res
}

impl NoopMount {
    /// Mounts a fresh [`NoopFs`] on `dir` (an existing empty directory).
    /// Needs root (fuser mounts with mount(2), no fusermount) and /dev/fuse.
    pub fn mount(dir: &Path, options: NoopOptions) -> Result<Self> {
        let counts = check(&options)?;
        let config = mount_config(&options);
        let fs = Counted::new(NoopFs::new(options), counts);
        let session = fuser::spawn_mount(fs, dir, &config).map_err(|e| FsBenchError::Mount {
            path: dir.to_path_buf(),
            detail: format!("fuse mount of the no-op fs failed: {e}"),
        })?;
        raise_readahead(dir);
        Ok(NoopMount {
            session: Some(session),
            dir: dir.to_path_buf(),
        })
    }

    /// The mount point.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Unmounts and waits for the FUSE threads to end.
    pub fn unmount(mut self) -> Result<()> {
        match self.session.take() {
            Some(s) => s.umount_and_join().map_err(|e| FsBenchError::Mount {
                path: self.dir.clone(),
                detail: format!("unmount failed: {e}"),
            }),
            None => Ok(()),
        }
    }
}

impl Drop for NoopMount {
    fn drop(&mut self) {
        // BackgroundSession unmounts when dropped.
        drop(self.session.take());
    }
}
