//! The one size syntax of every ptsd command line and config file.
//!
//! A size is a number with an optional unit, case-insensitive, spaces
//! allowed between them:
//!
//! | written                              | bytes               |
//! |--------------------------------------|---------------------|
//! | `4096`, `4096B`                      | 4096                |
//! | `4K`, `4KiB`                         | 4 · 2¹⁰             |
//! | `4M`, `4MiB`; `4G`, `4GiB`; `1T`, `1TiB`; `1P`, `1PiB` | powers of 1024 |
//! | `4KB`, `4MB`, `4GB`, `1TB`, `1PB`    | powers of 1000 (as `dd`, `fio` and `truncate` read them) |
//!
//! A fraction is allowed when it comes to whole bytes (`1.5G`, `0.5KiB`,
//! not `0.1K`). Everything else is one error, [`SizeError`], whose message
//! restates the rule.
//!
//! ```
//! use ptsd_blockdev::size::{parse_size, ByteSize};
//!
//! assert_eq!(parse_size("4GiB").unwrap(), 4 << 30);
//! assert_eq!(parse_size("4G").unwrap(), 4 << 30);
//! assert_eq!(parse_size("4GB").unwrap(), 4_000_000_000);
//! let s: ByteSize = "256M".parse().unwrap();
//! assert_eq!((s.bytes(), s.to_string()), (256 << 20, "256MiB".to_string()));
//! assert!(parse_size("12 parsecs").is_err());
//! ```
//!
//! With clap: `#[arg(long, value_parser = ptsd_blockdev::size::parse_size)]`.

use std::fmt;
use std::str::FromStr;

/// What the size syntax is, for help texts and error messages.
pub const SIZE_SYNTAX: &str =
    "a byte count with an optional unit: K/KiB, M/MiB, G/GiB, T/TiB, P/PiB are powers of 1024; \
     KB, MB, GB, TB, PB are powers of 1000 (e.g. 4096, 64K, 4GiB, 2GB, 1.5G)";

/// A size that does not follow the syntax, or does not fit in 64 bits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid size {input:?}: {reason}; expected {SIZE_SYNTAX}")]
pub struct SizeError {
    input: String,
    reason: &'static str,
}

impl SizeError {
    fn new(input: &str, reason: &'static str) -> Self {
        SizeError {
            input: input.to_string(),
            reason,
        }
    }
}

/// The multiplier of a unit (already lower-cased), or `None`.
fn unit_multiplier(unit: &str) -> Option<u64> {
    Some(match unit {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "p" | "pib" => 1 << 50,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        "pb" => 1_000_000_000_000_000,
        _ => return None,
    })
}

/// Parse a size in the syntax of this module (see [`SIZE_SYNTAX`]) into
/// bytes. Usable directly as a clap `value_parser`.
pub fn parse_size(input: &str) -> Result<u64, SizeError> {
    let s = input.trim();
    let num_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(num_end);
    let mult = unit_multiplier(&unit.trim().to_ascii_lowercase())
        .ok_or_else(|| SizeError::new(input, "unknown unit"))?;
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    if int.is_empty() && frac.is_empty() {
        return Err(SizeError::new(input, "no number"));
    }
    if frac.contains('.') {
        return Err(SizeError::new(input, "not a number"));
    }
    let too_large = || SizeError::new(input, "too large");
    // Exact arithmetic in u128: the integer part and the fraction's digits
    // (at most 38 of them fit) scaled by the unit.
    if frac.len() > 30 || int.len() > 30 {
        return Err(too_large());
    }
    let int: u128 = if int.is_empty() {
        0
    } else {
        int.parse().map_err(|_| too_large())?
    };
    let mut bytes = int.checked_mul(u128::from(mult)).ok_or_else(too_large)?;
    if !frac.is_empty() {
        let digits: u128 = frac.parse().map_err(|_| too_large())?;
        let scale = 10u128.pow(frac.len() as u32);
        let scaled = digits * u128::from(mult);
        if scaled % scale != 0 {
            return Err(SizeError::new(input, "not a whole number of bytes"));
        }
        bytes += scaled / scale;
    }
    u64::try_from(bytes).map_err(|_| too_large())
}

