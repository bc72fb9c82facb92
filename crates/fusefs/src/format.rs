// Over 800 lines: every on-device encoding (superblock, bitmaps, inodes, extents, directories, xattrs) kept together, so a format change is one file.
//! The on-device format: superblock, bitmaps, inode blocks, extent
//! overflow blocks, directory blocks and xattr blocks. Every block carries a
//! magic number and a crc32c, so a torn or foreign block is detected when it
//! is read.
//!
//! Layout (4 KiB blocks):
//!
//! ```text
//! block 0                superblock (never journaled; written at mkfs/mount/umount)
//! 1 .. 1+B               block bitmap, one group of 32 736 blocks per bitmap block
//! rest                   inode blocks, file data, directory blocks, xattr blocks,
//!                        extent overflow blocks, all allocated from the bitmap
//! ```
//!
//! An inode is one whole block, and its number is that block's number, so an
//! operation on one inode never shares a metadata block with an operation on
//! another (no false sharing between concurrent journal transactions).

use ptsd_blockdev::le::{get_u16, get_u32, get_u64, put_u16, put_u32, put_u64};

use crate::error::FsFormatError;
pub use crate::xattr_chain::{decode_xattr_chain_block, encode_xattr_chain_block};

/// Bytes per file-system block. The device's block size must match.
pub const BLOCK_SIZE: usize = 4096;
/// Superblock magic.
pub const SB_MAGIC: [u8; 8] = *b"PTSDFS\0\x01";
/// Current format version.
pub const VERSION: u32 = 1;
/// Incompatible feature: symlink targets longer than [`SYMLINK_INLINE`]
/// live in a data block (set when the first one is made; older builds,
/// which would call such an inode corrupt, then refuse the image).
pub const INCOMPAT_LONG_SYMLINKS: u64 = 1;
/// Incompatible feature: an inode's xattrs may fill a chain of blocks
/// (`crate::xattr_chain`; set when the first one is made).
pub const INCOMPAT_XATTR_CHAIN: u64 = 2;
/// Incompatible features this build understands; an image with other bits
/// set is refused.
pub const FEATURES_INCOMPAT_KNOWN: u64 = INCOMPAT_LONG_SYMLINKS | INCOMPAT_XATTR_CHAIN;
/// Compatible features: bit 0 = inode-per-block, bit 1 = extents,
/// bit 2 = position-ordered directory blocks with a hash index.
pub const FEATURES_COMPAT: u64 = 0b111;
/// Bits of the bitmap block usable for allocation (the last 4 bytes hold the
/// crc32c).
pub const BITS_PER_GROUP: u64 = ((BLOCK_SIZE - 4) * 8) as u64;
/// Longest file name.
pub const NAME_MAX: usize = 255;
/// Longest symlink target stored inline in the inode block; a longer one
/// is the file's block 0.
pub const SYMLINK_INLINE: usize = BLOCK_SIZE - INODE_PAYLOAD;
/// Longest symlink target (Linux's PATH_MAX less the NUL).
pub const SYMLINK_MAX: usize = 4095;
/// Extents stored inline in an inode block.
pub const INLINE_EXTENTS: usize = (BLOCK_SIZE - INODE_PAYLOAD) / EXTENT_SIZE;
/// Extents per overflow block.
pub const OVERFLOW_EXTENTS: usize = (BLOCK_SIZE - OVERFLOW_HEADER) / EXTENT_SIZE;
/// Bytes of xattr entries the single-block format holds (more go to a
/// chain: `crate::xattr_chain`).
pub const XATTR_SPACE: usize = BLOCK_SIZE - XATTR_HEADER;

