//! The inode cache: sharded maps of locked inodes, kernel references
//! (lookup counts, FORGET) and eviction.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use super::{Attr, FileSystem, Held, IGuard, Inode, Try, EVICT_RETRY_MAX, SHARDS};
use crate::error::Errno;

impl FileSystem {
    pub(super) fn shard(&self, ino: u64) -> &Mutex<HashMap<u64, Arc<Mutex<Inode>>>> {
        &self.shards[(ino as usize) % SHARDS]
    }

    /// The cached inode `ino`, loading it on first use.
    fn get(&self, ino: u64) -> Result<Arc<Mutex<Inode>>, Errno> {
        let mut shard = self.shard(ino).lock();
        if let Some(i) = shard.get(&ino) {
            return Ok(i.clone());
        }
        let inode = self.load(ino)?;
        if inode.d.nlink == 0 {
            // Freed or an orphan: only reachable through the cache.
            return Err(Errno::ENOENT);
        }
        let arc = Arc::new(Mutex::new(inode));
        shard.insert(ino, arc.clone());
        Ok(arc)
    }

    pub(super) fn lock(&self, ino: u64) -> Result<IGuard, Errno> {
        let g = self.get(ino)?.lock_arc();
        if g.freed {
            return Err(Errno::ENOENT);
        }
        Ok(g)
    }

    pub(super) fn try_lock(&self, ino: u64) -> Result<Try<IGuard>, Errno> {
        let arc = self.get(ino)?;
        match arc.try_lock_arc() {
            Some(g) if g.freed => Err(Errno::ENOENT),
            Some(g) => Ok(Try::Done(g)),
            None => Ok(Try::Retry),
        }
    }

    pub(super) fn lock_sorted(&self, inos: &[u64]) -> Result<Held, Errno> {
        let mut v: Vec<u64> = inos.to_vec();
        v.sort_unstable();
        v.dedup();
        let mut guards = Vec::with_capacity(v.len());
        for ino in v {
            guards.push((ino, self.lock(ino)?));
        }
        Ok(Held { guards })
    }

    /// Lock `ino` too, unless already held; `false` means retry.
    pub(super) fn try_add(&self, held: &mut Held, ino: u64) -> Result<bool, Errno> {
        if held.has(ino) {
            return Ok(true);
        }
        match self.try_lock(ino)? {
            Try::Done(g) => {
                held.guards.push((ino, g));
                Ok(true)
            }
            Try::Retry => Ok(false),
        }
    }

    pub(super) fn forget_freed(&self, ino: u64) {
        self.shard(ino).lock().remove(&ino);
    }

    /// The kernel was handed one more reference to `ino` (an entry in a
    /// lookup, create or readdirplus reply): count it, and return the
    /// attributes. [`forget`](Self::forget) gives references back.
    pub fn remember(&self, ino: u64) -> Result<Attr, Errno> {
        let mut g = self.lock(ino)?;
        g.lookups += 1;
        Ok(g.attr())
    }

    /// The kernel dropped `n` references to `ino` (FORGET). With none left
    /// and the file closed, the inode leaves the cache (its state is all
    /// in the store; the next use loads it again), so memory stays bounded
    /// by what the kernel keeps, not by what was ever touched.
    pub fn forget(&self, ino: u64, n: u64) {
        if ino == self.layout.root || ino == self.layout.orphan {
            return;
        }
        let Some(arc) = self.shard(ino).lock().get(&ino).cloned() else {
            return;
        };
        let idle = {
            let mut g = arc.lock();
            g.lookups = g.lookups.saturating_sub(n);
            g.lookups == 0 && g.open_count == 0
        };
        drop(arc);
        if idle {
            self.evict(ino);
        }
        // Inodes that were busy when the kernel forgot them.
        let retry: Vec<u64> = std::mem::take(&mut *self.evict_later.lock());
        for i in retry {
            self.evict(i);
        }
    }

    /// Drop `ino` from the cache if nobody uses it. Under the shard lock
    /// only the map can hand out the inode, so a reference count of one
    /// means no operation holds it now or can get it meanwhile. A busy
    /// inode is queued and tried again at a later FORGET.
    pub(super) fn evict(&self, ino: u64) {
        let mut shard = self.shard(ino).lock();
        let Some(arc) = shard.get(&ino) else {
            return;
        };
        let idle = Arc::strong_count(arc) == 1
            && arc
                .try_lock()
                .is_some_and(|g| g.lookups == 0 && g.open_count == 0);
        if idle {
            if let Some(arc) = shard.remove(&ino) {
                // An atime lazytime kept in memory goes with the inode;
                // under the shard lock, so no reload reads the old one.
                let mut g = arc.lock();
                if g.lazy_atime_since.is_some() && !g.freed && self.can_commit() {
                    if let Err(e) = self.write_inode(&mut g) {
                        tracing::warn!("writing the atime of inode {ino}: {e}");
                    }
                }
            }
        } else if Arc::strong_count(arc) > 1 {
            let mut later = self.evict_later.lock();
            if later.len() < EVICT_RETRY_MAX {
                later.push(ino);
            }
        }
    }

    /// Inodes in the cache (for tests and statistics).
    pub fn cached_inodes(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }

    /// Attributes of `ino`.
    pub fn getattr(&self, ino: u64) -> Result<Attr, Errno> {
        Ok(self.lock(ino)?.attr())
    }
}
