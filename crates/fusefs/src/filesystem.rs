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
//!
//! This file holds the types, mount/close and the transaction commit; the
//! operations live in submodules by responsibility: `icache` (the inode
//! cache and locking), `inode_io` (inodes and directories to and from their
//! stored form), `namespace` (lookup, readdir, create, link, unlink),
//! `rename`, `open` (open counts, orphans), `data` (read, write, truncate,
//! fallocate), `xattr`, `symlink`, `seek`, `tmpfile`, and `mkfs`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::{ArcMutexGuard, Mutex, RawMutex};

use crate::alloc::{AllocCtx, Allocator};
use crate::chain::Chain;
use crate::dir::DirIndex;
use crate::error::{Damage, Errno, FsError, FsFormatError, FsStoreError};
use crate::extent::ExtentMap;
use crate::format::*;
use crate::stagestats::{BlockKind, StageCounts, StageStats, TxCount};
use crate::store::Store;

mod atime;
mod data;
mod icache;
mod inode_io;
mod mkfs;
mod modes;
mod namespace;
mod open;
mod posix_acl;
mod rename;
mod seek;
mod symlink;
mod tmpfile;
mod trim;
mod undo;
mod xattr;

pub use atime::{Atime, AtimePolicy};
use inode_io::{ext_slack, owned_runs, put_inode, LoadErr};
pub use mkfs::{mkfs, MkfsOptions};
pub use modes::{RemountProbe, SyncMode};
use namespace::{check_name, dir_add, dir_add_at, dir_need, put_dir_block, touch_dir};
pub use seek::Seek;
pub use trim::{AUTO_TRIM_BLOCKS, FITRIM};

const BS: u64 = BLOCK_SIZE as u64;
/// Largest file: file block numbers are stored in 32 bits.
pub const MAX_FILE_SIZE: u64 = (u32::MAX as u64) * BS;
const MAX_LINKS: u32 = 65000;
/// Smallest write (in whole new blocks) that takes the ordered-mode path:
/// below it, journaling the data costs less than the device flush.
pub const DEFAULT_ORDERED_MIN_BLOCKS: u64 = 16;
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
/// `rename` flag: leave a whiteout (character device 0:0) at the source.
pub const RENAME_WHITEOUT: u32 = 4;

/// An inode as kept in memory.
pub(crate) struct Inode {
    pub d: DiskInode,
    pub ext: ExtentMap,
    pub dir: Option<DirIndex>,
    pub xattrs: Option<BTreeMap<Vec<u8>, Vec<u8>>>,
    /// The xattr chain's blocks after the first (`d.xattr_blk`), read
    /// with the inode.
    pub xattr_more: Vec<u64>,
    pub open_count: u32,
    pub freed: bool,
    /// References the kernel holds (entries it was given minus FORGETs);
    /// at zero, with the file closed, the inode may leave the cache.
    pub lookups: u64,
    /// Under `lazytime`: since when (seconds) the atime in memory is
    /// newer than the stored one (see `atime.rs`).
    pub lazy_atime_since: Option<i64>,
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
            + u64::from(self.d.xattr_blk != 0)
            + self.xattr_more.len() as u64;
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

pub(crate) use crate::writes::Writes;

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
    /// [`close`](Self::close) began (it still writes lazy atimes).
    closing: AtomicBool,
    closed: AtomicBool,
    clean: AtomicBool,
    /// Orphans freed while mounting (open-unlinked files of a crashed run).
    pub orphans_freed: u64,
    /// Ordered-mode data (see `data.rs`): a write of at least this many
    /// whole, newly allocated blocks sends them straight home; 0 = always
    /// journal data.
    ordered_min_blocks: AtomicU64,
    /// Bumped by every transaction that frees blocks, before they can be
    /// allocated again.
    free_gen: AtomicU64,
    /// The `free_gen` a journal commit has covered.
    free_synced: AtomicU64,
    /// A trim of freed space is running (see `trim.rs`).
    trimming: AtomicBool,
    /// Freed space is discarded online and at unmount.
    auto_trim: AtomicBool,
    /// Tells the kernel an inode's cached attributes are stale (see
    /// [`FileSystem::set_attr_invalidator`]).
    attr_invalidator: OnceLock<AttrInvalidator>,
    /// Switched read-only (see `modes.rs`).
    read_only: AtomicBool,
    /// Asks the mount whether it is read-only now (see `modes.rs`).
    remount_probe: OnceLock<RemountProbe>,
    /// A [`SyncMode`] as a number.
    sync_mode: AtomicU8,
    /// Blocks and bytes handed to the store, by kind.
    staged: StageStats,
    /// An [`AtimePolicy`] as a number.
    atime: AtomicU8,
    /// Inodes whose atime `lazytime` keeps in memory (see `atime.rs`).
    lazy_atimes: Mutex<HashSet<u64>>,
}

