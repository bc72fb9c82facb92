//! Extended attributes: one block per inode, loaded on first use.
//!
//! Names are checked as ext4 does: the namespaces ptsd stores are `user.`,
//! `trusted.`, `security.` and the POSIX ACLs (`system.posix_acl_access`,
//! `system.posix_acl_default`); any other name is EOPNOTSUPP, a namespace
//! prefix with nothing after it EINVAL.

use std::collections::BTreeMap;

use super::{put_inode, FileSystem, Inode, Writes};
use crate::error::Errno;
use crate::format::{decode_xattrs, encode_xattrs, xattr_size, Ts, XATTR_SPACE};

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
    pub(super) fn ensure_xattrs(&self, g: &mut Inode) -> Result<(), Errno> {
        if g.xattrs.is_some() {
            return Ok(());
        }
        let mut m = BTreeMap::new();
        if g.d.xattr_blk != 0 {
            let b = self.read_block(g.d.xattr_blk)?;
            for (k, v) in decode_xattrs(&b, g.d.xattr_blk, g.d.ino)? {
                m.insert(k, v);
            }
        }
        g.xattrs = Some(m);
        Ok(())
    }

    /// Set an xattr (`flags`: XATTR_CREATE = 1, XATTR_REPLACE = 2).
    pub fn setxattr(&self, ino: u64, name: &[u8], value: &[u8], flags: i32) -> Result<(), Errno> {
        self.writable()?;
        check_name(name)?;
        if value.len() > u16::MAX as usize {
            return Err(Errno::E2BIG);
        }
        let g = self.lock(ino)?;
        if name == crate::acl::ACCESS || name == crate::acl::DEFAULT {
            // Validated, and kept consistent with the mode (posix_acl.rs).
            return self.set_acl(g, name, value, flags);
        }
        let mut g = g;
        self.ensure_xattrs(&mut g)?;
        let map = g.xattrs.as_ref().ok_or(Errno::EIO)?;
        let exists = map.contains_key(name);
        if flags & libc::XATTR_CREATE != 0 && exists {
            return Err(Errno::EEXIST);
        }
        if flags & libc::XATTR_REPLACE != 0 && !exists {
            return Err(Errno::ENODATA);
        }
        let total: usize = map
            .iter()
            .filter(|(k, _)| k.as_slice() != name)
            .map(|(k, v)| xattr_size(k.len(), v.len()))
            .sum::<usize>()
            + xattr_size(name.len(), value.len());
        if total > XATTR_SPACE {
            return Err(Errno::ENOSPC);
        }
        let mut ctx = None;
        if g.d.xattr_blk == 0 {
            let mut c = self.alloc.prepare(1, ino + 1, &[])?;
            g.d.xattr_blk = c.alloc(1, ino + 1).first().ok_or(Errno::ENOSPC)?.0;
            ctx = Some(c);
        }
        g.xattrs
            .as_mut()
            .ok_or(Errno::EIO)?
            .insert(name.to_vec(), value.to_vec());
        g.d.ctime = Ts::now();
        let mut w = Writes::new();
        let map = g.xattrs.as_ref().ok_or(Errno::EIO)?;
        w.insert(
            g.d.xattr_blk,
            encode_xattrs(ino, map.iter().map(|(k, v)| (k.as_slice(), v.as_slice()))),
        );
        put_inode(&mut g, None, &mut w)?;
        self.commit(w, ctx)
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
        self.ensure_xattrs(&mut g)?;
        if g.xattrs.as_mut().ok_or(Errno::EIO)?.remove(name).is_none() {
            return Err(Errno::ENODATA);
        }
        g.d.ctime = Ts::now();
        let mut w = Writes::new();
        let mut ctx = None;
        if g.xattrs.as_ref().is_some_and(|m| m.is_empty()) {
            let blk = g.d.xattr_blk;
            let mut c = self.alloc.prepare(0, 0, &[(blk, 1)])?;
            c.free(blk, 1)?;
            g.d.xattr_blk = 0;
            ctx = Some(c);
        } else {
            let map = g.xattrs.as_ref().ok_or(Errno::EIO)?;
            w.insert(
                g.d.xattr_blk,
                encode_xattrs(ino, map.iter().map(|(k, v)| (k.as_slice(), v.as_slice()))),
            );
        }
        put_inode(&mut g, None, &mut w)?;
        self.commit(w, ctx)
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
