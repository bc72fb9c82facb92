//! Torn writes and corruption faults through the `CrashDevice` API.

use ptsd_blockdev::{BlockDevice, Corruption, CrashDevice, Fault, SECTOR};

const BS: usize = 4096;

fn block(dev: &CrashDevice, b: u64) -> Vec<u8> {
    let mut buf = vec![0u8; BS];
    dev.read(b, &mut buf).unwrap();
    buf
}

#[test]
fn crashes_tear_kept_writes_only_when_enabled() {
    let tears = |torn: bool| {
        (0..64u64)
            .filter(|&seed| {
                let dev = CrashDevice::new(BS as u32, 4).unwrap();
                dev.set_torn_writes(torn);
                dev.write(0, &[1u8; BS]).unwrap();
                dev.flush().unwrap();
                dev.write(0, &[2u8; BS]).unwrap();
                dev.crash(seed);
                let dev = dev.reopen();
                let b = block(&dev, 0);
                // Whole old, whole new, or a sector prefix of new over old.
                let cut = b.iter().position(|&x| x != 2).unwrap_or(BS);
                assert!(b[cut..].iter().all(|&x| x == 1), "seed {seed}");
                assert_eq!(cut % SECTOR, 0);
                cut != 0 && cut != BS
            })
            .count()
    };
    assert_eq!(tears(false), 0);
    assert!(tears(true) > 0);
}

#[test]
fn corruption_faults_are_logged_and_change_the_media() {
    let dev = CrashDevice::new(BS as u32, 64).unwrap();
    dev.inject(Fault::Corrupt {
        seed: 1,
        probability: 0.5,
        kinds: Corruption::ALL.to_vec(),
    });
    for b in 0..32u64 {
        dev.write(b, &[b as u8 + 1; BS]).unwrap();
    }
    dev.flush().unwrap();
    let evs = dev.corruptions();
    assert!(evs.len() > 4, "{evs:?}");
    for kind in Corruption::ALL {
        assert!(evs.iter().any(|e| e.kind == kind), "no {kind:?} in {evs:?}");
    }
    // Every block not named by an event reads back as written (a misdirect
    // target may hold the wrong block, which its event names).
    let named: Vec<u64> = evs
        .iter()
        .flat_map(|e| match e.kind {
            Corruption::Misdirect => vec![e.block, e.detail],
            _ => vec![e.block],
        })
        .collect();
    for b in (0..32u64).filter(|b| !named.contains(b)) {
        assert_eq!(block(&dev, b), vec![b as u8 + 1; BS], "block {b}");
    }
    for e in &evs {
        let got = block(&dev, e.block);
        let want = vec![e.block as u8 + 1; BS];
        // A later misdirected write may have landed on a lost one's block.
        if named.iter().filter(|&&n| n == e.block).count() == 1 {
            assert_ne!(got, want, "{e:?} left the block intact");
        }
    }
    // Same seed, same damage.
    let again = CrashDevice::new(BS as u32, 64).unwrap();
    again.inject(Fault::Corrupt {
        seed: 1,
        probability: 0.5,
        kinds: Corruption::ALL.to_vec(),
    });
    for b in 0..32u64 {
        again.write(b, &[b as u8 + 1; BS]).unwrap();
    }
    assert_eq!(again.corruptions(), evs);
    dev.clear_faults();
    dev.write(40, &[9u8; BS]).unwrap();
    assert_eq!(block(&dev, 40), vec![9u8; BS]);
}

#[test]
fn one_power_cut_gives_many_crash_states() {
    let dev = CrashDevice::new(BS as u32, 8).unwrap();
    dev.write(0, &[1u8; BS]).unwrap();
    dev.flush().unwrap();
    for b in 0..8u64 {
        dev.write(b, &[2u8; BS]).unwrap();
    }
    dev.power_cut();
    assert!(dev.is_offline());
    let images: Vec<Vec<Vec<u8>>> = (0..16u64)
        .map(|seed| {
            let c = dev.crash_copy(seed);
            (0..8).map(|b| block(&c, b)).collect()
        })
        .collect();
    for img in &images {
        assert!(img[0] == vec![1u8; BS] || img[0] == vec![2u8; BS]);
        for b in &img[1..] {
            assert!(*b == vec![0u8; BS] || *b == vec![2u8; BS]);
        }
    }
    // Seeded: the same seed, the same state; different seeds differ.
    let again: Vec<Vec<u8>> = (0..8).map(|b| block(&dev.crash_copy(3), b)).collect();
    assert_eq!(again, images[3]);
    assert!(images.iter().any(|i| *i != images[0]));
}
