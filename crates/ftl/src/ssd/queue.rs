//! The interface queue and scheduler: which queued request goes next
//! (FIFO or read priority with `write_stop`), and completions.

use std::cmp::Reverse;

use super::{DataIo, Done, Pick, Queued, Ssd};
use crate::config::SchedulerKind;
use crate::error::{FtlError, RequestError};
use crate::request::{Completion, Op};

impl Ssd {
    pub(super) fn next_dispatch(&self) -> Option<(u64, Pick)> {
        if self.write_stop {
            if let Some(r) = self.reads.front() {
                return Some((r.submit_ns.max(self.ctrl_free), Pick::Read));
            }
            let (_, stopped) = self.held.as_ref()?;
            let t = self.ctrl_free.max(self.busy_until).max(*stopped);
            return Some((t, Pick::SyncFlush));
        }
        let pick = match (self.reads.front(), self.others.front()) {
            (Some(r), Some(o)) => {
                if r.arrival < o.arrival {
                    (r.submit_ns, Pick::Read)
                } else {
                    (o.submit_ns, Pick::Other)
                }
            }
            (Some(r), None) => (r.submit_ns, Pick::Read),
            (None, Some(o)) => (o.submit_ns, Pick::Other),
            (None, None) => return None,
        };
        Some((pick.0.max(self.ctrl_free), pick.1))
    }

    pub(super) fn dispatch(&mut self, t: u64, pick: Pick, buffers: &mut dyn DataIo) {
        self.tl.prune(t);
        self.horizon = t;
        match pick {
            Pick::Read => {
                let Some(mut q) = self.reads.pop_front() else {
                    return;
                };
                let req = q.req;
                let r = match self.read_destination(&mut q, buffers) {
                    Ok(dest) => self.do_read(&req, t, dest),
                    Err(e) => return self.refuse(q, t, e),
                };
                self.finish(q, t, r);
            }
            Pick::Other => {
                let Some(q) = self.others.pop_front() else {
                    return;
                };
                let r = match q.req.op {
                    Op::Write => {
                        let fits = self.buf.len() + q.req.pages as usize <= self.buf.cap;
                        if self.cfg.scheduler == SchedulerKind::ReadPriority && !fits {
                            self.write_stop = true;
                            self.stats.write_stops += 1;
                            self.held = Some((q, t));
                            return;
                        }
                        match self.write_source(&q, buffers) {
                            Ok(src) => self.do_write(&q.req, t, false, src),
                            Err(e) => return self.refuse(q, t, e),
                        }
                    }
                    Op::Discard => self.do_discard(&q, t),
                    Op::Flush => self.do_flush(t),
                    Op::Read => unreachable!("reads are queued apart"),
                };
                self.finish(q, t, r);
            }
            Pick::SyncFlush => {
                let Some((q, _)) = self.held.take() else {
                    return;
                };
                self.write_stop = false;
                let r = match self.write_source(&q, buffers) {
                    Ok(src) => self.do_write(&q.req, t, true, src),
                    Err(e) => return self.refuse(q, t, e),
                };
                if let Ok(done) = r {
                    // The controller waits for the synchronous flush.
                    self.ctrl_free = self.ctrl_free.max(done);
                }
                self.finish(q, t, r);
            }
        }
    }

    /// Complete a request that could not be served, at its dispatch time,
    /// having changed nothing (the device goes on).
    pub(super) fn refuse(&mut self, q: Queued, dispatch_ns: u64, error: RequestError) {
        self.complete(q, dispatch_ns, dispatch_ns, true, Some(Box::new(error)));
    }

    pub(super) fn finish(&mut self, q: Queued, dispatch_ns: u64, r: Result<u64, FtlError>) {
        match r {
            Ok(t) => {
                // Read priority flushes only once nothing is in service, so
                // the host has reacted to every completion first.
                self.busy_until = self.busy_until.max(t);
                self.complete(q, dispatch_ns, t, false, None);
            }
            Err(e) => {
                if self.fault.is_none() {
                    self.fault = Some(e.to_string());
                }
                self.complete(q, dispatch_ns, dispatch_ns, true, None);
            }
        }
    }

    /// Hand `q` back; `failed` with no `error` means the device failed.
    pub(super) fn complete(
        &mut self,
        q: Queued,
        dispatch_ns: u64,
        done_ns: u64,
        failed: bool,
        error: Option<Box<RequestError>>,
    ) {
        self.push_done(Done {
            completion: Completion {
                id: q.req.id,
                op: q.req.op,
                submit_ns: q.submit_ns,
                dispatch_ns,
                done_ns,
            },
            payload: q.payload,
            failed,
            error,
        });
    }

    pub(super) fn push_done(&mut self, done: Done) {
        let done_ns = done.completion.done_ns;
        let slot = match self.free_slots.pop() {
            Some(s) => {
                self.slots[s as usize] = Some(done);
                s
            }
            None => {
                self.slots.push(Some(done));
                (self.slots.len() - 1) as u32
            }
        };
        self.heap
            .push(Reverse(u128::from(done_ns) << 32 | u128::from(slot)));
    }
}
