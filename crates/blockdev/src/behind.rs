//! Write-behind: owned batches written by a background thread.

use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};

use crate::{check_request, BlockDevice, BlockError};

/// Wraps a device so that [`write_batch_owned`](BlockDevice::write_batch_owned)
/// returns at once and a background thread writes the batch, while the
/// caller goes on. A read first waits for the batches handed over before it
/// that write any of its blocks, so it sees them; every other call waits
/// for all of them, so a [`flush`](BlockDevice::flush) makes them durable
/// and writes stay in order.
///
/// For a store that writes out large batches while holding a lock (an
/// emulated SSD's page image: the kernel's copy into its page cache then
/// happens off the lock). At most `max_bytes` are in flight; a batch that
/// would exceed that waits (back-pressure), except the first.
///
/// A background write that fails poisons the device: every later call
/// returns [`BlockError::WriteBehindFailed`] with the cause, since what the
/// caller believed written is not.
///
/// ```
/// use std::sync::Arc;
/// use ptsd_blockdev::{BlockDevice, MemDevice, WriteBehind};
///
/// let dev = WriteBehind::new(Arc::new(MemDevice::new(512, 64).unwrap()), 1 << 20).unwrap();
/// dev.write_batch_owned(vec![(3, vec![7u8; 1024])]).unwrap(); // returns at once
/// let mut buf = vec![0u8; 512];
/// dev.read(4, &mut buf).unwrap(); // waits for it
/// assert_eq!(buf, vec![7u8; 512]);
/// dev.flush().unwrap();
/// ```
pub struct WriteBehind {
    inner: Arc<dyn BlockDevice>,
    shared: Arc<Shared>,
    max_bytes: usize,
    worker: Option<JoinHandle<()>>,
}

struct Shared {
    state: Mutex<State>,
    /// Signalled when a batch is queued or the device is dropped.
    work: Condvar,
    /// Signalled when a batch is done.
    done: Condvar,
}

/// An owned batch of extents and its byte count.
type Batch = (Vec<(u64, Vec<u8>)>, usize);

/// The blocks a batch not yet written covers, for reads to check against.
struct Pending {
    /// Its number in `State::submitted` order.
    seq: u64,
    /// First and last-plus-one block of all its extents (a quick reject).
    span: (u64, u64),
    /// Its extents, `[start, end)` in blocks.
    extents: Vec<(u64, u64)>,
}

impl Pending {
    fn overlaps(&self, start: u64, end: u64) -> bool {
        start < self.span.1
            && self.span.0 < end
            && self.extents.iter().any(|&(s, e)| start < e && s < end)
    }
}

#[derive(Default)]
struct State {
    /// Batches handed over and not yet taken.
    queue: std::collections::VecDeque<Batch>,
    /// Batches handed over and not yet written, oldest first.
    pending: std::collections::VecDeque<Pending>,
    /// Batches handed over so far, and written so far (in order).
    submitted: u64,
    completed: u64,
    bytes_in_flight: usize,
    failed: Option<Arc<BlockError>>,
    closing: bool,
}

impl WriteBehind {
    /// Wrap `inner`, with at most `max_bytes` handed over and not yet
    /// written. Starts the writer thread.
    pub fn new(inner: Arc<dyn BlockDevice>, max_bytes: usize) -> Result<Self, BlockError> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            work: Condvar::new(),
            done: Condvar::new(),
        });
        let worker = {
            let (inner, shared) = (inner.clone(), shared.clone());
            std::thread::Builder::new()
                .name("write-behind".into())
                .spawn(move || write_loop(&*inner, &shared))?
        };
        Ok(Self {
            inner,
            shared,
            max_bytes,
            worker: Some(worker),
        })
    }

    /// Wait until every batch handed over before this call is written;
    /// the error of any background write that failed.
    pub fn wait(&self) -> Result<(), BlockError> {
        let mut st = self.shared.state.lock();
        let target = st.submitted;
        while st.completed < target && st.failed.is_none() {
            self.shared.done.wait(&mut st);
        }
        match &st.failed {
            Some(e) => Err(BlockError::WriteBehindFailed(e.clone())),
            None => Ok(()),
        }
    }

    /// Wait until every batch handed over before this call that writes a
    /// block of `ranges` (`[start, end)` in blocks) is written: a read of
    /// other blocks need not wait for the writer's copy to finish.
    fn wait_for_reads(&self, ranges: &[(u64, u64)]) -> Result<(), BlockError> {
        let mut st = self.shared.state.lock();
        let last = st
            .pending
            .iter()
            .rev()
            .find(|p| ranges.iter().any(|&(s, e)| p.overlaps(s, e)))
            .map(|p| p.seq);
        if let Some(target) = last {
            while st.completed < target && st.failed.is_none() {
                self.shared.done.wait(&mut st);
            }
        }
        match &st.failed {
            Some(e) => Err(BlockError::WriteBehindFailed(e.clone())),
            None => Ok(()),
        }
    }

    /// Blocks `[start, end)` that a read of `len` bytes from `block` covers
    /// (a bad request is refused by the device after the wait, as before).
    fn range(&self, block: u64, len: usize) -> (u64, u64) {
        let bs = u64::from(self.inner.block_size());
        (block, block.saturating_add((len as u64).div_ceil(bs)))
    }
}

