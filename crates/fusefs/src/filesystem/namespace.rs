//! Names: lookup, readdir, create, mknod, mkdir, symlink, link, unlink, rmdir.

use std::sync::Arc;

use parking_lot::Mutex;

use super::{ext_slack, owned_runs, put_inode, symlink, Attr, Caller, DirEntry, FileSystem};
use super::{Held, Inode, Writes, BS, MAX_LINKS, S_IFDIR, S_IFLNK, S_IFMT, S_IFREG};
use crate::alloc::AllocCtx;
use crate::dir::{DirEnt, DirIndex, FIRST_POS};
use crate::error::Errno;
use crate::format::{Ts, NAME_MAX, SYMLINK_MAX};

pub(super) fn check_name(name: &[u8]) -> Result<(), Errno> {
    if name.len() > NAME_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    if name.is_empty() || name.contains(&b'/') || name.contains(&0) {
        return Err(Errno::EINVAL);
    }
    if name == b"." || name == b".." {
        return Err(Errno::EEXIST);
    }
    Ok(())
}

pub(super) fn put_dir_block(g: &Inode, blk: u32, w: &mut Writes) -> Result<(), Errno> {
    let dir = g.dir.as_ref().ok_or(Errno::EIO)?;
    let (pblk, _, _) = g.ext.lookup(u64::from(blk)).ok_or(Errno::EIO)?;
    let (b, crc) = dir.encode_block(g.d.ino, blk);
    w.insert_with_crc(pblk, b, crc);
    Ok(())
}

/// Blocks an insertion of `name_len` into directory `g` may need.
pub(super) fn dir_need(g: &mut Inode, name_len: usize) -> u64 {
    match g.dir.as_mut().map(|d| d.find_slot(name_len)) {
        Some(Some(_)) => 0,
        _ => 1 + ext_slack(g, 1),
    }
}

/// Add an entry to directory `g`; space was reserved with [`dir_need`].
pub(super) fn dir_add(
    g: &mut Inode,
    name: &[u8],
    ino: u64,
    kind: u8,
    ctx: &mut AllocCtx<'_>,
    w: &mut Writes,
) -> Result<DirEnt, Errno> {
    dir_add_at(g, name, ino, kind, None, ctx, w)
}

/// [`dir_add`] at readdir position `pos` (a free one), or the next new one.
pub(super) fn dir_add_at(
    g: &mut Inode,
    name: &[u8],
    ino: u64,
    kind: u8,
    pos: Option<u64>,
    ctx: &mut AllocCtx<'_>,
    w: &mut Writes,
) -> Result<DirEnt, Errno> {
    let dir = g.dir.as_mut().ok_or(Errno::EIO)?;
    let blk = match dir.find_slot(name.len()) {
        Some(b) => b,
        None => {
            let lblk = dir.num_blocks();
            let goal = g.ext.goal(lblk).unwrap_or(g.d.ino + 1);
            let runs = ctx.alloc(1, goal);
            let (pblk, _) = *runs.first().ok_or(Errno::ENOSPC)?;
            let b = dir.push_block();
            g.ext.insert(lblk, pblk, 1, false);
            g.d.size = (lblk + 1) * BS;
            b
        }
    };
    let dir = g.dir.as_mut().ok_or(Errno::EIO)?;
    let e = match pos {
        Some(pos) => dir.add_at(name, ino, kind, blk, pos),
        None => dir.add(name, ino, kind, blk),
    };
    put_dir_block(g, blk, w)?;
    Ok(e)
}

pub(super) fn touch_dir(g: &mut Inode, now: Ts) {
    g.d.mtime = now;
    g.d.ctime = now;
}

impl FileSystem {
    /// Whether `target` may be removed by an operation on a directory
    /// (`want_dir`) or a non-directory: the kinds must match, and a
    /// directory must be empty.
    pub(super) fn check_replaceable(
        &self,
        target: &mut Inode,
        want_dir: bool,
    ) -> Result<(), Errno> {
        let is_dir = target.is_dir();
        if want_dir && !is_dir {
            return Err(Errno::ENOTDIR);
        }
        if !want_dir && is_dir {
            return Err(Errno::EISDIR);
        }
        if is_dir {
            self.ensure_dir(target)?;
            if !target.dir.as_ref().is_some_and(|d| d.is_empty()) {
                return Err(Errno::ENOTEMPTY);
            }
        }
        Ok(())
    }

