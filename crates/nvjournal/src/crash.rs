//! A crash-simulating region: tracks every store per 64-byte cache line and,
//! on a seeded crash, keeps each line that was flushed and fenced plus any
//! subset of the others. In msync flavour (a journal file on a disk) only a
//! sync makes stores durable, as [`RegionMode::Msync`] promises.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::flush::CACHE_LINE;
use crate::region::{Persist, RegionError, RegionMode};

type CrashHook = Box<dyn Fn() + Send + Sync>;

/// What a disk writes atomically (msync flavour's unit of survival).
const SECTOR: usize = 512;

/// A simulated persistent-memory region for crash tests.
///
/// Clones share the same memory, so a test keeps one handle while the
/// journal owns another. Every [`write`](Persist::write) and
/// [`persist_ranges`](Persist::persist_ranges) call is one numbered *event*;
/// [`crash_at_event`](Self::crash_at_event) freezes the region just before a
/// chosen event (that event and all later ones are dropped), and
/// [`crash_image`](Self::crash_image) then picks what survived.
///
/// ```
/// use ptsd_nvjournal::{CrashRegion, Persist};
/// let r = CrashRegion::new(4096);
/// r.write(0, &[1u8; 64]);
/// r.persist(0, 64);          // line 0 is durable
/// r.write(64, &[2u8; 64]);   // line 1 is not
/// r.crash_now();
/// let img = r.crash_image(7);
/// assert_eq!(&img[..64], &[1u8; 64][..]);
/// assert!(img[64..128].iter().all(|&b| b == 0) || img[64..128].iter().all(|&b| b == 2));
/// ```
#[derive(Clone)]
pub struct CrashRegion {
    inner: Arc<Inner>,
}

struct Inner {
    state: Mutex<State>,
    /// Msync flavour: flushes make nothing durable, a sync makes all.
    msync: bool,
    crashed: AtomicBool,
    on_crash: Mutex<Option<CrashHook>>,
}

struct State {
    /// What the CPU sees (caches + memory).
    current: Vec<u8>,
    /// What is certainly on the media (flushed and fenced).
    durable: Vec<u8>,
    events: u64,
    crash_at: Option<u64>,
}

impl CrashRegion {
    /// A zero-filled region of `bytes` bytes (rounded up to whole lines).
    pub fn new(bytes: usize) -> Self {
        Self::from_image(vec![0u8; bytes.div_ceil(CACHE_LINE) * CACHE_LINE])
    }

    /// A zero-filled region that behaves as a journal file on a disk
    /// ([`RegionMode::Msync`]): flushes make nothing durable; each
    /// [`sync`](Persist::sync) is one event that makes every store before
    /// it durable. A crash keeps any subset of the sectors stored since.
    pub fn new_msync(bytes: usize) -> Self {
        Self::build(vec![0u8; bytes.div_ceil(CACHE_LINE) * CACHE_LINE], true)
    }

    /// A region whose media holds `image` (e.g. from [`crash_image`](Self::crash_image)).
    pub fn from_image(image: Vec<u8>) -> Self {
        Self::build(image, false)
    }

    /// [`from_image`](Self::from_image) in the msync flavour of [`new_msync`](Self::new_msync).
    pub fn from_image_msync(image: Vec<u8>) -> Self {
        Self::build(image, true)
    }

