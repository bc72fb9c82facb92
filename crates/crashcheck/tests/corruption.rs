//! Silent corruption of file data on a plain device (no emulated SSD with
//! its page crcs under the file system): a flipped bit, a misdirected
//! write, a lost write. Each must come back to the reader as EIO, never as
//! wrong data; `fsck` must report it, and `fsck --repair` must leave a
//! clean file system whose damaged block reads as a hole.

use std::sync::Arc;
use std::time::Duration;

use ptsd_blockdev::{BlockDevice, Corruption, CrashDevice, Fault};
use ptsd_fs::format::DiskInode;
use ptsd_fs::{Caller, Errno, FileSystem};
use ptsd_nvjournal::CrashRegion;
use ptsd_stack::{fsck, mkfs, DeviceSpec, JournalSpec, Stack, StackSpec};

const BS: usize = 4096;

fn spec(dev: &Arc<CrashDevice>, region: &CrashRegion) -> StackSpec {
    let mut s = StackSpec::new(
        DeviceSpec::Device(dev.clone()),
        JournalSpec::Region(Arc::new(region.clone())),
    );
    s.journal_config.checkpoint_interval = None;
    s.lock_wait = Duration::ZERO;
    s
}

fn block(tag: u8, i: usize) -> Vec<u8> {
    (0..BS)
        .map(|k| tag ^ (k as u8) ^ ((i as u8) << 4))
        .collect()
}

fn ino_of(fs: &FileSystem, name: &[u8]) -> u64 {
    fs.lookup(fs.root(), name).unwrap().ino
}

/// The device blocks holding file `ino`'s data, in file order.
fn data_blocks(dev: &CrashDevice, ino: u64) -> Vec<u64> {
    let mut b = vec![0u8; BS];
    dev.read(ino, &mut b).unwrap();
    let d = DiskInode::decode(&b, ino).unwrap();
    d.inline_extents
        .iter()
        .flat_map(|e| e.pblk..e.pblk + u64::from(e.len))
        .collect()
}

/// A plain device with `f` (3 blocks) and `g` (1 block), cleanly closed.
fn setup() -> (Arc<CrashDevice>, CrashRegion, u64, u64) {
    let dev = Arc::new(CrashDevice::new(BS as u32, 4096).unwrap());
    mkfs(&DeviceSpec::Device(dev.clone()), None, Duration::ZERO).unwrap();
    let region = CrashRegion::new(4 << 20);
    let stack = Stack::open(spec(&dev, &region)).unwrap();
    let fs = stack.fs();
    let me = Caller::default();
    let f = fs.create(fs.root(), b"f", 0o644, me).unwrap().ino;
    for i in 0..3 {
        fs.write(f, (i * BS) as u64, &block(1, i)).unwrap();
    }
    let g = fs.create(fs.root(), b"g", 0o644, me).unwrap().ino;
    fs.write(g, 0, &block(2, 0)).unwrap();
    fs.fsync().unwrap();
    stack.close().unwrap();
    (dev, region, f, g)
}

fn put(dev: &CrashDevice, blk: u64, data: &[u8]) {
    dev.write(blk, data).unwrap();
    dev.flush().unwrap();
}

/// Reads of `f` fail with EIO where block `bad` is, and return the right
/// bytes elsewhere; `g` reads back intact; fsck reports the block; repair
/// punches it and the next fsck is clean.
fn check_detected(dev: &Arc<CrashDevice>, region: &CrashRegion, bad: usize, want_f: &[Vec<u8>]) {
    {
        let stack = Stack::open(spec(dev, region)).unwrap();
        let fs = stack.fs();
        let (f, g) = (ino_of(fs, b"f"), ino_of(fs, b"g"));
        for (i, want) in want_f.iter().enumerate() {
            let got = fs.read(f, (i * BS) as u64, BS as u32);
            if i == bad {
                assert_eq!(got.err(), Some(Errno::EIO), "block {i} must fail");
            } else {
                assert_eq!(&got.unwrap(), want, "block {i}");
            }
        }
        assert_eq!(fs.read(g, 0, BS as u32).unwrap(), block(2, 0));
        stack.close().unwrap();
    }
    let s = spec(dev, region);
    let report = fsck(&s, false).unwrap().report;
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.to_string().contains("does not match its checksum")),
        "{:?}",
        report.problems
    );
    fsck(&s, true).unwrap();
    let again = fsck(&s, false).unwrap().report;
    assert!(again.problems.is_empty(), "{:?}", again.problems);
    let stack = Stack::open(spec(dev, region)).unwrap();
    let fs = stack.fs();
    let f = ino_of(fs, b"f");
    for (i, want) in want_f.iter().enumerate() {
        let got = fs.read(f, (i * BS) as u64, BS as u32).unwrap();
        if i == bad {
            assert_eq!(got, vec![0u8; BS], "a repaired block is a hole");
        } else {
            assert_eq!(&got, want, "block {i}");
        }
    }
    stack.close().unwrap();
}

#[test]
fn a_flipped_bit_is_eio_and_fsck_reports_it() {
    let (dev, region, f, _) = setup();
    let blocks = data_blocks(&dev, f);
    let mut b = dev.durable_block(blocks[1]).unwrap();
    b[1234] ^= 0x10;
    put(&dev, blocks[1], &b);
    let want: Vec<_> = (0..3).map(|i| block(1, i)).collect();
    check_detected(&dev, &region, 1, &want);
}

