//! The queues of FUSE over io_uring: per CPU queue, threads that each own an
//! io_uring of 128-byte SQEs and one ring entry (a header buffer and a
//! payload buffer registered with `FUSE_IO_URING_CMD_REGISTER`). A request
//! arrives as the completion of the entry's pending command; the reply goes
//! back, and the next request is asked for, with one
//! `FUSE_IO_URING_CMD_COMMIT_AND_FETCH`: one `io_uring_enter` per request
//! instead of a `read` and a `write` on /dev/fuse.
//!
//! One entry per thread: a thread serves its request to the end (a journal
//! fsync may block it), so a second entry of the same thread would only
//! make a request wait behind it while another thread idles.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use io_uring::{cqueue, opcode, squeue, types, IoUring};

use crate::frontend::proto::{self, InHeader, Response};
use crate::frontend::Frontend;

/// `FUSE_IO_URING_CMD_REGISTER`.
const CMD_REGISTER: u32 = 1;
/// `FUSE_IO_URING_CMD_COMMIT_AND_FETCH`.
const CMD_COMMIT_AND_FETCH: u32 = 2;
/// `struct fuse_uring_req_header`: `in_out[128]`, `op_in[128]`, then
/// `struct fuse_uring_ent_in_out` (flags, commit_id, payload_sz, padding,
/// reserved).
pub(crate) const HEADER_LEN: usize = 128 + 128 + 32;
const OP_IN: usize = 128;
pub(crate) const ENT_IN_OUT: usize = 256;

/// How the queues run.
#[derive(Clone, Debug)]
pub struct RingConfig {
    /// Threads (each with one entry) per CPU queue.
    pub threads_per_queue: usize,
    /// Busy-poll the completion queue this long after each reply before
    /// sleeping in the kernel (`-o uring_poll`); `None`: sleep at once.
    pub poll: Option<Duration>,
    /// Bytes of payload buffer per entry: at least the kernel's
    /// `max(8 KiB, max_write, max_pages * 4 KiB)`, else REGISTER fails.
    pub payload: usize,
}

/// Requests served, for the daemon's log and the tests.
#[derive(Debug, Default)]
pub struct RingStats {
    /// Requests answered through the rings.
    pub requests: AtomicU64,
    /// Entries that received a request (so were accepted).
    pub registered: AtomicU64,
    /// Set when a REGISTER failed: the kernel then serves this mount over
    /// /dev/fuse.
    pub register_failed: AtomicBool,
}

/// The running queue threads.
pub struct Rings {
    threads: Vec<JoinHandle<()>>,
    stats: Arc<RingStats>,
    queues: usize,
}

impl Rings {
    /// Requests served, entries registered.
    pub fn stats(&self) -> &RingStats {
        &self.stats
    }

    /// The number of CPU queues.
    pub fn queues(&self) -> usize {
        self.queues
    }

