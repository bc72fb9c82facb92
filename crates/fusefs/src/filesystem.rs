// Over 800 lines: the split into inode cache, namespace, data and inode I/O modules (as xattr/seek/symlink/tmpfile already are) is still open.
//! The file system proper: inodes, directories, data, xattrs, each operation
//! one transaction on the [`Store`].
//!
//! Locking: every inode has its own mutex; an operation locks the inodes it
//! changes (parents in ascending order, children with `try_lock` and a retry,
//! so no cycle can form), then the allocation groups it needs, builds its
//! blocks, and finishes one transaction while holding them. There is no lock
//! around the journal: operations on different inodes journal concurrently.
//!
//! Every operation checks its arguments and reserves space before it changes
//! anything in memory, so an error (ENOSPC, EEXIST, …) leaves nothing behind.
//! If the store itself fails mid-transaction the file system stops accepting
//! changes (EIO), like ext4's errors=remount-ro.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{ArcMutexGuard, Mutex, RawMutex};

use crate::alloc::{AllocCtx, Allocator};
use crate::chain::{self, Chain};
use crate::dir::{DirEnt, DirIndex, FIRST_POS};
use crate::error::{Damage, Errno, FormatError, FsError};
use crate::extent::ExtentMap;
use crate::format::*;
use crate::store::Store;

mod seek;
mod symlink;
mod tmpfile;
mod xattr;

pub use seek::Seek;

const BS: u64 = BLOCK_SIZE as u64;
/// Largest file: file block numbers are stored in 32 bits.
pub const MAX_FILE_SIZE: u64 = (u32::MAX as u64) * BS;
const MAX_LINKS: u32 = 65000;
const SHARDS: usize = 64;
/// Busy inodes remembered for another eviction attempt (beyond this, an
/// inode stays cached until the kernel looks it up and forgets it again).
const EVICT_RETRY_MAX: usize = 4096;

const S_IFMT: u32 = libc::S_IFMT;
const S_IFDIR: u32 = libc::S_IFDIR;
const S_IFREG: u32 = libc::S_IFREG;
const S_IFLNK: u32 = libc::S_IFLNK;

/// `rename` flag: fail if the target exists.
pub const RENAME_NOREPLACE: u32 = 1;
/// `rename` flag: swap source and target.
pub const RENAME_EXCHANGE: u32 = 2;

/// An inode as kept in memory.
pub(crate) struct Inode {
    pub d: DiskInode,
    pub ext: ExtentMap,
    pub dir: Option<DirIndex>,
    pub xattrs: Option<BTreeMap<Vec<u8>, Vec<u8>>>,
    pub open_count: u32,
    pub freed: bool,
    /// References the kernel holds (entries it was given minus FORGETs);
    /// at zero, with the file closed, the inode may leave the cache.
    pub lookups: u64,
    /// The stored form of `ext` beyond the inline extents.
    chain: Chain,
}

impl Inode {
    fn is_dir(&self) -> bool {
        self.d.mode & S_IFMT == S_IFDIR
    }
    fn kind(&self) -> u8 {
        ((self.d.mode & S_IFMT) >> 12) as u8
    }
    /// Attributes for the kernel.
    pub fn attr(&self) -> Attr {
        let blocks = self.ext.mapped_blocks()
            + self.chain.blocks().len() as u64
            + u64::from(self.d.xattr_blk != 0);
        Attr {
            ino: self.d.ino,
            size: if self.d.mode & S_IFMT == S_IFLNK {
                self.d.symlink.len() as u64
            } else {
                self.d.size
            },
            blocks: blocks * (BS / 512),
            atime: self.d.atime,
            mtime: self.d.mtime,
            ctime: self.d.ctime,
            crtime: self.d.crtime,
            mode: self.d.mode,
            nlink: self.d.nlink,
            uid: self.d.uid,
            gid: self.d.gid,
            rdev: self.d.rdev,
            generation: self.d.generation,
        }
    }
}

/// Attributes of an inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attr {
    pub ino: u64,
    pub size: u64,
    /// 512-byte units.
    pub blocks: u64,
    pub atime: Ts,
    pub mtime: Ts,
    pub ctime: Ts,
    pub crtime: Ts,
    /// Type and permission bits.
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u32,
    pub generation: u64,
}

/// A time to set: a given time or now.
#[derive(Clone, Copy, Debug)]
pub enum SetTime {
    At(Ts),
    Now,
}

/// Changes for [`FileSystem::setattr`].
#[derive(Clone, Copy, Debug, Default)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<SetTime>,
    pub mtime: Option<SetTime>,
    /// The caller lacks the privilege to keep setuid/setgid and file
    /// capabilities across a truncate (the kernel's `FATTR_KILL_SUIDGID`).
    pub kill_priv: bool,
}

/// Who creates a file.
#[derive(Clone, Copy, Debug, Default)]
pub struct Caller {
    pub uid: u32,
    pub gid: u32,
}

/// One readdir entry.
#[derive(Clone, Debug)]
pub struct DirEntry {
    pub ino: u64,
    /// Cookie to resume after this entry.
    pub next: u64,
    /// File type bits (`S_IFMT` of the mode shifted right by 12).
    pub kind: u8,
    pub name: Vec<u8>,
}

/// statfs figures.
#[derive(Clone, Copy, Debug)]
pub struct StatFs {
    pub blocks: u64,
    pub bfree: u64,
    pub files: u64,
    pub ffree: u64,
    pub bsize: u32,
    pub namelen: u32,
}

type IGuard = ArcMutexGuard<RawMutex, Inode>;

/// Blocks to write in one transaction, keyed by block number.
type Writes = BTreeMap<u64, Vec<u8>>;

/// A mounted ptsd-fs.
pub struct FileSystem {
    store: Arc<dyn Store>,
    sb: Mutex<Superblock>,
    /// The superblock fields that never change while mounted.
    layout: Layout,
    alloc: Allocator,
    shards: Vec<Mutex<HashMap<u64, Arc<Mutex<Inode>>>>>,
    generation: AtomicU64,
    failed: AtomicBool,
    rename_lock: Mutex<()>,
    /// Forgotten inodes that were in use at the time (see `evict`).
    evict_later: Mutex<Vec<u64>>,
    closed: AtomicBool,
    clean: AtomicBool,
    /// Orphans freed while mounting (open-unlinked files of a crashed run).
    pub orphans_freed: u64,
}

fn check_name(name: &[u8]) -> Result<(), Errno> {
    if name.len() > NAME_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    if name.is_empty() || name.contains(&b'/') || name.contains(&0) {
        return Err(Errno::EINVAL);
    }
    if name == b"." || name == b".." {
        return Err(Errno::EEXIST);
    }
    Ok(())
}

/// Extra blocks an inode's extent list may need after gaining `added` runs.
fn ext_slack(g: &Inode, added: usize) -> u64 {
    g.chain.slack(g.ext.len(), added)
}

/// Every device block an inode owns (for freeing it).
fn owned_runs(g: &Inode) -> Vec<(u64, u64)> {
    let mut v: Vec<(u64, u64)> = g
        .ext
        .to_extents()
        .iter()
        .map(|e| (e.pblk, u64::from(e.len)))
        .collect();
    v.extend(g.chain.runs());
    if g.d.xattr_blk != 0 {
        v.push((g.d.xattr_blk, 1));
    }
    v.push((g.d.ino, 1));
    v
}

/// Serialize an inode (and its extent chain) into `w`, allocating chain
/// blocks from `ctx` if the extent list grew and freeing the ones it no
/// longer needs if `ctx` holds their groups.
fn put_inode(g: &mut Inode, ctx: Option<&mut AllocCtx<'_>>, w: &mut Writes) -> Result<(), Errno> {
    g.chain.save(&mut g.d, &mut g.ext, ctx, w)
}

fn put_dir_block(g: &Inode, blk: u32, w: &mut Writes) -> Result<(), Errno> {
    let dir = g.dir.as_ref().ok_or(Errno::EIO)?;
    let (pblk, _, _) = g.ext.lookup(u64::from(blk)).ok_or(Errno::EIO)?;
    w.insert(pblk, dir.encode_block(g.d.ino, blk));
    Ok(())
}

/// Blocks an insertion of `name_len` into directory `g` may need.
fn dir_need(g: &mut Inode, name_len: usize) -> u64 {
    match g.dir.as_mut().map(|d| d.find_slot(name_len)) {
        Some(Some(_)) => 0,
        _ => 1 + ext_slack(g, 1),
    }
}

