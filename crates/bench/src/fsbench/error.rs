use std::io;
use std::path::PathBuf;

use thiserror::Error;

/// What can go wrong while setting up a target or running a workload.
#[derive(Debug, Error)]
pub enum FsBenchError {
    /// A file-system call failed.
    #[error("{op} {}", .path.display())]
    Io {
        /// The call, e.g. `create` or `fsync`.
        op: &'static str,
        /// The path it was made on.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: io::Error,
    },
    /// The data read back, or the set of files found, is not what the
    /// workload wrote.
    #[error("verification failed on {}: {detail}", .path.display())]
    Verify {
        /// The file or directory that did not match.
        path: PathBuf,
        /// What differed.
        detail: String,
    },
    /// An external command (`losetup`, `mkfs.ext4`, `mount`, `ptsd mount`…)
    /// failed or could not be started.
    #[error("`{command}` failed: {detail}")]
    Command {
        /// The command line.
        command: String,
        /// Exit status and stderr, or the spawn error.
        detail: String,
    },
    /// A mount did not appear (or the daemon exited) in time.
    #[error("mount at {} not ready: {detail}", .path.display())]
    Mount {
        /// The mount point.
        path: PathBuf,
        /// Why.
        detail: String,
    },
    /// A target of a suite run failed (setup, a workload or teardown); the
    /// report has the others' figures.
    #[error("target {target}: {detail}")]
    TargetFailed {
        /// The target's row label.
        target: String,
        /// The first error it met.
        detail: String,
    },
    /// A configuration that cannot run (zero threads, no files…).
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A worker thread panicked (a bug in the runner, never expected).
    #[error("a workload thread panicked")]
    ThreadPanicked,
}

/// Result alias for this module.
pub type Result<T> = std::result::Result<T, FsBenchError>;

/// Builds a closure that wraps an `io::Error` with the call and the path.
pub(crate) fn io_err(
    op: &'static str,
    path: impl Into<PathBuf>,
) -> impl FnOnce(io::Error) -> FsBenchError {
    let path = path.into();
    move |source| FsBenchError::Io { op, path, source }
}
