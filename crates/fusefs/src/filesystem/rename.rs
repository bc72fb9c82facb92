//! rename(2) with RENAME_NOREPLACE, RENAME_EXCHANGE and RENAME_WHITEOUT.

use super::RENAME_WHITEOUT;
use super::{check_name, dir_add_at, dir_need, put_dir_block, put_inode, touch_dir};
use super::{Caller, FileSystem, Held, Try, Writes, MAX_LINKS, RENAME_EXCHANGE, RENAME_NOREPLACE};
use crate::alloc::AllocCtx;
use crate::error::Errno;
use crate::format::{Ts, NAME_MAX};

impl FileSystem {
    /// Is `ino` `anc` or below it? Walks `..` links.
    fn is_under(&self, held: &mut Held, mut ino: u64, anc: u64) -> Result<Try<bool>, Errno> {
        let root = self.root();
        for _ in 0..100_000 {
            if ino == anc {
                return Ok(Try::Done(true));
            }
            if ino == root {
                return Ok(Try::Done(false));
            }
            let next = if held.has(ino) {
                held.get(ino).d.parent
            } else {
                match self.try_lock(ino)? {
                    Try::Done(g) => g.d.parent,
                    Try::Retry => return Ok(Try::Retry),
                }
            };
            if next == ino {
                return Ok(Try::Done(false));
            }
            ino = next;
        }
        Err(Errno::EIO)
    }

