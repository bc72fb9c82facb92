//! In-process crash tests: the file system on the NVM journal over a
//! crash-simulating region and block device, crashed at many points of
//! seeded random operation sequences. After recovery the tree must be the
//! state after some operation boundary at or after the last fsync that
//! returned before the crash (all-or-nothing operations, fsync'd data
//! durable), and fsck must be clean.

use std::collections::BTreeMap;
use std::sync::Arc;

use ptsd_blockdev::{BlockDevice, CrashDevice};
use ptsd_fs::coalesce::CoalescingStore;
use ptsd_fs::{
    fsck, mkfs, Caller, DirectStore, FileSystem, JournalStore, MkfsOptions, SetAttr, Store,
};
use ptsd_nvjournal::{CrashRegion, Journal, JournalConfig};
use rand::{Rng, SeedableRng};

const ME: Caller = Caller { uid: 0, gid: 0 };
const BLOCKS: u64 = 2048;
const REGION: usize = 2 << 20;

#[derive(Clone, Debug)]
enum Op {
    Create(u8),
    Write(u8, u64, usize, u8),
    Truncate(u8, u64),
    Unlink(u8),
    Rename(u8, u8),
    Mkdir(u8),
    Rmdir(u8),
    Fsync,
}

fn gen_ops(seed: u64, n: usize) -> Vec<Op> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| match rng.gen_range(0..10) {
            0 | 1 => Op::Create(rng.gen_range(0..6)),
            2..=4 => Op::Write(
                rng.gen_range(0..6),
                rng.gen_range(0..20_000),
                rng.gen_range(1..12_000),
                rng.gen(),
            ),
            5 => Op::Truncate(rng.gen_range(0..6), rng.gen_range(0..15_000)),
            6 => Op::Unlink(rng.gen_range(0..6)),
            7 => Op::Rename(rng.gen_range(0..6), rng.gen_range(0..6)),
            8 => {
                if rng.gen_bool(0.5) {
                    Op::Mkdir(rng.gen_range(0..3))
                } else {
                    Op::Rmdir(rng.gen_range(0..3))
                }
            }
            _ => Op::Fsync,
        })
        .collect()
}

/// Files (name → content) and directories (name → empty marker).
type Tree = BTreeMap<String, Option<Vec<u8>>>;

fn cfg() -> JournalConfig {
    JournalConfig {
        partitions: 2,
        checkpoint_interval: None,
        ..JournalConfig::default()
    }
}

/// Apply one op to the fs and, if it succeeded, to the model.
fn apply(fs: &FileSystem, model: &mut Tree, op: &Op) -> Result<(), ptsd_fs::Errno> {
    let root = fs.root();
    let f = |i: u8| format!("f{i}");
    let d = |i: u8| format!("d{i}");
    match op {
        Op::Create(i) => {
            let a = fs.create(root, f(*i).as_bytes(), 0o644, ME)?;
            fs.release(a.ino)?;
            model.insert(f(*i), Some(Vec::new()));
        }
        Op::Write(i, off, len, byte) => {
            let a = fs.lookup(root, f(*i).as_bytes())?;
            let data = vec![*byte; *len];
            fs.write(a.ino, *off, &data)?;
            let c = model
                .get_mut(&f(*i))
                .and_then(|c| c.as_mut())
                .expect("model has the file");
            let end = *off as usize + len;
            if c.len() < end {
                c.resize(end, 0);
            }
            c[*off as usize..end].copy_from_slice(&data);
        }
        Op::Truncate(i, size) => {
            let a = fs.lookup(root, f(*i).as_bytes())?;
            fs.setattr(
                a.ino,
                SetAttr {
                    size: Some(*size),
                    ..Default::default()
                },
            )?;
            model
                .get_mut(&f(*i))
                .and_then(|c| c.as_mut())
                .expect("model has the file")
                .resize(*size as usize, 0);
        }
        Op::Unlink(i) => {
            fs.unlink(root, f(*i).as_bytes())?;
            model.remove(&f(*i));
        }
        Op::Rename(a, b) => {
            fs.rename(root, f(*a).as_bytes(), root, f(*b).as_bytes(), 0)?;
            if a != b {
                let c = model.remove(&f(*a)).expect("model has the source");
                model.insert(f(*b), c);
            }
        }
        Op::Mkdir(i) => {
            fs.mkdir(root, d(*i).as_bytes(), 0o755, ME)?;
            model.insert(d(*i), None);
        }
        Op::Rmdir(i) => {
            fs.rmdir(root, d(*i).as_bytes())?;
            model.remove(&d(*i));
        }
        Op::Fsync => fs.fsync()?,
    }
    Ok(())
}

fn read_tree(fs: &FileSystem) -> Tree {
    let root = fs.root();
    let mut t = Tree::new();
    for e in fs.readdir(root, 2, usize::MAX).unwrap() {
        let name = String::from_utf8(e.name).unwrap();
        let a = fs.getattr(e.ino).unwrap();
        if a.mode & libc::S_IFMT == libc::S_IFDIR {
            t.insert(name, None);
        } else {
            t.insert(name, Some(fs.read(e.ino, 0, u32::MAX).unwrap()));
        }
    }
    t
}

