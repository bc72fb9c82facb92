//! A fake ublk queue: host tests and benchmarks drive the same request path
//! ([`crate::engine::serve`]) the kernel drives, without a kernel.
//!
//! The queue side ([`FakeQueue`], handed to `serve`) plays the kernel ring;
//! the [`FakeHandle`] plays the block layer: it submits requests on tags,
//! fills write buffers and reads read buffers back. Like the kernel, a tag's
//! buffer belongs to whoever owns the tag: the handle while it is free, the
//! target while it is in flight. The handle refuses to touch a busy tag.

use crate::backend::IoBufPtr;
use crate::engine::{Incoming, QueueDown, QueueIo, Waker};
use crate::request::RawDesc;
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// What the fake refuses.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FakeError {
    /// The tag is not below the queue depth.
    #[error("tag {0} is beyond the queue depth")]
    NoSuchTag(u16),
    /// The tag already holds a request.
    #[error("tag {0} is in flight")]
    Busy(u16),
    #[error("{len} bytes do not fit the {max}-byte tag buffer")]
    /// The data does not fit the tag's buffer.
    TooLong {
        /// Bytes offered.
        len: usize,
        /// Bytes of the buffer.
        max: usize,
    },
    /// The queue was closed.
    #[error("the queue is closed")]
    Closed,
}

struct State {
    incoming: VecDeque<Incoming>,
    completed: Vec<(u16, i32)>,
    /// Per tag: the sector its last zone append completed at.
    appended: Vec<Option<u64>>,
    busy: Vec<bool>,
    closed: bool,
    woken: bool,
    /// Threads sleeping on the condition variable. Nobody is told about a
    /// change when nobody waits: like the kernel ring, a completion costs no
    /// system call unless someone sleeps.
    sleepers: usize,
}

impl Inner {
    fn notify(&self, st: &State) {
        if st.sleepers > 0 {
            self.cv.notify_all();
        }
    }

    /// Sleep on the condition variable (at most `timeout`, if given).
    fn sleep<'a>(
        &self,
        mut st: MutexGuard<'a, State>,
        timeout: Option<Duration>,
    ) -> MutexGuard<'a, State> {
        st.sleepers += 1;
        let mut st = match timeout {
            Some(t) => {
                self.cv
                    .wait_timeout(st, t)
                    .unwrap_or_else(|e| e.into_inner())
                    .0
            }
            None => self.cv.wait(st).unwrap_or_else(|e| e.into_inner()),
        };
        st.sleepers -= 1;
        st
    }
}

struct Inner {
    state: Mutex<State>,
    cv: Condvar,
    /// One buffer per tag, allocated here and freed when `Inner` drops;
    /// kept as raw pointers because the handle and the engine both write
    /// through them (at different times).
    ptrs: Vec<IoBufPtr>,
    blocking: bool,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panicking test thread must not turn every later call into a
        // second panic: the state is still consistent, so keep using it.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        for p in &self.ptrs {
            // SAFETY: each pointer came from `Box::into_raw` of a boxed slice
            // of exactly `p.len()` bytes in `fake_queue`, and nothing can use
            // it any more (this is the last reference to `Inner`).
            drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(p.as_ptr(), p.len())) });
        }
    }
}

/// The queue's side of the fake, passed to [`crate::engine::serve`].
pub struct FakeQueue {
    inner: Arc<Inner>,
}

/// The block layer's side of the fake.
#[derive(Clone)]
pub struct FakeHandle {
    inner: Arc<Inner>,
}

/// A fake queue of `depth` tags with `buf_bytes`-byte buffers.
///
/// With `blocking`, `fetch(wait = true)` sleeps like the kernel ring until a
/// request or a wake-up arrives (for threaded tests); without, it never
/// blocks (for single-threaded, step-by-step tests).
///
/// ```
/// use ptsd_ublk::fake::fake_queue;
/// use ptsd_ublk::request::{op, RawDesc};
/// let (_queue, handle) = fake_queue(4, 4096, false);
/// handle.submit(0, RawDesc::new(op::WRITE, 0, 8), Some(&[1u8; 4096])).unwrap();
/// assert!(handle.submit(0, RawDesc::new(op::READ, 0, 8), None).is_err()); // tag 0 is busy
/// ```
pub fn fake_queue(depth: u16, buf_bytes: usize, blocking: bool) -> (FakeQueue, FakeHandle) {
    let ptrs = (0..depth)
        .map(|_| {
            let b = Box::into_raw(vec![0u8; buf_bytes].into_boxed_slice());
            // SAFETY: the allocation is freed only in `Inner::drop`, after
            // the queue and every handle are gone (and `serve` drains its
            // in-flight requests before returning); exclusive use follows
            // tag ownership, which `State::busy` enforces.
            unsafe { IoBufPtr::new(b as *mut u8, buf_bytes) }
        })
        .collect();
    let inner = Arc::new(Inner {
        state: Mutex::new(State {
            incoming: VecDeque::new(),
            completed: Vec::new(),
            appended: vec![None; depth as usize],
            busy: vec![false; depth as usize],
            closed: false,
            woken: false,
            sleepers: 0,
        }),
        cv: Condvar::new(),
        ptrs,
        blocking,
    });
    (
        FakeQueue {
            inner: inner.clone(),
        },
        FakeHandle { inner },
    )
}

