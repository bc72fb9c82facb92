//! Batched reads and writes through io_uring.
//!
//! A pool of rings sits behind a mutex: a caller takes a ring, submits its
//! whole batch with one `io_uring_enter` per ring-full, reaps every
//! completion and puts the ring back. Threads that batch at the same time
//! each get their own ring (a new one is made when the pool is empty), so the
//! mutex is held only to pop and push. This is simpler than a ring per
//! thread (no thread-local rings outliving the device) and as fast, since
//! ring setup happens only when concurrency grows.

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

use io_uring::{opcode, types, IoUring, Probe};
use parking_lot::Mutex;

/// Largest piece one SQE carries (its length field is 32 bits).
pub(crate) const MAX_OP_BYTES: usize = 1 << 30;

/// One read or write, as raw parts. The caller keeps the memory alive and
/// unaliased until [`RingPool::run`] returns.
pub(crate) struct RawOp {
    pub ptr: *mut u8,
    pub len: usize,
    pub offset: u64,
}

/// What a batch that went through the ring did.
pub(crate) struct Ran {
    /// Bytes each op transferred: short (or zero after EINTR/EAGAIN, or
    /// when its `rw_flags` were refused) ops are for the caller to finish.
    pub done: Vec<usize>,
    /// Some op was refused with EOPNOTSUPP for its `rw_flags` (a kernel or
    /// file system without them); the caller should stop passing them.
    pub flags_refused: bool,
}

/// Why a batch did not complete through the ring.
pub(crate) enum UringError {
    /// The ring itself failed; nothing is in flight any more and the caller
    /// may redo the whole batch another way.
    Ring(io::Error),
    /// An operation failed on the device.
    Op(io::Error),
}

pub(crate) struct RingPool {
    entries: u32,
    idle: Mutex<Vec<IoUring>>,
}

