//! Power cuts on the persistent store. The rule tested: after a cut, each
//! logical page holds either its value as of the last completed flush or a
//! value written (or discarded: zeroes) after it. After a clean shutdown,
//! exactly the last values.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use proptest::prelude::*;
use ptsd_blockdev::{BlockDevice, CrashDevice, MemDevice};
use ptsd_ftl::{
    FtlConfig, FtlError, ImageError, NandStoreError, Op, Payload, Request, SchedulerKind,
    SchemeConfig, Ssd,
};

const PAGE: usize = 512;
const LOGICAL: u64 = 320;

fn cfg(scheme: SchemeConfig, scheduler: SchedulerKind) -> FtlConfig {
    FtlConfig {
        page_size: PAGE as u32,
        channels: 2,
        chips_per_channel: 2,
        blocks_per_chip: 24,
        pages_per_block: 8,
        logical_bytes: Some(LOGICAL * PAGE as u64),
        op_ratio: 0.1,
        scheme,
        scheduler,
        write_buffer_pages: 4,
        map_memory_bytes: match scheme {
            SchemeConfig::Page => None,
            _ => Some(3 * 4 + 2 * PAGE as u64),
        },
        ..FtlConfig::default()
    }
}

fn schemes() -> Vec<(SchemeConfig, SchedulerKind)> {
    let p = |entry_dirty| SchemeConfig::Ptsd {
        clean_ratio: 0.5,
        entry_dirty,
        adaptive: false,
    };
    vec![
        (SchemeConfig::Page, SchedulerKind::Fifo),
        (SchemeConfig::Dftl, SchedulerKind::Fifo),
        (p(false), SchedulerKind::ReadPriority),
        (p(true), SchedulerKind::ReadPriority),
    ]
}

fn pattern(lpn: u64, version: u64) -> Vec<u8> {
    let mut v = vec![0u8; PAGE];
    v[..8].copy_from_slice(&lpn.to_le_bytes());
    v[8..16].copy_from_slice(&version.to_le_bytes());
    v[16..].fill(version as u8 | 1);
    v
}

fn run_one(ssd: &mut Ssd, now: &mut u64, req: Request, payload: Payload) -> Payload {
    ssd.submit(*now, req, payload).unwrap();
    let mut out = Vec::new();
    while out.is_empty() {
        let t = ssd.next_event().expect("outstanding request");
        *now = (*now).max(t);
        ssd.advance(t, &mut out);
    }
    let d = out.pop().unwrap();
    assert!(!d.failed, "request failed: {:?}", ssd.fault());
    d.payload
}

fn read_all(ssd: &mut Ssd, now: &mut u64) -> Vec<Vec<u8>> {
    (0..LOGICAL)
        .map(|lpn| {
            let req = Request {
                id: 0,
                op: Op::Read,
                lpn,
                pages: 1,
            };
            match run_one(ssd, now, req, Payload::Read(vec![0xEE; PAGE])) {
                Payload::Read(b) => b,
                other => panic!("{other:?}"),
            }
        })
        .collect()
}

#[derive(Clone, Debug)]
enum Step {
    Write(u64, u32),
    Discard(u64, u32),
    Flush,
    Cut(u64),
    Reopen,
    /// Read everything back, unsynced programs included.
    ReadAll,
}

fn step() -> impl Strategy<Value = Step> {
    let ext = (0..LOGICAL - 3, 1u32..4);
    prop_oneof![
        12 => ext.clone().prop_map(|(l, n)| Step::Write(l, n)),
        2 => ext.prop_map(|(l, n)| Step::Discard(l, n)),
        3 => Just(Step::Flush),
        1 => any::<u64>().prop_map(Step::Cut),
        1 => Just(Step::Reopen),
        1 => Just(Step::ReadAll),
    ]
}