/// A transport's way to drop the kernel's cached attributes of an inode
/// (FUSE `NOTIFY_INVAL_INODE`); called with ptsd-fs inode numbers.
pub type AttrInvalidator = Box<dyn Fn(u64) + Send + Sync>;

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
            closing: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            clean: AtomicBool::new(false),
            orphans_freed: 0,
            ordered_min_blocks: AtomicU64::new(DEFAULT_ORDERED_MIN_BLOCKS),
            free_gen: AtomicU64::new(0),
            free_synced: AtomicU64::new(0),
            trimming: AtomicBool::new(false),
            auto_trim: AtomicBool::new(true),
            attr_invalidator: OnceLock::new(),
            read_only: AtomicBool::new(false),
            remount_probe: OnceLock::new(),
            sync_mode: AtomicU8::new(0),
            staged: StageStats::default(),
            // Nothing moves until the mount says (`ptsd mount` passes its
            // options, relatime by default): library users, the crash
            // checkers and fuzzers see the transactions they ask for.
            atime: AtomicU8::new(
                AtimePolicy {
                    atime: Atime::Noatime,
                    ..AtimePolicy::default()
                }
                .to_u8(),
            ),
            lazy_atimes: Mutex::new(HashSet::new()),
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
                return Err(FsFormatError::Corrupt {
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
        fs.write_super(&sb)?;
        fs.orphans_freed = fs
            .free_orphans()
            .map_err(|e| FsError::NeedsRepair(Damage::FreeingOrphans(e)))?;
        Ok(fs)
    }

    /// Checkpoint everything and mark the file system clean. Idempotent.
    pub fn close(&self) -> Result<(), FsError> {
        if self.closing.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        // The checkpoint (a commit first) before the trim: it would otherwise
        // write freed blocks' old journaled versions home over the
        // discards. What was freed then goes to the device as free, so the
        // next mount (or another user of the device) starts with an SSD
        // that knows it.
        if let Err(e) = self.flush_lazy_atimes() {
            tracing::warn!("writing lazy atimes at unmount: {e}");
        }
        self.closed.store(true, Ordering::SeqCst);
        self.store.checkpoint()?;
        self.trim_freed();
        self.store.close()?;
        if !self.failed.load(Ordering::SeqCst) {
            let mut sb = self.sb.lock();
            sb.state = STATE_CLEAN;
            self.write_super(&sb)?;
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

    /// Install the transport's attribute invalidation (once per mount).
    /// ptsd-fs calls it after it changed an inode's attributes in a way
    /// the kernel does not expect from the request it sent: setuid/setgid
    /// dropped by a write or fallocate (the kernel keeps its cached mode,
    /// and exec would use it).
    ///
    /// ```
    /// # use std::sync::{Arc, Mutex};
    /// # use ptsd_blockdev::MemDevice;
    /// # use ptsd_fs::{mkfs, Caller, DirectStore, FileSystem, MkfsOptions, SetAttr};
    /// # let dev = Arc::new(MemDevice::new(4096, 256).unwrap());
    /// # let store = Arc::new(DirectStore::new(dev).unwrap());
    /// # mkfs(&*store, &MkfsOptions::default()).unwrap();
    /// # let fs = FileSystem::mount(store).unwrap();
    /// let stale = Arc::new(Mutex::new(Vec::new()));
    /// let s = stale.clone();
    /// fs.set_attr_invalidator(Box::new(move |ino| s.lock().unwrap().push(ino)));
    /// let f = fs.create(fs.root(), b"f", 0o4755, Caller::default()).unwrap().ino;
    /// fs.write_as(f, 0, b"x", true).unwrap(); // an unprivileged write
    /// assert_eq!(*stale.lock().unwrap(), [f]);
    /// ```
    pub fn set_attr_invalidator(&self, f: AttrInvalidator) {
        if self.attr_invalidator.set(f).is_err() {
            tracing::warn!("attribute invalidator already set; keeping the first");
        }
    }

    /// The kernel's cached attributes of `ino` are stale.
    fn attrs_changed_behind_kernel(&self, ino: u64) {
        if let Some(f) = self.attr_invalidator.get() {
            f(ino);
        }
    }

    /// Whether transactions may still be written: not stopped by a failure
    /// nor closed (a read-only switch refuses changes, see `writable`, but
    /// internal cleanup may go on).
    fn can_commit(&self) -> bool {
        !self.failed.load(Ordering::Relaxed) && !self.closed.load(Ordering::Relaxed)
    }

    /// Whether changes are refused now: stopped by a failure, closing, or
    /// switched read-only (see `modes.rs`).
    fn refuses_changes(&self) -> bool {
        self.failed.load(Ordering::Relaxed)
            || self.closing.load(Ordering::Relaxed)
            || self.read_only.load(Ordering::Relaxed)
    }

    fn writable(&self) -> Result<(), Errno> {
        if self.refuses_changes() && !self.remounted_writable() {
            return Err(Errno::EROFS);
        }
        Ok(())
    }

    /// Write one operation's blocks as one transaction.
    fn commit(&self, w: Writes, ctx: Option<AllocCtx<'_>>) -> Result<(), Errno> {
        self.commit_ordered(w, Vec::new(), ctx)
    }

    /// [`commit`](Self::commit) with runs of file data blocks newly
    /// allocated by this transaction (`ordered`: first block, the run's
    /// bytes), which the store may write home first.
    fn commit_ordered(
        &self,
        w: Writes,
        ordered: Vec<(u64, Vec<u8>)>,
        mut ctx: Option<AllocCtx<'_>>,
    ) -> Result<(), Errno> {
        let mut count = TxCount::default();
        let data_start = self.layout.data_start;
        let res = (|| {
            let mut tx = self.store.begin();
            for (blk, data) in ordered {
                count.add(
                    BlockKind::OrderedData,
                    (data.len() / BS as usize) as u64,
                    data.len(),
                );
                tx.write_ordered(blk, data)?;
            }
            // Owned: a store that keeps blocks until later takes the
            // buffers instead of copying them.
            for (blk, data, crc) in w.into_blocks_with_crc() {
                count.add(BlockKind::of(blk, &data, data_start), 1, data.len());
                tx.write_owned(blk, data, crc)?;
            }
            if let Some(ctx) = &mut ctx {
                ctx.write_dirty(|blk, data, crc| {
                    count.add(BlockKind::Bitmap, 1, data.len());
                    tx.write_with_crc(blk, data, crc)
                })?;
            }
            tx.finish()
        })();
        match res {
            Ok(()) => {
                self.staged.add_tx(&count);
                if let Some(ctx) = ctx {
                    if ctx.freed_any() {
                        // Before the freed blocks can be allocated again
                        // (the groups are released when `ctx` goes).
                        self.free_gen.fetch_add(1, Ordering::SeqCst);
                    }
                    ctx.commit();
                }
                self.after_commit().inspect_err(|e| {
                    tracing::error!("sync mode: commit failed, file system is now read-only: {e}");
                    self.failed.store(true, Ordering::SeqCst);
                })
            }
            Err(e) => {
                // Like ext4's errors=remount-ro: this operation fails with
                // the cause's errno (ENOSPC if the device is full, else
                // EIO), every later change with EROFS until a remount.
                tracing::error!(
                    "transaction failed, file system is now read-only: {}",
                    ptsd_blockdev::ErrorChain(&e)
                );
                self.failed.store(true, Ordering::SeqCst);
                Err(e.errno())
            }
        }
    }

    /// Write the superblock `sb` (straight to the device), counted.
    fn write_super(&self, sb: &Superblock) -> Result<(), FsStoreError> {
        let b = sb.encode();
        let mut c = TxCount::default();
        c.add(BlockKind::Superblock, 1, b.len());
        self.staged.add(&c);
        self.store.write_super(&b)
    }

    /// Blocks and bytes this mount handed its store so far, by kind of
    /// block (see [`StageCounts`] for an example).
    pub fn stage_counts(&self) -> StageCounts {
        self.staged.snapshot()
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

    /// Write every finished operation to its home location (a journal
    /// commit and checkpoint), as the background checkpoint does, so the
    /// device alone holds the file system.
    pub fn checkpoint(&self) -> Result<(), Errno> {
        self.store.checkpoint()?;
        Ok(())
    }

    /// Make every finished operation durable (a journal commit).
    pub fn fsync(&self) -> Result<(), Errno> {
        self.flush_lazy_atimes()?;
        self.store.sync()?;
        Ok(())
    }
}

impl Drop for FileSystem {
    fn drop(&mut self) {
        if let Err(e) = self.close() {
            tracing::error!("closing the file system: {}", ptsd_blockdev::ErrorChain(&e));
        }
    }
}