/// A size in bytes that parses from and prints as the size syntax, for
/// config files and structured options.
///
/// `Display` prints the largest binary unit that divides it exactly
/// (`4GiB`, `1536KiB`, `1000`), which parses back to the same value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ByteSize(pub u64);

impl ByteSize {
    /// The size in bytes.
    pub fn bytes(self) -> u64 {
        self.0
    }
}

impl FromStr for ByteSize {
    type Err = SizeError;

    fn from_str(s: &str) -> Result<Self, SizeError> {
        parse_size(s).map(ByteSize)
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(&str, u32); 5] = [
            ("PiB", 50),
            ("TiB", 40),
            ("GiB", 30),
            ("MiB", 20),
            ("KiB", 10),
        ];
        let n = self.0;
        for (name, shift) in UNITS {
            if n != 0 && n.trailing_zeros() >= shift {
                return write!(f, "{}{name}", n >> shift);
            }
        }
        write!(f, "{n}")
    }
}

impl From<ByteSize> for u64 {
    fn from(s: ByteSize) -> u64 {
        s.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_size_table() {
        let table: &[(&str, u64)] = &[
            ("0", 0),
            ("4096", 4096),
            ("4096B", 4096),
            ("4096 b", 4096),
            ("4K", 4 << 10),
            ("4k", 4 << 10),
            ("4KiB", 4 << 10),
            ("4kib", 4 << 10),
            ("4M", 4 << 20),
            ("4MiB", 4 << 20),
            ("4G", 4 << 30),
            ("4GiB", 4 << 30),
            (" 4 GiB ", 4 << 30),
            ("1T", 1 << 40),
            ("1TiB", 1 << 40),
            ("1PiB", 1 << 50),
            ("4KB", 4_000),
            ("4kB", 4_000),
            ("4MB", 4_000_000),
            ("4GB", 4_000_000_000),
            ("1TB", 1_000_000_000_000),
            ("1.5G", 3 << 29),
            ("0.5KiB", 512),
            (".5K", 512),
            ("2.", 2),
            ("1.5KB", 1500),
        ];
        for &(s, want) in table {
            assert_eq!(parse_size(s), Ok(want), "{s:?}");
        }
    }

    #[test]
    fn bad_sizes_get_one_clear_message() {
        for (s, reason) in [
            ("", "no number"),
            ("GiB", "no number"),
            (".", "no number"),
            ("12 parsecs", "unknown unit"),
            ("4GiBs", "unknown unit"),
            ("4 G i B", "unknown unit"),
            ("-4K", "unknown unit"),
            ("1.2.3K", "not a number"),
            ("0.1K", "not a whole number of bytes"),
            ("1.0000001", "not a whole number of bytes"),
            ("16EiB", "unknown unit"),
            ("16384P", "too large"),
            ("18446744073709551616", "too large"),
            ("99999999999999999999999999999999999", "too large"),
        ] {
            let e = parse_size(s).unwrap_err();
            assert_eq!(e.reason, reason, "{s:?}");
            let msg = e.to_string();
            assert!(
                msg.starts_with(&format!("invalid size {s:?}: {reason}; expected")),
                "{msg}"
            );
            assert!(
                msg.contains("powers of 1024") && msg.contains("powers of 1000"),
                "{msg}"
            );
        }
        assert_eq!(parse_size("18446744073709551615"), Ok(u64::MAX));
    }

    #[test]
    fn display_parses_back() {
        for n in [0, 1, 1000, 4096, 1536, 4 << 30, 3 << 29, u64::MAX, 1 << 50] {
            let shown = ByteSize(n).to_string();
            assert_eq!(shown.parse::<ByteSize>(), Ok(ByteSize(n)), "{shown}");
        }
        assert_eq!(ByteSize(4 << 30).to_string(), "4GiB");
        assert_eq!(ByteSize(3 << 29).to_string(), "1536MiB");
        assert_eq!(ByteSize(1536).to_string(), "1536");
    }
}
