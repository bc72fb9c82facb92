// Over 800 lines: the check passes and the repairs that answer them share one walk's state (the inode map, the bitmaps being rebuilt); each repair sits beside its check.
//! fsck: walk every inode reachable from the root and orphan directories,
//! check every checksum, entry, link count and the allocation bitmaps, and
//! optionally repair.
//!
//! Repairs: entries naming unreadable or wrong-typed inodes are removed,
//! link counts are set to the counted links, orphans (unlinked inodes kept
//! for open files) are freed, and the bitmaps are rewritten from the blocks
//! actually in use.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use thiserror::Error;

use crate::alloc::{bit_in, set_bit_in};
use crate::error::{Damage, FsError, FsFormatError};
use crate::format::*;
use crate::store::Store;
use crate::writes::Writes;

/// Which use of a block a finding is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockOwner {
    /// The root or orphan directory's inode block.
    Directory,
    /// An inode's own block (its number).
    Inode(u64),
    /// A data block of an inode.
    Data(u64),
    /// A block of an inode's extent overflow chain.
    Extents(u64),
    /// An inode's xattr block.
    Xattrs(u64),
}

impl std::fmt::Display for BlockOwner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BlockOwner::Directory => write!(f, "directory"),
            BlockOwner::Inode(i) => write!(f, "inode {i}"),
            BlockOwner::Data(i) => write!(f, "inode {i} data"),
            BlockOwner::Extents(i) => write!(f, "inode {i} extents"),
            BlockOwner::Xattrs(i) => write!(f, "inode {i} xattrs"),
        }
    }
}

/// One problem fsck found; its `Display` is the report's line.
#[derive(Debug, Error)]
pub enum Finding {
    #[error("{owner}: block {block} outside the data area")]
    OutsideDataArea { owner: BlockOwner, block: u64 },
    #[error("{owner}: block {block} is used twice")]
    UsedTwice { owner: BlockOwner, block: u64 },
    /// An inode block, its extent chain or its xattr block that does not
    /// decode.
    #[error("inode {ino}: {error}")]
    BadInode { ino: u64, error: FsFormatError },
    #[error("directory {dir}: hole at block {lblk}")]
    DirHole { dir: u64, lblk: u64 },
    #[error("directory {dir}: size {size} past its last block (should be {want})")]
    DirSize { dir: u64, size: u64, want: u64 },
    /// A data block that does not match its checksum (bit rot, a lost or
    /// misdirected write): reads of it fail with EIO; repair punches it.
    #[error("inode {ino}: data block {block} (file block {lblk}) does not match its checksum")]
    DataChecksum { ino: u64, block: u64, lblk: u64 },
    #[error("directory {dir}: {error}")]
    BadDirBlock { dir: u64, error: FsFormatError },
    #[error("directory {dir}: entry {name:?} is a second link to directory {target}")]
    DirHardLink { dir: u64, name: String, target: u64 },
    #[error("directory {dir}: entry {name:?} names unreadable inode {ino}")]
    DanglingEntry { dir: u64, name: String, ino: u64 },
    #[error("directory {dir}: entry {name:?} has type {kind} but inode {ino} has mode {mode:o}")]
    EntryType {
        dir: u64,
        name: String,
        kind: u8,
        ino: u64,
        mode: u32,
    },
    #[error("directory {ino}: link count {have} should be {want}")]
    DirLinkCount { ino: u64, have: u32, want: u32 },
    #[error("directory {ino}: '..' is {parent_field} but it lives in {lives_in}")]
    DirParent {
        ino: u64,
        parent_field: u64,
        lives_in: u64,
    },
    #[error("inode {ino}: link count {have} should be {want}")]
    LinkCount { ino: u64, have: u32, want: u32 },
    #[error("orphan inode {ino} (nlink {nlink}) left by a crash with the file open")]
    Orphan { ino: u64, nlink: u32 },
    #[error("{0}")]
    BadBitmap(FsFormatError),
    #[error("bitmap: {count} blocks marked used but owned by nothing (first: {first:?})")]
    BitmapLeaked { count: u64, first: Vec<u64> },
    #[error("bitmap: {count} blocks in use but marked free (first: {first:?})")]
    BitmapUnmarked { count: u64, first: Vec<u64> },
}

