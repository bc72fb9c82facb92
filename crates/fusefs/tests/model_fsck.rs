//! Acceptance for issue 45: `fsck` is clean after a long random run of
//! write / punch / zero range / collapse / insert / fallocate / truncate on
//! files with thousands of extents, checked against a byte-array model,
//! across remounts (unmount, fsck, mount again).
//!
//! Seeded and replayable: the seed is fixed (`PTSD_FS_MODEL_SEED`, default
//! 45) so every run draws the same cases, and a failure is shrunk to a
//! minimal op list and kept in `model_fsck.proptest-regressions`. Cases and
//! ops per case are small by default (a few seconds); a long run:
//!
//! ```text
//! PTSD_FS_MODEL_CASES=200 PTSD_FS_MODEL_OPS=400 PTSD_FS_MODEL_SEED=7 \
//!     cargo test --release -p ptsd-fs --test model_fsck
//! ```

use std::sync::Arc;

use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};
use ptsd_blockdev::{BlockDevice, MemDevice};
use ptsd_fs::{fsck, mkfs, Caller, DirectStore, Errno, FileSystem, MkfsOptions, SetAttr, Store};

const ME: Caller = Caller { uid: 0, gid: 0 };
const BS: u64 = 4096;
/// File blocks an op addresses.
const SPAN: u64 = 3000;
/// Largest file the model lets an insert make (the device holds both
/// files at this size with room for their extent blocks).
const CAP: u64 = 4 * SPAN * BS;
const FILES: usize = 2;
const NAMES: [&[u8]; FILES] = [b"a", b"b"];

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[derive(Clone, Debug)]
enum Op {
    Write {
        f: usize,
        off: u64,
        len: u64,
        byte: u8,
    },
    /// Punch every `step`-th block of `[blk, blk+count)`, one call each:
    /// how a file gets thousands of extents.
    Riddle {
        f: usize,
        blk: u64,
        count: u64,
        step: u64,
    },
    Punch {
        f: usize,
        off: u64,
        len: u64,
    },
    Zero {
        f: usize,
        off: u64,
        len: u64,
        keep: bool,
    },
    Collapse {
        f: usize,
        blk: u64,
        count: u64,
    },
    Insert {
        f: usize,
        blk: u64,
        count: u64,
    },
    Fallocate {
        f: usize,
        off: u64,
        len: u64,
        keep: bool,
    },
    Truncate {
        f: usize,
        size: u64,
    },
    Remount,
}