pub(crate) const INODE_MAGIC: u32 = u32::from_le_bytes(*b"PTIN");
pub(crate) const OVERFLOW_MAGIC: u32 = u32::from_le_bytes(*b"PTEX");
pub(crate) const DIR_MAGIC: u32 = u32::from_le_bytes(*b"PTDR");
pub(crate) const XATTR_MAGIC: u32 = u32::from_le_bytes(*b"PTXA");
const INODE_PAYLOAD: usize = 144;
const EXTENT_SIZE: usize = 16;
const OVERFLOW_HEADER: usize = 32;
const XATTR_HEADER: usize = 24;
/// Bytes before the first directory entry of a directory block.
pub const DIR_HEADER: usize = 24;
/// Bytes of a directory entry before its name.
pub const DIRENT_FIXED: usize = 18;

/// Superblock state: cleanly unmounted.
pub const STATE_CLEAN: u32 = 1;
/// Superblock state: mounted (or crashed while mounted).
pub const STATE_DIRTY: u32 = 2;

/// crc32c of a block with its crc field (4 bytes at `at`) taken as zero.
fn block_crc(b: &[u8], at: usize) -> u32 {
    let c = crc32c::crc32c(&b[..at]);
    let c = crc32c::crc32c_append(c, &[0u8; 4]);
    crc32c::crc32c_append(c, &b[at + 4..])
}

fn seal(b: &mut [u8], at: usize) {
    let c = block_crc(b, at);
    put_u32(b, at, c);
}

/// [`seal`] a whole block, returning the crc32c of the sealed block (for
/// the journal), derived from the seal instead of a second pass.
fn seal_whole(b: &mut [u8], at: usize) -> u32 {
    assert_eq!(b.len(), BLOCK_SIZE, "sealing a partial block");
    let c = block_crc(b, at);
    put_u32(b, at, c);
    crate::sealcrc::whole_block_crc(c, at)
}

/// Seal a whole block whose field is at 4 and whose bytes from `end` on
/// (the field too) are zero, reading only up to `end`; returns the crc32c
/// of the sealed block.
fn seal_head(b: &mut [u8], end: usize) -> u32 {
    let seal = crate::sealcrc::crc_zero_tail(b, end);
    debug_assert_eq!(seal, block_crc(b, 4));
    put_u32(b, 4, seal);
    crate::sealcrc::whole_block_crc(seal, 4)
}

fn check(
    b: &[u8],
    at: usize,
    magic: u32,
    what: &'static str,
    blk: u64,
) -> Result<(), FsFormatError> {
    if b.len() != BLOCK_SIZE {
        return Err(FsFormatError::Corrupt {
            what,
            block: blk,
            why: "wrong block length".into(),
        });
    }
    if get_u32(b, 0) != magic {
        return Err(FsFormatError::BadMagic { what, block: blk });
    }
    if get_u32(b, at) != block_crc(b, at) {
        return Err(FsFormatError::Corrupt {
            what,
            block: blk,
            why: "checksum mismatch".into(),
        });
    }
    Ok(())
}

/// The superblock's first sector, which holds every field and its own crc
/// (in its last 4 bytes).
const SB_SECTOR: usize = 512;

/// The superblock (block 0).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Superblock {
    pub version: u32,
    pub block_size: u32,
    pub num_blocks: u64,
    pub uuid: [u8; 16],
    pub features_compat: u64,
    pub features_incompat: u64,
    pub bitmap_start: u64,
    pub bitmap_blocks: u64,
    pub data_start: u64,
    pub root_ino: u64,
    pub orphan_ino: u64,
    pub state: u32,
    pub mount_count: u32,
    pub mkfs_time: u64,
    pub gen_seed: u64,
}

