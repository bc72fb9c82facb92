//! Simple devices for testing the simulator and for examples.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::*;

/// `units` independent units, each serving one request at a time in
/// arrival order, with fixed read and write latencies; request `id`
/// goes to unit `id % units`. Counts requests as its "stats".
pub struct FixedLatency {
    free_at: Vec<u64>,
    read_ns: u64,
    write_ns: u64,
    pending: BinaryHeap<Reverse<(u64, u64, u64, bool)>>,
    served: u64,
    /// Pages beyond this are rejected.
    pub capacity_pages: u64,
    /// The device fails once it has served this many requests.
    pub fail_after: Option<u64>,
}

impl FixedLatency {
    pub fn new(units: usize, read_ns: u64, write_ns: u64) -> Self {
        FixedLatency {
            free_at: vec![0; units.max(1)],
            read_ns,
            write_ns,
            pending: BinaryHeap::new(),
            served: 0,
            capacity_pages: u64::MAX,
            fail_after: None,
        }
    }
}

impl SimDevice for FixedLatency {
    type Stats = u64;

    fn submit(&mut self, now_ns: u64, req: Request) -> Result<(), DeviceError> {
        if req.end_lpn() > self.capacity_pages {
            return Err(format!("page {} is beyond the capacity", req.lpn).into());
        }
        let unit = (req.id % self.free_at.len() as u64) as usize;
        let start = self.free_at[unit].max(now_ns);
        let done = start
            + match req.op {
                Op::Read => self.read_ns,
                _ => self.write_ns,
            };
        self.free_at[unit] = done;
        self.pending
            .push(Reverse((done, req.id, now_ns, req.op == Op::Read)));
        Ok(())
    }

    fn advance(&mut self, now_ns: u64, done: &mut Vec<Completion>) {
        while let Some(&Reverse((t, id, submit_ns, read))) = self.pending.peek() {
            if t > now_ns {
                break;
            }
            self.pending.pop();
            self.served += 1;
            done.push(Completion {
                id,
                op: if read { Op::Read } else { Op::Write },
                submit_ns,
                dispatch_ns: submit_ns,
                done_ns: t,
            });
        }
    }

    fn next_event(&self) -> Option<u64> {
        self.pending.peek().map(|Reverse((t, ..))| *t)
    }

    fn stats(&self) -> u64 {
        self.served
    }

    fn reset_stats(&mut self) {
        self.served = 0;
    }

    fn page_size(&self) -> u32 {
        4096
    }

    fn fault(&self) -> Option<DeviceError> {
        let n = self.fail_after?;
        (self.served >= n).then(|| format!("worn out after {n} requests").into())
    }
}
