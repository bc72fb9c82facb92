//! Crash-consistency checkers for the ptsd stack.
//!
//! Each checker takes one byte string, decodes a workload and the crash
//! point(s) from it, runs it on crash-simulating media, recovers, and checks
//! the recovered state against a model. The same functions are the bodies
//! of the cargo-fuzz targets in `fuzz/` and of the seeded runner
//! (`tests/ci.rs`), which feeds them [`input::seeded_bytes`] so a failure is
//! replayed exactly from its seed.
//!
//! A checker returns how many crash states it checked (one crash state =
//! one post-crash image recovered and compared), or the first
//! [`Violation`].

pub mod assembly;
pub mod decode;
pub mod ftl_powercut;
pub mod input;
pub mod journal_crash;
pub mod model;
pub mod runner;
pub mod stack_crash;

use thiserror::Error;

/// A broken crash-consistency (or robustness) property.
#[derive(Debug, Error)]
#[error("{target}: {what}")]
pub struct Violation {
    /// Which checker found it.
    pub target: &'static str,
    /// What was wrong, with the details needed to understand it.
    pub what: String,
}

impl Violation {
    pub(crate) fn new(target: &'static str, what: impl Into<String>) -> Self {
        Self {
            target,
            what: what.into(),
        }
    }
}

/// What a checker returns: crash states checked, or the violation.
pub type CheckResult = Result<u64, Violation>;