impl Superblock {
    /// The file system's uuid as 32 lowercase hex digits.
    pub fn uuid_hex(&self) -> String {
        use std::fmt::Write;
        self.uuid.iter().fold(String::new(), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
    }

    /// Encode into a full block.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; BLOCK_SIZE];
        b[0..8].copy_from_slice(&SB_MAGIC);
        put_u32(&mut b, 8, self.version);
        put_u32(&mut b, 12, self.block_size);
        put_u64(&mut b, 16, self.num_blocks);
        b[24..40].copy_from_slice(&self.uuid);
        put_u64(&mut b, 40, self.features_compat);
        put_u64(&mut b, 48, self.features_incompat);
        put_u64(&mut b, 56, self.bitmap_start);
        put_u64(&mut b, 64, self.bitmap_blocks);
        put_u64(&mut b, 72, self.data_start);
        put_u64(&mut b, 80, self.root_ino);
        put_u64(&mut b, 88, self.orphan_ino);
        put_u32(&mut b, 96, self.state);
        put_u32(&mut b, 100, self.mount_count);
        put_u64(&mut b, 104, self.mkfs_time);
        put_u64(&mut b, 112, self.gen_seed);
        // Two crcs: the first sector's own (every field lives there), and
        // the whole block's. The superblock is rewritten in place at every
        // mount and unmount; a write torn after the first 512-byte sector
        // still leaves a valid first sector.
        seal(&mut b[..SB_SECTOR], SB_SECTOR - 4);
        seal(&mut b, BLOCK_SIZE - 4);
        b
    }

    /// Decode and validate block 0 of a device of `device_blocks` blocks.
    pub fn decode(b: &[u8], device_blocks: u64) -> Result<Self, FsFormatError> {
        if b.len() < BLOCK_SIZE || b[0..8] != SB_MAGIC {
            return Err(FsFormatError::NotPtsd);
        }
        let whole_ok = get_u32(b, BLOCK_SIZE - 4) == block_crc(&b[..BLOCK_SIZE], BLOCK_SIZE - 4);
        let sector_ok = get_u32(b, SB_SECTOR - 4) == block_crc(&b[..SB_SECTOR], SB_SECTOR - 4);
        if !whole_ok && !sector_ok {
            return Err(FsFormatError::Corrupt {
                what: "superblock",
                block: 0,
                why: "checksum mismatch".into(),
            });
        }
        let sb = Superblock {
            version: get_u32(b, 8),
            block_size: get_u32(b, 12),
            num_blocks: get_u64(b, 16),
            uuid: b[24..40].try_into().expect("16 bytes"),
            features_compat: get_u64(b, 40),
            features_incompat: get_u64(b, 48),
            bitmap_start: get_u64(b, 56),
            bitmap_blocks: get_u64(b, 64),
            data_start: get_u64(b, 72),
            root_ino: get_u64(b, 80),
            orphan_ino: get_u64(b, 88),
            state: get_u32(b, 96),
            mount_count: get_u32(b, 100),
            mkfs_time: get_u64(b, 104),
            gen_seed: get_u64(b, 112),
        };
        let bad = |why: String| FsFormatError::Corrupt {
            what: "superblock",
            block: 0,
            why,
        };
        if sb.version != VERSION {
            return Err(FsFormatError::Version(sb.version));
        }
        if sb.features_incompat & !FEATURES_INCOMPAT_KNOWN != 0 {
            return Err(FsFormatError::Features(
                sb.features_incompat & !FEATURES_INCOMPAT_KNOWN,
            ));
        }
        if sb.block_size as usize != BLOCK_SIZE {
            return Err(bad(format!(
                "block size {} (expected {BLOCK_SIZE})",
                sb.block_size
            )));
        }
        if sb.num_blocks > device_blocks {
            return Err(FsFormatError::DeviceTooSmall {
                fs_blocks: sb.num_blocks,
                device_blocks,
            });
        }
        if sb.bitmap_start != 1
            || sb.bitmap_blocks != sb.num_blocks.div_ceil(BITS_PER_GROUP)
            || sb.data_start != sb.bitmap_start + sb.bitmap_blocks
        {
            return Err(bad("inconsistent layout fields".into()));
        }
        for (name, ino) in [("root inode", sb.root_ino), ("orphan inode", sb.orphan_ino)] {
            if ino < sb.data_start || ino >= sb.num_blocks {
                return Err(bad(format!("{name} {ino} outside the data area")));
            }
        }
        if sb.state != STATE_CLEAN && sb.state != STATE_DIRTY {
            return Err(bad(format!("unknown state {}", sb.state)));
        }
        Ok(sb)
    }
}