fn range() -> impl Strategy<Value = (u64, u64)> {
    prop_oneof![
        (0..SPAN, 1..SPAN / 8).prop_map(|(b, n)| (b * BS, n * BS)),
        (0..SPAN * BS, 1..16 * BS),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let f = 0..FILES;
    prop_oneof![
        3 => (f.clone(), 0..SPAN * BS, 1..3 * BS, any::<u8>())
            .prop_map(|(f, off, len, byte)| Op::Write { f, off, len, byte }),
        2 => (f.clone(), (0..SPAN * BS, 1..SPAN * BS / 2), 1..=255u8)
            .prop_map(|(f, (off, len), byte)| Op::Write { f, off, len: len.min(SPAN * BS / 4), byte }),
        2 => (f.clone(), 0..SPAN, 1..SPAN, 2..5u64)
            .prop_map(|(f, blk, count, step)| Op::Riddle { f, blk, count, step }),
        2 => (f.clone(), range()).prop_map(|(f, (off, len))| Op::Punch { f, off, len }),
        2 => (f.clone(), range(), any::<bool>())
            .prop_map(|(f, (off, len), keep)| Op::Zero { f, off, len, keep }),
        2 => (f.clone(), 0..SPAN, 1..SPAN / 8)
            .prop_map(|(f, blk, count)| Op::Collapse { f, blk, count }),
        2 => (f.clone(), 0..SPAN, 1..SPAN / 8)
            .prop_map(|(f, blk, count)| Op::Insert { f, blk, count }),
        1 => (f.clone(), range(), any::<bool>())
            .prop_map(|(f, (off, len), keep)| Op::Fallocate { f, off, len, keep }),
        1 => (f, 0..SPAN * BS).prop_map(|(f, size)| Op::Truncate { f, size }),
        1 => Just(Op::Remount),
    ]
}

struct World {
    dev: Arc<dyn BlockDevice>,
    fs: FileSystem,
    ino: [u64; FILES],
    model: [Vec<u8>; FILES],
}

impl World {
    fn new() -> Self {
        let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(4096, 32768).unwrap());
        let store = Arc::new(DirectStore::new(dev.clone()).unwrap());
        mkfs(&*store, &MkfsOptions::default()).unwrap();
        let fs = FileSystem::mount(store).unwrap();
        let ino = NAMES.map(|n| fs.create(fs.root(), n, 0o644, ME).unwrap().ino);
        World {
            dev,
            fs,
            ino,
            model: [Vec::new(), Vec::new()],
        }
    }

    /// Unmount, fsck, mount again, compare every file with the model.
    fn remount(&mut self) -> Result<(), TestCaseError> {
        self.fs.close().unwrap();
        let store: Arc<dyn Store> = Arc::new(DirectStore::new(self.dev.clone()).unwrap());
        let report = fsck::check(store, false).unwrap();
        let problems: Vec<String> = report.problems.iter().map(ToString::to_string).collect();
        prop_assert_eq!(problems, Vec::<String>::new(), "fsck after unmount");
        self.fs = FileSystem::mount(Arc::new(DirectStore::new(self.dev.clone()).unwrap())).unwrap();
        for (i, n) in NAMES.iter().enumerate() {
            self.ino[i] = self.fs.lookup(self.fs.root(), n).unwrap().ino;
        }
        self.check_all("after the remount")
    }

    fn check_all(&self, when: &str) -> Result<(), TestCaseError> {
        for f in 0..FILES {
            let m = &self.model[f];
            let a = self.fs.getattr(self.ino[f]).unwrap();
            prop_assert_eq!(a.size, m.len() as u64, "file {} size {}", f, when);
            let got = self.fs.read(self.ino[f], 0, m.len() as u32 + 1).unwrap();
            if &got != m {
                let at = got.iter().zip(m).position(|(a, b)| a != b);
                return Err(TestCaseError::fail(format!(
                    "file {f} differs {when}: first at byte {at:?}"
                )));
            }
        }
        Ok(())
    }

    fn apply(&mut self, op: &Op) -> Result<(), TestCaseError> {
        let fs = &self.fs;
        let ok = |r: Result<(), Errno>, what: &str| {
            r.map_err(|e| TestCaseError::fail(format!("{what}: {e:?}")))
        };
        match *op {
            Op::Write { f, off, len, byte } => {
                ok(
                    fs.write(self.ino[f], off, &vec![byte; len as usize])
                        .map(|_| ()),
                    "write",
                )?;
                fill(&mut self.model[f], off, off + len, byte);
            }
            Op::Riddle {
                f,
                blk,
                count,
                step,
            } => {
                let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
                for b in (blk..blk + count).step_by(step as usize) {
                    ok(fs.fallocate(self.ino[f], b * BS, BS, mode), "riddle punch")?;
                    zero_within(&mut self.model[f], b * BS, (b + 1) * BS);
                }
            }
            Op::Punch { f, off, len } => {
                let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
                ok(fs.fallocate(self.ino[f], off, len, mode), "punch")?;
                zero_within(&mut self.model[f], off, off + len);
            }
            Op::Zero { f, off, len, keep } => {
                let mode =
                    libc::FALLOC_FL_ZERO_RANGE | if keep { libc::FALLOC_FL_KEEP_SIZE } else { 0 };
                ok(fs.fallocate(self.ino[f], off, len, mode), "zero range")?;
                if keep {
                    zero_within(&mut self.model[f], off, off + len);
                } else {
                    fill(&mut self.model[f], off, off + len, 0);
                }
            }
            Op::Fallocate { f, off, len, keep } => {
                let mode = if keep { libc::FALLOC_FL_KEEP_SIZE } else { 0 };
                ok(fs.fallocate(self.ino[f], off, len, mode), "fallocate")?;
                let m = &mut self.model[f];
                if !keep && m.len() < (off + len) as usize {
                    m.resize((off + len) as usize, 0);
                }
            }
            Op::Collapse { f, blk, count } => {
                let (off, len) = (blk * BS, count * BS);
                let r = fs.fallocate(self.ino[f], off, len, libc::FALLOC_FL_COLLAPSE_RANGE);
                let m = &mut self.model[f];
                if off + len >= m.len() as u64 {
                    prop_assert_eq!(r, Err(Errno::EINVAL), "collapse reaching EOF");
                } else {
                    ok(r, "collapse")?;
                    m.drain(off as usize..(off + len) as usize);
                }
            }
            Op::Insert { f, blk, count } => {
                let (off, len) = (blk * BS, count * BS);
                let m = &mut self.model[f];
                if m.len() as u64 + len > CAP {
                    return Ok(());
                }
                let r = fs.fallocate(self.ino[f], off, len, libc::FALLOC_FL_INSERT_RANGE);
                if off >= m.len() as u64 {
                    prop_assert_eq!(r, Err(Errno::EINVAL), "insert at or past EOF");
                } else {
                    ok(r, "insert")?;
                    m.splice(
                        off as usize..off as usize,
                        std::iter::repeat_n(0, len as usize),
                    );
                }
            }
            Op::Truncate { f, size } => {
                let set = SetAttr {
                    size: Some(size),
                    ..Default::default()
                };
                ok(fs.setattr(self.ino[f], set).map(|_| ()), "truncate")?;
                self.model[f].resize(size as usize, 0);
            }
            Op::Remount => return self.remount(),
        }
        Ok(())
    }
}

