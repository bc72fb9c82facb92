//! Loom model of the journal's lock-free protocol (`ptsd_nvjournal::protocol`,
//! the code the journal runs): slot claim (one atomic add) → claimed →
//! staged/aborted, `last_check`, per-transaction epochs with done marks, and
//! a commit's cover + `commit_ts` snapshot + wait over the rings.
//!
//! Run with (scripts/test does, bounded):
//! `RUSTFLAGS="--cfg loom" cargo test -p ptsd-nvjournal --test loom --release`
//! `LOOM_MAX_PREEMPTIONS` overrides the preemption bound (default 2; 3 takes
//! many minutes on 2 cores).
//!
//! The slot's bytes are a loom `UnsafeCell`, so loom also checks that a
//! stager owns its slot exclusively between the claim and the publication,
//! and that a commit only ever reads slots whose writes happened before.
#![cfg(loom)]

use loom::cell::UnsafeCell;
use loom::sync::{Arc, Mutex};
use loom::thread;
use ptsd_nvjournal::protocol::{Cover, Epochs, Ordering, Ring};

const SLOTS: u64 = 4;

/// The bytes a stager writes into its slot for `epoch`.
fn marker(epoch: u64) -> u64 {
    0xC0DE_0000 + epoch
}

struct Model {
    ring: Ring,
    epochs: Epochs,
    /// One slot's payload per ring slot.
    payload: Vec<UnsafeCell<u64>>,
    /// The newest durable record's cover (commits merge into it, as the
    /// journal does under its `durable` lock).
    durable: Mutex<Option<Cover>>,
}

// SAFETY (test only): the cells are accessed only through loom's
// `with`/`with_mut`, which check every access for races.
unsafe impl Sync for Model {}

impl Model {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            ring: Ring::new(SLOTS, 0),
            epochs: Epochs::new(1, 8),
            payload: (0..SLOTS).map(|_| UnsafeCell::new(0)).collect(),
            durable: Mutex::new(None),
        })
    }

    /// A transaction staging one block, then finishing (or aborting).
    fn transaction(&self, block: u64, finish: bool) -> (u64, u64) {
        let epoch = self.epochs.begin();
        let pos = self.ring.claim();
        self.ring.publish_claim(pos, block, epoch);
        // The slot is ours alone: a plain write (loom flags any race).
        self.payload[(pos % SLOTS) as usize].with_mut(|p| unsafe { *p = marker(epoch) });
        if finish {
            self.ring.publish_staged(pos);
            self.epochs.finish(epoch, true);
        } else {
            self.ring.publish_aborted(pos);
            self.epochs.abort(epoch);
        }
        (epoch, pos)
    }

    /// One commit as the journal does it: read what it covers, snapshot the
    /// head (`commit_ts`), wait until the ring has passed it, then check
    /// every covered slot below the head: staged, and its bytes complete.
    fn commit(&self) -> (Cover, u64) {
        let cover = loop {
            if let Some(c) = self.epochs.cover(8) {
                break c;
            }
            thread::yield_now();
        };
        let head = self.ring.head.load(Ordering::SeqCst);
        let mut j = self.ring.scan_start(head);
        loop {
            j = self.ring.scan_passed(j, head, |e| cover.covers(e));
            if j >= head {
                break;
            }
            thread::yield_now();
        }
        for pos in 0..head {
            let slot = self.ring.slot(pos);
            let epoch = slot.epoch.load(Ordering::Relaxed);
            if self.ring.is_staged(pos) && cover.covers(epoch) {
                let bytes = self.payload[(pos % SLOTS) as usize].with(|p| unsafe { *p });
                assert_eq!(bytes, marker(epoch), "covered slot {pos} incomplete");
            }
        }
        {
            // Commits run concurrently; the record written last must
            // commit everything any of them promised: merge.
            // In place, as the journal does.
            let mut d = self.durable.lock().unwrap();
            match d.as_mut() {
                Some(newest) if cover.is_within(newest.top, &newest.excluded) => {}
                Some(newest) => cover.widen(&mut newest.top, &mut newest.excluded),
                None => *d = Some(cover.clone()),
            }
            // Under the lock, as the journal publishes it.
            self.epochs.publish_durable_serialised(cover.counted);
        }
        (cover, head)
    }
}

