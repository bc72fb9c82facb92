//! FsHandler's answers, in process: the replies either transport carries.

use std::sync::Arc;

use super::*;
use crate::frontend::proto::{decode, opcode, InHeader, Request, Response};
use crate::fuse::{FOPEN_DIRECT_IO, FOPEN_KEEP_CACHE};
use crate::{mkfs, DirectStore, MkfsOptions};

/// The handler under a policy, as the front end calls it.
struct Under {
    fsh: FsHandler,
    p: Policy,
}

impl Under {
    fn handle(&self, h: &InHeader, req: Request<'_>) -> Response {
        self.fsh.handle(&self.p, h, req)
    }

    fn direct_writes(mut self, on: bool) -> Self {
        self.p.direct_writes = on;
        self
    }
}

fn handler() -> (Under, Arc<FileSystem>) {
    let dev = Arc::new(ptsd_blockdev::MemDevice::new(4096, 4096).unwrap());
    let store = Arc::new(DirectStore::new(dev).unwrap());
    mkfs(&*store, &MkfsOptions::default()).unwrap();
    let fs = Arc::new(FileSystem::mount(store).unwrap());
    let fsh = FsHandler::new(fs.clone());
    (
        Under {
            fsh,
            p: Policy::default(),
        },
        fs,
    )
}

fn h(opcode: u32, nodeid: u64) -> InHeader {
    InHeader {
        len: 0,
        opcode,
        unique: 1,
        nodeid,
        uid: 1000,
        gid: 100,
        pid: 1,
    }
}

fn entry(r: Response) -> EntryOut {
    match r {
        Response::Entry(e) | Response::Create { entry: e, .. } => e,
        other => panic!("not an entry: {other:?}"),
    }
}

#[test]
fn create_write_read_lookup_unlink() {
    let (fsh, _fs) = handler();
    let create = Request::Create {
        name: b"f",
        mode: libc::S_IFREG | 0o644,
        umask: 0o022,
        flags: 0,
    };
    let r = fsh.handle(&h(opcode::CREATE, 1), create);
    let Response::Create {
        entry: e, flags, ..
    } = r
    else {
        panic!("{r:?}")
    };
    assert_eq!(flags, FOPEN_KEEP_CACHE);
    assert_eq!(e.attr.mode, libc::S_IFREG | 0o644);
    assert_eq!((e.attr.uid, e.attr.gid), (1000, 100));
    let ino = e.nodeid;
    let w = Request::Write {
        fh: 0,
        offset: 3,
        data: b"abc",
        write_flags: 0,
        flags: 0,
    };
    assert_eq!(fsh.handle(&h(opcode::WRITE, ino), w), Response::Written(3));
    let r = Request::Read {
        fh: 0,
        offset: 0,
        size: 100,
        flags: 0,
    };
    assert_eq!(
        fsh.handle(&h(opcode::READ, ino), r),
        Response::Data(b"\0\0\0abc".to_vec())
    );
    let found = entry(fsh.handle(&h(opcode::LOOKUP, 1), Request::Lookup { name: b"f" }));
    assert_eq!((found.nodeid, found.attr.size), (ino, 6));
    // A missing name: a negative entry (node id 0) the kernel may cache.
    let none = entry(fsh.handle(&h(opcode::LOOKUP, 1), Request::Lookup { name: b"g" }));
    assert_eq!(none.nodeid, 0);
    assert_eq!(
        fsh.handle(&h(opcode::UNLINK, 1), Request::Unlink { name: b"f" }),
        Response::Empty
    );
    assert_eq!(
        fsh.handle(&h(opcode::UNLINK, 1), Request::Unlink { name: b"f" }),
        Response::Error(libc::ENOENT)
    );
}

