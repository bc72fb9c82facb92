//! Where a mount daemon keeps its per-user files, and the rules a user who
//! is not root mounts under: root's pid files and logs are in /run/ptsd,
//! which a user may not write, so a user's go to their runtime directory;
//! fusermount3 lets a user have allow_other only by /etc/fuse.conf.

use std::path::{Path, PathBuf};

/// The pid file of the daemon serving mount point `dir` (its log is the
/// same path with `.log`).
pub fn pid_file(dir: &Path) -> PathBuf {
    let canon = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let name: String = canon
        .to_string_lossy()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    run_dir().join(format!("{name}.pid"))
}

/// Where the mount daemon's pid file and log go: /run/ptsd for root; a
/// user may not write there, so theirs are in $XDG_RUNTIME_DIR/ptsd, or
/// /tmp/ptsd-run-UID (made 0700: other users must not plant a pid there
/// for `ptsd umount` to wait on).
fn run_dir() -> PathBuf {
    let (uid, _) = ptsd_stack::invoking_user();
    if uid == 0 && Path::new("/run").is_dir() {
        return PathBuf::from("/run/ptsd");
    }
    if let Some(d) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| Path::new(d).is_dir()) {
        return PathBuf::from(d).join("ptsd");
    }
    std::env::temp_dir().join(format!("ptsd-run-{uid}"))
}

/// Create [`run_dir`] for this user only; `None` if it exists but is not
/// theirs alone (then no pid file: `ptsd umount` does not wait).
pub fn make_run_dir(dir: &Path) -> Option<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let _ = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir);
    let m = std::fs::symlink_metadata(dir).ok()?;
    let (uid, _) = ptsd_stack::invoking_user();
    (m.is_dir() && m.uid() == uid && (uid == 0 || m.mode() & 0o022 == 0)).then_some(())
}

/// /etc/fuse.conf lets users mount with allow_other (fusermount3's rule).
pub fn user_allow_other() -> bool {
    std::fs::read_to_string("/etc/fuse.conf")
        .map(|t| t.lines().any(|l| l.trim() == "user_allow_other"))
        .unwrap_or(false)
}
