// Over 800 lines: the whole wire format (every request decoder and reply encoder) kept together, so each opcode's layout reads against fuse.h in one place.
//! The FUSE wire format, one typed model for both transports: a decoder
//! for requests and an encoder for replies.
//!
//! A request has three parts: the `fuse_in_header`, the opcode's
//! fixed-size argument struct (`op_in`, the kernel's first in-argument;
//! empty for the opcodes whose first argument is a name) and the payload
//! (names, write data). A ring entry carries them apart; a read of
//! /dev/fuse carries them back to back, and [`split`] cuts them apart
//! there. [`decode`] checks every length and never panics: bad input is a
//! [`DecodeError`], answered with EIO.

use thiserror::Error;

/// `struct fuse_in_header`.
pub const IN_HEADER_LEN: usize = 40;
/// `struct fuse_out_header`.
pub const OUT_HEADER_LEN: usize = 16;
/// `struct fuse_entry_out`.
pub const ENTRY_OUT_LEN: usize = 128;
/// `struct fuse_attr_out`.
pub const ATTR_OUT_LEN: usize = 104;
/// `struct fuse_open_out`.
pub const OPEN_OUT_LEN: usize = 16;

/// FUSE opcodes this codec knows (`enum fuse_opcode`).
pub mod opcode {
    pub const LOOKUP: u32 = 1;
    pub const FORGET: u32 = 2;
    pub const GETATTR: u32 = 3;
    pub const SETATTR: u32 = 4;
    pub const READLINK: u32 = 5;
    pub const SYMLINK: u32 = 6;
    pub const MKNOD: u32 = 8;
    pub const MKDIR: u32 = 9;
    pub const UNLINK: u32 = 10;
    pub const RMDIR: u32 = 11;
    pub const RENAME: u32 = 12;
    pub const LINK: u32 = 13;
    pub const OPEN: u32 = 14;
    pub const READ: u32 = 15;
    pub const WRITE: u32 = 16;
    pub const STATFS: u32 = 17;
    pub const RELEASE: u32 = 18;
    pub const FSYNC: u32 = 20;
    pub const SETXATTR: u32 = 21;
    pub const GETXATTR: u32 = 22;
    pub const LISTXATTR: u32 = 23;
    pub const REMOVEXATTR: u32 = 24;
    pub const FLUSH: u32 = 25;
    pub const INIT: u32 = 26;
    pub const OPENDIR: u32 = 27;
    pub const READDIR: u32 = 28;
    pub const RELEASEDIR: u32 = 29;
    pub const FSYNCDIR: u32 = 30;
    pub const ACCESS: u32 = 34;
    pub const INTERRUPT: u32 = 36;
    pub const CREATE: u32 = 35;
    pub const DESTROY: u32 = 38;
    pub const IOCTL: u32 = 39;
    pub const BATCH_FORGET: u32 = 42;
    pub const FALLOCATE: u32 = 43;
    pub const READDIRPLUS: u32 = 44;
    pub const RENAME2: u32 = 45;
    pub const LSEEK: u32 = 46;
    pub const SYNCFS: u32 = 50;
    pub const TMPFILE: u32 = 51;
}

/// `FATTR_*` bits of `fuse_setattr_in.valid`.
mod fattr {
    pub const MODE: u32 = 1 << 0;
    pub const UID: u32 = 1 << 1;
    pub const GID: u32 = 1 << 2;
    pub const SIZE: u32 = 1 << 3;
    pub const ATIME: u32 = 1 << 4;
    pub const MTIME: u32 = 1 << 5;
    pub const ATIME_NOW: u32 = 1 << 7;
    pub const MTIME_NOW: u32 = 1 << 8;
    pub const KILL_SUIDGID: u32 = 1 << 11;
}

/// `FUSE_WRITE_KILL_SUIDGID` of `fuse_write_in.write_flags`.
pub const WRITE_KILL_SUIDGID: u32 = 1 << 2;
/// `FUSE_FSYNC_FDATASYNC`.
pub const FSYNC_FDATASYNC: u32 = 1;

