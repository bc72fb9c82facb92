//! Synthetic request generators: sequential or random (uniform or Zipf)
//! addresses, a read:write mix, a fixed request size, seeded.
//!
//! A [`Workload`] is an iterator of [`Request`]s; generating one allocates
//! nothing, so the simulator's inner loop stays cheap.
//!
//! ```
//! use ptsd_ftl::workload::{Access, WorkloadSpec};
//! use ptsd_ftl::Op;
//! let spec = WorkloadSpec {
//!     access: Access::Uniform,
//!     read_percent: 70,
//!     ..WorkloadSpec::random_write(1 << 20, 1000, 42)
//! };
//! let reqs: Vec<_> = spec.build().unwrap().collect();
//! assert_eq!(reqs.len(), 1000);
//! assert!(reqs.iter().all(|r| r.lpn < 1 << 20 && r.pages == 1));
//! let reads = reqs.iter().filter(|r| r.op == Op::Read).count();
//! assert!((600..800).contains(&reads));
//! ```

use std::fmt;
use std::str::FromStr;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Zipf};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::request::{Op, Request};

/// How a workload picks addresses.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum Access {
    /// Consecutive requests, wrapping at the end of the span.
    Sequential,
    /// Every request-sized slot equally likely.
    Uniform,
    /// Zipf-distributed slot popularity with exponent `theta` (0.99 is the
    /// usual "skewed"); the popular slots are scattered over the span, not
    /// packed at its start.
    Zipf { theta: f64 },
    /// Sequential runs: each run starts at a random slot and goes on for
    /// `run_slots` consecutive slots (wrapping at the end of the span)
    /// before the next jumps: the sequential locality of real traces (MSR,
    /// Financial) that prefetching FTLs exploit. Run starts are uniform
    /// with `theta` 0, else Zipf-distributed and scattered as with
    /// [`Zipf`](Access::Zipf) (hot runs recur: temporal locality too).
    Runs { run_slots: u32, theta: f64 },
}

/// Everything that defines a synthetic workload.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkloadSpec {
    pub access: Access,
    /// Share of reads in percent: 0 = only writes, 100 = only reads.
    pub read_percent: u8,
    /// Request size in logical pages; requests are aligned to it.
    pub pages_per_request: u32,
    /// First logical page the workload touches.
    pub start_lpn: u64,
    /// Number of logical pages the workload touches.
    pub span_pages: u64,
    /// How many requests to generate.
    pub requests: u64,
    /// Seed of the generator: same seed, same request stream.
    pub seed: u64,
}

/// A workload that cannot be built.
#[derive(Debug, Error, PartialEq)]
pub enum WorkloadError {
    #[error("the workload spans no pages")]
    EmptySpan,
    #[error("request size must be at least one page")]
    ZeroRequestSize,
    #[error("request size {pages} pages is larger than the span of {span} pages")]
    RequestLargerThanSpan { pages: u32, span: u64 },
    #[error("read share {0}% is over 100%")]
    ReadPercent(u8),
    #[error("Zipf exponent {0} must be a finite number >= 0")]
    ZipfTheta(f64),
    #[error("unknown workload {0:?}; expected randread, randwrite, seqread, seqwrite, mixed:R (R% random reads)")]
    UnknownKind(String),
}

impl WorkloadSpec {
    /// Random single-page writes over `span_pages` pages.
    pub fn random_write(span_pages: u64, requests: u64, seed: u64) -> Self {
        WorkloadSpec {
            access: Access::Uniform,
            read_percent: 0,
            pages_per_request: 1,
            start_lpn: 0,
            span_pages,
            requests,
            seed,
        }
    }

    /// Random single-page reads over `span_pages` pages.
    pub fn random_read(span_pages: u64, requests: u64, seed: u64) -> Self {
        WorkloadSpec {
            read_percent: 100,
            ..Self::random_write(span_pages, requests, seed)
        }
    }

    /// Random single-page requests, `read_percent` % of them reads.
    pub fn mixed(span_pages: u64, read_percent: u8, requests: u64, seed: u64) -> Self {
        WorkloadSpec {
            read_percent,
            ..Self::random_write(span_pages, requests, seed)
        }
    }