/// Seal a bitmap block (the crc sits in its last 4 bytes).
/// Returns the crc32c of the sealed block.
pub fn seal_bitmap(b: &mut [u8]) -> u32 {
    seal_whole(b, BLOCK_SIZE - 4)
}

/// Verify a bitmap block's crc.
pub fn check_bitmap(b: &[u8], blk: u64) -> Result<(), FsFormatError> {
    if b.len() != BLOCK_SIZE || get_u32(b, BLOCK_SIZE - 4) != block_crc(b, BLOCK_SIZE - 4) {
        return Err(FsFormatError::Corrupt {
            what: "bitmap",
            block: blk,
            why: "checksum mismatch".into(),
        });
    }
    Ok(())
}

/// A timestamp: seconds and nanoseconds since the epoch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ts {
    pub sec: i64,
    pub nsec: u32,
}

impl Ts {
    /// The current time.
    pub fn now() -> Self {
        Self::from_system(std::time::SystemTime::now())
    }
    /// Convert from a `SystemTime`.
    pub fn from_system(t: std::time::SystemTime) -> Self {
        match t.duration_since(std::time::UNIX_EPOCH) {
            Ok(d) => Ts {
                sec: d.as_secs() as i64,
                nsec: d.subsec_nanos(),
            },
            Err(e) => {
                let d = e.duration();
                if d.subsec_nanos() == 0 {
                    Ts {
                        sec: -(d.as_secs() as i64),
                        nsec: 0,
                    }
                } else {
                    Ts {
                        sec: -(d.as_secs() as i64) - 1,
                        nsec: 1_000_000_000 - d.subsec_nanos(),
                    }
                }
            }
        }
    }
    /// Convert to a `SystemTime`.
    pub fn to_system(self) -> std::time::SystemTime {
        let nsec = std::time::Duration::from_nanos(u64::from(self.nsec.min(999_999_999)));
        if self.sec >= 0 {
            std::time::UNIX_EPOCH + std::time::Duration::from_secs(self.sec as u64) + nsec
        } else {
            std::time::UNIX_EPOCH - std::time::Duration::from_secs(self.sec.unsigned_abs()) + nsec
        }
    }
}

/// One run of a file: `len` file blocks from `lblk` live at `pblk..`.
/// `unwritten` runs are allocated (fallocate) but read as zeroes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    pub lblk: u64,
    pub pblk: u64,
    pub len: u32,
    pub unwritten: bool,
}

const UNWRITTEN_BIT: u32 = 1 << 31;
/// Longest extent (the top bit of the stored length marks unwritten runs).
pub const MAX_EXTENT_LEN: u32 = UNWRITTEN_BIT - 1;

fn put_extent(b: &mut [u8], o: usize, e: &Extent) {
    put_u32(b, o, e.lblk as u32);
    put_u32(
        b,
        o + 4,
        e.len | if e.unwritten { UNWRITTEN_BIT } else { 0 },
    );
    put_u64(b, o + 8, e.pblk);
}
fn get_extent(b: &[u8], o: usize) -> Extent {
    let raw = get_u32(b, o + 4);
    Extent {
        lblk: u64::from(get_u32(b, o)),
        len: raw & !UNWRITTEN_BIT,
        unwritten: raw & UNWRITTEN_BIT != 0,
        pblk: get_u64(b, o + 8),
    }
}