    /// Rename `parent/name` to `newparent/newname`, with
    /// [`RENAME_NOREPLACE`] or [`RENAME_EXCHANGE`], or [`RENAME_WHITEOUT`]
    /// (alone or with NOREPLACE: `name` becomes a whiteout, a character
    /// device 0:0 owned by root, in the same transaction, as overlayfs
    /// wants of its upper layer; the kernel checks CAP_MKNOD).
    pub fn rename(
        &self,
        parent: u64,
        name: &[u8],
        newparent: u64,
        newname: &[u8],
        flags: u32,
    ) -> Result<(), Errno> {
        self.writable()?;
        if flags & !(RENAME_NOREPLACE | RENAME_EXCHANGE | RENAME_WHITEOUT) != 0
            || flags & (RENAME_NOREPLACE | RENAME_EXCHANGE) == RENAME_NOREPLACE | RENAME_EXCHANGE
            || flags & (RENAME_WHITEOUT | RENAME_EXCHANGE) == RENAME_WHITEOUT | RENAME_EXCHANGE
        {
            return Err(Errno::EINVAL);
        }
        if name.len() > NAME_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        check_name(newname).map_err(|e| if e == Errno::EEXIST { Errno::EINVAL } else { e })?;
        if name == b"." || name == b".." {
            return Err(Errno::EINVAL);
        }
        let orphan = self.layout.orphan;
        let _cross = (parent != newparent).then(|| self.rename_lock.lock());
        loop {
            let mut held = self.lock_sorted(&[parent, newparent])?;
            self.ensure_dir(held.get(parent))?;
            self.ensure_dir(held.get(newparent))?;
            let src = held
                .get(parent)
                .dir
                .as_ref()
                .and_then(|d| d.get(name))
                .ok_or(Errno::ENOENT)?;
            let dst = held
                .get(newparent)
                .dir
                .as_ref()
                .and_then(|d| d.get(newname));
            if flags & RENAME_NOREPLACE != 0 && dst.is_some() {
                return Err(Errno::EEXIST);
            }
            if flags & RENAME_EXCHANGE != 0 && dst.is_none() {
                return Err(Errno::ENOENT);
            }
            if dst.is_some_and(|d| d.ino == src.ino) {
                return Ok(());
            }
            if !self.try_add(&mut held, src.ino)? {
                drop(held);
                std::thread::yield_now();
                continue;
            }
            if let Some(d) = dst {
                if !self.try_add(&mut held, d.ino)? {
                    drop(held);
                    std::thread::yield_now();
                    continue;
                }
            }
            let src_dir = held.get(src.ino).is_dir();
            let dst_dir = dst.map(|d| held.get(d.ino).is_dir());
            // A directory may not move below itself.
            if parent != newparent {
                let mut retry = false;
                for (moving, is_dir, into) in [
                    (src.ino, src_dir, newparent),
                    (
                        dst.map(|d| d.ino).unwrap_or(0),
                        dst_dir.unwrap_or(false) && flags & RENAME_EXCHANGE != 0,
                        parent,
                    ),
                ] {
                    if !is_dir {
                        continue;
                    }
                    match self.is_under(&mut held, into, moving)? {
                        Try::Done(true) => return Err(Errno::EINVAL),
                        Try::Done(false) => {}
                        Try::Retry => retry = true,
                    }
                }
                if retry {
                    drop(held);
                    std::thread::yield_now();
                    continue;
                }
            }
            if src_dir && held.get(newparent).d.nlink >= MAX_LINKS && parent != newparent {
                return Err(Errno::EMLINK);
            }
            let now = Ts::now();
            let mut w = Writes::new();
            if flags & RENAME_EXCHANGE != 0 {
                let dst = dst.ok_or(Errno::ENOENT)?;
                let dst_dir = dst_dir.unwrap_or(false);
                held.get(parent)
                    .dir
                    .as_mut()
                    .ok_or(Errno::EIO)?
                    .retarget(name, dst.ino, dst.kind);
                held.get(newparent)
                    .dir
                    .as_mut()
                    .ok_or(Errno::EIO)?
                    .retarget(newname, src.ino, src.kind);
                put_dir_block(held.get(parent), src.blk, &mut w)?;
                put_dir_block(held.get(newparent), dst.blk, &mut w)?;
                if parent != newparent {
                    if src_dir {
                        held.get(src.ino).d.parent = newparent;
                    }
                    if dst_dir {
                        held.get(dst.ino).d.parent = parent;
                    }
                    let delta = i64::from(src_dir) - i64::from(dst_dir);
                    let p = held.get(parent);
                    p.d.nlink = (i64::from(p.d.nlink) - delta) as u32;
                    let np = held.get(newparent);
                    np.d.nlink = (i64::from(np.d.nlink) + delta) as u32;
                }
                for ino in [src.ino, dst.ino] {
                    let i = held.get(ino);
                    i.d.ctime = now;
                    put_inode(i, None, &mut w)?;
                }
                for ino in [parent, newparent] {
                    let p = held.get(ino);
                    touch_dir(p, now);
                    put_inode(p, None, &mut w)?;
                }
                self.commit(w, None)?;
                return self.after_dir_change();
            }
            // Plain rename, perhaps replacing `dst`.
            let mut frees = Vec::new();
            let mut need = 0;
            let mut to_orphan = false;
            if let Some(d) = dst {
                self.check_replaceable(held.get(d.ino), src_dir)?;
                let (o, f) = Self::unlink_plan(held.get(d.ino));
                to_orphan = o;
                frees = f;
            } else {
                need += dir_need(held.get(newparent), newname.len());
            }
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
            let whiteout = flags & RENAME_WHITEOUT != 0;
            let mut ctx = self
                .alloc
                .prepare(need + u64::from(whiteout), newparent, &frees)?;
            let mut keep_pos = (parent == newparent).then_some(src.pos);
            if whiteout {
                // `name` stays, naming a new whiteout inode; the moved
                // entry gets a new position.
                keep_pos = None;
                let wino = ctx
                    .alloc(1, parent + 1)
                    .first()
                    .map(|r| r.0)
                    .ok_or(Errno::ENOSPC)?;
                let mut node = self.new_inode(wino, libc::S_IFCHR, Caller::default(), parent, now);
                put_inode(&mut node, None, &mut w)?;
                held.get(parent)
                    .dir
                    .as_mut()
                    .ok_or(Errno::EIO)?
                    .retarget(name, wino, node.kind())
                    .ok_or(Errno::EIO)?;
            } else {
                held.get(parent)
                    .dir
                    .as_mut()
                    .ok_or(Errno::EIO)?
                    .remove(name);
            }
            put_dir_block(held.get(parent), src.blk, &mut w)?;
            if crate::bugs::active("rename_split") {
                // Injected bug: the source directory's block goes in a
                // transaction of its own, before the target's.
                self.commit(std::mem::take(&mut w), None)?;
            }
            if let Some(d) = dst {
                let e = held
                    .get(newparent)
                    .dir
                    .as_mut()
                    .ok_or(Errno::EIO)?
                    .retarget(newname, src.ino, src.kind)
                    .ok_or(Errno::EIO)?;
                put_dir_block(held.get(newparent), e.blk, &mut w)?;
                let mut freed = Vec::new();
                let dst_dir = dst_dir.unwrap_or(false);
                self.drop_link(&mut held, d.ino, orphan, &mut ctx, &mut w, now, &mut freed)?;
                if dst_dir {
                    held.get(newparent).d.nlink -= 1;
                }
                self.commit_rename_tail(
                    &mut held, src.ino, src_dir, parent, newparent, now, &mut ctx, &mut w,
                )?;
                self.commit(w, Some(ctx))?;
                for f in freed {
                    self.forget_freed(f);
                }
                return self.after_dir_change();
            }
            // Within one directory the entry keeps its readdir position: a
            // new one would put it after every reader's cookie again, and a
            // reader renaming as it lists would never finish.
            dir_add_at(
                held.get(newparent),
                newname,
                src.ino,
                src.kind,
                keep_pos,
                &mut ctx,
                &mut w,
            )?;
            self.commit_rename_tail(
                &mut held, src.ino, src_dir, parent, newparent, now, &mut ctx, &mut w,
            )?;
            self.commit(w, Some(ctx))?;
            return self.after_dir_change();
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn commit_rename_tail(
        &self,
        held: &mut Held,
        src: u64,
        src_dir: bool,
        parent: u64,
        newparent: u64,
        now: Ts,
        ctx: &mut AllocCtx<'_>,
        w: &mut Writes,
    ) -> Result<(), Errno> {
        if src_dir && parent != newparent {
            held.get(src).d.parent = newparent;
            held.get(parent).d.nlink -= 1;
            held.get(newparent).d.nlink += 1;
        }
        let s = held.get(src);
        s.d.ctime = now;
        put_inode(s, None, w)?;
        for ino in [parent, newparent] {
            let p = held.get(ino);
            touch_dir(p, now);
            put_inode(p, Some(ctx), w)?;
        }
        Ok(())
    }
}