impl QueueIo for FakeQueue {
    fn fetch(&mut self, wait: bool, out: &mut Vec<Incoming>) -> Result<(), QueueDown> {
        let mut st = self.inner.lock();
        if wait && self.inner.blocking {
            while st.incoming.is_empty() && !st.woken && !st.closed {
                st = self.inner.sleep(st, None);
            }
        }
        st.woken = false;
        if st.closed {
            return Err(QueueDown);
        }
        out.extend(st.incoming.drain(..));
        Ok(())
    }

    fn buffer(&mut self, tag: u16) -> IoBufPtr {
        self.inner
            .ptrs
            .get(tag as usize)
            .copied()
            .unwrap_or(IoBufPtr::NONE)
    }

    fn complete(&mut self, tag: u16, result: i32, append_sector: Option<u64>) {
        let mut st = self.inner.lock();
        if let Some(b) = st.busy.get_mut(tag as usize) {
            *b = false;
        }
        if let Some(a) = st.appended.get_mut(tag as usize) {
            *a = append_sector;
        }
        st.completed.push((tag, result));
        self.inner.notify(&st);
    }
}

impl FakeQueue {
    /// How the engine wakes this queue in no-poll mode.
    pub fn waker(&self) -> Arc<dyn Waker> {
        Arc::new(FakeWaker(self.inner.clone()))
    }
}

struct FakeWaker(Arc<Inner>);

impl Waker for FakeWaker {
    fn wake(&self) {
        let mut st = self.0.lock();
        st.woken = true;
        self.0.notify(&st);
    }
}

impl FakeHandle {
    /// Submit `desc` on `tag`, first copying `data` (for a WRITE) into the
    /// tag's buffer.
    pub fn submit(&self, tag: u16, desc: RawDesc, data: Option<&[u8]>) -> Result<(), FakeError> {
        let mut st = self.inner.lock();
        if st.closed {
            return Err(FakeError::Closed);
        }
        match st.busy.get(tag as usize) {
            None => return Err(FakeError::NoSuchTag(tag)),
            Some(true) => return Err(FakeError::Busy(tag)),
            Some(false) => {}
        }
        if let Some(data) = data {
            let ptr = self.inner.ptrs[tag as usize];
            // SAFETY: the tag is free (checked under the state lock, which
            // we hold), so nobody else uses its buffer.
            let buf = unsafe { ptr.slice_mut(data.len()) }.ok_or(FakeError::TooLong {
                len: data.len(),
                max: ptr.len(),
            })?;
            buf.copy_from_slice(data);
        }
        st.busy[tag as usize] = true;
        st.incoming.push_back(Incoming { tag, desc });
        self.inner.notify(&st);
        Ok(())
    }

    /// Submit several data-less requests (READ, FLUSH, DISCARD...) under
    /// one lock, as the block layer plugs a batch. Stops at the first
    /// refusal.
    pub fn submit_many(&self, reqs: &[(u16, RawDesc)]) -> Result<(), FakeError> {
        let mut st = self.inner.lock();
        if st.closed {
            return Err(FakeError::Closed);
        }
        for &(tag, desc) in reqs {
            match st.busy.get(tag as usize) {
                None => return Err(FakeError::NoSuchTag(tag)),
                Some(true) => return Err(FakeError::Busy(tag)),
                Some(false) => {}
            }
            st.busy[tag as usize] = true;
            st.incoming.push_back(Incoming { tag, desc });
        }
        self.inner.notify(&st);
        Ok(())
    }

    /// Move the completions so far into `out` (no allocation).
    pub fn drain_completions(&self, out: &mut Vec<(u16, i32)>) {
        out.append(&mut self.inner.lock().completed);
    }

    /// The first `len` bytes of a free tag's buffer (what a READ returned).
    pub fn read_buffer(&self, tag: u16, len: usize) -> Result<Vec<u8>, FakeError> {
        let st = self.inner.lock();
        match st.busy.get(tag as usize) {
            None => Err(FakeError::NoSuchTag(tag)),
            Some(true) => Err(FakeError::Busy(tag)),
            Some(false) => {
                let ptr = self.inner.ptrs[tag as usize];
                // SAFETY: the tag is free (checked under the state lock we
                // hold), so nobody else uses its buffer.
                let b = unsafe { ptr.slice_mut(len) }.ok_or(FakeError::TooLong {
                    len,
                    max: ptr.len(),
                })?;
                Ok(b.to_vec())
            }
        }
    }

    /// The sector the last request completed on `tag` returned as a zone
    /// append's (`None`: it was no zone append, or failed).
    pub fn append_sector(&self, tag: u16) -> Option<u64> {
        self.inner
            .lock()
            .appended
            .get(tag as usize)
            .copied()
            .flatten()
    }

    /// Completions so far, in completion order (taken, not copied).
    pub fn take_completions(&self) -> Vec<(u16, i32)> {
        std::mem::take(&mut self.inner.lock().completed)
    }

    /// Wait until at least `n` completions are waiting (or `timeout`
    /// passes), then take them all.
    pub fn wait_completions(&self, n: usize, timeout: Duration) -> Vec<(u16, i32)> {
        let deadline = Instant::now() + timeout;
        let mut st = self.inner.lock();
        while st.completed.len() < n {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            st = self.inner.sleep(st, Some(left));
        }
        std::mem::take(&mut st.completed)
    }

    /// Take the queue down, as the kernel does when the device is deleted.
    pub fn close(&self) {
        let mut st = self.inner.lock();
        st.closed = true;
        self.inner.notify(&st);
    }
}