#[test]
fn a_misdirected_write_is_eio_where_it_landed() {
    // g's block was written where f's third block is.
    let (dev, region, f, g) = setup();
    let (fb, gb) = (data_blocks(&dev, f), data_blocks(&dev, g));
    put(&dev, fb[2], &dev.durable_block(gb[0]).unwrap());
    let want: Vec<_> = (0..3).map(|i| block(1, i)).collect();
    check_detected(&dev, &region, 2, &want);
}

#[test]
fn a_lost_write_is_eio_not_the_old_data() {
    // f's first block is rewritten, but the device drops the home write
    // of the new contents (the journal checkpoint's write is acknowledged
    // and lost): the old contents must not come back as if current.
    let (dev, region, f, _) = setup();
    let blocks = data_blocks(&dev, f);
    let old = dev.durable_block(blocks[0]).unwrap();
    {
        let stack = Stack::open(spec(&dev, &region)).unwrap();
        let fs = stack.fs();
        fs.write(f, 0, &block(9, 0)).unwrap();
        fs.fsync().unwrap();
        stack.close().unwrap();
    }
    assert_eq!(data_blocks(&dev, f)[0], blocks[0], "rewritten in place");
    put(&dev, blocks[0], &old);
    let want = vec![block(9, 0), block(1, 1), block(1, 2)];
    check_detected(&dev, &region, 0, &want);
}

/// Seeded silent corruption of every kind while files are written through
/// the stack: every later read returns the data last written or EIO.
#[test]
fn seeded_corruption_never_reads_back_as_wrong_data() {
    let (mut eio, mut ok) = (0u64, 0u64);
    for seed in 0..12u64 {
        let dev = Arc::new(CrashDevice::new(BS as u32, 4096).unwrap());
        mkfs(&DeviceSpec::Device(dev.clone()), None, Duration::ZERO).unwrap();
        dev.flush().unwrap();
        let region = CrashRegion::new(4 << 20);
        dev.inject(Fault::Corrupt {
            seed,
            probability: 0.05,
            kinds: Corruption::ALL.to_vec(),
        });
        let mut want: Vec<(u64, Vec<u8>)> = Vec::new();
        {
            let stack = Stack::open(spec(&dev, &region)).unwrap();
            let fs = stack.fs();
            for n in 0..6u8 {
                let ino = fs
                    .create(fs.root(), &[b'f', b'0' + n], 0o644, Caller::default())
                    .unwrap()
                    .ino;
                let data: Vec<u8> = (0..5 * BS)
                    .map(|k| n ^ (k as u8) ^ (k >> 12) as u8)
                    .collect();
                fs.write(ino, 0, &data).unwrap();
                want.push((ino, data));
            }
            fs.fsync().unwrap();
            // Through the device, not the journal's copy: a clean close
            // checkpoints everything home.
            let _ = stack.close();
        }
        // Corruption may have hit metadata too: then opening may fail with
        // an error (also fine); never may a read return other bytes.
        let Ok(stack) = Stack::open(spec(&dev, &region)) else {
            continue;
        };
        let fs = stack.fs();
        for (ino, data) in &want {
            for i in 0..5 {
                match fs.read(*ino, (i * BS) as u64, BS as u32) {
                    Ok(got) => {
                        assert_eq!(got, data[i * BS..(i + 1) * BS], "seed {seed}: wrong data");
                        ok += 1;
                    }
                    Err(e) => {
                        assert_eq!(e, Errno::EIO, "seed {seed}");
                        eio += 1;
                    }
                }
            }
        }
        let _ = stack.close();
    }
    println!(
        "seeded corruption: {ok} blocks read back intact, {eio} reads failed with EIO, 0 wrong"
    );
    assert!(eio > 0, "the corruption must have hit some data");
}

/// A large write goes home in ordered mode (not through the journal): its
/// crcs are recorded all the same, so a flipped bit in it is EIO too.
#[test]
fn ordered_mode_data_is_checked_too() {
    let dev = Arc::new(CrashDevice::new(BS as u32, 4096).unwrap());
    mkfs(&DeviceSpec::Device(dev.clone()), None, Duration::ZERO).unwrap();
    let region = CrashRegion::new(4 << 20);
    let data: Vec<u8> = (0..64 * BS).map(|k| (k * 7 + k / BS) as u8).collect();
    let f = {
        let stack = Stack::open(spec(&dev, &region)).unwrap();
        let fs = stack.fs();
        let f = fs
            .create(fs.root(), b"big", 0o644, Caller::default())
            .unwrap()
            .ino;
        fs.write(f, 0, &data).unwrap();
        fs.fsync().unwrap();
        stack.close().unwrap();
        f
    };
    let blocks = data_blocks(&dev, f);
    assert_eq!(blocks.len(), 64);
    let mut b = dev.durable_block(blocks[40]).unwrap();
    b[7] ^= 1;
    put(&dev, blocks[40], &b);
    let stack = Stack::open(spec(&dev, &region)).unwrap();
    let fs = stack.fs();
    let f = ino_of(fs, b"big");
    assert_eq!(fs.read(f, 0, (64 * BS) as u32).err(), Some(Errno::EIO));
    assert_eq!(
        fs.read(f, 0, (40 * BS) as u32).unwrap(),
        data[..40 * BS],
        "the blocks before the bad one read back"
    );
    stack.close().unwrap();
}
