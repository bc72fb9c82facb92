//! An inode's extended attributes as stored: one block in the original
//! format ([`encode_xattrs`], magic `PTXA`) while they fit in it, else a
//! chain of up to [`XATTR_MAX_BLOCKS`] blocks (magic `PTXC`), each holding
//! whole entries, linked by a `next` field, their number in the inode
//! (`DiskInode::xattr_blocks`). An image with a chain carries
//! [`INCOMPAT_XATTR_CHAIN`](crate::format::INCOMPAT_XATTR_CHAIN), so an
//! older build refuses it instead of calling the block corrupt.
//!
//! Capacity: 16 blocks of 4 064 bytes of entries (each entry is 3 bytes
//! plus its name and value), about 64 KiB per inode — ext4 without
//! `ea_inode` gives the spare space of its inode plus one block. One value
//! can be up to a block less the header (4 061 bytes less its name), as in
//! ext4.
//!
//! Block layout of a `PTXC` block:
//!
//! ```text
//! 0  magic "PTXC"    4  crc32c     8  owner inode (u64)
//! 16 next block (u64, 0 = last)    24 entry count (u32)   28 zero
//! 32 entries: name length (u8), value length (u16), name, value
//! ```

use std::collections::{BTreeMap, HashSet};
use std::ops::Range;

use ptsd_blockdev::le::{get_u16, get_u32, get_u64, put_u16, put_u32, put_u64};

use crate::chain::LoadError;
use crate::error::FsFormatError;
use crate::format::{decode_xattrs, encode_xattrs, xattr_size, Xattr, BLOCK_SIZE, XATTR_SPACE};

/// Most blocks one inode's xattrs may take.
pub const XATTR_MAX_BLOCKS: usize = 16;
/// Bytes of entries one chained block holds.
pub const XATTR_CHAIN_SPACE: usize = BLOCK_SIZE - CHAIN_HEADER;

pub(crate) const CHAIN_MAGIC: u32 = u32::from_le_bytes(*b"PTXC");
const CHAIN_HEADER: usize = 32;

fn crc_of(b: &[u8]) -> u32 {
    let c = crc32c::crc32c(&b[..4]);
    let c = crc32c::crc32c_append(c, &[0u8; 4]);
    crc32c::crc32c_append(c, &b[8..])
}

/// Encode one chained xattr block.
///
/// ```
/// use ptsd_fs::xattr_chain::{decode_xattr_chain_block, encode_xattr_chain_block};
/// let b = encode_xattr_chain_block(7, 99, [(&b"user.a"[..], &b"1"[..])].into_iter());
/// let (next, attrs) = decode_xattr_chain_block(&b, 50, 7).unwrap();
/// assert_eq!((next, attrs), (99, vec![(b"user.a".to_vec(), b"1".to_vec())]));
/// ```
pub fn encode_xattr_chain_block<'a>(
    owner: u64,
    next: u64,
    attrs: impl Iterator<Item = (&'a [u8], &'a [u8])>,
) -> Vec<u8> {
    let mut b = vec![0u8; BLOCK_SIZE];
    put_u32(&mut b, 0, CHAIN_MAGIC);
    put_u64(&mut b, 8, owner);
    put_u64(&mut b, 16, next);
    let mut o = CHAIN_HEADER;
    let mut n = 0u32;
    for (name, value) in attrs {
        b[o] = name.len() as u8;
        put_u16(&mut b, o + 1, value.len() as u16);
        b[o + 3..o + 3 + name.len()].copy_from_slice(name);
        b[o + 3 + name.len()..o + 3 + name.len() + value.len()].copy_from_slice(value);
        o += xattr_size(name.len(), value.len());
        n += 1;
    }
    put_u32(&mut b, 24, n);
    let c = crc_of(&b);
    put_u32(&mut b, 4, c);
    b
}

/// Decode one chained xattr block of inode `owner`: (next block, entries).
pub fn decode_xattr_chain_block(
    b: &[u8],
    blk: u64,
    owner: u64,
) -> Result<(u64, Vec<Xattr>), FsFormatError> {
    let bad = |why: String| FsFormatError::Corrupt {
        what: "xattr chain block",
        block: blk,
        why,
    };
    if b.len() != BLOCK_SIZE {
        return Err(bad("wrong block length".into()));
    }
    if get_u32(b, 0) != CHAIN_MAGIC {
        return Err(FsFormatError::BadMagic {
            what: "xattr chain block",
            block: blk,
        });
    }
    if get_u32(b, 4) != crc_of(b) {
        return Err(bad("checksum mismatch".into()));
    }
    if get_u64(b, 8) != owner {
        return Err(bad(format!("owned by {} not inode {owner}", get_u64(b, 8))));
    }
    let n = get_u32(b, 24) as usize;
    let mut o = CHAIN_HEADER;
    // `n` is from the media: no more than the block can hold.
    let mut out = Vec::with_capacity(n.min(XATTR_CHAIN_SPACE / 4));
    for _ in 0..n {
        if o + 3 > BLOCK_SIZE {
            return Err(bad("entry past the block".into()));
        }
        let nl = b[o] as usize;
        let vl = get_u16(b, o + 1) as usize;
        if nl == 0 || o + xattr_size(nl, vl) > BLOCK_SIZE {
            return Err(bad("entry past the block".into()));
        }
        out.push((
            b[o + 3..o + 3 + nl].to_vec(),
            b[o + 3 + nl..o + 3 + nl + vl].to_vec(),
        ));
        o += xattr_size(nl, vl);
    }
    Ok((get_u64(b, 16), out))
}

