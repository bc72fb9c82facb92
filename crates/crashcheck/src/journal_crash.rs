//! `journal_crash`: raw multi-block transactions on the journal over a
//! crash region and a crash device, several logical threads interleaved as
//! the input says (one OS thread, so the run is deterministic), a power cut
//! at an input-chosen region event, and several post-crash images of that
//! one cut recovered and checked.
//!
//! The property: the recovered device holds exactly the transactions some
//! commit covered — the last commit that returned, or one that was under way
//! at the cut — every block of each, nothing of the others. Logical threads
//! own disjoint blocks, so the model needs no tie-break between them.

use std::sync::Arc;

use ptsd_blockdev::{BlockDevice, CrashDevice};
use ptsd_nvjournal::{CrashRegion, Journal, JournalConfig, Tx};

use crate::input::Input;
use crate::{CheckResult, Violation};

const T: &str = "journal_crash";
/// Journal block size: two sectors, so a torn block write is possible.
pub const BS: usize = 1024;
const BLOCKS: u64 = 24;
const REGION: usize = 192 << 10;
/// Actions per run; keeps every ring below its high-water mark, so no
/// `begin` ever waits for space an open transaction pins.
const MAX_ACTIONS: usize = 40;
/// Post-crash images drawn from each cut.
pub const IMAGES: u64 = 6;

/// Journal settings with no background trigger: the event sequence is a
/// function of the input.
pub fn config(partitions: u32) -> JournalConfig {
    JournalConfig {
        partitions,
        block_size: BS as u32,
        checkpoint_interval: None,
        checkpoint_fill: 1.0,
        ..JournalConfig::default()
    }
}

/// Block contents naming the thread, its transaction and the block.
fn value(thread: usize, tx: usize, block: u64) -> Vec<u8> {
    let mut b = vec![(tx as u8).wrapping_mul(31) ^ thread as u8; BS];
    b[..8].copy_from_slice(&(thread as u64).to_le_bytes());
    b[8..16].copy_from_slice(&(tx as u64).to_le_bytes());
    b[16..24].copy_from_slice(&block.to_le_bytes());
    b
}

/// A commit's cover: per thread, how many of its transactions had finished.
type Cover = Vec<usize>;

struct Model {
    threads: usize,
    /// Per thread, the blocks of each finished transaction in order.
    finished: Vec<Vec<Vec<u64>>>,
    /// Covers of every commit started, in order.
    covers: Vec<Cover>,
    /// Index in `covers` of the last commit that returned.
    done: Option<usize>,
}

impl Model {
    fn cover_now(&self) -> Cover {
        self.finished.iter().map(Vec::len).collect()
    }

    /// The image a cover leaves on the blocks.
    fn image(&self, cover: &Cover) -> Vec<Option<usize>> {
        let mut img = vec![None; BLOCKS as usize];
        for (t, txs) in self.finished.iter().enumerate() {
            for (i, blocks) in txs[..cover[t]].iter().enumerate() {
                for &b in blocks {
                    img[b as usize] = Some(i);
                }
            }
        }
        img
    }

    /// Every cover recovery may legally show.
    fn allowed(&self) -> Vec<Cover> {
        match self.done {
            Some(d) => self.covers[d..].to_vec(),
            None => std::iter::once(vec![0; self.threads])
                .chain(self.covers.iter().cloned())
                .collect(),
        }
    }

    fn expected(&self, cover: &Cover, block: u64) -> Vec<u8> {
        let t = (block % self.threads as u64) as usize;
        match self.image(cover)[block as usize] {
            Some(i) => value(t, i, block),
            None => vec![0u8; BS],
        }
    }
}

