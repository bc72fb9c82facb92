//! `SsdDevice::prefetch_from`: before a host read takes the engine's lock,
//! the image pages it needs (and, for a read continuing an earlier one, the
//! next ones) are hinted to the image device, and the read waits for its
//! own ones before the lock. The hints must name exactly the pages the
//! engine then reads, and reads must return the same data; two threads'
//! waits must overlap.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use ptsd_blockdev::{BlockDevice, BlockError, MemDevice};
use ptsd_ftl::{FtlConfig, SchedulerKind, SchemeConfig, Ssd, SsdDevice};

const PAGE: usize = 512;
const LOGICAL: u64 = 256;

/// A memory device recording which blocks are read and which prefetched.
struct Recording {
    inner: MemDevice,
    reads: Mutex<BTreeSet<u64>>,
    prefetched: Mutex<BTreeSet<u64>>,
    awaited: Mutex<BTreeSet<u64>>,
    /// When set, `await_prefetch` waits (up to a timeout) until this many
    /// callers are inside it at once, and records whether they were.
    rendezvous: Option<Rendezvous>,
}

struct Rendezvous {
    want: usize,
    inside: std::sync::Mutex<usize>,
    all_in: std::sync::Condvar,
    met: std::sync::atomic::AtomicBool,
}

impl Recording {
    fn new(inner: MemDevice, rendezvous: Option<usize>) -> Self {
        Recording {
            inner,
            reads: Mutex::default(),
            prefetched: Mutex::default(),
            awaited: Mutex::default(),
            rendezvous: rendezvous.map(|want| Rendezvous {
                want,
                inside: std::sync::Mutex::new(0),
                all_in: std::sync::Condvar::new(),
                met: std::sync::atomic::AtomicBool::new(false),
            }),
        }
    }
}

impl Recording {
    fn take(&self) -> (BTreeSet<u64>, BTreeSet<u64>) {
        self.awaited.lock().clear();
        (
            std::mem::take(&mut *self.reads.lock()),
            std::mem::take(&mut *self.prefetched.lock()),
        )
    }
}

