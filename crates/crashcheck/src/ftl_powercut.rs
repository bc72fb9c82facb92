//! `ftl_powercut`: requests on the emulated SSD whose persistent store is a
//! crash device, the power cut at an input-chosen device write, and several
//! post-cut images recovered from OOB and checked.
//!
//! The property: after recovery each logical page holds its value as of the
//! last completed flush, or a value written (or discarded: zeroes) after
//! it — every flushed write reads back — and the FTL's invariants hold.
//! With corruption faults armed instead of a cut, a read returns the value
//! last written or fails: never silently other data.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use ptsd_blockdev::{Corruption, CrashDevice, Fault};
use ptsd_ftl::{FtlConfig, Op, Payload, Request, SchedulerKind, SchemeConfig, Ssd};

use crate::input::Input;
use crate::{CheckResult, Violation};

const T: &str = "ftl_powercut";
const PAGE: usize = 512;
const LOGICAL: u64 = 160;
const MAX_STEPS: usize = 120;
/// Post-cut images drawn from each cut.
pub const IMAGES: u64 = 6;

fn cfg(pick: u32) -> FtlConfig {
    let p = |entry_dirty| SchemeConfig::Ptsd {
        clean_ratio: 0.5,
        entry_dirty,
        adaptive: false,
    };
    let (scheme, scheduler) = match pick % 4 {
        0 => (SchemeConfig::Page, SchedulerKind::Fifo),
        1 => (SchemeConfig::Dftl, SchedulerKind::Fifo),
        2 => (p(false), SchedulerKind::ReadPriority),
        _ => (p(true), SchedulerKind::ReadPriority),
    };
    FtlConfig {
        page_size: PAGE as u32,
        channels: 2,
        chips_per_channel: 1,
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

fn pattern(lpn: u64, version: u64) -> Vec<u8> {
    let mut v = vec![version as u8 | 1; PAGE];
    v[..8].copy_from_slice(&lpn.to_le_bytes());
    v[8..16].copy_from_slice(&version.to_le_bytes());
    v
}

/// Submit one request and wait for it; `None` if it failed (the cut).
fn run_one(ssd: &mut Ssd, now: &mut u64, req: Request, payload: Payload) -> Option<Payload> {
    ssd.submit(*now, req, payload).ok()?;
    let mut out = Vec::new();
    while out.is_empty() {
        let t = ssd.next_event()?;
        *now = (*now).max(t);
        ssd.advance(t, &mut out);
    }
    let d = out.pop()?;
    (!d.failed).then_some(d.payload)
}

fn read_page(ssd: &mut Ssd, now: &mut u64, lpn: u64) -> Option<Vec<u8>> {
    let req = Request {
        id: 0,
        op: Op::Read,
        lpn,
        pages: 1,
    };
    match run_one(ssd, now, req, Payload::Read(vec![0xEE; PAGE]))? {
        Payload::Read(b) => Some(b),
        _ => None,
    }
}

/// Run one input; see the module doc.
pub fn run(data: &[u8]) -> CheckResult {
    let mut inp = Input::new(data);
    let scheme = inp.below(4);
    let c = cfg(scheme);
    let corrupt = inp.below(8) == 0;
    let cut_at = 1 + u64::from(inp.below(400));
    let dev = Arc::new(
        CrashDevice::new(PAGE as u32, Ssd::image_blocks(&c, PAGE as u32)).expect("geometry"),
    );
    dev.set_torn_writes(inp.bool());
    let mut ssd = Ssd::open_on(c.clone(), Box::new(dev.clone()))
        .map_err(|e| Violation::new(T, format!("create: {}", ptsd_blockdev::ErrorChain(&e))))?;
    if corrupt {
        dev.inject(Fault::Corrupt {
            seed: u64::from(inp.u16()),
            probability: 0.05,
            kinds: Corruption::ALL.to_vec(),
        });
    } else {
        dev.inject(Fault::PowerCutAtWrite(cut_at));
    }
    let zero = vec![0u8; PAGE];
    let mut now_v: HashMap<u64, Vec<u8>> = HashMap::new();
    let mut flushed: HashMap<u64, Vec<u8>> = HashMap::new();
    let mut since: HashMap<u64, HashSet<Vec<u8>>> = HashMap::new();
    let (mut version, mut now) = (0u64, 0u64);
    let mut reads_checked = 0u64;
    for i in 0..MAX_STEPS {
        if inp.is_empty() || dev.is_offline() {
            break;
        }
        let lpn = u64::from(inp.below(LOGICAL as u32 - 3));
        let n = 1 + inp.below(3);
        let id = i as u64;
        match inp.below(16) {
            0..=9 => {
                let mut data = Vec::new();
                for p in lpn..lpn + u64::from(n) {
                    version += 1;
                    let v = pattern(p, version);
                    data.extend_from_slice(&v);
                    since.entry(p).or_default().insert(v.clone());
                    now_v.insert(p, v);
                }
                let req = Request {
                    id,
                    op: Op::Write,
                    lpn,
                    pages: n,
                };
                if run_one(&mut ssd, &mut now, req, Payload::Write(data)).is_none() {
                    break;
                }
            }
            10 | 11 => {
                for p in lpn..lpn + u64::from(n) {
                    since.entry(p).or_default().insert(zero.clone());
                    now_v.remove(&p);
                }
                let req = Request {
                    id,
                    op: Op::Discard,
                    lpn,
                    pages: n,
                };
                if run_one(&mut ssd, &mut now, req, Payload::None).is_none() {
                    break;
                }
            }
            12 if corrupt => {
                // A read must give the last value or fail, never other data.
                if let Some(got) = read_page(&mut ssd, &mut now, lpn) {
                    reads_checked += 1;
                    if got != *now_v.get(&lpn).unwrap_or(&zero) {
                        return Err(Violation::new(
                            T,
                            format!(
                                "corruption reached the reader: lpn {lpn} read back wrong data without an error (corruptions so far: {:?})",
                                dev.corruptions()
                            ),
                        ));
                    }
                } else {
                    break; // a detected corruption: the device reports a fault
                }
            }
            _ => {
                let req = Request {
                    id,
                    op: Op::Flush,
                    lpn: 0,
                    pages: 0,
                };
                if run_one(&mut ssd, &mut now, req, Payload::None).is_none() {
                    break;
                }
                flushed = now_v.clone();
                since.clear();
            }
        }
    }
    if corrupt {
        return Ok(reads_checked.min(1));
    }
    dev.power_cut();
    drop(ssd);
    let mut states = 0;
    for s in 0..IMAGES {
        let seed = cut_at.wrapping_mul(1000).wrapping_add(s);
        let d2 = Arc::new(dev.crash_copy(seed));
        let mut ssd = Ssd::open_on(c.clone(), Box::new(d2)).map_err(|e| {
            Violation::new(
                T,
                format!(
                    "image {s}: recovery failed: {}",
                    ptsd_blockdev::ErrorChain(&e)
                ),
            )
        })?;
        ssd.check_invariants()
            .map_err(|e| Violation::new(T, format!("image {s}: invariants after recovery: {e}")))?;
        let mut now = 0;
        for lpn in 0..LOGICAL {
            let g = read_page(&mut ssd, &mut now, lpn).ok_or_else(|| {
                Violation::new(
                    T,
                    format!("image {s}: read of lpn {lpn} failed after recovery"),
                )
            })?;
            let before = flushed.get(&lpn).unwrap_or(&zero);
            if g != *before && !since.get(&lpn).is_some_and(|v| v.contains(&g)) {
                let ver = u64::from_le_bytes(g[8..16].try_into().unwrap());
                return Err(Violation::new(
                    T,
                    format!(
                        "scheme {scheme}, image {s} (cut at device write {cut_at}): lpn {lpn} holds version {ver} (first bytes {:?}), neither its flushed value nor one written since", &g[..24]
                    ),
                ));
            }
        }
        states += 1;
    }
    Ok(states)
}