/// The persistent part of an inode, as stored in its block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiskInode {
    pub ino: u64,
    pub generation: u64,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    pub size: u64,
    pub atime: Ts,
    pub mtime: Ts,
    pub ctime: Ts,
    pub crtime: Ts,
    pub rdev: u32,
    pub flags: u32,
    pub xattr_blk: u64,
    /// Blocks of the xattr chain starting at `xattr_blk`, 0 for the
    /// single-block format (or no xattrs).
    pub xattr_blocks: u32,
    pub parent: u64,
    /// Total extents (inline plus overflow).
    pub nextents: u32,
    /// First extent overflow block, 0 if none.
    pub overflow: u64,
    /// Extents stored inline (at most [`INLINE_EXTENTS`]).
    pub inline_extents: Vec<Extent>,
    /// Symlink target (symlinks only). One longer than [`SYMLINK_INLINE`]
    /// is stored in the file's block 0; [`DiskInode::decode`] gives zeroes
    /// of its length.
    pub symlink: Vec<u8>,
}

impl DiskInode {
    /// Encode into a full block.
    pub fn encode(&self) -> Vec<u8> {
        self.encode_sealed().0
    }

    /// [`encode`](Self::encode), and the crc32c of the block.
    pub fn encode_sealed(&self) -> (Vec<u8>, u32) {
        let mut b = crate::writes::zeroed_block();
        put_u32(&mut b, 0, INODE_MAGIC);
        put_u64(&mut b, 8, self.ino);
        put_u64(&mut b, 16, self.generation);
        put_u32(&mut b, 24, self.mode);
        put_u32(&mut b, 28, self.uid);
        put_u32(&mut b, 32, self.gid);
        put_u32(&mut b, 36, self.nlink);
        put_u64(&mut b, 40, self.size);
        for (i, t) in [self.atime, self.mtime, self.ctime, self.crtime]
            .iter()
            .enumerate()
        {
            put_u64(&mut b, 48 + i * 12, t.sec as u64);
            put_u32(&mut b, 56 + i * 12, t.nsec);
        }
        put_u32(&mut b, 96, self.rdev);
        put_u32(&mut b, 100, self.flags);
        put_u64(&mut b, 104, self.xattr_blk);
        put_u64(&mut b, 112, self.parent);
        put_u32(&mut b, 120, self.nextents);
        put_u64(&mut b, 128, self.overflow);
        put_u32(&mut b, 136, self.symlink.len() as u32);
        put_u32(&mut b, 140, self.xattr_blocks);
        let end = if (1..=SYMLINK_INLINE).contains(&self.symlink.len()) {
            let n = self.symlink.len();
            b[INODE_PAYLOAD..INODE_PAYLOAD + n].copy_from_slice(&self.symlink[..n]);
            INODE_PAYLOAD + n
        } else {
            let n = self.inline_extents.len().min(INLINE_EXTENTS);
            for (i, e) in self.inline_extents[..n].iter().enumerate() {
                put_extent(&mut b, INODE_PAYLOAD + i * EXTENT_SIZE, e);
            }
            INODE_PAYLOAD + n * EXTENT_SIZE
        };
        let crc = seal_head(&mut b, end);
        (b, crc)
    }

    /// Decode and validate the inode block `ino`.
    pub fn decode(b: &[u8], ino: u64) -> Result<Self, FsFormatError> {
        check(b, 4, INODE_MAGIC, "inode", ino)?;
        let bad = |why: String| FsFormatError::Corrupt {
            what: "inode",
            block: ino,
            why,
        };
        if get_u64(b, 8) != ino {
            return Err(bad(format!("block claims to be inode {}", get_u64(b, 8))));
        }
        let mut t = [Ts::default(); 4];
        for (i, slot) in t.iter_mut().enumerate() {
            *slot = Ts {
                sec: get_u64(b, 48 + i * 12) as i64,
                nsec: get_u32(b, 56 + i * 12),
            };
        }
        let nextents = get_u32(b, 120);
        let symlen = get_u32(b, 136) as usize;
        if symlen > SYMLINK_MAX {
            return Err(bad(format!("symlink length {symlen}")));
        }
        let mut inline_extents = Vec::new();
        let symlink = if (1..=SYMLINK_INLINE).contains(&symlen) {
            b[INODE_PAYLOAD..INODE_PAYLOAD + symlen].to_vec()
        } else {
            let n = (nextents as usize).min(INLINE_EXTENTS);
            for i in 0..n {
                inline_extents.push(get_extent(b, INODE_PAYLOAD + i * EXTENT_SIZE));
            }
            // A long target is the file's block 0: zeroes here, for the
            // reader of that block to fill in.
            vec![0; symlen]
        };
        Ok(DiskInode {
            ino,
            generation: get_u64(b, 16),
            mode: get_u32(b, 24),
            uid: get_u32(b, 28),
            gid: get_u32(b, 32),
            nlink: get_u32(b, 36),
            size: get_u64(b, 40),
            atime: t[0],
            mtime: t[1],
            ctime: t[2],
            crtime: t[3],
            rdev: get_u32(b, 96),
            flags: get_u32(b, 100),
            xattr_blk: get_u64(b, 104),
            xattr_blocks: get_u32(b, 140),
            parent: get_u64(b, 112),
            nextents,
            overflow: get_u64(b, 128),
            inline_extents,
            symlink,
        })
    }
}

