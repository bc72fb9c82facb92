//! The file systems the workloads run on, set up and torn down.
//!
//! Each mount is a guard: dropping it unmounts (and detaches, removes its
//! image) even when a workload failed half-way.

use std::ffi::OsString;
use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::error::io_err;
use super::{FsBenchError, Result};

/// Runs `cmd`, returning its stdout; a non-zero exit is an error carrying stderr.
pub fn run_command(cmd: &mut Command) -> Result<String> {
    let line = format!("{cmd:?}").replace('"', "");
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| FsBenchError::Command {
            command: line.clone(),
            detail: e.to_string(),
        })?;
    if !out.status.success() {
        return Err(FsBenchError::Command {
            command: line,
            detail: format!(
                "{}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The file-system type mounted exactly at `dir`, from /proc/self/mountinfo.
pub fn mounted_fstype(dir: &Path) -> Option<String> {
    let dir = dir.canonicalize().ok()?;
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    // Fields: id parent major:minor root mountpoint options [optional…] - fstype source super-options.
    // The last matching line is the mount on top, so search from the end.
    info.lines().rev().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let mountpoint = left.split(' ').nth(4)?;
        let fstype = right.split(' ').next()?;
        (Path::new(&unescape_mountinfo(mountpoint)) == dir).then(|| fstype.to_string())
    })
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 4 <= b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = b[i + 1..i + 4]
                .iter()
                .fold(0u16, |acc, c| acc * 8 + u16::from(c - b'0'));
            if let Ok(v) = u8::try_from(v) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Where an ext4 target's images go and how it is formatted and mounted.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Ext4Setup {
    /// The data image (on the disk under test, or on /dev/shm).
    pub image: PathBuf,
    /// Its size in bytes (rounded up to 4 MiB).
    pub size: u64,
    /// An external journal: image (on /dev/shm for a RAM journal) and size.
    /// The file system is then mounted `data=journal,barrier=0`: data and
    /// metadata both go through the journal, as in ptsd, and no fsync
    /// flushes a device (see [`Ext4Loop::create`]).
    pub journal: Option<(PathBuf, u64)>,
}

/// True if `path` is on a RAM file system (tmpfs/ramfs), where O_DIRECT
/// does not apply and an fsync reaches no device.
pub fn on_ram_fs(path: &Path) -> bool {
    let dir = if path.is_dir() {
        path
    } else {
        path.parent().unwrap_or(path)
    };
    let Ok(dir) = dir.canonicalize() else {
        return false;
    };
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    // The longest mount point that is a prefix of `dir` holds it.
    info.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let mp = unescape_mountinfo(left.split(' ').nth(4)?);
            let fstype = right.split(' ').next()?.to_string();
            dir.starts_with(&mp).then_some((mp.len(), fstype))
        })
        .max_by_key(|(len, _)| *len)
        .is_some_and(|(_, t)| t == "tmpfs" || t == "ramfs")
}

/// Writes `image` in full with zeros unless it already has `size` bytes
/// (images are kept across rounds and only reformatted): the host file
/// system then neither allocates nor converts unwritten extents during a
/// run (either would add a host journal commit to a guest fsync), and a
/// tmpfs image has all its pages.
fn fill_image(image: &Path, size: u64) -> Result<()> {
    const CHUNK: u64 = 4 << 20;
    let blocks = size.div_ceil(CHUNK).max(1);
    if std::fs::metadata(image).is_ok_and(|m| m.len() == blocks * CHUNK) {
        return Ok(());
    }
    let mut of = OsString::from("of=");
    of.push(image);
    let mut dd = Command::new("dd");
    dd.args(["if=/dev/zero", "bs=4M", "conv=fsync", "status=none"])
        .arg(format!("count={blocks}"))
        .arg(of);
    if !on_ram_fs(image) {
        dd.arg("oflag=direct");
    }
    run_command(&mut dd).map(drop)
}

/// Attaches `image` to a free loop device: with direct I/O on a disk (no
/// double caching in the host's page cache; a flush becomes an fsync of
/// the image, reaching the disk), buffered on tmpfs (which has no O_DIRECT).
fn attach(image: &Path) -> Result<String> {
    let dio = if on_ram_fs(image) {
        "--direct-io=off"
    } else {
        "--direct-io=on"
    };
    let dev = run_command(
        Command::new("losetup")
            .args(["--find", "--show", dio])
            .arg(image),
    )?;
    Ok(dev.trim().to_string())
}

/// ext4 on loop devices over image files: [`Ext4Loop::create`] fills the
/// images (once), attaches, formats and mounts; teardown unmounts and
/// detaches (the images stay for the next round: [`remove_images`]).
pub struct Ext4Loop {
    devices: Vec<String>,
    mountpoint: PathBuf,
    mounted: bool,
}