/// Why a request did not decode.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum DecodeError {
    /// A part is shorter than its opcode needs.
    #[error("opcode {opcode}: {what} needs {need} bytes, got {got}")]
    Short {
        opcode: u32,
        what: &'static str,
        need: usize,
        got: usize,
    },
    /// A name is not NUL-terminated where the protocol says it is.
    #[error("opcode {opcode}: {what} is not NUL-terminated")]
    Unterminated { opcode: u32, what: &'static str },
}

/// `struct fuse_in_header`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InHeader {
    pub len: u32,
    pub opcode: u32,
    pub unique: u64,
    pub nodeid: u64,
    pub uid: u32,
    pub gid: u32,
    pub pid: u32,
}

impl InHeader {
    /// Decodes the first [`IN_HEADER_LEN`] bytes of `b`.
    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(b, 0, "fuse_in_header");
        let h = InHeader {
            len: r.u32()?,
            opcode: r.u32()?,
            unique: r.u64()?,
            nodeid: r.u64()?,
            uid: r.u32()?,
            gid: r.u32()?,
            pid: r.u32()?,
        };
        // total_extlen (no extensions are negotiated) and padding.
        r.u32()?;
        Ok(h)
    }

    /// Encodes as the kernel does (for tests and captured requests).
    pub fn encode(&self) -> [u8; IN_HEADER_LEN] {
        let mut b = [0u8; IN_HEADER_LEN];
        let mut w = Writer::new(&mut b);
        w.u32(self.len);
        w.u32(self.opcode);
        w.u64(self.unique);
        w.u64(self.nodeid);
        w.u32(self.uid);
        w.u32(self.gid);
        w.u32(self.pid);
        b
    }
}

/// `fuse_setattr_in`, as the changes it asks for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SetattrIn {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<TimeOrNow>,
    pub mtime: Option<TimeOrNow>,
    /// `FATTR_KILL_SUIDGID`: drop setuid/setgid (KILLPRIV_V2).
    pub kill_suidgid: bool,
}

/// A time a SETATTR sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeOrNow {
    At { sec: i64, nsec: u32 },
    Now,
}

/// A decoded request: what the kernel asks, borrowing names and data from
/// the ring entry's buffers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request<'a> {
    Lookup {
        name: &'a [u8],
    },
    Forget {
        nlookup: u64,
    },
    /// `(nodeid, nlookup)` pairs.
    BatchForget {
        nodes: Vec<(u64, u64)>,
    },
    Getattr,
    Setattr(SetattrIn),
    Readlink,
    Symlink {
        name: &'a [u8],
        target: &'a [u8],
    },
    Mknod {
        name: &'a [u8],
        mode: u32,
        umask: u32,
        rdev: u32,
    },
    Mkdir {
        name: &'a [u8],
        mode: u32,
        umask: u32,
    },
    Unlink {
        name: &'a [u8],
    },
    Rmdir {
        name: &'a [u8],
    },
    Rename {
        newdir: u64,
        name: &'a [u8],
        newname: &'a [u8],
        flags: u32,
    },
    Link {
        oldnodeid: u64,
        name: &'a [u8],
    },
    Open {
        flags: u32,
    },
    Read {
        fh: u64,
        offset: u64,
        size: u32,
        /// The open flags (`O_NOATIME`: the atime stays).
        flags: u32,
    },
    Write {
        fh: u64,
        offset: u64,
        data: &'a [u8],
        write_flags: u32,
        /// The open flags of the file written (`O_DIRECT`: a direct write).
        flags: u32,
    },
    Statfs,
    /// `syncfs(2)` of the mount (the kernel sends it only where it offers
    /// it: virtiofs today, not /dev/fuse).
    Syncfs,
    Release {
        fh: u64,
    },
    Fsync {
        datasync: bool,
    },
    Setxattr {
        name: &'a [u8],
        value: &'a [u8],
        flags: i32,
        /// `FUSE_SETXATTR_ACL_KILL_SGID` (only with `FUSE_SETXATTR_EXT`).
        kill_sgid: bool,
    },
    Getxattr {
        name: &'a [u8],
        size: u32,
    },
    Listxattr {
        size: u32,
    },
    Removexattr {
        name: &'a [u8],
    },
    Flush,
    Opendir {
        flags: u32,
    },
    Readdir {
        offset: u64,
        size: u32,
    },
    Readdirplus {
        offset: u64,
        size: u32,
    },
    Releasedir,
    Fsyncdir {
        datasync: bool,
    },
    Access {
        mask: u32,
    },
    Create {
        name: &'a [u8],
        mode: u32,
        umask: u32,
        flags: u32,
    },
    Tmpfile {
        mode: u32,
        umask: u32,
        flags: u32,
    },
    Destroy,
    Fallocate {
        offset: u64,
        length: u64,
        mode: i32,
    },
    Lseek {
        offset: i64,
        whence: i32,
    },
    /// `fuse_ioctl_in` and the caller's input bytes.
    Ioctl {
        cmd: u32,
        data: &'a [u8],
    },
    /// An opcode ptsd-fs does not handle: answered ENOSYS.
    Unsupported(u32),
}

