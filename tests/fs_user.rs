//! A user who is not root mounts ptsd-fs and works in it, as on a stock
//! Debian system (/dev/fuse mode 0666, setuid fusermount3): `ptsd mkfs` of
//! an image and the first default mount give the root directory to that
//! user; create/write/read/rename/delete work; the data directory
//! (~/.local/share/ptsd), the journal (/dev/shm), the pid file and log
//! ($XDG_RUNTIME_DIR/ptsd or /tmp/ptsd-run-UID) are the user's; `ptsd umount`
//! goes through fusermount3 and waits for the clean shutdown; allow_other
//! follows /etc/fuse.conf. On both transports.
//!
//! Run as root, the test makes /dev/fuse 0666 for its duration (restoring
//! the mode after) and acts as `nobody` through setpriv; run as a user, it
//! acts as that user. It skips, saying why, only where a user cannot mount
//! FUSE here (no /dev/fuse, no setuid fusermount3, no setpriv) or where the
//! kernel does not give that user FUSE over io_uring.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const PTSD: &str = env!("CARGO_BIN_EXE_ptsd");
const URING_PARAM: &str = "/sys/module/fuse/parameters/enable_uring";
/// `nobody` on Debian.
const NOBODY: (u32, u32) = (65534, 65534);

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

fn accessible(path: &Path, mode: libc::c_int) -> bool {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: `c` is a valid NUL-terminated path.
    unsafe { libc::access(c.as_ptr(), mode) == 0 }
}

/// Puts /dev/fuse back to its mode when the test ends, however it ends.
struct RestoreMode(u32);

impl Drop for RestoreMode {
    fn drop(&mut self) {
        let _ = std::fs::set_permissions("/dev/fuse", std::fs::Permissions::from_mode(self.0));
    }
}

/// Who the test acts as, and how.
struct User {
    uid: u32,
    gid: u32,
    /// Through setpriv (the test runs as root).
    switch: bool,
    _restore: Option<RestoreMode>,
}

impl User {
    /// The unprivileged user, or why there is none that can mount here.
    fn get() -> Result<User, String> {
        let fuse = Path::new("/dev/fuse");
        if !fuse.exists() {
            return Err("/dev/fuse is missing".into());
        }
        let fusermount = Path::new("/usr/bin/fusermount3");
        match std::fs::metadata(fusermount) {
            Ok(m) if m.mode() & 0o4000 != 0 && m.uid() == 0 => {}
            Ok(_) => return Err(format!("{} is not setuid root", fusermount.display())),
            Err(_) => {
                return Err(format!(
                    "{} is missing (Debian package fuse3)",
                    fusermount.display()
                ))
            }
        }
        if euid() != 0 {
            if !accessible(fuse, libc::R_OK | libc::W_OK) {
                return Err("/dev/fuse is not readable and writable by this user".into());
            }
            // SAFETY: getegid has no preconditions.
            let gid = unsafe { libc::getegid() };
            return Ok(User {
                uid: euid(),
                gid,
                switch: false,
                _restore: None,
            });
        }
        if Command::new("setpriv").arg("--version").output().is_err() {
            return Err("setpriv (util-linux) is missing".into());
        }
        // As on a stock Debian system, for this test only.
        let mode = std::fs::metadata(fuse).unwrap().mode() & 0o7777;
        let restore = RestoreMode(mode);
        std::fs::set_permissions(fuse, std::fs::Permissions::from_mode(0o666))
            .map_err(|e| format!("cannot make /dev/fuse 0666: {e}"))?;
        Ok(User {
            uid: NOBODY.0,
            gid: NOBODY.1,
            switch: true,
            _restore: Some(restore),
        })
    }

    /// `prog args` as the user, with only `env` (plus PATH) set.
    fn cmd(&self, prog: &str, args: &[&str], env: &[(&str, &Path)]) -> Command {
        let mut c = if self.switch {
            let mut c = Command::new("setpriv");
            c.arg(format!("--reuid={}", self.uid))
                .arg(format!("--regid={}", self.gid))
                .args(["--clear-groups", "--"])
                .arg(prog);
            c
        } else {
            Command::new(prog)
        };
        c.args(args)
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("RUST_BACKTRACE", "0");
        for (k, v) in env {
            c.env(k, v);
        }
        c
    }

    /// Give `dir` (made by the test) to the user.
    fn own(&self, dir: &Path) {
        if self.switch {
            let st = Command::new("chown")
                .arg("-R")
                .arg(format!("{}:{}", self.uid, self.gid))
                .arg(dir)
                .status()
                .unwrap();
            assert!(st.success(), "chown {}", dir.display());
        }
    }
}

