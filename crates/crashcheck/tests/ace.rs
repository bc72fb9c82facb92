//! ACE-style exhaustive sets (CrashMonkey/ACE, OSDI'18), bounded: every
//! workload of one and of two operations from the grammar with small fixed
//! arguments, on a prepared tree, followed by a file fsync or a sync,
//! crashed at every region event (journal persistence point) of the
//! workload after its setup, four post-crash images each, on the whole
//! stack `Stack::open` assembles; each workload also runs without a crash
//! (every step checked live) with four cuts drawn between its operations.
//! Both sets run in CI (the two-operation one: 302 pairs, about 10 500
//! crash runs, 2.5 min of a loaded machine in the debug build).

use std::time::Instant;

use ptsd_crashcheck::assembly::{Under, UNDER};
use ptsd_crashcheck::model::{Model, Op, SyncKind};
use ptsd_crashcheck::stack_crash::{events_per_op, run_fixed};

fn s(x: &str) -> String {
    x.to_string()
}

/// The tree every workload starts from (synced).
fn setup() -> Vec<Op> {
    vec![
        Op::Mkdir(s("d0")),
        Op::Mkdir(s("d1")),
        Op::Create(s("a")),
        Op::Write(s("a"), 0, 6000, 1),
        Op::SetXattr(s("a"), 0, 3),
        Op::Create(s("d0/b")),
        Op::Sync,
    ]
}

/// The operation set: each kind of the grammar with small arguments.
fn ops() -> Vec<Op> {
    vec![
        Op::Create(s("c")),
        Op::Mkdir(s("d0/c")),
        Op::Write(s("a"), 0, 5000, 7),
        Op::Write(s("a"), 12_000, 100, 8),
        Op::Append(s("a"), 3000, 9),
        Op::Truncate(s("a"), 0),
        Op::Truncate(s("a"), 20_000),
        Op::Falloc(s("a"), 8192, 16_384, false),
        Op::Falloc(s("a"), 8192, 16_384, true),
        Op::Punch(s("a"), 0, 4096),
        Op::Link(s("a"), s("d0/c")),
        Op::Unlink(s("a")),
        Op::Rmdir(s("d1")),
        Op::Rename(s("a"), s("c")),
        Op::Rename(s("a"), s("d0/b")),
        Op::Rename(s("d0"), s("d1")),
        Op::Symlink(s("d1/s"), s("t0")),
        Op::SetXattr(s("a"), 1, 5),
        Op::RemoveXattr(s("a"), 0),
    ]
}

/// What an fsync after `op` names: the file or directory it changed, if
/// that still exists; else the root.
fn target(op: &Op) -> String {
    let t = match op {
        Op::Rename(_, d) | Op::Link(_, d) => d.clone(),
        Op::Create(p) | Op::Mkdir(p) => p.clone(),
        Op::Write(p, ..) | Op::Append(p, ..) | Op::Truncate(p, _) => p.clone(),
        Op::Falloc(p, ..) | Op::Punch(p, ..) => p.clone(),
        Op::SetXattr(p, ..) | Op::RemoveXattr(p, _) => p.clone(),
        _ => String::new(),
    };
    if t.starts_with("d1/") {
        String::new()
    } else {
        t
    }
}

/// Whether every operation of `w` is valid in turn.
fn valid(w: &[Op]) -> bool {
    let mut m = Model::default();
    w.iter().all(|op| m.apply(op))
}

/// Run `w` without a crash (every step checked live, 4 cuts drawn between
/// operations), then crashed at every `stride`-th region event of each
/// operation from `from` on (the workload's persistence points after its
/// setup). Returns (runs, crash states).
fn exhaust(w: &[Op], from: usize, stride: u64, ftl: Under) -> (u64, u64) {
    let mut states =
        run_fixed(w, None, 0, ftl, 4).unwrap_or_else(|v| panic!("{w:?} without a crash: {v}"));
    let mut runs = 1;
    let events = events_per_op(w, ftl).unwrap_or_else(|e| panic!("{w:?}: {e}"));
    for (op, &n) in events.iter().enumerate().skip(from) {
        for event in (0..n).step_by(stride as usize) {
            let second = (op as u64 * 64 + event) as u16;
            states += run_fixed(w, Some((op, event)), second, ftl, 0)
                .unwrap_or_else(|v| panic!("{w:?} crashed at event {event} of op {op}: {v}"));
            runs += 1;
        }
    }
    (runs, states)
}

#[test]
fn every_one_op_workload_at_every_crash_point() {
    let first = setup().len();
    let (mut runs, mut states) = (0u64, 0u64);
    let start = Instant::now();
    for (i, op) in ops().iter().enumerate() {
        for sync in [Op::Fsync(target(op), SyncKind::Fsync), Op::Sync] {
            let mut w = setup();
            w.push(op.clone());
            w.push(sync);
            // What is under the file system rotates: the SSD with each FTL,
            // a plain device.
            let ftl = UNDER[i % UNDER.len()];
            let (r, s) = exhaust(&w, first, 1, ftl);
            runs += r;
            states += s;
        }
    }
    println!(
        "ace (1 op x 2 syncs x every crash point): {runs} runs, crash states checked: {states}, violations: 0 ({:.1} s)",
        start.elapsed().as_secs_f64()
    );
    assert!(states >= runs * 4);
}

/// Every ordered pair of operations (the second valid after the first),
/// then an fsync of what the second changed (or a sync, alternating over
/// the pairs), crashed at every `stride`-th region event of each operation.
fn pairs(stride: u64) -> (u64, u64, u64) {
    let first = setup().len();
    let (mut runs, mut states, mut skipped) = (0u64, 0u64, 0u64);
    let set = ops();
    for (i, a) in set.iter().enumerate() {
        for (j, b) in set.iter().enumerate() {
            let mut w = setup();
            w.push(a.clone());
            w.push(b.clone());
            if !valid(&w) {
                skipped += 1;
                continue;
            }
            let k = i * set.len() + j;
            w.push(if k % 2 == 0 {
                Op::Fsync(target(b), SyncKind::Fsync)
            } else {
                Op::Sync
            });
            let ftl = UNDER[k % UNDER.len()];
            let (r, s) = exhaust(&w, first, stride, ftl);
            runs += r;
            states += s;
        }
    }
    (runs, states, skipped)
}

#[test]
fn every_two_op_workload_at_every_crash_point() {
    let start = Instant::now();
    let (runs, states, skipped) = pairs(1);
    println!(
        "ace (2 ops x every crash point, {skipped} invalid pairs skipped): {runs} runs, crash states checked: {states}, violations: 0 ({:.1} s)",
        start.elapsed().as_secs_f64()
    );
    assert!(states >= runs * 3);
}
