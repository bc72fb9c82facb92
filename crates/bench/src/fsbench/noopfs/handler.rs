//! The no-op fs's [`Handler`]: the few dozen lines that make it a file
//! system. Everything else — mount, INIT, both transports, op counting,
//! the reply policy — is ptsd-fs's own front end, as for ptsd-fs.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use fuser::{Errno, FileAttr, FileType, TimeOrNow};
use ptsd_fs::frontend::proto::{
    self, DirBuf, EntryOut, FuseAttr, InHeader, Request, Response, StatfsOut,
};
use ptsd_fs::frontend::{Handler, Policy};

use super::{new_attr, Content, Entries, NoopFs};

fn secs(t: SystemTime) -> (i64, u32) {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => (d.as_secs() as i64, d.subsec_nanos()),
        Err(_) => (0, 0),
    }
}

fn kind_bits(k: FileType) -> u32 {
    match k {
        FileType::Directory => libc::S_IFDIR,
        FileType::Symlink => libc::S_IFLNK,
        FileType::NamedPipe => libc::S_IFIFO,
        FileType::CharDevice => libc::S_IFCHR,
        FileType::BlockDevice => libc::S_IFBLK,
        FileType::Socket => libc::S_IFSOCK,
        _ => libc::S_IFREG,
    }
}

fn fattr(a: &FileAttr) -> FuseAttr {
    FuseAttr {
        ino: a.ino.0,
        size: a.size,
        blocks: a.blocks,
        atime: secs(a.atime),
        mtime: secs(a.mtime),
        ctime: secs(a.ctime),
        mode: kind_bits(a.kind) | u32::from(a.perm),
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize: a.blksize,
    }
}

fn entry(p: &Policy, a: &FileAttr) -> EntryOut {
    p.entry(a.ino.0, 0, fattr(a))
}

fn err(e: Errno) -> Response {
    Response::Error(e.code())
}

fn time(t: proto::TimeOrNow) -> TimeOrNow {
    match t {
        proto::TimeOrNow::Now => TimeOrNow::Now,
        proto::TimeOrNow::At { sec, nsec } => TimeOrNow::SpecificTime(
            SystemTime::UNIX_EPOCH + Duration::new(sec.max(0) as u64, nsec.min(999_999_999)),
        ),
    }
}