/// Encode an extent overflow block.
pub fn encode_overflow(owner: u64, next: u64, extents: &[Extent]) -> Vec<u8> {
    let mut b = vec![0u8; BLOCK_SIZE];
    put_u32(&mut b, 0, OVERFLOW_MAGIC);
    put_u64(&mut b, 8, owner);
    put_u64(&mut b, 16, next);
    put_u32(&mut b, 24, extents.len() as u32);
    for (i, e) in extents.iter().take(OVERFLOW_EXTENTS).enumerate() {
        put_extent(&mut b, OVERFLOW_HEADER + i * EXTENT_SIZE, e);
    }
    seal(&mut b, 4);
    b
}

/// Decode an extent overflow block: (next block, extents).
pub fn decode_overflow(
    b: &[u8],
    blk: u64,
    owner: u64,
) -> Result<(u64, Vec<Extent>), FsFormatError> {
    check(b, 4, OVERFLOW_MAGIC, "extent block", blk)?;
    let bad = |why: String| FsFormatError::Corrupt {
        what: "extent block",
        block: blk,
        why,
    };
    if get_u64(b, 8) != owner {
        return Err(bad(format!("owned by {} not inode {owner}", get_u64(b, 8))));
    }
    let n = get_u32(b, 24) as usize;
    if n > OVERFLOW_EXTENTS {
        return Err(bad(format!("{n} extents")));
    }
    let ext = (0..n)
        .map(|i| get_extent(b, OVERFLOW_HEADER + i * EXTENT_SIZE))
        .collect();
    Ok((get_u64(b, 16), ext))
}

/// One directory entry as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawDirent {
    /// Position: a per-directory increasing number, the readdir cookie.
    pub pos: u64,
    pub ino: u64,
    /// File type (the `S_IFMT` bits of the mode, shifted right by 12).
    pub kind: u8,
    pub name: Vec<u8>,
}

/// Bytes an entry with a name of `name_len` bytes takes in a directory block.
pub const fn dirent_size(name_len: usize) -> usize {
    DIRENT_FIXED + name_len
}

/// Encode a directory block holding `entries` (their sizes must fit).
pub fn encode_dir_block<'a>(
    owner: u64,
    entries: impl Iterator<Item = (u64, u64, u8, &'a [u8])>,
) -> Vec<u8> {
    let mut b = vec![0u8; BLOCK_SIZE];
    put_u32(&mut b, 0, DIR_MAGIC);
    put_u64(&mut b, 8, owner);
    let mut o = DIR_HEADER;
    let mut count = 0u16;
    for (pos, ino, kind, name) in entries {
        put_u64(&mut b, o, pos);
        put_u64(&mut b, o + 8, ino);
        b[o + 16] = kind;
        b[o + 17] = name.len() as u8;
        b[o + 18..o + 18 + name.len()].copy_from_slice(name);
        o += dirent_size(name.len());
        count += 1;
    }
    put_u16(&mut b, 16, count);
    put_u16(&mut b, 18, o as u16);
    seal(&mut b, 4);
    b
}

