//! Requests per FUSE opcode, counted in a small shared file.
//!
//! The front end ([`crate::frontend::Frontend`]) counts each request the
//! kernel sends (INIT, DESTROY and INTERRUPT aside; a BATCH_FORGET as its
//! forgets), on either transport, in an [`OpCounts`] table. The table
//! lives in a file mapped shared, so another
//! process (the benchmark) reads the live counts with a plain
//! [`read_counts`] at any moment, without a protocol or a signal: a
//! benchmark takes one snapshot before and one after a timed run and
//! divides the difference by the workload's operations.
//!
//! The file: 8 bytes of magic, a little-endian `u64` count `N`, then `N`
//! little-endian `u64` counters in the order of [`OP_NAMES`].

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

const MAGIC: &[u8; 8] = b"PTSDOPC1";
const HEADER: usize = 16;

/// The counted opcodes, in file order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum Op {
    Lookup,
    Forget,
    Getattr,
    Setattr,
    Readlink,
    Mknod,
    Mkdir,
    Unlink,
    Rmdir,
    Symlink,
    Rename,
    Link,
    Open,
    Read,
    Write,
    Flush,
    Release,
    Fsync,
    Opendir,
    Readdir,
    Readdirplus,
    Releasedir,
    Fsyncdir,
    Statfs,
    Setxattr,
    Getxattr,
    Listxattr,
    Removexattr,
    Access,
    Create,
    Getlk,
    Setlk,
    Bmap,
    Ioctl,
    Poll,
    Fallocate,
    Lseek,
    CopyFileRange,
}

/// Names of the counted opcodes, indexed by [`Op`] (the file's order).
pub const OP_NAMES: [&str; OPS] = [
    "lookup",
    "forget",
    "getattr",
    "setattr",
    "readlink",
    "mknod",
    "mkdir",
    "unlink",
    "rmdir",
    "symlink",
    "rename",
    "link",
    "open",
    "read",
    "write",
    "flush",
    "release",
    "fsync",
    "opendir",
    "readdir",
    "readdirplus",
    "releasedir",
    "fsyncdir",
    "statfs",
    "setxattr",
    "getxattr",
    "listxattr",
    "removexattr",
    "access",
    "create",
    "getlk",
    "setlk",
    "bmap",
    "ioctl",
    "poll",
    "fallocate",
    "lseek",
    "copy_file_range",
];

/// Number of counted opcodes.
pub const OPS: usize = 38;

/// Why a counts file could not be made or read.
#[derive(Debug, thiserror::Error)]
pub enum OpCountError {
    /// Creating, sizing, mapping or reading the file failed.
    #[error("op counts file {path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a counts file of this layout.
    #[error("op counts file {path}: not a ptsd op-count table ({why})")]
    Format {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        why: String,
    },
}

/// A table of request counters in a shared file mapping.
pub struct OpCounts {
    map: memmap2::MmapMut,
}

impl OpCounts {
    /// Creates (or truncates) `path` and maps it; all counters start at 0.
    pub fn create(path: &Path) -> Result<Arc<Self>, OpCountError> {
        let io = |source| OpCountError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .map_err(io)?;
        file.set_len((HEADER + OPS * 8) as u64).map_err(io)?;
        // SAFETY: the file was just created and sized by us; nothing else
        // truncates it while mapped (a reader only reads it).
        let mut map = unsafe { memmap2::MmapMut::map_mut(&file) }.map_err(io)?;
        map[..8].copy_from_slice(MAGIC);
        map[8..16].copy_from_slice(&(OPS as u64).to_le_bytes());
        Ok(Arc::new(OpCounts { map }))
    }

    fn counters(&self) -> &[AtomicU64] {
        let bytes = &self.map[HEADER..HEADER + OPS * 8];
        // SAFETY: the mapping is page-aligned and HEADER is a multiple of 8,
        // so the slice is 8-byte aligned; it is OPS * 8 bytes long; AtomicU64
        // has the size and alignment of u64; every access goes through the
        // atomics for as long as the mapping lives (borrowed from self).
        unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<AtomicU64>(), OPS) }
    }

    /// Counts one request of `op`.
    #[inline]
    pub fn bump(&self, op: Op) {
        self.add(op, 1);
    }

    /// Counts `n` requests of `op`.
    #[inline]
    pub fn add(&self, op: Op, n: u64) {
        self.counters()[op as usize].fetch_add(n, Ordering::Relaxed);
    }

    /// The current counts, in [`OP_NAMES`] order.
    pub fn snapshot(&self) -> Vec<u64> {
        self.counters()
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect()
    }
}

