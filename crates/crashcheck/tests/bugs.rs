//! The checkers can fail: with a deliberately injected bug turned on, the
//! seeded runner must find a violation within its CI budget of seeds.
//!
//! Only in a build with `--cfg ptsd_bugs` (a separate target directory, as
//! `scripts/test` does it):
//! `RUSTFLAGS="--cfg ptsd_bugs" CARGO_TARGET_DIR=target/bugs cargo test -p ptsd-crashcheck --test bugs -- --nocapture`
#![cfg(ptsd_bugs)]

use std::time::Instant;

use ptsd_crashcheck::input::seeded_bytes;
use ptsd_crashcheck::runner::INPUT_LEN;
use ptsd_crashcheck::{journal_crash, stack_crash, CheckResult};

/// Run `check` over seeds until a violation; return (seed, seconds).
fn hunt(bug: &str, target: &str, max_seeds: u64, check: fn(&[u8]) -> CheckResult) -> (u64, f64) {
    // One test function turns the bugs on one after the other: the switch
    // is process-wide.
    std::env::set_var("PTSD_BUG", bug);
    let start = Instant::now();
    for seed in 0..max_seeds {
        if let Err(v) = check(&seeded_bytes(seed, INPUT_LEN)) {
            let secs = start.elapsed().as_secs_f64();
            let first = v.to_string();
            let first = first.lines().next().unwrap_or_default();
            println!(
                "bug {bug}: {target} caught it at seed {seed} ({} runs, {secs:.1} s): {first}",
                seed + 1
            );
            std::env::remove_var("PTSD_BUG");
            return (seed, secs);
        }
    }
    std::env::remove_var("PTSD_BUG");
    panic!("bug {bug}: {target} found nothing in {max_seeds} seeds");
}

#[test]
fn every_injected_bug_is_caught() {
    // Sanity: with no bug on, the same seeds pass (else a catch proves nothing).
    for seed in 0..20 {
        journal_crash::run(&seeded_bytes(seed, INPUT_LEN)).unwrap();
    }
    hunt("commit_no_flush", "journal_crash", 400, journal_crash::run);
    hunt("commit_no_flush", "stack_crash", 400, stack_crash::run);
    hunt(
        "ckpt_free_before_flush",
        "journal_crash",
        400,
        journal_crash::run,
    );
    hunt(
        "ckpt_free_before_flush",
        "stack_crash",
        400,
        stack_crash::run,
    );
    hunt("rename_split", "stack_crash", 2000, stack_crash::run);
}
