//! Both transports give the same reply bytes for the same requests.
//!
//! `captured/session.devfuse` is a real session: every request a kernel
//! (Linux 6.18) sent over /dev/fuse to a fresh `ptsd mount -o nouring`
//! (`PTSD_FUSE_CAPTURE`) while a shell made a directory, wrote, read,
//! listed, renamed, linked, chmod'ed, truncated, set and read an xattr,
//! made an O_TMPFILE file, and removed it all, concatenated. Each request
//! goes through the /dev/fuse adapter (split, front end, reply parts) and,
//! laid out as a ring entry, through the io_uring adapter (`answer_in`).
//! The file system answers the /dev/fuse side; the ring side gets the same
//! answer back from a recorder that checks it decoded the same request, so
//! what is compared is exactly what the adapters add: their bytes.

use std::sync::{Arc, Mutex};

use super::devfuse::reply_parts;
use super::proto::{self, InHeader, Request, Response};
use super::{Frontend, FsHandler, Handler, Policy};
use crate::uring::ring::{answer_in, ENT_IN_OUT, HEADER_LEN};
use crate::{mkfs, DirectStore, FileSystem, MkfsOptions};

/// Answers through the file system and records each request and answer.
struct Recorder {
    fs: FsHandler,
    seen: Arc<Mutex<Vec<(String, Response)>>>,
}

impl Handler for Recorder {
    fn handle(&self, p: &Policy, h: &InHeader, req: Request<'_>) -> Response {
        let what = format!("{h:?} {req:?}");
        let r = self.fs.handle(p, h, req);
        self.seen.lock().unwrap().push((what, r.clone()));
        r
    }
}

/// Gives back what [`Recorder`] recorded, checking the request is the same.
struct Replayer {
    seen: Arc<Mutex<Vec<(String, Response)>>>,
}

impl Handler for Replayer {
    fn handle(&self, _p: &Policy, h: &InHeader, req: Request<'_>) -> Response {
        let (what, r) = self.seen.lock().unwrap().remove(0);
        assert_eq!(
            format!("{h:?} {req:?}"),
            what,
            "the ring decoded another request"
        );
        r
    }
}

/// The requests of a /dev/fuse capture, each as read.
fn requests(mut b: &[u8]) -> Vec<&[u8]> {
    let mut v = Vec::new();
    while b.len() >= proto::IN_HEADER_LEN {
        let len = u32::from_le_bytes(b[..4].try_into().unwrap()) as usize;
        let (r, rest) = b.split_at(len.min(b.len()));
        v.push(r);
        b = rest;
    }
    v
}

/// `req` (as read from /dev/fuse) laid out as the kernel fills a ring
/// entry: header, op header, then `fuse_uring_ent_in_out` with the commit
/// id and the payload size; the payload in its own buffer.
fn ring_entry(req: &[u8], payload_cap: usize) -> (Vec<u8>, Vec<u8>) {
    let (h, op_in, payload) = proto::split(req).unwrap();
    let mut header = vec![0u8; HEADER_LEN];
    header[..proto::IN_HEADER_LEN].copy_from_slice(&req[..proto::IN_HEADER_LEN]);
    header[128..128 + op_in.len()].copy_from_slice(op_in);
    header[ENT_IN_OUT + 8..ENT_IN_OUT + 16].copy_from_slice(&h.unique.to_le_bytes());
    header[ENT_IN_OUT + 16..ENT_IN_OUT + 20].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    let mut buf = vec![0u8; payload_cap];
    buf[..payload.len()].copy_from_slice(payload);
    (header, buf)
}

fn fresh_fs() -> Arc<FileSystem> {
    let dev = Arc::new(ptsd_blockdev::MemDevice::new(4096, 16384).unwrap());
    let store = Arc::new(DirectStore::new(dev).unwrap());
    mkfs(&*store, &MkfsOptions::default()).unwrap();
    Arc::new(FileSystem::mount(store).unwrap())
}

#[test]
fn both_transports_reply_the_same_bytes_to_a_captured_session() {
    let session = include_bytes!("captured/session.devfuse");
    let reqs = requests(session);
    assert!(reqs.len() > 40, "{} requests", reqs.len());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let fs = fresh_fs();
    let dev = Frontend::new(
        Arc::new(Recorder {
            fs: FsHandler::new(fs.clone()),
            seen: seen.clone(),
        }),
        Policy::default(),
        None,
    );
    let ring = Frontend::new(
        Arc::new(Replayer { seen: seen.clone() }),
        Policy::default(),
        None,
    );
    let (mut answered, mut errors) = (0, 0);
    for req in reqs {
        let (h, op_in, payload) = proto::split(req).unwrap();
        let Some(resp) = dev.answer(&h, op_in, payload) else {
            // FORGET and friends: no reply on /dev/fuse; a ring never
            // carries them. The recorder's entry is not replayed.
            seen.lock().unwrap().pop();
            continue;
        };
        let (mut small, mut large) = ([0u8; 256], Vec::new());
        let (hdr, data) = reply_parts(h.unique, &resp, &mut small, &mut large);
        let mut want = hdr.to_vec();
        want.extend_from_slice(data);

        let (mut rh, mut rp) = ring_entry(req, 1 << 20);
        assert_eq!(answer_in(&mut rh, &mut rp, &ring), h.unique);
        let len = u32::from_le_bytes(rh[ENT_IN_OUT + 16..ENT_IN_OUT + 20].try_into().unwrap());
        let mut got = rh[..proto::OUT_HEADER_LEN].to_vec();
        got.extend_from_slice(&rp[..len as usize]);
        assert_eq!(got, want, "opcode {} ({resp:?})", h.opcode);
        answered += 1;
        errors += usize::from(matches!(resp, Response::Error(_)));
    }
    assert!(seen.lock().unwrap().is_empty());
    // The session replays on a fresh file system as it ran: mostly
    // successes (the errors are lookups of names not there yet).
    assert!(
        answered > 40 && errors * 3 < answered,
        "{answered} answered, {errors} errors"
    );
}

/// Records the `kill_sgid` of each SETXATTR.
struct KillSgid(Mutex<Vec<bool>>);

impl Handler for KillSgid {
    fn handle(&self, _p: &Policy, _h: &InHeader, req: Request<'_>) -> Response {
        if let Request::Setxattr { kill_sgid, .. } = req {
            self.0.lock().unwrap().push(kill_sgid);
        }
        Response::Empty
    }
}

/// A ring entry's argument space is 128 bytes whatever the opcode: past
/// SETXATTR's short struct it holds stale bytes, which are
/// `setxattr_flags` only when INIT agreed on FUSE_SETXATTR_EXT.
#[test]
fn setxattr_flags_only_where_init_agreed() {
    let mut op_in = [0xffu8; 128];
    op_in[..8].copy_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0]);
    let h = InHeader {
        len: 0,
        opcode: proto::opcode::SETXATTR,
        unique: 1,
        nodeid: 1,
        uid: 0,
        gid: 0,
        pid: 1,
    };
    let mut seen = Vec::new();
    for ext in [false, true] {
        let rec = Arc::new(KillSgid(Mutex::new(Vec::new())));
        let policy = Policy {
            setxattr_ext: ext,
            ..Policy::default()
        };
        let fe = Frontend::new(rec.clone(), policy, None);
        assert_eq!(fe.answer(&h, &op_in, b"user.a\0x"), Some(Response::Empty));
        seen.extend(rec.0.lock().unwrap().iter().copied());
    }
    assert_eq!(seen, [false, true]);
}