    /// Look `name` up in directory `parent`. `.` is `parent` itself, of
    /// any type, and `..` a directory's parent: the kernel looks an inode
    /// up by node id that way when it opens a file handle (export support:
    /// `open_by_handle_at`, NFS) whose inode it no longer caches. A number
    /// that is no inode (any more) is ENOENT, which the kernel turns into
    /// ESTALE; a reused one has another generation, which the kernel
    /// compares with the handle's.
    pub fn lookup(&self, parent: u64, name: &[u8]) -> Result<Attr, Errno> {
        if name.len() > NAME_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        let ino = {
            let mut p = self.lock(parent)?;
            if name == b"." {
                p.lookups += 1;
                return Ok(p.attr());
            }
            self.ensure_dir(&mut p)?;
            if name == b".." {
                p.d.parent
            } else {
                p.dir
                    .as_ref()
                    .and_then(|d| d.get(name))
                    .ok_or(Errno::ENOENT)?
                    .ino
            }
        };
        self.remember(ino)
    }

    /// Target of a symlink.
    pub fn readlink(&self, ino: u64) -> Result<Vec<u8>, Errno> {
        let mut g = self.lock(ino)?;
        if g.d.mode & S_IFMT != S_IFLNK {
            return Err(Errno::EINVAL);
        }
        // Reading a link is an access, as Linux's readlink(2) counts it.
        self.accessed(&mut g);
        Ok(g.d.symlink.clone())
    }

    /// Up to `max` entries of directory `ino` after cookie `offset`
    /// (`.` and `..` first).
    pub fn readdir(&self, ino: u64, offset: u64, max: usize) -> Result<Vec<DirEntry>, Errno> {
        let mut g = self.lock(ino)?;
        self.ensure_dir(&mut g)?;
        let mut out = Vec::new();
        if g.d.nlink == 0 {
            // Removed while open: no entries, not even `.` and `..` (its
            // parent may be gone), as Linux lists a dead directory.
            return Ok(out);
        }
        self.accessed(&mut g);
        if offset < 1 {
            out.push(DirEntry {
                ino,
                next: 1,
                kind: (S_IFDIR >> 12) as u8,
                name: b".".to_vec(),
            });
        }
        if offset < 2 {
            out.push(DirEntry {
                ino: g.d.parent,
                next: 2,
                kind: (S_IFDIR >> 12) as u8,
                name: b"..".to_vec(),
            });
        }
        let dir = g.dir.as_ref().ok_or(Errno::EIO)?;
        for (name, e) in dir.iter_from(offset.max(FIRST_POS)) {
            if out.len() >= max {
                break;
            }
            out.push(DirEntry {
                ino: e.ino,
                next: e.pos + 1,
                kind: e.kind,
                name: name.to_vec(),
            });
        }
        Ok(out)
    }

