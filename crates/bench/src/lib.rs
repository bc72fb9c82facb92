//! Benchmarks and experiments for ptsd.
//!
//! [`paper_ftl`] is `ptsd sim --paper`: the PTSD paper's evaluation (PAGE,
//! DFTL, PART, PART-SCHED, WRITEOPT on the emulated SSD), with latency CDF
//! plots drawn by [`plot`]; the criterion benches live in `benches/`.
//! [`zns`] is `ptsd sim --zoned --compare`: the conventional SSD (device GC)
//! against the zoned SSD under a host log-structured layer (host GC).
//!
//! [`cmd`] holds the `ptsd bench …` commands (fs, journal, blk, dir): their
//! options and runs; the binary only parses and calls them.
//!
//! [`fsbench`] is `ptsd bench fs`'s library: two file-system workloads — a
//! varmail-like one (fsync-heavy small-file mail server) and a
//! tokubench-like one (many 4 KiB file creates) — run on any directory, and
//! the machinery to run them on the three targets the ptsd file system is
//! judged against: a ptsd mount, ext4 on a loop device, and a no-op
//! in-memory FUSE file system (the FUSE ceiling of the machine).
//!
//! ```
//! use ptsd_bench::fsbench::{run_varmail, Bound, VarmailConfig};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let cfg = VarmailConfig {
//!     threads: 1,
//!     files_per_thread: 8,
//!     bound: Bound::Ops(40),
//!     ..VarmailConfig::default()
//! };
//! let result = run_varmail(dir.path(), &cfg).unwrap();
//! assert_eq!(result.ops, 40);
//! ```

pub mod cmd;
pub mod fsbench;
pub mod paper_ftl;
pub mod plot;
pub mod sim;
pub mod sweep;
pub mod zns;