/// The size of `opcode`'s argument struct (`op_in`) in a /dev/fuse read,
/// for protocol 7.23+ (what every kernel ptsd runs on speaks); 0 for the
/// opcodes whose first argument is a name or that have none, and for the
/// opcodes this codec does not know (their bytes all go to the payload).
pub fn op_in_len(op: u32) -> usize {
    use opcode::*;
    match op {
        FORGET | BATCH_FORGET | INTERRUPT => 8,
        GETATTR => 16,
        SETATTR => 88,
        MKNOD | CREATE | TMPFILE => 16,
        MKDIR | RENAME | LINK | OPEN | OPENDIR | GETXATTR | LISTXATTR | ACCESS | SYNCFS => 8,
        SETXATTR => 8,
        RENAME2 | FSYNC | FSYNCDIR => 16,
        READ | WRITE | READDIR | READDIRPLUS => 40,
        RELEASE | RELEASEDIR | FLUSH | LSEEK => 24,
        FALLOCATE | IOCTL => 32,
        _ => 0,
    }
}

/// `fuse_setxattr_in` with FUSE_SETXATTR_EXT agreed (`size`, `flags`,
/// `setxattr_flags`, padding); without, it is [`op_in_len`]'s 8 bytes.
pub const SETXATTR_IN_EXT_LEN: usize = 16;
/// `setxattr_flags`: clear setgid when setting the access ACL.
const SETXATTR_ACL_KILL_SGID: u32 = 1;

/// [`op_in_len`] once INIT agreed on FUSE_SETXATTR_EXT (`setxattr_ext`).
pub fn op_in_len_ext(op: u32, setxattr_ext: bool) -> usize {
    if op == opcode::SETXATTR && setxattr_ext {
        SETXATTR_IN_EXT_LEN
    } else {
        op_in_len(op)
    }
}

/// Splits one request as a /dev/fuse read returns it (`fuse_in_header`,
/// argument struct, payload, back to back) into its header and the two
/// parts [`decode`] takes. A read shorter than the argument struct gives
/// a short `op_in`, which [`decode`] refuses.
pub fn split(buf: &[u8]) -> Result<(InHeader, &[u8], &[u8]), DecodeError> {
    split_ext(buf, false)
}

/// [`split`] once INIT agreed on FUSE_SETXATTR_EXT (`setxattr_ext`: the
/// SETXATTR argument struct is longer).
pub fn split_ext(buf: &[u8], setxattr_ext: bool) -> Result<(InHeader, &[u8], &[u8]), DecodeError> {
    let h = InHeader::decode(buf)?;
    let end = (h.len as usize).clamp(IN_HEADER_LEN, buf.len());
    let body = &buf[IN_HEADER_LEN..end];
    let cut = op_in_len_ext(h.opcode, setxattr_ext).min(body.len());
    let (op_in, payload) = body.split_at(cut);
    Ok((h, op_in, payload))
}

