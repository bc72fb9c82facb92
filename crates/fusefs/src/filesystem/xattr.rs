//! Extended attributes: one block per inode while they fit, else a chain
//! of up to 16 (`crate::xattr_chain`), loaded on first use (a chain with
//! the inode, as its blocks are the inode's to free).
//!
//! Names are checked as ext4 does: the namespaces ptsd stores are `user.`,
//! `trusted.`, `security.` and the POSIX ACLs (`system.posix_acl_access`,
//! `system.posix_acl_default`); any other name is EOPNOTSUPP, a namespace
//! prefix with nothing after it EINVAL.

use std::collections::BTreeMap;

use super::inode_io::LoadErr;
use super::undo::undo_on_error;
use super::{put_inode, FileSystem, Inode, Writes};
use crate::alloc::AllocCtx;
use crate::chain::LoadError;
use crate::error::Errno;
use crate::format::{Ts, BLOCK_SIZE, INCOMPAT_XATTR_CHAIN};
use crate::xattr_chain;

/// Namespaces whose attributes are stored (prefix, then any name).
const NAMESPACES: [&[u8]; 3] = [b"user.", b"trusted.", b"security."];
/// Whole names stored in the `system.` namespace.
const SYSTEM_NAMES: [&[u8]; 2] = [b"system.posix_acl_access", b"system.posix_acl_default"];

/// Whether `name` may be stored: ERANGE if empty or too long, EINVAL for a
/// bare namespace prefix, EOPNOTSUPP for an unknown namespace.
pub fn check_name(name: &[u8]) -> Result<(), Errno> {
    if name.is_empty() || name.len() > 255 {
        return Err(Errno::ERANGE);
    }
    if SYSTEM_NAMES.contains(&name) {
        return Ok(());
    }
    match NAMESPACES.iter().find(|p| name.starts_with(p)) {
        Some(p) if name.len() > p.len() => Ok(()),
        Some(_) => Err(Errno::EINVAL),
        None => Err(Errno::EOPNOTSUPP),
    }
}

impl FileSystem {
    /// Read inode `g`'s xattrs and its chain's block list.
    pub(super) fn load_xattrs(&self, g: &mut Inode) -> Result<(), LoadErr> {
        let valid = self.layout.data_start..self.layout.num_blocks;
        let (entries, blocks) =
            xattr_chain::load(g.d.ino, g.d.xattr_blk, g.d.xattr_blocks, valid, |blk| {
                let mut b = vec![0u8; BLOCK_SIZE];
                self.store.read(blk, &mut b).map(|()| b)
            })
            .map_err(|e| match e {
                LoadError::Read(e) => LoadErr::Store(e),
                LoadError::Corrupt(e) => LoadErr::Format(e),
            })?;
        g.xattrs = Some(entries.into_iter().collect());
        g.xattr_more = blocks.into_iter().skip(1).collect();
        Ok(())
    }

    pub(super) fn ensure_xattrs(&self, g: &mut Inode) -> Result<(), Errno> {
        if g.xattrs.is_none() {
            self.load_xattrs(g).map_err(LoadErr::errno)?;
        }
        Ok(())
    }

    /// A copy of `g`'s xattrs to set `name` in, once setxattr's
    /// `XATTR_CREATE`/`XATTR_REPLACE` `flags` allow it.
    pub(super) fn xattrs_to_set(
        &self,
        g: &mut Inode,
        name: &[u8],
        flags: i32,
    ) -> Result<BTreeMap<Vec<u8>, Vec<u8>>, Errno> {
        self.ensure_xattrs(g)?;
        let map = g.xattrs.clone().ok_or(Errno::EIO)?;
        let exists = map.contains_key(name);
        if flags & libc::XATTR_CREATE != 0 && exists {
            return Err(Errno::EEXIST);
        }
        if flags & libc::XATTR_REPLACE != 0 && !exists {
            return Err(Errno::ENODATA);
        }
        Ok(map)
    }

    /// The blocks holding `g`'s xattrs, in order.
    fn xattr_blocks(g: &Inode) -> Vec<u64> {
        (g.d.xattr_blk != 0)
            .then_some(g.d.xattr_blk)
            .into_iter()
            .chain(g.xattr_more.iter().copied())
            .collect()
    }

