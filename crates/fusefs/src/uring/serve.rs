//! The io_uring transport's answers: each request becomes the same
//! [`FileSystem`] call, with the same replies, as [`crate::fuse::FuseFs`]
//! makes for fuser on /dev/fuse.

use std::sync::Arc;

use super::proto::{
    DirBuf, EntryOut, FuseAttr, InHeader, Request, Response, SetattrIn, StatfsOut, TimeOrNow,
    WRITE_KILL_SUIDGID,
};
use super::Handler;
use crate::error::Errno;
use crate::filesystem::{Attr, Caller, FileSystem, Seek, SetAttr, SetTime};
use crate::format::Ts;
use crate::fuse::{open_reply_flags, TTL};
use crate::opcount::{Op, OpCounts};

/// Serves a [`FileSystem`] over the rings.
pub struct FsHandler {
    fs: Arc<FileSystem>,
    root: u64,
    killpriv_v2: bool,
    counts: Option<Arc<OpCounts>>,
    direct_writes: bool,
}

impl FsHandler {
    /// Answers for `fs`; `killpriv_v2` as INIT agreed (see `FuseFs`);
    /// counts requests into `counts` as `Counted` does on /dev/fuse.
    pub fn new(fs: Arc<FileSystem>, killpriv_v2: bool, counts: Option<Arc<OpCounts>>) -> Self {
        let root = fs.root();
        FsHandler {
            fs,
            root,
            killpriv_v2,
            counts,
            direct_writes: true,
        }
    }

    /// Whether write-only opens bypass the kernel's page cache (on by
    /// default), as [`crate::fuse::FuseFs::direct_writes`].
    pub fn direct_writes(mut self, on: bool) -> Self {
        self.direct_writes = on;
        self
    }

    fn ino(&self, n: u64) -> u64 {
        if n == 1 {
            self.root
        } else {
            n
        }
    }

    fn fuse_ino(&self, i: u64) -> u64 {
        if i == self.root {
            1
        } else {
            i
        }
    }

    fn attr(&self, a: &Attr) -> FuseAttr {
        FuseAttr {
            ino: self.fuse_ino(a.ino),
            size: a.size,
            blocks: a.blocks,
            atime: (a.atime.sec, a.atime.nsec),
            mtime: (a.mtime.sec, a.mtime.nsec),
            ctime: (a.ctime.sec, a.ctime.nsec),
            mode: a.mode,
            nlink: a.nlink,
            uid: a.uid,
            gid: a.gid,
            rdev: a.rdev,
            blksize: 4096,
        }
    }

    fn entry_out(&self, a: &Attr) -> EntryOut {
        EntryOut {
            nodeid: self.fuse_ino(a.ino),
            generation: a.generation,
            valid: TTL.as_secs(),
            attr: self.attr(a),
        }
    }

    fn entry(&self, r: Result<Attr, Errno>) -> Response {
        match r {
            Ok(a) => Response::Entry(self.entry_out(&a)),
            Err(e) => Response::Error(e.0),
        }
    }

    fn attr_reply(&self, r: Result<Attr, Errno>) -> Response {
        match r {
            Ok(a) => Response::Attr {
                valid: TTL.as_secs(),
                attr: self.attr(&a),
            },
            Err(e) => Response::Error(e.0),
        }
    }

    fn bump(&self, op: Op) {
        if let Some(c) = &self.counts {
            c.bump(op);
        }
    }

    fn count(&self, req: &Request<'_>) {
        let op = match req {
            Request::Lookup { .. } => Op::Lookup,
            Request::Forget { .. } | Request::BatchForget { .. } => Op::Forget,
            Request::Getattr => Op::Getattr,
            Request::Setattr(_) => Op::Setattr,
            Request::Readlink => Op::Readlink,
            Request::Symlink { .. } => Op::Symlink,
            Request::Mknod { .. } => Op::Mknod,
            Request::Mkdir { .. } => Op::Mkdir,
            Request::Unlink { .. } => Op::Unlink,
            Request::Rmdir { .. } => Op::Rmdir,
            Request::Rename { .. } => Op::Rename,
            Request::Link { .. } => Op::Link,
            Request::Open { .. } => Op::Open,
            Request::Read { .. } => Op::Read,
            Request::Write { .. } => Op::Write,
            Request::Statfs => Op::Statfs,
            Request::Release { .. } => Op::Release,
            Request::Fsync { .. } => Op::Fsync,
            Request::Setxattr { .. } => Op::Setxattr,
            Request::Getxattr { .. } => Op::Getxattr,
            Request::Listxattr { .. } => Op::Listxattr,
            Request::Removexattr { .. } => Op::Removexattr,
            Request::Flush => Op::Flush,
            Request::Opendir { .. } => Op::Opendir,
            Request::Readdir { .. } => Op::Readdir,
            Request::Readdirplus { .. } => Op::Readdirplus,
            Request::Releasedir => Op::Releasedir,
            Request::Fsyncdir { .. } => Op::Fsyncdir,
            Request::Access { .. } => Op::Access,
            Request::Create { .. } | Request::Tmpfile { .. } => Op::Create,
            Request::Fallocate { .. } => Op::Fallocate,
            Request::Lseek { .. } => Op::Lseek,
            Request::Ioctl { .. } => Op::Ioctl,
            Request::Destroy | Request::Unsupported(_) => return,
        };
        self.bump(op);
    }