    #[allow(clippy::too_many_arguments)]
    fn create_node(
        &self,
        parent: u64,
        name: &[u8],
        mode: u32,
        rdev: u32,
        who: Caller,
        symlink: Option<&[u8]>,
        open: bool,
        umask: u32,
    ) -> Result<Attr, Errno> {
        self.writable()?;
        check_name(name)?;
        if let Some(t) = symlink {
            if t.len() > SYMLINK_MAX {
                return Err(Errno::ENAMETOOLONG);
            }
            if t.is_empty() {
                return Err(Errno::ENOENT);
            }
        }
        let mut p = self.lock(parent)?;
        self.ensure_dir(&mut p)?;
        if p.d.nlink == 0 {
            return Err(Errno::ENOENT);
        }
        if p.dir.as_ref().and_then(|d| d.get(name)).is_some() {
            return Err(Errno::EEXIST);
        }
        let is_dir = mode & S_IFMT == S_IFDIR;
        if is_dir && p.d.nlink >= MAX_LINKS {
            return Err(Errno::EMLINK);
        }
        let long = symlink.is_some_and(|t| symlink::is_long(t.len()));
        // The directory's default ACL, or else the umask, masks the mode.
        let inherited = self.inherit(&mut p, mode, umask)?;
        let mode = inherited.mode;
        let need = 1 + u64::from(long) + dir_need(&mut p, name.len()) + inherited.blocks();
        // A directory starts in a group of its own choosing; anything else
        // goes next to its directory.
        let goal = if is_dir {
            self.alloc.dir_goal()
        } else {
            parent + 1
        };
        let mut ctx = self.alloc.prepare(need, goal, &[])?;
        let ino = ctx
            .alloc(1, goal)
            .first()
            .map(|r| r.0)
            .ok_or(Errno::ENOSPC)?;
        let now = Ts::now();
        // setgid directories pass their group on.
        let mut who = who;
        let mut mode = mode;
        if p.d.mode & libc::S_ISGID != 0 {
            who.gid = p.d.gid;
            if is_dir {
                mode |= libc::S_ISGID;
            }
        }
        let mut node = self.new_inode(ino, mode, who, if is_dir { ino } else { parent }, now);
        node.d.rdev = rdev;
        let mut w = Writes::new();
        inherited.apply(&mut node, &mut ctx, &mut w)?;
        if is_dir {
            node.d.nlink = 2;
            node.d.parent = parent;
            node.dir = Some(DirIndex::new());
        }
        if let Some(t) = symlink {
            node.d.symlink = t.to_vec();
            if long {
                self.store_long_target(&mut node, &mut ctx, &mut w)?;
            }
        }
        if open {
            node.open_count = 1;
        }
        // The reply hands the kernel its first reference.
        node.lookups = 1;
        let kind = node.kind();
        dir_add(&mut p, name, ino, kind, &mut ctx, &mut w)?;
        if is_dir {
            p.d.nlink += 1;
        }
        touch_dir(&mut p, now);
        put_inode(&mut p, Some(&mut ctx), &mut w)?;
        put_inode(&mut node, None, &mut w)?;
        let attr = node.attr();
        self.shard(ino)
            .lock()
            .insert(ino, Arc::new(Mutex::new(node)));
        if let Err(e) = self.commit(w, Some(ctx)) {
            self.forget_freed(ino);
            return Err(e);
        }
        self.after_dir_change()?;
        Ok(attr)
    }

    /// Create a node (regular file, fifo, socket, device) with `mode` as
    /// given (already masked by the umask) unless the directory has a
    /// default ACL (see [`mknod_umask`](Self::mknod_umask)).
    pub fn mknod(
        &self,
        parent: u64,
        name: &[u8],
        mode: u32,
        rdev: u32,
        who: Caller,
    ) -> Result<Attr, Errno> {
        self.mknod_umask(parent, name, mode, rdev, 0, who)
    }

    /// [`mknod`](Self::mknod) of a requested `mode` not yet masked, and
    /// the caller's `umask`, as FUSE sends them with `FUSE_POSIX_ACL`
    /// (the kernel then masks nothing itself): a default ACL on the
    /// directory masks the mode and is inherited (the umask is ignored, as
    /// on ext4); without one the umask applies.
    pub fn mknod_umask(
        &self,
        parent: u64,
        name: &[u8],
        mode: u32,
        rdev: u32,
        umask: u32,
        who: Caller,
    ) -> Result<Attr, Errno> {
        let t = mode & S_IFMT;
        let mode = if t == 0 { mode | S_IFREG } else { mode };
        if mode & S_IFMT == S_IFDIR || mode & S_IFMT == S_IFLNK {
            return Err(Errno::EINVAL);
        }
        self.create_node(parent, name, mode, rdev, who, None, false, umask)
    }

    /// Create and open a regular file.
    pub fn create(&self, parent: u64, name: &[u8], mode: u32, who: Caller) -> Result<Attr, Errno> {
        self.create_umask(parent, name, mode, 0, who)
    }