/// One block's entries: (name, value).
type BlockEntries<'a> = Vec<(&'a [u8], &'a [u8])>;

/// The entries of `attrs` (in order) block by block, each block's list
/// filling at most [`XATTR_CHAIN_SPACE`] bytes; `None` if an entry is
/// larger than a block.
fn pack(attrs: &BTreeMap<Vec<u8>, Vec<u8>>) -> Option<Vec<BlockEntries<'_>>> {
    let mut blocks: Vec<BlockEntries<'_>> = Vec::new();
    let mut used = XATTR_CHAIN_SPACE;
    for (k, v) in attrs {
        let size = xattr_size(k.len(), v.len());
        if size > XATTR_CHAIN_SPACE {
            return None;
        }
        if used + size > XATTR_CHAIN_SPACE {
            blocks.push(Vec::new());
            used = 0;
        }
        used += size;
        blocks
            .last_mut()
            .expect("a block was started")
            .push((k.as_slice(), v.as_slice()));
    }
    Some(blocks)
}

/// Blocks `attrs` need: 0 when empty, 1 while they fit the single-block
/// format, else the chain's length; `None` if they cannot be stored (more
/// than [`XATTR_MAX_BLOCKS`], or one entry larger than a chained block).
pub(crate) fn blocks_needed(attrs: &BTreeMap<Vec<u8>, Vec<u8>>) -> Option<usize> {
    let total: usize = attrs
        .iter()
        .map(|(k, v)| xattr_size(k.len(), v.len()))
        .sum();
    match total {
        0 => Some(0),
        t if t <= XATTR_SPACE => Some(1),
        _ => pack(attrs)
            .map(|b| b.len())
            .filter(|&n| n <= XATTR_MAX_BLOCKS),
    }
}

/// Encode `attrs` of inode `owner` into `blocks` (at least
/// [`blocks_needed`] of them; trailing ones stay empty): one block in the
/// single-block format, more as a chain. `None` if they do not fit.
pub(crate) fn encode_set(
    owner: u64,
    attrs: &BTreeMap<Vec<u8>, Vec<u8>>,
    blocks: &[u64],
) -> Option<Vec<(u64, Vec<u8>)>> {
    match blocks {
        [] => attrs.is_empty().then(Vec::new),
        [one] => {
            let total: usize = attrs
                .iter()
                .map(|(k, v)| xattr_size(k.len(), v.len()))
                .sum();
            (total <= XATTR_SPACE).then(|| {
                let it = attrs.iter().map(|(k, v)| (k.as_slice(), v.as_slice()));
                vec![(*one, encode_xattrs(owner, it))]
            })
        }
        _ => {
            let packed = pack(attrs).filter(|p| p.len() <= blocks.len())?;
            Some(
                blocks
                    .iter()
                    .enumerate()
                    .map(|(i, &blk)| {
                        let next = blocks.get(i + 1).copied().unwrap_or(0);
                        let entries = packed.get(i).map(Vec::as_slice).unwrap_or(&[]);
                        (
                            blk,
                            encode_xattr_chain_block(owner, next, entries.iter().copied()),
                        )
                    })
                    .collect(),
            )
        }
    }
}

