//! The interface queue: which queued request goes next (as the
//! [`Scheduler`](crate::policy::Scheduler) orders the two queue heads, with
//! `write_stop` for one that stops writes), and completions.

use std::cmp::Reverse;

use super::{DataIo, Done, Pick, Queued, Ssd};
use crate::config::WriteStop;
use crate::error::{DeviceFault, FtlError, SsdRequestError};
use crate::policy::Candidate;
use crate::request::{Completion, Op};

impl Ssd {
    /// The next request to dispatch and when. Reads wait only for the
    /// controller; a write also for room in the write buffer. FIFO takes
    /// them in arrival order; read priority takes the earlier-ready one
    /// (a read passes a write waiting for room), and while `write_stop` is
    /// set only reads, until none is queued.
    pub(super) fn next_dispatch(&self) -> Option<(u64, Pick)> {
        if let Some(p) = self.next_pick.get() {
            return p;
        }
        let p = self.pick_next();
        self.next_pick.set(Some(p));
        p
    }

    fn pick_next(&self) -> Option<(u64, Pick)> {
        if self.write_stop {
            if let Some(r) = self.reads.front() {
                return Some((r.submit_ns.max(self.ctrl_free), Pick::Read));
            }
            let (q, stopped) = self.held.as_ref()?;
            let t = self
                .ctrl_free
                .max(*stopped)
                .max(self.buf.room_at(q.req.pages as usize));
            let t = match self.cfg.write_stop {
                // "Nothing in service" is the paper's literal condition.
                WriteStop::Literal => t.max(self.busy_until),
                WriteStop::Intended => t,
            };
            return Some((t, Pick::Held));
        }
        let read_at = |r: &Queued| r.submit_ns.max(self.ctrl_free);
        let other_at = |o: &Queued| {
            let t = o.submit_ns.max(self.ctrl_free);
            if o.req.op == Op::Write {
                t.max(self.buf.room_at(o.req.pages as usize))
            } else {
                t
            }
        };
        match (self.reads.front(), self.others.front()) {
            (Some(r), Some(o)) => {
                let (tr, to) = (read_at(r), other_at(o));
                let cand = |q: &Queued, ready_ns| Candidate {
                    op: q.req.op,
                    lpn: q.req.lpn,
                    pages: q.req.pages,
                    submit_ns: q.submit_ns,
                    ready_ns,
                    arrival: q.arrival,
                };
                let read_first = self.sched.read_first(&cand(r, tr), &cand(o, to));
                Some(if read_first {
                    (tr, Pick::Read)
                } else {
                    (to, Pick::Other)
                })
            }
            (Some(r), None) => Some((read_at(r), Pick::Read)),
            (None, Some(o)) => Some((other_at(o), Pick::Other)),
            (None, None) => None,
        }
    }

    pub(super) fn dispatch(&mut self, t: u64, pick: Pick, buffers: &mut dyn DataIo) {
        self.serve(t, pick, buffers);
        self.next_pick.set(None);
    }

    fn serve(&mut self, t: u64, pick: Pick, buffers: &mut dyn DataIo) {
        // GC takes the chips' idle time before `t` first: what user work is
        // placed from here on starts at `t` or later.
        self.gc_pump(t);
        self.tl.prune(t);
        self.horizon = t;
        // Dispatch times never go back: a request queued behind one that
        // waited (for room in the buffer) is dispatched after it.
        self.ctrl_free = self.ctrl_free.max(t);
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
                        if self.sched_stops && !fits {
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
            Pick::Held => {
                let Some((q, _)) = self.held.take() else {
                    return;
                };
                self.write_stop = false;
                let sync = self.cfg.write_stop == WriteStop::Literal;
                let r = match self.write_source(&q, buffers) {
                    Ok(src) => self.do_write(&q.req, t, sync, src),
                    Err(e) => return self.refuse(q, t, e),
                };
                if let (true, Ok(done)) = (sync, &r) {
                    // The controller waits for the synchronous flush.
                    self.ctrl_free = self.ctrl_free.max(*done);
                }
                self.finish(q, t, r);
            }
        }
    }

    /// Stop the device: it refuses every later request.
    pub(super) fn fail(&mut self, e: FtlError) {
        if self.fault.is_none() {
            self.fault = Some(DeviceFault::new(e));
        }
    }

    /// Complete a request that could not be served, at its dispatch time,
    /// having changed nothing (the device goes on).
    pub(super) fn refuse(&mut self, q: Queued, dispatch_ns: u64, error: SsdRequestError) {
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
                self.fail(e);
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
        error: Option<Box<SsdRequestError>>,
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
            .push(Reverse((u128::from(done_ns) << 32) | u128::from(slot)));
    }
}