/// Add an entry to directory `g`; space was reserved with [`dir_need`].
fn dir_add(
    g: &mut Inode,
    name: &[u8],
    ino: u64,
    kind: u8,
    ctx: &mut AllocCtx<'_>,
    w: &mut Writes,
) -> Result<DirEnt, Errno> {
    let dir = g.dir.as_mut().ok_or(Errno::EIO)?;
    let blk = match dir.find_slot(name.len()) {
        Some(b) => b,
        None => {
            let lblk = dir.num_blocks();
            let goal = g.ext.goal(lblk).unwrap_or(g.d.ino + 1);
            let runs = ctx.alloc(1, goal);
            let (pblk, _) = *runs.first().ok_or(Errno::ENOSPC)?;
            let b = dir.push_block();
            g.ext.insert(lblk, pblk, 1, false);
            g.d.size = (lblk + 1) * BS;
            b
        }
    };
    let e = g.dir.as_mut().ok_or(Errno::EIO)?.add(name, ino, kind, blk);
    put_dir_block(g, blk, w)?;
    Ok(e)
}

fn touch_dir(g: &mut Inode, now: Ts) {
    g.d.mtime = now;
    g.d.ctime = now;
}

/// Locks held by one operation, by inode number.
struct Held {
    guards: Vec<(u64, IGuard)>,
}

impl Held {
    fn get(&mut self, ino: u64) -> &mut Inode {
        &mut self
            .guards
            .iter_mut()
            .find(|(i, _)| *i == ino)
            .expect("inode is locked")
            .1
    }
    fn has(&self, ino: u64) -> bool {
        self.guards.iter().any(|(i, _)| *i == ino)
    }
}

#[derive(Clone, Copy)]
struct Layout {
    root: u64,
    orphan: u64,
    data_start: u64,
    num_blocks: u64,
}

/// Why an inode could not be loaded.
enum LoadErr {
    /// Not an inode (freed, or a stale number).
    Stale,
    Format(FormatError),
    Store(crate::error::StoreError),
}

impl LoadErr {
    fn errno(self) -> Errno {
        match self {
            LoadErr::Stale => Errno::ENOENT,
            LoadErr::Format(f) => Errno::from(f),
            LoadErr::Store(s) => Errno::from(s),
        }
    }
}

impl From<FormatError> for LoadErr {
    fn from(e: FormatError) -> Self {
        LoadErr::Format(e)
    }
}

impl From<crate::error::StoreError> for LoadErr {
    fn from(e: crate::error::StoreError) -> Self {
        LoadErr::Store(e)
    }
}

/// Outcome of trying to take a secondary lock.
enum Try<T> {
    Done(T),
    Retry,
}

impl FileSystem {
    /// Open (mount) the file system on `store`: validate the superblock,
    /// load the allocation bitmaps, free orphans left by a crash, and mark
    /// the superblock dirty.
    pub fn mount(store: Arc<dyn Store>) -> Result<Self, FsError> {
        let mut b = vec![0u8; BLOCK_SIZE];
        store.read(0, &mut b)?;
        let mut sb = Superblock::decode(&b, store.num_blocks())?;
        let mut bitmaps = Vec::new();
        for i in 0..sb.bitmap_blocks {
            let blk = sb.bitmap_start + i;
            let mut bm = vec![0u8; BLOCK_SIZE];
            store.read(blk, &mut bm)?;
            check_bitmap(&bm, blk)?;
            bitmaps.push(bm);
        }
        let alloc = Allocator::new(bitmaps, sb.bitmap_start, sb.num_blocks);
        let seed = sb.gen_seed.wrapping_add(u64::from(sb.mount_count) << 32);
        sb.state = STATE_DIRTY;
        sb.mount_count = sb.mount_count.wrapping_add(1);
        let mut fs = FileSystem {
            store: store.clone(),
            sb: Mutex::new(sb.clone()),
            layout: Layout {
                root: sb.root_ino,
                orphan: sb.orphan_ino,
                data_start: sb.data_start,
                num_blocks: sb.num_blocks,
            },
            alloc,
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            generation: AtomicU64::new(seed),
            failed: AtomicBool::new(false),
            rename_lock: Mutex::new(()),
            evict_later: Mutex::new(Vec::new()),
            closed: AtomicBool::new(false),
            clean: AtomicBool::new(false),
            orphans_freed: 0,
        };
        for (what, ino) in [
            ("root directory", sb.root_ino),
            ("orphan directory", sb.orphan_ino),
        ] {
            let why = |e: LoadErr| match e {
                LoadErr::Stale => FsError::NeedsRepair(Damage::NotInUse { what, ino }),
                LoadErr::Format(source) => {
                    FsError::NeedsRepair(Damage::Unloadable { what, source })
                }
                LoadErr::Store(s) => FsError::Store(s),
            };
            let mut inode = fs.load_raw(ino).map_err(why)?;
            if !inode.is_dir() {
                return Err(FormatError::Corrupt {
                    what: "inode",
                    block: ino,
                    why: format!("the {what} is not a directory"),
                }
                .into());
            }
            inode.dir = Some(fs.load_dir(&inode).map_err(why)?);
            fs.shard(ino)
                .lock()
                .insert(ino, Arc::new(Mutex::new(inode)));
        }
        store.write_super(&sb.encode())?;
        fs.orphans_freed = fs
            .free_orphans()
            .map_err(|e| FsError::NeedsRepair(Damage::FreeingOrphans(e)))?;
        Ok(fs)
    }

    /// Checkpoint everything and mark the file system clean. Idempotent.
    pub fn close(&self) -> Result<(), FsError> {
        if self.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        self.store.sync()?;
        self.store.close()?;
        if !self.failed.load(Ordering::SeqCst) {
            let mut sb = self.sb.lock();
            sb.state = STATE_CLEAN;
            self.store.write_super(&sb.encode())?;
            self.clean.store(true, Ordering::SeqCst);
        }
        Ok(())
    }

    /// True once [`close`](Self::close) has checkpointed everything and
    /// marked the superblock clean.
    pub fn is_clean(&self) -> bool {
        self.clean.load(Ordering::SeqCst)
    }

    /// The superblock as mounted.
    pub fn superblock(&self) -> Superblock {
        self.sb.lock().clone()
    }

    /// The root directory's inode number.
    pub fn root(&self) -> u64 {
        self.layout.root
    }

    /// What the store is (durability mode).
    pub fn describe_store(&self) -> String {
        self.store.describe()
    }

    fn shard(&self, ino: u64) -> &Mutex<HashMap<u64, Arc<Mutex<Inode>>>> {
        &self.shards[(ino as usize) % SHARDS]
    }

    fn read_block(&self, blk: u64) -> Result<Vec<u8>, Errno> {
        let mut b = vec![0u8; BLOCK_SIZE];
        self.store.read(blk, &mut b)?;
        Ok(b)
    }

    fn load(&self, ino: u64) -> Result<Inode, Errno> {
        self.load_raw(ino).map_err(LoadErr::errno)
    }

    fn load_raw(&self, ino: u64) -> Result<Inode, LoadErr> {
        let (data_start, num_blocks) = (self.layout.data_start, self.layout.num_blocks);
        if ino < data_start || ino >= num_blocks || !self.alloc.is_used(ino) {
            return Err(LoadErr::Stale);
        }
        let mut b = vec![0u8; BLOCK_SIZE];
        self.store.read(ino, &mut b)?;
        let d = match DiskInode::decode(&b, ino) {
            Ok(d) => d,
            // A stale number whose block now holds something else.
            Err(FormatError::BadMagic { .. }) => return Err(LoadErr::Stale),
            Err(e) => return Err(e.into()),
        };
        let (ext, chain) = chain::load(&d, data_start..num_blocks, |blk| {
            let mut b = vec![0u8; BLOCK_SIZE];
            self.store.read(blk, &mut b).map(|()| b)
        })
        .map_err(|e| match e {
            chain::LoadError::Read(e) => LoadErr::Store(e),
            chain::LoadError::Corrupt(e) => LoadErr::Format(e),
        })?;
        let mut g = Inode {
            ext,
            d,
            chain,
            dir: None,
            xattrs: None,
            open_count: 0,
            freed: false,
            lookups: 0,
        };
        if g.d.mode & S_IFMT == S_IFLNK && symlink::is_long(g.d.symlink.len()) {
            self.load_long_target(&mut g)?;
        }
        Ok(g)
    }

