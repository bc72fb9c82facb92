//! The read-ahead window of a ptsd-fs (or no-op) FUSE mount, raised
//! through the mount's bdi in sysfs.

use std::path::Path;

/// Read-ahead ptsd-fs mounts ask for, in KiB: a sequential read arrives as
/// 1 MiB READs (the request cap, as for WRITEs: fuser offers a 16 MiB
/// `max_write`, the kernel caps both at `fs.fuse.max_pages_limit`, 256
/// pages), a few in flight for the worker threads; a 1 MiB window (one in
/// flight) read slower than the 128 KiB default.
pub const READAHEAD_KIB: u32 = 4096;

/// Raises the read-ahead of the FUSE mount at `dir` to [`READAHEAD_KIB`],
/// from a thread; call it once `dir` is mounted. INIT can only lower the
/// kernel's offer (the bdi default, 128 KiB: eight READs per MiB), so the
/// window is set through the mount's bdi in sysfs, and set again if INIT's
/// answer, processed meanwhile, lowered it. Needs root; without it the
/// default stays and this only logs.
///
/// The mount's device comes from `/proc/self/mountinfo`, not from a stat:
/// this process serves the mount, and a thread of it waiting on a request
/// to it can never finish if the process is killed after another of its
/// threads took the request (the kernel waits uninterruptibly for the
/// answer, and the process, never fully gone, keeps the connection open).
pub fn raise_readahead(dir: &Path) {
    let dir = dir.to_path_buf();
    let spawned = std::thread::Builder::new()
        .name("ptsd-readahead".into())
        .spawn(move || {
            let Some((major, minor)) = mount_device(&dir) else {
                tracing::debug!("read-ahead of {} stays: not in mountinfo", dir.display());
                return;
            };
            let bdi = format!("/sys/class/bdi/{major}:{minor}/read_ahead_kb");
            let want = READAHEAD_KIB.to_string();
            for wait_ms in [0, 20, 100, 500, 2000] {
                std::thread::sleep(std::time::Duration::from_millis(wait_ms));
                if std::fs::read_to_string(&bdi).is_ok_and(|v| v.trim() == want) {
                    continue;
                }
                if let Err(e) = std::fs::write(&bdi, &want) {
                    tracing::debug!("read-ahead of {} stays: {e}", dir.display());
                    return;
                }
            }
        });
    if let Err(e) = spawned {
        tracing::debug!("read-ahead thread: {e}");
    }
}

/// The device (`major:minor`) of the newest mount at `dir`, from
/// `/proc/self/mountinfo`. Nothing inside the mount is touched: only the
/// parent directory is resolved.
fn mount_device(dir: &Path) -> Option<(u32, u32)> {
    let name = dir.file_name()?;
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.canonicalize().ok()?,
        _ => std::env::current_dir().ok()?,
    };
    let point = parent.join(name);
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().rev().find_map(|line| {
        let mut f = line.split(' ');
        let dev = f.nth(2)?;
        let at = f.nth(1)?;
        if Path::new(&unescape_mountinfo(at)) != point {
            return None;
        }
        let (major, minor) = dev.split_once(':')?;
        Some((major.parse().ok()?, minor.parse().ok()?))
    })
}

/// Undo mountinfo's octal escapes (`\040` for a space, and so on).
fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .and_then(|d| std::str::from_utf8(d).ok())
            .and_then(|d| u8::from_str_radix(d, 8).ok());
        match (b[i], octal) {
            (b'\\', Some(v)) => {
                out.push(v);
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(unescape_mountinfo(r"/mnt/a\040b"), "/mnt/a b");
        assert_eq!(unescape_mountinfo(r"/x\011y\134z"), "/x\ty\\z");
        assert_eq!(unescape_mountinfo(r"/plain"), "/plain");
        assert_eq!(unescape_mountinfo(r"/trailing\04"), r"/trailing\04");
    }

    #[test]
    fn the_root_mount_is_found_without_touching_it() {
        // "/" has no file name: not a mount point this looks up.
        assert_eq!(mount_device(Path::new("/")), None);
        // /proc is a mount of its own wherever this runs.
        let proc_dev = mount_device(Path::new("/proc"));
        assert!(proc_dev.is_some(), "/proc not found in mountinfo");
    }
}