/// Write-only opens bypass the page cache (unless turned off); others
/// keep it.
#[test]
fn write_only_opens_are_direct() {
    let (fsh, _fs) = handler();
    let create = |name: &'static [u8], flags: i32, fsh: &Under| {
        let r = fsh.handle(
            &h(opcode::CREATE, 1),
            Request::Create {
                name,
                mode: libc::S_IFREG | 0o644,
                umask: 0,
                flags: (flags | libc::O_CREAT) as u32,
            },
        );
        let Response::Create { entry, flags, .. } = r else {
            panic!("{r:?}")
        };
        (entry.nodeid, flags)
    };
    let (ino, flags) = create(b"w", libc::O_WRONLY, &fsh);
    assert_eq!(flags, FOPEN_KEEP_CACHE | FOPEN_DIRECT_IO);
    assert_eq!(create(b"rw", libc::O_RDWR, &fsh).1, FOPEN_KEEP_CACHE);
    let open = |flags: i32, fsh: &Under| {
        let r = fsh.handle(
            &h(opcode::OPEN, ino),
            Request::Open {
                flags: flags as u32,
            },
        );
        let Response::Open { flags, .. } = r else {
            panic!("{r:?}")
        };
        flags
    };
    assert_eq!(
        open(libc::O_WRONLY | libc::O_APPEND, &fsh),
        FOPEN_KEEP_CACHE | FOPEN_DIRECT_IO
    );
    assert_eq!(open(libc::O_RDONLY, &fsh), FOPEN_KEEP_CACHE);
    let cached = handler().0.direct_writes(false);
    assert_eq!(create(b"w", libc::O_WRONLY, &cached).1, FOPEN_KEEP_CACHE);
}

/// A direct write reaches the file system without the kernel's
/// `file_remove_privs`: even a privileged one (no KILL_SUIDGID) drops the
/// file capability, and keeps setuid.
#[test]
fn any_write_drops_the_file_capability() {
    let (fsh, fs) = handler();
    let a = fs
        .create(fs.root(), b"f", 0o4755, Caller::default())
        .unwrap();
    fs.setxattr(a.ino, b"security.capability", &[1, 0, 0, 2], 0)
        .unwrap();
    fs.setxattr(a.ino, b"user.keep", b"v", 0).unwrap();
    let w = Request::Write {
        fh: 0,
        offset: 0,
        data: b"x",
        write_flags: 0,
        flags: 0,
    };
    assert_eq!(
        fsh.handle(&h(opcode::WRITE, a.ino), w),
        Response::Written(1)
    );
    assert_eq!(
        fs.getxattr(a.ino, b"security.capability"),
        Err(Errno::ENODATA)
    );
    assert_eq!(fs.getxattr(a.ino, b"user.keep").unwrap(), b"v");
    assert_eq!(fs.getattr(a.ino).unwrap().mode & 0o7777, 0o4755);
}

/// O_TMPFILE follows the rules of a named create: in a setgid directory
/// the file gets the directory's group, and the mode the same umask.
#[test]
fn tmpfile_in_a_setgid_directory_takes_its_group_as_create_does() {
    let (fsh, fs) = handler();
    let d = fs
        .mkdir(fs.root(), b"d", 0o2777, Caller { uid: 0, gid: 50 })
        .unwrap();
    assert_eq!(d.mode & libc::S_ISGID, libc::S_ISGID);
    let t = Request::Tmpfile {
        mode: libc::S_IFREG | 0o666,
        umask: 0o022,
        flags: 0,
    };
    let tmp = entry(fsh.handle(&h(opcode::TMPFILE, d.ino), t));
    let c = Request::Create {
        name: b"named",
        mode: libc::S_IFREG | 0o666,
        umask: 0o022,
        flags: 0,
    };
    let named = entry(fsh.handle(&h(opcode::CREATE, d.ino), c));
    assert_eq!((tmp.attr.uid, tmp.attr.gid), (1000, 50));
    assert_eq!((named.attr.uid, named.attr.gid), (1000, 50));
    assert_eq!(tmp.attr.mode, named.attr.mode);
    assert_eq!(tmp.attr.mode, libc::S_IFREG | 0o644);
}