fn text(out: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}stderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// From the mount table: a user's FUSE mount refuses every other user,
/// root included (no allow_other), so the test may not stat it.
fn is_fuse_mounted(dir: &Path) -> bool {
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    table.lines().any(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        let fstype = f.iter().skip_while(|x| **x != "-").nth(1);
        f.get(4) == Some(&dir.to_str().unwrap()) && fstype == Some(&"fuse.ptsd")
    })
}

/// Detaches a mount the test left behind (a failed assertion).
struct Unmount(PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        if is_fuse_mounted(&self.0) {
            let c = std::ffi::CString::new(self.0.as_os_str().as_encoded_bytes()).unwrap();
            // SAFETY: valid NUL-terminated path.
            unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        }
    }
}

/// What the user does in their mount, in a shell of theirs.
const WORK: &str = r#"set -e
cd "$1"
echo hello > a
test "$(cat a)" = hello
mv a b
test ! -e a
mkdir d
echo more >> b
mv b d/c
test "$(cat d/c)" = "hello
more"
rm d/c
rmdir d
echo kept > kept
ls -A
"#;

/// One mount of the user's on transport `opt`: mount, check ownership,
/// work, unmount; returns the mount's messages. `device`: an image made by
/// `ptsd mkfs`, else the default device in the user's data directory.
fn session(user: &User, home: &Path, opt: &str, device: Option<&Path>, run_dir: &Path) -> String {
    let mnt = home.join(format!("mnt-{opt}"));
    std::fs::create_dir_all(&mnt).unwrap();
    user.own(home);
    let _guard = Unmount(mnt.clone());
    let mut env = vec![("HOME", home)];
    // With XDG_RUNTIME_DIR the pid file goes there, else to /tmp.
    if run_dir.starts_with(home) {
        env.push(("XDG_RUNTIME_DIR", run_dir.parent().unwrap()));
    }
    let mnt_s = mnt.to_str().unwrap();
    let mut args = vec!["mount", "-o", opt];
    if let Some(d) = device {
        args.extend(["--device", d.to_str().unwrap()]);
    }
    args.push(mnt_s);
    let out = user.cmd(PTSD, &args, &env).output().unwrap();
    assert!(out.status.success(), "ptsd mount -o {opt}: {}", text(&out));
    assert!(is_fuse_mounted(&mnt), "not mounted: {}", text(&out));
    // Informative on stderr; stdout stays empty for scripts.
    let msg = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.stdout.is_empty(), "stdout: {}", text(&out));
    assert!(msg.contains("ptsd: mounted"), "{msg}");

    let out = user
        .cmd("sh", &["-c", WORK, "sh", mnt_s], &env)
        .output()
        .unwrap();
    assert!(out.status.success(), "work in the mount: {}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "kept\n");
    let out = user
        .cmd(
            "stat",
            &["-c", "%u:%g %a %n", mnt_s, &format!("{mnt_s}/kept")],
            &env,
        )
        .output()
        .unwrap();
    let ids = format!("{}:{}", user.uid, user.gid);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("{ids} 755 {mnt_s}\n{ids} 644 {mnt_s}/kept\n"),
        "the root directory and the new file are the user's"
    );

    let pid_file = run_dir.join(format!(
        "{}.pid",
        mnt_s.replace(|c: char| !c.is_ascii_alphanumeric(), "_")
    ));
    let meta = std::fs::metadata(&pid_file)
        .unwrap_or_else(|e| panic!("pid file {}: {e}", pid_file.display()));
    assert_eq!(meta.uid(), user.uid);
    let run_meta = std::fs::metadata(run_dir).unwrap();
    assert_eq!(run_meta.mode() & 0o777, 0o700, "{}", run_dir.display());
    if msg.contains("FUSE over io_uring,") {
        // Really served by the queue threads, not /dev/fuse.
        let pid = std::fs::read_to_string(&pid_file).unwrap();
        let queues = std::fs::read_dir(format!("/proc/{}/task", pid.trim()))
            .unwrap()
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .filter(|c| c.starts_with("ptsd-uring-"))
            .count();
        assert!(queues > 0, "no io_uring queue threads: {msg}");
    }

    // umount(2) is root's: `ptsd umount` goes through fusermount3 and
    // returns once the daemon has shut down cleanly.
    let out = user.cmd(PTSD, &["umount", mnt_s], &env).output().unwrap();
    assert!(out.status.success(), "ptsd umount: {}", text(&out));
    assert!(!is_fuse_mounted(&mnt));
    assert!(
        !pid_file.exists(),
        "the daemon did not finish before umount returned"
    );
    msg
}