    /// One sequential pass of writes over the whole span (the first half of
    /// preconditioning: every logical page gets mapped).
    pub fn sequential_fill(span_pages: u64, pages_per_request: u32) -> Self {
        let pages = u64::from(pages_per_request.max(1));
        WorkloadSpec {
            access: Access::Sequential,
            read_percent: 0,
            pages_per_request,
            start_lpn: 0,
            span_pages,
            requests: span_pages.div_ceil(pages),
            seed: 0,
        }
    }

    /// Check the spec and make its generator.
    pub fn build(&self) -> Result<Workload, WorkloadError> {
        Workload::new(self.clone())
    }
}

/// The two workloads of preconditioning: a sequential fill of the span, then
/// random single-page writes of `factor` times the span.
pub fn precondition(span_pages: u64, factor: f64, seed: u64) -> [WorkloadSpec; 2] {
    let random_writes = (span_pages as f64 * factor.max(0.0)).round() as u64;
    [
        WorkloadSpec::sequential_fill(span_pages, 1),
        WorkloadSpec::random_write(span_pages, random_writes, seed),
    ]
}

/// A named mix of direction and access pattern, as the CLI spells it
/// (`randread`, `randwrite`, `seqread`, `seqwrite`, `mixed:70`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkloadKind {
    pub sequential: bool,
    pub read_percent: u8,
}

impl FromStr for WorkloadKind {
    type Err = WorkloadError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let kind = |sequential, read_percent| WorkloadKind {
            sequential,
            read_percent,
        };
        match s {
            "randread" => Ok(kind(false, 100)),
            "randwrite" => Ok(kind(false, 0)),
            "seqread" => Ok(kind(true, 100)),
            "seqwrite" => Ok(kind(true, 0)),
            _ => {
                let pct = s
                    .strip_prefix("mixed:")
                    .and_then(|p| p.parse::<u8>().ok())
                    .ok_or_else(|| WorkloadError::UnknownKind(s.to_string()))?;
                if pct > 100 {
                    return Err(WorkloadError::ReadPercent(pct));
                }
                Ok(kind(false, pct))
            }
        }
    }
}

impl fmt::Display for WorkloadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.sequential, self.read_percent) {
            (false, 100) => f.write_str("randread"),
            (false, 0) => f.write_str("randwrite"),
            (true, 100) => f.write_str("seqread"),
            (true, 0) => f.write_str("seqwrite"),
            (true, p) => write!(f, "seqmixed:{p}"),
            (false, p) => write!(f, "mixed:{p}"),
        }
    }
}

/// A large prime; multiplying a Zipf rank by it modulo the slot count is a
/// bijection (unless the slot count is a multiple of it), which scatters hot
/// slots over the span.
const SCATTER_PRIME: u64 = (1 << 61) - 1;

/// The generator built from a [`WorkloadSpec`].
#[derive(Clone, Debug)]
pub struct Workload {
    spec: WorkloadSpec,
    rng: ChaCha8Rng,
    zipf: Option<Zipf<f64>>,
    /// Request-sized, request-aligned slots in the span.
    slots: u64,
    next_sequential_slot: u64,
    /// `Runs`: slots left in the current run.
    run_left: u32,
    emitted: u64,
}

