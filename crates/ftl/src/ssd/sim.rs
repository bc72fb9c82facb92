//! The simulator's adapter: drives the engine timing-only.

use super::{Payload, Ssd};
use crate::counters::FtlStats;
use crate::request::{Completion, Request};

/// The simulator drives the engine timing-only: no payloads.
impl crate::sim::SimDevice for Ssd {
    type Stats = FtlStats;

    fn submit(&mut self, now_ns: u64, req: Request) -> Result<(), crate::sim::DeviceError> {
        Ssd::submit(self, now_ns, req, Payload::None).map_err(|e| e.into())
    }

    fn advance(&mut self, now_ns: u64, done: &mut Vec<Completion>) {
        let mut scratch = std::mem::take(&mut self.sim_done);
        Ssd::advance(self, now_ns, &mut scratch);
        done.extend(scratch.drain(..).map(|d| d.completion));
        self.sim_done = scratch;
    }

    fn next_event(&self) -> Option<u64> {
        Ssd::next_event(self)
    }

    fn stats(&self) -> FtlStats {
        let mut s = Ssd::stats(self).clone();
        s.refresh_waf();
        s.map_memory_bytes = self.cache.memory_bytes();
        s.clean_share = self.cache.clean_share();
        s.scheme = self.scheme_counters();
        s
    }

    fn reset_stats(&mut self) {
        Ssd::reset_stats(self)
    }

    fn page_size(&self) -> u32 {
        Ssd::page_size(self)
    }

    fn try_clone(&self) -> Option<Self> {
        Ssd::try_clone(self)
    }

    fn fault(&self) -> Option<crate::sim::DeviceError> {
        Ssd::fault(self).map(|f| Box::new(f.clone()) as crate::sim::DeviceError)
    }
}
