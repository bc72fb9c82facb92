//! POSIX ACLs kept consistent with the mode, as ext4 does (the rules are
//! in [`crate::acl`]): setting an access ACL sets the mode, chmod sets the
//! ACL's mask, a new inode inherits its directory's default ACL.

use std::collections::BTreeMap;

use super::undo::undo_on_error;
use super::{FileSystem, IGuard, Inode, Writes, S_IFLNK, S_IFMT};
use crate::acl::{self, Acl};
use crate::alloc::AllocCtx;
use crate::error::Errno;
use crate::format::{encode_xattrs, xattr_size, XATTR_SPACE};

/// What a new inode takes from its directory's default ACL.
pub(super) struct Inherited {
    /// The new inode's mode (type, set-id and permission bits).
    pub mode: u32,
    /// Its xattrs: the access ACL when the mode cannot say it all, and for
    /// a directory the default ACL again. Empty: nothing to store.
    pub xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
}

impl Inherited {
    /// Blocks the new inode's xattrs need.
    pub fn blocks(&self) -> u64 {
        u64::from(!self.xattrs.is_empty())
    }

    /// Give `node` (new, in this transaction) its xattrs, in a block from
    /// `ctx` (reserved with [`blocks`](Self::blocks)). They fit in one
    /// block ([`FileSystem::inherit`] checked), which is the first block
    /// of an xattr chain as well, so no chain feature is involved.
    pub fn apply(
        self,
        node: &mut Inode,
        ctx: &mut AllocCtx<'_>,
        w: &mut Writes,
    ) -> Result<(), Errno> {
        if self.xattrs.is_empty() {
            node.xattrs = Some(self.xattrs);
            return Ok(());
        }
        let ino = node.d.ino;
        let blk = ctx.alloc(1, ino + 1).first().ok_or(Errno::ENOSPC)?.0;
        node.d.xattr_blk = blk;
        w.insert(
            blk,
            encode_xattrs(
                ino,
                self.xattrs
                    .iter()
                    .map(|(k, v)| (k.as_slice(), v.as_slice())),
            ),
        );
        node.xattrs = Some(self.xattrs);
        Ok(())
    }
}

/// Whether `map` fits in one block (what a new inode's inherited ACLs
/// must, see [`Inherited::apply`]).
fn fits(map: &BTreeMap<Vec<u8>, Vec<u8>>) -> bool {
    map.iter()
        .map(|(k, v)| xattr_size(k.len(), v.len()))
        .sum::<usize>()
        <= XATTR_SPACE
}

impl FileSystem {
    /// The default ACL of directory `dir`, if it has one.
    fn default_acl(&self, dir: &mut Inode) -> Result<Option<Acl>, Errno> {
        if dir.d.xattr_blk == 0 {
            return Ok(None);
        }
        self.ensure_xattrs(dir)?;
        match dir.xattrs.as_ref().and_then(|m| m.get(acl::DEFAULT)) {
            // Stored values were validated when set.
            Some(v) => Acl::decode(v).map(Some).map_err(|_| Errno::EIO),
            None => Ok(None),
        }
    }

    /// `posix_acl_create`: the mode and ACLs of a new inode of `mode`
    /// created in `dir` by a caller with `umask`. Under a default ACL the
    /// ACL masks the mode and the umask is ignored; without one the umask
    /// applies. Symlinks take neither (their mode is always 0777).
    pub(super) fn inherit(
        &self,
        dir: &mut Inode,
        mode: u32,
        umask: u32,
    ) -> Result<Inherited, Errno> {
        let none = |mode| Inherited {
            mode,
            xattrs: BTreeMap::new(),
        };
        if mode & S_IFMT == S_IFLNK {
            return Ok(none(mode));
        }
        let Some(default) = self.default_acl(dir)? else {
            return Ok(none(mode & !(umask & 0o777)));
        };
        let mut access = default.clone();
        let (mode, not_equiv) = access.create_masq(mode);
        let mut xattrs = BTreeMap::new();
        if not_equiv {
            xattrs.insert(acl::ACCESS.to_vec(), access.encode());
        }
        if mode & S_IFMT == libc::S_IFDIR {
            xattrs.insert(acl::DEFAULT.to_vec(), default.encode());
        }
        if !fits(&xattrs) {
            return Err(Errno::ENOSPC);
        }
        Ok(Inherited { mode, xattrs })
    }

    /// chmod of an inode with an access ACL: the ACL's owner, mask (or
    /// owning group) and other entries take the new mode's bits, in the
    /// same transaction (`w`).
    pub(super) fn acl_chmod(&self, g: &mut Inode, w: &mut Writes) -> Result<(), Errno> {
        if g.d.xattr_blk == 0 {
            return Ok(());
        }
        self.ensure_xattrs(g)?;
        let mode = g.d.mode;
        let mut map = g.xattrs.clone().ok_or(Errno::EIO)?;
        let Some(v) = map.get_mut(acl::ACCESS) else {
            return Ok(());
        };
        let mut a = Acl::decode(v).map_err(|_| Errno::EIO)?;
        a.chmod(mode);
        *v = a.encode();
        // The same entries, so the same size: the set keeps its blocks.
        self.store_xattrs(g, map, None, w)
    }

    /// setxattr of `system.posix_acl_access` or `_default` (name and
    /// size already checked): EINVAL for a malformed ACL, EACCES for a
    /// default ACL on a non-directory, EOPNOTSUPP on a symlink. An access
    /// ACL sets the mode's permission bits (`posix_acl_update_mode`), and
    /// is stored only if the mode cannot say it all; it also clears
    /// setgid if `kill_sgid` (see [`FileSystem::setxattr_ext`]).
    pub(super) fn set_acl(
        &self,
        mut g: IGuard,
        name: &[u8],
        value: &[u8],
        flags: i32,
        kill_sgid: bool,
    ) -> Result<(), Errno> {
        if g.d.mode & S_IFMT == S_IFLNK {
            return Err(Errno::EOPNOTSUPP);
        }
        let a = Acl::decode(value)?;
        let access = name == acl::ACCESS;
        if !access && !g.is_dir() {
            return Err(Errno(libc::EACCES));
        }
        undo_on_error(&mut g, |g| {
            let mut map = self.xattrs_to_set(g, name, flags)?;
            if access {
                let (bits, equiv) = a.mode_bits();
                g.d.mode = (g.d.mode & !0o777) | bits;
                if kill_sgid {
                    g.d.mode &= !libc::S_ISGID;
                }
                if equiv {
                    map.remove(name);
                } else {
                    map.insert(name.to_vec(), a.encode());
                }
            } else {
                map.insert(name.to_vec(), a.encode());
            }
            // The mode and the set in one transaction (the set's blocks
            // follow its size, a chain if it needs one).
            self.replace_xattrs(g, map)
        })
    }
}
