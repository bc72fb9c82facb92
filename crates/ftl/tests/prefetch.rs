//! `SsdDevice::prefetch_from`: before a host read takes the engine's lock,
//! the image pages it needs (and, for a read continuing an earlier one, the
//! next ones) are hinted to the image device. The hints must name exactly
//! the pages the engine then reads, and reads must return the same data.

use std::collections::BTreeSet;
use std::sync::Arc;

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
}

impl Recording {
    fn take(&self) -> (BTreeSet<u64>, BTreeSet<u64>) {
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
    let rec = Arc::new(Recording {
        inner: MemDevice::new(PAGE as u32, Ssd::image_blocks(&c, PAGE as u32)).unwrap(),
        reads: Mutex::default(),
        prefetched: Mutex::default(),
    });
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
    let (reads, prefetched) = rec.take();
    assert_eq!(reads.len(), 8, "one image page per logical page");
    assert_eq!(prefetched, reads, "a lone read prefetches what it reads");

    // Sequential reads: each prefetches its own pages and the next reads'.
    read(&dev, 0, 8);
    let (_, first) = rec.take();
    assert_eq!(first.len(), 8, "the first read of a stream fetches no more");
    read(&dev, 8, 8);
    let (_, second) = rec.take();
    assert!(second.len() > 8, "a continuing read prefetches ahead");
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
