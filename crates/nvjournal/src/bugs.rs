//! Deliberately injected bugs, compiled in only with `--cfg ptsd_bugs`
//! (never in a normal build) and chosen at run time by `PTSD_BUG=<name>`.
//! They exist so the crash checkers (`ptsd-crashcheck`'s `tests/bugs.rs`)
//! can show that they catch the kind of bug they are for.

/// Whether the injected bug `name` is on.
#[cfg(ptsd_bugs)]
pub(crate) fn active(name: &str) -> bool {
    std::env::var("PTSD_BUG").is_ok_and(|v| v == name)
}

/// Without `--cfg ptsd_bugs` no bug is ever on.
#[cfg(not(ptsd_bugs))]
#[inline(always)]
pub(crate) fn active(_: &str) -> bool {
    false
}