/// Run `f` on a loom thread with its own handle to the model.
fn spawn<T: 'static>(
    m: &Arc<Model>,
    f: impl FnOnce(&Model) -> T + 'static,
) -> thread::JoinHandle<T> {
    let m = m.clone();
    thread::spawn(move || f(&m))
}

fn builder() -> loom::model::Builder {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(2);
    }
    b
}

/// Two transactions stage concurrently while a commit runs: the commit
/// covers every transaction it counted as finished, every covered slot is
/// below its snapshot and completely written, and an open transaction is
/// excluded rather than waited for.
#[test]
fn commit_covers_exactly_the_finished_transactions() {
    builder().check(|| {
        let m = Model::new();
        let stagers: Vec<_> = (0..2u64)
            .map(|t| spawn(&m, move |m| m.transaction(t, true)))
            .collect();
        let committer = spawn(&m, |m| m.commit());
        let txs: Vec<(u64, u64)> = stagers.into_iter().map(|h| h.join().unwrap()).collect();
        let (cover, head) = committer.join().unwrap();
        let covered: Vec<&(u64, u64)> = txs.iter().filter(|(e, _)| cover.covers(*e)).collect();
        // Every transaction counted is covered (they are the only ones that
        // finish here, so the count bounds the covered ones from below).
        assert!(covered.len() as u64 >= cover.counted, "{cover:?}");
        for (_, pos) in covered {
            assert!(*pos < head, "covered slot {pos} above the snapshot {head}");
        }
        // After everything finished, a new commit covers both.
        let (all, _) = m.commit();
        assert!(txs.iter().all(|(e, _)| all.covers(*e)), "{all:?}");
        assert_eq!(all.counted, 2);
    });
}

/// An aborted transaction's slot is passed by the commit (never waited
/// for) and never read as covered data; a finished one beside it is.
#[test]
fn aborted_slot_is_passed_and_never_covered_as_staged() {
    builder().check(|| {
        let m = Model::new();
        let finished = spawn(&m, |m| m.transaction(0, true));
        let aborted = spawn(&m, |m| m.transaction(1, false));
        let committer = spawn(&m, |m| m.commit());
        let (fe, fpos) = finished.join().unwrap();
        let (_, apos) = aborted.join().unwrap();
        let (cover, head) = committer.join().unwrap();
        if cover.counted == 1 {
            assert!(cover.covers(fe) && fpos < head, "{cover:?} head {head}");
        }
        assert!(!m.ring.is_staged(apos));
        // The commit worker's step passes both slots once they are done.
        m.ring.advance_last_check();
        assert_eq!(m.ring.last_check.load(Ordering::SeqCst), 2);
    });
}

/// Group commit with concurrent commits: a caller whose `finished` count a
/// durable commit has reached returns without committing; otherwise it
/// commits itself, alongside the other. Either way the newest record
/// (covers merged under the record lock) commits its transaction.
#[test]
fn group_commit_returns_only_when_covered() {
    builder().check(|| {
        let m = Model::new();
        let threads: Vec<_> = (0..2u64)
            .map(|t| {
                spawn(&m, move |m| {
                    let (e, pos) = m.transaction(t, true);
                    // `Journal::commit`: read the count, share if covered.
                    let fin = m.epochs.finished();
                    if !m.epochs.is_durable(fin) {
                        let (c, head) = m.commit();
                        assert!(c.covers(e) && pos < head, "{c:?} head {head}");
                    }
                    // Shared or not, the newest durable record commits us
                    // (records only ever grow: they are merged).
                    let d = m.durable.lock().unwrap();
                    let newest = d.as_ref().expect("a durable record");
                    assert!(
                        newest.covers(e),
                        "newest record {newest:?} misses epoch {e}"
                    );
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    });
}
