use thiserror::Error;

/// What can go wrong with a block request.
#[derive(Debug, Error)]
pub enum BlockError {
    /// The extent `[block, block + count)` is not on the device.
    #[error("blocks {block}..{} out of range (device has {capacity} blocks)", .block.saturating_add(*.count))]
    OutOfRange {
        /// First block of the request.
        block: u64,
        /// Blocks requested.
        count: u64,
        /// Blocks on the device.
        capacity: u64,
    },
    /// The buffer is empty or not a whole number of blocks (or, for
    /// O_DIRECT, not suitably aligned in memory).
    #[error("buffer of {len} bytes is not a non-empty multiple of the {block_size}-byte block")]
    Misaligned {
        /// Bytes in the buffer.
        len: usize,
        /// The device's block size in bytes.
        block_size: u32,
    },
    /// A device configuration that cannot work (zero size, block size not a
    /// power of two, a file that is not a whole number of blocks...).
    #[error("invalid device configuration: {0}")]
    InvalidConfig(String),
    /// The device was (simulated) crashed or shut down and accepts no more I/O.
    #[error("device is offline (crashed or closed)")]
    Offline,
    /// An injected fault from a simulated device.
    #[error("injected I/O fault at block {block}")]
    InjectedFault {
        /// The block the fault hit.
        block: u64,
    },
    /// An injected flush failure from a simulated device: nothing written
    /// since the last successful flush became durable.
    #[error("injected flush fault")]
    InjectedFlushFault,
    /// A write a [`WriteBehind`](crate::WriteBehind) device accepted
    /// earlier failed in the background: what the caller took as written
    /// is not, so the device refuses every later request.
    #[error("an earlier background write failed")]
    WriteBehindFailed(#[source] std::sync::Arc<BlockError>),
    /// The operating system reported an error.
    #[error("I/O error")]
    Io(#[from] std::io::Error),
}

impl BlockError {
    /// Whether this error was injected by a simulated device (as opposed
    /// to a bad request or a real I/O error).
    ///
    /// ```
    /// use ptsd_blockdev::BlockError;
    /// assert!(BlockError::InjectedFault { block: 3 }.is_injected());
    /// assert!(BlockError::InjectedFlushFault.is_injected());
    /// assert!(!BlockError::Offline.is_injected());
    /// ```
    pub fn is_injected(&self) -> bool {
        matches!(self, Self::InjectedFault { .. } | Self::InjectedFlushFault)
    }
}

/// An error and its causes on one line, `a: b: c`, for messages and logs
/// that print an error by itself (anyhow's `{:#}` does the same). Every
/// error type of the ptsd crates shows its cause either in its message or
/// as its `source()`, never both, so each cause appears once. It lives here
/// because every other crate imports this one.
///
/// ```
/// use ptsd_blockdev::{BlockError, ErrorChain};
/// let e = BlockError::WriteBehindFailed(std::sync::Arc::new(BlockError::Offline));
/// assert_eq!(
///     ErrorChain(&e).to_string(),
///     "an earlier background write failed: device is offline (crashed or closed)"
/// );
/// ```
pub struct ErrorChain<'a>(pub &'a (dyn std::error::Error + 'static));

impl std::fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut cause = self.0.source();
        while let Some(c) = cause {
            write!(f, ": {c}")?;
            cause = c.source();
        }
        Ok(())
    }
}
