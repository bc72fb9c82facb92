//! The `ptsd bench …` commands: their options (clap) and their runs. The
//! binary only parses the command line and calls one of these.
//!
//! - [`fs`]: `ptsd bench fs`, the file-system workloads on ptsd mounts, the
//!   kernel anchors and the no-op FUSE ceiling ([`crate::fsbench`]);
//! - [`journal`]: `ptsd bench journal`, the NVM journal against its
//!   lock-based baselines;
//! - `blk`: `ptsd bench blk`, a block load generator on tokio-uring (not on
//!   musl, where tokio-uring does not build);
//! - [`dir`]: `ptsd bench dir`, one directory grown to a million entries.
//!
//! ```
//! use clap::Parser;
//! use ptsd_bench::cmd::dir::{self, DirArgs};
//!
//! #[derive(Parser)]
//! struct Cli {
//!     #[command(flatten)]
//!     dir: DirArgs,
//! }
//! let cli = Cli::try_parse_from(["dir", "--entries", "0"]).unwrap();
//! let err = dir::run(cli.dir).unwrap_err();
//! assert!(err.to_string().contains("must be positive"), "{err}");
//! ```

#[macro_use]
pub(crate) mod out;

#[cfg(not(target_env = "musl"))]
pub mod blk;
#[cfg(not(target_env = "musl"))]
mod blkbuf;
pub mod dir;
pub mod fs;
pub mod journal;

use thiserror::Error;

/// Why a `ptsd bench` command failed. Each variant says what was being done
/// and returns the cause, if any, as its `source()`.
#[derive(Debug, Error)]
pub enum BenchCmdError {
    /// An option, or a combination of options, that cannot run.
    #[error("{0}")]
    Invalid(String),
    /// A file or OS operation failed.
    #[error("{what}")]
    Io {
        /// What was being done.
        what: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// Assembling, formatting or closing a ptsd stack failed.
    #[error("{what}")]
    Stack {
        /// What was being done.
        what: String,
        /// The stack's error.
        #[source]
        source: ptsd_stack::StackError,
    },
    /// A file system operation failed.
    #[error("{what}")]
    Fs {
        /// What was being done.
        what: String,
        /// The errno the operation returned.
        #[source]
        source: ptsd_fs::Errno,
    },
    /// The journal failed.
    #[error("{what}")]
    Journal {
        /// What was being done.
        what: String,
        /// The journal's error.
        #[source]
        source: ptsd_nvjournal::JournalError,
    },
    /// The journal's region could not be mapped.
    #[error("{what}")]
    Region {
        /// What was being done.
        what: String,
        /// The region's error.
        #[source]
        source: ptsd_nvjournal::RegionError,
    },
    /// A block device failed.
    #[error("{what}")]
    Block {
        /// What was being done.
        what: String,
        /// The device's error.
        #[source]
        source: ptsd_blockdev::BlockError,
    },
    /// The file-system benchmark failed.
    #[error("file-system benchmark")]
    FsBench(#[source] crate::fsbench::FsBenchError),
    /// A plot could not be drawn.
    #[error("drawing the plot")]
    Plot(#[source] crate::plot::PlotError),
    /// Latency histograms could not be merged.
    #[error("merging latency histograms")]
    Histogram(#[source] hdrhistogram::AdditionError),
    /// The report could not be written as JSON.
    #[error("writing the JSON report")]
    Json(#[source] serde_json::Error),
    /// The run itself went wrong (a short read, a thread that panicked).
    #[error("{0}")]
    Failed(String),
}

/// Result of a `ptsd bench` command.
pub type Result<T, E = BenchCmdError> = std::result::Result<T, E>;

/// Wraps an error of one of the layers with what was being done.
pub(crate) trait Doing<T> {
    /// `Err(e)` becomes the [`BenchCmdError`] variant of `e`'s layer, saying `what`.
    fn doing(self, what: impl FnOnce() -> String) -> Result<T>;
}

macro_rules! doing_for {
    ($err:ty, $variant:ident) => {
        impl<T> Doing<T> for std::result::Result<T, $err> {
            fn doing(self, what: impl FnOnce() -> String) -> Result<T> {
                self.map_err(|source| BenchCmdError::$variant {
                    what: what(),
                    source,
                })
            }
        }
    };
}

doing_for!(std::io::Error, Io);
doing_for!(ptsd_stack::StackError, Stack);
doing_for!(ptsd_fs::Errno, Fs);
doing_for!(ptsd_nvjournal::JournalError, Journal);
doing_for!(ptsd_nvjournal::RegionError, Region);
doing_for!(ptsd_blockdev::BlockError, Block);

/// `Err(BenchCmdError::Invalid(..))` with a formatted message.
macro_rules! invalid {
    ($($t:tt)*) => {
        return Err($crate::cmd::BenchCmdError::Invalid(format!($($t)*)))
    };
}
pub(crate) use invalid;