/// Decodes one request from its three parts (see the module doc).
pub fn decode<'a>(
    h: &InHeader,
    op_in: &'a [u8],
    payload: &'a [u8],
) -> Result<Request<'a>, DecodeError> {
    use opcode::*;
    let op = h.opcode;
    let mut a = Reader::new(op_in, op, "op header");
    let mut p = Reader::new(payload, op, "payload");
    Ok(match op {
        LOOKUP => Request::Lookup {
            name: p.cstr("name")?,
        },
        FORGET => Request::Forget { nlookup: a.u64()? },
        BATCH_FORGET => {
            let count = a.u32()? as usize;
            let mut nodes = Vec::with_capacity(count.min(payload.len() / 16));
            for _ in 0..count {
                nodes.push((p.u64()?, p.u64()?));
            }
            Request::BatchForget { nodes }
        }
        GETATTR => Request::Getattr,
        SETATTR => Request::Setattr(setattr(&mut a)?),
        READLINK => Request::Readlink,
        SYMLINK => Request::Symlink {
            name: p.cstr("name")?,
            target: p.cstr("target")?,
        },
        MKNOD => {
            let (mode, rdev, umask) = (a.u32()?, a.u32()?, a.u32()?);
            Request::Mknod {
                name: p.cstr("name")?,
                mode,
                umask,
                rdev,
            }
        }
        MKDIR => {
            let (mode, umask) = (a.u32()?, a.u32()?);
            Request::Mkdir {
                name: p.cstr("name")?,
                mode,
                umask,
            }
        }
        UNLINK => Request::Unlink {
            name: p.cstr("name")?,
        },
        RMDIR => Request::Rmdir {
            name: p.cstr("name")?,
        },
        RENAME | RENAME2 => {
            let newdir = a.u64()?;
            let flags = if op == RENAME2 { a.u32()? } else { 0 };
            Request::Rename {
                newdir,
                flags,
                name: p.cstr("old name")?,
                newname: p.cstr("new name")?,
            }
        }
        LINK => Request::Link {
            oldnodeid: a.u64()?,
            name: p.cstr("name")?,
        },
        OPEN => Request::Open { flags: a.u32()? },
        OPENDIR => Request::Opendir { flags: a.u32()? },
        READ | READDIR | READDIRPLUS => {
            let (fh, offset, size) = (a.u64()?, a.u64()?, a.u32()?);
            match op {
                READ => {
                    let (_read_flags, _lock_owner) = (a.u32()?, a.u64()?);
                    Request::Read {
                        fh,
                        offset,
                        size,
                        flags: a.u32()?,
                    }
                }
                READDIR => Request::Readdir { offset, size },
                _ => Request::Readdirplus { offset, size },
            }
        }
        WRITE => {
            let (fh, offset, size, write_flags) = (a.u64()?, a.u64()?, a.u32()?, a.u32()?);
            let (_lock_owner, flags) = (a.u64()?, a.u32()?);
            Request::Write {
                fh,
                offset,
                write_flags,
                flags,
                data: p.bytes(size as usize, "write data")?,
            }
        }
        STATFS => Request::Statfs,
        SYNCFS => Request::Syncfs,
        RELEASE => Request::Release { fh: a.u64()? },
        RELEASEDIR => Request::Releasedir,
        FSYNC | FSYNCDIR => {
            let _fh = a.u64()?;
            let datasync = a.u32()? & FSYNC_FDATASYNC != 0;
            if op == FSYNC {
                Request::Fsync { datasync }
            } else {
                Request::Fsyncdir { datasync }
            }
        }
        SETXATTR => {
            let (size, flags) = (a.u32()?, a.u32()?);
            // `setxattr_flags` follows where FUSE_SETXATTR_EXT was agreed
            // (the caller passes the longer argument struct only then).
            let ext = if op_in.len() >= SETXATTR_IN_EXT_LEN {
                a.u32()?
            } else {
                0
            };
            Request::Setxattr {
                name: p.cstr("name")?,
                value: p.bytes(size as usize, "value")?,
                flags: flags as i32,
                kill_sgid: ext & SETXATTR_ACL_KILL_SGID != 0,
            }
        }
        GETXATTR => Request::Getxattr {
            size: a.u32()?,
            name: p.cstr("name")?,
        },
        LISTXATTR => Request::Listxattr { size: a.u32()? },
        REMOVEXATTR => Request::Removexattr {
            name: p.cstr("name")?,
        },
        FLUSH => Request::Flush,
        ACCESS => Request::Access { mask: a.u32()? },
        CREATE | TMPFILE => {
            let (flags, mode, umask) = (a.u32()?, a.u32()?, a.u32()?);
            if op == CREATE {
                Request::Create {
                    name: p.cstr("name")?,
                    mode,
                    umask,
                    flags,
                }
            } else {
                Request::Tmpfile { mode, umask, flags }
            }
        }
        DESTROY => Request::Destroy,
        FALLOCATE => {
            let (_fh, offset, length, mode) = (a.u64()?, a.u64()?, a.u64()?, a.u32()?);
            Request::Fallocate {
                offset,
                length,
                mode: mode as i32,
            }
        }
        LSEEK => {
            let (_fh, offset, whence) = (a.u64()?, a.u64()?, a.u32()?);
            Request::Lseek {
                offset: offset as i64,
                whence: whence as i32,
            }
        }
        IOCTL => {
            let (_fh, _flags, cmd, _arg) = (a.u64()?, a.u32()?, a.u32()?, a.u64()?);
            let in_size = a.u32()? as usize;
            Request::Ioctl {
                cmd,
                data: p.bytes(in_size, "ioctl input")?,
            }
        }
        other => Request::Unsupported(other),
    })
}