    /// Store `map` as `g`'s xattrs (blocks into `w`). With `ctx`, the
    /// blocks follow the set's size: allocated from it (which must have
    /// room for [`xattr_chain::blocks_needed`]) or freed to it (which must
    /// hold their groups); without, the set keeps its blocks (ENOSPC if it
    /// needs more). The first chain marks the image.
    pub(super) fn store_xattrs(
        &self,
        g: &mut Inode,
        map: BTreeMap<Vec<u8>, Vec<u8>>,
        ctx: Option<&mut AllocCtx<'_>>,
        w: &mut Writes,
    ) -> Result<(), Errno> {
        let need = xattr_chain::blocks_needed(&map).ok_or(Errno::ENOSPC)?;
        let mut blocks = Self::xattr_blocks(g);
        match ctx {
            Some(ctx) => {
                if need > blocks.len() {
                    let more = (need - blocks.len()) as u64;
                    let goal = blocks.last().copied().unwrap_or(g.d.ino) + 1;
                    let runs = ctx.alloc(more, goal);
                    if runs.iter().map(|r| r.1).sum::<u64>() < more {
                        return Err(Errno::ENOSPC);
                    }
                    blocks.extend(runs.into_iter().flat_map(|(s, l)| s..s + l));
                }
                while blocks.len() > need {
                    let b = blocks.pop().ok_or(Errno::EIO)?;
                    ctx.free(b, 1)?;
                }
            }
            None if need > blocks.len() => return Err(Errno::ENOSPC),
            None => {}
        }
        let encoded = xattr_chain::encode_set(g.d.ino, &map, &blocks).ok_or(Errno::ENOSPC)?;
        if blocks.len() > 1 {
            let mut sb = self.sb.lock();
            if sb.features_incompat & INCOMPAT_XATTR_CHAIN == 0 {
                // Before the inode is journaled: an older build refuses
                // the image rather than calling the chain corrupt.
                sb.features_incompat |= INCOMPAT_XATTR_CHAIN;
                self.write_super(&sb)?;
            }
        }
        for (blk, b) in encoded {
            w.insert(blk, b);
        }
        g.d.xattr_blk = blocks.first().copied().unwrap_or(0);
        g.d.xattr_blocks = if blocks.len() > 1 {
            blocks.len() as u32
        } else {
            0
        };
        g.xattr_more = blocks.into_iter().skip(1).collect();
        g.xattrs = Some(map);
        Ok(())
    }

    /// Change `g`'s xattrs to `map` in one transaction, allocating or
    /// freeing blocks as the set's size asks.
    pub(super) fn replace_xattrs(
        &self,
        g: &mut Inode,
        map: BTreeMap<Vec<u8>, Vec<u8>>,
    ) -> Result<(), Errno> {
        let need = xattr_chain::blocks_needed(&map).ok_or(Errno::ENOSPC)?;
        let have = Self::xattr_blocks(g);
        let frees: Vec<(u64, u64)> = have.iter().skip(need).map(|&b| (b, 1)).collect();
        let more = need.saturating_sub(have.len()) as u64;
        let mut ctx = if more > 0 || !frees.is_empty() {
            Some(self.alloc.prepare(more, g.d.ino + 1, &frees)?)
        } else {
            None
        };
        let mut w = Writes::new();
        self.store_xattrs(g, map, ctx.as_mut(), &mut w)?;
        g.d.ctime = Ts::now();
        put_inode(g, None, &mut w)?;
        self.commit(w, ctx)
    }

    /// Set an xattr (`flags`: XATTR_CREATE = 1, XATTR_REPLACE = 2). A set
    /// larger than 16 blocks (about 64 KiB) or one value larger than a
    /// block is ENOSPC.
    pub fn setxattr(&self, ino: u64, name: &[u8], value: &[u8], flags: i32) -> Result<(), Errno> {
        self.setxattr_ext(ino, name, value, flags, false)
    }

