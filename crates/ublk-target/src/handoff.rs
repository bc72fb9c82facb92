//! Handing requests from several threads to one consumer.
//!
//! [`LockMode::Swap`] is the *queue swapping* of the optimized-I/O-stack
//! paper: producers append whole batches to the open vector under one short
//! lock, and the consumer takes everything at once by swapping in its own
//! empty vector — one lock acquisition per batch on each side.
//! [`LockMode::PerRequest`] is the plain baseline it is measured against:
//! a locked FIFO where every push and every pop takes the lock.

use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// How producers and the consumer share a [`Handoff`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LockMode {
    /// One lock acquisition per batch (queue swapping).
    #[default]
    Swap,
    /// One lock acquisition per request on each side.
    PerRequest,
}

/// A multi-producer, single-consumer hand-off queue.
///
/// ```
/// use ptsd_ublk::handoff::{Handoff, LockMode};
/// let h = Handoff::new(LockMode::Swap);
/// let mut batch = vec![1, 2, 3];
/// h.push_batch(&mut batch);
/// assert!(batch.is_empty());
/// let mut out = Vec::new();
/// h.take_all(&mut out);
/// assert_eq!(out, vec![1, 2, 3]);
/// ```
pub struct Handoff<T> {
    mode: LockMode,
    open: Mutex<Vec<T>>,
    fifo: Mutex<VecDeque<T>>,
    /// Items queued: lets a polling consumer look without locking.
    len: AtomicUsize,
    /// Lock acquisitions so far, for the benchmarks.
    locks: AtomicU64,
}

impl<T> Handoff<T> {
    /// An empty queue locked as `mode` says.
    pub fn new(mode: LockMode) -> Self {
        Handoff {
            mode,
            open: Mutex::new(Vec::new()),
            fifo: Mutex::new(VecDeque::new()),
            len: AtomicUsize::new(0),
            locks: AtomicU64::new(0),
        }
    }

    /// How it is locked.
    pub fn mode(&self) -> LockMode {
        self.mode
    }

    /// Move every item of `batch` to the queue (leaving `batch` empty).
    pub fn push_batch(&self, batch: &mut Vec<T>) {
        if batch.is_empty() {
            return;
        }
        match self.mode {
            LockMode::Swap => {
                self.locks.fetch_add(1, Ordering::Relaxed);
                let mut open = self.open.lock();
                // The count changes under the lock so it never runs ahead of
                // or behind the vector.
                self.len.fetch_add(batch.len(), Ordering::SeqCst);
                if open.is_empty() {
                    // Hand over the producer's allocation instead of copying.
                    std::mem::swap(&mut *open, batch);
                } else {
                    open.append(batch);
                }
            }
            LockMode::PerRequest => {
                for item in batch.drain(..) {
                    self.locks.fetch_add(1, Ordering::Relaxed);
                    let mut fifo = self.fifo.lock();
                    fifo.push_back(item);
                    self.len.fetch_add(1, Ordering::SeqCst);
                }
            }
        }
    }

    /// Append everything queued to `out`; returns how many items moved.
    pub fn take_all(&self, out: &mut Vec<T>) -> usize {
        if self.len.load(Ordering::SeqCst) == 0 {
            return 0;
        }
        match self.mode {
            LockMode::Swap => {
                self.locks.fetch_add(1, Ordering::Relaxed);
                let mut open = self.open.lock();
                let moved = open.len();
                self.len.fetch_sub(moved, Ordering::SeqCst);
                if out.is_empty() {
                    std::mem::swap(&mut *open, out);
                } else {
                    out.append(&mut open);
                }
                moved
            }
            LockMode::PerRequest => {
                let mut moved = 0;
                loop {
                    self.locks.fetch_add(1, Ordering::Relaxed);
                    let mut fifo = self.fifo.lock();
                    match fifo.pop_front() {
                        Some(item) => {
                            self.len.fetch_sub(1, Ordering::SeqCst);
                            drop(fifo);
                            out.push(item);
                            moved += 1;
                        }
                        None => break,
                    }
                }
                moved
            }
        }
    }

    /// Items queued now (a snapshot).
    pub fn len(&self) -> usize {
        self.len.load(Ordering::SeqCst)
    }

    /// Nothing queued now (a snapshot).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Lock acquisitions since creation.
    pub fn lock_count(&self) -> u64 {
        self.locks.load(Ordering::Relaxed)
    }
}
