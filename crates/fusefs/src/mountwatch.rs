//! Remounts reaching the file system. FUSE sends the daemon no message
//! when `mount -o remount,ro` (or `rw`, `sync`, an atime option) changes
//! its mount: the kernel only turns its own side read-only. So a thread
//! watches `/proc/self/mountinfo` (poll(2) reports `POLLPRI` at every
//! change of the mount table) and hands the mount's new flags to the
//! [`FileSystem`]: read-only commits the journal and refuses every change
//! with EROFS, read-write switches back. A change that reaches the file
//! system while it is read-only asks the mount table itself first (a
//! `remount,rw` the thread has not applied yet), so a write right after
//! `remount,rw` returns never fails; a read right after `remount,ro` may
//! still move an atime until the thread applies it.

use std::io::{self, Read, Seek, SeekFrom};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::filesystem::FileSystem;
use crate::fuse::MountFlags;

/// One line of `/proc/self/mountinfo`, the fields ptsd reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountEntry<'a> {
    /// `major:minor` of the file system (a FUSE connection's own).
    pub dev: &'a str,
    /// The mount point, escaped as the kernel shows it (`\040` for a
    /// space).
    pub mount_point: &'a str,
    /// Per-mount options (`rw,nosuid,relatime`).
    pub per_mount: &'a str,
    /// File-system type (`fuse.ptsd`).
    pub fstype: &'a str,
    /// Superblock options (`ro,sync,user_id=0,…`).
    pub per_sb: &'a str,
}

impl<'a> MountEntry<'a> {
    /// Parses one line; `None` if it is not one.
    ///
    /// ```
    /// use ptsd_fs::mountwatch::MountEntry;
    /// let l = "97 27 0:52 / /mnt/a\\040b ro,relatime shared:1 - fuse.ptsd img rw,user_id=0";
    /// let e = MountEntry::parse(l).unwrap();
    /// assert_eq!((e.dev, e.mount_point, e.per_sb), ("0:52", "/mnt/a\\040b", "rw,user_id=0"));
    /// assert!(MountEntry::parse("garbage").is_none());
    /// ```
    pub fn parse(line: &'a str) -> Option<Self> {
        let (head, tail) = line.split_once(" - ")?;
        let h: Vec<&str> = head.split(' ').collect();
        let mut t = tail.split(' ');
        let fstype = t.next()?;
        let _source = t.next()?;
        Some(MountEntry {
            dev: h.get(2)?,
            mount_point: h.get(4)?,
            per_mount: h.get(5)?,
            fstype,
            per_sb: t.next()?,
        })
    }

    /// The flags this line gives the mount.
    pub fn flags(&self) -> MountFlags {
        MountFlags::from_mountinfo(self.per_mount, self.per_sb)
    }
}

/// `path` escaped as mountinfo shows mount points.
fn escaped(path: &Path) -> String {
    let mut out = String::new();
    for &b in path.as_os_str().as_encoded_bytes() {
        match b {
            b' ' | b'\t' | b'\n' | b'\\' => out.push_str(&format!("\\{b:03o}")),
            _ => out.push(b as char),
        }
    }
    out
}

/// `dir` as mountinfo names it: its parent resolved (the mount point
/// itself is not touched: that would be a request to the mount).
fn absolute_mount_point(dir: &Path) -> std::path::PathBuf {
    match (dir.parent(), dir.file_name()) {
        (Some(p), Some(name)) => {
            let p = if p.as_os_str().is_empty() {
                Path::new(".")
            } else {
                p
            };
            p.canonicalize()
                .map(|p| p.join(name))
                .unwrap_or_else(|_| dir.to_path_buf())
        }
        _ => dir.to_path_buf(),
    }
}

/// Our mount in `info` (a whole mountinfo): the last FUSE mount at
/// `mount_point` while its device is not known yet, then the mount of
/// `dev` (at `mount_point` if it is still there, else any bind of it).
fn find<'a>(info: &'a str, dev: Option<&str>, mount_point: &str) -> Option<MountEntry<'a>> {
    let entries: Vec<MountEntry<'a>> = info.lines().filter_map(MountEntry::parse).collect();
    match dev {
        None => entries
            .into_iter()
            .rfind(|e| e.mount_point == mount_point && e.fstype.starts_with("fuse")),
        Some(dev) => {
            let ours: Vec<MountEntry<'a>> = entries.into_iter().filter(|e| e.dev == dev).collect();
            ours.iter()
                .rfind(|e| e.mount_point == mount_point)
                .or(ours.last())
                .cloned()
        }
    }
}

/// Whether `f` asks of `fs` what it does already.
fn in_force(f: &MountFlags, fs: &FileSystem) -> bool {
    f.read_only == fs.is_read_only()
        && f.sync_mode() == fs.sync_mode()
        && f.atime_policy() == fs.atime_policy()
}

