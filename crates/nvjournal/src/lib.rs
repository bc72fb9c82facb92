//! `ptsd-nvjournal`: a lock-free partitioned journal on persistent memory.
//!
//! Built after "NVM-based concurrent journaling for journaling file
//! systems" (`docs/papers.md` §2 in the repository): the journal lives in a byte-addressable region
//! ([`PmemRegion`]: DAX with `MAP_SYNC`, else a tmpfs file, else a disk file
//! written and `fdatasync`ed at each commit; or the crash-simulating [`CrashRegion`]), split into N
//! partition rings. A block goes to ring `block % N`; a slot is claimed with
//! one atomic add, filled, flushed (`clwb`/`clflushopt` + `sfence`) and
//! flagged. Transactions ([`Tx`]) commit all-or-nothing; a commit snapshots
//! every ring's index into the commit area after the per-partition commit
//! workers have passed it; N checkpoint threads write the newest committed
//! version of each block to the home [`BlockDevice`](ptsd_blockdev::BlockDevice)
//! and free ring space. [`Journal::open`] replays exactly the committed
//! transactions after a crash. [`JournalKind::SingleLock`] (one mutex
//! held across each whole stage) and [`JournalKind::ShortLock`] (one mutex
//! held only to claim, index and commit) are the lock-based baselines
//! behind the same API.
//!
//! See the crate README for the layout and the correctness argument.
//!
//! ```
//! use std::sync::Arc;
//! use ptsd_blockdev::{BlockDevice, MemDevice};
//! use ptsd_nvjournal::{CrashRegion, Journal, JournalConfig};
//!
//! let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(4096, 128).unwrap());
//! let region = CrashRegion::new(1 << 20);
//! let j = Journal::create(region.clone(), dev.clone(), JournalConfig::partitioned(4)).unwrap();
//! let mut tx = j.begin();
//! tx.write(1, &[1u8; 4096]).unwrap();
//! tx.write(2, &[2u8; 4096]).unwrap();
//! tx.finish().unwrap();
//! j.commit().unwrap();
//! drop(j); // "crash": nothing checkpointed yet
//! let (j, report) = Journal::open(region, dev, JournalConfig::partitioned(4)).unwrap();
//! assert_eq!(report.replayed_blocks, 2);
//! let mut buf = vec![0u8; 4096];
//! j.read(2, &mut buf).unwrap();
//! assert_eq!(buf, vec![2u8; 4096]);
//! ```
#![warn(missing_docs)]

mod bugs;
mod crash;
mod error;
mod flush;
mod flushcheck;
mod journal;
mod layout;
#[doc(hidden)]
pub mod protocol;
mod recovery;
mod region;

pub use crash::CrashRegion;
pub use error::{Failure, JournalError, JournalFormatError};
pub use flush::{flush_instr, FlushInstr, CACHE_LINE};
pub use flushcheck::FlushCheck;
pub use journal::{Journal, JournalConfig, JournalKind, JournalStats, RecoveryReport, Tx, TxId};
pub use layout::{Geometry, RecordKind, MAX_PARTITIONS};
pub use region::{Persist, PmemRegion, RegionError, RegionMode};