/// Apply the steps; at each cut, check the rule and carry on with what was
/// recovered.
fn check(scheme: SchemeConfig, scheduler: SchedulerKind, steps: &[Step]) {
    let c = cfg(scheme, scheduler);
    let dev = Arc::new(CrashDevice::new(PAGE as u32, Ssd::image_blocks(&c, PAGE as u32)).unwrap());
    let mut ssd = Ssd::open_on(c.clone(), Box::new(dev.clone())).unwrap();
    let zero = vec![0u8; PAGE];
    // Current values, values as of the last flush, and values since.
    let mut now_v: HashMap<u64, Vec<u8>> = HashMap::new();
    let mut flushed: HashMap<u64, Vec<u8>> = HashMap::new();
    let mut since: HashMap<u64, HashSet<Vec<u8>>> = HashMap::new();
    let mut version = 0u64;
    let mut now = 0u64;
    let mut dev = dev;
    for (i, s) in steps.iter().enumerate() {
        match *s {
            Step::Write(lpn, n) => {
                let mut data = Vec::new();
                for p in lpn..lpn + u64::from(n) {
                    version += 1;
                    let v = pattern(p, version);
                    data.extend_from_slice(&v);
                    since.entry(p).or_default().insert(v.clone());
                    now_v.insert(p, v);
                }
                let req = Request {
                    id: i as u64,
                    op: Op::Write,
                    lpn,
                    pages: n,
                };
                run_one(&mut ssd, &mut now, req, Payload::Write(data));
            }
            Step::Discard(lpn, n) => {
                for p in lpn..lpn + u64::from(n) {
                    since.entry(p).or_default().insert(zero.clone());
                    now_v.remove(&p);
                }
                let req = Request {
                    id: i as u64,
                    op: Op::Discard,
                    lpn,
                    pages: n,
                };
                run_one(&mut ssd, &mut now, req, Payload::None);
            }
            Step::Flush => {
                let req = Request {
                    id: i as u64,
                    op: Op::Flush,
                    lpn: 0,
                    pages: 0,
                };
                run_one(&mut ssd, &mut now, req, Payload::None);
                flushed = now_v.clone();
                since.clear();
            }
            Step::Cut(seed) => {
                dev.crash(seed);
                drop(ssd);
                dev = Arc::new(dev.reopen());
                ssd = Ssd::open_on(c.clone(), Box::new(dev.clone()))
                    .unwrap_or_else(|e| panic!("reopen after cut (seed {seed}): {e}"));
                ssd.check_invariants().unwrap();
                now = 0;
                let got = read_all(&mut ssd, &mut now);
                for (lpn, g) in got.iter().enumerate() {
                    let lpn = lpn as u64;
                    let before = flushed.get(&lpn).unwrap_or(&zero);
                    let ok = g == before || since.get(&lpn).is_some_and(|s| s.contains(g));
                    assert!(ok, "step {i}: cut (seed {seed}) left lpn {lpn} with a value it never had in the allowed window");
                }
                now_v = got
                    .into_iter()
                    .enumerate()
                    .filter(|(_, g)| *g != zero)
                    .map(|(l, g)| (l as u64, g))
                    .collect();
                flushed = now_v.clone();
                since.clear();
            }
            Step::ReadAll => {
                let got = read_all(&mut ssd, &mut now);
                for (lpn, g) in got.iter().enumerate() {
                    assert_eq!(
                        g,
                        now_v.get(&(lpn as u64)).unwrap_or(&zero),
                        "step {i}: lpn {lpn} reads back other data"
                    );
                }
            }
            Step::Reopen => {
                ssd.shutdown().unwrap();
                drop(ssd);
                ssd = Ssd::open_on(c.clone(), Box::new(dev.clone())).unwrap();
                ssd.check_invariants().unwrap();
                now = 0;
                let got = read_all(&mut ssd, &mut now);
                for (lpn, g) in got.iter().enumerate() {
                    assert_eq!(
                        g,
                        now_v.get(&(lpn as u64)).unwrap_or(&zero),
                        "step {i}: clean reopen lost lpn {lpn}"
                    );
                }
                flushed = now_v.clone();
                since.clear();
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn power_cuts_lose_nothing_flushed(steps in prop::collection::vec(step(), 1..300), pick in 0usize..4) {
        let (scheme, sched) = schemes()[pick];
        check(scheme, sched, &steps);
    }
}

#[test]
fn long_run_with_cuts_on_every_scheme() {
    use rand::{Rng, SeedableRng};
    for (scheme, sched) in schemes() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(11);
        let steps: Vec<Step> = (0..2500)
            .map(|_| match rng.gen_range(0..100) {
                0..=69 => Step::Write(rng.gen_range(0..LOGICAL - 3), rng.gen_range(1..4)),
                70..=79 => Step::Discard(rng.gen_range(0..LOGICAL - 3), rng.gen_range(1..4)),
                80..=95 => Step::Flush,
                96..=98 => Step::Cut(rng.gen()),
                _ => Step::Reopen,
            })
            .collect();
        check(scheme, sched, &steps);
    }
}

/// One seeded run of [`cuts_inside_syncs_lose_nothing_flushed`]: writes,
/// discards (runs of up to 8 pages, so they cross mapping pages) and
/// flushes on scheme `seed % 4`, the power cut during device write
/// `1..600` (inside a sync as often as not), then several images of that
/// cut recovered and checked. `Err` names what was lost.
fn cut_inside_sync(seed: u64) -> Result<(), String> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let (scheme, sched) = schemes()[(seed % 4) as usize];
    let c = cfg(scheme, sched);
    let dev = Arc::new(CrashDevice::new(PAGE as u32, Ssd::image_blocks(&c, PAGE as u32)).unwrap());
    let mut ssd = Ssd::open_on(c.clone(), Box::new(dev.clone())).unwrap();
    dev.set_torn_writes(rng.gen());
    let cut_at = rng.gen_range(1..600);
    dev.inject(ptsd_blockdev::Fault::PowerCutAtWrite(cut_at));
    let zero = vec![0u8; PAGE];
    let mut now_v: HashMap<u64, Vec<u8>> = HashMap::new();
    let mut flushed: HashMap<u64, Vec<u8>> = HashMap::new();
    let mut since: HashMap<u64, HashSet<Vec<u8>>> = HashMap::new();
    let (mut version, mut now) = (0u64, 0u64);
    for id in 0..400u64 {
        let (op, lpn, n) = match rng.gen_range(0..20) {
            0..=12 => (
                Op::Write,
                rng.gen_range(0..LOGICAL - 3),
                rng.gen_range(1..4),
            ),
            13..=16 => (
                Op::Discard,
                rng.gen_range(0..LOGICAL - 8),
                rng.gen_range(1..9),
            ),
            _ => (Op::Flush, 0, 0),
        };
        let payload = match op {
            Op::Write => {
                let mut data = Vec::new();
                for p in lpn..lpn + u64::from(n) {
                    version += 1;
                    let v = pattern(p, version);
                    data.extend_from_slice(&v);
                    since.entry(p).or_default().insert(v.clone());
                    now_v.insert(p, v);
                }
                Payload::Write(data)
            }
            Op::Discard => {
                for p in lpn..lpn + u64::from(n) {
                    since.entry(p).or_default().insert(zero.clone());
                    now_v.remove(&p);
                }
                Payload::None
            }
            _ => Payload::None,
        };
        let req = Request {
            id,
            op,
            lpn,
            pages: n,
        };
        if ssd.submit(now, req, payload).is_err() {
            break;
        }
        let mut out = Vec::new();
        while out.is_empty() {
            let Some(t) = ssd.next_event() else { break };
            now = now.max(t);
            ssd.advance(t, &mut out);
        }
        if out.first().is_none_or(|d| d.failed) {
            break; // the cut
        }
        if op == Op::Flush {
            flushed = now_v.clone();
            since.clear();
        }
    }
    dev.power_cut();
    drop(ssd);
    for image in 0..4 {
        let d2 = Arc::new(dev.crash_copy(seed * 10 + image));
        let mut ssd = Ssd::open_on(c.clone(), Box::new(d2))
            .map_err(|e| format!("image {image}: recovery failed: {e}"))?;
        ssd.check_invariants()
            .map_err(|e| format!("image {image}: invariants: {e}"))?;
        let mut now = 0;
        for (lpn, g) in read_all(&mut ssd, &mut now).iter().enumerate() {
            let lpn = lpn as u64;
            let before = flushed.get(&lpn).unwrap_or(&zero);
            if g != before && !since.get(&lpn).is_some_and(|s| s.contains(g)) {
                let ver = u64::from_le_bytes(g[8..16].try_into().unwrap());
                return Err(format!(
                    "{scheme:?}, cut at device write {cut_at}, image {image}: lpn {lpn} holds version {ver}, neither its flushed value nor one written since"
                ));
            }
        }
    }
    Ok(())
}

/// Power cuts at any device write, inside the store's sync too. Pins two
/// fixed bugs of the PTSD schemes: a mapping page's OOB entry made durable
/// before those of the data pages it names (recovery then dropped the
/// LPNs' older, flushed copies), and a merged run of discard records
/// numbered by its first discard (a mapping page written amid the run hid
/// the later discards: flushed-then-discarded data came back).
/// `PTSD_FTL_CUT_SEED=<s>` replays one seed.
#[test]
fn cuts_inside_syncs_lose_nothing_flushed() {
    let seeds = match std::env::var("PTSD_FTL_CUT_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        Some(s) => s..s + 1,
        None => 0..CUT_SEEDS,
    };
    for seed in seeds {
        if let Err(e) = cut_inside_sync(seed) {
            panic!(
                "seed {seed}: {e}\nreplay: PTSD_FTL_CUT_SEED={seed} cargo test -p ptsd-ftl --test powercut cuts_inside_syncs_lose_nothing_flushed"
            );
        }
    }
}

/// Seeds of `cuts_inside_syncs_lose_nothing_flushed`.
const CUT_SEEDS: u64 = 400;

#[test]
fn bad_images_are_typed_errors() {
    let c = cfg(SchemeConfig::Page, SchedulerKind::Fifo);
    let blocks = Ssd::image_blocks(&c, PAGE as u32);
    // A foreign image.
    let dev = Arc::new(MemDevice::new(PAGE as u32, blocks).unwrap());
    dev.write(0, &[0x5A; PAGE]).unwrap();
    let err = Ssd::open_on(c.clone(), Box::new(dev)).err().unwrap();
    assert!(
        matches!(
            err,
            FtlError::Store(NandStoreError::Image(ImageError::NotAnImage))
        ),
        "{err}"
    );
    // A corrupt header.
    let dev = Arc::new(MemDevice::new(PAGE as u32, blocks).unwrap());
    drop(Ssd::open_on(c.clone(), Box::new(dev.clone())).unwrap());
    let mut h = vec![0u8; PAGE];
    dev.read(0, &mut h).unwrap();
    h[13] ^= 1;
    dev.write(0, &h).unwrap();
    let err = Ssd::open_on(c.clone(), Box::new(dev)).err().unwrap();
    assert!(
        matches!(
            err,
            FtlError::Store(NandStoreError::Image(ImageError::HeaderChecksum))
        ),
        "{err}"
    );
    // An image of version 1 (pages at their ppa, not stripe-major): a
    // clear error, never a misread.
    let dev = Arc::new(MemDevice::new(PAGE as u32, blocks).unwrap());
    drop(Ssd::open_on(c.clone(), Box::new(dev.clone())).unwrap());
    let mut h = vec![0u8; PAGE];
    dev.read(0, &mut h).unwrap();
    h[8..12].copy_from_slice(&1u32.to_le_bytes());
    let crc = crc32c::crc32c(&h[..44]);
    h[44..48].copy_from_slice(&crc.to_le_bytes());
    dev.write(0, &h).unwrap();
    let err = Ssd::open_on(c.clone(), Box::new(dev)).err().unwrap();
    assert!(
        matches!(
            err,
            FtlError::Store(NandStoreError::Image(ImageError::Version(1)))
        ),
        "{err}"
    );
    // The cause is the source, shown once in the chain.
    let chain = ptsd_blockdev::ErrorChain(&err).to_string();
    assert!(chain.contains("version 1"), "{chain}");
    // Another geometry.
    let dev = Arc::new(MemDevice::new(PAGE as u32, blocks * 2).unwrap());
    drop(Ssd::open_on(c.clone(), Box::new(dev.clone())).unwrap());
    let mut other = c.clone();
    other.blocks_per_chip += 1;
    let err = Ssd::open_on(other, Box::new(dev)).err().unwrap();
    assert!(
        matches!(
            err,
            FtlError::Store(NandStoreError::Image(ImageError::Geometry { .. }))
        ),
        "{err}"
    );
    // Too small a device.
    let dev = Arc::new(MemDevice::new(PAGE as u32, blocks - 1).unwrap());
    let err = Ssd::open_on(c, Box::new(dev)).err().unwrap();
    assert!(
        matches!(
            err,
            FtlError::Store(NandStoreError::Image(ImageError::TooSmall { .. }))
        ),
        "{err}"
    );
}

/// Writes in random order, then multi-page reads of every length at every
/// offset, from flash (after a reopen the write buffer is empty): the pages
/// come back in order whatever runs they form on the image (stripe-major:
/// runs of image blocks, not of ppas), which the persistent store reads as
/// one batch (`Store::read_many`). Over a file
/// with io_uring (the runs read in parallel) and over memory.
#[test]
fn multi_page_reads_from_the_image_return_every_page_in_order() {
    use ptsd_blockdev::FileDeviceOptions;
    let dir = std::env::temp_dir().join(format!("ptsd-ftl-readmany-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (k, (scheme, scheduler)) in schemes().into_iter().enumerate() {
        let c = cfg(scheme, scheduler);
        let blocks = Ssd::image_blocks(&c, PAGE as u32);
        let devs: Vec<Arc<dyn BlockDevice>> = vec![
            Arc::new(MemDevice::new(PAGE as u32, blocks).unwrap()),
            Arc::new(
                FileDeviceOptions::new()
                    .block_size(PAGE as u32)
                    .direct(false)
                    .io_uring_buffered(true)
                    .random_access(true)
                    .create(dir.join(format!("{k}.img")), blocks)
                    .unwrap(),
            ),
        ];
        for dev in devs {
            let mut ssd = Ssd::open_on(c.clone(), Box::new(dev.clone())).unwrap();
            let mut now = 0;
            // A scattered order, so logical neighbours land apart.
            let order: Vec<u64> = (0..LOGICAL).map(|i| (i * 97) % LOGICAL).collect();
            for &lpn in &order {
                let w = Request {
                    id: 0,
                    op: Op::Write,
                    lpn,
                    pages: 1,
                };
                run_one(&mut ssd, &mut now, w, Payload::Write(pattern(lpn, 1)));
            }
            ssd.shutdown().unwrap();
            drop(ssd);
            let mut ssd = Ssd::open_on(c.clone(), Box::new(dev)).unwrap();
            for pages in [2u32, 3, 8, 17, 64] {
                for lpn in (0..LOGICAL - u64::from(pages)).step_by(pages as usize + 5) {
                    let r = Request {
                        id: 0,
                        op: Op::Read,
                        lpn,
                        pages,
                    };
                    let buf = vec![0xEE; pages as usize * PAGE];
                    let Payload::Read(got) = run_one(&mut ssd, &mut now, r, Payload::Read(buf))
                    else {
                        panic!("no read payload");
                    };
                    for (i, page) in got.chunks(PAGE).enumerate() {
                        assert_eq!(
                            page,
                            &pattern(lpn + i as u64, 1)[..],
                            "{scheme:?}: page {i} of a {pages}-page read at {lpn}"
                        );
                    }
                }
            }
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// A flipped bit in one page of a multi-page read fails the read (the
/// batch checks every page's checksum), never hands the page up.
#[test]
fn a_corrupt_page_inside_a_multi_page_read_fails_it() {
    let c = cfg(SchemeConfig::Page, SchedulerKind::Fifo);
    let blocks = Ssd::image_blocks(&c, PAGE as u32);
    let dev = Arc::new(MemDevice::new(PAGE as u32, blocks).unwrap());
    let mut ssd = Ssd::open_on(c.clone(), Box::new(dev.clone())).unwrap();
    let mut now = 0;
    let w = Request {
        id: 0,
        op: Op::Write,
        lpn: 0,
        pages: 8,
    };
    let data: Vec<u8> = (0..8).flat_map(|l| pattern(l, 1)).collect();
    run_one(&mut ssd, &mut now, w, Payload::Write(data));
    ssd.shutdown().unwrap();
    drop(ssd);
    // Find page 5's bytes on the image by its pattern and flip a bit.
    let want = pattern(5, 1);
    let at = (0..blocks)
        .find(|&b| {
            let mut v = vec![0u8; PAGE];
            dev.read(b, &mut v).unwrap();
            v == want
        })
        .expect("page 5 on the image");
    let mut v = want.clone();
    v[100] ^= 4;
    dev.write(at, &v).unwrap();
    let mut ssd = Ssd::open_on(c, Box::new(dev)).unwrap();
    let r = Request {
        id: 0,
        op: Op::Read,
        lpn: 0,
        pages: 8,
    };
    ssd.submit(now, r, Payload::Read(vec![0; 8 * PAGE]))
        .unwrap();
    let mut out = Vec::new();
    while out.is_empty() {
        let t = ssd.next_event().expect("outstanding request");
        ssd.advance(t, &mut out);
    }
    assert!(out[0].failed, "a read over a corrupt page succeeded");
}

/// The persistent store stages programs in memory and writes them out in
/// batches. A physical page erased by GC and programmed again before the
/// write-out must go out with its newest data, and reads before and after
/// the write-out (and after a reopen) must see the newest data.
#[test]
fn staged_programs_reach_the_image_with_their_newest_data() {
    for (scheme, sched) in schemes() {
        let c = cfg(scheme, sched);
        let dev =
            Arc::new(CrashDevice::new(PAGE as u32, Ssd::image_blocks(&c, PAGE as u32)).unwrap());
        let mut ssd = Ssd::open_on(c.clone(), Box::new(dev.clone())).unwrap();
        let mut now = 0u64;
        let mut now_v: HashMap<u64, Vec<u8>> = HashMap::new();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        // Several times the physical pages, no flush: GC erases and
        // reprograms pages while their earlier programs are still staged.
        for version in 1..=3000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let lpn = x % LOGICAL;
            let v = pattern(lpn, version);
            now_v.insert(lpn, v.clone());
            let req = Request {
                id: version,
                op: Op::Write,
                lpn,
                pages: 1,
            };
            run_one(&mut ssd, &mut now, req, Payload::Write(v));
        }
        let zero = vec![0u8; PAGE];
        let expect = |got: Vec<Vec<u8>>, when: &str| {
            for (lpn, g) in got.iter().enumerate() {
                assert_eq!(
                    g,
                    now_v.get(&(lpn as u64)).unwrap_or(&zero),
                    "{scheme:?}: lpn {lpn} {when}"
                );
            }
        };
        expect(read_all(&mut ssd, &mut now), "before the write-out");
        let flush = Request {
            id: 0,
            op: Op::Flush,
            lpn: 0,
            pages: 0,
        };
        run_one(&mut ssd, &mut now, flush, Payload::None);
        expect(read_all(&mut ssd, &mut now), "after a flush");
        ssd.shutdown().unwrap();
        drop(ssd);
        let mut ssd = Ssd::open_on(c.clone(), Box::new(dev.clone())).unwrap();
        ssd.check_invariants().unwrap();
        now = 0;
        expect(read_all(&mut ssd, &mut now), "after a clean reopen");
    }
}
