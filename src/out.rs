//! Printing that never panics. `println!` panics when stdout is gone
//! (`ptsd mount ... | head -0`: "failed printing to stdout: Broken pipe"),
//! and a mount daemon that inherited the pipe would die at its next message.
//! A message that cannot be written is lost; the command's work goes on.
//! Every message of the binary goes through these macros (a test below
//! keeps `print!`-family macros out of `src/`).

use std::fmt;
use std::io::Write;

/// Write `args` (and a newline if `newline`) to `w`, ignoring any error.
pub fn write_ignoring_errors(mut w: impl Write, args: fmt::Arguments<'_>, newline: bool) {
    let _ = w.write_fmt(args);
    if newline {
        let _ = w.write_all(b"\n");
    }
    let _ = w.flush();
}

/// An error and its causes on one line, `a: b: c`, each cause once. Many
/// of the crates' error types put their cause's text in their own message
/// and also return it as `source()`, so anyhow's `{:#}` would print it
/// again at every level ("opening X: store: image: too small: store:
/// image: too small: ..."); a cause whose text the line already holds adds
/// nothing and is left out.
pub fn error_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if text.is_empty() || line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

/// `println!` that never panics.
macro_rules! outln {
    () => { $crate::out::write_ignoring_errors(::std::io::stdout().lock(), format_args!(""), true) };
    ($($t:tt)*) => { $crate::out::write_ignoring_errors(::std::io::stdout().lock(), format_args!($($t)*), true) };
}

/// `eprintln!` that never panics.
macro_rules! eoutln {
    ($($t:tt)*) => { $crate::out::write_ignoring_errors(::std::io::stderr().lock(), format_args!($($t)*), true) };
}

/// `eprint!` that never panics.
macro_rules! eout {
    ($($t:tt)*) => { $crate::out::write_ignoring_errors(::std::io::stderr().lock(), format_args!($($t)*), false) };
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::error_line;

    #[derive(Debug, thiserror::Error)]
    #[error("image: {0}")]
    struct Shows(#[from] std::io::Error);

    #[derive(Debug, thiserror::Error)]
    #[error("store")]
    struct Hides(#[source] std::io::Error);

    /// A cause already in its parent's text is not printed again; a cause
    /// its parent does not show is.
    #[test]
    fn error_line_prints_each_cause_once() {
        let io = || std::io::Error::other("device too small");
        let shown = anyhow::Error::new(Shows(io())).context("opening d.img");
        assert_eq!(error_line(&shown), "opening d.img: image: device too small");
        let hidden = anyhow::Error::new(Hides(io())).context("opening d.img");
        assert_eq!(
            error_line(&hidden),
            "opening d.img: store: device too small"
        );
    }

    /// No source file of the binary uses the panicking print macros.
    #[test]
    fn no_panicking_print_macros_in_the_binary() {
        fn walk(dir: &Path, bad: &mut Vec<String>) {
            for e in std::fs::read_dir(dir).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    walk(&p, bad);
                } else if p.extension().is_some_and(|x| x == "rs") {
                    let text = std::fs::read_to_string(&p).unwrap();
                    for (i, line) in text.lines().enumerate() {
                        let code = line.split("//").next().unwrap_or("");
                        // Built from pieces so this file does not match itself.
                        let banned = ["print", "ln!(", "print", "!("];
                        let ln = format!("{}{}", banned[0], banned[1]);
                        let plain = format!("{}{}", banned[2], banned[3]);
                        if code.contains(&ln) || code.contains(&plain) {
                            bad.push(format!("{}:{}: {}", p.display(), i + 1, line.trim()));
                        }
                    }
                }
            }
        }
        let mut bad = Vec::new();
        walk(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut bad);
        assert!(
            bad.is_empty(),
            "use outln!/out!/eoutln!/eout! (src/out.rs), which cannot panic:\n{}",
            bad.join("\n")
        );
    }
}