    /// Waits for every queue thread; they end when the kernel tears the
    /// entries down (unmount, abort) or a REGISTER fails.
    pub fn join(self) {
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// The kernel's number of FUSE queues: one per possible CPU.
pub fn possible_cpus() -> usize {
    std::fs::read_to_string("/sys/devices/system/cpu/possible")
        .ok()
        .and_then(|s| {
            s.trim()
                .split(',')
                .filter_map(|r| r.rsplit('-').next()?.parse::<usize>().ok())
                .max()
        })
        .map(|last| last + 1)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Starts the queue threads on `dev` (a /dev/fuse fd whose INIT negotiated
/// `FUSE_OVER_IO_URING`).
pub fn start(dev: OwnedFd, handler: Arc<Frontend>, cfg: &RingConfig) -> io::Result<Rings> {
    let dev = Arc::new(dev);
    let stats = Arc::new(RingStats::default());
    let queues = possible_cpus();
    let mut threads = Vec::new();
    for qid in 0..queues {
        for t in 0..cfg.threads_per_queue.max(1) {
            let (dev, handler, stats, cfg) =
                (dev.clone(), handler.clone(), stats.clone(), cfg.clone());
            let th = std::thread::Builder::new()
                .name(format!("ptsd-uring-{qid}.{t}"))
                .spawn(move || {
                    // On its queue's CPU, polling or not: unpinned spinning
                    // queue threads measured worse (docs/results.md).
                    pin_to(qid);
                    if let Err(e) = serve_queue(&dev, qid as u16, &handler, &cfg, &stats) {
                        tracing::error!("FUSE io_uring queue {qid}: {e}");
                    }
                })?;
            threads.push(th);
        }
    }
    Ok(Rings {
        threads,
        stats,
        queues,
    })
}

fn pin_to(cpu: usize) {
    // SAFETY: cpu_set_t is plain data, zeroed is its empty set; CPU_SET
    // writes within it (cpu < CPU_SETSIZE is checked); sched_setaffinity
    // reads it. Failure only leaves the thread unpinned.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if cpu < libc::CPU_SETSIZE as usize {
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
        }
    }
}

/// One ring entry's buffers. The kernel keeps their addresses from
/// REGISTER on, so they live (boxed, never moved) as long as the ring.
struct Entry {
    header: Box<[u8; HEADER_LEN]>,
    payload: Vec<u8>,
    iov: Box<[libc::iovec; 2]>,
}

impl Entry {
    fn new(payload: usize) -> Self {
        let mut header = Box::new([0u8; HEADER_LEN]);
        let mut payload = vec![0u8; payload];
        let iov = Box::new([
            libc::iovec {
                iov_base: header.as_mut_ptr().cast(),
                iov_len: HEADER_LEN,
            },
            libc::iovec {
                iov_base: payload.as_mut_ptr().cast(),
                iov_len: payload.len(),
            },
        ]);
        Entry {
            header,
            payload,
            iov,
        }
    }
}

/// A URING_CMD SQE for `cmd` on queue `qid`, the entry's iovecs in
/// `addr`/`len` (REGISTER reads them; COMMIT_AND_FETCH ignores them).
fn sqe(fd: i32, cmd: u32, qid: u16, commit_id: u64, e: &Entry) -> squeue::Entry128 {
    // struct fuse_uring_cmd_req: flags u64, commit_id u64, qid u16, padding.
    let mut req = [0u8; 80];
    req[8..16].copy_from_slice(&commit_id.to_le_bytes());
    req[16..18].copy_from_slice(&qid.to_le_bytes());
    let entry = opcode::UringCmd80::new(types::Fd(fd), cmd)
        .cmd(req)
        .addr(Some(e.iov.as_ptr() as u64))
        .build();
    with_len(entry, 2)
}

/// Sets the SQE's `len` field (`FUSE_URING_IOV_SEGS`), which io-uring's
/// UringCmd80 builder does not expose.
fn with_len(e: squeue::Entry128, len: u32) -> squeue::Entry128 {
    const _: () = assert!(std::mem::size_of::<squeue::Entry128>() == 128);
    // SAFETY: Entry128 is #[repr(C)] (a 64-byte io_uring_sqe then 64 bytes
    // of command), exactly 128 bytes (checked above) of plain integers and
    // unions of integers, so every bit pattern is a valid value both ways.
    let mut raw: [u8; 128] = unsafe { std::mem::transmute(e) };
    // struct io_uring_sqe: opcode u8, flags u8, ioprio u16, fd i32,
    // off u64, addr u64, len u32 (offset 24).
    raw[24..28].copy_from_slice(&len.to_le_bytes());
    // SAFETY: as above.
    unsafe { std::mem::transmute::<[u8; 128], squeue::Entry128>(raw) }
}

fn serve_queue(
    dev: &OwnedFd,
    qid: u16,
    handler: &Frontend,
    cfg: &RingConfig,
    stats: &RingStats,
) -> io::Result<()> {
    // Declared before the ring, so the ring goes first: the kernel writes
    // into these buffers while a command is pending.
    let mut ent = Entry::new(cfg.payload);
    let mut ring = queue_ring(cfg.poll.is_some())?;
    let fd = dev.as_raw_fd();
    let mut next = sqe(fd, CMD_REGISTER, qid, 0, &ent);
    let mut registered = false;
    loop {
        // SAFETY: the SQE points at `ent`'s iovecs and buffers; they stay
        // allocated while the command may be pending: we only return after
        // its completion, and leak them where we cannot know (below).
        unsafe { ring.submission().push(&next) }.map_err(|_| io::Error::other("SQ full"))?;
        if registered && handler.work_due() {
            // The reply first, then the work (a trim of freed space).
            ring.submit()?;
            handler.after_reply();
        }
        let cqe = match wait_one(&mut ring, cfg.poll) {
            Ok(c) => c,
            Err(e) => {
                // The command may still be pending (and registered with
                // the kernel): its buffers must outlive us.
                std::mem::forget(ent);
                return Err(e);
            }
        };
        let res = cqe.result();
        if res == -libc::EAGAIN && !registered {
            // INIT not processed yet: ask again shortly.
            std::thread::sleep(Duration::from_millis(1));
            continue;
        }
        if res < 0 {
            let err = io::Error::from_raw_os_error(-res);
            // The kernel tore the queues down (unmount, abort): a pending
            // REGISTER or COMMIT_AND_FETCH ends so.
            if [libc::ENOTCONN, libc::ECANCELED, libc::ECONNABORTED].contains(&-res) {
                tracing::debug!("FUSE io_uring queue {qid} ends: {err}");
                return Ok(());
            }
            if !registered {
                stats.register_failed.store(true, Ordering::SeqCst);
                return Err(io::Error::new(err.kind(), format!("REGISTER: {err}")));
            }
            // The reply was refused (say, a request the kernel no longer
            // waits for): the entry is gone from the queue, so register it
            // again rather than leave the queue one entry short.
            tracing::warn!("FUSE io_uring queue {qid}: COMMIT_AND_FETCH: {err}");
            registered = false;
            next = sqe(fd, CMD_REGISTER, qid, 0, &ent);
            continue;
        }
        if !registered {
            registered = true;
            stats.registered.fetch_add(1, Ordering::Relaxed);
        }
        let commit_id = answer(&mut ent, handler);
        stats.requests.fetch_add(1, Ordering::Relaxed);
        next = sqe(fd, CMD_COMMIT_AND_FETCH, qid, commit_id, &ent);
    }
}

/// The queue thread's ring. Only this thread submits (`SINGLE_ISSUER`).
/// When it sleeps for requests, the kernel's work of handing one over runs
/// inside its `io_uring_enter` (`DEFER_TASKRUN`) instead of as task work
/// that interrupts it. A polling thread reads the completion queue without
/// entering the kernel, so it keeps the interrupting task work (deferred or
/// cooperative task work would wait for its next system call). A kernel
/// that refuses the flags gets a plain ring.
fn queue_ring(polling: bool) -> io::Result<IoUring<squeue::Entry128, cqueue::Entry>> {
    let mut b = IoUring::builder();
    b.setup_single_issuer();
    if !polling {
        b.setup_defer_taskrun();
    }
    match b.build(4) {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => IoUring::builder().build(4),
        r => r,
    }
}

/// Waits for the one pending command to complete, busy-polling first when
/// asked to.
fn wait_one(
    ring: &mut IoUring<squeue::Entry128, cqueue::Entry>,
    poll: Option<Duration>,
) -> io::Result<cqueue::Entry> {
    if let Some(spin) = poll {
        ring.submit()?;
        let until = Instant::now() + spin;
        loop {
            if let Some(c) = ring.completion().next() {
                return Ok(c);
            }
            if Instant::now() >= until {
                break;
            }
            std::hint::spin_loop();
        }
    }
    loop {
        match ring.submit_and_wait(1) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
            Err(e) => return Err(e),
        }
        if let Some(c) = ring.completion().next() {
            return Ok(c);
        }
    }
}

/// Decodes the request in `ent`, lets the front end answer it, writes
/// the reply into the entry; returns the commit id.
fn answer(ent: &mut Entry, fe: &Frontend) -> u64 {
    answer_in(&mut ent.header[..], &mut ent.payload, fe)
}

/// [`answer`] on an entry's two buffers: `header` (a
/// `fuse_uring_req_header`) and `payload` (the request's payload in, the
/// reply's out).
pub(crate) fn answer_in(header: &mut [u8], payload: &mut [u8], fe: &Frontend) -> u64 {
    let h = &*header;
    let field = |at: usize, n: usize| {
        let mut b = [0u8; 8];
        b[..n].copy_from_slice(&h[at..at + n]);
        u64::from_le_bytes(b)
    };
    let commit_id = field(ENT_IN_OUT + 8, 8);
    let payload_sz = (field(ENT_IN_OUT + 16, 4) as usize).min(payload.len());
    capture(h, &payload[..payload_sz]);
    let resp = match InHeader::decode(&h[..proto::IN_HEADER_LEN]) {
        // A ring entry always commits a reply (the kernel sends FORGET
        // and INTERRUPT through /dev/fuse, not here).
        Ok(hdr) => fe
            .answer(&hdr, &h[OP_IN..OP_IN + 128], &payload[..payload_sz])
            .unwrap_or(Response::Empty),
        Err(e) => {
            tracing::warn!("bad FUSE header: {e}");
            Response::Error(libc::EIO)
        }
    };
    let (error, len) = resp.encode(payload);
    let out = proto::out_header(commit_id, error, len);
    header[..proto::OUT_HEADER_LEN].copy_from_slice(&out);
    // struct fuse_uring_ent_in_out.payload_sz: what the reply carries.
    header[ENT_IN_OUT + 16..ENT_IN_OUT + 20].copy_from_slice(&(len as u32).to_le_bytes());
    commit_id
}

/// With `PTSD_URING_CAPTURE=DIR`, every request is saved as it arrived (the
/// 288-byte ring header, then the payload) to `DIR/<unique>-<opcode>.bin`:
/// the codec's tests replay such captures.
fn capture(header: &[u8], payload: &[u8]) {
    static DIR: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    let Some(dir) = DIR.get_or_init(|| std::env::var_os("PTSD_URING_CAPTURE").map(Into::into))
    else {
        return;
    };
    let Ok(h) = InHeader::decode(header) else {
        return;
    };
    let mut b = header.to_vec();
    b.extend_from_slice(payload);
    let _ = std::fs::write(dir.join(format!("{:06}-{}.bin", h.unique, h.opcode)), b);
}
