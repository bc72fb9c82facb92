//! Printing that never panics (as the binary's): `println!` panics when
//! stdout is gone (`ptsd bench fs | head -1`); a message that cannot be
//! written is lost and the benchmark goes on.

use std::fmt;
use std::io::Write;

/// Write `args` (and a newline if `newline`) to `w`, ignoring any error.
pub(crate) fn write_ignoring_errors(mut w: impl Write, args: fmt::Arguments<'_>, newline: bool) {
    let _ = w.write_fmt(args);
    if newline {
        let _ = w.write_all(b"\n");
    }
    let _ = w.flush();
}

/// `println!` that never panics.
macro_rules! outln {
    () => { $crate::cmd::out::write_ignoring_errors(::std::io::stdout().lock(), format_args!(""), true) };
    ($($t:tt)*) => { $crate::cmd::out::write_ignoring_errors(::std::io::stdout().lock(), format_args!($($t)*), true) };
}

/// `print!` that never panics.
macro_rules! out {
    ($($t:tt)*) => { $crate::cmd::out::write_ignoring_errors(::std::io::stdout().lock(), format_args!($($t)*), false) };
}

/// `eprintln!` that never panics.
macro_rules! eoutln {
    ($($t:tt)*) => { $crate::cmd::out::write_ignoring_errors(::std::io::stderr().lock(), format_args!($($t)*), true) };
}

/// `eprint!` that never panics.
macro_rules! eout {
    ($($t:tt)*) => { $crate::cmd::out::write_ignoring_errors(::std::io::stderr().lock(), format_args!($($t)*), false) };
}
