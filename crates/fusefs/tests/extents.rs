//! Extent maps survive the trip through their on-device form: files built by
//! fallocate, scattered writes, punches and truncates read back the same
//! after the inode leaves the cache and after a remount.

use std::sync::Arc;

use ptsd_blockdev::BlockDevice;
use ptsd_fs::{fsck, Caller, DirectStore, FileSystem, Store};

mod common;
use common::{fresh, remount};

const ME: Caller = Caller { uid: 0, gid: 0 };
const BS: u64 = 4096;

fn fsck_problems(dev: &Arc<dyn BlockDevice>) -> Vec<String> {
    let store: Arc<dyn Store> = Arc::new(DirectStore::new(dev.clone()).unwrap());
    let r = fsck::check(store, false).unwrap();
    r.problems.iter().map(ToString::to_string).collect()
}

/// The kernel forgets the inode (drop_caches): the next use reloads it.
fn drop_from_cache(fs: &FileSystem, ino: u64) {
    fs.release(ino).unwrap();
    fs.forget(ino, 1);
}

/// Issue 11 §1: posix_fallocate 1024 blocks, write the even blocks then the
/// odd ones, let the kernel forget the inode, read back.
#[test]
fn fallocated_file_with_scattered_writes_survives_reload() {
    let n = 1024u64;
    let (dev, fs) = fresh(8192);
    let f = fs.create(fs.root(), b"f", 0o644, ME).unwrap();
    fs.fallocate(f.ino, 0, n * BS, 0).unwrap();
    let order = (0..n).step_by(2).chain((1..n).step_by(2));
    for b in order {
        fs.write(f.ino, b * BS, &[(b % 251) as u8; BS as usize])
            .unwrap();
    }
    let want: Vec<u8> = (0..n)
        .flat_map(|b| std::iter::repeat_n((b % 251) as u8, BS as usize))
        .collect();
    assert_eq!(fs.read(f.ino, 0, (n * BS) as u32).unwrap(), want);
    // The runs merged back: the extent chain's blocks are freed again.
    assert_eq!(fs.getattr(f.ino).unwrap().blocks, n * BS / 512);
    drop_from_cache(&fs, f.ino);
    let a = fs
        .lookup(fs.root(), b"f")
        .expect("f reloads from its inode block");
    assert_eq!(a.size, n * BS);
    assert!(
        fs.read(f.ino, 0, (n * BS) as u32).unwrap() == want,
        "contents after a cache drop"
    );
    fs.close().unwrap();
    drop(fs);
    assert_eq!(fsck_problems(&dev), Vec::<String>::new());
    let fs = remount(&dev);
    let a = fs.lookup(fs.root(), b"f").unwrap();
    fs.open(a.ino).unwrap();
    assert!(fs.read(a.ino, 0, (n * BS) as u32).unwrap() == want);
    fs.release(a.ino).unwrap();
}

mod model {
    use super::*;
    use proptest::prelude::*;

    const MAX_BLOCKS: u64 = 4096;

    /// One file operation, offsets in bytes.
    #[derive(Clone, Debug)]
    pub enum Op {
        Fallocate {
            off: u64,
            len: u64,
            keep: bool,
        },
        Write {
            off: u64,
            len: u64,
            byte: u8,
        },
        /// Whole-block writes to every `step`-th block of a range, in the
        /// order `stride` scatters them (even blocks first, then odd, …).
        Scatter {
            blk: u64,
            count: u64,
            step: u64,
            byte: u8,
        },
        Punch {
            off: u64,
            len: u64,
        },
        Zero {
            off: u64,
            len: u64,
            keep: bool,
        },
        Truncate {
            size: u64,
        },
    }

    fn bytes() -> impl Strategy<Value = (u64, u64)> {
        let max = MAX_BLOCKS * BS;
        prop_oneof![
            // Block-aligned ranges (the common case for fio and databases).
            (0..MAX_BLOCKS, 1..MAX_BLOCKS / 4).prop_map(|(b, n)| (b * BS, n * BS)),
            (0..max, 1..64 * BS),
        ]
    }