fn setattr(a: &mut Reader<'_>) -> Result<SetattrIn, DecodeError> {
    let valid = a.u32()?;
    let _padding = a.u32()?;
    let _fh = a.u64()?;
    let size = a.u64()?;
    let _lock_owner = a.u64()?;
    let (atime, mtime, _ctime) = (a.u64()?, a.u64()?, a.u64()?);
    let (atimensec, mtimensec, _ctimensec) = (a.u32()?, a.u32()?, a.u32()?);
    let mode = a.u32()?;
    let _unused4 = a.u32()?;
    let (uid, gid) = (a.u32()?, a.u32()?);
    let has = |bit| valid & bit != 0;
    let time = |set, now, sec: u64, nsec| {
        if has(now) {
            Some(TimeOrNow::Now)
        } else if has(set) {
            Some(TimeOrNow::At {
                sec: sec as i64,
                nsec,
            })
        } else {
            None
        }
    };
    Ok(SetattrIn {
        mode: has(fattr::MODE).then_some(mode),
        uid: has(fattr::UID).then_some(uid),
        gid: has(fattr::GID).then_some(gid),
        size: has(fattr::SIZE).then_some(size),
        atime: time(fattr::ATIME, fattr::ATIME_NOW, atime, atimensec),
        mtime: time(fattr::MTIME, fattr::MTIME_NOW, mtime, mtimensec),
        kill_suidgid: has(fattr::KILL_SUIDGID),
    })
}

/// Little-endian field reader over one part of a request.
struct Reader<'a> {
    b: &'a [u8],
    at: usize,
    opcode: u32,
    part: &'static str,
}

impl<'a> Reader<'a> {
    fn new(b: &'a [u8], opcode: u32, part: &'static str) -> Self {
        Reader {
            b,
            at: 0,
            opcode,
            part,
        }
    }

    fn bytes(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], DecodeError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len());
        let Some(end) = end else {
            return Err(DecodeError::Short {
                opcode: self.opcode,
                what: if what.is_empty() { self.part } else { what },
                need: self.at.saturating_add(n),
                got: self.b.len(),
            });
        };
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let s = self.bytes(N, "")?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u32(&mut self) -> Result<u32, DecodeError> {
        self.array().map(u32::from_le_bytes)
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        self.array().map(u64::from_le_bytes)
    }

    /// A NUL-terminated name, without its NUL.
    fn cstr(&mut self, what: &'static str) -> Result<&'a [u8], DecodeError> {
        let rest = &self.b[self.at.min(self.b.len())..];
        let Some(n) = rest.iter().position(|&c| c == 0) else {
            return Err(DecodeError::Unterminated {
                opcode: self.opcode,
                what,
            });
        };
        self.at += n + 1;
        Ok(&rest[..n])
    }
}

/// Little-endian field writer; the caller sizes the buffer.
pub(crate) struct Writer<'a> {
    b: &'a mut [u8],
    at: usize,
}

