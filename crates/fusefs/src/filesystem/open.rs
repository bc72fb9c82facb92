//! Open files: open counts, the last close, and orphans (unlinked while
//! open) freed at close or at the next mount.

use std::sync::Arc;

use parking_lot::Mutex;

use super::{owned_runs, put_dir_block, Attr, FileSystem, Held, Writes};
use crate::error::Errno;

impl FileSystem {
    /// A file was opened.
    pub fn open(&self, ino: u64) -> Result<Attr, Errno> {
        let mut g = self.lock(ino)?;
        g.open_count += 1;
        Ok(g.attr())
    }

    /// A directory was opened (`opendir`). Counted like an open file, so
    /// a directory removed (or renamed over) while open stays usable until
    /// [`releasedir`](Self::releasedir): its attributes say nlink 0, it
    /// lists nothing, and nothing can be created in it (ENOENT).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use ptsd_blockdev::MemDevice;
    /// # use ptsd_fs::{mkfs, Caller, DirectStore, FileSystem, MkfsOptions};
    /// # let dev = Arc::new(MemDevice::new(4096, 256).unwrap());
    /// # let store = Arc::new(DirectStore::new(dev).unwrap());
    /// # mkfs(&*store, &MkfsOptions::default()).unwrap();
    /// # let fs = FileSystem::mount(store).unwrap();
    /// let d = fs.mkdir(fs.root(), b"d", 0o755, Caller::default()).unwrap().ino;
    /// fs.opendir(d).unwrap();
    /// fs.rmdir(fs.root(), b"d").unwrap();
    /// assert_eq!(fs.getattr(d).unwrap().nlink, 0);
    /// fs.releasedir(d).unwrap(); // frees it
    /// assert!(fs.getattr(d).is_err());
    /// ```
    pub fn opendir(&self, ino: u64) -> Result<Attr, Errno> {
        let mut g = self.lock(ino)?;
        if !g.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        g.open_count += 1;
        Ok(g.attr())
    }

    /// The last close of a directory opened with [`opendir`](Self::opendir);
    /// frees it if it was removed meanwhile.
    pub fn releasedir(&self, ino: u64) -> Result<(), Errno> {
        self.release(ino)
    }

    /// A file was closed for the last time; frees it if it was unlinked.
    pub fn release(&self, ino: u64) -> Result<(), Errno> {
        let orphan = self.layout.orphan;
        loop {
            let arc = match self.shard(ino).lock().get(&ino) {
                Some(a) => a.clone(),
                None => return Ok(()),
            };
            let mut held = Held {
                guards: vec![(ino, arc.lock_arc())],
            };
            let g = held.get(ino);
            if g.freed {
                return Ok(());
            }
            g.open_count = g.open_count.saturating_sub(1);
            if g.open_count > 0 {
                return Ok(());
            }
            if g.d.nlink > 0 {
                // Forgotten while open: it may leave the cache now.
                let forgotten = g.lookups == 0;
                drop(held);
                drop(arc);
                if forgotten {
                    self.evict(ino);
                }
                return Ok(());
            }
            // Switched read-only, the last close of an unlinked file still
            // frees it (as ext4 finishes its orphans on a read-only
            // mount): nothing the user can see changes, and the image
            // stays without orphans.
            if !self.can_commit() {
                return Ok(());
            }
            // Last close of an unlinked file: free it and its orphan entry.
            if !self.try_add(&mut held, orphan)? {
                held.get(ino).open_count += 1;
                drop(held);
                std::thread::yield_now();
                continue;
            }
            self.ensure_dir(held.get(orphan))?;
            let name = ino.to_string();
            let frees = owned_runs(held.get(ino));
            let mut ctx = self.alloc.prepare(0, 0, &frees)?;
            let mut w = Writes::new();
            if let Some(e) = held
                .get(orphan)
                .dir
                .as_mut()
                .and_then(|d| d.remove(name.as_bytes()))
            {
                put_dir_block(held.get(orphan), e.blk, &mut w)?;
            }
            for (s, l) in frees {
                ctx.free(s, l)?;
            }
            held.get(ino).freed = true;
            self.commit(w, Some(ctx))?;
            self.forget_freed(ino);
            return Ok(());
        }
    }

    pub(super) fn free_orphans(&self) -> Result<u64, Errno> {
        let orphan = self.layout.orphan;
        let entries = self.readdir(orphan, 2, usize::MAX)?;
        let mut n = 0;
        for e in entries {
            let arc = Arc::new(Mutex::new(self.load(e.ino)?));
            let mut held = Held {
                guards: vec![(orphan, self.lock(orphan)?), (e.ino, arc.lock_arc())],
            };
            let frees = if held.get(e.ino).d.nlink == 0 {
                owned_runs(held.get(e.ino))
            } else {
                Vec::new()
            };
            let mut ctx = self.alloc.prepare(0, 0, &frees)?;
            let mut w = Writes::new();
            let blk = held
                .get(orphan)
                .dir
                .as_mut()
                .and_then(|d| d.remove(&e.name))
                .ok_or(Errno::EIO)?
                .blk;
            put_dir_block(held.get(orphan), blk, &mut w)?;
            for (s, l) in frees {
                ctx.free(s, l)?;
            }
            self.commit(w, Some(ctx))?;
            n += 1;
        }
        Ok(n)
    }
}
