//! Exclusive use of an image, block device or journal file for the life of
//! a mount (or a mkfs, or a repairing fsck).
//!
//! Every path is locked with `flock(2)` on a descriptor of our own (the
//! lock belongs to that open file description, so even two stacks in one
//! process exclude each other); a block device is in addition opened with
//! `O_EXCL`, the kernel's exclusive claim that `mkfs.ext4` and mounts use.
//! When the lock is taken, the holder's PID comes from `/proc/locks`, which
//! is what `lslocks(8)` reads; no PID file can go stale.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::error::StackError;

/// How a path is locked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LockMode {
    /// Shared with other shared holders (a read-only fsck).
    Shared,
    /// Nobody else (mount, mkfs, fsck --repair).
    Exclusive,
}

/// A held lock; released when dropped.
#[derive(Debug)]
pub(crate) struct PathLock {
    file: File,
    path: PathBuf,
}

/// A holder whose FUSE mount is still in the mount table gets only this
/// grace before the refusal; one that no longer serves a mount (a daemon
/// finishing its clean close after `umount`, a mkfs, an fsck) is waited for
/// up to the caller's limit.
const SERVING_GRACE: Duration = Duration::from_secs(1);

impl PathLock {
    /// Lock `path` (creating an empty file first if `create`), waiting up to
    /// `wait` for a holder that is not serving a FUSE mount.
    pub(crate) fn acquire(
        path: &Path,
        mode: LockMode,
        create: bool,
        wait: Duration,
    ) -> Result<PathLock, StackError> {
        let io = |op: &'static str| {
            let path = path.to_path_buf();
            move |source| StackError::Io { op, path, source }
        };
        let block_dev = std::fs::metadata(path)
            .map(|m| m.file_type().is_block_device())
            .unwrap_or(false);
        let mut oo = OpenOptions::new();
        oo.read(true);
        if create && !block_dev {
            oo.write(true).create(true).truncate(false);
        }
        if block_dev && mode == LockMode::Exclusive {
            // The kernel's claim: refused while the device is mounted or
            // another program holds it with O_EXCL.
            oo.custom_flags(libc::O_EXCL);
        }
        let file = match oo.open(path) {
            Ok(f) => f,
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                // Claimed by the kernel (mounted) or by another O_EXCL
                // opener; a ptsd holder also has its flock to name it by.
                let pid = File::open(path).ok().and_then(|f| holder_of(&f));
                return Err(StackError::InUse {
                    path: path.to_path_buf(),
                    pid,
                    serving: fuse_mounted_from(path),
                });
            }
            Err(e) => return Err(io("open")(e)),
        };
        let op = match mode {
            LockMode::Shared => libc::LOCK_SH,
            LockMode::Exclusive => libc::LOCK_EX,
        } | libc::LOCK_NB;
        let start = Instant::now();
        let mut said = false;
        loop {
            // SAFETY: flock on a descriptor we own; no memory is passed.
            if unsafe { libc::flock(file.as_raw_fd(), op) } == 0 {
                return Ok(PathLock {
                    file,
                    path: path.to_path_buf(),
                });
            }
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::EWOULDBLOCK) {
                return Err(io("flock")(err));
            }
            let pid = holder_of(&file);
            let serving = fuse_mounted_from(path);
            let waited = start.elapsed();
            if waited >= wait || (serving && waited >= SERVING_GRACE) {
                return Err(StackError::InUse {
                    path: path.to_path_buf(),
                    pid,
                    serving,
                });
            }
            if !said && !serving {
                said = true;
                tracing::warn!(
                    "{} is in use by PID {}; waiting up to {:.0} s for it to finish",
                    path.display(),
                    pid.map_or("?".to_string(), |p| p.to_string()),
                    wait.as_secs_f64()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The locked path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The locked file (to read its size).
    pub(crate) fn file(&self) -> &File {
        &self.file
    }

    /// Remove the locked file, but only if the path still names the file
    /// this lock holds: a journal that another mount now owns is never
    /// deleted. Returns whether it was removed.
    pub(crate) fn remove_if_ours(&self) -> bool {
        let (Ok(ours), Ok(now)) = (self.file.metadata(), std::fs::metadata(&self.path)) else {
            return false;
        };
        if ours.dev() != now.dev() || ours.ino() != now.ino() {
            tracing::warn!(
                "{} is no longer the journal this mount used; leaving it",
                self.path.display()
            );
            return false;
        }
        std::fs::remove_file(&self.path).is_ok()
    }
}

/// The PID holding a flock on `file`'s inode, from /proc/locks.
fn holder_of(file: &File) -> Option<i32> {
    let meta = file.metadata().ok()?;
    let dev = meta.dev();
    // Linux's dev_t encoding (glibc's gnu_dev_major/minor).
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    let want = format!("{major:02x}:{minor:02x}:{}", meta.ino());
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    // "1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF"; waiters are "1: -> FLOCK ...".
    locks.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.get(1) != Some(&"FLOCK") || f.get(5) != Some(&want.as_str()) {
            return None;
        }
        f.get(4)?.parse().ok().filter(|&p: &i32| p > 0)
    })
}

