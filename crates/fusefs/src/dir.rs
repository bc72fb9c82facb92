//! Directories: entries packed in directory blocks on the device, indexed in
//! memory by a hash map (lookup, create, unlink: O(1), never a scan) and by
//! position (readdir resumes from a stable cookie even while entries come
//! and go).
//!
//! Each entry keeps the position it was given when it was added (a
//! per-directory counter), also across a rename within the directory, so a
//! readdir cookie stays valid: entries never move, and a reader sees each
//! entry at most once and finishes however many renames run meanwhile. A change rewrites only the one directory block it touches.

use std::collections::{BTreeMap, HashMap};

use ptsd_blockdev::le::{get_u64, put_u64};

use crate::format::{
    dirent_size, put_dirent, seal_dir_block, RawDirent, BLOCK_SIZE, DIR_HEADER, NAME_MAX,
};

/// Readdir cookies below this are `.` and `..`.
pub const FIRST_POS: u64 = 3;
/// Free bytes a block needs to be sure to take any entry.
const ROOMY: usize = DIR_HEADER + dirent_size(NAME_MAX);

/// One entry as the index keeps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirEnt {
    pub ino: u64,
    pub kind: u8,
    pub pos: u64,
    /// Directory block (file block number of the directory) holding it.
    pub blk: u32,
}

/// One directory block: its entries and its encoded image (kept so a
/// create appends one entry instead of re-encoding the block).
#[derive(Clone, Debug)]
struct DirBlock {
    used: usize,
    positions: Vec<u64>,
    image: Box<[u8]>,
    /// Listed in `DirIndex::roomy`.
    roomy: bool,
}

impl DirBlock {
    fn empty() -> Self {
        DirBlock {
            used: DIR_HEADER,
            positions: Vec::new(),
            image: vec![0u8; BLOCK_SIZE].into_boxed_slice(),
            roomy: false,
        }
    }
}

/// The in-memory index of one directory.
#[derive(Default, Debug)]
pub struct DirIndex {
    by_name: HashMap<Box<[u8]>, DirEnt>,
    by_pos: BTreeMap<u64, Box<[u8]>>,
    blocks: Vec<DirBlock>,
    next_pos: u64,
    roomy: Vec<u32>,
}

impl DirIndex {
    /// An empty directory.
    pub fn new() -> Self {
        DirIndex {
            next_pos: FIRST_POS,
            ..Default::default()
        }
    }

    /// Build from the decoded directory blocks, in block order.
    pub fn from_blocks(blocks: Vec<Vec<RawDirent>>) -> Result<Self, String> {
        let mut d = DirIndex::new();
        for (bi, entries) in blocks.into_iter().enumerate() {
            let mut blk = DirBlock::empty();
            for e in entries {
                if e.pos < FIRST_POS || d.by_pos.contains_key(&e.pos) {
                    return Err(format!("bad or duplicate entry position {}", e.pos));
                }
                let name: Box<[u8]> = e.name.into_boxed_slice();
                if d.by_name.contains_key(&name) {
                    return Err(format!(
                        "duplicate entry {:?}",
                        String::from_utf8_lossy(&name)
                    ));
                }
                blk.used = put_dirent(&mut blk.image, blk.used, e.pos, e.ino, e.kind, &name);
                blk.positions.push(e.pos);
                d.next_pos = d.next_pos.max(e.pos + 1);
                d.by_pos.insert(e.pos, name.clone());
                d.by_name.insert(
                    name,
                    DirEnt {
                        ino: e.ino,
                        kind: e.kind,
                        pos: e.pos,
                        blk: bi as u32,
                    },
                );
            }
            if BLOCK_SIZE - blk.used >= ROOMY {
                blk.roomy = true;
                d.roomy.push(bi as u32);
            }
            d.blocks.push(blk);
        }
        Ok(d)
    }

    /// Number of entries.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    /// True if the directory has no entries.
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// Number of directory blocks.
    pub fn num_blocks(&self) -> u64 {
        self.blocks.len() as u64
    }

    /// Find an entry.
    pub fn get(&self, name: &[u8]) -> Option<DirEnt> {
        self.by_name.get(name).copied()
    }