    fn build(mut image: Vec<u8>, msync: bool) -> Self {
        image.resize(image.len().div_ceil(CACHE_LINE) * CACHE_LINE, 0);
        Self {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    current: image.clone(),
                    durable: image,
                    events: 0,
                    crash_at: None,
                }),
                msync,
                crashed: AtomicBool::new(false),
                on_crash: Mutex::new(None),
            }),
        }
    }

    /// Crash just before event number `event` (0-based) happens.
    pub fn crash_at_event(&self, event: u64) {
        let mut st = self.inner.state.lock();
        if st.events > event {
            drop(st);
            self.crash_now();
        } else {
            st.crash_at = Some(event);
        }
    }

    /// Crash now: no later store or flush reaches the region.
    pub fn crash_now(&self) {
        if !self.inner.crashed.swap(true, Ordering::SeqCst) {
            if let Some(hook) = self.inner.on_crash.lock().as_ref() {
                hook();
            }
        }
    }

    /// Run `hook` at the instant of the crash (e.g. to crash a block device
    /// at the same moment).
    pub fn on_crash(&self, hook: impl Fn() + Send + Sync + 'static) {
        *self.inner.on_crash.lock() = Some(Box::new(hook));
    }

    /// True once crashed.
    pub fn is_crashed(&self) -> bool {
        self.inner.crashed.load(Ordering::SeqCst)
    }

    /// Events (stores and persists) applied so far.
    pub fn events(&self) -> u64 {
        self.inner.state.lock().events
    }

    /// A region holding [`crash_image`](Self::crash_image)`(seed)`, of
    /// this region's flavour (persistent memory or msync): the media a
    /// restart after the crash finds.
    pub fn crash_copy(&self, seed: u64) -> Self {
        Self::build(self.crash_image(seed), self.inner.msync)
    }

    /// The media after the crash: every durable line, and for each line
    /// with newer unflushed contents, a seeded coin decides whether the
    /// newer contents had reached the media (in the msync flavour, per
    /// 512-byte sector, with a seeded bias).
    pub fn crash_image(&self, seed: u64) -> Vec<u8> {
        let st = self.inner.state.lock();
        let mut rng = SplitMix(seed);
        let mut img = st.durable.clone();
        // A disk writes whole sectors; memory, whole cache lines. A sync
        // cut short has written most of its sectors or few of them, so the
        // msync flavour draws how likely a sector survives, too (at 1/2 a
        // multi-sector slot would almost never survive whole).
        let (unit, survive_of_32) = if self.inner.msync {
            (SECTOR, [16, 28, 31][(rng.next() % 3) as usize])
        } else {
            (CACHE_LINE, 16)
        };
        for (cur, out) in st.current.chunks(unit).zip(img.chunks_mut(unit)) {
            if cur != out && rng.next() % 32 < survive_of_32 {
                out.copy_from_slice(cur);
            }
        }
        img
    }

    /// Count the event; return false if it must be dropped (crashed).
    fn event(&self, st: &mut State) -> bool {
        if self.inner.crashed.load(Ordering::SeqCst) {
            return false;
        }
        if st.crash_at == Some(st.events) {
            self.crash_now();
            return false;
        }
        st.events += 1;
        true
    }
}

impl Persist for CrashRegion {
    fn len(&self) -> usize {
        self.inner.state.lock().current.len()
    }
    fn mode(&self) -> RegionMode {
        if self.inner.msync {
            RegionMode::Msync
        } else {
            RegionMode::Simulated
        }
    }
    fn write(&self, offset: usize, data: &[u8]) {
        let mut st = self.inner.state.lock();
        assert!(
            offset + data.len() <= st.current.len(),
            "region store out of bounds"
        );
        if self.event(&mut st) {
            st.current[offset..offset + data.len()].copy_from_slice(data);
        }
    }
    fn read(&self, offset: usize, buf: &mut [u8]) {
        let st = self.inner.state.lock();
        buf.copy_from_slice(&st.current[offset..offset + buf.len()]);
    }
    fn persist_ranges(&self, ranges: &[(usize, usize)]) {
        let mut st = self.inner.state.lock();
        if !self.event(&mut st) || self.inner.msync {
            return;
        }
        let State {
            current, durable, ..
        } = &mut *st;
        for &(offset, len) in ranges {
            let start = offset / CACHE_LINE * CACHE_LINE;
            let end = (offset + len).div_ceil(CACHE_LINE) * CACHE_LINE;
            let end = end.min(current.len());
            durable[start..end].copy_from_slice(&current[start..end]);
        }
    }
    fn sync(&self) -> Result<(), RegionError> {
        if self.inner.msync {
            let mut st = self.inner.state.lock();
            if self.event(&mut st) {
                let State {
                    current, durable, ..
                } = &mut *st;
                durable.copy_from_slice(current);
            }
        }
        Ok(())
    }
}

/// A tiny deterministic generator (no dependency needed for a coin flip).
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}