    pub fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (bytes(), any::<bool>()).prop_map(|((off, len), keep)| Op::Fallocate {
                off,
                len,
                keep
            }),
            (0..MAX_BLOCKS * BS, 1..3 * BS, any::<u8>()).prop_map(|(off, len, byte)| Op::Write {
                off,
                len,
                byte
            }),
            (0..MAX_BLOCKS, 1..MAX_BLOCKS, 1..4u64, any::<u8>()).prop_map(
                |(blk, count, step, byte)| Op::Scatter {
                    blk,
                    count,
                    step,
                    byte
                }
            ),
            bytes().prop_map(|(off, len)| Op::Punch { off, len }),
            (bytes(), any::<bool>()).prop_map(|((off, len), keep)| Op::Zero { off, len, keep }),
            (0..MAX_BLOCKS * BS).prop_map(|size| Op::Truncate { size }),
        ]
    }

    /// Apply `op` to the file and to the byte model.
    pub fn apply(fs: &FileSystem, ino: u64, m: &mut Vec<u8>, op: &Op) {
        let fill = |m: &mut Vec<u8>, from: u64, to: u64, b: u8| {
            let to = to as usize;
            if m.len() < to {
                m.resize(to, 0);
            }
            m[from as usize..to].fill(b);
        };
        match *op {
            Op::Fallocate { off, len, keep } => {
                let mode = if keep { libc::FALLOC_FL_KEEP_SIZE } else { 0 };
                fs.fallocate(ino, off, len, mode).unwrap();
                if !keep && m.len() < (off + len) as usize {
                    m.resize((off + len) as usize, 0);
                }
            }
            Op::Write { off, len, byte } => {
                fs.write(ino, off, &vec![byte; len as usize]).unwrap();
                fill(m, off, off + len, byte);
            }
            Op::Scatter {
                blk,
                count,
                step,
                byte,
            } => {
                let end = (blk + count).min(MAX_BLOCKS);
                for phase in 0..step {
                    for b in (blk + phase..end).step_by(step as usize) {
                        let v = byte.wrapping_add(b as u8);
                        fs.write(ino, b * BS, &[v; BS as usize]).unwrap();
                        fill(m, b * BS, (b + 1) * BS, v);
                    }
                }
            }
            Op::Punch { off, len } => {
                let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
                fs.fallocate(ino, off, len, mode).unwrap();
                let to = (off + len).min(m.len() as u64);
                if off < to {
                    fill(m, off, to, 0);
                }
            }
            Op::Zero { off, len, keep } => {
                let mode =
                    libc::FALLOC_FL_ZERO_RANGE | if keep { libc::FALLOC_FL_KEEP_SIZE } else { 0 };
                fs.fallocate(ino, off, len, mode).unwrap();
                let to = if keep {
                    (off + len).min(m.len() as u64)
                } else {
                    off + len
                };
                if off < to {
                    fill(m, off, to, 0);
                }
            }
            Op::Truncate { size } => {
                let set = ptsd_fs::SetAttr {
                    size: Some(size),
                    ..Default::default()
                };
                fs.setattr(ino, set).unwrap();
                m.resize(size as usize, 0);
            }
        }
    }

    fn check(fs: &FileSystem, ino: u64, m: &[u8], when: &str) -> Result<(), TestCaseError> {
        let a = fs.getattr(ino).unwrap();
        prop_assert_eq!(a.size, m.len() as u64, "size {}", when);
        let got = fs.read(ino, 0, m.len() as u32 + 1).unwrap();
        if got != m {
            let at = got.iter().zip(m).position(|(a, b)| a != b);
            return Err(TestCaseError::fail(format!(
                "contents differ {when}: first at byte {at:?}"
            )));
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        /// Random fallocate / write / punch / zero / truncate sequences read
        /// back as the byte model says, after the inode is reloaded from its
        /// on-device form and after a remount, and fsck finds nothing.
        #[test]
        fn file_matches_model_after_reload_and_remount(
            ops in prop::collection::vec(op(), 1..24)
        ) {
            let (dev, fs) = fresh(16384);
            let f = fs.create(fs.root(), b"f", 0o644, ME).unwrap();
            let mut m = Vec::new();
            for op in &ops {
                apply(&fs, f.ino, &mut m, op);
            }
            check(&fs, f.ino, &m, "before the reload")?;
            drop_from_cache(&fs, f.ino);
            let a = fs.lookup(fs.root(), b"f").map_err(|e| TestCaseError::fail(format!("reload: {e:?}")))?;
            check(&fs, a.ino, &m, "after the reload")?;
            fs.close().unwrap();
            drop(fs);
            prop_assert_eq!(fsck_problems(&dev), Vec::<String>::new());
            let fs = remount(&dev);
            let a = fs.lookup(fs.root(), b"f").unwrap();
            check(&fs, a.ino, &m, "after the remount")?;
        }
    }
}