    /// A block with room for `name`, if any (None: the caller must add a
    /// block with [`push_block`](Self::push_block)).
    pub fn find_slot(&mut self, name_len: usize) -> Option<u32> {
        let need = dirent_size(name_len);
        if let Some(last) = self.blocks.len().checked_sub(1) {
            if self.blocks[last].used + need <= BLOCK_SIZE {
                return Some(last as u32);
            }
        }
        while let Some(&b) = self.roomy.last() {
            if self.blocks[b as usize].used + need <= BLOCK_SIZE {
                return Some(b);
            }
            self.roomy.pop();
            self.blocks[b as usize].roomy = false;
        }
        None
    }

    /// Add an empty directory block; returns its number.
    pub fn push_block(&mut self) -> u32 {
        self.blocks.push(DirBlock::empty());
        (self.blocks.len() - 1) as u32
    }

    /// Add an entry to block `blk` (from [`find_slot`](Self::find_slot) or
    /// [`push_block`](Self::push_block)).
    pub fn add(&mut self, name: &[u8], ino: u64, kind: u8, blk: u32) -> DirEnt {
        let pos = self.next_pos;
        self.next_pos += 1;
        self.add_at(name, ino, kind, blk, pos)
    }

    /// [`add`](Self::add) at a given readdir position, which must be free:
    /// a rename within the directory keeps the entry's position, so a
    /// reader's cookie neither skips it nor meets it again at the end.
    pub fn add_at(&mut self, name: &[u8], ino: u64, kind: u8, blk: u32, pos: u64) -> DirEnt {
        debug_assert!(pos >= FIRST_POS && !self.by_pos.contains_key(&pos));
        self.next_pos = self.next_pos.max(pos + 1);
        let e = DirEnt {
            ino,
            kind,
            pos,
            blk,
        };
        let b = &mut self.blocks[blk as usize];
        b.used = put_dirent(&mut b.image, b.used, pos, ino, kind, name);
        b.positions.push(pos);
        let name: Box<[u8]> = name.into();
        self.by_pos.insert(pos, name.clone());
        self.by_name.insert(name, e);
        e
    }

    /// Point an existing entry at another inode (rename exchange/replace).
    pub fn retarget(&mut self, name: &[u8], ino: u64, kind: u8) -> Option<DirEnt> {
        let e = self.by_name.get_mut(name)?;
        e.ino = ino;
        e.kind = kind;
        let e = *e;
        let (o, _) = self
            .locate(e.blk, e.pos)
            .expect("an indexed entry is in its block's image");
        let b = &mut self.blocks[e.blk as usize];
        put_u64(&mut b.image, o + 8, ino);
        b.image[o + 16] = kind;
        Some(e)
    }

    /// Byte offset and size of the entry at position `pos` in block
    /// `blk`'s image (entries are self-describing: a walk of lengths, no
    /// name lookups).
    fn locate(&self, blk: u32, pos: u64) -> Option<(usize, usize)> {
        let b = &self.blocks[blk as usize];
        let mut o = DIR_HEADER;
        while o < b.used {
            let size = dirent_size(b.image[o + 17] as usize);
            if get_u64(&b.image, o) == pos {
                return Some((o, size));
            }
            o += size;
        }
        None
    }

    /// Remove an entry.
    pub fn remove(&mut self, name: &[u8]) -> Option<DirEnt> {
        let e = self.by_name.remove(name)?;
        self.by_pos.remove(&e.pos);
        let b = &mut self.blocks[e.blk as usize];
        if let Some(i) = b.positions.iter().position(|&p| p == e.pos) {
            b.positions.remove(i);
        }
        // Close the gap: the entries after it move down, the tail is zero.
        let (o, size) = self
            .locate(e.blk, e.pos)
            .expect("an indexed entry is in its block's image");
        let b = &mut self.blocks[e.blk as usize];
        b.image.copy_within(o + size..b.used, o);
        b.used -= size;
        b.image[b.used..].fill(0);
        if BLOCK_SIZE - b.used >= ROOMY && !b.roomy {
            b.roomy = true;
            self.roomy.push(e.blk);
        }
        Some(e)
    }