    fn negative_entry() -> Response {
        // A negative entry (node id 0) lets the kernel cache "no such
        // name" too, as on /dev/fuse.
        Response::Entry(EntryOut {
            nodeid: 0,
            generation: 0,
            valid: TTL.as_secs(),
            attr: FuseAttr {
                mode: libc::S_IFREG,
                blksize: 4096,
                ..FuseAttr::default()
            },
        })
    }
}

fn set_time(t: TimeOrNow) -> SetTime {
    match t {
        TimeOrNow::Now => SetTime::Now,
        TimeOrNow::At { sec, nsec } => SetTime::At(Ts { sec, nsec }),
    }
}

fn empty(r: Result<(), Errno>) -> Response {
    match r {
        Ok(()) => Response::Empty,
        Err(e) => Response::Error(e.0),
    }
}

fn xattr(v: Result<Vec<u8>, Errno>, size: u32) -> Response {
    match v {
        Ok(v) if size == 0 => Response::XattrSize(v.len() as u32),
        Ok(v) if v.len() <= size as usize => Response::Data(v),
        Ok(_) => Response::Error(libc::ERANGE),
        Err(e) => Response::Error(e.0),
    }
}

impl Handler for FsHandler {
    fn work_due(&self) -> bool {
        self.fs.trim_is_due()
    }
    fn after_reply(&self) {
        self.fs.trim_if_due()
    }
    fn handle(&self, h: &InHeader, req: Request<'_>) -> Response {
        self.count(&req);
        let fs = &*self.fs;
        let ino = self.ino(h.nodeid);
        let who = Caller {
            uid: h.uid,
            gid: h.gid,
        };
        match req {
            Request::Lookup { name } => match fs.lookup(ino, name) {
                Err(Errno::ENOENT) => Self::negative_entry(),
                r => self.entry(r),
            },
            Request::Forget { nlookup } => {
                fs.forget(ino, nlookup);
                Response::Empty
            }
            Request::BatchForget { nodes } => {
                for (n, count) in nodes {
                    fs.forget(self.ino(n), count);
                }
                Response::Empty
            }
            Request::Getattr => self.attr_reply(fs.getattr(ino)),
            Request::Setattr(s) => self.setattr(ino, s),
            Request::Readlink => match fs.readlink(ino) {
                Ok(t) => Response::Data(t),
                Err(e) => Response::Error(e.0),
            },
            Request::Symlink { name, target } => self.entry(fs.symlink(ino, name, target, who)),
            Request::Mknod {
                name,
                mode,
                umask,
                rdev,
            } => self.entry(fs.mknod_umask(ino, name, mode, rdev, umask, who)),
            Request::Mkdir { name, mode, umask } => {
                self.entry(fs.mkdir_umask(ino, name, mode, umask, who))
            }
            Request::Unlink { name } => empty(fs.unlink(ino, name)),
            Request::Rmdir { name } => empty(fs.rmdir(ino, name)),
            Request::Rename {
                newdir,
                name,
                newname,
                flags,
            } => empty(fs.rename(ino, name, self.ino(newdir), newname, flags)),
            Request::Link { oldnodeid, name } => {
                self.entry(fs.link(self.ino(oldnodeid), ino, name))
            }
            Request::Open { flags } => match fs.open(ino) {
                Ok(_) => Response::Open {
                    fh: 0,
                    flags: open_reply_flags(flags, self.direct_writes),
                },
                Err(e) => Response::Error(e.0),
            },
            Request::Read { offset, size, .. } => match fs.read(ino, offset, size) {
                Ok(d) => Response::Data(d),
                Err(e) => Response::Error(e.0),
            },
            Request::Write {
                offset,
                data,
                write_flags,
                ..
            } => {
                let kill = self.killpriv_v2 && write_flags & WRITE_KILL_SUIDGID != 0;
                match fs.write_as(ino, offset, data, kill) {
                    Ok(n) => Response::Written(n),
                    Err(e) => Response::Error(e.0),
                }
            }
            Request::Statfs => {
                let s = fs.statfs();
                Response::Statfs(StatfsOut {
                    blocks: s.blocks,
                    bfree: s.bfree,
                    bavail: s.bfree,
                    files: s.files,
                    ffree: s.ffree,
                    bsize: s.bsize,
                    namelen: s.namelen,
                    frsize: s.bsize,
                })
            }
            Request::Release { .. } => empty(fs.release(ino)),
            Request::Fsync { .. } | Request::Fsyncdir { .. } => empty(fs.fsync()),
            Request::Setxattr { name, value, flags } => empty(fs.setxattr(ino, name, value, flags)),
            Request::Getxattr { name, size } => xattr(fs.getxattr(ino, name), size),
            Request::Listxattr { size } => xattr(fs.listxattr(ino), size),
            Request::Removexattr { name } => empty(fs.removexattr(ino, name)),
            // As on /dev/fuse: nothing to do at close; ENOSYS stops FLUSH.
            Request::Flush => Response::Error(libc::ENOSYS),
            Request::Opendir { .. } => match fs.opendir(ino) {
                Ok(_) => Response::Open { fh: 0, flags: 0 },
                Err(e) => Response::Error(e.0),
            },
            Request::Readdir { offset, size } => self.readdir(ino, offset, size, false),
            Request::Readdirplus { offset, size } => self.readdir(ino, offset, size, true),
            Request::Releasedir => empty(fs.releasedir(ino)),
            Request::Ioctl { cmd, data } => match fs.ioctl(who, cmd, data) {
                Ok(out) => Response::Ioctl(out),
                Err(e) => Response::Error(e.0),
            },
            Request::Access { .. } => empty(fs.getattr(ino).map(|_| ())),
            Request::Create {
                name,
                mode,
                umask,
                flags,
            } => self.created(fs.create_umask(ino, name, mode, umask, who), flags),
            Request::Tmpfile { mode, umask, flags } => {
                self.created(fs.tmpfile_umask(ino, mode, umask, who), flags)
            }
            Request::Destroy => {
                if let Err(e) = fs.close() {
                    tracing::error!("clean unmount failed: {e}");
                }
                Response::Empty
            }
            Request::Fallocate {
                offset,
                length,
                mode,
            } => {
                // No kill flag on FALLOCATE: the caller's CAP_FSETID decides.
                let kill = self.killpriv_v2 && crate::caps::lacks_fsetid(h.pid, h.uid);
                empty(fs.fallocate_as(ino, offset, length, mode, kill))
            }
            Request::Lseek { offset, whence } => {
                let what = match whence {
                    libc::SEEK_DATA => Seek::Data,
                    libc::SEEK_HOLE => Seek::Hole,
                    _ => return Response::Error(libc::EINVAL),
                };
                let Ok(offset) = u64::try_from(offset) else {
                    return Response::Error(libc::ENXIO);
                };
                match fs.seek(ino, offset, what) {
                    Ok(at) => Response::Offset(at),
                    Err(e) => Response::Error(e.0),
                }
            }
            Request::Unsupported(_) => Response::Error(libc::ENOSYS),
        }
    }
}