/// Write one entry at byte `o` of a directory block image; returns the
/// offset after it.
pub fn put_dirent(b: &mut [u8], o: usize, pos: u64, ino: u64, kind: u8, name: &[u8]) -> usize {
    put_u64(b, o, pos);
    put_u64(b, o + 8, ino);
    b[o + 16] = kind;
    b[o + 17] = name.len() as u8;
    b[o + 18..o + 18 + name.len()].copy_from_slice(name);
    o + dirent_size(name.len())
}

/// Seal a directory block image whose entries (`count` of them, ending at
/// byte `used`) are already in place.
/// Every byte from `used` on must be zero (the entries are packed from
/// [`DIR_HEADER`] up to `used`). Returns the crc32c of the sealed block.
pub fn seal_dir_block(b: &mut [u8], owner: u64, count: u16, used: usize) -> u32 {
    put_u32(b, 0, DIR_MAGIC);
    put_u32(b, 4, 0);
    put_u64(b, 8, owner);
    put_u16(b, 16, count);
    put_u16(b, 18, used as u16);
    seal_head(b, used.max(DIR_HEADER))
}

/// Decode a directory block.
pub fn decode_dir_block(b: &[u8], blk: u64, owner: u64) -> Result<Vec<RawDirent>, FsFormatError> {
    check(b, 4, DIR_MAGIC, "directory block", blk)?;
    let bad = |why: String| FsFormatError::Corrupt {
        what: "directory block",
        block: blk,
        why,
    };
    if get_u64(b, 8) != owner {
        return Err(bad(format!(
            "owned by {} not directory {owner}",
            get_u64(b, 8)
        )));
    }
    let count = get_u16(b, 16) as usize;
    let end = get_u16(b, 18) as usize;
    if end > BLOCK_SIZE {
        return Err(bad("entries run past the block".into()));
    }
    // `count` is from the media: reserve no more than a block can hold.
    let mut out = Vec::with_capacity(count.min((end.saturating_sub(DIR_HEADER)) / DIRENT_FIXED));
    let mut o = DIR_HEADER;
    for _ in 0..count {
        if o + DIRENT_FIXED > end {
            return Err(bad("entry runs past the used area".into()));
        }
        let len = b[o + 17] as usize;
        if len == 0 || o + DIRENT_FIXED + len > end {
            return Err(bad("bad entry name length".into()));
        }
        let name = b[o + 18..o + 18 + len].to_vec();
        if name.contains(&b'/') || name.contains(&0) || name == b"." || name == b".." {
            return Err(bad("invalid entry name".into()));
        }
        out.push(RawDirent {
            pos: get_u64(b, o),
            ino: get_u64(b, o + 8),
            kind: b[o + 16],
            name,
        });
        o += dirent_size(len);
    }
    Ok(out)
}

/// One extended attribute: name and value.
pub type Xattr = (Vec<u8>, Vec<u8>);

/// Encode an xattr block.
pub fn encode_xattrs<'a>(owner: u64, attrs: impl Iterator<Item = (&'a [u8], &'a [u8])>) -> Vec<u8> {
    let mut b = vec![0u8; BLOCK_SIZE];
    put_u32(&mut b, 0, XATTR_MAGIC);
    put_u64(&mut b, 8, owner);
    let mut o = XATTR_HEADER;
    let mut n = 0u32;
    for (name, value) in attrs {
        b[o] = name.len() as u8;
        put_u16(&mut b, o + 1, value.len() as u16);
        b[o + 3..o + 3 + name.len()].copy_from_slice(name);
        b[o + 3 + name.len()..o + 3 + name.len() + value.len()].copy_from_slice(value);
        o += 3 + name.len() + value.len();
        n += 1;
    }
    put_u32(&mut b, 16, n);
    seal(&mut b, 4);
    b
}