/// Reads a counts file written by [`OpCounts`] (of this process or another).
pub fn read_counts(path: &Path) -> Result<Vec<u64>, OpCountError> {
    let bytes = std::fs::read(path).map_err(|source| OpCountError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let bad = |why: String| OpCountError::Format {
        path: path.to_path_buf(),
        why,
    };
    if bytes.len() < HEADER || &bytes[..8] != MAGIC {
        return Err(bad("no magic".into()));
    }
    let n = u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes"));
    if n != OPS as u64 || bytes.len() != HEADER + OPS * 8 {
        return Err(bad(format!("{n} counters, {} bytes", bytes.len())));
    }
    Ok(bytes[HEADER..]
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect())
}

/// `(FUSE opcode, counter)`: what [`Op::of_opcode`] looks up. TMPFILE
/// counts as a create.
const BY_OPCODE: [(u32, Op); 43] = [
    (1, Op::Lookup),
    (2, Op::Forget),
    (3, Op::Getattr),
    (4, Op::Setattr),
    (5, Op::Readlink),
    (6, Op::Symlink),
    (8, Op::Mknod),
    (9, Op::Mkdir),
    (10, Op::Unlink),
    (11, Op::Rmdir),
    (12, Op::Rename),
    (13, Op::Link),
    (14, Op::Open),
    (15, Op::Read),
    (16, Op::Write),
    (17, Op::Statfs),
    (18, Op::Release),
    (20, Op::Fsync),
    (21, Op::Setxattr),
    (22, Op::Getxattr),
    (23, Op::Listxattr),
    (24, Op::Removexattr),
    (25, Op::Flush),
    (27, Op::Opendir),
    (28, Op::Readdir),
    (29, Op::Releasedir),
    (30, Op::Fsyncdir),
    (31, Op::Getlk),
    (32, Op::Setlk),
    (33, Op::Setlk),
    (34, Op::Access),
    (35, Op::Create),
    (37, Op::Bmap),
    (39, Op::Ioctl),
    (40, Op::Poll),
    (42, Op::Forget),
    (43, Op::Fallocate),
    (44, Op::Readdirplus),
    (45, Op::Rename),
    (46, Op::Lseek),
    (47, Op::CopyFileRange),
    // SYNCFS counts as the fsync it is (a kernel that sends it).
    (50, Op::Fsync),
    (51, Op::Create),
];

impl Op {
    /// The counter of a request with FUSE opcode `opcode` (`None`: not
    /// counted, as INIT, DESTROY, INTERRUPT).
    pub fn of_opcode(opcode: u32) -> Option<Op> {
        BY_OPCODE
            .iter()
            .find(|&&(o, _)| o == opcode)
            .map(|&(_, op)| op)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_read_back_from_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("counts");
        let c = OpCounts::create(&path).unwrap();
        c.bump(Op::Lookup);
        c.bump(Op::Lookup);
        c.bump(Op::CopyFileRange);
        let read = read_counts(&path).unwrap();
        assert_eq!(read, c.snapshot());
        assert_eq!(read[Op::Lookup as usize], 2);
        assert_eq!(read[Op::CopyFileRange as usize], 1);
        assert_eq!(read.iter().sum::<u64>(), 3);
        assert_eq!(OP_NAMES[Op::CopyFileRange as usize], "copy_file_range");
    }

    #[test]
    fn opcodes_map_to_their_counters() {
        assert_eq!(Op::of_opcode(1), Some(Op::Lookup));
        assert_eq!(Op::of_opcode(42), Some(Op::Forget));
        assert_eq!(Op::of_opcode(51), Some(Op::Create));
        assert_eq!(Op::of_opcode(47), Some(Op::CopyFileRange));
        // INIT, INTERRUPT, DESTROY: not counted.
        for o in [26, 36, 38] {
            assert_eq!(Op::of_opcode(o), None);
        }
        // Each counter's name matches its opcode's.
        for (o, op) in BY_OPCODE {
            assert_eq!(Op::of_opcode(o), Some(op));
        }
    }

    #[test]
    fn a_foreign_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("other");
        std::fs::write(&path, b"not a table at all").unwrap();
        assert!(matches!(
            read_counts(&path),
            Err(OpCountError::Format { .. })
        ));
        assert!(matches!(
            read_counts(&dir.path().join("missing")),
            Err(OpCountError::Io { .. })
        ));
    }
}
