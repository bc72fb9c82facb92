//! ACE-style exhaustive set (CrashMonkey/ACE, OSDI'18), bounded: every
//! one-operation workload of the grammar with small fixed arguments, on a
//! prepared tree, each followed by a file fsync or a sync, crashed at each
//! of the first region events from the operation's start (a crash past its
//! last event falls at the end), four post-crash images each.

use ptsd_crashcheck::model::{Op, SyncKind};
use ptsd_crashcheck::stack_crash::run_fixed;

fn s(x: &str) -> String {
    x.to_string()
}

#[test]
fn every_one_op_workload_at_every_crash_point() {
    let setup = vec![
        Op::Mkdir(s("d0")),
        Op::Mkdir(s("d1")),
        Op::Create(s("a")),
        Op::Write(s("a"), 0, 6000, 1),
        Op::SetXattr(s("a"), 0, 3),
        Op::Create(s("d0/b")),
        Op::Sync,
    ];
    let ops = vec![
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
    ];
    let first = setup.len();
    let (mut runs, mut states) = (0u64, 0u64);
    for op in &ops {
        let target = match op {
            Op::Rename(_, d) | Op::Link(_, d) => d.clone(),
            Op::Rmdir(_) | Op::Unlink(_) => String::new(),
            Op::Create(p) | Op::Mkdir(p) | Op::Symlink(p, _) => p.clone(),
            Op::Write(p, ..) | Op::Append(p, ..) | Op::Truncate(p, _) => p.clone(),
            Op::Falloc(p, ..) | Op::Punch(p, ..) => p.clone(),
            Op::SetXattr(p, ..) | Op::RemoveXattr(p, _) => p.clone(),
            _ => String::new(),
        };
        let target = if target.starts_with("d1/") || matches!(op, Op::Symlink(..)) {
            String::new()
        } else {
            target
        };
        for sync in [Op::Fsync(target.clone(), SyncKind::Fsync), Op::Sync] {
            let mut w = setup.clone();
            w.push(op.clone());
            w.push(sync);
            // No crash: every step checked live.
            run_fixed(&w, None, 0).unwrap_or_else(|v| panic!("{op:?} without a crash: {v}"));
            for event in 0..16u64 {
                let n = run_fixed(&w, Some((first, event)), event as u16)
                    .unwrap_or_else(|v| panic!("{op:?} crashed at event {event}: {v}"));
                runs += 1;
                states += n;
            }
        }
    }
    println!("ace (1 op x 2 syncs x 16 crash points): {runs} runs, crash states checked: {states}, violations: 0");
    assert!(states >= runs * 4);
}