#[test]
fn tmpfile_then_link_names_it() {
    let (fsh, fs) = handler();
    let t = Request::Tmpfile {
        mode: libc::S_IFREG | 0o600,
        umask: 0,
        flags: 0,
    };
    let e = entry(fsh.handle(&h(opcode::TMPFILE, 1), t));
    assert_eq!(e.attr.nlink, 0);
    let linked = entry(fsh.handle(
        &h(opcode::LINK, 1),
        Request::Link {
            oldnodeid: e.nodeid,
            name: b"named",
        },
    ));
    assert_eq!((linked.nodeid, linked.attr.nlink), (e.nodeid, 1));
    assert_eq!(fs.lookup(fs.root(), b"named").unwrap().ino, e.nodeid);
}

#[test]
fn directory_listing_fits_the_size_asked() {
    let (fsh, _fs) = handler();
    for i in 0..50 {
        let name = format!("file-{i:02}");
        let m = Request::Mkdir {
            name: name.as_bytes(),
            mode: 0o755,
            umask: 0,
        };
        entry(fsh.handle(&h(opcode::MKDIR, 1), m));
    }
    // READDIRPLUS of 1 KiB: whole entries only (136 + 32 bytes each here).
    let r = fsh.handle(
        &h(opcode::READDIRPLUS, 1),
        Request::Readdirplus {
            offset: 0,
            size: 1024,
        },
    );
    let Response::Data(d) = r else {
        panic!("{r:?}")
    };
    assert!(d.len() <= 1024 && d.len() >= 1024 - 168, "{}", d.len());
    // READDIR of everything: ., .. and the 50 names, once each.
    let r = fsh.handle(
        &h(opcode::READDIR, 1),
        Request::Readdir {
            offset: 0,
            size: 64 << 10,
        },
    );
    let Response::Data(d) = r else {
        panic!("{r:?}")
    };
    let (mut at, mut names) = (0, Vec::new());
    while at < d.len() {
        let namelen = u32::from_le_bytes(d[at + 16..at + 20].try_into().unwrap()) as usize;
        names.push(d[at + 24..at + 24 + namelen].to_vec());
        at += (24 + namelen + 7) & !7;
    }
    assert_eq!(names.len(), 52);
    assert!(names.contains(&b"file-49".to_vec()));
}

#[test]
fn errors_and_unknown_opcodes() {
    let (fsh, _fs) = handler();
    assert_eq!(
        fsh.handle(&h(opcode::GETATTR, 999_999), Request::Getattr),
        Response::Error(libc::ENOENT)
    );
    assert_eq!(
        fsh.handle(&h(opcode::FLUSH, 1), Request::Flush),
        Response::Error(libc::ENOSYS)
    );
    assert_eq!(
        fsh.handle(&h(52, 1), Request::Unsupported(52)),
        Response::Error(libc::ENOSYS)
    );
    // Through the decoder: a captured-style LOOKUP with a bad name is EIO
    // territory (the ring answers a DecodeError with EIO), never a call.
    assert!(decode(&h(opcode::LOOKUP, 1), &[], b"no-nul").is_err());
    let r = Request::Lseek {
        offset: 0,
        whence: libc::SEEK_SET,
    };
    assert_eq!(
        fsh.handle(&h(opcode::LSEEK, 1), r),
        Response::Error(libc::EINVAL)
    );
}

/// SYNCFS (a kernel that sends it: virtiofs) commits as an fsync does.
#[test]
fn syncfs_is_decoded_and_answered_as_an_fsync() {
    let (fsh, _fs) = handler();
    let hd = h(opcode::SYNCFS, 1);
    let req = decode(&hd, &[0u8; 8], &[]).unwrap();
    assert_eq!(req, Request::Syncfs);
    assert_eq!(fsh.handle(&hd, req), Response::Empty);
    assert_eq!(
        crate::opcount::Op::of_opcode(opcode::SYNCFS),
        Some(crate::opcount::Op::Fsync)
    );
}
