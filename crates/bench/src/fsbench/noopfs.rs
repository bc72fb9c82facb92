//! A minimal in-memory FUSE file system that does no real work: the FUSE
//! ceiling of the machine.
//!
//! Inodes, directories and file bytes live in one map in memory; `fsync`,
//! `flush` and `fsyncdir` reply at once. It serves enough of POSIX for the
//! [`fsbench`](super) workloads (and `ls`, `cat`, `rm -r`): lookup, getattr,
//! setattr, mkdir, create, open, read, write, unlink, rmdir, rename,
//! readdir, statfs. Its throughput is what a FUSE file system on this
//! machine cannot beat, whatever it does inside.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use fuser::{
    BackgroundSession, Config, Errno, FileAttr, FileHandle, FileType, FopenFlags, Generation,
    INodeNo, InitFlags, KernelConfig, LockOwner, MountOption, OpenFlags, RenameFlags, ReplyAttr,
    ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs,
    ReplyWrite, Request, TimeOrNow, WriteFlags,
};
use parking_lot::Mutex;

use super::{FsBenchError, Result};

/// How the no-op file system talks to the kernel.
#[derive(Clone, Debug)]
pub struct NoopOptions {
    /// FUSE worker threads (fuser's `n_threads`, each with a cloned fd;
    /// default 4, ptsd-fs's default on 2 CPUs).
    pub threads: usize,
    /// How long the kernel may cache attributes and names (default 5 s,
    /// as ptsd-fs).
    pub ttl: Duration,
    /// Reply to open/create with `FOPEN_KEEP_CACHE`, so the page cache
    /// survives a reopen (ptsd-fs does the same; without it every open
    /// drops the file's cached pages and reads go to the daemon).
    pub keep_cache: bool,
    /// Ask for the kernel's writeback cache (writes buffered in the page
    /// cache, sent on flush/fsync/writeback).
    pub writeback_cache: bool,
    /// Mount with `default_permissions` (the kernel checks permissions
    /// from cached attributes), as ptsd-fs does. Like ptsd-fs, the no-op fs
    /// then answers the GETATTR the kernel sends for a directory whose
    /// attributes a create or unlink made stale.
    pub default_permissions: bool,
    /// Answer FLUSH with ENOSYS, so the kernel stops sending it (as
    /// ptsd-fs does). Off by default: a file system that has anything to do
    /// at close must answer it.
    pub flush_enosys: bool,
}

impl Default for NoopOptions {
    fn default() -> Self {
        NoopOptions {
            threads: 4,
            ttl: Duration::from_secs(5),
            keep_cache: true,
            writeback_cache: false,
            default_permissions: true,
            flush_enosys: false,
        }
    }
}

struct Node {
    attr: FileAttr,
    content: Content,
}

enum Content {
    File(Vec<u8>),
    Dir {
        parent: u64,
        entries: BTreeMap<OsString, u64>,
    },
}

struct Tree {
    nodes: HashMap<u64, Node>,
    next_ino: u64,
}

/// The in-memory file system; mount it with [`NoopMount::mount`].
pub struct NoopFs {
    tree: Mutex<Tree>,
    options: NoopOptions,
}

fn new_attr(ino: u64, kind: FileType, perm: u16, req: &Request) -> FileAttr {
    let now = SystemTime::now();
    FileAttr {
        ino: INodeNo(ino),
        size: 0,
        blocks: 0,
        atime: now,
        mtime: now,
        ctime: now,
        crtime: now,
        kind,
        perm,
        nlink: if kind == FileType::Directory { 2 } else { 1 },
        uid: req.uid(),
        gid: req.gid(),
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

fn set_size(attr: &mut FileAttr, size: u64) {
    attr.size = size;
    attr.blocks = size.div_ceil(512);
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
                entries: BTreeMap::new(),
            },
        };
        let mut nodes = HashMap::new();
        nodes.insert(INodeNo::ROOT.0, root);
        NoopFs {
            tree: Mutex::new(Tree {
                nodes,
                next_ino: INodeNo::ROOT.0 + 1,
            }),
            options,
        }
    }
}

impl NoopFs {
    fn open_flags(&self) -> FopenFlags {
        if self.options.keep_cache {
            FopenFlags::FOPEN_KEEP_CACHE
        } else {
            FopenFlags::empty()
        }
    }
}

impl Tree {
    fn child(&self, parent: u64, name: &OsStr) -> std::result::Result<u64, Errno> {
        match self.nodes.get(&parent).map(|n| &n.content) {
            Some(Content::Dir { entries, .. }) => entries.get(name).copied().ok_or(Errno::ENOENT),
            Some(Content::File(_)) => Err(Errno::ENOTDIR),
            None => Err(Errno::ENOENT),
        }
    }

    fn entries_mut(
        &mut self,
        dir: u64,
    ) -> std::result::Result<&mut BTreeMap<OsString, u64>, Errno> {
        match self.nodes.get_mut(&dir).map(|n| &mut n.content) {
            Some(Content::Dir { entries, .. }) => Ok(entries),
            Some(Content::File(_)) => Err(Errno::ENOTDIR),
            None => Err(Errno::ENOENT),
        }
    }

