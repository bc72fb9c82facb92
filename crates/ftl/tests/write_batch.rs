//! `SsdDevice::write_batch`: the extents go to the engine together (one
//! lock, queued at once); every one lands, and a bad extent fails the batch
//! before anything is written.

use ptsd_blockdev::{BlockDevice, BlockError};
use ptsd_ftl::{FtlConfig, Ssd, SsdDevice, StoreKind, Variant};

fn device() -> SsdDevice {
    let mut cfg = FtlConfig::paper(Variant::WriteOpt, 16 << 20);
    cfg.store = StoreKind::Memory;
    SsdDevice::virtual_time(Ssd::new(cfg).unwrap())
}

fn pattern(block: u64, pages: usize, ps: usize) -> Vec<u8> {
    (0..pages * ps)
        .map(|i| (block as usize * 31 + i / ps * 7 + i) as u8)
        .collect()
}

#[test]
fn every_extent_of_a_batch_lands() {
    let dev = device();
    let ps = dev.block_size() as usize;
    // 60 extents of 1..=9 pages, each in a 16-block cell of its own, in a
    // scattered order; the blocks between them stay unwritten.
    let data: Vec<(u64, Vec<u8>)> = (0..60u64)
        .map(|i| {
            let block = ((i * 37) % 60) * 16 + i % 5;
            let pages = 1 + (i % 9) as usize;
            (block, pattern(block, pages, ps))
        })
        .collect();
    let batch: Vec<(u64, &[u8])> = data.iter().map(|(b, d)| (*b, d.as_slice())).collect();
    dev.write_batch(&batch).unwrap();
    let mut model = vec![vec![0u8; ps]; 60 * 16];
    for (b, d) in &data {
        for (k, page) in d.chunks(ps).enumerate() {
            model[*b as usize + k] = page.to_vec();
        }
    }
    for (b, want) in model.iter().enumerate() {
        let mut got = vec![0u8; ps];
        dev.read(b as u64, &mut got).unwrap();
        assert_eq!(&got, want, "block {b}");
    }
}

#[test]
fn a_bad_extent_fails_the_batch_before_anything_is_written() {
    let dev = device();
    let ps = dev.block_size() as usize;
    let good = vec![0xAB; ps];
    let past_end = dev.num_blocks();
    let err = dev
        .write_batch(&[(3, &good[..]), (past_end, &good[..])])
        .unwrap_err();
    assert!(matches!(err, BlockError::OutOfRange { .. }), "{err:?}");
    let mut got = vec![0xFF; ps];
    dev.read(3, &mut got).unwrap();
    assert_eq!(got, vec![0u8; ps], "block 3 was written by a failed batch");
}

/// The owned form: extents within the engine's request limit go in as
/// they are, longer ones in pieces; all land, a bad one fails the batch.
#[test]
fn an_owned_batch_lands_whole_including_extents_longer_than_a_request() {
    let dev = device();
    let ps = dev.block_size() as usize;
    // 1500 pages: longer than one engine request (1024 pages).
    let long = pattern(100, 1500, ps);
    let short = pattern(2000, 3, ps);
    dev.write_batch_owned(vec![(100, long.clone()), (2000, short.clone())])
        .unwrap();
    let mut got = vec![0u8; long.len()];
    dev.read(100, &mut got).unwrap();
    assert!(got == long, "the long extent reads back other data");
    let mut got = vec![0u8; short.len()];
    dev.read(2000, &mut got).unwrap();
    assert_eq!(got, short);
    let past_end = dev.num_blocks();
    let err = dev
        .write_batch_owned(vec![(5, vec![0xCD; ps]), (past_end, vec![0xCD; ps])])
        .unwrap_err();
    assert!(matches!(err, BlockError::OutOfRange { .. }), "{err:?}");
    let mut one = vec![0xFF; ps];
    dev.read(5, &mut one).unwrap();
    assert_eq!(one, vec![0u8; ps], "block 5 was written by a failed batch");
}