impl FsHandler {
    fn setattr(&self, ino: u64, s: SetattrIn) -> Response {
        let set = SetAttr {
            mode: s.mode,
            uid: s.uid,
            gid: s.gid,
            size: s.size,
            atime: s.atime.map(set_time),
            mtime: s.mtime.map(set_time),
            // The kernel says so itself here (FATTR_KILL_SUIDGID, for a
            // caller without CAP_FSETID); fuser does not pass that flag on,
            // so the /dev/fuse side infers it from the caller's uid.
            kill_priv: self.killpriv_v2 && s.size.is_some() && s.mode.is_none() && s.kill_suidgid,
        };
        self.attr_reply(self.fs.setattr(ino, set))
    }

    /// The reply to CREATE or TMPFILE of a file opened with `open_flags`.
    fn created(&self, r: Result<Attr, Errno>, open_flags: u32) -> Response {
        match r {
            Ok(a) => Response::Create {
                entry: self.entry_out(&a),
                fh: 0,
                flags: open_reply_flags(open_flags, self.direct_writes),
            },
            Err(e) => Response::Error(e.0),
        }
    }

    fn readdir(&self, dir: u64, offset: u64, size: u32, plus: bool) -> Response {
        let fs = &*self.fs;
        let entries = match fs.readdir(dir, offset, if plus { 256 } else { 512 }) {
            Ok(e) => e,
            Err(e) => return Response::Error(e.0),
        };
        let mut buf = DirBuf::new(size as usize);
        for e in entries {
            let kind = u32::from(e.kind);
            if !plus {
                if !buf.add(self.fuse_ino(e.ino), e.next, kind, &e.name) {
                    break;
                }
                continue;
            }
            let Ok(attr) = fs.getattr(e.ino) else {
                continue;
            };
            if !buf.add_plus(&self.entry_out(&attr), e.next, kind, &e.name) {
                break;
            }
            // The kernel takes a reference to every entry but `.` and
            // `..`, and will FORGET it.
            if e.name != b"." && e.name != b".." {
                let _ = fs.remember(e.ino);
            }
        }
        buf.into_response()
    }
}

#[cfg(test)]
#[path = "serve_tests.rs"]
mod tests;
