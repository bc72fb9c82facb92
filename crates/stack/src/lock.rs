//! Exclusive use of an image, block device or journal file for the life of
//! a mount (or a mkfs, or a repairing fsck).
//!
//! Every path is locked with `flock(2)` on a descriptor of our own (the
//! lock belongs to that open file description, so even two stacks in one
//! process exclude each other); a block device is in addition opened with
//! `O_EXCL`, the kernel's exclusive claim that `mkfs.ext4` and mounts use.
//! When the lock is taken, the holder's PID comes from `/proc/locks`, which
//! is what `lslocks(8)` reads; no PID file can go stale. Which command
//! holds it ([`Holder`]) is recorded in the lock as well: an open file
//! description lock (`F_OFD_SETLK`) on one byte far past the end of the
//! file, whose offset names the command, read back with `F_OFD_GETLK`. It
//! goes with the holder's descriptor, like the flock, so it cannot go stale
//! either.

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

/// The ptsd command that holds an image, device or journal: named in the
/// refusal a second owner gets ("in use by PID 42 (ptsd ublk)").
///
/// ```
/// assert_eq!(ptsd_stack::Holder::Ublk.to_string(), "ptsd ublk");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holder {
    /// `ptsd mount` (and [`Stack::open`](crate::Stack::open)).
    Mount,
    /// `ptsd ublk add/recover`: its daemon, for as long as it serves the device.
    Ublk,
    /// `ptsd mkfs`.
    Mkfs,
    /// `ptsd fsck` (checking or repairing).
    Fsck,
}

impl Holder {
    const ALL: [Holder; 4] = [Holder::Mount, Holder::Ublk, Holder::Mkfs, Holder::Fsck];

    /// Whether a holder of this kind keeps the image until a user stops it
    /// (a served block device); a mkfs or fsck finishes by itself.
    fn serves(self) -> bool {
        self == Holder::Ublk
    }

    /// What the user must do for the holder to let go, if anything.
    pub(crate) fn advice(self) -> &'static str {
        match self {
            Holder::Mount => "; unmount it first",
            Holder::Ublk => "; delete its device first (`ptsd ublk list`, `ptsd ublk del ID`)",
            Holder::Mkfs | Holder::Fsck => "",
        }
    }
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Holder::Mount => "ptsd mount",
            Holder::Ublk => "ptsd ublk",
            Holder::Mkfs => "ptsd mkfs",
            Holder::Fsck => "ptsd fsck",
        })
    }
}

/// Where the holder record lives: one byte at `HOLDER_BASE + index`, far
/// past the end of any image (byte-range locks need no data there).
const HOLDER_BASE: i64 = 1 << 62;

/// A byte-range lock description for `fcntl`.
fn range(kind: libc::c_int, start: i64, len: i64) -> libc::flock {
    // SAFETY: `flock` is a plain C struct; all-zero is a valid value.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = start;
    fl.l_len = len;
    fl
}

/// Record `holder` in an open file description lock of `file`'s.
fn record_holder(file: &File, holder: Holder) -> std::io::Result<()> {
    let index = Holder::ALL.iter().position(|&h| h == holder).unwrap_or(0) as i64;
    let fl = range(libc::F_RDLCK, HOLDER_BASE + index, 1);
    // SAFETY: fcntl reads the `flock` we pass, which outlives the call.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &fl) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The command another open file description recorded with
/// [`record_holder`] on `file`'s inode.
fn recorded_holder(file: &File) -> Option<Holder> {
    let mut fl = range(libc::F_WRLCK, HOLDER_BASE, Holder::ALL.len() as i64);
    // SAFETY: fcntl fills the `flock` we pass, which outlives the call.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_GETLK, &mut fl) } != 0 {
        return None;
    }
    if fl.l_type == libc::F_UNLCK as libc::c_short {
        return None;
    }
    let index = usize::try_from(fl.l_start.checked_sub(HOLDER_BASE)?).ok()?;
    Holder::ALL.get(index).copied()
}

/// A held lock; released when dropped.
#[derive(Debug)]
pub(crate) struct PathLock {
    file: File,
    path: PathBuf,
}

/// A holder whose FUSE mount is still in the mount table, or a ublk daemon,
/// gets only this grace before the refusal; one that no longer serves a mount (a daemon
/// finishing its clean close after `umount`, a mkfs, an fsck) is waited for
/// up to the caller's limit.
const SERVING_GRACE: Duration = Duration::from_secs(1);