impl<'a> Writer<'a> {
    pub(crate) fn new(b: &'a mut [u8]) -> Self {
        Writer { b, at: 0 }
    }
    pub(crate) fn put(&mut self, s: &[u8]) {
        self.b[self.at..self.at + s.len()].copy_from_slice(s);
        self.at += s.len();
    }
    pub(crate) fn u32(&mut self, v: u32) {
        self.put(&v.to_le_bytes());
    }
    pub(crate) fn u64(&mut self, v: u64) {
        self.put(&v.to_le_bytes());
    }
}

/// `struct fuse_attr` as a reply carries it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FuseAttr {
    pub ino: u64,
    pub size: u64,
    pub blocks: u64,
    pub atime: (i64, u32),
    pub mtime: (i64, u32),
    pub ctime: (i64, u32),
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u32,
    pub blksize: u32,
}

impl FuseAttr {
    fn put(&self, w: &mut Writer<'_>) {
        w.u64(self.ino);
        w.u64(self.size);
        w.u64(self.blocks);
        w.u64(self.atime.0 as u64);
        w.u64(self.mtime.0 as u64);
        w.u64(self.ctime.0 as u64);
        w.u32(self.atime.1);
        w.u32(self.mtime.1);
        w.u32(self.ctime.1);
        w.u32(self.mode);
        w.u32(self.nlink);
        w.u32(self.uid);
        w.u32(self.gid);
        w.u32(self.rdev);
        w.u32(self.blksize);
        w.u32(0); // flags
    }
}

/// `struct fuse_entry_out`: a node id, its generation, its attributes, and
/// how long the kernel may keep entry and attributes (`valid`, seconds).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EntryOut {
    pub nodeid: u64,
    pub generation: u64,
    pub valid: u64,
    pub attr: FuseAttr,
}

impl EntryOut {
    pub(crate) fn put(&self, w: &mut Writer<'_>) {
        w.u64(self.nodeid);
        w.u64(self.generation);
        w.u64(self.valid); // entry_valid
        w.u64(self.valid); // attr_valid
        w.u32(0);
        w.u32(0);
        self.attr.put(w);
    }
}

/// What a request is answered with; [`Response::encode`] lays it out in a
/// ring entry's payload buffer once the request (which borrows that buffer)
/// is done with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Response {
    /// Success without a payload.
    Empty,
    /// Failure with this (positive) errno.
    Error(i32),
    Entry(EntryOut),
    Attr {
        valid: u64,
        attr: FuseAttr,
    },
    Open {
        fh: u64,
        flags: u32,
    },
    /// CREATE and TMPFILE: a `fuse_entry_out` then a `fuse_open_out`.
    Create {
        entry: EntryOut,
        fh: u64,
        flags: u32,
    },
    /// Raw bytes: file data, a link target, an xattr value or list, or
    /// dirents from a [`DirBuf`].
    Data(Vec<u8>),
    Written(u32),
    /// `fuse_getxattr_out`: the size a value or list needs.
    XattrSize(u32),
    Offset(u64),
    Statfs(StatfsOut),
    /// `fuse_ioctl_out` (result 0, no retry) then the output bytes.
    Ioctl(Vec<u8>),
}

/// `struct fuse_kstatfs`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatfsOut {
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
    pub bsize: u32,
    pub namelen: u32,
    pub frsize: u32,
}

impl Response {
    /// The payload length this response takes.
    pub fn len(&self) -> usize {
        match self {
            Response::Empty | Response::Error(_) => 0,
            Response::Entry(_) => ENTRY_OUT_LEN,
            Response::Attr { .. } => ATTR_OUT_LEN,
            Response::Open { .. } => OPEN_OUT_LEN,
            Response::Create { .. } => ENTRY_OUT_LEN + OPEN_OUT_LEN,
            Response::Data(d) => d.len(),
            Response::Written(_) | Response::XattrSize(_) | Response::Offset(_) => 8,
            Response::Statfs(_) => 80,
            Response::Ioctl(d) => 16 + d.len(),
        }
    }