impl Workload {
    fn new(spec: WorkloadSpec) -> Result<Self, WorkloadError> {
        if spec.span_pages == 0 {
            return Err(WorkloadError::EmptySpan);
        }
        if spec.pages_per_request == 0 {
            return Err(WorkloadError::ZeroRequestSize);
        }
        if u64::from(spec.pages_per_request) > spec.span_pages {
            return Err(WorkloadError::RequestLargerThanSpan {
                pages: spec.pages_per_request,
                span: spec.span_pages,
            });
        }
        if spec.read_percent > 100 {
            return Err(WorkloadError::ReadPercent(spec.read_percent));
        }
        let per = u64::from(spec.pages_per_request);
        // A sequential pass also covers a partial last slot; random requests
        // use whole slots only.
        let slots = match spec.access {
            Access::Sequential => spec.span_pages.div_ceil(per),
            _ => spec.span_pages / per,
        };
        let zipf = match spec.access {
            Access::Zipf { theta } | Access::Runs { theta, .. }
                if matches!(spec.access, Access::Zipf { .. }) || theta != 0.0 =>
            {
                if !theta.is_finite() || theta < 0.0 {
                    return Err(WorkloadError::ZipfTheta(theta));
                }
                Some(Zipf::new(slots, theta).map_err(|_| WorkloadError::ZipfTheta(theta))?)
            }
            _ => None,
        };
        Ok(Workload {
            rng: ChaCha8Rng::seed_from_u64(spec.seed),
            zipf,
            slots,
            next_sequential_slot: 0,
            run_left: 0,
            emitted: 0,
            spec,
        })
    }

    /// The spec this generator was built from.
    pub fn spec(&self) -> &WorkloadSpec {
        &self.spec
    }

    /// Requests not yet generated.
    pub fn remaining(&self) -> u64 {
        self.spec.requests - self.emitted
    }

    fn next_slot(&mut self) -> u64 {
        match self.spec.access {
            Access::Sequential => {
                let slot = self.next_sequential_slot;
                self.next_sequential_slot = (slot + 1) % self.slots;
                slot
            }
            Access::Uniform => self.rng.gen_range(0..self.slots),
            Access::Runs { run_slots, .. } => {
                if self.run_left == 0 {
                    self.next_sequential_slot = match self.zipf {
                        Some(_) => self.zipf_slot(),
                        None => self.rng.gen_range(0..self.slots),
                    };
                    self.run_left = run_slots.max(1);
                }
                self.run_left -= 1;
                let slot = self.next_sequential_slot;
                self.next_sequential_slot = (slot + 1) % self.slots;
                slot
            }
            Access::Zipf { .. } => self.zipf_slot(),
        }
    }

    /// A Zipf-distributed slot, popular ones scattered over the span.
    fn zipf_slot(&mut self) -> u64 {
        let zipf = self.zipf.as_ref().expect("built with a Zipf access");
        // Samples are ranks in [1, slots].
        let rank = (zipf.sample(&mut self.rng) as u64).clamp(1, self.slots) - 1;
        if self.slots % SCATTER_PRIME == 0 {
            rank
        } else {
            ((u128::from(rank) * u128::from(SCATTER_PRIME)) % u128::from(self.slots)) as u64
        }
    }
}

impl Iterator for Workload {
    type Item = Request;