    /// Encode directory block `blk` of directory `owner`.
    /// Also returns the crc32c of the block.
    pub fn encode_block(&self, owner: u64, blk: u32) -> (Vec<u8>, u32) {
        let b = &self.blocks[blk as usize];
        let mut out = crate::writes::block_from(&b.image);
        let crc = seal_dir_block(&mut out, owner, b.positions.len() as u16, b.used);
        (out, crc)
    }

    /// Entries with position `>= from`, in position order.
    pub fn iter_from(&self, from: u64) -> impl Iterator<Item = (&[u8], DirEnt)> + '_ {
        self.by_pos
            .range(from..)
            .map(|(_, name)| (&name[..], self.by_name[name]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::decode_dir_block;

    #[test]
    fn add_remove_reuse_and_reload() {
        let mut d = DirIndex::new();
        let mut count_blocks = 0;
        for i in 0..1000u64 {
            let name = format!("entry-{i:05}");
            let blk = match d.find_slot(name.len()) {
                Some(b) => b,
                None => {
                    count_blocks += 1;
                    d.push_block()
                }
            };
            d.add(name.as_bytes(), 100 + i, 8, blk);
        }
        assert_eq!(d.len(), 1000);
        assert_eq!(d.num_blocks(), count_blocks);
        for i in (0..1000u64).step_by(2) {
            assert!(d.remove(format!("entry-{i:05}").as_bytes()).is_some());
        }
        // Freed space is reused: no new block for 100 more entries.
        for i in 0..100u64 {
            let name = format!("again-{i:05}");
            let blk = d.find_slot(name.len()).expect("space from removed entries");
            d.add(name.as_bytes(), 5000 + i, 8, blk);
        }
        assert_eq!(d.num_blocks(), count_blocks);
        let blocks: Vec<Vec<RawDirent>> = (0..d.num_blocks() as u32)
            .map(|b| decode_dir_block(&d.encode_block(7, b).0, 1, 7).unwrap())
            .collect();
        let r = DirIndex::from_blocks(blocks).unwrap();
        assert_eq!(r.len(), 600);
        assert_eq!(r.get(b"entry-00001").unwrap().ino, 101);
        assert!(r.get(b"entry-00002").is_none());
        let order: Vec<u64> = r.iter_from(0).map(|(_, e)| e.pos).collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]));
    }

    /// Removes and retargets edit a block's image in place: after any mix
    /// of operations every block decodes to exactly the entries the index
    /// holds for it (names, inodes, kinds, positions).
    #[test]
    fn in_place_edits_keep_every_block_image_exact() {
        let mut d = DirIndex::new();
        let mut model: BTreeMap<Vec<u8>, (u64, u8)> = BTreeMap::new();
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for step in 0..4000u64 {
            let name = format!("{}-{}", "n".repeat(1 + next(40) as usize), next(300)).into_bytes();
            match next(3) {
                0 if !model.contains_key(&name) => {
                    let blk = match d.find_slot(name.len()) {
                        Some(b) => b,
                        None => d.push_block(),
                    };
                    d.add(&name, step, 1, blk);
                    model.insert(name, (step, 1));
                }
                1 => assert_eq!(d.remove(&name).is_some(), model.remove(&name).is_some()),
                _ => {
                    let kind = 2 + next(5) as u8;
                    let had = d.retarget(&name, step + 1_000_000, kind).is_some();
                    if let Some(v) = model.get_mut(&name) {
                        *v = (step + 1_000_000, kind);
                    }
                    assert_eq!(had, model.contains_key(&name));
                }
            }
        }
        let mut seen = 0;
        for b in 0..d.num_blocks() as u32 {
            let entries = decode_dir_block(&d.encode_block(7, b).0, 1, 7).unwrap();
            for e in &entries {
                let got = d.get(&e.name).expect("a decoded entry is indexed");
                assert_eq!(
                    (got.ino, got.kind, got.pos, got.blk),
                    (e.ino, e.kind, e.pos, b)
                );
                assert_eq!(model[&e.name], (e.ino, e.kind));
            }
            seen += entries.len();
        }
        assert_eq!(seen, model.len());
        assert_eq!(d.len(), model.len());
    }
}