/// What fsck found.
#[derive(Debug, Default)]
pub struct Report {
    /// One per problem (`Display` for the report's lines).
    pub problems: Vec<Finding>,
    pub files: u64,
    pub dirs: u64,
    pub used_blocks: u64,
    pub total_blocks: u64,
    pub repaired: bool,
}

impl Report {
    /// One line: clean or how many problems.
    pub fn summary(&self) -> String {
        let state = if self.problems.is_empty() {
            "clean".to_string()
        } else if self.repaired {
            format!("{} problems, repaired", self.problems.len())
        } else {
            format!("{} problems (run with --repair)", self.problems.len())
        };
        format!(
            "ptsd fsck: {state}; {} files, {} directories, {}/{} blocks used",
            self.files, self.dirs, self.used_blocks, self.total_blocks
        )
    }
}

struct Walker<'a> {
    store: &'a dyn Store,
    sb: Superblock,
    owned: Vec<u64>,
    problems: Vec<Finding>,
    writes: BTreeMap<u64, Vec<u8>>,
    repair: bool,
    /// Inodes whose xattr block does not decode: repair drops it (their
    /// extended attributes are lost; the block is freed).
    bad_xattrs: Vec<u64>,
    /// Data extents (inode, file block, length) outside the data area or
    /// on blocks another inode owns: repair punches them (holes).
    bad_extents: Vec<(u64, u64, u64)>,
    /// Directory blocks (directory, file block) with no usable block
    /// behind them: repair gives each a new empty block.
    dir_holes: Vec<(u64, u64)>,
    /// Directories whose size runs past their last block: repair cuts it.
    dir_sizes: Vec<(u64, u64)>,
}

/// An inode with its full extent list and overflow chain.
type Loaded = (DiskInode, Vec<Extent>, Vec<u64>);

struct Seen {
    mode: u32,
    nlink: u32,
    links: u32,
    subdirs: u32,
    parent_field: u64,
    parent_seen: Option<u64>,
    disk: DiskInode,
}

/// What the walk of the tree found: every reachable inode and the orphans.
#[derive(Default)]
struct Tree {
    seen: HashMap<u64, Seen>,
    /// Inodes in the orphan directory, with their link counts.
    orphans: Vec<(u64, u32)>,
}

/// An inode to rewrite: its counted link count and, for a directory whose
/// '..' is wrong, the parent it lives in.
type Fix = (u64, u32, Option<u64>);

impl Walker<'_> {
    fn read(&self, blk: u64) -> Result<Vec<u8>, FsError> {
        let mut b = vec![0u8; BLOCK_SIZE];
        self.store.read(blk, &mut b)?;
        Ok(b)
    }

    fn own(&mut self, blk: u64, owner: BlockOwner) -> bool {
        if blk < self.sb.data_start || blk >= self.sb.num_blocks {
            self.problems
                .push(Finding::OutsideDataArea { owner, block: blk });
            return false;
        }
        let (w, b) = ((blk / 64) as usize, blk % 64);
        if self.owned[w] & (1 << b) != 0 {
            self.problems.push(Finding::UsedTwice { owner, block: blk });
            return false;
        }
        self.owned[w] |= 1 << b;
        true
    }

    fn disown(&mut self, blk: u64) {
        self.owned[(blk / 64) as usize] &= !(1 << (blk % 64));
    }

    fn is_owned(&self, blk: u64) -> bool {
        self.owned[(blk / 64) as usize] & (1 << (blk % 64)) != 0
    }

    /// Inode `ino` as a repair has rewritten it so far, else as stored.
    fn inode(&self, ino: u64) -> Result<Option<DiskInode>, FsError> {
        let b = match self.writes.get(&ino) {
            Some(b) => b.clone(),
            None => self.read(ino)?,
        };
        Ok(DiskInode::decode(&b, ino).ok())
    }

    /// Load one inode and everything it owns. None: unreadable (a finding).
    fn load(&mut self, ino: u64) -> Result<Option<Loaded>, FsError> {
        if ino < self.sb.data_start || ino >= self.sb.num_blocks {
            return Ok(None);
        }
        let b = self.read(ino)?;
        let d = match DiskInode::decode(&b, ino) {
            Ok(d) => d,
            Err(error) => {
                self.problems.push(Finding::BadInode { ino, error });
                return Ok(None);
            }
        };
        let valid = self.sb.data_start..self.sb.num_blocks;
        let (ext, chain) = match crate::chain::load(&d, valid, |blk| self.read(blk)) {
            Ok((map, chain)) => (map.to_extents(), chain.blocks().to_vec()),
            Err(crate::chain::LoadError::Read(e)) => return Err(e),
            Err(crate::chain::LoadError::Corrupt(error)) => {
                self.problems.push(Finding::BadInode { ino, error });
                return Ok(None);
            }
        };
        Ok(Some((d, ext, chain)))
    }
}