/// Space an xattr takes in its block.
pub fn xattr_size(name_len: usize, value_len: usize) -> usize {
    3 + name_len + value_len
}

/// Decode an xattr block.
pub fn decode_xattrs(b: &[u8], blk: u64, owner: u64) -> Result<Vec<Xattr>, FsFormatError> {
    check(b, 4, XATTR_MAGIC, "xattr block", blk)?;
    let bad = |why: String| FsFormatError::Corrupt {
        what: "xattr block",
        block: blk,
        why,
    };
    if get_u64(b, 8) != owner {
        return Err(bad(format!("owned by {} not inode {owner}", get_u64(b, 8))));
    }
    let n = get_u32(b, 16) as usize;
    let mut o = XATTR_HEADER;
    let mut out = Vec::new();
    for _ in 0..n {
        if o + 3 > BLOCK_SIZE {
            return Err(bad("entry past the block".into()));
        }
        let nl = b[o] as usize;
        let vl = get_u16(b, o + 1) as usize;
        if nl == 0 || o + 3 + nl + vl > BLOCK_SIZE {
            return Err(bad("entry past the block".into()));
        }
        out.push((
            b[o + 3..o + 3 + nl].to_vec(),
            b[o + 3 + nl..o + 3 + nl + vl].to_vec(),
        ));
        o += 3 + nl + vl;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inode_round_trip_and_corruption() {
        let ino = DiskInode {
            ino: 77,
            generation: 5,
            mode: 0o100644,
            uid: 1,
            gid: 2,
            nlink: 1,
            size: 12345,
            atime: Ts { sec: -5, nsec: 7 },
            mtime: Ts {
                sec: 1_700_000_000,
                nsec: 999_999_999,
            },
            ctime: Ts::default(),
            crtime: Ts::default(),
            rdev: 0,
            flags: 0,
            xattr_blk: 0,
            xattr_blocks: 0,
            parent: 0,
            nextents: 1,
            overflow: 0,
            inline_extents: vec![Extent {
                lblk: 0,
                pblk: 100,
                len: 4,
                unwritten: true,
            }],
            symlink: vec![],
        };
        let mut b = ino.encode();
        assert_eq!(DiskInode::decode(&b, 77).unwrap(), ino);
        assert!(DiskInode::decode(&b, 78).is_err());
        b[200] ^= 1;
        assert!(matches!(
            DiskInode::decode(&b, 77),
            Err(FsFormatError::Corrupt { .. })
        ));
        // Not an inode at all (a data block, or never written): a typed
        // bad magic, which the file system takes for a stale inode number.
        assert!(matches!(
            DiskInode::decode(&[0u8; BLOCK_SIZE], 77),
            Err(FsFormatError::BadMagic { block: 77, .. })
        ));
    }

    #[test]
    fn dir_block_round_trip() {
        let names: Vec<Vec<u8>> = (0..10).map(|i| format!("file{i}").into_bytes()).collect();
        let b = encode_dir_block(
            9,
            names
                .iter()
                .enumerate()
                .map(|(i, n)| (i as u64 + 3, 100 + i as u64, 8u8, n.as_slice())),
        );
        let d = decode_dir_block(&b, 50, 9).unwrap();
        assert_eq!(d.len(), 10);
        assert_eq!(d[3].name, b"file3");
        assert_eq!(d[3].pos, 6);
        assert!(decode_dir_block(&b, 50, 10).is_err());
    }

    #[test]
    fn superblock_rejects_garbage() {
        assert!(matches!(
            Superblock::decode(&[0u8; BLOCK_SIZE], 100),
            Err(FsFormatError::NotPtsd)
        ));
    }

    #[test]
    fn ts_negative_round_trip() {
        let t = Ts { sec: -3, nsec: 500 };
        assert_eq!(Ts::from_system(t.to_system()), t);
    }
}
