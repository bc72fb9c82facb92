//! Requests per FUSE opcode, counted in a small shared file.
//!
//! [`Counted`] wraps any [`fuser::Filesystem`] and counts each request it
//! forwards (the ones the kernel sends; `init` and `destroy` aside) in an
//! [`OpCounts`] table. (A BATCH_FORGET is counted as its forgets: fuser
//! does not export its node type, so the trait's default splits it and
//! calls `forget` for each node, as it would for the wrapped file system.) The table lives in a file mapped shared, so another
//! process (the benchmark) reads the live counts with a plain
//! [`read_counts`] at any moment, without a protocol or a signal: a
//! benchmark takes one snapshot before and one after a timed run and
//! divides the difference by the workload's operations.
//!
//! The file: 8 bytes of magic, a little-endian `u64` count `N`, then `N`
//! little-endian `u64` counters in the order of [`OP_NAMES`].

use std::ffi::OsStr;
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use fuser::{
    AccessFlags, BsdFileFlags, CopyFileRangeFlags, FileHandle, Filesystem, INodeNo, IoctlFlags,
    KernelConfig, LockOwner, OpenFlags, PollEvents, PollFlags, PollNotifier, RenameFlags,
    ReplyAttr, ReplyBmap, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty,
    ReplyEntry, ReplyIoctl, ReplyLock, ReplyLseek, ReplyOpen, ReplyPoll, ReplyStatfs, ReplyWrite,
    ReplyXattr, Request, TimeOrNow, WriteFlags,
};

const MAGIC: &[u8; 8] = b"PTSDOPC1";
const HEADER: usize = 16;

/// The counted opcodes, in file order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum Op {
    Lookup,
    Forget,
    Getattr,
    Setattr,
    Readlink,
    Mknod,
    Mkdir,
    Unlink,
    Rmdir,
    Symlink,
    Rename,
    Link,
    Open,
    Read,
    Write,
    Flush,
    Release,
    Fsync,
    Opendir,
    Readdir,
    Readdirplus,
    Releasedir,
    Fsyncdir,
    Statfs,
    Setxattr,
    Getxattr,
    Listxattr,
    Removexattr,
    Access,
    Create,
    Getlk,
    Setlk,
    Bmap,
    Ioctl,
    Poll,
    Fallocate,
    Lseek,
    CopyFileRange,
}

/// Names of the counted opcodes, indexed by [`Op`] (the file's order).
pub const OP_NAMES: [&str; OPS] = [
    "lookup",
    "forget",
    "getattr",
    "setattr",
    "readlink",
    "mknod",
    "mkdir",
    "unlink",
    "rmdir",
    "symlink",
    "rename",
    "link",
    "open",
    "read",
    "write",
    "flush",
    "release",
    "fsync",
    "opendir",
    "readdir",
    "readdirplus",
    "releasedir",
    "fsyncdir",
    "statfs",
    "setxattr",
    "getxattr",
    "listxattr",
    "removexattr",
    "access",
    "create",
    "getlk",
    "setlk",
    "bmap",
    "ioctl",
    "poll",
    "fallocate",
    "lseek",
    "copy_file_range",
];

/// Number of counted opcodes.
pub const OPS: usize = 38;

/// Why a counts file could not be made or read.
#[derive(Debug, thiserror::Error)]
pub enum OpCountError {
    /// Creating, sizing, mapping or reading the file failed.
    #[error("op counts file {path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a counts file of this layout.
    #[error("op counts file {path}: not a ptsd op-count table ({why})")]
    Format {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        why: String,
    },
}

/// A table of request counters in a shared file mapping.
pub struct OpCounts {
    map: memmap2::MmapMut,
}

impl OpCounts {
    /// Creates (or truncates) `path` and maps it; all counters start at 0.
    pub fn create(path: &Path) -> Result<Arc<Self>, OpCountError> {
        let io = |source| OpCountError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .map_err(io)?;
        file.set_len((HEADER + OPS * 8) as u64).map_err(io)?;
        // SAFETY: the file was just created and sized by us; nothing else
        // truncates it while mapped (a reader only reads it).
        let mut map = unsafe { memmap2::MmapMut::map_mut(&file) }.map_err(io)?;
        map[..8].copy_from_slice(MAGIC);
        map[8..16].copy_from_slice(&(OPS as u64).to_le_bytes());
        Ok(Arc::new(OpCounts { map }))
    }