    fn insert(
        &mut self,
        parent: u64,
        name: &OsStr,
        mut attr: FileAttr,
        content: Content,
    ) -> std::result::Result<FileAttr, Errno> {
        if name.len() > 255 {
            return Err(Errno::ENAMETOOLONG);
        }
        let ino = self.next_ino;
        let is_dir = matches!(content, Content::Dir { .. });
        let entries = self.entries_mut(parent)?;
        if entries.contains_key(name) {
            return Err(Errno::EEXIST);
        }
        entries.insert(name.to_owned(), ino);
        self.next_ino += 1;
        attr.ino = INodeNo(ino);
        self.nodes.insert(ino, Node { attr, content });
        let parent_attr = &mut self
            .nodes
            .get_mut(&parent)
            .expect("parent checked above")
            .attr;
        parent_attr.mtime = SystemTime::now();
        parent_attr.ctime = parent_attr.mtime;
        if is_dir {
            parent_attr.nlink += 1;
        }
        Ok(attr)
    }

    /// Removes `name` from `parent`; `want_dir` selects rmdir semantics.
    fn remove(
        &mut self,
        parent: u64,
        name: &OsStr,
        want_dir: bool,
    ) -> std::result::Result<(), Errno> {
        let ino = self.child(parent, name)?;
        let node = self.nodes.get(&ino).ok_or(Errno::ENOENT)?;
        match (&node.content, want_dir) {
            (Content::Dir { entries, .. }, true) if !entries.is_empty() => {
                return Err(Errno::ENOTEMPTY)
            }
            (Content::Dir { .. }, false) => return Err(Errno::EISDIR),
            (Content::File(_), true) => return Err(Errno::ENOTDIR),
            _ => {}
        }
        self.entries_mut(parent)?.remove(name);
        self.nodes.remove(&ino);
        if want_dir {
            if let Some(p) = self.nodes.get_mut(&parent) {
                p.attr.nlink -= 1;
            }
        }
        Ok(())
    }
}

