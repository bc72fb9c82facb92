//! A bound on the page cache a buffered file's batched writes keep: the
//! newest `budget` bytes written stay cached (re-read soon, they are
//! memory copies), older ones are written back and dropped, so that later
//! writes reuse those pages instead of taking fresh memory from the kernel.

use std::collections::VecDeque;
use std::os::fd::RawFd;

use parking_lot::Mutex;

/// Byte ranges of a file in the order written, oldest first, adjacent
/// ranges merged.
#[derive(Default)]
struct Ranges {
    list: VecDeque<(u64, u64)>,
    bytes: u64,
}

impl Ranges {
    fn push(&mut self, off: u64, len: u64) {
        self.bytes += len;
        match self.list.back_mut() {
            Some((o, l)) if *o + *l == off => *l += len,
            _ => self.list.push_back((off, len)),
        }
    }

    /// Takes the oldest bytes until at most `keep` are left (splitting the
    /// range that straddles the line: adjacent writes merge into one).
    fn drain_over(&mut self, keep: u64, out: &mut Vec<(u64, u64)>) {
        while self.bytes > keep {
            let Some(front) = self.list.front_mut() else {
                break;
            };
            let excess = self.bytes - keep;
            if front.1 <= excess {
                out.push(*front);
                self.bytes -= front.1;
                self.list.pop_front();
            } else {
                out.push((front.0, excess));
                front.0 += excess;
                front.1 -= excess;
                self.bytes -= excess;
            }
        }
    }
}

/// The two stages a written range goes through: `written` (newest, kept)
/// and `flushing` (writeback started when it left `written`, dropped when
/// it leaves here: by then it is clean, and a dirty page would be kept).
pub(super) struct WriteWindow {
    half: u64,
    state: Mutex<(Ranges, Ranges)>,
}

impl WriteWindow {
    /// A window keeping about `budget` bytes of the newest writes cached.
    pub(super) fn new(budget: u64) -> Self {
        WriteWindow {
            half: (budget / 2).max(1),
            state: Mutex::new((Ranges::default(), Ranges::default())),
        }
    }

    /// Records the ranges just written to `fd`; starts the writeback of the
    /// ranges pushed out of the newest half, and drops those pushed out of
    /// the older half.
    pub(super) fn wrote(&self, fd: RawFd, ranges: impl Iterator<Item = (u64, u64)>) {
        let (mut kick, mut evict) = (Vec::new(), Vec::new());
        {
            let mut st = self.state.lock();
            let (written, flushing) = &mut *st;
            for (off, len) in ranges {
                written.push(off, len);
            }
            written.drain_over(self.half, &mut kick);
            for &(off, len) in &kick {
                flushing.push(off, len);
            }
            flushing.drain_over(self.half, &mut evict);
        }
        // Hints, outside the lock: a failure only leaves pages cached.
        for (off, len) in kick {
            // SAFETY: a plain syscall on a descriptor the caller owns; it
            // only starts the writeback of the range's dirty pages.
            unsafe {
                libc::sync_file_range(
                    fd,
                    off as libc::off64_t,
                    len as libc::off64_t,
                    libc::SYNC_FILE_RANGE_WRITE,
                )
            };
        }
        for (off, len) in evict {
            // SAFETY: as above; it drops the range's clean cached pages.
            unsafe {
                libc::posix_fadvise(
                    fd,
                    off as libc::off_t,
                    len as libc::off_t,
                    libc::POSIX_FADV_DONTNEED,
                )
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_merge_and_drain_oldest_first() {
        let mut r = Ranges::default();
        r.push(0, 10);
        r.push(10, 5); // merged
        r.push(100, 20);
        r.push(50, 10);
        assert_eq!(r.list.len(), 3);
        let mut out = Vec::new();
        r.drain_over(30, &mut out);
        assert_eq!(out, vec![(0, 15)]);
        assert_eq!(r.bytes, 30);
        // The range straddling the line is split.
        r.drain_over(25, &mut out);
        assert_eq!(out, vec![(0, 15), (100, 5)]);
        r.drain_over(0, &mut out);
        assert_eq!(out, vec![(0, 15), (100, 5), (105, 15), (50, 10)]);
        assert_eq!(r.bytes, 0);
    }

    #[test]
    fn old_writes_are_dropped_from_the_page_cache() {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::FileExt;
        let dir = tempfile::tempdir().unwrap();
        let f = std::fs::File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.path().join("img"))
            .unwrap();
        if crate::file_on_ram_fs(&f) {
            return; // tmpfs pages are the file: nothing to drop
        }
        let w = WriteWindow::new(1 << 20);
        let chunk = vec![7u8; 256 << 10];
        for i in 0..16u64 {
            f.write_all_at(&chunk, i * chunk.len() as u64).unwrap();
            // Clean before it can be dropped: a dirty page stays cached.
            f.sync_data().unwrap();
            w.wrote(
                f.as_raw_fd(),
                std::iter::once((i * chunk.len() as u64, chunk.len() as u64)),
            );
        }
        let cached = resident_pages(&f, 0, 1 << 20);
        let newest = resident_pages(&f, 3 << 20, 1 << 20);
        assert_eq!(cached, 0, "the oldest MiB is still cached");
        assert_eq!(newest, 256, "the newest MiB was dropped");
        // The data is all there.
        let mut back = vec![0u8; chunk.len()];
        f.read_exact_at(&mut back, 0).unwrap();
        assert_eq!(back, chunk);
    }

    /// Pages of `[off, off + len)` in the page cache (`mincore` of a map).
    fn resident_pages(f: &std::fs::File, off: u64, len: usize) -> usize {
        use std::os::fd::AsRawFd;
        // SAFETY: a read-only shared map of a range of a file we hold,
        // only passed to mincore and unmapped before returning.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                off as libc::off_t,
            );
            assert_ne!(p, libc::MAP_FAILED);
            let mut v = vec![0u8; len / 4096];
            assert_eq!(libc::mincore(p, len, v.as_mut_ptr()), 0);
            libc::munmap(p, len);
            v.iter().filter(|&&b| b & 1 == 1).count()
        }
    }
}
