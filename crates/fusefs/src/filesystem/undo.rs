//! A failed operation leaves its inode as it found it.
//!
//! An operation changes the inode in memory (its extent map, its stored
//! fields, its extent chain, its xattrs) as it builds the transaction, and
//! the allocation context rolls the bitmaps back if it fails. Without the
//! same for the inode, a failure after a change (ENOSPC for an extent
//! block, a read error, a failed commit) left the cached inode describing
//! blocks the bitmap no longer gave it, or no longer describing blocks the
//! bitmap still did: the next write of the inode stored that, and the
//! blocks leaked or were owned twice (issue 45 §1).

use super::Inode;
use crate::error::Errno;

/// Run `f` on `g`; if it fails, put back every in-memory change it made
/// to `g`: the extent map through its undo log, the rest from copies,
/// which are small (the inode's fields, the chains' block lists). The
/// xattrs are dropped instead, to be read again from their blocks, which
/// hold what the last finished operation stored.
pub(super) fn undo_on_error<T>(
    g: &mut Inode,
    f: impl FnOnce(&mut Inode) -> Result<T, Errno>,
) -> Result<T, Errno> {
    let d = g.d.clone();
    let chain = g.chain.clone();
    let xattr_more = g.xattr_more.clone();
    let cp = g.ext.checkpoint();
    let res = f(g);
    if res.is_ok() {
        g.ext.release(cp);
    } else {
        g.ext.rollback(cp);
        g.d = d;
        g.chain = chain;
        g.xattr_more = xattr_more;
        g.xattrs = None;
    }
    res
}