    /// True for a response without payload.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes the payload into `buf`; returns the out header's error (0 or
    /// a negative errno) and the payload length. A payload larger than
    /// `buf` (which holds the largest the kernel may ask for) becomes EIO.
    pub fn encode(&self, buf: &mut [u8]) -> (i32, usize) {
        let n = self.len();
        if let Response::Error(e) = self {
            return (-e.abs(), 0);
        }
        let Some(b) = buf.get_mut(..n) else {
            return (-libc::EIO, 0);
        };
        let mut w = Writer::new(b);
        match self {
            Response::Empty | Response::Error(_) => {}
            Response::Entry(e) => e.put(&mut w),
            Response::Attr { valid, attr } => {
                w.u64(*valid);
                w.u32(0);
                w.u32(0);
                attr.put(&mut w);
            }
            Response::Open { fh, flags } => put_open(&mut w, *fh, *flags),
            Response::Create { entry, fh, flags } => {
                entry.put(&mut w);
                put_open(&mut w, *fh, *flags);
            }
            Response::Data(d) => w.put(d),
            Response::Written(v) | Response::XattrSize(v) => {
                w.u32(*v);
                w.u32(0);
            }
            Response::Offset(o) => w.u64(*o),
            Response::Ioctl(d) => {
                for v in [0, 0, 0, 0] {
                    w.u32(v);
                }
                w.put(d);
            }
            Response::Statfs(s) => {
                for v in [s.blocks, s.bfree, s.bavail, s.files, s.ffree] {
                    w.u64(v);
                }
                for v in [s.bsize, s.namelen, s.frsize, 0, 0, 0, 0, 0, 0, 0] {
                    w.u32(v);
                }
            }
        }
        (0, n)
    }
}

fn put_open(w: &mut Writer<'_>, fh: u64, flags: u32) {
    w.u64(fh);
    w.u32(flags);
    w.u32(0);
}

/// READDIR / READDIRPLUS replies: dirents up to the size the kernel asked.
pub struct DirBuf {
    v: Vec<u8>,
    max: usize,
}

impl DirBuf {
    /// At most `max` bytes of entries.
    pub fn new(max: usize) -> Self {
        DirBuf {
            v: Vec::with_capacity(max.min(64 << 10)),
            max,
        }
    }

    /// Appends a `fuse_dirent`; false when it does not fit (stop there).
    pub fn add(&mut self, ino: u64, next: u64, kind: u32, name: &[u8]) -> bool {
        let n = dirent_len(name.len());
        if self.v.len() + n > self.max {
            return false;
        }
        self.v.extend_from_slice(&dirent(ino, next, kind, name, n));
        true
    }

    /// Appends a `fuse_direntplus`; false when it does not fit.
    pub fn add_plus(&mut self, e: &EntryOut, next: u64, kind: u32, name: &[u8]) -> bool {
        let d = dirent_len(name.len());
        if self.v.len() + ENTRY_OUT_LEN + d > self.max {
            return false;
        }
        let mut b = [0u8; ENTRY_OUT_LEN];
        e.put(&mut Writer::new(&mut b));
        self.v.extend_from_slice(&b);
        self.v
            .extend_from_slice(&dirent(e.nodeid, next, kind, name, d));
        true
    }

    /// The reply.
    pub fn into_response(self) -> Response {
        Response::Data(self.v)
    }
}

fn dirent_len(name: usize) -> usize {
    (24 + name + 7) & !7
}

fn dirent(ino: u64, next: u64, kind: u32, name: &[u8], n: usize) -> Vec<u8> {
    let mut b = vec![0u8; n];
    let mut w = Writer::new(&mut b);
    w.u64(ino);
    w.u64(next);
    w.u32(name.len() as u32);
    w.u32(kind);
    w.put(name);
    b
}

/// `struct fuse_out_header` for a reply to `unique`.
pub fn out_header(unique: u64, error: i32, payload: usize) -> [u8; OUT_HEADER_LEN] {
    let mut b = [0u8; OUT_HEADER_LEN];
    let mut w = Writer::new(&mut b);
    w.u32((OUT_HEADER_LEN + payload) as u32);
    w.u32(error as u32);
    w.u64(unique);
    b
}

#[cfg(test)]
#[path = "proto_tests.rs"]
mod tests;
