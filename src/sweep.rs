//! `ptsd sim --sweep` and `ptsd sim merge` print through here; running and
//! merging a sweep are `ptsd_bench::sweep` (`run_shard`, `merge_command`).

use anyhow::{Context, Result};

/// stdout may be a closed pipe: that is an error to report, not a panic.
pub fn print_line(text: &str) -> Result<()> {
    use std::io::Write as _;
    writeln!(std::io::stdout().lock(), "{text}").context("writing to stdout")
}