impl RingPool {
    /// Set up the first ring and check the kernel supports the opcodes we
    /// use (IORING_OP_READ/WRITE need Linux 5.6).
    pub(crate) fn new(entries: u32) -> io::Result<Self> {
        let ring = IoUring::new(entries)?;
        let mut probe = Probe::new();
        ring.submitter().register_probe(&mut probe)?;
        for (code, name) in [
            (opcode::Read::CODE, "IORING_OP_READ"),
            (opcode::Write::CODE, "IORING_OP_WRITE"),
        ] {
            if !probe.is_supported(code) {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    format!("kernel io_uring lacks {name}"),
                ));
            }
        }
        Ok(Self {
            entries,
            idle: Mutex::new(vec![ring]),
        })
    }

    fn take(&self) -> io::Result<IoUring> {
        if let Some(ring) = self.idle.lock().pop() {
            return Ok(ring);
        }
        IoUring::new(self.entries)
    }

    /// Submit every op (reads if `write` is false) on file `fd` with
    /// `rw_flags` (`RWF_*`, as for `pwritev2`), a ring-full per
    /// `io_uring_enter`, and wait for all of them. Returns the bytes each op
    /// transferred, which can be short (or zero after EINTR/EAGAIN, or
    /// when the flags were refused): the caller finishes those synchronously.
    pub(crate) fn run(
        &self,
        fd: RawFd,
        ops: &[RawOp],
        write: bool,
        rw_flags: i32,
    ) -> Result<Ran, UringError> {
        let mut ring = self.take().map_err(UringError::Ring)?;
        let capacity = ring.params().sq_entries() as usize;
        let mut done = vec![0usize; ops.len()];
        let mut op_error = None;
        let mut flags_refused = false;
        for (chunk_index, chunk) in ops.chunks(capacity).enumerate() {
            let base = chunk_index * capacity;
            {
                let mut sq = ring.submission();
                for (i, op) in chunk.iter().enumerate() {
                    let len = op.len as u32; // <= MAX_OP_BYTES, checked by the caller
                    let entry = if write {
                        opcode::Write::new(types::Fd(fd), op.ptr, len)
                            .offset(op.offset)
                            .rw_flags(rw_flags)
                            .build()
                    } else {
                        opcode::Read::new(types::Fd(fd), op.ptr, len)
                            .offset(op.offset)
                            .rw_flags(rw_flags)
                            .build()
                    }
                    .user_data((base + i) as u64);
                    // SAFETY: the entry points at memory the caller keeps
                    // valid (and, for reads, exclusively ours) until `run`
                    // returns, and `run` returns only once every submitted
                    // entry has completed (see the wait loop below).
                    // Entries pushed but never submitted die with the ring.
                    if unsafe { sq.push(&entry) }.is_err() {
                        // Cannot happen: the queue is empty at the start of a
                        // chunk and a chunk is at most its capacity.
                        return Err(UringError::Ring(io::Error::other(
                            "io_uring submission queue unexpectedly full",
                        )));
                    }
                }
            }
            let mut completed = 0usize;
            let mut warned = false;
            while completed < chunk.len() {
                if let Err(e) = ring.submit_and_wait(chunk.len() - completed) {
                    let retryable = matches!(
                        e.raw_os_error(),
                        Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
                    );
                    if !retryable {
                        let unsubmitted = ring.submission().len();
                        let in_flight = chunk.len() - unsubmitted - completed;
                        if in_flight == 0 {
                            // Dropping the ring discards the unsubmitted
                            // entries; nothing can touch the buffers now.
                            return Err(UringError::Ring(e));
                        }
                        // The kernel still owns some buffers: returning now
                        // would let it write into freed memory, so wait.
                        if !warned {
                            tracing::error!(
                                "io_uring_enter failed with {in_flight} requests in flight ({e}); waiting for them"
                            );
                            warned = true;
                        }
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
                for cqe in ring.completion() {
                    completed += 1;
                    let index = cqe.user_data() as usize;
                    let res = cqe.result();
                    if res >= 0 {
                        if let Some(d) = done.get_mut(index) {
                            *d = res as usize;
                        }
                    } else if -res == libc::EOPNOTSUPP && rw_flags != 0 {
                        flags_refused = true;
                    } else if -res != libc::EINTR && -res != libc::EAGAIN {
                        op_error.get_or_insert(io::Error::from_raw_os_error(-res));
                    }
                }
            }
        }
        self.idle.lock().push(ring);
        match op_error {
            Some(e) => Err(UringError::Op(e)),
            None => Ok(Ran {
                done,
                flags_refused,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::os::fd::AsRawFd;

    use super::*;

    #[test]
    fn reports_short_transfers_and_errors() {
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(&[7u8; 8192]).unwrap();
        let pool = match RingPool::new(2) {
            Ok(pool) => pool,
            Err(e) => {
                eprintln!("io_uring unavailable here ({e}); nothing to test");
                return;
            }
        };
        let mut a = vec![0u8; 4096];
        let mut b = vec![0u8; 4096];
        let mut c = vec![0u8; 4096];
        let ops = [
            RawOp {
                ptr: a.as_mut_ptr(),
                len: 4096,
                offset: 0,
            },
            // Runs 2048 bytes past the end of the file: a short read.
            RawOp {
                ptr: b.as_mut_ptr(),
                len: 4096,
                offset: 6144,
            },
            // Past the end: zero bytes. Three ops on a 2-entry ring also
            // take two submissions.
            RawOp {
                ptr: c.as_mut_ptr(),
                len: 4096,
                offset: 65536,
            },
        ];
        let done = match pool.run(file.as_raw_fd(), &ops, false, 0) {
            Ok(ran) => ran.done,
            Err(UringError::Ring(e) | UringError::Op(e)) => panic!("{e}"),
        };
        assert_eq!(done, vec![4096, 2048, 0]);
        assert!(a.iter().all(|&x| x == 7));
        assert!(b[..2048].iter().all(|&x| x == 7));
        // A write to a read-only descriptor fails per op, not per ring.
        let ro = std::fs::File::open("/proc/self/exe").unwrap();
        let ops = [RawOp {
            ptr: a.as_mut_ptr(),
            len: 4096,
            offset: 0,
        }];
        assert!(matches!(
            pool.run(ro.as_raw_fd(), &ops, true, 0),
            Err(UringError::Op(_))
        ));
        // Flags the kernel does not know are refused per op, reported as
        // such, and leave the op for the caller (nothing transferred).
        let rw = file.as_raw_fd();
        let ops = [RawOp {
            ptr: a.as_mut_ptr(),
            len: 4096,
            offset: 0,
        }];
        match pool.run(rw, &ops, true, 1 << 30) {
            Ok(ran) => {
                assert!(ran.flags_refused);
                assert_eq!(ran.done, vec![0]);
            }
            Err(UringError::Ring(e) | UringError::Op(e)) => panic!("{e}"),
        }
        assert!(RingPool::new(0).is_err());
    }
}