impl PathLock {
    /// Lock `path` (creating an empty file first if `create`), waiting up to
    /// `wait` for a holder that is not serving a FUSE mount.
    pub(crate) fn acquire(
        path: &Path,
        mode: LockMode,
        holder: Holder,
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
                let other = File::open(path).ok();
                return Err(StackError::InUse {
                    path: path.to_path_buf(),
                    pid: other.as_ref().and_then(holder_of),
                    holder: other.as_ref().and_then(recorded_holder),
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
                record_holder(&file, holder).map_err(io("recording the lock's holder on"))?;
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
            let other = recorded_holder(&file);
            let serving = fuse_mounted_from(path) || other.is_some_and(Holder::serves);
            let waited = start.elapsed();
            if waited >= wait || (serving && waited >= SERVING_GRACE) {
                return Err(StackError::InUse {
                    path: path.to_path_buf(),
                    pid,
                    holder: other,
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
        let held = PathLock::acquire(&p, LockMode::Exclusive, Holder::Mount, true, Duration::ZERO)
            .unwrap();
        let err = PathLock::acquire(&p, LockMode::Exclusive, Holder::Mount, true, Duration::ZERO)
            .unwrap_err();
        match err {
            StackError::InUse {
                pid,
                holder,
                serving,
                ..
            } => {
                assert_eq!(pid, Some(std::process::id() as i32));
                assert_eq!(holder, Some(Holder::Mount));
                assert!(!serving);
            }
            e => panic!("unexpected {e}"),
        }
        assert!(
            PathLock::acquire(&p, LockMode::Shared, Holder::Mount, false, Duration::ZERO).is_err()
        );
        drop(held);
        let a =
            PathLock::acquire(&p, LockMode::Shared, Holder::Mount, false, Duration::ZERO).unwrap();
        let _b =
            PathLock::acquire(&p, LockMode::Shared, Holder::Mount, false, Duration::ZERO).unwrap();
        assert!(PathLock::acquire(
            &p,
            LockMode::Exclusive,
            Holder::Mount,
            false,
            Duration::ZERO
        )
        .is_err());
        drop(a);
    }

    #[test]
    fn every_holder_is_recorded_and_named_and_a_ublk_daemon_is_not_waited_for() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("img");
        for holder in Holder::ALL {
            let held =
                PathLock::acquire(&p, LockMode::Exclusive, holder, true, Duration::ZERO).unwrap();
            let want = format!("in use by PID {} ({holder})", std::process::id());
            if holder.serves() {
                // A holder that serves until stopped is refused after the
                // grace, not after the whole wait.
                let start = Instant::now();
                let msg = PathLock::acquire(
                    &p,
                    LockMode::Exclusive,
                    Holder::Mount,
                    false,
                    Duration::from_secs(30),
                )
                .unwrap_err()
                .to_string();
                assert!(start.elapsed() < Duration::from_secs(10));
                assert!(msg.contains(&want), "{msg}");
                assert!(msg.contains("ptsd ublk del"), "{msg}");
            } else {
                let msg =
                    PathLock::acquire(&p, LockMode::Shared, Holder::Fsck, false, Duration::ZERO)
                        .unwrap_err()
                        .to_string();
                assert!(msg.contains(&want), "{msg}");
            }
            drop(held);
        }
        // Shared holders each record themselves; the record goes with them.
        let a =
            PathLock::acquire(&p, LockMode::Shared, Holder::Fsck, false, Duration::ZERO).unwrap();
        assert_eq!(
            recorded_holder(&File::open(&p).unwrap()),
            Some(Holder::Fsck)
        );
        drop(a);
        assert_eq!(recorded_holder(&File::open(&p).unwrap()), None);
    }

    #[test]
    fn a_waiting_locker_gets_the_lock_once_the_holder_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("img");
        let held = PathLock::acquire(&p, LockMode::Exclusive, Holder::Mount, true, Duration::ZERO)
            .unwrap();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            drop(held);
        });
        let start = Instant::now();
        PathLock::acquire(
            &p,
            LockMode::Exclusive,
            Holder::Mount,
            false,
            Duration::from_secs(20),
        )
        .unwrap();
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
        let held = PathLock::acquire(&p, LockMode::Exclusive, Holder::Mount, true, Duration::ZERO)
            .unwrap();
        std::fs::remove_file(&p).unwrap();
        std::fs::write(&p, b"someone else's").unwrap();
        assert!(!held.remove_if_ours());
        assert_eq!(std::fs::read(&p).unwrap(), b"someone else's");
        let again = PathLock::acquire(
            &p,
            LockMode::Exclusive,
            Holder::Mount,
            false,
            Duration::ZERO,
        )
        .unwrap();
        assert!(again.remove_if_ours());
        assert!(!p.exists());
    }
}
