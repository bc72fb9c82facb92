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

/// An error and its causes on one line, `a: b: c` (anyhow's `{:#}`). Every
/// error type of the crates shows its cause either in its own message or
/// as its `source()`, never both, so each cause is printed once.
pub fn error_line(e: &anyhow::Error) -> String {
    format!("{e:#}")
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

    /// Errors that cross every layer print each cause once: a too-small
    /// SSD image (stack, FTL, its page store, the image) and a missing
    /// directory (stack, block device, the OS).
    #[test]
    fn error_line_prints_each_cause_once() {
        let tmp = tempfile::tempdir().unwrap();
        let img = tmp.path().join("ssd.img");
        std::fs::write(&img, vec![1u8; 4096]).unwrap();
        let mut cfg = ptsd_stack::small_ssd_config(16 << 20);
        cfg.store = ptsd_ftl::StoreKind::File { path: img };
        let too_small =
            ptsd_stack::claim_ssd(cfg, ptsd_stack::Holder::Ublk, std::time::Duration::ZERO)
                .err()
                .unwrap();
        let missing = ptsd_stack::mkfs(
            &ptsd_stack::DeviceSpec::Path(tmp.path().join("no/such/dir/fs.img")),
            Some(1 << 20),
            std::time::Duration::ZERO,
        )
        .unwrap_err();
        for (e, want) in [
            (too_small.into(), "small"),
            (missing.into(), "No such file"),
        ] {
            let line = error_line(&e);
            assert!(line.contains(want), "{line}");
            let parts: Vec<&str> = line.split(": ").collect();
            for (i, p) in parts.iter().enumerate() {
                assert!(!parts[i + 1..].contains(p), "{p:?} twice in {line}");
            }
            assert_eq!(
                parts.len(),
                e.chain().count(),
                "one segment per error in the chain: {line}"
            );
        }
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