    /// [`create`](Self::create) with the umask apart (see
    /// [`mknod_umask`](Self::mknod_umask)).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use ptsd_blockdev::MemDevice;
    /// # use ptsd_fs::{mkfs, Caller, DirectStore, FileSystem, MkfsOptions};
    /// # let dev = Arc::new(MemDevice::new(4096, 256).unwrap());
    /// # let store = Arc::new(DirectStore::new(dev).unwrap());
    /// # mkfs(&*store, &MkfsOptions::default()).unwrap();
    /// # let fs = FileSystem::mount(store).unwrap();
    /// let me = Caller::default();
    /// let f = fs.create_umask(fs.root(), b"f", 0o666, 0o022, me).unwrap();
    /// assert_eq!(f.mode & 0o777, 0o644);
    /// // Under a default ACL (user::rwx group::r-x other::---) the ACL
    /// // masks the mode instead: 0o666 becomes 0o640.
    /// let d = fs.mkdir(fs.root(), b"d", 0o755, me).unwrap().ino;
    /// let acl = ptsd_fs::acl::Acl::from_mode(0o750).encode();
    /// fs.setxattr(d, b"system.posix_acl_default", &acl, 0).unwrap();
    /// let g = fs.create_umask(d, b"g", 0o666, 0o022, me).unwrap();
    /// assert_eq!(g.mode & 0o777, 0o640);
    /// # fs.release(f.ino).unwrap();
    /// # fs.release(g.ino).unwrap();
    /// ```
    pub fn create_umask(
        &self,
        parent: u64,
        name: &[u8],
        mode: u32,
        umask: u32,
        who: Caller,
    ) -> Result<Attr, Errno> {
        let mode = (mode & !S_IFMT) | S_IFREG;
        self.create_node(parent, name, mode, 0, who, None, true, umask)
    }

    /// Create a directory.
    pub fn mkdir(&self, parent: u64, name: &[u8], mode: u32, who: Caller) -> Result<Attr, Errno> {
        self.mkdir_umask(parent, name, mode, 0, who)
    }

    /// [`mkdir`](Self::mkdir) with the umask apart (see
    /// [`mknod_umask`](Self::mknod_umask)); the new directory also
    /// inherits the default ACL as its own.
    pub fn mkdir_umask(
        &self,
        parent: u64,
        name: &[u8],
        mode: u32,
        umask: u32,
        who: Caller,
    ) -> Result<Attr, Errno> {
        let mode = (mode & !S_IFMT) | S_IFDIR;
        self.create_node(parent, name, mode, 0, who, None, false, umask)
    }

    /// Create a symlink.
    pub fn symlink(
        &self,
        parent: u64,
        name: &[u8],
        target: &[u8],
        who: Caller,
    ) -> Result<Attr, Errno> {
        self.create_node(
            parent,
            name,
            S_IFLNK | 0o777,
            0,
            who,
            Some(target),
            false,
            0,
        )
    }

    /// Add a hard link `newparent/newname` to `ino`.
    pub fn link(&self, ino: u64, newparent: u64, newname: &[u8]) -> Result<Attr, Errno> {
        self.writable()?;
        check_name(newname)?;
        let mut held = self.lock_sorted(&[ino, newparent])?;
        // No links yet: an O_TMPFILE file (the kernel links no other
        // unlinked inode), whose orphan entry goes with its first name.
        let mut unnamed = held.get(ino).d.nlink == 0;
        if unnamed {
            drop(held);
            held = self.lock_sorted(&[ino, newparent, self.layout.orphan])?;
            unnamed = held.get(ino).d.nlink == 0;
        }
        if held.get(ino).is_dir() {
            return Err(Errno::EPERM);
        }
        if held.get(ino).d.nlink >= MAX_LINKS {
            return Err(Errno::EMLINK);
        }
        {
            let p = held.get(newparent);
            self.ensure_dir(p)?;
            if p.d.nlink == 0 {
                return Err(Errno::ENOENT);
            }
            if p.dir.as_ref().and_then(|d| d.get(newname)).is_some() {
                return Err(Errno::EEXIST);
            }
        }
        let need = dir_need(held.get(newparent), newname.len());
        let mut ctx = self.alloc.prepare(need, newparent, &[])?;
        let now = Ts::now();
        let mut w = Writes::new();
        let kind = held.get(ino).kind();
        {
            let p = held.get(newparent);
            dir_add(p, newname, ino, kind, &mut ctx, &mut w)?;
            touch_dir(p, now);
            put_inode(p, Some(&mut ctx), &mut w)?;
        }
        if unnamed {
            self.unorphan(&mut held, ino, &mut w)?;
        }
        let attr = {
            let i = held.get(ino);
            i.d.nlink += 1;
            i.lookups += 1;
            i.d.ctime = now;
            put_inode(i, None, &mut w)?;
            i.attr()
        };
        self.commit(w, Some(ctx))?;
        self.after_dir_change()?;
        Ok(attr)
    }