/// Run one input; see the module doc.
pub fn run(data: &[u8]) -> CheckResult {
    let mut inp = Input::new(data);
    let partitions = 1 + inp.below(3);
    let threads = 1 + inp.below(4) as usize;
    let torn = inp.bool();
    // The cut: at a region event, or when a checkpoint's device flush
    // begins (a moment with no region event of its own).
    let at_flush = inp.below(4) == 0;
    let crash_at = u64::from(inp.below(if at_flush { 4 } else { 400 }));
    let dev = Arc::new(CrashDevice::new(BS as u32, BLOCKS).expect("device geometry"));
    dev.set_torn_writes(torn);
    let ddev: Arc<dyn BlockDevice> = dev.clone();
    let region = CrashRegion::new(REGION);
    let journal = Journal::create(region.clone(), ddev, config(partitions))
        .map_err(|e| Violation::new(T, format!("create: {}", ptsd_blockdev::ErrorChain(&e))))?;
    // The cut hits both media at once. The region's hook holds the device
    // weakly: the two hooks would otherwise keep each other alive forever.
    let hook = Arc::downgrade(&dev);
    region.on_crash(move || {
        if let Some(d) = hook.upgrade() {
            d.power_cut();
        }
    });
    let r = region.clone();
    dev.on_power_cut(move || r.crash_now());
    if at_flush {
        dev.inject(ptsd_blockdev::Fault::PowerCutAtFlush(1 + crash_at));
    } else {
        region.crash_at_event(region.events() + crash_at);
    }

    let mut m = Model {
        threads,
        finished: vec![Vec::new(); threads],
        covers: Vec::new(),
        done: None,
    };
    let owned: Vec<Vec<u64>> = (0..threads)
        .map(|t| {
            (0..BLOCKS)
                .filter(|b| b % threads as u64 == t as u64)
                .collect()
        })
        .collect();
    let mut open: Vec<Option<(Tx<'_>, Vec<u64>)>> = (0..threads).map(|_| None).collect();
    for _ in 0..MAX_ACTIONS {
        if inp.is_empty() || region.is_crashed() {
            break;
        }
        let t = inp.below(threads as u32) as usize;
        let action = inp.below(8);
        let res = match action {
            0..=2 => {
                let b = owned[t][inp.below(owned[t].len() as u32) as usize];
                let txno = m.finished[t].len();
                let (tx, blocks) = open[t].get_or_insert_with(|| (journal.begin(), Vec::new()));
                blocks.push(b);
                tx.write(b, &value(t, txno, b))
            }
            3 | 7 => match open[t].take() {
                Some((tx, blocks)) => {
                    let r = tx.finish().map(|_| ());
                    if r.is_ok() {
                        m.finished[t].push(blocks);
                    }
                    if action == 7 && r.is_ok() {
                        commit(&journal, &region, &mut m, false)
                    } else {
                        r
                    }
                }
                None => Ok(()),
            },
            4 => {
                open[t] = None; // abort
                Ok(())
            }
            5 => commit(&journal, &region, &mut m, false),
            _ => commit(&journal, &region, &mut m, true),
        };
        if let Err(e) = res {
            if !region.is_crashed() {
                return Err(Violation::new(
                    T,
                    format!(
                        "operation failed before any crash: {}",
                        ptsd_blockdev::ErrorChain(&e)
                    ),
                ));
            }
        }
    }
    drop(open);
    region.crash_now();
    drop(journal);

    let allowed = m.allowed();
    let mut states = 0;
    for s in 0..IMAGES {
        let seed = crash_at.wrapping_mul(1000).wrapping_add(s);
        let img = region.crash_image(seed);
        let dev2 = Arc::new(dev.crash_copy(seed));
        // One image of each cut also crashes during its own recovery: the
        // second recovery must reach the same result.
        let (img, dev2) = if s == 1 {
            second_crash(img, &dev2, partitions, inp.u16())?
        } else {
            (img, dev2)
        };
        let ddev2: Arc<dyn BlockDevice> = dev2.clone();
        let (j2, _) = Journal::open(CrashRegion::from_image(img), ddev2, config(partitions))
            .map_err(|e| {
                Violation::new(
                    T,
                    format!(
                        "image {s}: recovery failed: {}",
                        ptsd_blockdev::ErrorChain(&e)
                    ),
                )
            })?;
        let mut got = Vec::new();
        let mut buf = vec![0u8; BS];
        for b in 0..BLOCKS {
            j2.read(b, &mut buf).map_err(|e| {
                Violation::new(
                    T,
                    format!("image {s}: read {b}: {}", ptsd_blockdev::ErrorChain(&e)),
                )
            })?;
            got.push(buf.clone());
        }
        let ok = allowed
            .iter()
            .any(|c| (0..BLOCKS).all(|b| got[b as usize] == m.expected(c, b)));
        if !ok {
            let summary: Vec<String> = got
                .iter()
                .map(|g| {
                    if g.iter().all(|&x| x == 0) {
                        "-".into()
                    } else {
                        format!(
                            "t{}#{}",
                            u64::from_le_bytes(g[..8].try_into().unwrap()),
                            u64::from_le_bytes(g[8..16].try_into().unwrap())
                        )
                    }
                })
                .collect();
            return Err(Violation::new(
                T,
                format!(
                    "image {s} (cut at {} {crash_at}): recovered blocks {summary:?} match no commit's cover; allowed covers {allowed:?}",
                    if at_flush { "device flush" } else { "region event" }
                ),
            ));
        }
        // The recovered journal takes new work and closes cleanly.
        if s == 0 {
            let mut tx = j2.begin();
            let after = vec![0xAB; BS];
            let r = tx
                .write(0, &after)
                .and_then(|()| tx.finish().map(|_| ()))
                .and_then(|()| j2.close());
            r.map_err(|e| {
                Violation::new(
                    T,
                    format!(
                        "recovered journal refused work: {}",
                        ptsd_blockdev::ErrorChain(&e)
                    ),
                )
            })?;
            dev2.read(0, &mut buf)
                .map_err(|e| Violation::new(T, e.to_string()))?;
            if buf != after {
                return Err(Violation::new(T, "close after recovery did not checkpoint"));
            }
        }
        states += 1;
    }
    Ok(states)
}

fn commit(
    journal: &Journal,
    region: &CrashRegion,
    m: &mut Model,
    checkpoint: bool,
) -> Result<(), ptsd_nvjournal::JournalError> {
    m.covers.push(m.cover_now());
    let r = if checkpoint {
        journal.checkpoint()
    } else {
        journal.commit()
    };
    // A commit the cut interrupted may still return (the region drops
    // stores after the cut): it counts only if it returned before.
    if r.is_ok() && !region.is_crashed() {
        m.done = Some(m.covers.len() - 1);
    }
    r
}

/// Recover `img` but cut the power again at region event `at` of the
/// recovery (if it gets that far); return the media after that second cut.
fn second_crash(
    img: Vec<u8>,
    dev: &Arc<CrashDevice>,
    partitions: u32,
    at: u16,
) -> Result<(Vec<u8>, Arc<CrashDevice>), Violation> {
    let region = CrashRegion::from_image(img);
    let hook = dev.clone();
    region.on_crash(move || hook.power_cut());
    region.crash_at_event(u64::from(at % 64));
    let ddev: Arc<dyn BlockDevice> = dev.clone();
    // Failing because of the cut is fine; succeeding is too (the cut came
    // later than recovery's last event).
    if let Ok((j, _)) = Journal::open(region.clone(), ddev, config(partitions)) {
        region.crash_now();
        drop(j);
    }
    region.crash_now();
    let seed = u64::from(at);
    Ok((region.crash_image(seed), Arc::new(dev.crash_copy(seed))))
}