    /// Read a directory's blocks into its index.
    fn load_dir(&self, g: &Inode) -> Result<DirIndex, LoadErr> {
        let nblocks = g.d.size / BS;
        let mut blocks = Vec::with_capacity(nblocks as usize);
        let mut b = vec![0u8; BLOCK_SIZE];
        for lblk in 0..nblocks {
            let (pblk, _, _) = g.ext.lookup(lblk).ok_or_else(|| FormatError::Corrupt {
                what: "directory",
                block: g.d.ino,
                why: format!("hole at block {lblk}"),
            })?;
            self.store.read(pblk, &mut b)?;
            blocks.push(decode_dir_block(&b, pblk, g.d.ino)?);
        }
        Ok(
            DirIndex::from_blocks(blocks).map_err(|why| FormatError::Corrupt {
                what: "directory",
                block: g.d.ino,
                why,
            })?,
        )
    }

    /// The cached inode `ino`, loading it on first use.
    fn get(&self, ino: u64) -> Result<Arc<Mutex<Inode>>, Errno> {
        let mut shard = self.shard(ino).lock();
        if let Some(i) = shard.get(&ino) {
            return Ok(i.clone());
        }
        let inode = self.load(ino)?;
        if inode.d.nlink == 0 {
            // Freed or an orphan: only reachable through the cache.
            return Err(Errno::ENOENT);
        }
        let arc = Arc::new(Mutex::new(inode));
        shard.insert(ino, arc.clone());
        Ok(arc)
    }

    fn lock(&self, ino: u64) -> Result<IGuard, Errno> {
        let g = self.get(ino)?.lock_arc();
        if g.freed {
            return Err(Errno::ENOENT);
        }
        Ok(g)
    }

    fn try_lock(&self, ino: u64) -> Result<Try<IGuard>, Errno> {
        let arc = self.get(ino)?;
        match arc.try_lock_arc() {
            Some(g) if g.freed => Err(Errno::ENOENT),
            Some(g) => Ok(Try::Done(g)),
            None => Ok(Try::Retry),
        }
    }

    fn lock_sorted(&self, inos: &[u64]) -> Result<Held, Errno> {
        let mut v: Vec<u64> = inos.to_vec();
        v.sort_unstable();
        v.dedup();
        let mut guards = Vec::with_capacity(v.len());
        for ino in v {
            guards.push((ino, self.lock(ino)?));
        }
        Ok(Held { guards })
    }

    /// Lock `ino` too, unless already held; `false` means retry.
    fn try_add(&self, held: &mut Held, ino: u64) -> Result<bool, Errno> {
        if held.has(ino) {
            return Ok(true);
        }
        match self.try_lock(ino)? {
            Try::Done(g) => {
                held.guards.push((ino, g));
                Ok(true)
            }
            Try::Retry => Ok(false),
        }
    }

    /// Whether `target` may be removed by an operation on a directory
    /// (`want_dir`) or a non-directory: the kinds must match, and a
    /// directory must be empty.
    fn check_replaceable(&self, target: &mut Inode, want_dir: bool) -> Result<(), Errno> {
        let is_dir = target.is_dir();
        if want_dir && !is_dir {
            return Err(Errno::ENOTDIR);
        }
        if !want_dir && is_dir {
            return Err(Errno::EISDIR);
        }
        if is_dir {
            self.ensure_dir(target)?;
            if !target.dir.as_ref().is_some_and(|d| d.is_empty()) {
                return Err(Errno::ENOTEMPTY);
            }
        }
        Ok(())
    }

    fn ensure_dir(&self, g: &mut Inode) -> Result<(), Errno> {
        if !g.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        if g.dir.is_some() {
            return Ok(());
        }
        let idx = self.load_dir(g).map_err(LoadErr::errno)?;
        g.dir = Some(idx);
        Ok(())
    }

    fn writable(&self) -> Result<(), Errno> {
        if self.failed.load(Ordering::Relaxed) || self.closed.load(Ordering::Relaxed) {
            return Err(Errno::EROFS);
        }
        Ok(())
    }

    /// Write one operation's blocks as one transaction.
    fn commit(&self, w: Writes, ctx: Option<AllocCtx<'_>>) -> Result<(), Errno> {
        let res = (|| {
            let mut tx = self.store.begin();
            for (blk, data) in &w {
                tx.write(*blk, data)?;
            }
            if let Some(ctx) = &ctx {
                for (blk, data) in ctx.dirty_blocks() {
                    tx.write(blk, &data)?;
                }
            }
            tx.finish()
        })();
        match res {
            Ok(()) => {
                if let Some(ctx) = ctx {
                    ctx.commit();
                }
                Ok(())
            }
            Err(e) => {
                // Like ext4's errors=remount-ro: this operation fails with
                // the cause's errno (ENOSPC if the device is full, else
                // EIO), every later change with EROFS until a remount.
                tracing::error!("transaction failed, file system is now read-only: {e}");
                self.failed.store(true, Ordering::SeqCst);
                Err(e.errno())
            }
        }
    }

    fn forget_freed(&self, ino: u64) {
        self.shard(ino).lock().remove(&ino);
    }

    fn new_inode(&self, ino: u64, mode: u32, who: Caller, parent: u64, now: Ts) -> Inode {
        let d = DiskInode {
            ino,
            generation: self.generation.fetch_add(1, Ordering::Relaxed),
            mode,
            uid: who.uid,
            gid: who.gid,
            nlink: 1,
            size: 0,
            atime: now,
            mtime: now,
            ctime: now,
            crtime: now,
            rdev: 0,
            flags: 0,
            xattr_blk: 0,
            parent,
            nextents: 0,
            overflow: 0,
            inline_extents: Vec::new(),
            symlink: Vec::new(),
        };
        Inode {
            d,
            ext: ExtentMap::default(),
            chain: Chain::default(),
            dir: None,
            xattrs: None,
            open_count: 0,
            freed: false,
            lookups: 0,
        }
    }

    // ---------------------------------------------------------------- queries

    /// Look `name` up in directory `parent`.
    pub fn lookup(&self, parent: u64, name: &[u8]) -> Result<Attr, Errno> {
        if name.len() > NAME_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        let ino = {
            let mut p = self.lock(parent)?;
            self.ensure_dir(&mut p)?;
            if name == b"." {
                p.lookups += 1;
                return Ok(p.attr());
            }
            if name == b".." {
                p.d.parent
            } else {
                p.dir
                    .as_ref()
                    .and_then(|d| d.get(name))
                    .ok_or(Errno::ENOENT)?
                    .ino
            }
        };
        self.remember(ino)
    }

    /// The kernel was handed one more reference to `ino` (an entry in a
    /// lookup, create or readdirplus reply): count it, and return the
    /// attributes. [`forget`](Self::forget) gives references back.
    pub fn remember(&self, ino: u64) -> Result<Attr, Errno> {
        let mut g = self.lock(ino)?;
        g.lookups += 1;
        Ok(g.attr())
    }

    /// The kernel dropped `n` references to `ino` (FORGET). With none left
    /// and the file closed, the inode leaves the cache (its state is all
    /// in the store; the next use loads it again), so memory stays bounded
    /// by what the kernel keeps, not by what was ever touched.
    pub fn forget(&self, ino: u64, n: u64) {
        if ino == self.layout.root || ino == self.layout.orphan {
            return;
        }
        let Some(arc) = self.shard(ino).lock().get(&ino).cloned() else {
            return;
        };
        let idle = {
            let mut g = arc.lock();
            g.lookups = g.lookups.saturating_sub(n);
            g.lookups == 0 && g.open_count == 0
        };
        drop(arc);
        if idle {
            self.evict(ino);
        }
        // Inodes that were busy when the kernel forgot them.
        let retry: Vec<u64> = std::mem::take(&mut *self.evict_later.lock());
        for i in retry {
            self.evict(i);
        }
    }

    /// Drop `ino` from the cache if nobody uses it. Under the shard lock
    /// only the map can hand out the inode, so a reference count of one
    /// means no operation holds it now or can get it meanwhile. A busy
    /// inode is queued and tried again at a later FORGET.
    fn evict(&self, ino: u64) {
        let mut shard = self.shard(ino).lock();
        let Some(arc) = shard.get(&ino) else {
            return;
        };
        let idle = Arc::strong_count(arc) == 1
            && arc
                .try_lock()
                .is_some_and(|g| g.lookups == 0 && g.open_count == 0);
        if idle {
            shard.remove(&ino);
        } else if Arc::strong_count(arc) > 1 {
            let mut later = self.evict_later.lock();
            if later.len() < EVICT_RETRY_MAX {
                later.push(ino);
            }
        }
    }