impl Ext4Loop {
    /// Sets up `setup` on `mountpoint`: `mkfs.ext4` with an inode per 4 KiB
    /// and no lazy init (which would write in the background during the
    /// run); default mount options (data=ordered, barriers on), or with an
    /// external journal device (`mke2fs -O journal_dev`) `data=journal` and
    /// no barriers.
    pub fn create(setup: &Ext4Setup, mountpoint: &Path) -> Result<Self> {
        let mut me = Ext4Loop {
            devices: Vec::new(),
            mountpoint: mountpoint.to_path_buf(),
            mounted: false,
        };
        fill_image(&setup.image, setup.size)?;
        let data = attach(&setup.image)?;
        me.devices.push(data.clone());
        let mut mkfs = Command::new("mkfs.ext4");
        // One inode per 4 KiB: tokubench writes 4 KiB files, and the
        // default 16 KiB ratio runs out of inodes (ENOSPC) within a 10 s
        // run on an idle machine.
        mkfs.args(["-q", "-F", "-b", "4096", "-i", "4096"])
            .args(["-E", "lazy_itable_init=0,lazy_journal_init=0"]);
        let mut options = String::from("rw");
        if let Some((jimage, jsize)) = &setup.journal {
            fill_image(jimage, *jsize)?;
            let jdev = attach(jimage)?;
            me.devices.push(jdev.clone());
            run_command(
                Command::new("mke2fs")
                    .args(["-q", "-F", "-O", "journal_dev", "-b", "4096"])
                    .arg(&jdev),
            )?;
            mkfs.arg("-J").arg(format!("device={jdev}"));
            // No cache flushes: with the journal on a separate device, ext4's
            // fsync flushes the data disk on every call (and jbd2 the journal
            // device), buying power-loss safety that a RAM journal cannot
            // deliver anyway. The target's class is process-crash, like
            // ptsd's RAM journal, whose fsync flushes nothing either; without
            // this the anchor would pay a disk flush per fsync for nothing.
            options.push_str(",data=journal,barrier=0");
        }
        run_command(mkfs.arg(&data))?;
        std::fs::create_dir_all(mountpoint).map_err(io_err("mkdir", mountpoint))?;
        run_command(
            Command::new("mount")
                .args(["-t", "ext4", "-o", &options, &data])
                .arg(mountpoint),
        )?;
        me.mounted = true;
        Ok(me)
    }

    /// The mount point.
    pub fn dir(&self) -> &Path {
        &self.mountpoint
    }

    /// The loop devices (`/dev/loopN`): data, then the journal if external.
    pub fn devices(&self) -> &[String] {
        &self.devices
    }

    /// Unmounts and detaches, reporting the first failure.
    pub fn teardown(mut self) -> Result<()> {
        self.teardown_inner()
    }

    fn teardown_inner(&mut self) -> Result<()> {
        let mut first = Ok(());
        if std::mem::take(&mut self.mounted) {
            first = first.and(run_command(Command::new("umount").arg(&self.mountpoint)).map(drop));
        }
        for dev in std::mem::take(&mut self.devices) {
            first = first.and(run_command(Command::new("losetup").args(["-d", &dev])).map(drop));
        }
        first
    }
}

impl Drop for Ext4Loop {
    fn drop(&mut self) {
        if let Err(e) = self.teardown_inner() {
            eprintln!("ext4 loop teardown: {e}");
        }
    }
}

/// Deletes the images of `setup` (after the last round).
pub fn remove_images(setup: &Ext4Setup) {
    let _ = std::fs::remove_file(&setup.image);
    if let Some((j, _)) = &setup.journal {
        let _ = std::fs::remove_file(j);
    }
}

/// Removes a file or a directory tree; a missing one is fine.
pub fn remove_path(path: &Path) -> Result<()> {
    let r = match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => Err(e),
    };
    r.map_err(io_err("removing", path))
}

/// A file-system daemon spawned as a child process (`ptsd mount …`) that
/// mounts FUSE on a directory; [`SpawnedMount::start`] waits for the mount
/// to appear, drop unmounts it and waits for the daemon to exit.
pub struct SpawnedMount {
    child: Option<Child>,
    mountpoint: PathBuf,
    unmount: Vec<String>,
}