    fn counters(&self) -> &[AtomicU64] {
        let bytes = &self.map[HEADER..HEADER + OPS * 8];
        // SAFETY: the mapping is page-aligned and HEADER is a multiple of 8,
        // so the slice is 8-byte aligned; it is OPS * 8 bytes long; AtomicU64
        // has the size and alignment of u64; every access goes through the
        // atomics for as long as the mapping lives (borrowed from self).
        unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<AtomicU64>(), OPS) }
    }

    /// Counts one request of `op`.
    #[inline]
    pub fn bump(&self, op: Op) {
        self.counters()[op as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// The current counts, in [`OP_NAMES`] order.
    pub fn snapshot(&self) -> Vec<u64> {
        self.counters()
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect()
    }
}

/// Reads a counts file written by [`OpCounts`] (of this process or another).
pub fn read_counts(path: &Path) -> Result<Vec<u64>, OpCountError> {
    let bytes = std::fs::read(path).map_err(|source| OpCountError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let bad = |why: String| OpCountError::Format {
        path: path.to_path_buf(),
        why,
    };
    if bytes.len() < HEADER || &bytes[..8] != MAGIC {
        return Err(bad("no magic".into()));
    }
    let n = u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes"));
    if n != OPS as u64 || bytes.len() != HEADER + OPS * 8 {
        return Err(bad(format!("{n} counters, {} bytes", bytes.len())));
    }
    Ok(bytes[HEADER..]
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect())
}

/// A [`Filesystem`] that counts every request before passing it on.
pub struct Counted<F> {
    inner: F,
    counts: Option<Arc<OpCounts>>,
}

impl<F: Filesystem> Counted<F> {
    /// Wraps `inner`, counting into `counts` (or not at all: one type
    /// whether counting or not, for the caller's session).
    pub fn new(inner: F, counts: Option<Arc<OpCounts>>) -> Self {
        Counted { inner, counts }
    }

    #[inline]
    fn bump(&self, op: Op) {
        if let Some(c) = &self.counts {
            c.bump(op);
        }
    }
}

#[allow(clippy::too_many_arguments)]
impl<F: Filesystem> Filesystem for Counted<F> {
    fn init(&mut self, req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        self.inner.init(req, config)
    }

    fn destroy(&mut self) {
        self.inner.destroy()
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.bump(Op::Lookup);
        self.inner.lookup(req, parent, name, reply)
    }

    fn forget(&self, req: &Request, ino: INodeNo, nlookup: u64) {
        self.bump(Op::Forget);
        self.inner.forget(req, ino, nlookup)
    }

    fn getattr(&self, req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        self.bump(Op::Getattr);
        self.inner.getattr(req, ino, fh, reply)
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        crtime: Option<SystemTime>,
        chgtime: Option<SystemTime>,
        bkuptime: Option<SystemTime>,
        flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        self.bump(Op::Setattr);
        self.inner.setattr(
            req, ino, mode, uid, gid, size, atime, mtime, ctime, fh, crtime, chgtime, bkuptime,
            flags, reply,
        )
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        self.bump(Op::Readlink);
        self.inner.readlink(req, ino, reply)
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        self.bump(Op::Mknod);
        self.inner
            .mknod(req, parent, name, mode, umask, rdev, reply)
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        self.bump(Op::Mkdir);
        self.inner.mkdir(req, parent, name, mode, umask, reply)
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.bump(Op::Unlink);
        self.inner.unlink(req, parent, name, reply)
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.bump(Op::Rmdir);
        self.inner.rmdir(req, parent, name, reply)
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        self.bump(Op::Symlink);
        self.inner.symlink(req, parent, link_name, target, reply)
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        self.bump(Op::Rename);
        self.inner
            .rename(req, parent, name, newparent, newname, flags, reply)
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        self.bump(Op::Link);
        self.inner.link(req, ino, newparent, newname, reply)
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.bump(Op::Open);
        self.inner.open(req, ino, flags, reply)
    }

    fn read(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        flags: OpenFlags,
        lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.bump(Op::Read);
        self.inner
            .read(req, ino, fh, offset, size, flags, lock_owner, reply)
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        flags: OpenFlags,
        lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        self.bump(Op::Write);
        self.inner.write(
            req,
            ino,
            fh,
            offset,
            data,
            write_flags,
            flags,
            lock_owner,
            reply,
        )
    }

    fn flush(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        self.bump(Op::Flush);
        self.inner.flush(req, ino, fh, lock_owner, reply)
    }

    fn release(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        flags: OpenFlags,
        lock_owner: Option<LockOwner>,
        flush: bool,
        reply: ReplyEmpty,
    ) {
        self.bump(Op::Release);
        self.inner
            .release(req, ino, fh, flags, lock_owner, flush, reply)
    }

    fn fsync(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.bump(Op::Fsync);
        self.inner.fsync(req, ino, fh, datasync, reply)
    }

    fn opendir(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.bump(Op::Opendir);
        self.inner.opendir(req, ino, flags, reply)
    }

    fn readdir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectory,
    ) {
        self.bump(Op::Readdir);
        self.inner.readdir(req, ino, fh, offset, reply)
    }

    fn readdirplus(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectoryPlus,
    ) {
        self.bump(Op::Readdirplus);
        self.inner.readdirplus(req, ino, fh, offset, reply)
    }

    fn releasedir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.bump(Op::Releasedir);
        self.inner.releasedir(req, ino, fh, flags, reply)
    }

    fn fsyncdir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.bump(Op::Fsyncdir);
        self.inner.fsyncdir(req, ino, fh, datasync, reply)
    }

    fn statfs(&self, req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        self.bump(Op::Statfs);
        self.inner.statfs(req, ino, reply)
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        position: u32,
        reply: ReplyEmpty,
    ) {
        self.bump(Op::Setxattr);
        self.inner
            .setxattr(req, ino, name, value, flags, position, reply)
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        self.bump(Op::Getxattr);
        self.inner.getxattr(req, ino, name, size, reply)
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        self.bump(Op::Listxattr);
        self.inner.listxattr(req, ino, size, reply)
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.bump(Op::Removexattr);
        self.inner.removexattr(req, ino, name, reply)
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        self.bump(Op::Access);
        self.inner.access(req, ino, mask, reply)
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        self.bump(Op::Create);
        self.inner
            .create(req, parent, name, mode, umask, flags, reply)
    }

    fn getlk(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        reply: ReplyLock,
    ) {
        self.bump(Op::Getlk);
        self.inner
            .getlk(req, ino, fh, lock_owner, start, end, typ, pid, reply)
    }

    fn setlk(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        sleep: bool,
        reply: ReplyEmpty,
    ) {
        self.bump(Op::Setlk);
        self.inner
            .setlk(req, ino, fh, lock_owner, start, end, typ, pid, sleep, reply)
    }

    fn bmap(&self, req: &Request, ino: INodeNo, blocksize: u32, idx: u64, reply: ReplyBmap) {
        self.bump(Op::Bmap);
        self.inner.bmap(req, ino, blocksize, idx, reply)
    }

    fn ioctl(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        flags: IoctlFlags,
        cmd: u32,
        in_data: &[u8],
        out_size: u32,
        reply: ReplyIoctl,
    ) {
        self.bump(Op::Ioctl);
        self.inner
            .ioctl(req, ino, fh, flags, cmd, in_data, out_size, reply)
    }

    fn poll(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        ph: PollNotifier,
        events: PollEvents,
        flags: PollFlags,
        reply: ReplyPoll,
    ) {
        self.bump(Op::Poll);
        self.inner.poll(req, ino, fh, ph, events, flags, reply)
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        self.bump(Op::Fallocate);
        self.inner
            .fallocate(req, ino, fh, offset, length, mode, reply)
    }

    fn lseek(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        self.bump(Op::Lseek);
        self.inner.lseek(req, ino, fh, offset, whence, reply)
    }

    fn copy_file_range(
        &self,
        req: &Request,
        ino_in: INodeNo,
        fh_in: FileHandle,
        offset_in: u64,
        ino_out: INodeNo,
        fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        self.bump(Op::CopyFileRange);
        self.inner.copy_file_range(
            req, ino_in, fh_in, offset_in, ino_out, fh_out, offset_out, len, flags, reply,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_read_back_from_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("counts");
        let c = OpCounts::create(&path).unwrap();
        c.bump(Op::Lookup);
        c.bump(Op::Lookup);
        c.bump(Op::CopyFileRange);
        let read = read_counts(&path).unwrap();
        assert_eq!(read, c.snapshot());
        assert_eq!(read[Op::Lookup as usize], 2);
        assert_eq!(read[Op::CopyFileRange as usize], 1);
        assert_eq!(read.iter().sum::<u64>(), 3);
        assert_eq!(OP_NAMES[Op::CopyFileRange as usize], "copy_file_range");
    }

    #[test]
    fn a_foreign_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("other");
        std::fs::write(&path, b"not a table at all").unwrap();
        assert!(matches!(
            read_counts(&path),
            Err(OpCountError::Format { .. })
        ));
        assert!(matches!(
            read_counts(&dir.path().join("missing")),
            Err(OpCountError::Io { .. })
        ));
    }
}