    /// Inodes in the cache (for tests and statistics).
    pub fn cached_inodes(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }

    /// Attributes of `ino`.
    pub fn getattr(&self, ino: u64) -> Result<Attr, Errno> {
        Ok(self.lock(ino)?.attr())
    }

    /// Target of a symlink.
    pub fn readlink(&self, ino: u64) -> Result<Vec<u8>, Errno> {
        let g = self.lock(ino)?;
        if g.d.mode & S_IFMT != S_IFLNK {
            return Err(Errno::EINVAL);
        }
        Ok(g.d.symlink.clone())
    }

    /// Up to `max` entries of directory `ino` after cookie `offset`
    /// (`.` and `..` first).
    pub fn readdir(&self, ino: u64, offset: u64, max: usize) -> Result<Vec<DirEntry>, Errno> {
        let mut g = self.lock(ino)?;
        self.ensure_dir(&mut g)?;
        let mut out = Vec::new();
        if offset < 1 {
            out.push(DirEntry {
                ino,
                next: 1,
                kind: (S_IFDIR >> 12) as u8,
                name: b".".to_vec(),
            });
        }
        if offset < 2 {
            out.push(DirEntry {
                ino: g.d.parent,
                next: 2,
                kind: (S_IFDIR >> 12) as u8,
                name: b"..".to_vec(),
            });
        }
        let dir = g.dir.as_ref().ok_or(Errno::EIO)?;
        for (name, e) in dir.iter_from(offset.max(FIRST_POS)) {
            if out.len() >= max {
                break;
            }
            out.push(DirEntry {
                ino: e.ino,
                next: e.pos + 1,
                kind: e.kind,
                name: name.to_vec(),
            });
        }
        Ok(out)
    }

    /// File-system figures.
    pub fn statfs(&self) -> StatFs {
        let sb = self.sb.lock();
        let free = self.alloc.free_blocks();
        StatFs {
            blocks: sb.num_blocks,
            bfree: free,
            files: sb.num_blocks - sb.data_start,
            ffree: free,
            bsize: BLOCK_SIZE as u32,
            namelen: NAME_MAX as u32,
        }
    }

    /// Read up to `size` bytes at `offset`.
    pub fn read(&self, ino: u64, offset: u64, size: u32) -> Result<Vec<u8>, Errno> {
        let g = self.lock(ino)?;
        if g.is_dir() {
            return Err(Errno::EISDIR);
        }
        if offset >= g.d.size {
            return Ok(Vec::new());
        }
        let end = g.d.size.min(offset + u64::from(size));
        let mut out = vec![0u8; (end - offset) as usize];
        let mut blockbuf = vec![0u8; BLOCK_SIZE];
        let mut pos = offset;
        while pos < end {
            let lblk = pos / BS;
            let in_blk = (pos % BS) as usize;
            let n = ((BS - pos % BS).min(end - pos)) as usize;
            let o = (pos - offset) as usize;
            if let Some((pblk, false, _)) = g.ext.lookup(lblk) {
                self.store.read(pblk, &mut blockbuf)?;
                out[o..o + n].copy_from_slice(&blockbuf[in_blk..in_blk + n]);
            }
            pos += n as u64;
        }
        Ok(out)
    }

    // ---------------------------------------------------------------- creation

    #[allow(clippy::too_many_arguments)]
    fn create_node(
        &self,
        parent: u64,
        name: &[u8],
        mode: u32,
        rdev: u32,
        who: Caller,
        symlink: Option<&[u8]>,
        open: bool,
    ) -> Result<Attr, Errno> {
        self.writable()?;
        check_name(name)?;
        if let Some(t) = symlink {
            if t.len() > SYMLINK_MAX {
                return Err(Errno::ENAMETOOLONG);
            }
            if t.is_empty() {
                return Err(Errno::ENOENT);
            }
        }
        let mut p = self.lock(parent)?;
        self.ensure_dir(&mut p)?;
        if p.d.nlink == 0 {
            return Err(Errno::ENOENT);
        }
        if p.dir.as_ref().and_then(|d| d.get(name)).is_some() {
            return Err(Errno::EEXIST);
        }
        let is_dir = mode & S_IFMT == S_IFDIR;
        if is_dir && p.d.nlink >= MAX_LINKS {
            return Err(Errno::EMLINK);
        }
        let long = symlink.is_some_and(|t| symlink::is_long(t.len()));
        let need = 1 + u64::from(long) + dir_need(&mut p, name.len());
        // A directory starts in a group of its own choosing; anything else
        // goes next to its directory.
        let goal = if is_dir {
            self.alloc.dir_goal()
        } else {
            parent + 1
        };
        let mut ctx = self.alloc.prepare(need, goal, &[])?;
        let ino = ctx
            .alloc(1, goal)
            .first()
            .map(|r| r.0)
            .ok_or(Errno::ENOSPC)?;
        let now = Ts::now();
        // setgid directories pass their group on.
        let mut who = who;
        let mut mode = mode;
        if p.d.mode & libc::S_ISGID != 0 {
            who.gid = p.d.gid;
            if is_dir {
                mode |= libc::S_ISGID;
            }
        }
        let mut node = self.new_inode(ino, mode, who, if is_dir { ino } else { parent }, now);
        node.d.rdev = rdev;
        if is_dir {
            node.d.nlink = 2;
            node.d.parent = parent;
            node.dir = Some(DirIndex::new());
        }
        let mut w = Writes::new();
        if let Some(t) = symlink {
            node.d.symlink = t.to_vec();
            if long {
                self.store_long_target(&mut node, &mut ctx, &mut w)?;
            }
        }
        if open {
            node.open_count = 1;
        }
        // The reply hands the kernel its first reference.
        node.lookups = 1;
        let kind = node.kind();
        dir_add(&mut p, name, ino, kind, &mut ctx, &mut w)?;
        if is_dir {
            p.d.nlink += 1;
        }
        touch_dir(&mut p, now);
        put_inode(&mut p, Some(&mut ctx), &mut w)?;
        put_inode(&mut node, None, &mut w)?;
        let attr = node.attr();
        self.shard(ino)
            .lock()
            .insert(ino, Arc::new(Mutex::new(node)));
        if let Err(e) = self.commit(w, Some(ctx)) {
            self.forget_freed(ino);
            return Err(e);
        }
        Ok(attr)
    }

    /// Create a node (regular file, fifo, socket, device).
    pub fn mknod(
        &self,
        parent: u64,
        name: &[u8],
        mode: u32,
        rdev: u32,
        who: Caller,
    ) -> Result<Attr, Errno> {
        let t = mode & S_IFMT;
        let mode = if t == 0 { mode | S_IFREG } else { mode };
        if mode & S_IFMT == S_IFDIR || mode & S_IFMT == S_IFLNK {
            return Err(Errno::EINVAL);
        }
        self.create_node(parent, name, mode, rdev, who, None, false)
    }

    /// Create and open a regular file.
    pub fn create(&self, parent: u64, name: &[u8], mode: u32, who: Caller) -> Result<Attr, Errno> {
        self.create_node(parent, name, (mode & !S_IFMT) | S_IFREG, 0, who, None, true)
    }

    /// Create a directory.
    pub fn mkdir(&self, parent: u64, name: &[u8], mode: u32, who: Caller) -> Result<Attr, Errno> {
        self.create_node(
            parent,
            name,
            (mode & !S_IFMT) | S_IFDIR,
            0,
            who,
            None,
            false,
        )
    }

    /// Create a symlink.
    pub fn symlink(
        &self,
        parent: u64,
        name: &[u8],
        target: &[u8],
        who: Caller,
    ) -> Result<Attr, Errno> {
        self.create_node(parent, name, S_IFLNK | 0o777, 0, who, Some(target), false)
    }