impl SpawnedMount {
    /// The daemon's pid while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Spawns `cmd` (which must mount a FUSE file system on `mountpoint`)
    /// and waits up to `timeout` for the mount. `unmount` is the command
    /// that ends it (default: `umount MOUNTPOINT`).
    pub fn start(
        mut cmd: Command,
        mountpoint: &Path,
        timeout: Duration,
        unmount: Option<Vec<String>>,
    ) -> Result<Self> {
        let line = format!("{cmd:?}").replace('"', "");
        // The daemon's messages go to our stderr: stdout may be a JSON report.
        let stderr = std::io::stderr()
            .as_fd()
            .try_clone_to_owned()
            .map_err(|e| FsBenchError::Command {
                command: line.clone(),
                detail: format!("duplicating stderr: {e}"),
            })?;
        // A session of its own, as `ptsd mount` gives itself when it
        // daemonizes: under the kernel's autogroup scheduling (on by
        // default) a session is a scheduling group, and a daemon in the
        // bench's group served the classic transport slower than one
        // mounted by hand (tokubench, interleaved: 14.0-15.7 k against
        // 16.2-20.3 k files/s). It still goes when the bench does: a
        // Ctrl-C no longer reaches it through the terminal, the parent's
        // death does.
        // SAFETY: between fork and exec the closure only makes
        // async-signal-safe calls (setsid, prctl) and touches no memory
        // of the parent.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            })
        };
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::from(stderr))
            .spawn()
            .map_err(|e| FsBenchError::Command {
                command: line.clone(),
                detail: e.to_string(),
            })?;
        let unmount =
            unmount.unwrap_or_else(|| vec!["umount".into(), mountpoint.display().to_string()]);
        let mut me = SpawnedMount {
            child: Some(child),
            mountpoint: mountpoint.to_path_buf(),
            unmount,
        };
        let began = Instant::now();
        loop {
            if mounted_fstype(mountpoint).is_some_and(|t| t.starts_with("fuse")) {
                return Ok(me);
            }
            if let Some(status) = me.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                me.child = None;
                return Err(FsBenchError::Mount {
                    path: mountpoint.to_path_buf(),
                    detail: format!("`{line}` exited ({status}) before mounting"),
                });
            }
            if began.elapsed() > timeout {
                return Err(FsBenchError::Mount {
                    path: mountpoint.to_path_buf(),
                    detail: format!("`{line}` did not mount within {timeout:?}"),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The mount point.
    pub fn dir(&self) -> &Path {
        &self.mountpoint
    }

    /// Unmounts and waits (up to a minute: a clean unmount checkpoints) for
    /// the daemon to exit; kills it if it does not.
    pub fn stop(mut self) -> Result<()> {
        self.stop_inner()
    }

    fn stop_inner(&mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let mut result = Ok(());
        if mounted_fstype(&self.mountpoint).is_some_and(|t| t.starts_with("fuse")) {
            if let Some((prog, args)) = self.unmount.split_first() {
                result = run_command(Command::new(prog).args(args)).map(drop);
            }
        }
        let began = Instant::now();
        loop {
            match child.try_wait() {
                Ok(Some(_)) => return result,
                Ok(None) if began.elapsed() < Duration::from_secs(60) => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return result.and(Err(FsBenchError::Mount {
                        path: self.mountpoint.clone(),
                        detail: "daemon did not exit within 60 s of unmount; killed".into(),
                    }));
                }
            }
        }
    }
}

impl Drop for SpawnedMount {
    fn drop(&mut self) {
        if let Err(e) = self.stop_inner() {
            eprintln!("stopping mount: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_paths_are_removed_whatever_they_are() {
        let dir = tempfile::tempdir().unwrap();
        let tree = dir.path().join("data");
        std::fs::create_dir_all(tree.join("sub")).unwrap();
        std::fs::write(tree.join("sub/ssd.img"), b"x").unwrap();
        let file = dir.path().join("journal");
        std::fs::write(&file, b"j").unwrap();
        for p in [&tree, &file, &dir.path().join("never-made")] {
            remove_path(p).unwrap();
            assert!(!p.exists(), "{}", p.display());
        }
    }

    #[test]
    fn mountinfo_escapes_are_decoded() {
        assert_eq!(unescape_mountinfo(r"/mnt/a\040b"), "/mnt/a b");
        assert_eq!(unescape_mountinfo(r"/plain"), "/plain");
        assert_eq!(unescape_mountinfo(r"/trail\04"), r"/trail\04");
    }

    #[test]
    fn root_is_a_mount() {
        assert!(mounted_fstype(Path::new("/")).is_some());
        assert!(mounted_fstype(Path::new("/definitely/not/here")).is_none());
    }

    #[test]
    fn failing_command_reports_stderr() {
        let err =
            run_command(Command::new("sh").args(["-c", "echo boom >&2; exit 3"])).unwrap_err();
        assert!(err.to_string().contains("boom"), "{err}");
        assert!(run_command(&mut Command::new("/nonexistent-binary")).is_err());
    }
}