/// Check the unmounted file system on `store`; with `repair`, fix it.
/// One pass after the other: superblock, the tree (directories and the
/// inodes they name), link counts, orphans, bitmaps; then the repair.
pub fn check(store: Arc<dyn Store>, repair: bool) -> Result<Report, FsError> {
    let sb = superblock(&*store)?;
    let mut w = Walker {
        store: &*store,
        owned: vec![0u64; sb.num_blocks.div_ceil(64) as usize],
        sb: sb.clone(),
        problems: Vec::new(),
        writes: BTreeMap::new(),
        repair,
        bad_xattrs: Vec::new(),
        bad_extents: Vec::new(),
        dir_holes: Vec::new(),
        dir_sizes: Vec::new(),
    };
    let mut report = Report {
        total_blocks: sb.num_blocks,
        ..Default::default()
    };
    let mut tree = Tree::default();
    let mut queue = special_dirs(&mut w, &mut tree)?;
    directories(&mut w, &mut tree, &mut queue, &mut report)?;
    let fixes = link_counts(&mut w, &tree);
    orphans(&mut w, &tree);
    let bitmaps = bitmaps(&mut w, &mut report)?;
    if repair && !w.problems.is_empty() {
        write_repairs(&mut w, &tree, fixes, bitmaps)?;
        report.repaired = true;
    }
    report.problems = w.problems;
    Ok(report)
}

/// Pass 1: the superblock (an unusable one is an error, not a finding).
fn superblock(store: &dyn Store) -> Result<Superblock, FsError> {
    let mut b = vec![0u8; BLOCK_SIZE];
    store.read(0, &mut b)?;
    Ok(Superblock::decode(&b, store.num_blocks())?)
}

/// The root and orphan directories, where the walk starts. Either one
/// unreadable cannot be repaired.
fn special_dirs(w: &mut Walker<'_>, tree: &mut Tree) -> Result<VecDeque<u64>, FsError> {
    let mut queue = VecDeque::new();
    for special in [w.sb.root_ino, w.sb.orphan_ino] {
        match w.load(special)? {
            Some((d, ext, chain)) => {
                w.own(special, BlockOwner::Directory);
                data_extents(w, special, &ext)?;
                for c in chain {
                    w.own(c, BlockOwner::Extents(special));
                }
                xattrs(w, &d)?;
                tree.seen.insert(
                    special,
                    Seen {
                        mode: d.mode,
                        nlink: d.nlink,
                        links: 0,
                        subdirs: 0,
                        parent_field: d.parent,
                        parent_seen: Some(special),
                        disk: d,
                    },
                );
                queue.push_back(special);
            }
            None => {
                return Err(FsError::NeedsRepair(Damage::Unrepairable {
                    what: if special == w.sb.root_ino {
                        "root"
                    } else {
                        "orphan"
                    },
                    ino: special,
                }))
            }
        }
    }
    Ok(queue)
}