/// Run `ops`, crashing just before journal-region event `crash_at`
/// (counted from the mount). Returns the number of events a full run takes
/// and, after a crash, how many entries the recovered tree held.
/// `ordered_min`: ordered-mode data from that many whole new blocks on
/// (0: data always journaled). `window`: transactions coalesced in commit
/// windows of up to that many blocks (`CoalescingStore`).
fn run_with(
    seed: u64,
    ops: &[Op],
    crash_at: Option<u64>,
    ordered_min: u64,
    window: Option<usize>,
) -> (u64, Option<usize>) {
    let dev = Arc::new(CrashDevice::new(4096, BLOCKS).unwrap());
    let ddev: Arc<dyn BlockDevice> = dev.clone();
    mkfs(
        &DirectStore::new(ddev.clone()).unwrap(),
        &MkfsOptions::default(),
    )
    .unwrap();
    dev.flush().unwrap();
    let region = CrashRegion::new(REGION);
    let journal = Journal::create(region.clone(), ddev.clone(), cfg()).unwrap();
    let hook_dev = dev.clone();
    region.on_crash(move || {
        hook_dev.crash(seed);
    });
    let store: Arc<dyn Store> = Arc::new(JournalStore::new(journal, ddev.clone(), "test".into()));
    let store: Arc<dyn Store> = match window {
        Some(n) => CoalescingStore::new(store, n, None),
        None => store,
    };
    let fs = FileSystem::mount(store).unwrap();
    fs.set_ordered_min_blocks(ordered_min);
    let start = region.events();
    if let Some(k) = crash_at {
        region.crash_at_event(start + k);
    }
    let mut model = Tree::new();
    let mut states = vec![model.clone()];
    let mut durable_from = 0;
    for op in ops {
        let res = apply(&fs, &mut model, op);
        if region.is_crashed() {
            break;
        }
        match res {
            Ok(()) => {
                states.push(model.clone());
                if matches!(op, Op::Fsync) {
                    durable_from = states.len() - 1;
                }
            }
            Err(e) => assert!(
                e.0 != libc::EIO && e.0 != libc::EROFS,
                "seed {seed}: {op:?} failed with {e} before any crash"
            ),
        }
    }
    let total = region.events() - start;
    if !region.is_crashed() {
        fs.close().unwrap();
        drop(fs);
        return (total, None);
    }
    // The crash: take what the media hold, then restart from them. The
    // crashed instance is dropped only after the image is taken (its close
    // reaches no media: region and device are crashed), so its journal
    // threads end instead of piling up over hundreds of runs.
    let img = region.crash_image(seed);
    drop(fs);
    let dev2 = Arc::new(dev.reopen());
    let ddev2: Arc<dyn BlockDevice> = dev2.clone();
    let (journal2, _report) = Journal::open(CrashRegion::from_image(img), ddev2.clone(), cfg())
        .unwrap_or_else(|e| panic!("seed {seed} crash {crash_at:?}: journal recovery failed: {e}"));
    let store: Arc<dyn Store> = Arc::new(JournalStore::new(journal2, ddev2.clone(), "test".into()));
    let fs = FileSystem::mount(store).unwrap_or_else(|e| {
        panic!("seed {seed} crash {crash_at:?}: mount after crash failed: {e}")
    });
    let got = read_tree(&fs);
    let ok = states[durable_from..].contains(&got);
    assert!(ok, "seed {seed} crash {crash_at:?}: recovered tree matches no state at or after the last fsync (op {durable_from})\n got: {:?}", got.iter().map(|(k, v)| (k, v.as_ref().map(|c| c.len()))).collect::<Vec<_>>());
    fs.close().unwrap();
    drop(fs);
    let r = fsck::check(Arc::new(DirectStore::new(ddev2).unwrap()), false).unwrap();
    assert!(
        r.problems.is_empty(),
        "seed {seed} crash {crash_at:?}: fsck: {:#?}",
        r.problems
    );
    (total, Some(got.len()))
}

#[test]
fn crash_at_many_points_of_random_sequences() {
    crash_many(0, None);
}

/// The same with transactions coalesced in commit windows (flushed at an
/// fsync and, small here, whenever 8 blocks are pending): a crash must
/// still show whole operations, a state at or after the last fsync.
#[test]
fn crash_at_many_points_coalesced() {
    crash_many(0, Some(8));
    crash_many(1, Some(64));
}

/// The same with ordered-mode data for every whole new block: file data
/// written straight home (flushed before its metadata commits), the rest
/// journaled. Recovered trees must still match a state at or after the
/// last fsync, byte for byte, so no block a file's size covers shows stale
/// or foreign data.
#[test]
fn crash_at_many_points_with_ordered_data() {
    crash_many(1, None);
}

fn crash_many(ordered_min: u64, window: Option<usize>) {
    let (mut crashes, mut nonempty) = (0, 0);
    // PTSD_CRASH_SEEDS sequences (default 12, ~25 crash points each) from
    // seed PTSD_CRASH_SEED (default 0).
    let env = |k: &str, d: u64| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let first = env("PTSD_CRASH_SEED", 0);
    for seed in first..first + env("PTSD_CRASH_SEEDS", 12) {
        let ops = gen_ops(seed, 60);
        let (total, _) = run_with(seed, &ops, None, ordered_min, window);
        // About 25 crash points spread over the whole run, plus the first few.
        let step = (total / 25).max(1);
        let mut k = 0;
        while k < total {
            if let (_, Some(n)) = run_with(seed * 1000 + k, &ops, Some(k), ordered_min, window) {
                crashes += 1;
                nonempty += usize::from(n > 0);
            }
            k += if k < 5 { 1 } else { step };
        }
    }
    // The runs really crashed, and mostly with something to recover.
    assert!(
        crashes >= 80 && nonempty * 2 > crashes,
        "{crashes} crashes, {nonempty} non-empty recoveries"
    );
}