fn fill(m: &mut Vec<u8>, from: u64, to: u64, b: u8) {
    if m.len() < to as usize {
        m.resize(to as usize, 0);
    }
    m[from as usize..to as usize].fill(b);
}

/// Zero `[from, to)` without growing the file.
fn zero_within(m: &mut [u8], from: u64, to: u64) {
    let to = (to as usize).min(m.len());
    if (from as usize) < to {
        m[from as usize..to].fill(0);
    }
}

fn config() -> Config {
    Config {
        cases: env("PTSD_FS_MODEL_CASES", 6) as u32,
        rng_seed: RngSeed::Fixed(env("PTSD_FS_MODEL_SEED", 45)),
        ..Config::default()
    }
}

proptest! {
    #![proptest_config(config())]

    /// Every op leaves the files as the model says, every remount finds
    /// fsck clean and the files intact, and so does the final one.
    #[test]
    fn random_extent_ops_keep_fsck_clean_across_remounts(
        ops in prop::collection::vec(op(), 1..env("PTSD_FS_MODEL_OPS", 30) as usize)
    ) {
        let mut w = World::new();
        for op in &ops {
            w.apply(op)?;
            for f in 0..FILES {
                let size = w.fs.getattr(w.ino[f]).unwrap().size;
                prop_assert_eq!(size, w.model[f].len() as u64, "size of {} after {:?}", f, op);
            }
        }
        w.check_all("at the end")?;
        w.remount()?;
    }
}

/// The runs above reach thousands of extents: one op sequence of the
/// kind they draw, made deterministic, with its extent count measured.
#[test]
fn a_riddled_file_has_thousands_of_extents_and_fsck_stays_clean() {
    let mut w = World::new();
    let ops = [
        Op::Write {
            f: 0,
            off: 0,
            len: SPAN * BS,
            byte: 5,
        },
        Op::Riddle {
            f: 0,
            blk: 0,
            count: SPAN,
            step: 2,
        },
        Op::Collapse {
            f: 0,
            blk: 11,
            count: 7,
        },
        Op::Insert {
            f: 0,
            blk: 100,
            count: 3,
        },
        Op::Zero {
            f: 0,
            off: 1000 * BS + 7,
            len: 50 * BS,
            keep: true,
        },
        Op::Remount,
        Op::Write {
            f: 1,
            off: 0,
            len: 500 * BS,
            byte: 9,
        },
        Op::Riddle {
            f: 1,
            blk: 1,
            count: 499,
            step: 3,
        },
        Op::Truncate {
            f: 0,
            size: 2500 * BS + 1,
        },
        Op::Remount,
    ];
    for op in &ops {
        w.apply(op).unwrap();
    }
    // Count the mapped runs (each one extent at least) with SEEK_DATA and
    // SEEK_HOLE.
    let (ino, size) = (w.ino[0], w.model[0].len() as u64);
    let mut runs = 0;
    let mut at = 0;
    while let Ok(d) = w.fs.seek(ino, at, ptsd_fs::Seek::Data) {
        if d >= size {
            break;
        }
        runs += 1;
        at = w.fs.seek(ino, d, ptsd_fs::Seek::Hole).unwrap();
    }
    assert!(runs > 1000, "{runs} extents");
    w.check_all("at the end").unwrap();
}