/// Pass 2: every directory reachable from `queue`, breadth first: its
/// blocks, its entries, and (through [`inode`]) each inode they name.
fn directories(
    w: &mut Walker<'_>,
    tree: &mut Tree,
    queue: &mut VecDeque<u64>,
    report: &mut Report,
) -> Result<(), FsError> {
    while let Some(dir) = queue.pop_front() {
        report.dirs += 1;
        let d = tree.seen[&dir].disk.clone();
        let mut ext = d.inline_extents.clone();
        // Reload the full extent list (overflow included).
        if let Some((_, e, _)) = w.load(dir)? {
            ext = e;
        }
        let map = crate::extent::ExtentMap::from_extents(&ext);
        // Blocks past the last extent are not holes but a wrong size.
        let end = ext.last().map_or(0, |x| x.lblk + u64::from(x.len));
        let mut blocks = d.size / BLOCK_SIZE as u64;
        if blocks > end {
            let want = end * BLOCK_SIZE as u64;
            w.problems.push(Finding::DirSize {
                dir,
                size: d.size,
                want,
            });
            w.dir_sizes.push((dir, want));
            blocks = end;
        }
        for lblk in 0..blocks {
            let usable = map.lookup(lblk).map(|(pblk, _, _)| pblk).filter(|_| {
                !w.bad_extents
                    .iter()
                    .any(|&(i, l, n)| i == dir && (l..l + n).contains(&lblk))
            });
            let Some(pblk) = usable else {
                w.problems.push(Finding::DirHole { dir, lblk });
                w.dir_holes.push((dir, lblk));
                continue;
            };
            let raw = w.read(pblk)?;
            let entries = match decode_dir_block(&raw, pblk, dir) {
                Ok(e) => e,
                Err(error) => {
                    w.problems.push(Finding::BadDirBlock { dir, error });
                    if w.repair {
                        w.writes
                            .insert(pblk, encode_dir_block(dir, std::iter::empty()));
                    }
                    continue;
                }
            };
            let mut keep = Vec::new();
            let mut changed = false;
            for mut e in entries {
                let name = String::from_utf8_lossy(&e.name).into_owned();
                let mode = if let Some(s) = tree.seen.get_mut(&e.ino) {
                    let is_dir = s.mode & libc::S_IFMT == libc::S_IFDIR;
                    if is_dir {
                        w.problems.push(Finding::DirHardLink {
                            dir,
                            name,
                            target: e.ino,
                        });
                        changed = true;
                        continue;
                    }
                    s.links += 1;
                    s.mode
                } else {
                    match inode(w, tree, queue, report, dir, &e, name.clone())? {
                        Some(mode) => mode,
                        None => {
                            changed = true;
                            continue;
                        }
                    }
                };
                // The entry's type must be its inode's: repair rewrites it.
                let kind = ((mode & libc::S_IFMT) >> 12) as u8;
                if kind != e.kind {
                    w.problems.push(Finding::EntryType {
                        dir,
                        name,
                        kind: e.kind,
                        ino: e.ino,
                        mode,
                    });
                    e.kind = kind;
                    changed = true;
                }
                keep.push(e);
            }
            if changed && w.repair {
                w.writes.insert(
                    pblk,
                    encode_dir_block(
                        dir,
                        keep.iter()
                            .map(|e| (e.pos, e.ino, e.kind, e.name.as_slice())),
                    ),
                );
            }
        }
    }
    Ok(())
}

/// Pass 2, per inode: the first entry naming inode `e.ino` (in `dir`)
/// loads it, checks its xattrs and claims its blocks; returns its mode (the
/// caller checks the entry's type). `None`: the inode is unreadable and the
/// entry must go.
fn inode(
    w: &mut Walker<'_>,
    tree: &mut Tree,
    queue: &mut VecDeque<u64>,
    report: &mut Report,
    dir: u64,
    e: &RawDirent,
    name: String,
) -> Result<Option<u32>, FsError> {
    let Some((di, ext, chain)) = w.load(e.ino)? else {
        w.problems.push(Finding::DanglingEntry {
            dir,
            name,
            ino: e.ino,
        });
        return Ok(None);
    };
    let mode = di.mode;
    w.own(e.ino, BlockOwner::Inode(e.ino));
    data_extents(w, e.ino, &ext)?;
    for c in chain {
        w.own(c, BlockOwner::Extents(e.ino));
    }
    xattrs(w, &di)?;
    let is_dir = di.mode & libc::S_IFMT == libc::S_IFDIR;
    if is_dir {
        queue.push_back(e.ino);
        // A directory removed while open is no link of the orphan directory.
        if let Some(p) = tree.seen.get_mut(&dir).filter(|_| dir != w.sb.orphan_ino) {
            p.subdirs += 1;
        }
    } else {
        report.files += 1;
    }
    if dir == w.sb.orphan_ino {
        tree.orphans.push((e.ino, di.nlink));
    }
    tree.seen.insert(
        e.ino,
        Seen {
            mode: di.mode,
            nlink: di.nlink,
            links: 1,
            subdirs: 0,
            parent_field: di.parent,
            parent_seen: Some(dir),
            disk: di,
        },
    );
    Ok(Some(mode))
}

