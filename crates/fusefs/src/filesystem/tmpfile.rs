//! O_TMPFILE as on ext4: an unnamed regular file, on the orphan list from
//! birth (freed at its last close, or at the next mount after a crash),
//! which `linkat` may give a name.

use std::sync::Arc;

use parking_lot::Mutex;

use super::{dir_add, dir_need, put_dir_block, put_inode, Caller, FileSystem, Writes};
use crate::error::Errno;
use crate::filesystem::Attr;
use crate::format::Ts;

impl FileSystem {
    /// Create an unnamed regular file in directory `dir` (open once, link
    /// count 0). [`link`](Self::link) names it; [`release`](Self::release)
    /// of its last open frees it if it never was.
    pub fn tmpfile(&self, dir: u64, mode: u32, who: Caller) -> Result<Attr, Errno> {
        self.tmpfile_umask(dir, mode, 0, who)
    }

    /// [`tmpfile`](Self::tmpfile) with the umask apart (see
    /// [`mknod_umask`](Self::mknod_umask)): it inherits the directory's
    /// default ACL like a named file, and a setgid directory's group.
    pub fn tmpfile_umask(
        &self,
        dir: u64,
        mode: u32,
        umask: u32,
        who: Caller,
    ) -> Result<Attr, Errno> {
        self.writable()?;
        let orphan = self.layout.orphan;
        let mut held = self.lock_sorted(&[dir, orphan])?;
        let mut who = who;
        let inherited = {
            let d = held.get(dir);
            self.ensure_dir(d)?;
            if d.d.nlink == 0 {
                return Err(Errno::ENOENT);
            }
            // As a named create: a setgid directory passes its group on.
            if d.d.mode & libc::S_ISGID != 0 {
                who.gid = d.d.gid;
            }
            self.inherit(d, libc::S_IFREG | (mode & 0o7777), umask)?
        };
        self.ensure_dir(held.get(orphan))?;
        let need = 1 + dir_need(held.get(orphan), 20) + inherited.blocks();
        let mut ctx = self.alloc.prepare(need, dir + 1, &[])?;
        let ino = ctx
            .alloc(1, dir + 1)
            .first()
            .map(|r| r.0)
            .ok_or(Errno::ENOSPC)?;
        let now = Ts::now();
        let mut node = self.new_inode(ino, inherited.mode, who, dir, now);
        node.d.nlink = 0;
        node.open_count = 1;
        node.lookups = 1;
        let mut w = Writes::new();
        inherited.apply(&mut node, &mut ctx, &mut w)?;
        let o = held.get(orphan);
        dir_add(
            o,
            ino.to_string().as_bytes(),
            ino,
            node.kind(),
            &mut ctx,
            &mut w,
        )?;
        put_inode(o, Some(&mut ctx), &mut w)?;
        put_inode(&mut node, None, &mut w)?;
        let attr = node.attr();
        self.shard(ino)
            .lock()
            .insert(ino, Arc::new(Mutex::new(node)));
        if let Err(e) = self.commit(w, Some(ctx)) {
            self.forget_freed(ino);
            return Err(e);
        }
        Ok(attr)
    }

    /// `link` of an unnamed file: its orphan entry goes in the same
    /// transaction as its first name.
    pub(super) fn unorphan(
        &self,
        held: &mut super::Held,
        ino: u64,
        w: &mut Writes,
    ) -> Result<(), Errno> {
        let o = held.get(self.layout.orphan);
        self.ensure_dir(o)?;
        let e = o
            .dir
            .as_mut()
            .and_then(|d| d.remove(ino.to_string().as_bytes()))
            .ok_or(Errno::ENOENT)?;
        put_dir_block(o, e.blk, w)
    }
}