    fn next(&mut self) -> Option<Request> {
        if self.emitted >= self.spec.requests {
            return None;
        }
        let op = match self.spec.read_percent {
            0 => Op::Write,
            100 => Op::Read,
            p => {
                if self.rng.gen_range(0..100u8) < p {
                    Op::Read
                } else {
                    Op::Write
                }
            }
        };
        let slot = self.next_slot();
        let per = u64::from(self.spec.pages_per_request);
        let lpn = self.spec.start_lpn + slot * per;
        // The last slot of a sequential fill may be cut short by the span.
        let end = (lpn + per).min(self.spec.start_lpn + self.spec.span_pages);
        let req = Request {
            id: self.emitted,
            op,
            lpn,
            pages: (end - lpn) as u32,
        };
        self.emitted += 1;
        Some(req)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = usize::try_from(self.remaining()).unwrap_or(usize::MAX);
        (left, Some(left))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_are_sequential_then_jump() {
        let spec = WorkloadSpec {
            access: Access::Runs {
                run_slots: 8,
                theta: 0.0,
            },
            ..WorkloadSpec::random_read(1 << 20, 64, 3)
        };
        let lpns: Vec<u64> = spec.build().unwrap().map(|r| r.lpn).collect();
        for run in lpns.chunks(8) {
            for w in run.windows(2) {
                assert_eq!(w[1], (w[0] + 1) % (1 << 20));
            }
        }
        let starts: std::collections::HashSet<u64> = lpns.chunks(8).map(|r| r[0]).collect();
        assert_eq!(starts.len(), 8, "every run starts somewhere else");
    }

    #[test]
    fn same_seed_same_stream_other_seed_other_stream() {
        let spec = WorkloadSpec::mixed(10_000, 50, 500, 7);
        let a: Vec<_> = spec.build().unwrap().collect();
        let b: Vec<_> = spec.build().unwrap().collect();
        let c: Vec<_> = WorkloadSpec { seed: 8, ..spec }.build().unwrap().collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn sequential_fill_covers_every_page_once() {
        let spec = WorkloadSpec::sequential_fill(1003, 4);
        let reqs: Vec<_> = spec.build().unwrap().collect();
        assert_eq!(reqs.len(), 251);
        let mut covered = vec![0u8; 1003];
        for r in &reqs {
            assert_eq!(r.op, Op::Write);
            for lpn in r.lpn..r.end_lpn() {
                covered[lpn as usize] += 1;
            }
        }
        assert!(covered.iter().all(|&c| c == 1));
        assert_eq!(reqs.last().unwrap().pages, 3);
    }

    #[test]
    fn random_requests_are_aligned_and_in_span() {
        let spec = WorkloadSpec {
            pages_per_request: 8,
            start_lpn: 100,
            ..WorkloadSpec::random_read(1000, 2000, 1)
        };
        for r in spec.build().unwrap() {
            assert_eq!((r.lpn - 100) % 8, 0);
            assert!(r.lpn >= 100 && r.end_lpn() <= 1100);
            assert_eq!(r.op, Op::Read);
        }
    }

    #[test]
    fn zipf_is_skewed_and_scattered() {
        let spec = WorkloadSpec {
            access: Access::Zipf { theta: 0.99 },
            ..WorkloadSpec::random_read(100_000, 50_000, 3)
        };
        let mut counts = std::collections::HashMap::new();
        for r in spec.build().unwrap() {
            *counts.entry(r.lpn).or_insert(0u32) += 1;
        }
        let mut by_count: Vec<_> = counts.into_iter().collect();
        by_count.sort_by_key(|&(_, count)| std::cmp::Reverse(count));
        // The hottest page alone gets a few percent of all requests ...
        assert!(by_count[0].1 > 1000, "hottest count {}", by_count[0].1);
        // ... and the ten hottest are not all packed at the start.
        assert!(by_count[..10].iter().any(|&(lpn, _)| lpn > 1000));
    }

    #[test]
    fn bad_specs_are_errors() {
        let ok = WorkloadSpec::random_write(10, 1, 0);
        assert_eq!(
            WorkloadSpec {
                span_pages: 0,
                ..ok.clone()
            }
            .build()
            .unwrap_err(),
            WorkloadError::EmptySpan
        );
        assert_eq!(
            WorkloadSpec {
                pages_per_request: 11,
                ..ok.clone()
            }
            .build()
            .unwrap_err(),
            WorkloadError::RequestLargerThanSpan {
                pages: 11,
                span: 10
            }
        );
        assert_eq!(
            WorkloadSpec {
                read_percent: 101,
                ..ok.clone()
            }
            .build()
            .unwrap_err(),
            WorkloadError::ReadPercent(101)
        );
        assert!(WorkloadSpec {
            access: Access::Zipf { theta: f64::NAN },
            ..ok
        }
        .build()
        .is_err());
    }

    #[test]
    fn kinds_parse_and_print() {
        for s in ["randread", "randwrite", "seqread", "seqwrite", "mixed:70"] {
            assert_eq!(s.parse::<WorkloadKind>().unwrap().to_string(), s);
        }
        assert!("mixed:170".parse::<WorkloadKind>().is_err());
        assert!("bogus".parse::<WorkloadKind>().is_err());
    }

    #[test]
    fn precondition_writes_factor_times_span() {
        let [fill, random] = precondition(1000, 2.0, 9);
        assert_eq!(fill.requests, 1000);
        assert_eq!(random.requests, 2000);
        assert_eq!(random.read_percent, 0);
    }
}