/// Claim inode `ino`'s data extents. One outside the data area or on a
/// block already claimed is a finding (one per extent) and, on repair, is
/// not claimed at all: the repair punches it, and the blocks stay with
/// their other owner or are freed. On a store that keeps block checksums,
/// every written data block is read and checked (a scrub).
fn data_extents(w: &mut Walker<'_>, ino: u64, ext: &[Extent]) -> Result<(), FsError> {
    for x in ext {
        let len = u64::from(x.len);
        let inside = x.pblk >= w.sb.data_start
            && x.pblk
                .checked_add(len)
                .is_some_and(|end| end <= w.sb.num_blocks);
        let owner = BlockOwner::Data(ino);
        if !inside {
            w.problems.push(Finding::OutsideDataArea {
                owner,
                block: x.pblk,
            });
            w.bad_extents.push((ino, x.lblk, len));
            continue;
        }
        if let Some(taken) = (x.pblk..x.pblk + len).find(|&b| w.is_owned(b)) {
            w.problems.push(Finding::UsedTwice {
                owner,
                block: taken,
            });
            w.bad_extents.push((ino, x.lblk, len));
            if w.repair {
                continue;
            }
        }
        for b in x.pblk..x.pblk + len {
            if !w.is_owned(b) {
                w.own(b, owner);
            }
        }
        if !w.store.checks_blocks() || x.unwritten {
            continue;
        }
        for k in 0..len {
            match w.store.verify(x.pblk + k) {
                Ok(()) => {}
                Err(crate::error::FsStoreError::Checksum { block, .. }) => {
                    w.problems.push(Finding::DataChecksum {
                        ino,
                        block,
                        lblk: x.lblk + k,
                    });
                    if w.repair {
                        w.bad_extents.push((ino, x.lblk + k, 1));
                        w.disown(block);
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(())
}

/// Inode `d`'s xattr blocks (one, or a chain): claimed if they decode; if
/// not, a finding, and a repair drops them (the blocks are left unowned,
/// so the bitmap rewrite frees them).
fn xattrs(w: &mut Walker<'_>, d: &DiskInode) -> Result<(), FsError> {
    let ino = d.ino;
    if d.xattr_blk == 0 && d.xattr_blocks == 0 {
        return Ok(());
    }
    let valid = w.sb.data_start..w.sb.num_blocks;
    let loaded = crate::xattr_chain::load(ino, d.xattr_blk, d.xattr_blocks, valid.clone(), |b| {
        w.read(b)
    });
    match loaded {
        Ok((_, blocks)) => {
            let mut all_mine = true;
            for b in blocks {
                // Another inode's block (used twice): not this inode's to
                // keep.
                all_mine &= w.own(b, BlockOwner::Xattrs(ino));
            }
            if !all_mine {
                w.bad_xattrs.push(ino);
            }
        }
        Err(crate::chain::LoadError::Read(e)) => return Err(e),
        Err(crate::chain::LoadError::Corrupt(error)) => {
            w.problems.push(Finding::BadInode { ino, error });
            w.bad_xattrs.push(ino);
            if !w.repair && valid.contains(&d.xattr_blk) {
                w.own(d.xattr_blk, BlockOwner::Xattrs(ino));
            }
        }
    }
    Ok(())
}

/// Pass 3: link counts (and directories' '..') against the links counted.
fn link_counts(w: &mut Walker<'_>, tree: &Tree) -> Vec<Fix> {
    let mut fixes = Vec::new();
    for (&ino, s) in &tree.seen {
        let is_dir = s.mode & libc::S_IFMT == libc::S_IFDIR;
        if ino == w.sb.root_ino || ino == w.sb.orphan_ino {
            let want = 2 + s.subdirs;
            if s.nlink != want {
                w.problems.push(Finding::DirLinkCount {
                    ino,
                    have: s.nlink,
                    want,
                });
                fixes.push((ino, want, None));
            }
            continue;
        }
        if tree.orphans.iter().any(|o| o.0 == ino) {
            continue;
        }
        let want = if is_dir { 2 + s.subdirs } else { s.links };
        let mut parent_fix = None;
        if is_dir && Some(s.parent_field) != s.parent_seen {
            w.problems.push(Finding::DirParent {
                ino,
                parent_field: s.parent_field,
                lives_in: s.parent_seen.unwrap_or(0),
            });
            parent_fix = s.parent_seen;
        }
        if s.nlink != want || parent_fix.is_some() {
            if s.nlink != want {
                w.problems.push(Finding::LinkCount {
                    ino,
                    have: s.nlink,
                    want,
                });
            }
            fixes.push((ino, want, parent_fix));
        }
    }
    fixes
}

/// Pass 4: orphans (unlinked inodes a crash left with the file open).
fn orphans(w: &mut Walker<'_>, tree: &Tree) {
    for &(ino, nlink) in &tree.orphans {
        w.problems.push(Finding::Orphan { ino, nlink });
    }
}

/// Pass 5: the allocation bitmaps against the blocks in use. Returns them
/// corrected (an unreadable one rebuilt from scratch).
fn bitmaps(w: &mut Walker<'_>, report: &mut Report) -> Result<Vec<Vec<u8>>, FsError> {
    let sb = w.sb.clone();
    let mut bitmaps = Vec::new();
    for g in 0..sb.bitmap_blocks {
        let blk = sb.bitmap_start + g;
        let mut bm = w.read(blk)?;
        if let Err(e) = check_bitmap(&bm, blk) {
            w.problems.push(Finding::BadBitmap(e));
            bm = vec![0u8; BLOCK_SIZE];
        }
        bitmaps.push(bm);
    }
    let mut leaked = 0u64;
    let mut unmarked = 0u64;
    let mut first_bad = Vec::new();
    for blk in 0..sb.num_blocks {
        let g = (blk / BITS_PER_GROUP) as usize;
        let want = blk < sb.data_start || w.is_owned(blk);
        let have = bit_in(&bitmaps[g], blk);
        if want != have {
            if want {
                unmarked += 1;
            } else {
                leaked += 1;
            }
            if first_bad.len() < 5 {
                first_bad.push(blk);
            }
            set_bit_in(&mut bitmaps[g], blk, want);
        }
        if want {
            report.used_blocks += 1;
        }
    }
    if leaked > 0 {
        w.problems.push(Finding::BitmapLeaked {
            count: leaked,
            first: first_bad.clone(),
        });
    }
    if unmarked > 0 {
        w.problems.push(Finding::BitmapUnmarked {
            count: unmarked,
            first: first_bad,
        });
    }
    Ok(bitmaps)
}

/// Repair: free the orphans, rewrite link counts and parents and the
/// bitmaps, all in one transaction; then mark the file system clean.
fn write_repairs(
    w: &mut Walker<'_>,
    tree: &Tree,
    fixes: Vec<Fix>,
    mut bitmaps: Vec<Vec<u8>>,
) -> Result<(), FsError> {
    let sb = w.sb.clone();
    // Orphans: drop them from the orphan directory; their blocks are
    // then unowned and the bitmap rewrite below frees them.
    if !tree.orphans.is_empty() {
        let od = tree.seen[&sb.orphan_ino].disk.clone();
        if let Some((_, ext, _)) = w.load(sb.orphan_ino)? {
            let map = crate::extent::ExtentMap::from_extents(&ext);
            for lblk in 0..od.size / BLOCK_SIZE as u64 {
                if let Some((pblk, _, _)) = map.lookup(lblk) {
                    w.writes
                        .insert(pblk, encode_dir_block(sb.orphan_ino, std::iter::empty()));
                }
            }
        }
        // Recompute the bitmap without the orphans' blocks.
        for &(ino, _) in &tree.orphans {
            if let Some((d, ext, chain)) = w.load(ino)? {
                let mut blocks = vec![ino];
                for e in ext {
                    blocks.extend(e.pblk..e.pblk + u64::from(e.len));
                }
                blocks.extend(chain);
                let valid = sb.data_start..sb.num_blocks;
                match crate::xattr_chain::load(ino, d.xattr_blk, d.xattr_blocks, valid, |b| {
                    w.read(b)
                }) {
                    Ok((_, xblocks)) => blocks.extend(xblocks),
                    Err(_) if d.xattr_blk != 0 => blocks.push(d.xattr_blk),
                    Err(_) => {}
                }
                for b in blocks {
                    if b < sb.num_blocks {
                        set_bit_in(&mut bitmaps[(b / BITS_PER_GROUP) as usize], b, false);
                    }
                }
            }
        }
    }
    // Bad data extents become holes (the extent list and its chain are
    // rewritten in place: fewer extents never need more chain blocks).
    let mut punched = std::collections::BTreeSet::new();
    for &(ino, _, _) in &w.bad_extents {
        punched.insert(ino);
    }
    for &(dir, _) in &w.dir_holes {
        punched.insert(dir);
    }
    // Free blocks for directory holes: neither in use nor marked.
    let mut cursor = sb.data_start;
    for ino in punched {
        if tree.orphans.iter().any(|o| o.0 == ino) || !tree.seen.contains_key(&ino) {
            continue;
        }
        let Some(mut d) = w.inode(ino)? else { continue };
        let valid = sb.data_start..sb.num_blocks;
        let (mut map, mut chain) = match crate::chain::load(&d, valid, |blk| w.read(blk)) {
            Ok(loaded) => loaded,
            Err(crate::chain::LoadError::Read(e)) => return Err(e),
            Err(crate::chain::LoadError::Corrupt(_)) => continue,
        };
        for &(i, lblk, len) in &w.bad_extents {
            if i == ino {
                map.punch(lblk, len);
            }
        }
        let mut filled = Vec::new();
        for &(dir, lblk) in &w.dir_holes {
            if dir == ino && map.lookup(lblk).is_none() {
                while cursor < sb.num_blocks
                    && (bit_in(&bitmaps[(cursor / BITS_PER_GROUP) as usize], cursor)
                        || filled.iter().any(|&(_, f)| f == cursor))
                {
                    cursor += 1;
                }
                if cursor == sb.num_blocks {
                    break;
                }
                map.insert(lblk, cursor, 1, false);
                filled.push((lblk, cursor));
                cursor += 1;
            }
        }
        let mut out = Writes::new();
        // Cannot fail: the list only shrank, so no chain block is needed.
        if chain.save(&mut d, &mut map, None, &mut out).is_ok() {
            w.writes.extend(out.into_blocks());
            for (_, b) in filled {
                w.writes
                    .insert(b, encode_dir_block(ino, std::iter::empty()));
                set_bit_in(&mut bitmaps[(b / BITS_PER_GROUP) as usize], b, true);
            }
        }
    }
    // Inodes to rewrite: counted link count and parent, the xattr block
    // dropped, a directory's size cut.
    #[derive(Default)]
    struct Edit {
        nlink: Option<u32>,
        parent: Option<u64>,
        drop_xattrs: bool,
        size: Option<u64>,
    }
    let mut rewrite: BTreeMap<u64, Edit> = BTreeMap::new();
    for (ino, nlink, parent) in fixes {
        let r = rewrite.entry(ino).or_default();
        r.nlink = Some(nlink);
        r.parent = parent;
    }
    for &ino in &w.bad_xattrs {
        rewrite.entry(ino).or_default().drop_xattrs = true;
    }
    for &(ino, size) in &w.dir_sizes {
        rewrite.entry(ino).or_default().size = Some(size);
    }
    for (ino, edit) in rewrite {
        if tree.orphans.iter().any(|o| o.0 == ino) {
            continue; // freed above
        }
        if let Some(s) = tree.seen.get(&ino) {
            let mut d = s.disk.clone();
            // The inode as the repairs above left it, else as on the device
            // (overflow/extent fields current).
            if let Some(cur) = w.inode(ino)? {
                d = cur;
            }
            if let Some(n) = edit.nlink {
                d.nlink = n;
            }
            if let Some(p) = edit.parent {
                d.parent = p;
            }
            if edit.drop_xattrs {
                d.xattr_blk = 0;
                d.xattr_blocks = 0;
            }
            if let Some(size) = edit.size {
                d.size = size;
            }
            w.writes.insert(ino, d.encode());
        }
    }
    for (g, mut bm) in bitmaps.into_iter().enumerate() {
        seal_bitmap(&mut bm);
        w.writes.insert(sb.bitmap_start + g as u64, bm);
    }
    let mut tx = w.store.begin();
    for (blk, data) in &w.writes {
        tx.write(*blk, data)?;
    }
    tx.finish()?;
    w.store.checkpoint()?;
    let mut sb2 = sb;
    sb2.state = STATE_CLEAN;
    w.store.write_super(&sb2.encode())?;
    Ok(())
}