/// The journal a mount message names.
fn journal_of(msg: &str) -> PathBuf {
    msg.split_once("durability: journal ")
        .and_then(|(_, t)| t.split(" [").next())
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("no journal in {msg}"))
}

/// The tests take turns: one restoring /dev/fuse's mode must not pull it
/// from under the other's mount.
static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn user_session(opt: &str) {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let user = match User::get() {
        Ok(u) => u,
        Err(why) => {
            eprintln!("SKIP (unprivileged mount, -o {opt}): {why}");
            return;
        }
    };
    if opt == "uring" {
        let on = std::fs::read_to_string(URING_PARAM)
            .map(|v| v.trim() == "Y")
            .unwrap_or(false);
        if !on && std::fs::write(URING_PARAM, "Y").is_err() {
            eprintln!("SKIP (unprivileged mount, -o uring): FUSE over io_uring is off ({URING_PARAM}) and cannot be turned on");
            return;
        }
    }
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir(&home).unwrap();
    // The classic run uses the /tmp fallback, the io_uring one
    // $XDG_RUNTIME_DIR.
    let run_dir = if opt == "uring" {
        std::fs::create_dir(home.join("xdg")).unwrap();
        home.join("xdg/ptsd")
    } else {
        std::env::temp_dir().join(format!("ptsd-run-{}", user.uid))
    };

    // 1. An image the user makes: its root directory is theirs.
    let img = home.join("fs.img");
    user.own(&home);
    let out = user
        .cmd(
            PTSD,
            &["mkfs", img.to_str().unwrap(), "--size", "64MiB"],
            &[("HOME", &home)],
        )
        .output()
        .unwrap();
    assert!(out.status.success(), "mkfs: {}", text(&out));
    let owner = format!("root directory owned by {}:{}", user.uid, user.gid);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&owner),
        "{}",
        text(&out)
    );
    let msg = session(&user, &home, opt, Some(&img), &run_dir);
    if opt == "uring" && !msg.contains("FUSE over io_uring,") {
        // Served over /dev/fuse instead; the message says why.
        eprintln!("SKIP (unprivileged mount, -o uring): not available to this user: {msg}");
        return;
    }
    // The journal (in /dev/shm) was the user's and is gone after a clean
    // unmount.
    assert!(!journal_of(&msg).exists(), "{msg}");

    // 2. The first default mount: device and data in ~/.local/share/ptsd.
    let msg = session(&user, &home, opt, None, &run_dir);
    let data = home.join(".local/share/ptsd");
    let img = std::fs::metadata(data.join("ssd.img")).unwrap();
    assert_eq!(img.uid(), user.uid);
    assert!(msg.contains("(emulated SSD"), "{msg}");
    // A second mount finds the file system as it was left.
    let mnt = home.join(format!("mnt-{opt}"));
    let _guard = Unmount(mnt.clone());
    let env = [("HOME", home.as_path())];
    let mnt_s = mnt.to_str().unwrap();
    let out = user
        .cmd(PTSD, &["mount", "-q", "-o", opt, mnt_s], &env)
        .output()
        .unwrap();
    assert!(out.status.success(), "remount: {}", text(&out));
    assert!(
        out.stdout.is_empty() && out.stderr.is_empty(),
        "-q: {}",
        text(&out)
    );
    let out = user
        .cmd("cat", &[&format!("{mnt_s}/kept")], &env)
        .output()
        .unwrap();
    assert_eq!(out.stdout, b"kept\n", "{}", text(&out));
    let out = user.cmd(PTSD, &["umount", mnt_s], &env).output().unwrap();
    assert!(out.status.success(), "ptsd umount: {}", text(&out));
    let out = user.cmd(PTSD, &["fsck"], &env).output().unwrap();
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("clean"),
        "fsck: {}",
        text(&out)
    );

    // 3. allow_other: only where /etc/fuse.conf lets users have it.
    let conf = std::fs::read_to_string("/etc/fuse.conf").unwrap_or_default();
    if !conf.lines().any(|l| l.trim() == "user_allow_other") {
        let out = user
            .cmd(PTSD, &["mount", "--allow-other", "-o", opt, mnt_s], &env)
            .output()
            .unwrap();
        assert!(!out.status.success(), "allow_other mounted: {}", text(&out));
        assert!(!is_fuse_mounted(&mnt));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("user_allow_other") && err.contains("/etc/fuse.conf"),
            "{err}"
        );
    }
}

#[test]
fn a_user_mounts_and_works_over_dev_fuse() {
    user_session("nouring");
}

#[test]
fn a_user_mounts_and_works_over_io_uring() {
    user_session("uring");
}
