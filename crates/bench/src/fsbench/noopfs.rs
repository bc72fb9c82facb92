//! A minimal in-memory FUSE file system that does no real work: the FUSE
//! ceiling of the machine, for comparison with ptsd-fs.
//!
//! A ceiling must ask the kernel for the same things ptsd-fs does, or the
//! two get different requests and "ptsd / no-op" measures the difference.
//! It is served by ptsd-fs's own front end ([`ptsd_fs::frontend`]): the
//! same mount options, the same INIT step, the same transports and the
//! same reply policy (entry and attribute validity, negative entries,
//! open flags), so ceiling and subject get the same requests by
//! construction; only its [`Handler`](ptsd_fs::frontend::Handler)
//! (`noopfs/handler.rs`) is its own. It answers FLUSH with ENOSYS (the kernel
//! then stops sending it) and getxattr with ENODATA, as ptsd-fs does. Its
//! state is sharded by inode (no global lock) and every reply is sent
//! after the shard lock is released, so one slow reply never holds up
//! another thread.
//!
//! Inodes, directories and file bytes live in memory; `fsync` and
//! `fsyncdir` reply at once. It serves enough of POSIX for the
//! [`fsbench`](super) workloads (and `ls`, `cat`, `rm -r`): lookup,
//! getattr, setattr, mkdir, create, open, read, write, unlink, rmdir,
//! rename, readdir(plus), statfs, xattr reads.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use fuser::{Errno, FileAttr, FileType, INodeNo, TimeOrNow};
use parking_lot::{Mutex, MutexGuard};
use ptsd_fs::frontend::{Mount, ServeOptions, Served};
use ptsd_fs::fuse::{raise_readahead, MountOpts};
use ptsd_fs::opcount::OpCounts;

use super::{FsBenchError, Result};

mod handler;

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
    /// does (`ptsd bench noop-mount --uring`).
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
/// A clone shares the state.
#[derive(Clone)]
pub struct NoopFs {
    shards: Arc<[Mutex<Shard>]>,
    next_ino: Arc<AtomicU64>,
    nodes: Arc<AtomicU64>,
    /// Renames change two directories in steps; they take this first, so
    /// two renames never interleave (the workloads do not rename).
    tree_lock: Arc<Mutex<()>>,
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
    pub fn new() -> Self {
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

impl Default for NoopFs {
    fn default() -> Self {
        Self::new()
    }
}

/// A mounted [`NoopFs`]; dropping it unmounts.
pub struct NoopMount {
    served: Option<Served>,
    dir: PathBuf,
}

/// Mounts a fresh [`NoopFs`] on `dir` and starts serving it.
fn start(dir: &Path, options: NoopOptions) -> Result<Served> {
    if options.threads == 0 {
        return Err(FsBenchError::Config(
            "the no-op FUSE fs needs at least one thread".into(),
        ));
    }
    let counts = options
        .op_counts
        .as_deref()
        .map(OpCounts::create)
        .transpose()
        .map_err(|e| FsBenchError::Config(e.to_string()))?;
    let opts = ServeOptions {
        mount: MountOpts {
            threads: options.threads,
            fsname: "ptsd-bench-noop".into(),
            ..MountOpts::default()
        },
        uring: options.uring,
        writeback_cache: options.writeback_cache,
        counts,
        ..ServeOptions::default()
    };
    let err = |e: ptsd_fs::frontend::ServeError| FsBenchError::Mount {
        path: dir.to_path_buf(),
        detail: format!("serving the no-op fs: {}", error_chain(&e)),
    };
    let served = Mount::new(dir, opts)
        .and_then(|m| m.start(Arc::new(NoopFs::new())))
        .map_err(err)?;
    if options.uring && !served.transport().starts_with("FUSE over io_uring") {
        eprintln!("no-op fs: serving {}", served.transport());
    }
    // The same read-ahead window as a ptsd-fs mount (like with like).
    raise_readahead(dir);
    Ok(served)
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        s.push_str(&format!(": {c}"));
        cause = c.source();
    }
    s
}

/// Serves a fresh [`NoopFs`] on `dir` in this process until it is
/// unmounted (`umount DIR`): the no-op fs as a daemon process of its own,
/// like any real FUSE file system (`ptsd bench noop-mount`, which the
/// `noop` target of `ptsd bench fs` spawns).
pub fn serve(dir: &Path, options: NoopOptions) -> Result<()> {
    start(dir, options)?
        .wait()
        .map_err(|e| FsBenchError::Mount {
            path: dir.to_path_buf(),
            detail: format!("serving the no-op fs: {}", error_chain(&e)),
        })
}

impl NoopMount {
    /// Mounts a fresh [`NoopFs`] on `dir` (an existing empty directory),
    /// served by threads of this process. Needs root (mount(2), no
    /// fusermount) and /dev/fuse.
    pub fn mount(dir: &Path, options: NoopOptions) -> Result<Self> {
        Ok(NoopMount {
            served: Some(start(dir, options)?),
            dir: dir.to_path_buf(),
        })
    }

    /// The mount point.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Unmounts and waits for the FUSE threads to end.
    pub fn unmount(mut self) -> Result<()> {
        let Some(mut s) = self.served.take() else {
            return Ok(());
        };
        let err = |detail: String| FsBenchError::Mount {
            path: self.dir.clone(),
            detail: format!("unmount failed: {detail}"),
        };
        s.unmount().map_err(|e| err(e.to_string()))?;
        s.wait().map_err(|e| err(error_chain(&e)))
    }
}

impl Drop for NoopMount {
    fn drop(&mut self) {
        if let Some(mut s) = self.served.take() {
            let _ = s.unmount();
            let _ = s.wait();
        }
    }
}