fn write_loop(dev: &dyn BlockDevice, shared: &Shared) {
    loop {
        let batch = {
            let mut st = shared.state.lock();
            loop {
                if let Some(b) = st.queue.pop_front() {
                    break b;
                }
                if st.closing {
                    return;
                }
                shared.work.wait(&mut st);
            }
        };
        let (batch, bytes) = batch;
        let result = dev.write_batch_owned(batch);
        let mut st = shared.state.lock();
        st.completed += 1;
        st.pending.pop_front();
        st.bytes_in_flight -= bytes;
        if let Err(e) = result {
            if st.failed.is_none() {
                tracing::error!("background write failed: {}", crate::ErrorChain(&e));
                st.failed = Some(Arc::new(e));
            }
        }
        shared.done.notify_all();
    }
}

impl Drop for WriteBehind {
    fn drop(&mut self) {
        // Queued batches are still written (a clean close flushes first
        // anyway; this only keeps the thread from outliving the device).
        self.shared.state.lock().closing = true;
        self.shared.work.notify_all();
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

impl BlockDevice for WriteBehind {
    fn block_size(&self) -> u32 {
        self.inner.block_size()
    }
    fn num_blocks(&self) -> u64 {
        self.inner.num_blocks()
    }
    fn read(&self, block: u64, buf: &mut [u8]) -> Result<(), BlockError> {
        self.wait_for_reads(&[self.range(block, buf.len())])?;
        self.inner.read(block, buf)
    }
    fn write(&self, block: u64, buf: &[u8]) -> Result<(), BlockError> {
        self.wait()?;
        self.inner.write(block, buf)
    }
    fn flush(&self) -> Result<(), BlockError> {
        self.wait()?;
        self.inner.flush()
    }
    fn discard(&self, block: u64, count: u64) -> Result<(), BlockError> {
        self.wait()?;
        self.inner.discard(block, count)
    }
    fn write_zeroes(&self, block: u64, count: u64) -> Result<(), BlockError> {
        self.wait()?;
        self.inner.write_zeroes(block, count)
    }
    fn write_batch(&self, writes: &[(u64, &[u8])]) -> Result<(), BlockError> {
        self.wait()?;
        self.inner.write_batch(writes)
    }
    fn write_batch_owned(&self, writes: Vec<(u64, Vec<u8>)>) -> Result<(), BlockError> {
        // Refused now, not in the background: a bad extent writes nothing.
        let extents = writes
            .iter()
            .map(|(block, buf)| Ok((*block, block + check_request(self, *block, buf.len())?)))
            .collect::<Result<Vec<(u64, u64)>, BlockError>>()?;
        let bytes: usize = writes.iter().map(|(_, d)| d.len()).sum();
        let span = extents
            .iter()
            .fold((u64::MAX, 0), |(lo, hi), &(s, e)| (lo.min(s), hi.max(e)));
        let mut st = self.shared.state.lock();
        while st.bytes_in_flight > 0
            && st.bytes_in_flight + bytes > self.max_bytes
            && st.failed.is_none()
        {
            self.shared.done.wait(&mut st);
        }
        if let Some(e) = &st.failed {
            return Err(BlockError::WriteBehindFailed(e.clone()));
        }
        st.bytes_in_flight += bytes;
        st.submitted += 1;
        let seq = st.submitted;
        st.pending.push_back(Pending { seq, span, extents });
        st.queue.push_back((writes, bytes));
        self.shared.work.notify_one();
        Ok(())
    }
    fn read_batch(&self, reads: &mut [(u64, &mut [u8])]) -> Result<(), BlockError> {
        let ranges: Vec<(u64, u64)> = reads.iter().map(|(b, d)| self.range(*b, d.len())).collect();
        self.wait_for_reads(&ranges)?;
        self.inner.read_batch(reads)
    }
    fn prefetch(&self, block: u64, count: u64) {
        // A hint: it may fetch what a queued batch is about to replace,
        // which the page cache keeps coherent, and a read waits anyway.
        self.inner.prefetch(block, count)
    }
    fn await_prefetch(&self, block: u64, count: u64) {
        self.inner.await_prefetch(block, count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CrashDevice, Fault, MemDevice};

    #[test]
    fn reads_and_writes_see_every_batch_in_order() {
        let dev = WriteBehind::new(Arc::new(MemDevice::new(512, 256).unwrap()), 4096).unwrap();
        for i in 0..200u64 {
            let b = i % 16;
            dev.write_batch_owned(vec![
                (b, vec![i as u8; 512]),
                (100 + 2 * b, vec![!(i as u8); 1024]),
            ])
            .unwrap();
            if i % 7 == 0 {
                // A plain write after behind ones lands after them.
                dev.write(b, &vec![0xEE; 512]).unwrap();
                let mut buf = vec![0u8; 512];
                dev.read(b, &mut buf).unwrap();
                assert_eq!(buf, vec![0xEE; 512]);
            }
        }
        let mut buf = vec![0u8; 512];
        for b in 0..16u64 {
            let last = (0..200u64).filter(|i| i % 16 == b).max().unwrap();
            dev.read(b, &mut buf).unwrap();
            let want = if last % 7 == 0 { 0xEE } else { last as u8 };
            assert_eq!(buf, vec![want; 512], "block {b}");
            let mut two = vec![0u8; 1024];
            dev.read(100 + 2 * b, &mut two).unwrap();
            assert_eq!(two, vec![!(last as u8); 1024]);
        }
        dev.flush().unwrap();
    }

    #[test]
    fn flush_makes_behind_writes_durable() {
        let crash = Arc::new(CrashDevice::new(512, 64).unwrap());
        let dev = WriteBehind::new(crash.clone(), 1 << 20).unwrap();
        dev.write_batch_owned(vec![(5, vec![9u8; 512])]).unwrap();
        dev.flush().unwrap();
        crash.crash_keep_none();
        assert_eq!(crash.durable_block(5).unwrap(), vec![9u8; 512]);
    }

    #[test]
    fn a_failed_background_write_poisons_the_device() {
        let crash = Arc::new(CrashDevice::new(512, 64).unwrap());
        crash.inject(Fault::NthWrite(1));
        let dev = WriteBehind::new(crash.clone(), 1 << 20).unwrap();
        dev.write_batch_owned(vec![(5, vec![9u8; 512])]).unwrap();
        let err = dev.flush().unwrap_err();
        assert!(matches!(err, BlockError::WriteBehindFailed(_)), "{err}");
        assert!(std::error::Error::source(&err).is_some());
        let mut buf = vec![0u8; 512];
        assert!(dev.read(5, &mut buf).is_err());
        assert!(dev.write_batch_owned(vec![(6, vec![1u8; 512])]).is_err());
    }

    #[test]
    fn a_bad_extent_is_refused_at_once_and_writes_nothing() {
        let dev = WriteBehind::new(Arc::new(MemDevice::new(512, 8).unwrap()), 1 << 20).unwrap();
        assert!(dev
            .write_batch_owned(vec![(0, vec![1u8; 512]), (8, vec![1u8; 512])])
            .is_err());
        let mut buf = vec![0u8; 512];
        dev.read(0, &mut buf).unwrap();
        assert_eq!(buf, vec![0u8; 512]);
        dev.flush().unwrap();
    }

    #[test]
    fn back_pressure_bounds_the_bytes_in_flight() {
        let dev = WriteBehind::new(Arc::new(MemDevice::new(512, 1024).unwrap()), 2048).unwrap();
        for i in 0..100u64 {
            dev.write_batch_owned(vec![(i * 4, vec![i as u8; 2048])])
                .unwrap();
            assert!(dev.shared.state.lock().bytes_in_flight <= 2048);
        }
        dev.wait().unwrap();
        let mut buf = vec![0u8; 2048];
        dev.read(99 * 4, &mut buf).unwrap();
        assert_eq!(buf, vec![99u8; 2048]);
    }

    /// A device whose batch writes wait until the gate opens.
    struct Gated {
        inner: MemDevice,
        open: Mutex<bool>,
        opened: Condvar,
    }

    impl BlockDevice for Gated {
        fn block_size(&self) -> u32 {
            self.inner.block_size()
        }
        fn num_blocks(&self) -> u64 {
            self.inner.num_blocks()
        }
        fn read(&self, block: u64, buf: &mut [u8]) -> Result<(), BlockError> {
            self.inner.read(block, buf)
        }
        fn write(&self, block: u64, buf: &[u8]) -> Result<(), BlockError> {
            self.inner.write(block, buf)
        }
        fn flush(&self) -> Result<(), BlockError> {
            self.inner.flush()
        }
        fn discard(&self, block: u64, count: u64) -> Result<(), BlockError> {
            self.inner.discard(block, count)
        }
        fn write_batch_owned(&self, writes: Vec<(u64, Vec<u8>)>) -> Result<(), BlockError> {
            let mut open = self.open.lock();
            while !*open {
                self.opened.wait(&mut open);
            }
            drop(open);
            self.inner.write_batch_owned(writes)
        }
    }

    /// A read waits for the batches that write its blocks and only for
    /// them: one of other blocks goes on while the writer is still busy.
    #[test]
    fn reads_wait_only_for_batches_writing_their_blocks() {
        let gated = Arc::new(Gated {
            inner: MemDevice::new(512, 64).unwrap(),
            open: Mutex::new(false),
            opened: Condvar::new(),
        });
        let dev = WriteBehind::new(gated.clone(), 1 << 20).unwrap();
        dev.write_batch_owned(vec![(4, vec![1u8; 1024]), (20, vec![2u8; 512])])
            .unwrap();
        dev.write_batch_owned(vec![(30, vec![3u8; 512])]).unwrap();
        // Neither batch can be written yet: reads around them go on.
        std::thread::scope(|s| {
            let reader = s.spawn(|| {
                let mut buf = vec![0u8; 512];
                for b in [0, 3, 6, 19, 21, 29, 31] {
                    dev.read(b, &mut buf).unwrap();
                    assert_eq!(buf, vec![0u8; 512], "block {b}");
                }
                let mut a = vec![0u8; 1024];
                let mut c = vec![0u8; 512];
                dev.read_batch(&mut [(0, &mut a[..]), (40, &mut c[..])])
                    .unwrap();
            });
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            while !reader.is_finished() && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            let went_ahead = reader.is_finished();
            if !went_ahead {
                // Let the stuck reader finish, then fail.
                *gated.open.lock() = true;
                gated.opened.notify_all();
            }
            assert!(went_ahead, "reads of other blocks waited for the writer");
        });
        let mut buf = vec![0u8; 512];
        // A read of a batch's block waits until it is written.
        std::thread::scope(|s| {
            let reader = s.spawn(|| {
                let mut buf = vec![0u8; 1024];
                dev.read(30, &mut buf[..512]).unwrap();
                dev.read_batch(&mut [(4, &mut buf[..])]).unwrap();
                buf
            });
            std::thread::sleep(std::time::Duration::from_millis(50));
            assert!(!reader.is_finished(), "a read of a queued block went ahead");
            *gated.open.lock() = true;
            gated.opened.notify_all();
            assert_eq!(reader.join().unwrap(), vec![1u8; 1024]);
        });
        dev.read(30, &mut buf).unwrap();
        assert_eq!(buf, vec![3u8; 512]);
        dev.read(20, &mut buf).unwrap();
        assert_eq!(buf, vec![2u8; 512]);
    }
}
