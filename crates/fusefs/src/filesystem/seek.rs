//! SEEK_DATA and SEEK_HOLE from the extent map. Unwritten (preallocated)
//! runs read as zeroes and count as holes, as on ext4 once its page cache
//! holds nothing for them (a FUSE write has reached the file system before
//! it returns).

use super::{FileSystem, BS};
use crate::error::Errno;
use crate::extent::ExtentMap;

/// Which end of a data region to look for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seek {
    /// The first byte at or after the offset that holds data.
    Data,
    /// The first byte at or after the offset inside a hole (the end of the
    /// file counts as one).
    Hole,
}

/// The first written block at or after `lblk` (below `end`).
fn next_data(ext: &ExtentMap, mut lblk: u64, end: u64) -> Option<u64> {
    while lblk < end {
        match ext.lookup(lblk) {
            Some((_, false, _)) => return Some(lblk),
            Some((_, true, left)) => lblk += left,
            None => lblk = ext.next_mapped(lblk)?,
        }
    }
    None
}

/// The first block at or after `lblk` that is not written.
fn next_hole(ext: &ExtentMap, mut lblk: u64) -> u64 {
    while let Some((_, false, left)) = ext.lookup(lblk) {
        lblk += left;
    }
    lblk
}

impl FileSystem {
    /// `lseek(fd, offset, SEEK_DATA or SEEK_HOLE)`: ENXIO at or past the end
    /// of the file, or for SEEK_DATA when only holes follow.
    pub fn seek(&self, ino: u64, offset: u64, what: Seek) -> Result<u64, Errno> {
        let g = self.lock(ino)?;
        if g.is_dir() {
            return Err(Errno::EISDIR);
        }
        let size = g.d.size;
        if offset >= size {
            return Err(Errno(libc::ENXIO));
        }
        let lblk = offset / BS;
        let at = match what {
            Seek::Data => {
                let end = size.div_ceil(BS);
                next_data(&g.ext, lblk, end).ok_or(Errno(libc::ENXIO))? * BS
            }
            Seek::Hole => next_hole(&g.ext, lblk) * BS,
        };
        Ok(at.max(offset).min(size))
    }
}