    /// Add a hard link `newparent/newname` to `ino`.
    pub fn link(&self, ino: u64, newparent: u64, newname: &[u8]) -> Result<Attr, Errno> {
        self.writable()?;
        check_name(newname)?;
        let mut held = self.lock_sorted(&[ino, newparent])?;
        // No links yet: an O_TMPFILE file (the kernel links no other
        // unlinked inode), whose orphan entry goes with its first name.
        let mut unnamed = held.get(ino).d.nlink == 0;
        if unnamed {
            drop(held);
            held = self.lock_sorted(&[ino, newparent, self.layout.orphan])?;
            unnamed = held.get(ino).d.nlink == 0;
        }
        if held.get(ino).is_dir() {
            return Err(Errno::EPERM);
        }
        if held.get(ino).d.nlink >= MAX_LINKS {
            return Err(Errno::EMLINK);
        }
        {
            let p = held.get(newparent);
            self.ensure_dir(p)?;
            if p.d.nlink == 0 {
                return Err(Errno::ENOENT);
            }
            if p.dir.as_ref().and_then(|d| d.get(newname)).is_some() {
                return Err(Errno::EEXIST);
            }
        }
        let need = dir_need(held.get(newparent), newname.len());
        let mut ctx = self.alloc.prepare(need, newparent, &[])?;
        let now = Ts::now();
        let mut w = Writes::new();
        let kind = held.get(ino).kind();
        {
            let p = held.get(newparent);
            dir_add(p, newname, ino, kind, &mut ctx, &mut w)?;
            touch_dir(p, now);
            put_inode(p, Some(&mut ctx), &mut w)?;
        }
        if unnamed {
            self.unorphan(&mut held, ino, &mut w)?;
        }
        let attr = {
            let i = held.get(ino);
            i.d.nlink += 1;
            i.lookups += 1;
            i.d.ctime = now;
            put_inode(i, None, &mut w)?;
            i.attr()
        };
        self.commit(w, Some(ctx))?;
        Ok(attr)
    }

    // ---------------------------------------------------------------- removal