/// Whether a FUSE mount names `path` as its source (ptsd mounts do): the
/// holder still serves it. The entry goes at the kernel unmount, before the
/// daemon's clean close, which is what lets a new mount wait for that close
/// instead of refusing.
fn fuse_mounted_from(path: &Path) -> bool {
    let Ok(canon) = path.canonicalize() else {
        return false;
    };
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let want = escape_mount_field(&canon.to_string_lossy());
    // "36 35 98:0 / /mnt rw,noatime master:1 - fuse /img rw,..." : after
    // the " - " separator come the type and the source.
    info.lines().any(|l| {
        let Some((_, tail)) = l.split_once(" - ") else {
            return false;
        };
        let mut f = tail.split(' ');
        let (Some(fstype), Some(source)) = (f.next(), f.next()) else {
            return false;
        };
        fstype.starts_with("fuse") && source == want
    })
}

/// The kernel's escaping of mount table fields (space, tab, newline and
/// backslash as octal).
fn escape_mount_field(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            ' ' => out.push_str("\\040"),
            '\t' => out.push_str("\\011"),
            '\n' => out.push_str("\\012"),
            '\\' => out.push_str("\\134"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_exclusive_lock_names_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("img");
        let held = PathLock::acquire(&p, LockMode::Exclusive, true, Duration::ZERO).unwrap();
        let err = PathLock::acquire(&p, LockMode::Exclusive, true, Duration::ZERO).unwrap_err();
        match err {
            StackError::InUse { pid, serving, .. } => {
                assert_eq!(pid, Some(std::process::id() as i32));
                assert!(!serving);
            }
            e => panic!("unexpected {e}"),
        }
        assert!(PathLock::acquire(&p, LockMode::Shared, false, Duration::ZERO).is_err());
        drop(held);
        let a = PathLock::acquire(&p, LockMode::Shared, false, Duration::ZERO).unwrap();
        let _b = PathLock::acquire(&p, LockMode::Shared, false, Duration::ZERO).unwrap();
        assert!(PathLock::acquire(&p, LockMode::Exclusive, false, Duration::ZERO).is_err());
        drop(a);
    }

    #[test]
    fn a_waiting_locker_gets_the_lock_once_the_holder_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("img");
        let held = PathLock::acquire(&p, LockMode::Exclusive, true, Duration::ZERO).unwrap();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            drop(held);
        });
        let start = Instant::now();
        PathLock::acquire(&p, LockMode::Exclusive, false, Duration::from_secs(20)).unwrap();
        assert!(start.elapsed() >= Duration::from_millis(150));
        t.join().unwrap();
    }

    #[test]
    fn mount_table_fields_are_escaped_as_the_kernel_does() {
        assert_eq!(escape_mount_field("/a b\\c"), "/a\\040b\\134c");
        let dir = tempfile::tempdir().unwrap();
        assert!(!fuse_mounted_from(dir.path()));
    }

    #[test]
    fn a_replaced_file_is_not_removed() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("journal");
        let held = PathLock::acquire(&p, LockMode::Exclusive, true, Duration::ZERO).unwrap();
        std::fs::remove_file(&p).unwrap();
        std::fs::write(&p, b"someone else's").unwrap();
        assert!(!held.remove_if_ours());
        assert_eq!(std::fs::read(&p).unwrap(), b"someone else's");
        let again = PathLock::acquire(&p, LockMode::Exclusive, false, Duration::ZERO).unwrap();
        assert!(again.remove_if_ours());
        assert!(!p.exists());
    }
}
