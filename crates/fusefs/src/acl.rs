//! POSIX ACLs as Linux stores them in `system.posix_acl_access` and
//! `system.posix_acl_default` (`posix_acl_xattr_header` version 2, then
//! entries of tag u16, perm u16, id u32, little-endian), and the rules
//! ext4 applies through the kernel's `posix_acl_*` helpers: an access ACL
//! sets the mode (and one the mode can say is kept as the mode only),
//! chmod rewrites the ACL's mask, and a new inode under a default ACL
//! takes it instead of the umask.
//!
//! With `FUSE_POSIX_ACL` the kernel checks permissions against these
//! ACLs itself (with `default_permissions`); ptsd-fs keeps them and the
//! mode consistent ([`crate::FileSystem::setxattr`], `setattr`, create).

use ptsd_blockdev::le::{get_u16, get_u32, put_u16, put_u32};
use thiserror::Error;

use crate::error::Errno;

/// The xattr holding the access ACL.
pub const ACCESS: &[u8] = b"system.posix_acl_access";
/// The xattr holding a directory's default ACL.
pub const DEFAULT: &[u8] = b"system.posix_acl_default";

const VERSION: u32 = 2;
const HEADER: usize = 4;
const ENTRY: usize = 8;
/// The id of entries that name no user or group (`ACL_UNDEFINED_ID`).
pub const UNDEFINED_ID: u32 = u32::MAX;

/// An entry's tag (what it grants to).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Tag {
    /// The owner.
    UserObj,
    /// A named user.
    User,
    /// The owning group.
    GroupObj,
    /// A named group.
    Group,
    /// The most any group-class entry grants.
    Mask,
    /// Everyone else.
    Other,
}

impl Tag {
    fn code(self) -> u16 {
        match self {
            Tag::UserObj => 0x01,
            Tag::User => 0x02,
            Tag::GroupObj => 0x04,
            Tag::Group => 0x08,
            Tag::Mask => 0x10,
            Tag::Other => 0x20,
        }
    }
    fn from_code(c: u16) -> Option<Tag> {
        Some(match c {
            0x01 => Tag::UserObj,
            0x02 => Tag::User,
            0x04 => Tag::GroupObj,
            0x08 => Tag::Group,
            0x10 => Tag::Mask,
            0x20 => Tag::Other,
            _ => return None,
        })
    }
    fn named(self) -> bool {
        matches!(self, Tag::User | Tag::Group)
    }
}

/// One entry: who, and rwx bits (4, 2, 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub tag: Tag,
    pub perm: u16,
    /// The uid or gid of a named entry; unused otherwise.
    pub id: u32,
}

/// Why an ACL xattr value is refused (EINVAL, as the kernel's
/// `posix_acl_from_xattr` and `posix_acl_valid`).
#[derive(Debug, Error, PartialEq, Eq)]
pub enum AclError {
    /// Shorter than the header, or not a whole number of entries.
    #[error("ACL of {0} bytes is not a header and whole entries")]
    Size(usize),
    /// Not `posix_acl_xattr_header` version 2.
    #[error("ACL version {0}, want 2")]
    Version(u32),
    /// An unknown tag.
    #[error("unknown ACL tag {0:#x}")]
    Tag(u16),
    /// Permission bits beyond rwx.
    #[error("ACL permission {0:#o} beyond rwx")]
    Perm(u16),
    /// Entries out of order, repeated, or a required one missing (owner,
    /// owning group, other; a mask when there are named entries).
    #[error("ACL entries malformed: {0}")]
    Shape(&'static str),
}

impl From<AclError> for Errno {
    fn from(_: AclError) -> Errno {
        Errno::EINVAL
    }
}

/// A POSIX ACL, in canonical entry order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Acl {
    pub entries: Vec<Entry>,
}

impl Acl {
    /// Parse and validate an xattr value.
    ///
    /// ```
    /// use ptsd_fs::acl::{Acl, Tag};
    /// // user::rw- group::r-- other::---
    /// let acl = Acl::from_mode(0o640);
    /// let bytes = acl.encode();
    /// assert_eq!(Acl::decode(&bytes).unwrap(), acl);
    /// assert_eq!(acl.entries[1].tag, Tag::GroupObj);
    /// assert!(Acl::decode(&bytes[..7]).is_err());
    /// ```
    pub fn decode(b: &[u8]) -> Result<Acl, AclError> {
        if b.len() < HEADER || (b.len() - HEADER) % ENTRY != 0 {
            return Err(AclError::Size(b.len()));
        }
        let v = get_u32(b, 0);
        if v != VERSION {
            return Err(AclError::Version(v));
        }
        let mut entries = Vec::with_capacity((b.len() - HEADER) / ENTRY);
        for o in (HEADER..b.len()).step_by(ENTRY) {
            let code = get_u16(b, o);
            let tag = Tag::from_code(code).ok_or(AclError::Tag(code))?;
            let perm = get_u16(b, o + 2);
            if perm & !7 != 0 {
                return Err(AclError::Perm(perm));
            }
            let id = if tag.named() {
                get_u32(b, o + 4)
            } else {
                UNDEFINED_ID
            };
            entries.push(Entry { tag, perm, id });
        }
        let acl = Acl { entries };
        acl.validate()?;
        Ok(acl)
    }