impl fuser::Filesystem for NoopFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        if self.options.writeback_cache {
            // An old kernel without it just runs write-through.
            let _ = config.add_capabilities(InitFlags::FUSE_WRITEBACK_CACHE);
        }
        let _ = config.add_capabilities(InitFlags::FUSE_PARALLEL_DIROPS);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let tree = self.tree.lock();
        match tree.child(parent.0, name) {
            Ok(ino) => reply.entry(&self.options.ttl, &tree.nodes[&ino].attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.tree.lock().nodes.get(&ino.0) {
            Some(n) => reply.attr(&self.options.ttl, &n.attr),
            None => reply.error(Errno::ENOENT),
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
        let mut tree = self.tree.lock();
        let Some(node) = tree.nodes.get_mut(&ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        let now = SystemTime::now();
        let resolve = |t: TimeOrNow| match t {
            TimeOrNow::SpecificTime(t) => t,
            TimeOrNow::Now => now,
        };
        if let Some(size) = size {
            let Content::File(data) = &mut node.content else {
                return reply.error(Errno::EISDIR);
            };
            data.resize(usize::try_from(size).unwrap_or(usize::MAX), 0);
            set_size(&mut node.attr, size);
            node.attr.mtime = now;
        }
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
        reply.attr(&self.options.ttl, &node.attr);
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
        let attr = new_attr(0, FileType::Directory, (mode & !umask & 0o7777) as u16, req);
        let content = Content::Dir {
            parent: parent.0,
            entries: BTreeMap::new(),
        };
        match self.tree.lock().insert(parent.0, name, attr, content) {
            Ok(attr) => reply.entry(&self.options.ttl, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.tree.lock().remove(parent.0, name, false) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.tree.lock().remove(parent.0, name, true) {
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
        let mut tree = self.tree.lock();
        let ino = match tree.child(parent.0, name) {
            Ok(ino) => ino,
            Err(e) => return reply.error(e),
        };
        if let Ok(target) = tree.child(newparent.0, newname) {
            if target == ino {
                return reply.ok();
            }
            let want_dir = matches!(tree.nodes[&target].content, Content::Dir { .. });
            if let Err(e) = tree.remove(newparent.0, newname, want_dir) {
                return reply.error(e);
            }
        }
        let moved_dir = matches!(tree.nodes[&ino].content, Content::Dir { .. });
        let inserted = tree
            .entries_mut(newparent.0)
            .map(|e| e.insert(newname.to_owned(), ino));
        if let Err(e) = inserted {
            return reply.error(e);
        }
        if let Ok(entries) = tree.entries_mut(parent.0) {
            entries.remove(name);
        }
        if moved_dir && parent != newparent {
            if let Some(Content::Dir { parent: p, .. }) =
                tree.nodes.get_mut(&ino).map(|n| &mut n.content)
            {
                *p = newparent.0;
            }
            if let Some(n) = tree.nodes.get_mut(&parent.0) {
                n.attr.nlink -= 1;
            }
            if let Some(n) = tree.nodes.get_mut(&newparent.0) {
                n.attr.nlink += 1;
            }
        }
        reply.ok();
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.tree.lock().nodes.get(&ino.0).map(|n| &n.content) {
            Some(Content::File(_)) => reply.opened(FileHandle(0), self.open_flags()),
            Some(Content::Dir { .. }) => reply.error(Errno::EISDIR),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let attr = new_attr(
            0,
            FileType::RegularFile,
            (mode & !umask & 0o7777) as u16,
            req,
        );
        match self
            .tree
            .lock()
            .insert(parent.0, name, attr, Content::File(Vec::new()))
        {
            Ok(attr) => reply.created(
                &self.options.ttl,
                &attr,
                Generation(0),
                FileHandle(0),
                self.open_flags(),
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
        let tree = self.tree.lock();
        match tree.nodes.get(&ino.0).map(|n| &n.content) {
            Some(Content::File(data)) => {
                let start = usize::try_from(offset)
                    .unwrap_or(usize::MAX)
                    .min(data.len());
                let end = start.saturating_add(size as usize).min(data.len());
                reply.data(&data[start..end]);
            }
            Some(Content::Dir { .. }) => reply.error(Errno::EISDIR),
            None => reply.error(Errno::ENOENT),
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
        let mut tree = self.tree.lock();
        let Some(node) = tree.nodes.get_mut(&ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        let Content::File(bytes) = &mut node.content else {
            return reply.error(Errno::EISDIR);
        };
        let Some(end) = usize::try_from(offset)
            .ok()
            .and_then(|o| o.checked_add(data.len()))
        else {
            return reply.error(Errno::EFBIG);
        };
        if bytes.len() < end {
            bytes.resize(end, 0);
        }
        bytes[end - data.len()..end].copy_from_slice(data);
        let len = bytes.len() as u64;
        set_size(&mut node.attr, len);
        node.attr.mtime = SystemTime::now();
        node.attr.ctime = node.attr.mtime;
        reply.written(data.len() as u32);
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        if self.options.flush_enosys {
            reply.error(Errno::ENOSYS);
        } else {
            reply.ok();
        }
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
        match self.tree.lock().nodes.get(&ino.0).map(|n| &n.content) {
            Some(Content::Dir { .. }) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Some(Content::File(_)) => reply.error(Errno::ENOTDIR),
            None => reply.error(Errno::ENOENT),
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
        let tree = self.tree.lock();
        let Some(Content::Dir { parent, entries }) = tree.nodes.get(&ino.0).map(|n| &n.content)
        else {
            return reply.error(Errno::ENOTDIR);
        };
        let dots = [
            (ino.0, FileType::Directory, OsStr::new(".")),
            (*parent, FileType::Directory, OsStr::new("..")),
        ];
        let children = entries
            .iter()
            .map(|(name, &child)| (child, tree.nodes[&child].attr.kind, name.as_os_str()));
        for (i, (child, kind, name)) in dots
            .into_iter()
            .chain(children)
            .enumerate()
            .skip(offset as usize)
        {
            if reply.add(INodeNo(child), i as u64 + 1, kind, name) {
                break;
            }
        }
        reply.ok();
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
        let files = self.tree.lock().nodes.len() as u64;
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
}

/// A mounted [`NoopFs`]; dropping it unmounts.
pub struct NoopMount {
    session: Option<BackgroundSession>,
    dir: PathBuf,
}

fn mount_config(options: &NoopOptions) -> Config {
    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName("ptsd-bench-noop".into()),
        MountOption::Subtype("noop".into()),
    ];
    if options.default_permissions {
        config.mount_options.push(MountOption::DefaultPermissions);
    }
    config.n_threads = Some(options.threads);
    config.clone_fd = true;
    config
}

/// Serves a fresh [`NoopFs`] on `dir` in this process until it is
/// unmounted (`umount DIR`): the no-op fs as a daemon process of its own,
/// like any real FUSE file system (`ptsd bench noop-mount`, which the
/// `noop` target of `ptsd bench fs` spawns).
pub fn serve(dir: &Path, options: NoopOptions) -> Result<()> {
    if options.threads == 0 {
        return Err(FsBenchError::Config(
            "the no-op FUSE fs needs at least one thread".into(),
        ));
    }
    let config = mount_config(&options);
    fuser::mount(NoopFs::new(options), dir, &config).map_err(|e| FsBenchError::Mount {
        path: dir.to_path_buf(),
        detail: format!("serving the no-op fs: {e}"),
    })
}

impl NoopMount {
    /// Mounts a fresh [`NoopFs`] on `dir` (an existing empty directory).
    /// Needs root (fuser mounts with mount(2), no fusermount) and /dev/fuse.
    pub fn mount(dir: &Path, options: NoopOptions) -> Result<Self> {
        if options.threads == 0 {
            return Err(FsBenchError::Config(
                "the no-op FUSE fs needs at least one thread".into(),
            ));
        }
        let config = mount_config(&options);
        let session = fuser::spawn_mount(NoopFs::new(options), dir, &config).map_err(|e| {
            FsBenchError::Mount {
                path: dir.to_path_buf(),
                detail: format!("fuse mount of the no-op fs failed: {e}"),
            }
        })?;
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