    /// [`setxattr`](Self::setxattr), saying whether setting an access
    /// ACL clears setgid (`kill_sgid`: the caller is not in the file's
    /// group and lacks CAP_FSETID, the kernel's
    /// `FUSE_SETXATTR_ACL_KILL_SGID`), as Linux's `posix_acl_update_mode`
    /// does.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use ptsd_blockdev::MemDevice;
    /// # use ptsd_fs::{mkfs, Caller, DirectStore, FileSystem, MkfsOptions};
    /// # let dev = Arc::new(MemDevice::new(4096, 256).unwrap());
    /// # let store = Arc::new(DirectStore::new(dev).unwrap());
    /// # mkfs(&*store, &MkfsOptions::default()).unwrap();
    /// # let fs = FileSystem::mount(store).unwrap();
    /// let f = fs.mknod(fs.root(), b"f", 0o102775, 0, Caller::default()).unwrap().ino;
    /// let acl = ptsd_fs::acl::Acl::from_mode(0o750).encode();
    /// fs.setxattr_ext(f, b"system.posix_acl_access", &acl, 0, true).unwrap();
    /// assert_eq!(fs.getattr(f).unwrap().mode & 0o7777, 0o750);
    /// ```
    pub fn setxattr_ext(
        &self,
        ino: u64,
        name: &[u8],
        value: &[u8],
        flags: i32,
        kill_sgid: bool,
    ) -> Result<(), Errno> {
        self.writable()?;
        check_name(name)?;
        if value.len() > u16::MAX as usize {
            return Err(Errno::E2BIG);
        }
        let mut g = self.lock(ino)?;
        if name == crate::acl::ACCESS || name == crate::acl::DEFAULT {
            // Validated, and kept consistent with the mode (posix_acl.rs).
            return self.set_acl(g, name, value, flags, kill_sgid);
        }
        undo_on_error(&mut g, |g| {
            let mut map = self.xattrs_to_set(g, name, flags)?;
            map.insert(name.to_vec(), value.to_vec());
            self.replace_xattrs(g, map)
        })
    }

    /// Get an xattr's value.
    pub fn getxattr(&self, ino: u64, name: &[u8]) -> Result<Vec<u8>, Errno> {
        check_name(name)?;
        let mut g = self.lock(ino)?;
        self.ensure_xattrs(&mut g)?;
        g.xattrs
            .as_ref()
            .and_then(|m| m.get(name))
            .cloned()
            .ok_or(Errno::ENODATA)
    }

    /// xattr names, each followed by a NUL byte.
    pub fn listxattr(&self, ino: u64) -> Result<Vec<u8>, Errno> {
        let mut g = self.lock(ino)?;
        self.ensure_xattrs(&mut g)?;
        let mut out = Vec::new();
        for k in g.xattrs.as_ref().ok_or(Errno::EIO)?.keys() {
            out.extend_from_slice(k);
            out.push(0);
        }
        Ok(out)
    }

    /// Remove an xattr.
    pub fn removexattr(&self, ino: u64, name: &[u8]) -> Result<(), Errno> {
        self.writable()?;
        check_name(name)?;
        let mut g = self.lock(ino)?;
        undo_on_error(&mut g, |g| {
            self.ensure_xattrs(g)?;
            let mut map = g.xattrs.clone().ok_or(Errno::EIO)?;
            if map.remove(name).is_none() {
                return Err(Errno::ENODATA);
            }
            self.replace_xattrs(g, map)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_as_ext4() {
        for ok in [
            &b"user.a"[..],
            b"trusted.x",
            b"security.selinux",
            b"security.capability",
            b"system.posix_acl_access",
            b"system.posix_acl_default",
        ] {
            assert_eq!(check_name(ok), Ok(()), "{}", String::from_utf8_lossy(ok));
        }
        for (bad, e) in [
            (&b"bogus.ns"[..], Errno::EOPNOTSUPP),
            (b"system.foo", Errno::EOPNOTSUPP),
            (b"noprefix", Errno::EOPNOTSUPP),
            (b"USER.a", Errno::EOPNOTSUPP),
            (b"user.", Errno::EINVAL),
            (b"", Errno::ERANGE),
        ] {
            assert_eq!(check_name(bad), Err(e), "{}", String::from_utf8_lossy(bad));
        }
        assert_eq!(check_name(&[b'u'; 256]), Err(Errno::ERANGE));
    }
}
