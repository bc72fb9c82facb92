//! The /dev/fuse transport: threads that read requests from the device
//! (each from a clone of the session's descriptor, so the kernel hands
//! requests to them in parallel), pass the bytes to the
//! [`Frontend`], and write the replies back. It only moves bytes: a
//! request is split by [`proto::split`], answered by
//! [`Frontend::answer`], and the reply goes out with one `writev` of the
//! out header and the encoded payload (file data straight from the
//! handler's buffer, no copy). Each thread reads into one buffer of its own,
//! allocated once.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::thread::JoinHandle;

use super::proto::{self, Response};
use super::Frontend;
use crate::uring::MAX_WRITE;

/// Bytes a read of /dev/fuse needs: the kernel refuses a buffer smaller
/// than the largest request (header, `fuse_write_in`, `max_write`).
pub const READ_BUF: usize = MAX_WRITE as usize + 4096;

/// `FUSE_DEV_IOC_CLONE`: `_IOR(229, 0, uint32_t)`.
const FUSE_DEV_IOC_CLONE: libc::c_ulong = 0x8004_e500;

/// A clone of the session's /dev/fuse descriptor: a channel of its own
/// to the same connection.
pub fn clone_fd(session: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    // SAFETY: a NUL-terminated path and plain flags.
    let fd = unsafe { libc::open(c"/dev/fuse".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is ours alone.
    let new = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut src = session.as_raw_fd() as u32;
    // SAFETY: the ioctl reads one u32 (the source fd) from a valid pointer.
    if unsafe { libc::ioctl(new.as_raw_fd(), FUSE_DEV_IOC_CLONE, &mut src) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(new)
}

/// The threads serving one /dev/fuse connection.
pub struct DevFuse {
    threads: Vec<JoinHandle<io::Result<()>>>,
}

impl DevFuse {
    /// Starts `threads` threads (at least one), the first reading `dev`
    /// itself, the others clones of it.
    pub fn start(dev: OwnedFd, frontend: Arc<Frontend>, threads: usize) -> io::Result<Self> {
        let mut fds = Vec::with_capacity(threads.max(1));
        for _ in 1..threads.max(1) {
            fds.push(clone_fd(std::os::fd::AsFd::as_fd(&dev))?);
        }
        fds.insert(0, dev);
        let mut handles = Vec::with_capacity(fds.len());
        for (i, fd) in fds.into_iter().enumerate() {
            let fe = frontend.clone();
            handles.push(
                std::thread::Builder::new()
                    .name(format!("ptsd-fuse-{i}"))
                    .spawn(move || serve_fd(&fd, &fe))?,
            );
        }
        Ok(DevFuse { threads: handles })
    }

    /// Waits until every thread has seen the connection end (the unmount);
    /// the first error a thread ended with, if any.
    pub fn join(self) -> io::Result<()> {
        let mut res = Ok(());
        for t in self.threads {
            let r = t
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("a /dev/fuse thread panicked")));
            if res.is_ok() {
                res = r;
            }
        }
        res
    }
}

/// Serves requests read from `fd` until the connection ends.
fn serve_fd(fd: &OwnedFd, fe: &Frontend) -> io::Result<()> {
    let mut buf = vec![0u8; READ_BUF];
    loop {
        // SAFETY: `buf` is a valid, writable buffer of its length.
        let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                // Interrupted, or the request went away before we read it.
                Some(libc::EINTR | libc::EAGAIN | libc::ENOENT) => continue,
                // Unmounted (or aborted): the connection is gone.
                Some(libc::ENODEV) => return Ok(()),
                _ => return Err(e),
            }
        }
        let req = &buf[..n as usize];
        capture(req);
        let (unique, resp) = match proto::split_ext(req, fe.policy().setxattr_ext) {
            Ok((h, op_in, payload)) => (h.unique, fe.answer(&h, op_in, payload)),
            Err(e) => {
                // Not even a header: nothing to answer to.
                tracing::warn!("bad FUSE request: {e}");
                continue;
            }
        };
        if let Some(resp) = resp {
            send(fd, unique, &resp);
        }
        if fe.work_due() {
            fe.after_reply();
        }
    }
}

/// Writes the reply to `unique`. A refused reply (ENOENT: the request
/// was interrupted and is gone) is dropped, as libfuse does.
fn send(fd: &OwnedFd, unique: u64, resp: &Response) {
    let mut small = [0u8; 256];
    let mut large = Vec::new();
    let (hdr, data) = reply_parts(unique, resp, &mut small, &mut large);
    let iov = [
        libc::iovec {
            iov_base: hdr.as_ptr() as *mut libc::c_void,
            iov_len: hdr.len(),
        },
        libc::iovec {
            iov_base: data.as_ptr() as *mut libc::c_void,
            iov_len: data.len(),
        },
    ];
    let n = if data.is_empty() { 1 } else { 2 };
    // SAFETY: both iovecs point at live buffers of their lengths; the
    // kernel only reads them.
    let r = unsafe { libc::writev(fd.as_raw_fd(), iov.as_ptr(), n) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ENOENT) {
            tracing::warn!("FUSE reply to {unique}: {e}");
        }
    }
}

/// The two parts of a reply as /dev/fuse takes it: the out header and the
/// payload (file data from the handler's buffer; anything else encoded
/// into `small`, or `large` for an ioctl output that does not fit).
pub(crate) fn reply_parts<'a>(
    unique: u64,
    resp: &'a Response,
    small: &'a mut [u8; 256],
    large: &'a mut Vec<u8>,
) -> ([u8; proto::OUT_HEADER_LEN], &'a [u8]) {
    let (error, data): (i32, &[u8]) = match resp {
        Response::Data(d) => (0, d),
        _ if resp.len() > small.len() => {
            large.resize(resp.len(), 0);
            let (error, len) = resp.encode(large);
            (error, &large[..len])
        }
        _ => {
            let (error, len) = resp.encode(small);
            (error, &small[..len])
        }
    };
    (proto::out_header(unique, error, data.len()), data)
}

/// With `PTSD_FUSE_CAPTURE=DIR`, every request read from /dev/fuse is
/// saved as it arrived to `DIR/<unique>-<opcode>.bin`: the front end's
/// tests replay such captures through both transports.
fn capture(req: &[u8]) {
    static DIR: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    let Some(dir) = DIR.get_or_init(|| std::env::var_os("PTSD_FUSE_CAPTURE").map(Into::into))
    else {
        return;
    };
    let Ok(h) = proto::InHeader::decode(req) else {
        return;
    };
    let _ = std::fs::write(dir.join(format!("{:06}-{}.bin", h.unique, h.opcode)), req);
}