    /// Drop one link of `child` (already removed from its directory). Frees
    /// it, or parks it in the orphan directory while it is open. Returns the
    /// runs to free (to be named in `prepare`) and whether the orphan
    /// directory must be changed.
    fn unlink_plan(child: &Inode) -> (bool, Vec<(u64, u64)>) {
        let last = child.is_dir() || child.d.nlink <= 1;
        if !last {
            return (false, Vec::new());
        }
        if child.open_count > 0 {
            (true, Vec::new())
        } else {
            (false, owned_runs(child))
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn drop_link(
        &self,
        held: &mut Held,
        child: u64,
        orphan: u64,
        ctx: &mut AllocCtx<'_>,
        w: &mut Writes,
        now: Ts,
        freed: &mut Vec<u64>,
    ) -> Result<(), Errno> {
        let c = held.get(child);
        let last = c.is_dir() || c.d.nlink <= 1;
        c.d.ctime = now;
        if !last {
            c.d.nlink -= 1;
            put_inode(c, None, w)?;
            return Ok(());
        }
        c.d.nlink = 0;
        if c.open_count > 0 {
            put_inode(c, None, w)?;
            let kind = c.kind();
            let name = child.to_string();
            let o = held.get(orphan);
            dir_add(o, name.as_bytes(), child, kind, ctx, w)?;
            put_inode(o, Some(ctx), w)?;
        } else {
            for (s, l) in owned_runs(c) {
                ctx.free(s, l)?;
            }
            c.freed = true;
            freed.push(child);
        }
        Ok(())
    }

    fn remove(&self, parent: u64, name: &[u8], want_dir: bool) -> Result<(), Errno> {
        self.writable()?;
        if name.len() > NAME_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        if name == b"." {
            return Err(Errno::EINVAL);
        }
        if name == b".." {
            return Err(Errno::ENOTEMPTY);
        }
        let orphan = self.layout.orphan;
        loop {
            let mut held = self.lock_sorted(&[parent])?;
            let e = {
                let p = held.get(parent);
                self.ensure_dir(p)?;
                p.dir
                    .as_ref()
                    .and_then(|d| d.get(name))
                    .ok_or(Errno::ENOENT)?
            };
            if !self.try_add(&mut held, e.ino)? {
                drop(held);
                std::thread::yield_now();
                continue;
            }
            self.check_replaceable(held.get(e.ino), want_dir)?;
            let (to_orphan, frees) = Self::unlink_plan(held.get(e.ino));
            let mut need = 0;
            if to_orphan {
                if !self.try_add(&mut held, orphan)? {
                    drop(held);
                    std::thread::yield_now();
                    continue;
                }
                let o = held.get(orphan);
                self.ensure_dir(o)?;
                need += dir_need(o, 20);
            }
            let mut ctx = self.alloc.prepare(need, orphan, &frees)?;
            let now = Ts::now();
            let mut w = Writes::new();
            {
                let p = held.get(parent);
                p.dir.as_mut().ok_or(Errno::EIO)?.remove(name);
                put_dir_block(p, e.blk, &mut w)?;
                if want_dir {
                    p.d.nlink -= 1;
                }
                touch_dir(p, now);
                put_inode(p, None, &mut w)?;
            }
            let mut freed = Vec::new();
            self.drop_link(&mut held, e.ino, orphan, &mut ctx, &mut w, now, &mut freed)?;
            self.commit(w, Some(ctx))?;
            for f in freed {
                self.forget_freed(f);
            }
            return Ok(());
        }
    }

    /// Remove a non-directory.
    pub fn unlink(&self, parent: u64, name: &[u8]) -> Result<(), Errno> {
        self.remove(parent, name, false)
    }

    /// Remove an empty directory.
    pub fn rmdir(&self, parent: u64, name: &[u8]) -> Result<(), Errno> {
        self.remove(parent, name, true)
    }

    /// Is `ino` `anc` or below it? Walks `..` links.
    fn is_under(&self, held: &mut Held, mut ino: u64, anc: u64) -> Result<Try<bool>, Errno> {
        let root = self.root();
        for _ in 0..100_000 {
            if ino == anc {
                return Ok(Try::Done(true));
            }
            if ino == root {
                return Ok(Try::Done(false));
            }
            let next = if held.has(ino) {
                held.get(ino).d.parent
            } else {
                match self.try_lock(ino)? {
                    Try::Done(g) => g.d.parent,
                    Try::Retry => return Ok(Try::Retry),
                }
            };
            if next == ino {
                return Ok(Try::Done(false));
            }
            ino = next;
        }
        Err(Errno::EIO)
    }

    /// Rename `parent/name` to `newparent/newname`, with
    /// [`RENAME_NOREPLACE`] or [`RENAME_EXCHANGE`].
    pub fn rename(
        &self,
        parent: u64,
        name: &[u8],
        newparent: u64,
        newname: &[u8],
        flags: u32,
    ) -> Result<(), Errno> {
        self.writable()?;
        if flags & !(RENAME_NOREPLACE | RENAME_EXCHANGE) != 0
            || flags == RENAME_NOREPLACE | RENAME_EXCHANGE
        {
            return Err(Errno::EINVAL);
        }
        if name.len() > NAME_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        check_name(newname).map_err(|e| if e == Errno::EEXIST { Errno::EINVAL } else { e })?;
        if name == b"." || name == b".." {
            return Err(Errno::EINVAL);
        }
        let orphan = self.layout.orphan;
        let _cross = (parent != newparent).then(|| self.rename_lock.lock());
        loop {
            let mut held = self.lock_sorted(&[parent, newparent])?;
            self.ensure_dir(held.get(parent))?;
            self.ensure_dir(held.get(newparent))?;
            let src = held
                .get(parent)
                .dir
                .as_ref()
                .and_then(|d| d.get(name))
                .ok_or(Errno::ENOENT)?;
            let dst = held
                .get(newparent)
                .dir
                .as_ref()
                .and_then(|d| d.get(newname));
            if flags & RENAME_NOREPLACE != 0 && dst.is_some() {
                return Err(Errno::EEXIST);
            }
            if flags & RENAME_EXCHANGE != 0 && dst.is_none() {
                return Err(Errno::ENOENT);
            }
            if dst.is_some_and(|d| d.ino == src.ino) {
                return Ok(());
            }
            if !self.try_add(&mut held, src.ino)? {
                drop(held);
                std::thread::yield_now();
                continue;
            }
            if let Some(d) = dst {
                if !self.try_add(&mut held, d.ino)? {
                    drop(held);
                    std::thread::yield_now();
                    continue;
                }
            }
            let src_dir = held.get(src.ino).is_dir();
            let dst_dir = dst.map(|d| held.get(d.ino).is_dir());
            // A directory may not move below itself.
            if parent != newparent {
                let mut retry = false;
                for (moving, is_dir, into) in [
                    (src.ino, src_dir, newparent),
                    (
                        dst.map(|d| d.ino).unwrap_or(0),
                        dst_dir.unwrap_or(false) && flags & RENAME_EXCHANGE != 0,
                        parent,
                    ),
                ] {
                    if !is_dir {
                        continue;
                    }
                    match self.is_under(&mut held, into, moving)? {
                        Try::Done(true) => return Err(Errno::EINVAL),
                        Try::Done(false) => {}
                        Try::Retry => retry = true,
                    }
                }
                if retry {
                    drop(held);
                    std::thread::yield_now();
                    continue;
                }
            }
            if src_dir && held.get(newparent).d.nlink >= MAX_LINKS && parent != newparent {
                return Err(Errno::EMLINK);
            }
            let now = Ts::now();
            let mut w = Writes::new();
            if flags & RENAME_EXCHANGE != 0 {
                let dst = dst.ok_or(Errno::ENOENT)?;
                let dst_dir = dst_dir.unwrap_or(false);
                held.get(parent)
                    .dir
                    .as_mut()
                    .ok_or(Errno::EIO)?
                    .retarget(name, dst.ino, dst.kind);
                held.get(newparent)
                    .dir
                    .as_mut()
                    .ok_or(Errno::EIO)?
                    .retarget(newname, src.ino, src.kind);
                put_dir_block(held.get(parent), src.blk, &mut w)?;
                put_dir_block(held.get(newparent), dst.blk, &mut w)?;
                if parent != newparent {
                    if src_dir {
                        held.get(src.ino).d.parent = newparent;
                    }
                    if dst_dir {
                        held.get(dst.ino).d.parent = parent;
                    }
                    let delta = i64::from(src_dir) - i64::from(dst_dir);
                    let p = held.get(parent);
                    p.d.nlink = (i64::from(p.d.nlink) - delta) as u32;
                    let np = held.get(newparent);
                    np.d.nlink = (i64::from(np.d.nlink) + delta) as u32;
                }
                for ino in [src.ino, dst.ino] {
                    let i = held.get(ino);
                    i.d.ctime = now;
                    put_inode(i, None, &mut w)?;
                }
                for ino in [parent, newparent] {
                    let p = held.get(ino);
                    touch_dir(p, now);
                    put_inode(p, None, &mut w)?;
                }
                self.commit(w, None)?;
                return Ok(());
            }
            // Plain rename, perhaps replacing `dst`.
            let mut frees = Vec::new();
            let mut need = 0;
            let mut to_orphan = false;
            if let Some(d) = dst {
                self.check_replaceable(held.get(d.ino), src_dir)?;
                let (o, f) = Self::unlink_plan(held.get(d.ino));
                to_orphan = o;
                frees = f;
            } else {
                need += dir_need(held.get(newparent), newname.len());
            }
            if to_orphan {
                if !self.try_add(&mut held, orphan)? {
                    drop(held);
                    std::thread::yield_now();
                    continue;
                }
                let o = held.get(orphan);
                self.ensure_dir(o)?;
                need += dir_need(o, 20);
            }
            let mut ctx = self.alloc.prepare(need, newparent, &frees)?;
            held.get(parent)
                .dir
                .as_mut()
                .ok_or(Errno::EIO)?
                .remove(name);
            put_dir_block(held.get(parent), src.blk, &mut w)?;
            if crate::bugs::active("rename_split") {
                // Injected bug: the source directory's block goes in a
                // transaction of its own, before the target's.
                self.commit(std::mem::take(&mut w), None)?;
            }
            if let Some(d) = dst {
                let e = held
                    .get(newparent)
                    .dir
                    .as_mut()
                    .ok_or(Errno::EIO)?
                    .retarget(newname, src.ino, src.kind)
                    .ok_or(Errno::EIO)?;
                put_dir_block(held.get(newparent), e.blk, &mut w)?;
                let mut freed = Vec::new();
                let dst_dir = dst_dir.unwrap_or(false);
                self.drop_link(&mut held, d.ino, orphan, &mut ctx, &mut w, now, &mut freed)?;
                if dst_dir {
                    held.get(newparent).d.nlink -= 1;
                }
                self.commit_rename_tail(
                    &mut held, src.ino, src_dir, parent, newparent, now, &mut ctx, &mut w,
                )?;
                self.commit(w, Some(ctx))?;
                for f in freed {
                    self.forget_freed(f);
                }
                return Ok(());
            }
            dir_add(
                held.get(newparent),
                newname,
                src.ino,
                src.kind,
                &mut ctx,
                &mut w,
            )?;
            self.commit_rename_tail(
                &mut held, src.ino, src_dir, parent, newparent, now, &mut ctx, &mut w,
            )?;
            self.commit(w, Some(ctx))?;
            return Ok(());
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn commit_rename_tail(
        &self,
        held: &mut Held,
        src: u64,
        src_dir: bool,
        parent: u64,
        newparent: u64,
        now: Ts,
        ctx: &mut AllocCtx<'_>,
        w: &mut Writes,
    ) -> Result<(), Errno> {
        if src_dir && parent != newparent {
            held.get(src).d.parent = newparent;
            held.get(parent).d.nlink -= 1;
            held.get(newparent).d.nlink += 1;
        }
        let s = held.get(src);
        s.d.ctime = now;
        put_inode(s, None, w)?;
        for ino in [parent, newparent] {
            let p = held.get(ino);
            touch_dir(p, now);
            put_inode(p, Some(ctx), w)?;
        }
        Ok(())
    }

    // ---------------------------------------------------------------- open files

    /// A file was opened.
    pub fn open(&self, ino: u64) -> Result<Attr, Errno> {
        let mut g = self.lock(ino)?;
        g.open_count += 1;
        Ok(g.attr())
    }

    /// A file was closed for the last time; frees it if it was unlinked.
    pub fn release(&self, ino: u64) -> Result<(), Errno> {
        let orphan = self.layout.orphan;
        loop {
            let arc = match self.shard(ino).lock().get(&ino) {
                Some(a) => a.clone(),
                None => return Ok(()),
            };
            let mut held = Held {
                guards: vec![(ino, arc.lock_arc())],
            };
            let g = held.get(ino);
            if g.freed {
                return Ok(());
            }
            g.open_count = g.open_count.saturating_sub(1);
            if g.open_count > 0 {
                return Ok(());
            }
            if g.d.nlink > 0 {
                // Forgotten while open: it may leave the cache now.
                let forgotten = g.lookups == 0;
                drop(held);
                drop(arc);
                if forgotten {
                    self.evict(ino);
                }
                return Ok(());
            }
            if self.writable().is_err() {
                return Ok(());
            }
            // Last close of an unlinked file: free it and its orphan entry.
            if !self.try_add(&mut held, orphan)? {
                held.get(ino).open_count += 1;
                drop(held);
                std::thread::yield_now();
                continue;
            }
            self.ensure_dir(held.get(orphan))?;
            let name = ino.to_string();
            let frees = owned_runs(held.get(ino));
            let mut ctx = self.alloc.prepare(0, 0, &frees)?;
            let mut w = Writes::new();
            if let Some(e) = held
                .get(orphan)
                .dir
                .as_mut()
                .and_then(|d| d.remove(name.as_bytes()))
            {
                put_dir_block(held.get(orphan), e.blk, &mut w)?;
            }
            for (s, l) in frees {
                ctx.free(s, l)?;
            }
            held.get(ino).freed = true;
            self.commit(w, Some(ctx))?;
            self.forget_freed(ino);
            return Ok(());
        }
    }

    fn free_orphans(&self) -> Result<u64, Errno> {
        let orphan = self.layout.orphan;
        let entries = self.readdir(orphan, 2, usize::MAX)?;
        let mut n = 0;
        for e in entries {
            let arc = Arc::new(Mutex::new(self.load(e.ino)?));
            let mut held = Held {
                guards: vec![(orphan, self.lock(orphan)?), (e.ino, arc.lock_arc())],
            };
            let frees = if held.get(e.ino).d.nlink == 0 {
                owned_runs(held.get(e.ino))
            } else {
                Vec::new()
            };
            let mut ctx = self.alloc.prepare(0, 0, &frees)?;
            let mut w = Writes::new();
            let blk = held
                .get(orphan)
                .dir
                .as_mut()
                .and_then(|d| d.remove(&e.name))
                .ok_or(Errno::EIO)?
                .blk;
            put_dir_block(held.get(orphan), blk, &mut w)?;
            for (s, l) in frees {
                ctx.free(s, l)?;
            }
            self.commit(w, Some(ctx))?;
            n += 1;
        }
        Ok(n)
    }

    // ---------------------------------------------------------------- data

    /// Write `data` at `offset`; returns the bytes written. Clears setuid,
    /// setgid (if group-executable) and `security.capability`, as a write
    /// by an unprivileged process does.
    pub fn write(&self, ino: u64, offset: u64, data: &[u8]) -> Result<u32, Errno> {
        self.write_as(ino, offset, data, true)
    }

    /// [`write`](Self::write), saying whether the writer lacks the
    /// privilege to keep setuid/setgid and file capabilities (`kill_priv`:
    /// the kernel's `FUSE_WRITE_KILL_SUIDGID`; a process with CAP_FSETID
    /// keeps them, as on other Linux file systems).
    pub fn write_as(
        &self,
        ino: u64,
        offset: u64,
        data: &[u8],
        kill_priv: bool,
    ) -> Result<u32, Errno> {
        self.writable()?;
        let mut g = self.lock(ino)?;
        if g.is_dir() {
            return Err(Errno::EISDIR);
        }
        if data.is_empty() {
            return Ok(0);
        }
        let end = offset.checked_add(data.len() as u64).ok_or(Errno::EFBIG)?;
        if end > MAX_FILE_SIZE {
            return Err(Errno::EFBIG);
        }
        let first = offset / BS;
        let last = (end - 1) / BS;
        // What must be allocated, and how many new runs at most.
        let mut missing = 0u64;
        let mut converts = 0usize;
        let mut l = first;
        while l <= last {
            match g.ext.lookup(l) {
                Some((_, unw, left)) => {
                    let n = left.min(last - l + 1);
                    if unw {
                        converts += 2;
                    }
                    l += n;
                }
                None => {
                    missing += 1;
                    l += 1;
                }
            }
        }
        let added_runs = if missing > 0 {
            missing.min(64) as usize + 2
        } else {
            0
        } + converts;
        let need = missing
            + if added_runs > 0 {
                ext_slack(&g, added_runs.max(missing as usize))
            } else {
                0
            };
        let goal = g.ext.goal(first).unwrap_or(ino + 1);
        // Written runs may merge back into fewer: hold the chain's groups
        // so the blocks it no longer needs are freed.
        let shrink = if converts > 0 {
            g.chain.runs()
        } else {
            Vec::new()
        };
        let mut ctx = if need > 0 || !shrink.is_empty() {
            Some(self.alloc.prepare(need, goal, &shrink)?)
        } else {
            None
        };
        let mut w = Writes::new();
        let mut buf = vec![0u8; BLOCK_SIZE];
        for lblk in first..=last {
            let bstart = lblk * BS;
            let lo = offset.max(bstart);
            let hi = end.min(bstart + BS);
            let mapping = g.ext.lookup(lblk);
            let pblk = match mapping {
                Some((p, unw, _)) => {
                    if unw {
                        g.ext.punch(lblk, 1);
                        g.ext.insert(lblk, p, 1, false);
                    }
                    p
                }
                None => {
                    let ctx = ctx.as_mut().ok_or(Errno::EIO)?;
                    let goal = g.ext.goal(lblk).unwrap_or(ino + 1);
                    let run = ctx.alloc(1, goal);
                    let (p, _) = *run.first().ok_or(Errno::ENOSPC)?;
                    g.ext.insert(lblk, p, 1, false);
                    p
                }
            };
            let whole = lo == bstart && hi == bstart + BS;
            if whole {
                let o = (lo - offset) as usize;
                w.insert(pblk, data[o..o + BLOCK_SIZE].to_vec());
                continue;
            }
            if matches!(mapping, Some((_, false, _))) && bstart < g.d.size {
                self.store.read(pblk, &mut buf)?;
                // Bytes past EOF must read back as zero after an extension.
                if g.d.size < bstart + BS && g.d.size > bstart {
                    let keep = (g.d.size - bstart) as usize;
                    buf[keep..].fill(0);
                }
            } else {
                buf.fill(0);
            }
            let o = (lo - offset) as usize;
            let n = (hi - lo) as usize;
            buf[(lo - bstart) as usize..(lo - bstart) as usize + n]
                .copy_from_slice(&data[o..o + n]);
            w.insert(pblk, buf.clone());
        }
        let now = Ts::now();
        g.d.size = g.d.size.max(end);
        g.d.mtime = now;
        g.d.ctime = now;
        if kill_priv {
            self.kill_priv(&mut g, &mut w)?;
        }
        put_inode(&mut g, ctx.as_mut(), &mut w)?;
        self.commit(w, ctx)?;
        Ok(data.len() as u32)
    }

    /// What a write, truncate or chown by an unprivileged process does to a
    /// file's privileges (Linux's `file_remove_privs`): drop setuid, setgid
    /// when the group may execute (otherwise it marks mandatory locking),
    /// and the `security.capability` xattr. Adds the xattr block to `w`
    /// if it changed.
    fn kill_priv(&self, g: &mut Inode, w: &mut Writes) -> Result<(), Errno> {
        if g.is_dir() {
            return Ok(());
        }
        g.d.mode &= !libc::S_ISUID;
        if g.d.mode & libc::S_IXGRP != 0 {
            g.d.mode &= !libc::S_ISGID;
        }
        if g.d.xattr_blk == 0 {
            return Ok(());
        }
        self.ensure_xattrs(g)?;
        let map = g.xattrs.as_mut().ok_or(Errno::EIO)?;
        if map.remove(&b"security.capability"[..]).is_some() {
            g.d.ctime = Ts::now();
            w.insert(
                g.d.xattr_blk,
                encode_xattrs(
                    g.d.ino,
                    map.iter().map(|(k, v)| (k.as_slice(), v.as_slice())),
                ),
            );
        }
        Ok(())
    }

    /// Runs of device blocks that `[lblk, ∞)` maps to.
    fn runs_from(ext: &ExtentMap, lblk: u64) -> Vec<(u64, u64)> {
        let mut probe = ext.clone();
        probe.punch(lblk, u64::MAX - lblk)
    }

    fn runs_in(ext: &ExtentMap, lblk: u64, count: u64) -> Vec<(u64, u64)> {
        let mut probe = ext.clone();
        probe.punch(lblk, count)
    }

    /// Zero `[from, to)` inside one block of `g` (if it holds written data).
    fn zero_partial(&self, g: &Inode, from: u64, to: u64, w: &mut Writes) -> Result<(), Errno> {
        if from >= to {
            return Ok(());
        }
        let lblk = from / BS;
        if let Some((pblk, false, _)) = g.ext.lookup(lblk) {
            let mut buf = match w.get(&pblk) {
                Some(b) => b.clone(),
                None => self.read_block(pblk)?,
            };
            let a = (from - lblk * BS) as usize;
            let b = (to - lblk * BS) as usize;
            buf[a..b].fill(0);
            w.insert(pblk, buf);
        }
        Ok(())
    }

    /// Change attributes (chmod, chown, truncate, utimens).
    pub fn setattr(&self, ino: u64, set: SetAttr) -> Result<Attr, Errno> {
        self.writable()?;
        let mut g = self.lock(ino)?;
        let now = Ts::now();
        let mut w = Writes::new();
        let mut ctx = None;
        if let Some(size) = set.size {
            if g.is_dir() {
                return Err(Errno::EISDIR);
            }
            if size > MAX_FILE_SIZE {
                return Err(Errno::EFBIG);
            }
            if size < g.d.size {
                let keep_blocks = size.div_ceil(BS);
                let frees = Self::runs_from(&g.ext, keep_blocks);
                let lock = [frees.clone(), g.chain.runs()].concat();
                let mut c = self.alloc.prepare(0, 0, &lock)?;
                if size % BS != 0 {
                    self.zero_partial(&g, size, (size / BS + 1) * BS, &mut w)?;
                }
                g.ext.punch(keep_blocks, u64::MAX - keep_blocks);
                for (s, l) in frees {
                    c.free(s, l)?;
                }
                ctx = Some(c);
            } else if size > g.d.size && g.d.size % BS != 0 {
                // Bytes between the old EOF and the block end must read as zero.
                let old = g.d.size;
                self.zero_partial(&g, old, (old / BS + 1) * BS, &mut w)?;
            }
            if size != g.d.size {
                g.d.size = size;
                g.d.mtime = now;
            }
        }
        // A chown always drops the file's privileges (as Linux does, even
        // for root); a truncate does when the caller is unprivileged.
        let chown = set.uid.is_some() || set.gid.is_some();
        if chown || (set.size.is_some() && set.kill_priv) {
            self.kill_priv(&mut g, &mut w)?;
        }
        if let Some(uid) = set.uid {
            g.d.uid = uid;
        }
        if let Some(gid) = set.gid {
            g.d.gid = gid;
        }
        if let Some(mode) = set.mode {
            g.d.mode = (g.d.mode & S_IFMT) | (mode & !S_IFMT);
        }
        let resolve = |t: SetTime| match t {
            SetTime::At(t) => t,
            SetTime::Now => now,
        };
        if let Some(t) = set.atime {
            g.d.atime = resolve(t);
        }
        if let Some(t) = set.mtime {
            g.d.mtime = resolve(t);
        }
        g.d.ctime = now;
        put_inode(&mut g, ctx.as_mut(), &mut w)?;
        self.commit(w, ctx)?;
        Ok(g.attr())
    }

    /// Preallocate (mode 0 or `FALLOC_FL_KEEP_SIZE`), punch a hole
    /// (`PUNCH_HOLE|KEEP_SIZE`) or zero a range (`ZERO_RANGE`).
    pub fn fallocate(&self, ino: u64, offset: u64, length: u64, mode: i32) -> Result<(), Errno> {
        self.writable()?;
        let keep = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
        let punch = mode & libc::FALLOC_FL_PUNCH_HOLE != 0;
        let zero = mode & libc::FALLOC_FL_ZERO_RANGE != 0;
        if mode
            & !(libc::FALLOC_FL_KEEP_SIZE | libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_ZERO_RANGE)
            != 0
        {
            return Err(Errno::EOPNOTSUPP);
        }
        if punch && (!keep || zero) {
            return Err(Errno::EOPNOTSUPP);
        }
        if length == 0 {
            return Err(Errno::EINVAL);
        }
        let end = offset.checked_add(length).ok_or(Errno::EFBIG)?;
        if end > MAX_FILE_SIZE {
            return Err(Errno::EFBIG);
        }
        let mut g = self.lock(ino)?;
        if g.is_dir() {
            return Err(Errno::EISDIR);
        }
        if g.d.mode & S_IFMT != S_IFREG {
            return Err(Errno(libc::ENODEV));
        }
        let now = Ts::now();
        let mut w = Writes::new();
        let first_whole = offset.div_ceil(BS);
        let end_whole = end / BS;
        if punch || zero {
            // Zero partial edges, unmap whole blocks (zero range then
            // re-reserves them as unwritten).
            let whole = end_whole.saturating_sub(first_whole);
            let frees = if whole > 0 {
                Self::runs_in(&g.ext, first_whole, whole)
            } else {
                Vec::new()
            };
            let realloc = if zero { whole } else { 0 };
            let slack = if realloc > 0 {
                ext_slack(&g, realloc.min(64) as usize + 2)
            } else {
                0
            };
            let lock = [frees.clone(), g.chain.runs()].concat();
            let mut ctx = self.alloc.prepare(
                realloc + slack,
                g.ext.goal(first_whole).unwrap_or(ino + 1),
                &lock,
            )?;
            if first_whole * BS > offset || whole == 0 {
                let a = offset;
                let b = end.min((offset / BS + 1) * BS);
                self.zero_partial(&g, a, b, &mut w)?;
            }
            if end_whole * BS < end && end_whole >= first_whole && end_whole * BS >= offset {
                self.zero_partial(&g, end_whole * BS, end, &mut w)?;
            }
            if whole > 0 {
                g.ext.punch(first_whole, whole);
                for (s, l) in frees {
                    ctx.free(s, l)?;
                }
                if zero {
                    let mut lblk = first_whole;
                    while lblk < end_whole {
                        let goal = g.ext.goal(lblk).unwrap_or(ino + 1);
                        let runs = ctx.alloc(end_whole - lblk, goal);
                        if runs.is_empty() {
                            return Err(Errno::ENOSPC);
                        }
                        for (s, l) in runs {
                            g.ext.insert(lblk, s, l, true);
                            lblk += l;
                        }
                    }
                }
            }
            if zero && !keep && end > g.d.size {
                g.d.size = end;
            }
            g.d.mtime = now;
            g.d.ctime = now;
            put_inode(&mut g, Some(&mut ctx), &mut w)?;
            return self.commit(w, Some(ctx));
        }
        // Preallocate unwritten blocks in the holes.
        let first = offset / BS;
        let last = (end - 1) / BS;
        let mut holes = Vec::new();
        let mut l = first;
        while l <= last {
            match g.ext.lookup(l) {
                Some((_, _, left)) => l += left,
                None => {
                    let stop = g.ext.next_mapped(l).unwrap_or(u64::MAX).min(last + 1);
                    holes.push((l, stop - l));
                    l = stop;
                }
            }
        }
        let missing: u64 = holes.iter().map(|h| h.1).sum();
        let slack = if missing > 0 {
            ext_slack(&g, holes.len() + 64)
        } else {
            0
        };
        let mut ctx = self.alloc.prepare(
            missing + slack,
            g.ext.goal(first).unwrap_or(ino + 1),
            &g.chain.runs(),
        )?;
        for (mut lblk, count) in holes {
            let stop = lblk + count;
            while lblk < stop {
                let goal = g.ext.goal(lblk).unwrap_or(ino + 1);
                let runs = ctx.alloc(stop - lblk, goal);
                if runs.is_empty() {
                    return Err(Errno::ENOSPC);
                }
                for (s, n) in runs {
                    g.ext.insert(lblk, s, n, true);
                    lblk += n;
                }
            }
        }
        if !keep && end > g.d.size {
            g.d.size = end;
        }
        g.d.ctime = now;
        put_inode(&mut g, Some(&mut ctx), &mut w)?;
        self.commit(w, Some(ctx))
    }

    /// Make every finished operation durable (a journal commit).
    pub fn fsync(&self) -> Result<(), Errno> {
        self.store.sync()?;
        Ok(())
    }
}

impl Drop for FileSystem {
    fn drop(&mut self) {
        if let Err(e) = self.close() {
            tracing::error!("closing the file system: {e}");
        }
    }
}

/// Parameters for [`mkfs`].
#[derive(Clone, Debug, Default)]
pub struct MkfsOptions {
    /// Use only this many blocks of the device (default: all).
    pub blocks: Option<u64>,
}

/// Write a fresh, empty file system on `store`.
pub fn mkfs(store: &dyn Store, opts: &MkfsOptions) -> Result<Superblock, FsError> {
    let n = opts.blocks.unwrap_or(store.num_blocks());
    if n > store.num_blocks() {
        return Err(FsError::Invalid(format!(
            "{n} blocks requested but the device has {}",
            store.num_blocks()
        )));
    }
    if n < 64 {
        return Err(FsError::Invalid(format!(
            "device too small: {n} blocks of {BLOCK_SIZE} bytes (need at least 64)"
        )));
    }
    let bitmap_blocks = n.div_ceil(BITS_PER_GROUP);
    let data_start = 1 + bitmap_blocks;
    let root = data_start;
    let orphan = data_start + 1;
    let mut uuid = [0u8; 16];
    rand::Rng::fill(&mut rand::thread_rng(), &mut uuid[..]);
    let now = Ts::now();
    let sb = Superblock {
        version: VERSION,
        block_size: BLOCK_SIZE as u32,
        num_blocks: n,
        uuid,
        features_compat: FEATURES_COMPAT,
        features_incompat: 0,
        bitmap_start: 1,
        bitmap_blocks,
        data_start,
        root_ino: root,
        orphan_ino: orphan,
        state: STATE_CLEAN,
        mount_count: 0,
        mkfs_time: now.sec as u64,
        gen_seed: u64::from_le_bytes(uuid[..8].try_into().expect("8 bytes")) & 0xffff_ffff,
    };
    let used: Vec<u64> = (0..data_start + 2).collect();
    let mut tx = store.begin();
    for (i, mut bm) in crate::alloc::initial_bitmaps(n, &used)
        .into_iter()
        .enumerate()
    {
        seal_bitmap(&mut bm);
        tx.write(1 + i as u64, &bm)?;
    }
    for (ino, parent, mode) in [
        (root, root, S_IFDIR | 0o755),
        (orphan, orphan, S_IFDIR | 0o700),
    ] {
        let d = DiskInode {
            ino,
            generation: 0,
            mode,
            uid: 0,
            gid: 0,
            nlink: 2,
            size: 0,
            atime: now,
            mtime: now,
            ctime: now,
            crtime: now,
            rdev: 0,
            flags: 0,
            xattr_blk: 0,
            parent,
            nextents: 0,
            overflow: 0,
            inline_extents: Vec::new(),
            symlink: Vec::new(),
        };
        tx.write(ino, &d.encode())?;
    }
    tx.finish()?;
    store.checkpoint()?;
    store.write_super(&sb.encode())?;
    Ok(sb)
}