    // ---------------------------------------------------------------- removal

    /// Drop one link of `child` (already removed from its directory). Frees
    /// it, or parks it in the orphan directory while it is open. Returns the
    /// runs to free (to be named in `prepare`) and whether the orphan
    /// directory must be changed.
    pub(super) fn unlink_plan(child: &Inode) -> (bool, Vec<(u64, u64)>) {
        let last = child.is_dir() || child.d.nlink <= 1;
        if !last {
            return (false, Vec::new());
        }
        if child.open_count > 0 {
            (true, Vec::new())
        } else {
            (false, owned_runs(child))
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn drop_link(
        &self,
        held: &mut Held,
        child: u64,
        orphan: u64,
        ctx: &mut AllocCtx<'_>,
        w: &mut Writes,
        now: Ts,
        freed: &mut Vec<u64>,
    ) -> Result<(), Errno> {
        let c = held.get(child);
        let last = c.is_dir() || c.d.nlink <= 1;
        c.d.ctime = now;
        if !last {
            c.d.nlink -= 1;
            put_inode(c, None, w)?;
            return Ok(());
        }
        c.d.nlink = 0;
        if c.open_count > 0 {
            put_inode(c, None, w)?;
            let kind = c.kind();
            let name = child.to_string();
            let o = held.get(orphan);
            dir_add(o, name.as_bytes(), child, kind, ctx, w)?;
            put_inode(o, Some(ctx), w)?;
        } else {
            for (s, l) in owned_runs(c) {
                ctx.free(s, l)?;
            }
            c.freed = true;
            freed.push(child);
        }
        Ok(())
    }

    fn remove(&self, parent: u64, name: &[u8], want_dir: bool) -> Result<(), Errno> {
        self.writable()?;
        if name.len() > NAME_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        if name == b"." {
            return Err(Errno::EINVAL);
        }
        if name == b".." {
            return Err(Errno::ENOTEMPTY);
        }
        let orphan = self.layout.orphan;
        loop {
            let mut held = self.lock_sorted(&[parent])?;
            let e = {
                let p = held.get(parent);
                self.ensure_dir(p)?;
                p.dir
                    .as_ref()
                    .and_then(|d| d.get(name))
                    .ok_or(Errno::ENOENT)?
            };
            if !self.try_add(&mut held, e.ino)? {
                drop(held);
                std::thread::yield_now();
                continue;
            }
            self.check_replaceable(held.get(e.ino), want_dir)?;
            let (to_orphan, frees) = Self::unlink_plan(held.get(e.ino));
            let mut need = 0;
            if to_orphan {
                if !self.try_add(&mut held, orphan)? {
                    drop(held);
                    std::thread::yield_now();
                    continue;
                }
                let o = held.get(orphan);
                self.ensure_dir(o)?;
                need += dir_need(o, 20);
            }
            let mut ctx = self.alloc.prepare(need, orphan, &frees)?;
            let now = Ts::now();
            let mut w = Writes::new();
            {
                let p = held.get(parent);
                p.dir.as_mut().ok_or(Errno::EIO)?.remove(name);
                put_dir_block(p, e.blk, &mut w)?;
                if want_dir {
                    p.d.nlink -= 1;
                }
                touch_dir(p, now);
                put_inode(p, None, &mut w)?;
            }
            let mut freed = Vec::new();
            self.drop_link(&mut held, e.ino, orphan, &mut ctx, &mut w, now, &mut freed)?;
            self.commit(w, Some(ctx))?;
            for f in freed {
                self.forget_freed(f);
            }
            return self.after_dir_change();
        }
    }

    /// Remove a non-directory.
    pub fn unlink(&self, parent: u64, name: &[u8]) -> Result<(), Errno> {
        self.remove(parent, name, false)
    }

    /// Remove an empty directory.
    pub fn rmdir(&self, parent: u64, name: &[u8]) -> Result<(), Errno> {
        self.remove(parent, name, true)
    }
}
