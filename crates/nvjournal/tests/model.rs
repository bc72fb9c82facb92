//! proptest over the journal's state machine: random sequences of begin /
//! write / finish / abort / commit / checkpoint / read / crash+recover,
//! checked against a simple model (committed map, visible map, open tx).

use std::collections::HashMap;
use std::sync::Arc;

use proptest::prelude::*;
use ptsd_blockdev::{BlockDevice, CrashDevice};
use ptsd_nvjournal::{CrashRegion, Journal, JournalConfig, JournalKind, Tx};

const BS: usize = 4096;
const BLOCKS: u64 = 16;

#[derive(Clone, Debug)]
enum Op {
    Begin,
    Write(u64, u8),
    Finish,
    Abort,
    Commit,
    Checkpoint,
    Read(u64),
    Crash(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::Begin),
        6 => (0..BLOCKS, any::<u8>()).prop_map(|(b, v)| Op::Write(b, v)),
        3 => Just(Op::Finish),
        1 => Just(Op::Abort),
        2 => Just(Op::Commit),
        1 => Just(Op::Checkpoint),
        3 => (0..BLOCKS).prop_map(Op::Read),
        1 => any::<u64>().prop_map(Op::Crash),
    ]
}

struct Sut {
    region: CrashRegion,
    dev: Arc<CrashDevice>,
    journal: Arc<Journal>,
    cfg: JournalConfig,
}

impl Sut {
    fn attach_crash_hook(&self, seed: u64) {
        let d = self.dev.clone();
        self.region.on_crash(move || {
            d.crash(seed);
        });
    }
}

fn run(kind: JournalKind, partitions: u32, ops: Vec<Op>) {
    let cfg = JournalConfig {
        kind,
        partitions,
        checkpoint_interval: None,
        checkpoint_fill: 1.0,
        ..JournalConfig::default()
    };
    let region = CrashRegion::new(2 << 20);
    let dev = Arc::new(CrashDevice::new(BS as u32, BLOCKS).unwrap());
    let journal = Journal::create(region.clone(), dev.clone(), cfg.clone()).unwrap();
    let mut sut = Sut {
        region,
        dev,
        journal,
        cfg,
    };
    let mut committed: HashMap<u64, u8> = HashMap::new();
    let mut visible: HashMap<u64, u8> = HashMap::new();
    let mut open: Option<(Tx, Vec<(u64, u8)>)> = None;
    let mut buf = vec![0u8; BS];
    for op in ops {
        match op {
            Op::Begin => {
                if open.is_none() {
                    open = Some((sut.journal.begin(), Vec::new()));
                }
            }
            Op::Write(b, v) => {
                if let Some((tx, w)) = open.as_mut() {
                    tx.write(b, &vec![v; BS]).unwrap();
                    w.push((b, v));
                    tx.read(b, &mut buf).unwrap();
                    assert_eq!(buf[0], v, "tx reads its own write");
                }
            }
            Op::Finish => {
                if let Some((tx, w)) = open.take() {
                    tx.finish().unwrap();
                    visible.extend(w);
                }
            }
            Op::Abort => {
                open = None;
            }
            Op::Commit => {
                if open.is_none() {
                    sut.journal.commit().unwrap();
                    committed = visible.clone();
                }
            }
            Op::Checkpoint => {
                if open.is_none() {
                    sut.journal.checkpoint().unwrap();
                    committed = visible.clone();
                    // Everything committed is on the device now.
                    for (&b, &v) in &committed {
                        assert_eq!(
                            sut.dev.durable_block(b).unwrap()[0],
                            v,
                            "block {b} checkpointed"
                        );
                    }
                }
            }
            Op::Read(b) => {
                sut.journal.read(b, &mut buf).unwrap();
                let expect = visible.get(&b).copied().unwrap_or(0);
                assert!(
                    buf.iter().all(|&x| x == expect),
                    "read block {b}: want {expect}, got {}",
                    buf[0]
                );
            }
            Op::Crash(seed) => {
                open = None;
                sut.attach_crash_hook(seed);
                sut.region.crash_now();
                let image = sut.region.crash_image(seed);
                let region = CrashRegion::from_image(image);
                let dev = Arc::new(sut.dev.reopen());
                let (journal, _) = Journal::open(
                    region.clone(),
                    dev.clone() as Arc<dyn BlockDevice>,
                    sut.cfg.clone(),
                )
                .unwrap();
                sut = Sut {
                    region,
                    dev,
                    journal,
                    cfg: sut.cfg,
                };
                visible = committed.clone();
                for b in 0..BLOCKS {
                    sut.journal.read(b, &mut buf).unwrap();
                    let expect = committed.get(&b).copied().unwrap_or(0);
                    assert!(
                        buf.iter().all(|&x| x == expect),
                        "after crash, block {b}: want {expect}, got {}",
                        buf[0]
                    );
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn partitioned_matches_model(ops in proptest::collection::vec(op(), 1..60), partitions in 1u32..5) {
        run(JournalKind::Partitioned, partitions, ops);
    }

    #[test]
    fn single_lock_matches_model(ops in proptest::collection::vec(op(), 1..60)) {
        run(JournalKind::SingleLock, 1, ops);
    }

    #[test]
    fn short_lock_matches_model(ops in proptest::collection::vec(op(), 1..60)) {
        run(JournalKind::ShortLock, 1, ops);
    }
}