    /// The xattr value.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; HEADER + ENTRY * self.entries.len()];
        put_u32(&mut b, 0, VERSION);
        for (i, e) in self.entries.iter().enumerate() {
            let o = HEADER + i * ENTRY;
            put_u16(&mut b, o, e.tag.code());
            put_u16(&mut b, o + 2, e.perm);
            put_u32(
                &mut b,
                o + 4,
                if e.tag.named() { e.id } else { UNDEFINED_ID },
            );
        }
        b
    }

    /// The three-entry ACL a mode stands for.
    pub fn from_mode(mode: u32) -> Acl {
        let e = |tag, shift: u32| Entry {
            tag,
            perm: ((mode >> shift) & 7) as u16,
            id: UNDEFINED_ID,
        };
        Acl {
            entries: vec![e(Tag::UserObj, 6), e(Tag::GroupObj, 3), e(Tag::Other, 0)],
        }
    }

    /// `posix_acl_valid`: the entries in tag order (named ones by id,
    /// each id once), exactly one owner, owning group and other, at most
    /// one mask, and one whenever there are named entries.
    fn validate(&self) -> Result<(), AclError> {
        let mut prev: Option<&Entry> = None;
        let (mut owner, mut group, mut other, mut mask, mut named) = (0, 0, 0, 0, 0);
        for e in &self.entries {
            if let Some(p) = prev {
                if e.tag < p.tag {
                    return Err(AclError::Shape("entries out of order"));
                }
                if e.tag == p.tag && (!e.tag.named() || e.id <= p.id) {
                    return Err(AclError::Shape("an entry repeated or named ones unsorted"));
                }
            }
            match e.tag {
                Tag::UserObj => owner += 1,
                Tag::GroupObj => group += 1,
                Tag::Other => other += 1,
                Tag::Mask => mask += 1,
                Tag::User | Tag::Group => named += 1,
            }
            prev = Some(e);
        }
        if owner != 1 || group != 1 || other != 1 {
            return Err(AclError::Shape("owner, owning group or other missing"));
        }
        if named > 0 && mask == 0 {
            return Err(AclError::Shape("named entries without a mask"));
        }
        Ok(())
    }

    fn find(&mut self, tag: Tag) -> Option<&mut Entry> {
        self.entries.iter_mut().find(|e| e.tag == tag)
    }

    /// `posix_acl_equiv_mode`: the permission bits this ACL gives the
    /// mode (the group bits are the mask's when there is one), and whether
    /// the mode says it all (only owner, owning group and other).
    pub fn mode_bits(&self) -> (u32, bool) {
        let mut mode = 0u32;
        let mut equiv = true;
        for e in &self.entries {
            let p = u32::from(e.perm & 7);
            match e.tag {
                Tag::UserObj => mode |= p << 6,
                Tag::GroupObj => mode |= p << 3,
                Tag::Other => mode |= p,
                Tag::Mask => {
                    mode = (mode & !0o070) | (p << 3);
                    equiv = false;
                }
                Tag::User | Tag::Group => equiv = false,
            }
        }
        (mode, equiv)
    }

    /// `posix_acl_chmod`: the new mode's bits go to the owner, the mask
    /// (the owning group when there is none) and other entries.
    ///
    /// ```
    /// use ptsd_fs::acl::{Acl, Tag};
    /// let mut acl = Acl::from_mode(0o777);
    /// acl.chmod(0o750);
    /// assert_eq!(acl.mode_bits(), (0o750, true));
    /// ```
    pub fn chmod(&mut self, mode: u32) {
        let has_mask = self.entries.iter().any(|e| e.tag == Tag::Mask);
        for e in &mut self.entries {
            match e.tag {
                Tag::UserObj => e.perm = ((mode >> 6) & 7) as u16,
                Tag::Other => e.perm = (mode & 7) as u16,
                Tag::Mask => e.perm = ((mode >> 3) & 7) as u16,
                Tag::GroupObj if !has_mask => e.perm = ((mode >> 3) & 7) as u16,
                _ => {}
            }
        }
    }

    /// `posix_acl_create_masq`: make this (a directory's default ACL) the
    /// access ACL of a new inode created with `mode`: each class's
    /// permissions are cut to the requested ones and the mode's to the
    /// ACL's. Returns the new mode (type and set-id bits kept) and whether
    /// the ACL says more than the mode (then it must be stored).
    ///
    /// ```
    /// use ptsd_fs::acl::Acl;
    /// let mut acl = Acl::from_mode(0o750);
    /// // open(..., 0666) under a default ACL user::rwx group::r-x other::---
    /// assert_eq!(acl.create_masq(libc::S_IFREG | 0o666), (libc::S_IFREG | 0o640, false));
    /// ```
    pub fn create_masq(&mut self, mode: u32) -> (u32, bool) {
        let mut m = mode & 0o777;
        let mut not_equiv = false;
        for e in &mut self.entries {
            match e.tag {
                Tag::UserObj => {
                    e.perm &= ((m >> 6) & 7) as u16;
                    m &= (u32::from(e.perm) << 6) | !0o700;
                }
                Tag::User | Tag::Group | Tag::Mask => not_equiv = true,
                Tag::Other => {
                    e.perm &= (m & 7) as u16;
                    m &= u32::from(e.perm) | !0o007;
                }
                Tag::GroupObj => {}
            }
        }
        let group = if self.entries.iter().any(|e| e.tag == Tag::Mask) {
            Tag::Mask
        } else {
            Tag::GroupObj
        };
        if let Some(e) = self.find(group) {
            e.perm &= ((m >> 3) & 7) as u16;
            m &= (u32::from(e.perm) << 3) | !0o070;
        }
        ((mode & !0o777) | m, not_equiv)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(tag: Tag, perm: u16, id: u32) -> Entry {
        Entry { tag, perm, id }
    }

    fn full() -> Acl {
        Acl {
            entries: vec![
                entry(Tag::UserObj, 7, UNDEFINED_ID),
                entry(Tag::User, 6, 1000),
                entry(Tag::User, 4, 1001),
                entry(Tag::GroupObj, 5, UNDEFINED_ID),
                entry(Tag::Group, 7, 100),
                entry(Tag::Mask, 7, UNDEFINED_ID),
                entry(Tag::Other, 0, UNDEFINED_ID),
            ],
        }
    }

    #[test]
    fn round_trip_and_exact_bytes() {
        let acl = Acl::from_mode(0o754);
        let b = acl.encode();
        assert_eq!(
            b,
            [
                2, 0, 0, 0, // version
                1, 0, 7, 0, 0xff, 0xff, 0xff, 0xff, // user::rwx
                4, 0, 5, 0, 0xff, 0xff, 0xff, 0xff, // group::r-x
                0x20, 0, 4, 0, 0xff, 0xff, 0xff, 0xff, // other::r--
            ]
        );
        let f = full();
        assert_eq!(Acl::decode(&f.encode()).unwrap(), f);
    }

    #[test]
    fn malformed_values_are_refused_with_a_reason() {
        let good = full().encode();
        assert_eq!(Acl::decode(&[]), Err(AclError::Size(0)));
        assert_eq!(
            Acl::decode(&good[..good.len() - 1]),
            Err(AclError::Size(good.len() - 1))
        );
        let mut v1 = good.clone();
        v1[0] = 1;
        assert_eq!(Acl::decode(&v1), Err(AclError::Version(1)));
        let mut tag = good.clone();
        tag[4] = 0x40;
        assert_eq!(Acl::decode(&tag), Err(AclError::Tag(0x40)));
        let mut perm = good.clone();
        perm[6] = 8;
        assert_eq!(Acl::decode(&perm), Err(AclError::Perm(8)));
        // Only a header: no owner entry.
        assert!(matches!(Acl::decode(&good[..4]), Err(AclError::Shape(_))));
        // Named entries without a mask.
        let mut nomask = full();
        nomask.entries.retain(|e| e.tag != Tag::Mask);
        assert!(matches!(
            Acl::decode(&nomask.encode()),
            Err(AclError::Shape(_))
        ));
        // Out of order, and a named id twice.
        let mut swapped = full();
        swapped.entries.swap(0, 3);
        assert!(matches!(
            Acl::decode(&swapped.encode()),
            Err(AclError::Shape(_))
        ));
        let mut dup = full();
        dup.entries[2].id = 1000;
        assert!(matches!(
            Acl::decode(&dup.encode()),
            Err(AclError::Shape(_))
        ));
        assert_eq!(Errno::from(AclError::Version(3)), Errno::EINVAL);
    }

    #[test]
    fn mode_bits_use_the_mask_and_chmod_sets_it() {
        let mut f = full();
        assert_eq!(f.mode_bits(), (0o770, false));
        f.chmod(0o640);
        assert_eq!(f.mode_bits(), (0o640, false));
        // The owning group's entry is untouched when there is a mask.
        assert_eq!(f.entries[3].perm, 5);
        assert_eq!(f.entries[5].perm, 4);
        assert_eq!(Acl::from_mode(0o751).mode_bits(), (0o751, true));
    }

    #[test]
    fn create_masq_as_the_kernel() {
        // Default ACL with a named user: the mask takes the group bits.
        let mut f = full();
        let (mode, not_equiv) = f.create_masq(libc::S_IFDIR | libc::S_ISGID | 0o755);
        assert!(not_equiv);
        assert_eq!(mode, libc::S_IFDIR | libc::S_ISGID | 0o750);
        assert_eq!(f.entries[5].perm, 5, "mask cut to r-x");
        assert_eq!(f.entries[6].perm, 0);
        assert_eq!(f.entries[1].perm, 6, "named entries keep theirs");
        // Without a mask the owning group's entry is cut.
        let mut m = Acl::from_mode(0o777);
        assert_eq!(m.create_masq(0o600), (0o600, false));
        assert_eq!(m.mode_bits(), (0o600, true));
    }
}