/// Follows the mount on `dir` (mounted, or about to be) until it goes
/// away, applying each change of its flags to `fs` (see the module doc).
/// The thread ends at the unmount.
///
/// ```no_run
/// # use std::sync::Arc;
/// # use ptsd_blockdev::MemDevice;
/// # use ptsd_fs::{mkfs, DirectStore, FileSystem, MkfsOptions};
/// # let dev = Arc::new(MemDevice::new(4096, 256).unwrap());
/// # let store = Arc::new(DirectStore::new(dev).unwrap());
/// # mkfs(&*store, &MkfsOptions::default()).unwrap();
/// let fs = Arc::new(FileSystem::mount(store).unwrap());
/// // ... mounted on /mnt/ptsd and served ...
/// ptsd_fs::mountwatch::watch("/mnt/ptsd".as_ref(), fs).unwrap();
/// ```
pub fn watch(dir: &Path, fs: Arc<FileSystem>) -> io::Result<JoinHandle<()>> {
    let mut file = std::fs::File::open("/proc/self/mountinfo")?;
    let dir = absolute_mount_point(dir);
    let mount_point = escaped(&dir);
    // The device, once the thread found the mount.
    let found: Arc<Mutex<Option<String>>> = Arc::default();
    {
        // A change right after `remount,rw` asks at once rather than
        // fail before the thread below hears.
        let (found, mount_point) = (found.clone(), mount_point.clone());
        fs.set_remount_probe(Box::new(move || {
            let dev = found.lock().ok()?.clone()?;
            let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
            find(&text, Some(&dev), &mount_point).map(|e| e.flags().read_only)
        }));
    }
    std::thread::Builder::new()
        .name("ptsd-mountwatch".into())
        .spawn(move || {
            let mut dev: Option<String> = None;
            let mut text = String::new();
            loop {
                text.clear();
                if let Err(e) = file
                    .seek(SeekFrom::Start(0))
                    .and_then(|_| file.read_to_string(&mut text))
                {
                    tracing::warn!("reading mountinfo, remounts no longer followed: {e}");
                    return;
                }
                match find(&text, dev.as_deref(), &mount_point) {
                    Some(e) => {
                        if dev.is_none() {
                            dev = Some(e.dev.to_string());
                            if let Ok(mut f) = found.lock() {
                                f.clone_from(&dev);
                            }
                        }
                        let f = e.flags();
                        if !in_force(&f, &fs) {
                            tracing::info!(
                                "remounted {}: {}",
                                dir.display(),
                                if f.read_only { "ro" } else { "rw" }
                            );
                            f.apply_to(&fs);
                        }
                    }
                    // Unmounted: nothing more to follow.
                    None if dev.is_some() => return,
                    None => {}
                }
                let mut p = libc::pollfd {
                    fd: file.as_raw_fd(),
                    events: libc::POLLPRI,
                    revents: 0,
                };
                // SAFETY: `p` is one valid pollfd for the call.
                if unsafe { libc::poll(&mut p, 1, -1) } < 0 {
                    let e = io::Error::last_os_error();
                    if e.kind() != io::ErrorKind::Interrupted {
                        tracing::warn!("polling mountinfo, remounts no longer followed: {e}");
                        return;
                    }
                }
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = "\
22 27 0:21 / /proc rw,relatime - proc proc rw
90 27 0:50 / /mnt/x rw,relatime - fuse.ptsd a rw,user_id=0
91 27 0:51 / /mnt/x rw,noatime - fuse.ptsd b ro,user_id=0,lazytime
92 27 0:51 / /bind ro,relatime - fuse.ptsd b ro,user_id=0,lazytime
";

    #[test]
    fn finds_the_last_mount_on_the_point_then_follows_its_device() {
        let e = find(INFO, None, "/mnt/x").unwrap();
        assert_eq!(e.dev, "0:51");
        let f = e.flags();
        assert!(f.read_only && f.lazytime);
        assert_eq!(f.atime, crate::fuse::Atime::Noatime);
        // Mounted over at the point: the device's other mount still tells.
        let moved = INFO.replace("0:51 / /mnt/x", "0:51 / /elsewhere");
        assert_eq!(
            find(&moved, Some("0:51"), "/mnt/x").unwrap().mount_point,
            "/bind"
        );
        // Gone.
        assert!(find(INFO, Some("0:99"), "/mnt/x").is_none());
        assert!(find(INFO, None, "/nowhere").is_none());
    }

    #[test]
    fn mount_points_are_escaped_as_the_kernel_shows_them() {
        assert_eq!(escaped(Path::new("/a b\\c")), "/a\\040b\\134c");
    }
}