impl Handler for NoopFs {
    fn handle(&self, p: &Policy, h: &InHeader, req: Request<'_>) -> Response {
        let fs = self;
        let ino = h.nodeid;
        let os = OsStr::from_bytes;
        let r = |res: Result<FileAttr, Errno>| match res {
            Ok(a) => Response::Entry(entry(p, &a)),
            Err(e) => err(e),
        };
        let attr = |res: Result<FileAttr, Errno>| match res {
            Ok(a) => Response::Attr {
                valid: p.valid(),
                attr: fattr(&a),
            },
            Err(e) => err(e),
        };
        let empty = |res: Result<(), Errno>| res.map_or_else(err, |()| Response::Empty);
        match req {
            Request::Lookup { name } => {
                match fs.child(ino, os(name)).and_then(|(i, _)| fs.attr(i)) {
                    Ok(a) => Response::Entry(entry(p, &a)),
                    Err(Errno::ENOENT) => p.negative_entry(),
                    Err(e) => err(e),
                }
            }
            Request::Getattr => attr(fs.attr(ino)),
            Request::Setattr(s) => attr(fs.set_attr(
                ino,
                s.mode,
                s.uid,
                s.gid,
                s.size,
                s.atime.map(time),
                s.mtime.map(time),
            )),
            Request::Mkdir { name, mode, umask } => {
                let a = new_attr(
                    FileType::Directory,
                    (mode & !umask & 0o7777) as u16,
                    (h.uid, h.gid),
                );
                let content = Content::Dir {
                    parent: ino,
                    entries: Entries::new(),
                };
                r(fs.insert(ino, os(name), a, content))
            }
            Request::Create {
                name,
                mode,
                umask,
                flags,
            } => {
                let a = new_attr(
                    FileType::RegularFile,
                    (mode & !umask & 0o7777) as u16,
                    (h.uid, h.gid),
                );
                match fs.insert(ino, os(name), a, Content::File(Vec::new())) {
                    Ok(a) => Response::Create {
                        entry: entry(p, &a),
                        fh: 0,
                        flags: p.open_flags(flags),
                    },
                    Err(e) => err(e),
                }
            }
            Request::Unlink { name } => empty(fs.remove(ino, os(name), false)),
            Request::Rmdir { name } => empty(fs.remove(ino, os(name), true)),
            Request::Rename {
                newdir,
                name,
                newname,
                flags,
            } => {
                if flags != 0 {
                    return err(Errno::EINVAL);
                }
                empty(fs.rename_entry(ino, os(name), newdir, os(newname)))
            }
            Request::Open { flags } => match fs.attr(ino).map(|a| a.kind) {
                Ok(FileType::Directory) => err(Errno::EISDIR),
                Ok(_) => Response::Open {
                    fh: 0,
                    flags: p.open_flags(flags),
                },
                Err(e) => err(e),
            },
            Request::Read { offset, size, .. } => fs
                .read_at(ino, offset, size)
                .map_or_else(err, Response::Data),
            Request::Write { offset, data, .. } => fs
                .write_at(ino, offset, data)
                .map_or_else(err, Response::Written),
            Request::Flush => err(Errno::ENOSYS),
            Request::Release { .. } => Response::Empty,
            Request::Releasedir => Response::Empty,
            Request::Fsync { .. } => Response::Empty,
            Request::Fsyncdir { .. } | Request::Syncfs => Response::Empty,
            Request::Opendir { .. } => match fs.attr(ino).map(|a| a.kind) {
                Ok(FileType::Directory) => Response::Open { fh: 0, flags: 0 },
                Ok(_) => err(Errno::ENOTDIR),
                Err(e) => err(e),
            },
            Request::Readdir { offset, size } => match fs.list(ino, offset, 512) {
                Ok(entries) => {
                    let mut b = DirBuf::new(size as usize);
                    for (child, kind, name, next) in &entries {
                        if !b.add(*child, *next, kind_bits(*kind) >> 12, name.as_bytes()) {
                            break;
                        }
                    }
                    b.into_response()
                }
                Err(e) => err(e),
            },
            Request::Readdirplus { offset, size } => match fs.list(ino, offset, 256) {
                Ok(entries) => {
                    let mut b = DirBuf::new(size as usize);
                    for (child, kind, name, next) in &entries {
                        let Ok(a) = fs.attr(*child) else {
                            continue;
                        };
                        if !b.add_plus(
                            &entry(p, &a),
                            *next,
                            kind_bits(*kind) >> 12,
                            name.as_bytes(),
                        ) {
                            break;
                        }
                    }
                    b.into_response()
                }
                Err(e) => err(e),
            },
            Request::Statfs => {
                let files = fs.nodes.load(Ordering::Relaxed);
                Response::Statfs(StatfsOut {
                    blocks: 1 << 30,
                    bfree: 1 << 29,
                    bavail: 1 << 29,
                    files: files + (1 << 24),
                    ffree: 1 << 24,
                    bsize: 4096,
                    namelen: 255,
                    frsize: 4096,
                })
            }
            Request::Getxattr { .. } => fs.attr(ino).map_or_else(err, |_| err(Errno::ENODATA)),
            Request::Listxattr { size } => match fs.attr(ino) {
                Ok(_) if size == 0 => Response::XattrSize(0),
                Ok(_) => Response::Data(Vec::new()),
                Err(e) => err(e),
            },
            Request::Access { .. } => fs.attr(ino).map_or_else(err, |_| Response::Empty),
            Request::Forget { .. } | Request::BatchForget { .. } | Request::Destroy => {
                Response::Empty
            }
            // What the workloads do not need.
            _ => err(Errno::ENOSYS),
        }
    }
}
