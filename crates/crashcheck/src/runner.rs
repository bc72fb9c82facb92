//! The seeded runner behind `tests/ci.rs`: a checker over a range of
//! seeds, counting crash states and naming the command that replays a
//! failure.

use std::time::Instant;

use crate::input::seeded_bytes;
use crate::CheckResult;

/// Bytes of input a seeded run gets (more than any checker reads).
pub const INPUT_LEN: usize = 512;

/// The seeds to run: `PTSD_FUZZ_SEED=<s>` runs exactly seed `s` (a replay);
/// otherwise `count` seeds from `PTSD_FUZZ_FIRST` (default 0), `count`
/// scaled by `PTSD_FUZZ_SCALE` (default 1; e.g. 10 for a longer soak).
pub fn seeds(count: u64) -> std::ops::Range<u64> {
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
    if let Some(s) = env("PTSD_FUZZ_SEED") {
        return s..s + 1;
    }
    let first = env("PTSD_FUZZ_FIRST").unwrap_or(0);
    first..first + count * env("PTSD_FUZZ_SCALE").unwrap_or(1)
}

/// Totals of one runner call.
#[derive(Debug, Clone, Copy, Default)]
pub struct Tally {
    /// Seeds run.
    pub runs: u64,
    /// Crash states recovered and checked.
    pub states: u64,
    /// Seconds taken.
    pub secs: f64,
}

/// Run `check` on the seeded input of every seed in `seeds`; print
/// `crash states checked: N, violations: 0` and return the tally, or panic
/// at the first violation with the command replaying it. `test` is the
/// `#[test]` function's name in `tests/ci.rs`.
pub fn run_seeds(
    target: &str,
    test: &str,
    seeds: std::ops::Range<u64>,
    check: impl Fn(&[u8]) -> CheckResult,
) -> Tally {
    let start = Instant::now();
    let mut t = Tally::default();
    for seed in seeds {
        let input = seeded_bytes(seed, INPUT_LEN);
        match check(&input) {
            Ok(n) => {
                t.runs += 1;
                t.states += n;
            }
            Err(v) => panic!(
                "{v}\nreplay: PTSD_FUZZ_SEED={seed} cargo test --release -p ptsd-crashcheck --test ci -- --exact {test} --nocapture"
            ),
        }
    }
    t.secs = start.elapsed().as_secs_f64();
    println!(
        "{target}: {} runs, crash states checked: {}, violations: 0 ({:.1} s, {:.0} states/s)",
        t.runs,
        t.states,
        t.secs,
        t.states as f64 / t.secs.max(1e-9)
    );
    t
}
