//! The file system's [`Handler`]: each FUSE request becomes one
//! [`FileSystem`] call, whichever transport brought it.

use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex, OnceLock};

use super::proto::{
    DirBuf, EntryOut, FuseAttr, InHeader, Request, Response, SetattrIn, StatfsOut, TimeOrNow,
};
use super::{Handler, Notifier, Policy};
use crate::error::Errno;
use crate::filesystem::{Attr, Caller, FileSystem, Seek, SetAttr, SetTime};
use crate::format::Ts;

/// Serves a [`FileSystem`] through the [`super::Frontend`].
pub struct FsHandler {
    fs: Arc<FileSystem>,
    root: u64,
    /// Page ranges (node id, offset, length) direct writes replaced, for
    /// the thread that tells the kernel (see [`Handler::connected`]).
    stale_pages: OnceLock<Mutex<Sender<(u64, u64, u64)>>>,
}

impl FsHandler {
    /// Answers for `fs`.
    pub fn new(fs: Arc<FileSystem>) -> Self {
        let root = fs.root();
        FsHandler {
            fs,
            root,
            stale_pages: OnceLock::new(),
        }
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

    fn entry_out(&self, p: &Policy, a: &Attr) -> EntryOut {
        p.entry(self.fuse_ino(a.ino), a.generation, self.attr(a))
    }

    fn entry(&self, p: &Policy, r: Result<Attr, Errno>) -> Response {
        match r {
            Ok(a) => Response::Entry(self.entry_out(p, &a)),
            Err(e) => Response::Error(e.0),
        }
    }

    fn attr_reply(&self, p: &Policy, r: Result<Attr, Errno>) -> Response {
        match r {
            Ok(a) => Response::Attr {
                valid: p.valid(),
                attr: self.attr(&a),
            },
            Err(e) => Response::Error(e.0),
        }
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
    fn connected(&self, notifier: Notifier) {
        // Set-id bits a write or fallocate dropped: the kernel's cached
        // mode too (attributes only: offset -1 keeps the pages).
        let root = self.root;
        let n = notifier.clone();
        self.fs.set_attr_invalidator(Box::new(move |ino| {
            let id = if ino == root { 1 } else { ino };
            if let Err(e) = n.inval_inode(id, -1, 0) {
                // ENOENT: the kernel holds no such inode, nothing is stale.
                tracing::debug!("invalidating the attributes of inode {ino}: {e}");
            }
        }));
        // A direct write's range: the kernel's cached pages of it are
        // stale (issue 45 §2: an AIO O_DIRECT write completes without the
        // kernel invalidating them after it). From a thread of its own: the
        // kernel locks the pages to drop them, and a buffered reader
        // holding one waits for a READ that the serving thread, were it
        // the one notifying, could never answer (one thread per io_uring
        // queue).
        let (tx, rx) = mpsc::channel::<(u64, u64, u64)>();
        let spawned = std::thread::Builder::new()
            .name("ptsd-fs-inval".into())
            .spawn(move || {
                for (id, off, len) in rx {
                    let (off, len) = (off as i64, len as i64);
                    if let Err(e) = notifier.inval_inode(id, off, len) {
                        tracing::debug!("invalidating pages of node {id}: {e}");
                    }
                }
            });
        match spawned {
            Ok(_) => {
                let _ = self.stale_pages.set(Mutex::new(tx));
            }
            Err(e) => tracing::warn!("no page invalidation after direct writes: {e}"),
        }
    }

    fn handle(&self, p: &Policy, h: &InHeader, req: Request<'_>) -> Response {
        let fs = &*self.fs;
        let ino = self.ino(h.nodeid);
        let who = Caller {
            uid: h.uid,
            gid: h.gid,
        };
        match req {
            Request::Lookup { name } => match fs.lookup(ino, name) {
                Err(Errno::ENOENT) => p.negative_entry(),
                r => self.entry(p, r),
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
            Request::Getattr => self.attr_reply(p, fs.getattr(ino)),
            Request::Setattr(s) => self.setattr(p, ino, s),
            Request::Readlink => match fs.readlink(ino) {
                Ok(t) => Response::Data(t),
                Err(e) => Response::Error(e.0),
            },
            Request::Symlink { name, target } => self.entry(p, fs.symlink(ino, name, target, who)),
            Request::Mknod {
                name,
                mode,
                umask,
                rdev,
            } => self.entry(p, fs.mknod_umask(ino, name, mode, rdev, umask, who)),
            Request::Mkdir { name, mode, umask } => {
                self.entry(p, fs.mkdir_umask(ino, name, mode, umask, who))
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
                self.entry(p, fs.link(self.ino(oldnodeid), ino, name))
            }
            Request::Open { flags } => match fs.open(ino) {
                Ok(_) => Response::Open {
                    fh: 0,
                    flags: p.open_flags(flags),
                },
                Err(e) => Response::Error(e.0),
            },
            Request::Read {
                offset,
                size,
                flags,
                ..
            } => match fs.read_access(ino, offset, size, flags & libc::O_NOATIME as u32 == 0) {
                Ok(d) => Response::Data(d),
                Err(e) => Response::Error(e.0),
            },
            Request::Write {
                offset,
                data,
                write_flags,
                flags,
                ..
            } => match fs.write_as(ino, offset, data, p.write_kills_suidgid(write_flags)) {
                Ok(n) => {
                    if flags & libc::O_DIRECT as u32 != 0 && n > 0 {
                        self.pages_stale(h.nodeid, offset, u64::from(n));
                    }
                    Response::Written(n)
                }
                Err(e) => Response::Error(e.0),
            },
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
            Request::Fsync { .. } | Request::Fsyncdir { .. } | Request::Syncfs => empty(fs.fsync()),
            Request::Setxattr {
                name,
                value,
                flags,
                kill_sgid,
            } => empty(fs.setxattr_ext(ino, name, value, flags, kill_sgid)),
            Request::Getxattr { name, size } => xattr(fs.getxattr(ino, name), size),
            Request::Listxattr { size } => xattr(fs.listxattr(ino), size),
            Request::Removexattr { name } => empty(fs.removexattr(ino, name)),
            // As on /dev/fuse: nothing to do at close; ENOSYS stops FLUSH.
            Request::Flush => Response::Error(libc::ENOSYS),
            Request::Opendir { .. } => match fs.opendir(ino) {
                Ok(_) => Response::Open { fh: 0, flags: 0 },
                Err(e) => Response::Error(e.0),
            },
            Request::Readdir { offset, size } => self.readdir(p, ino, offset, size, false),
            Request::Readdirplus { offset, size } => self.readdir(p, ino, offset, size, true),
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
            } => self.created(p, fs.create_umask(ino, name, mode, umask, who), flags),
            Request::Tmpfile { mode, umask, flags } => {
                self.created(p, fs.tmpfile_umask(ino, mode, umask, who), flags)
            }
            Request::Destroy => {
                if let Err(e) = fs.close() {
                    tracing::error!("clean unmount failed: {}", ptsd_blockdev::ErrorChain(&e));
                }
                Response::Empty
            }
            Request::Fallocate {
                offset,
                length,
                mode,
            } => {
                // No kill flag on FALLOCATE: the caller's CAP_FSETID decides.
                let kill = p.killpriv_v2 && crate::caps::lacks_fsetid(h.pid, h.uid);
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
    fn setattr(&self, p: &Policy, ino: u64, s: SetattrIn) -> Response {
        let set = SetAttr {
            mode: s.mode,
            uid: s.uid,
            gid: s.gid,
            size: s.size,
            atime: s.atime.map(set_time),
            mtime: s.mtime.map(set_time),
            kill_priv: p.setattr_kills_priv(&s),
        };
        self.attr_reply(p, self.fs.setattr(ino, set))
    }

    /// The kernel's cached pages of `[offset, offset + len)` of node `id`
    /// are stale: have them dropped (shortly after, from the notifying
    /// thread).
    fn pages_stale(&self, id: u64, offset: u64, len: u64) {
        if let Some(tx) = self.stale_pages.get() {
            let _ = tx
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .send((id, offset, len));
        }
    }

    /// The reply to CREATE or TMPFILE of a file opened with `open_flags`.
    fn created(&self, p: &Policy, r: Result<Attr, Errno>, open_flags: u32) -> Response {
        match r {
            Ok(a) => Response::Create {
                entry: self.entry_out(p, &a),
                fh: 0,
                flags: p.open_flags(open_flags),
            },
            Err(e) => Response::Error(e.0),
        }
    }

    fn readdir(&self, p: &Policy, dir: u64, offset: u64, size: u32, plus: bool) -> Response {
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
            if !buf.add_plus(&self.entry_out(p, &attr), e.next, kind, &e.name) {
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
#[path = "handler_tests.rs"]
mod tests;