/// Read the xattrs of inode `owner`: `first` is its xattr block (0: none),
/// `count` the chain's length (0: the single-block format). Returns the
/// entries and every block, in order; blocks must lie in `valid`, names
/// must be unique.
pub(crate) fn load<E>(
    owner: u64,
    first: u64,
    count: u32,
    valid: Range<u64>,
    mut read: impl FnMut(u64) -> Result<Vec<u8>, E>,
) -> Result<(Vec<Xattr>, Vec<u64>), LoadError<E>> {
    let bad = |why: String| {
        LoadError::Corrupt(FsFormatError::Corrupt {
            what: "inode",
            block: owner,
            why,
        })
    };
    if first == 0 {
        return match count {
            0 => Ok((Vec::new(), Vec::new())),
            n => Err(bad(format!("{n} xattr blocks but no first one"))),
        };
    }
    if count == 1 || count as usize > XATTR_MAX_BLOCKS {
        return Err(bad(format!("xattr chain of {count} blocks")));
    }
    if !valid.contains(&first) {
        return Err(bad(format!("xattr block {first} out of range")));
    }
    let mut out = Vec::new();
    let mut blocks = vec![first];
    if count == 0 {
        let b = read(first).map_err(LoadError::Read)?;
        out = decode_xattrs(&b, first, owner).map_err(LoadError::Corrupt)?;
    } else {
        let mut seen = HashSet::new();
        let mut next = first;
        loop {
            if !valid.contains(&next) || !seen.insert(next) {
                return Err(bad(format!(
                    "xattr chain is broken (block {next} out of range or seen twice)"
                )));
            }
            let b = read(next).map_err(LoadError::Read)?;
            let (after, entries) =
                decode_xattr_chain_block(&b, next, owner).map_err(LoadError::Corrupt)?;
            out.extend(entries);
            if seen.len() == count as usize {
                if after != 0 {
                    return Err(bad(format!("xattr chain longer than {count} blocks")));
                }
                break;
            }
            if after == 0 {
                return Err(bad(format!("xattr chain shorter than {count} blocks")));
            }
            blocks.push(after);
            next = after;
        }
    }
    let mut names = HashSet::new();
    if let Some((k, _)) = out.iter().find(|(k, _)| !names.insert(k.as_slice())) {
        return Err(bad(format!(
            "xattr {:?} stored twice",
            String::from_utf8_lossy(k)
        )));
    }
    Ok((out, blocks))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(n: usize, value: usize) -> BTreeMap<Vec<u8>, Vec<u8>> {
        (0..n)
            .map(|i| {
                (
                    format!("user.attr{i:05}").into_bytes(),
                    vec![i as u8; value],
                )
            })
            .collect()
    }

    fn round_trip(attrs: &BTreeMap<Vec<u8>, Vec<u8>>, extra: usize) -> (Vec<Xattr>, Vec<u64>) {
        let n = blocks_needed(attrs).unwrap() + extra;
        let blocks: Vec<u64> = (0..n as u64).map(|i| 100 + i * 3).collect();
        let enc: BTreeMap<u64, Vec<u8>> =
            encode_set(9, attrs, &blocks).unwrap().into_iter().collect();
        let count = if n > 1 { n as u32 } else { 0 };
        load(
            9,
            blocks.first().copied().unwrap_or(0),
            count,
            3..1000,
            |b| enc.get(&b).cloned().ok_or(()),
        )
        .unwrap()
    }

    #[test]
    fn sets_round_trip_in_one_block_or_a_chain() {
        for (n, value, blocks) in [
            (0, 0, 0),
            (3, 10, 1),
            (150, 10, 1),
            (151, 10, 2),
            (900, 50, 15),
        ] {
            let attrs = set(n, value);
            assert_eq!(blocks_needed(&attrs), Some(blocks), "{n} of {value}");
            let (back, got_blocks) = round_trip(&attrs, 0);
            assert_eq!(got_blocks.len(), blocks);
            assert_eq!(back, attrs.clone().into_iter().collect::<Vec<_>>());
        }
        // Empty blocks at the end of a chain (left by a removal).
        let attrs = set(5, 10);
        let (back, got) = round_trip(&attrs, 2);
        assert_eq!(got.len(), 3);
        assert_eq!(back.len(), 5);
    }

    #[test]
    fn limits() {
        // More than 16 blocks' worth.
        assert_eq!(blocks_needed(&set(1600, 50)), None);
        // One value as large as a chained block allows, with others.
        let mut attrs = set(3, 10);
        attrs.insert(b"user.big".to_vec(), vec![1; XATTR_CHAIN_SPACE - 3 - 8]);
        assert_eq!(blocks_needed(&attrs), Some(2));
        attrs.insert(b"user.big".to_vec(), vec![1; XATTR_CHAIN_SPACE - 3 - 7]);
        assert_eq!(blocks_needed(&attrs), None);
    }

    #[test]
    fn corrupt_chains_are_refused() {
        let attrs = set(300, 20);
        let blocks = [10u64, 11, 12];
        let enc: BTreeMap<u64, Vec<u8>> = encode_set(9, &attrs, &blocks)
            .unwrap()
            .into_iter()
            .collect();
        let read = |b: u64| enc.get(&b).cloned().ok_or(());
        assert!(load(9, 10, 3, 3..100, read).is_ok());
        for (first, count, valid) in [
            (10, 2, 3..100),  // longer than said
            (10, 4, 3..100),  // shorter than said
            (11, 3, 3..100),  // starts in the middle
            (10, 3, 3..12),   // out of range
            (10, 1, 3..100),  // a chain of one
            (10, 17, 3..100), // too long
            (0, 3, 3..100),   // no first block
        ] {
            assert!(
                matches!(
                    load(9, first, count, valid, read),
                    Err(LoadError::Corrupt(_))
                ),
                "first {first} count {count}"
            );
        }
        // Another inode's chain.
        assert!(matches!(
            load(8, 10, 3, 3..100, read),
            Err(LoadError::Corrupt(_))
        ));
        // A loop.
        let looped = encode_xattr_chain_block(9, 10, std::iter::empty());
        assert!(matches!(
            load(9, 10, 3, 3..100, |_| Ok::<_, ()>(looped.clone())),
            Err(LoadError::Corrupt(_))
        ));
        // Flipped bit.
        let mut b = enc[&11].clone();
        b[100] ^= 1;
        assert!(decode_xattr_chain_block(&b, 11, 9).is_err());
    }
}