impl BlockDevice for Recording {
    fn block_size(&self) -> u32 {
        self.inner.block_size()
    }
    fn num_blocks(&self) -> u64 {
        self.inner.num_blocks()
    }
    fn read(&self, block: u64, buf: &mut [u8]) -> Result<(), BlockError> {
        let n = (buf.len() / PAGE) as u64;
        self.reads.lock().extend(block..block + n);
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
    fn prefetch(&self, block: u64, count: u64) {
        assert!(
            block + count <= self.num_blocks(),
            "prefetch off the device"
        );
        self.prefetched.lock().extend(block..block + count);
    }
    fn await_prefetch(&self, block: u64, count: u64) {
        self.awaited.lock().extend(block..block + count);
        let Some(r) = &self.rendezvous else {
            return;
        };
        let mut inside = r.inside.lock().unwrap();
        *inside += 1;
        if *inside >= r.want {
            r.met.store(true, std::sync::atomic::Ordering::SeqCst);
            r.all_in.notify_all();
        } else {
            // Under the engine's lock the others could never come in.
            inside = r
                .all_in
                .wait_timeout_while(inside, Duration::from_secs(5), |_| {
                    !r.met.load(std::sync::atomic::Ordering::SeqCst)
                })
                .unwrap()
                .0;
        }
        *inside -= 1;
    }
}

fn cfg() -> FtlConfig {
    FtlConfig {
        page_size: PAGE as u32,
        channels: 2,
        chips_per_channel: 2,
        blocks_per_chip: 24,
        pages_per_block: 8,
        logical_bytes: Some(LOGICAL * PAGE as u64),
        op_ratio: 0.2,
        scheme: SchemeConfig::Ptsd {
            clean_ratio: 0.5,
            entry_dirty: true,
            adaptive: false,
        },
        scheduler: SchedulerKind::ReadPriority,
        write_buffer_pages: 4,
        map_memory_bytes: Some(3 * 4 + 2 * PAGE as u64),
        ..FtlConfig::default()
    }
}

fn pattern(lpn: u64) -> Vec<u8> {
    let mut v = vec![(lpn as u8) | 1; PAGE];
    v[..8].copy_from_slice(&lpn.to_le_bytes());
    v
}

fn read(dev: &SsdDevice, lpn: u64, pages: u64) -> Vec<u8> {
    let mut buf = vec![0u8; pages as usize * PAGE];
    dev.read(lpn, &mut buf).unwrap();
    for (i, page) in buf.chunks(PAGE).enumerate() {
        assert_eq!(
            page,
            &pattern(lpn + i as u64)[..],
            "page {}",
            lpn + i as u64
        );
    }
    buf
}

#[test]
fn reads_prefetch_exactly_the_pages_they_read_and_sequential_ones_the_next() {
    let c = cfg();
    let rec = Arc::new(Recording::new(
        MemDevice::new(PAGE as u32, Ssd::image_blocks(&c, PAGE as u32)).unwrap(),
        None,
    ));
    let image: Arc<dyn BlockDevice> = rec.clone();
    // Written in a scattered order, so logical neighbours land apart.
    {
        let dev =
            SsdDevice::virtual_time(Ssd::open_on(c.clone(), Box::new(image.clone())).unwrap());
        for i in 0..LOGICAL {
            let lpn = (i * 97) % LOGICAL;
            dev.write(lpn, &pattern(lpn)).unwrap();
        }
        dev.with_ssd(|s| s.shutdown()).unwrap();
    }
    let dev = SsdDevice::virtual_time(Ssd::open_on(c, Box::new(image.clone())).unwrap())
        .prefetch_from(image);
    rec.take();

    // A read that continues none: its own pages, no more.
    read(&dev, 100, 8);
    let awaited = rec.awaited.lock().clone();
    let (reads, prefetched) = rec.take();
    assert_eq!(reads.len(), 8, "one image page per logical page");
    assert_eq!(prefetched, reads, "a lone read prefetches what it reads");
    assert_eq!(awaited, reads, "and waits for exactly those");

    // Sequential reads: each prefetches its own pages and the next reads'.
    read(&dev, 0, 8);
    let (_, first) = rec.take();
    assert_eq!(first.len(), 8, "the first read of a stream fetches no more");
    read(&dev, 8, 8);
    let awaited = rec.awaited.lock().clone();
    let (reads, second) = rec.take();
    assert!(second.len() > 8, "a continuing read prefetches ahead");
    assert_eq!(awaited, reads, "but waits only for its own pages");
    for lpn in [16, 24, 32] {
        read(&dev, lpn, 8);
        let (reads, _) = rec.take();
        assert!(
            reads.is_subset(&second),
            "the read at {lpn} finds its pages prefetched by the read at 8"
        );
    }

    // Every page of the device, read in odd sizes, comes back right.
    let mut lpn = 0;
    for size in [1u64, 3, 17, 5, 64].iter().cycle() {
        if lpn >= LOGICAL {
            break;
        }
        let n = (*size).min(LOGICAL - lpn);
        read(&dev, lpn, n);
        lpn += n;
    }
    let (reads, prefetched) = rec.take();
    assert!(
        reads.is_subset(&prefetched),
        "every page read was hinted first"
    );
}

/// Two threads reading at once wait for their image pages at the same
/// time: neither waits for the disk under the engine's lock.
#[test]
fn concurrent_reads_wait_for_their_pages_outside_the_lock() {
    let c = cfg();
    let rec = Arc::new(Recording::new(
        MemDevice::new(PAGE as u32, Ssd::image_blocks(&c, PAGE as u32)).unwrap(),
        Some(2),
    ));
    let image: Arc<dyn BlockDevice> = rec.clone();
    let dev = SsdDevice::virtual_time(Ssd::open_on(c, Box::new(image.clone())).unwrap())
        .prefetch_from(image);
    for lpn in 0..LOGICAL {
        dev.write(lpn, &pattern(lpn)).unwrap();
    }
    // Programmed to the image, so the reads below need image pages.
    dev.flush().unwrap();
    std::thread::scope(|s| {
        s.spawn(|| read(&dev, 10, 1));
        s.spawn(|| read(&dev, 200, 1));
    });
    let r = rec.rendezvous.as_ref().unwrap();
    assert!(
        r.met.load(std::sync::atomic::Ordering::SeqCst),
        "the two reads' waits for the image did not overlap"
    );
}
