//! The seeded crash-consistency runner CI executes: each fuzz target's body
//! over a range of seeds. Every failure prints the one command replaying it.
//! `PTSD_FUZZ_SCALE=10` runs ten times the seeds.

use ptsd_crashcheck::runner::{run_seeds, seeds};
use ptsd_crashcheck::{ftl_powercut, journal_crash};

#[test]
fn journal_crash_seeds() {
    let t = run_seeds(
        "journal_crash",
        "journal_crash_seeds",
        seeds(15_000),
        journal_crash::run,
    );
    assert!(t.states >= t.runs, "{t:?}");
}

#[test]
fn ftl_powercut_seeds() {
    // Every scheme: page, DFTL, and PTSD with page- and entry-granular
    // dirty state.
    let t = run_seeds(
        "ftl_powercut",
        "ftl_powercut_seeds",
        seeds(6_000),
        ftl_powercut::run,
    );
    assert!(t.states >= t.runs, "{t:?}");
}

#[test]
fn stack_crash_seeds() {
    let t = run_seeds(
        "stack_crash",
        "stack_crash_seeds",
        seeds(1_000),
        ptsd_crashcheck::stack_crash::run,
    );
    assert!(t.states >= t.runs, "{t:?}");
}

#[test]
fn decode_seeds() {
    let t = run_seeds(
        "decode",
        "decode_seeds",
        seeds(5_000),
        ptsd_crashcheck::decode::run,
    );
    assert_eq!(t.states, t.runs, "{t:?}");
}
