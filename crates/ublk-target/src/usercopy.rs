//! The user-copy data path (`UBLK_F_USER_COPY`), which the kernel requires
//! of a zoned device: the request's data is not mapped into the daemon's
//! per-tag buffer; the daemon reads a write's data from, and writes a
//! read's (or a zone report's) data to, the device's character node
//! `/dev/ublkcN` at an offset naming the queue and tag.
//!
//! The queue thread does the copying around the request path, so the
//! engine and backends see the same per-tag buffer as on the conventional
//! path: [`UserCopy::copy_in`] before a write is handed in,
//! [`UserCopy::copy_out`] before a read is completed.

use std::fs::File;
use std::os::unix::fs::FileExt;

/// `UBLKSRV_IO_BUF_OFFSET`: where the per-request buffers start in the
/// character device's offset space.
pub const IO_BUF_OFFSET: u64 = 0x8000_0000;
/// `UBLK_IO_BUF_BITS`: offset bits within one request's buffer.
pub const IO_BUF_BITS: u32 = 25;
/// `UBLK_TAG_BITS`.
pub const TAG_BITS: u32 = 16;

/// The offset of byte `offset` of request (`queue`, `tag`)'s data on
/// `/dev/ublkcN` (the kernel's `ublk_user_copy_pos`).
///
/// ```
/// use ptsd_ublk::usercopy::{user_copy_pos, IO_BUF_OFFSET};
/// assert_eq!(user_copy_pos(0, 0, 0), IO_BUF_OFFSET);
/// assert_eq!(user_copy_pos(0, 1, 4096), IO_BUF_OFFSET + (1 << 25) + 4096);
/// assert_eq!(user_copy_pos(1, 0, 0), IO_BUF_OFFSET + (1 << 41));
/// ```
pub fn user_copy_pos(queue: u16, tag: u16, offset: u32) -> u64 {
    IO_BUF_OFFSET
        + ((u64::from(queue) << (IO_BUF_BITS + TAG_BITS))
            | (u64::from(tag) << IO_BUF_BITS)
            | u64::from(offset & ((1 << IO_BUF_BITS) - 1)))
}

/// Copies request data between a queue's tag buffers and the character
/// device (or, in tests, any file standing in for it).
#[derive(Debug)]
pub struct UserCopy {
    cdev: File,
    queue: u16,
}

impl UserCopy {
    /// Copy for queue `queue` through `cdev` (the opened `/dev/ublkcN`).
    pub fn new(cdev: File, queue: u16) -> Self {
        UserCopy { cdev, queue }
    }

    /// Fill `buf` with the data of the request on `tag` (a write's).
    pub fn copy_in(&self, tag: u16, buf: &mut [u8]) -> std::io::Result<()> {
        self.cdev
            .read_exact_at(buf, user_copy_pos(self.queue, tag, 0))
    }

    /// Hand `buf` to the kernel as the data of the request on `tag` (a
    /// read's, or a zone report).
    pub fn copy_out(&self, tag: u16, buf: &[u8]) -> std::io::Result<()> {
        self.cdev
            .write_all_at(buf, user_copy_pos(self.queue, tag, 0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_land_at_each_tags_offset() {
        // A sparse file stands in for /dev/ublkcN: what copy_out puts at a
        // tag's offset is what copy_in of that tag reads, and tags or
        // queues do not overlap.
        let f = tempfile::tempfile().unwrap();
        let q0 = UserCopy::new(f.try_clone().unwrap(), 0);
        let q1 = UserCopy::new(f.try_clone().unwrap(), 1);
        q0.copy_out(3, &[0xAB; 4096]).unwrap();
        q1.copy_out(3, &[0xCD; 4096]).unwrap();
        let mut got = vec![0u8; 4096];
        q0.copy_in(3, &mut got).unwrap();
        assert_eq!(got, vec![0xAB; 4096]);
        q1.copy_in(3, &mut got).unwrap();
        assert_eq!(got, vec![0xCD; 4096]);
        let mut raw = vec![0u8; 4096];
        f.read_exact_at(&mut raw, user_copy_pos(0, 3, 0)).unwrap();
        assert_eq!(raw, vec![0xAB; 4096]);
    }

    #[cfg(feature = "kernel")]
    #[test]
    fn offsets_match_libublk() {
        for (q, t, o) in [(0u16, 0u16, 0u32), (1, 2, 512), (3, 4095, 1 << 20)] {
            assert_eq!(
                user_copy_pos(q, t, o),
                libublk::io::UblkIOCtx::ublk_user_copy_pos(q, t, o)
            );
        }
    }
}
