// Over 800 lines: every test shares the mount helpers at the top, and one binary keeps the mounts serialized.
//! End-to-end tests of ptsd-fs: real FUSE mounts (as root) driven through
//! std::fs, libc and shell tools. Each test skips, saying why, where
//! /dev/fuse is missing or the tests do not run as root.

use std::ffi::CString;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const PTSD: &str = env!("CARGO_BIN_EXE_ptsd");

fn skip_reason() -> Option<String> {
    if !Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse is missing".into());
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not running as root (mounting needs it)".into());
    }
    None
}

macro_rules! require_fuse {
    () => {
        if let Some(why) = skip_reason() {
            eprintln!("SKIP: {why}");
            return;
        }
    };
}

fn is_fuse_mounted(dir: &Path) -> bool {
    let c = CString::new(dir.as_os_str().as_bytes()).unwrap();
    // SAFETY: `st` is a plain C struct filled by statfs; `c` is NUL-terminated.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let r = unsafe { libc::statfs(c.as_ptr(), &mut st) };
    r == 0 && st.f_type == 0x6573_5546
}

/// The FUSE transport a test mounts with; the tests that exercise the file
/// system run on both (`on_both_transports!`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Transport {
    /// fuser on /dev/fuse (`-o nouring`).
    Classic,
    /// FUSE over io_uring (`-o uring`), enabled for the test run.
    Uring,
    /// The same, busy-polling its queues (`-o uring_poll`).
    UringPoll,
}

const URING_PARAM: &str = "/sys/module/fuse/parameters/enable_uring";

impl Transport {
    /// Why this transport cannot run here, if it cannot: the kernel lacks
    /// FUSE over io_uring, or its switch is off and cannot be turned on.
    fn unavailable(self) -> Option<String> {
        if self == Transport::Classic {
            return None;
        }
        match std::fs::read_to_string(URING_PARAM) {
            Err(_) => Some(format!(
                "no {URING_PARAM}: this kernel lacks FUSE over io_uring (6.14+, CONFIG_FUSE_IO_URING)"
            )),
            Ok(v) if v.trim() == "Y" => None,
            // Off by default: turn it on for the run (root).
            Ok(_) => std::fs::write(URING_PARAM, "Y")
                .err()
                .map(|e| format!("cannot enable {URING_PARAM}: {e}")),
        }
    }

    fn option(self) -> &'static str {
        match self {
            Transport::Classic => "nouring",
            Transport::Uring => "uring",
            Transport::UringPoll => "uring_poll",
        }
    }
}

macro_rules! require_transport {
    ($t:expr) => {
        if let Some(why) = $t.unavailable() {
            eprintln!("SKIP ({:?} transport): {why}", $t);
            return;
        }
    };
}

/// For each named `fn NAME(t: Transport)`, the tests `NAME::classic` and
/// `NAME::uring`.
macro_rules! on_both_transports {
    ($($name:ident,)*) => {$(
        mod $name {
            #[test]
            fn classic() {
                super::$name(super::Transport::Classic)
            }
            #[test]
            fn uring() {
                super::$name(super::Transport::Uring)
            }
        }
    )*};
}

/// Threads of process `pid` whose name starts with `prefix`.
fn threads_named(pid: u32, prefix: &str) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
                .filter(|c| c.starts_with(prefix))
                .count()
        })
        .unwrap_or(0)
}

/// A mounted ptsd-fs served by a foreground `ptsd mount` child.
struct Mounted {
    _tmp: tempfile::TempDir,
    img: PathBuf,
    journal: PathBuf,
    dir: PathBuf,
    child: Option<Child>,
    /// Extra `ptsd mount` arguments.
    extra: Vec<String>,
}

impl Mounted {
    fn new(size: &str) -> Mounted {
        Self::with_args(size, &[])
    }

    /// Mounted over transport `t` (checked: the io_uring one must really
    /// serve through its queue threads, not fall back to /dev/fuse).
    fn on(t: Transport, size: &str, extra: &[&str]) -> Mounted {
        let mut args = vec!["-o", t.option()];
        args.extend_from_slice(extra);
        let m = Self::with_args(size, &args);
        let pid = m.child.as_ref().unwrap().id();
        let queue_threads = threads_named(pid, "ptsd-uring-");
        match t {
            Transport::Uring | Transport::UringPoll => {
                assert!(queue_threads > 0, "no io_uring queue threads")
            }
            Transport::Classic => assert_eq!(queue_threads, 0),
        }
        m
    }

    fn with_args(size: &str, extra: &[&str]) -> Mounted {
        let tmp = tempfile::tempdir().unwrap();
        let img = tmp.path().join("fs.img");
        let dir = tmp.path().join("mnt");
        let journal = tmp.path().join("journal");
        std::fs::create_dir(&dir).unwrap();
        let st = Command::new(PTSD)
            .args(["mkfs"])
            .arg(&img)
            .args(["--size", size])
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(st.success(), "mkfs failed");
        let mut m = Mounted {
            _tmp: tmp,
            img,
            journal,
            dir,
            child: None,
            extra: extra.iter().map(|a| a.to_string()).collect(),
        };
        m.mount();
        m
    }

    fn mount(&mut self) {
        let child = Command::new(PTSD)
            .args(["mount", "-f", "--journal-size", "64M"])
            .args(&self.extra)
            .arg("--device")
            .arg(&self.img)
            .arg("--journal")
            .arg(&self.journal)
            .arg(&self.dir)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !is_fuse_mounted(&self.dir) {
            if let Some(st) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("ptsd mount exited early: {st}");
            }
            assert!(Instant::now() < deadline, "mount did not appear");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn p(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }

    /// Clean unmount; waits for the daemon to finish its checkpoint.
    fn umount(&mut self) {
        let st = Command::new(PTSD)
            .arg("umount")
            .arg(&self.dir)
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(st.success(), "ptsd umount failed");
        if let Some(mut c) = self.child.take() {
            let st = c.wait().unwrap();
            assert!(st.success(), "daemon exit status {st}");
        }
    }

    /// SIGKILL the daemon and detach the dead mount.
    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().unwrap();
            let _ = c.wait();
        }
        let c = CString::new(self.dir.as_os_str().as_bytes()).unwrap();
        // SAFETY: valid NUL-terminated path.
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    }

    fn fsck(&self) -> String {
        let out = Command::new(PTSD)
            .arg("fsck")
            .arg(&self.img)
            .arg("--journal")
            .arg(&self.journal)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success() && text.contains("clean"),
            "fsck not clean:\n{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        text
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if self.child.is_some() {
            self.kill9();
        }
    }
}

fn errno_of(r: i32) -> i32 {
    if r == 0 {
        0
    } else {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
    }
}

fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

fn posix_operations_through_std_fs(t: Transport) {
    require_fuse!();
    require_transport!(t);
    let mut m = Mounted::on(t, "512M", &[]);
    // Files: create, write, read, append, seek, truncate.
    std::fs::write(m.p("a.txt"), b"hello world").unwrap();
    assert_eq!(std::fs::read(m.p("a.txt")).unwrap(), b"hello world");
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(m.p("a.txt"))
        .unwrap();
    f.write_all(b"!!").unwrap();
    f.sync_all().unwrap();
    drop(f);
    assert_eq!(
        std::fs::read_to_string(m.p("a.txt")).unwrap(),
        "hello world!!"
    );
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 256) as u8).collect();
    std::fs::write(m.p("big"), &big).unwrap();
    let mut f = std::fs::File::open(m.p("big")).unwrap();
    f.seek(SeekFrom::Start(1_234_567)).unwrap();
    let mut buf = vec![0u8; 1000];
    f.read_exact(&mut buf).unwrap();
    assert_eq!(buf, &big[1_234_567..1_235_567]);
    drop(f);
    assert_eq!(std::fs::read(m.p("big")).unwrap(), big);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(m.p("big"))
        .unwrap();
    f.set_len(10_000).unwrap();
    f.set_len(20_000).unwrap();
    drop(f);
    let back = std::fs::read(m.p("big")).unwrap();
    assert_eq!(&back[..10_000], &big[..10_000]);
    assert!(back[10_000..].iter().all(|&b| b == 0));
    // Directories, readdir, rename, links.
    std::fs::create_dir_all(m.p("d1/d2/d3")).unwrap();
    for i in 0..1500 {
        std::fs::write(m.p(&format!("d1/f{i}")), i.to_string()).unwrap();
    }
    let n = std::fs::read_dir(m.p("d1")).unwrap().count();
    assert_eq!(n, 1501);
    std::fs::rename(m.p("d1/f7"), m.p("d1/d2/moved")).unwrap();
    assert_eq!(std::fs::read_to_string(m.p("d1/d2/moved")).unwrap(), "7");
    std::fs::hard_link(m.p("a.txt"), m.p("d1/hard")).unwrap();
    assert_eq!(std::fs::metadata(m.p("a.txt")).unwrap().nlink(), 2);
    std::os::unix::fs::symlink("../a.txt", m.p("d1/sym")).unwrap();
    assert_eq!(
        std::fs::read_link(m.p("d1/sym")).unwrap(),
        Path::new("../a.txt")
    );
    assert_eq!(
        std::fs::read_to_string(m.p("d1/sym")).unwrap(),
        "hello world!!"
    );
    // Errors a POSIX user expects.
    let long = "x".repeat(256);
    assert_eq!(
        std::fs::write(m.p(&long), b"").unwrap_err().raw_os_error(),
        Some(libc::ENAMETOOLONG)
    );
    assert_eq!(
        std::fs::remove_dir(m.p("d1")).unwrap_err().raw_os_error(),
        Some(libc::ENOTEMPTY)
    );
    assert_eq!(
        std::fs::create_dir(m.p("d1")).unwrap_err().raw_os_error(),
        Some(libc::EEXIST)
    );
    assert_eq!(
        std::fs::read(m.p("nope")).unwrap_err().raw_os_error(),
        Some(libc::ENOENT)
    );
    assert_eq!(
        std::fs::remove_file(m.p("d1/d2"))
            .unwrap_err()
            .raw_os_error(),
        Some(libc::EISDIR)
    );
    // rename(2) flags.
    std::fs::write(m.p("x"), b"X").unwrap();
    std::fs::write(m.p("y"), b"Y").unwrap();
    let (x, y) = (cstr(&m.p("x")), cstr(&m.p("y")));
    // SAFETY: valid NUL-terminated paths; AT_FDCWD with absolute paths.
    let r = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            x.as_ptr(),
            libc::AT_FDCWD,
            y.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    assert_eq!(errno_of(r), libc::EEXIST);
    // SAFETY: as above.
    let r = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            x.as_ptr(),
            libc::AT_FDCWD,
            y.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    assert_eq!(r, 0);
    assert_eq!(std::fs::read(m.p("x")).unwrap(), b"Y");
    assert_eq!(std::fs::read(m.p("y")).unwrap(), b"X");
    // chmod, chown, utimens.
    std::fs::set_permissions(m.p("x"), std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(std::fs::metadata(m.p("x")).unwrap().mode() & 0o777, 0o600);
    std::os::unix::fs::chown(m.p("x"), Some(1234), Some(5678)).unwrap();
    let md = std::fs::metadata(m.p("x")).unwrap();
    assert_eq!((md.uid(), md.gid()), (1234, 5678));
    let t = std::time::UNIX_EPOCH + Duration::new(1_600_000_000, 123_456_789);
    std::fs::File::options()
        .write(true)
        .open(m.p("x"))
        .unwrap()
        .set_modified(t)
        .unwrap();
    let md = std::fs::metadata(m.p("x")).unwrap();
    assert_eq!((md.mtime(), md.mtime_nsec()), (1_600_000_000, 123_456_789));
    // xattrs.
    let (name, val) = (CString::new("user.color").unwrap(), b"blue");
    // SAFETY: valid pointers and lengths.
    let r = unsafe { libc::setxattr(x.as_ptr(), name.as_ptr(), val.as_ptr().cast(), val.len(), 0) };
    assert_eq!(r, 0);
    let mut vbuf = [0u8; 64];
    // SAFETY: valid pointers; vbuf has 64 bytes.
    let n = unsafe {
        libc::getxattr(
            x.as_ptr(),
            name.as_ptr(),
            vbuf.as_mut_ptr().cast(),
            vbuf.len(),
        )
    };
    assert_eq!(&vbuf[..n as usize], val);
    // fallocate and statfs.
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(m.p("pre"))
        .unwrap();
    // SAFETY: valid fd.
    let r = unsafe { libc::fallocate(std::os::fd::AsRawFd::as_raw_fd(&f), 0, 0, 1 << 20) };
    assert_eq!(r, 0);
    assert_eq!(f.metadata().unwrap().len(), 1 << 20);
    assert!(f.metadata().unwrap().blocks() >= 2048);
    drop(f);
    let c = cstr(&m.dir);
    // SAFETY: plain C struct filled by statvfs.
    let mut sv: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is NUL-terminated and `sv` a valid statvfs to fill.
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut sv) }, 0);
    assert_eq!(sv.f_bsize, 4096);
    assert!(sv.f_bfree > 0 && sv.f_bfree < sv.f_blocks);
    // Unlinked while open: still readable.
    let mut f = std::fs::File::open(m.p("d1/f9")).unwrap();
    std::fs::remove_file(m.p("d1/f9")).unwrap();
    let mut s = String::new();
    f.read_to_string(&mut s).unwrap();
    assert_eq!(s, "9");
    drop(f);
    // Everything survives a clean unmount and remount.
    m.umount();
    m.fsck();
    m.mount();
    assert_eq!(std::fs::read_to_string(m.p("d1/d2/moved")).unwrap(), "7");
    assert_eq!(std::fs::read_dir(m.p("d1")).unwrap().count(), 1501);
    assert_eq!(
        std::fs::metadata(m.p("x")).unwrap().mtime_nsec(),
        123_456_789
    );
    m.umount();
    m.fsck();
}

fn has_xattr(p: &Path, name: &str) -> bool {
    let c = cstr(p);
    let n = CString::new(name).unwrap();
    // SAFETY: valid NUL-terminated strings; size 0 asks for the length only.
    unsafe { libc::getxattr(c.as_ptr(), n.as_ptr(), std::ptr::null_mut(), 0) >= 0 }
}

/// Append a byte to `p` as uid/gid 65534 (no CAP_FSETID).
fn append_as_nobody(p: &Path) {
    use std::os::unix::process::CommandExt;
    let st = Command::new("sh")
        .arg("-c")
        .arg("printf x >> \"$1\"")
        .arg("sh")
        .arg(p)
        .uid(65534)
        .gid(65534)
        .status()
        .unwrap();
    assert!(st.success(), "write as nobody failed");
}

/// A write, truncate or chown by someone without CAP_FSETID drops setuid,
/// setgid (when group-executable) and the file capability, as on ext4; root
/// keeps setuid/setgid across its own writes, and any write drops the file
/// capability. (ptsd-fs drops them itself under FUSE_HANDLE_KILLPRIV_V2.)
fn writes_by_others_drop_setuid_setgid_and_capabilities(t: Transport) {
    require_fuse!();
    require_transport!(t);
    // Other users may use the mount (and reach it).
    let mut m = Mounted::on(t, "64M", &["--allow-other"]);
    std::fs::set_permissions(m._tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let f = m.p("suid");
    std::fs::write(&f, b"#!/bin/sh\n").unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o6777)).unwrap();
    // security.capability, VFS_CAP_REVISION_2 with CAP_NET_RAW permitted.
    let mut cap = Vec::new();
    cap.extend_from_slice(&0x0200_0001u32.to_le_bytes());
    cap.extend_from_slice(&(1u32 << 13).to_le_bytes());
    cap.extend_from_slice(&[0u8; 12]);
    let set_cap = || {
        let c = cstr(&f);
        let n = CString::new("security.capability").unwrap();
        // SAFETY: valid pointers and lengths.
        let r =
            unsafe { libc::setxattr(c.as_ptr(), n.as_ptr(), cap.as_ptr().cast(), cap.len(), 0) };
        assert_eq!(r, 0, "setting security.capability: {}", errno_of(r));
        assert!(has_xattr(&f, "security.capability"));
    };
    set_cap();
    // Root (CAP_FSETID) writing keeps setuid/setgid; any write drops the
    // file capability.
    std::fs::OpenOptions::new()
        .append(true)
        .open(&f)
        .unwrap()
        .write_all(b"y")
        .unwrap();
    assert_eq!(mode(&f), 0o6777);
    assert!(!has_xattr(&f, "security.capability"));
    set_cap();
    // Another user's write drops them all.
    append_as_nobody(&f);
    assert_eq!(mode(&f), 0o0777);
    assert!(!has_xattr(&f, "security.capability"));
    assert_eq!(std::fs::read(&f).unwrap(), b"#!/bin/sh\nyx");
    // setgid without group execute is kept (it marks mandatory locking).
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o2666)).unwrap();
    append_as_nobody(&f);
    assert_eq!(mode(&f), 0o2666);
    // chown drops setuid, even by root.
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o4755)).unwrap();
    std::os::unix::fs::chown(&f, Some(1), None).unwrap();
    assert_eq!(mode(&f), 0o0755);
    // A truncate by another user drops setuid too.
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o4777)).unwrap();
    use std::os::unix::process::CommandExt;
    let st = Command::new("truncate")
        .args(["-s", "1"])
        .arg(&f)
        .uid(65534)
        .gid(65534)
        .status()
        .unwrap();
    assert!(st.success());
    assert_eq!(mode(&f), 0o0777);
    m.umount();
    m.fsck();
}

fn sh(dir: &Path, script: &str) {
    let out = Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "`{script}` failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn shell_tools_cp_tar_git_rm(t: Transport) {
    require_fuse!();
    require_transport!(t);
    let mut m = Mounted::on(t, "512M", &[]);
    let src = Path::new(env!("CARGO_MANIFEST_DIR"));
    let d = m.dir.display().to_string();
    sh(src, &format!("cp -a crates src Cargo.toml {d}/"));
    sh(
        src,
        &format!("diff -r crates {d}/crates && diff -r src {d}/src"),
    );
    sh(&m.dir, "tar cf /tmp/ptsd-e2e-$$.tar crates && mkdir untar && tar xf /tmp/ptsd-e2e-$$.tar -C untar && rm /tmp/ptsd-e2e-$$.tar && diff -r crates untar/crates");
    if Command::new("git").arg("--version").output().is_ok() {
        sh(&m.dir, "git init -q repo && cp -a src repo/ && cd repo && git add -A && git -c user.name=t -c user.email=t@t commit -qm first && git log --oneline | grep -q first && git status --porcelain | wc -l | grep -qx 0");
    } else {
        eprintln!("git not installed: skipping the git part");
    }
    sh(&m.dir, "rm -rf crates untar repo src");
    let left: Vec<_> = std::fs::read_dir(&m.dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, vec![std::ffi::OsString::from("Cargo.toml")]);
    m.umount();
    m.fsck();
}

fn concurrent_writers_with_fsync(t: Transport) {
    require_fuse!();
    require_transport!(t);
    let mut m = Mounted::on(t, "512M", &[]);
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let dir = m.p(&format!("t{t}"));
            std::thread::spawn(move || {
                std::fs::create_dir(&dir).unwrap();
                for i in 0..150 {
                    let p = dir.join(format!("f{i}"));
                    let mut f = std::fs::File::create(&p).unwrap();
                    let body = format!("{t}-{i}-").repeat(100 + i);
                    f.write_all(body.as_bytes()).unwrap();
                    f.sync_all().unwrap();
                    if i % 3 == 0 {
                        std::fs::remove_file(&p).unwrap();
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    for t in 0..4 {
        for i in 0..150usize {
            let p = m.p(&format!("t{t}/f{i}"));
            if i % 3 == 0 {
                assert!(!p.exists());
            } else {
                assert_eq!(
                    std::fs::read_to_string(&p).unwrap(),
                    format!("{t}-{i}-").repeat(100 + i)
                );
            }
        }
    }
    m.umount();
    m.fsck();
}

fn fsx_binary() -> Option<PathBuf> {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
    let mut cands: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).map(|d| d.join("fsx")).collect())
        .unwrap_or_default();
    if let Some(h) = home {
        cands.push(h.join("bin/fsx"));
    }
    cands.into_iter().find(|p| p.is_file())
}

fn fsx_random_operations(t: Transport) {
    require_fuse!();
    require_transport!(t);
    let fsx = fsx_binary().expect(
        "the fsx binary is not installed (scripts/setup installs it with cargo install fsx)",
    );
    let mut m = Mounted::on(t, "512M", &[]);
    for seed in [1u32, 7] {
        let file = m.p(&format!("fsx-{seed}"));
        let out = Command::new(&fsx)
            .args(["-N", "2000", "-S", &seed.to_string()])
            .arg(&file)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "fsx seed {seed} failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    m.umount();
    m.fsck();
}

/// The daemon's pid file (same naming as `ptsd mount`).
fn pid_file(dir: &Path) -> PathBuf {
    let canon = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let name: String = canon
        .to_string_lossy()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    PathBuf::from("/run/ptsd").join(format!("{name}.pid"))
}

fn wait_gone(p: &Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while p.exists() {
        assert!(Instant::now() < deadline, "{} still there", p.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn default_mount_creates_its_own_device_and_mount_helper_works() {
    require_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("mnt");
    std::fs::create_dir(&dir).unwrap();
    // `ptsd mount DIR` with nothing else (data dir redirected for the test).
    let out = Command::new(PTSD)
        .arg("mount")
        .arg(&dir)
        .env("PTSD_DATA_DIR", tmp.path().join("data"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("durability:"), "{text}");
    // The journal the defaults chose (removed at the end: it may be in /dev/shm).
    let journal = text
        .split_once("durability: journal ")
        .and_then(|(_, t)| t.split(" [").next())
        .map(PathBuf::from)
        .expect("journal path in the mount message");
    struct RemoveOnDrop(PathBuf);
    impl Drop for RemoveOnDrop {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
    let _journal = RemoveOnDrop(journal);
    assert!(is_fuse_mounted(&dir));
    std::fs::write(dir.join("hello"), b"world").unwrap();
    let pidf = pid_file(&dir);
    assert!(pidf.exists());
    // Plain umount(8) works too; the daemon then finishes on its own.
    assert!(Command::new("umount").arg(&dir).status().unwrap().success());
    wait_gone(&pidf);
    let data = tmp.path().join("data");
    let out = Command::new(PTSD)
        .arg("fsck")
        .arg("--data-dir")
        .arg(&data)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("clean"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );

    // mount -t fuse.ptsd through the helper, if we may install it.
    let helper = Path::new("/sbin/mount.fuse.ptsd");
    let ours = std::fs::read_link(helper)
        .map(|t| t == Path::new(PTSD))
        .unwrap_or(false);
    if helper.exists() && !ours {
        eprintln!(
            "{} exists and is not ours: skipping the mount(8) part",
            helper.display()
        );
        return;
    }
    if !ours && std::os::unix::fs::symlink(PTSD, helper).is_err() {
        eprintln!(
            "cannot install {}: skipping the mount(8) part",
            helper.display()
        );
        return;
    }
    let st = Command::new("mount")
        .args(["-t", "fuse.ptsd", "ptsd"])
        .arg(&dir)
        .arg("-o")
        .arg(format!("data_dir={}", data.display()))
        .status()
        .unwrap();
    let mounted = is_fuse_mounted(&dir);
    let content = std::fs::read(dir.join("hello")).ok();
    if mounted {
        assert!(Command::new("umount").arg(&dir).status().unwrap().success());
        wait_gone(&pid_file(&dir));
    }
    if !ours {
        let _ = std::fs::remove_file(helper);
    }
    assert!(st.success() && mounted, "mount -t fuse.ptsd failed");
    assert_eq!(content.as_deref(), Some(&b"world"[..]));
}
/// What the writer of one kill round knows about a file: the content of its
/// last fsync'd version and the versions attempted since.
#[derive(Default)]
struct Known {
    synced: Vec<u8>,
    attempts: Vec<Vec<u8>>,
    /// Replaced by rename: only whole versions may show, never a prefix.
    atomic: bool,
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One seeded round on mount `m`: an fsync-heavy writer (create + write +
/// fsync, and write-temp + fsync + rename-over + fsync-dir) against the
/// mount, SIGKILL of the daemon at a random moment, fsck of the image with
/// the journal replayed, remount, and a check of every file.
fn kill9_round(m: &mut Mounted, seed: u64, round: u64) {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let state = std::sync::Arc::new(std::sync::Mutex::new(std::collections::HashMap::<
        String,
        Known,
    >::new()));
    let dir = m.dir.join(format!("r{round}"));
    std::fs::create_dir(&dir).unwrap();
    std::fs::File::open(&m.dir).unwrap().sync_all().unwrap();
    let st = state.clone();
    let wdir = dir.clone();
    let wseed = rng.gen::<u64>();
    let writer = std::thread::spawn(move || {
        let mut rng = rand::rngs::StdRng::seed_from_u64(wseed);
        for op in 0..1_000_000u64 {
            let atomic = rng.gen_bool(0.4);
            let name = if atomic {
                format!("a{}", rng.gen_range(0..8))
            } else {
                format!("f{}", rng.gen_range(0..16))
            };
            let len = rng.gen_range(0..40_000);
            let body: Vec<u8> = (0..len).map(|i| (i as u64 ^ op ^ wseed) as u8).collect();
            // Record the attempt first: after a crash the file may hold it.
            st.lock()
                .unwrap()
                .entry(name.clone())
                .or_insert_with(|| Known {
                    atomic,
                    ..Known::default()
                })
                .attempts
                .push(body.clone());
            let r = (|| -> std::io::Result<()> {
                if atomic {
                    let tmp = wdir.join(format!("tmp-{name}"));
                    let mut f = std::fs::File::create(&tmp)?;
                    f.write_all(&body)?;
                    f.sync_all()?;
                    std::fs::rename(&tmp, wdir.join(&name))?;
                    std::fs::File::open(&wdir)?.sync_all()
                } else {
                    let mut f = std::fs::File::create(wdir.join(&name))?;
                    f.write_all(&body)?;
                    f.sync_all()
                }
            })();
            if r.is_err() {
                return op;
            }
            let mut g = st.lock().unwrap();
            let k = g.get_mut(&name).unwrap();
            k.synced = body;
            k.attempts.clear();
        }
        u64::MAX
    });
    std::thread::sleep(Duration::from_millis(rng.gen_range(20..400)));
    m.kill9();
    let ops = writer.join().unwrap();
    let report = m.fsck();
    m.mount();
    let state = state.lock().unwrap();
    let why = |name: &str, got: &[u8], k: &Known| {
        format!(
            "seed {seed} round {round} (after {ops} ops): {name} holds {} bytes, neither its fsync'd {} bytes nor {} a later attempt\n{report}",
            got.len(),
            k.synced.len(),
            if k.atomic { "all of" } else { "a prefix of" },
        )
    };
    for (name, k) in state.iter() {
        let got = std::fs::read(dir.join(name)).unwrap_or_default();
        let ok = if k.atomic {
            // rename is all-or-nothing: a whole version, never part of one.
            got == k.synced || k.attempts.contains(&got)
        } else {
            got == k.synced || k.attempts.iter().any(|a| a.starts_with(&got))
        };
        assert!(ok, "{}", why(name, &got, k));
    }
}

/// `kill -9` of the daemon at random moments of an fsync-heavy workload,
/// many seeded rounds on one image: each round fsck's the image (journal
/// replayed) and checks every file after the remount. `PTSD_KILL9_ROUNDS`
/// (default 40) and `PTSD_KILL9_SEED` (default 1) pick the rounds; rounds
/// stop early (at least 4 run) once `PTSD_KILL9_SECS` (default 60) are
/// spent, so the test stays bounded on a slow machine.
fn kill9_during_fsync_workload_then_recover(t: Transport) {
    require_fuse!();
    require_transport!(t);
    let rounds = env_u64("PTSD_KILL9_ROUNDS", 40);
    let base = env_u64("PTSD_KILL9_SEED", 1);
    let budget = Duration::from_secs(env_u64("PTSD_KILL9_SECS", 60));
    let start = Instant::now();
    let mut m = Mounted::on(t, "256M", &[]);
    let mut ran = 0;
    for round in 0..rounds {
        if round >= 4 && start.elapsed() > budget {
            break;
        }
        let seed = base.wrapping_mul(1_000_003).wrapping_add(round);
        eprintln!("kill -9 round {round}: seed {seed}");
        kill9_round(&mut m, seed, round);
        ran += 1;
    }
    m.umount();
    m.fsck();
    eprintln!(
        "kill -9: {ran} of {rounds} rounds in {:.1} s",
        start.elapsed().as_secs_f64()
    );
}

/// Flush dirty pages and make the kernel forget every cached inode, so the
/// next access loads each inode again from its on-device form.
fn drop_caches() {
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3").unwrap();
}

fn fio(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("fio")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("fio is not installed (scripts/setup installs it)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && !text.contains("verify: bad"),
        "fio {args:?} failed:\n{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// Issue 11 §1: fio with its default `fallocate=native` preallocates each
/// file and then writes it randomly; every block must verify after the
/// kernel forgets the inodes, and after a remount (and fsck stays clean).
fn fio_verify_preallocated_random_writes_across_drop_caches_and_remount(t: Transport) {
    require_fuse!();
    require_transport!(t);
    let mut m = Mounted::on(t, "1G", &[]);
    // 4 KiB random writes into a 64 MiB file, and a torrent-like pattern:
    // random 16 KiB pieces into a 64 MiB preallocated file.
    let jobs: [(&str, &str); 2] = [("rand4k", "4k"), ("pieces16k", "16k")];
    let common = |name: &str, bs: &str| -> Vec<String> {
        [
            &format!("--name={name}"),
            &format!("--filename={name}.dat"),
            "--size=64M",
            &format!("--bs={bs}"),
            "--rw=randwrite",
            "--ioengine=psync",
            "--verify=crc32c",
            "--verify_fatal=1",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let run = |dir: &Path, name: &str, bs: &str, extra: &[&str]| {
        let mut a = common(name, bs);
        a.extend(extra.iter().map(|s| s.to_string()));
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        fio(dir, &a)
    };
    for (name, bs) in jobs {
        // Write (fio's default fallocate=native preallocates first), verify.
        run(&m.dir, name, bs, &["--do_verify=1"]);
    }
    drop_caches();
    for (name, bs) in jobs {
        run(&m.dir, name, bs, &["--verify_only"]);
    }
    m.umount();
    m.fsck();
    m.mount();
    drop_caches();
    for (name, bs) in jobs {
        run(&m.dir, name, bs, &["--verify_only"]);
        let len = std::fs::metadata(m.p(&format!("{name}.dat")))
            .unwrap()
            .len();
        assert_eq!(len, 64 << 20);
    }
    m.umount();
    m.fsck();
}

/// A stdout whose reader is already gone (`| head -0`).
fn closed_stdout() -> Stdio {
    use std::os::fd::FromRawFd;
    let mut fds = [0i32; 2];
    // SAFETY: `fds` has room for the two descriptors pipe() returns.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: fds[0] is ours and not used again; fds[1] is handed over once.
    unsafe {
        libc::close(fds[0]);
        Stdio::from(std::os::fd::OwnedFd::from_raw_fd(fds[1]))
    }
}

fn run_closed_stdout(args: &[&std::ffi::OsStr]) {
    let out = Command::new(PTSD)
        .args(args)
        .stdout(closed_stdout())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && !err.contains("panicked"),
        "ptsd {args:?} with a closed stdout: {}\n{err}",
        out.status
    );
}

/// Issue 11 §5: no command panics when its stdout is closed
/// (`ptsd mount ... | head -0`), and the mount still works.
#[test]
fn closed_stdout_never_panics() {
    require_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    let img = tmp.path().join("fs.img");
    let journal = tmp.path().join("journal");
    let dir = tmp.path().join("mnt");
    std::fs::create_dir(&dir).unwrap();
    let os = |s: &'static str| std::ffi::OsStr::new(s);
    run_closed_stdout(&[os("version")]);
    run_closed_stdout(&[os("mkfs"), img.as_os_str(), os("--size"), os("64M")]);
    run_closed_stdout(&[
        os("mount"),
        os("--journal-size"),
        os("16M"),
        os("--device"),
        img.as_os_str(),
        os("--journal"),
        journal.as_os_str(),
        dir.as_os_str(),
    ]);
    assert!(is_fuse_mounted(&dir));
    std::fs::write(dir.join("f"), b"still works").unwrap();
    run_closed_stdout(&[os("umount"), dir.as_os_str()]);
    assert!(!is_fuse_mounted(&dir));
    run_closed_stdout(&[
        os("fsck"),
        img.as_os_str(),
        os("--journal"),
        journal.as_os_str(),
    ]);
}

/// The mount's type in the mount table of this process (`fuse.ptsd`).
fn mount_type(dir: &Path) -> Option<String> {
    let canon = dir.canonicalize().unwrap();
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    table
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let sep = f.iter().position(|&x| x == "-")?;
            (Path::new(f[4]) == canon).then(|| f[sep + 1].to_string())
        })
        .next_back()
}

/// Issue 16 §3: a ptsd mount has type `fuse.ptsd`, so `findmnt -t`,
/// `df -T` and `umount -a -t fuse.ptsd` see it.
#[test]
fn mount_type_is_fuse_ptsd() {
    require_fuse!();
    let mut m = Mounted::new("64M");
    assert_eq!(mount_type(&m.dir).as_deref(), Some("fuse.ptsd"));
    let out = Command::new("findmnt")
        .args(["-n", "-t", "fuse.ptsd", "-o", "TARGET"])
        .arg(&m.dir)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).trim()
            == m.dir.canonicalize().unwrap().to_str().unwrap(),
        "findmnt -t fuse.ptsd: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let out = Command::new("df").arg("-T").arg(&m.dir).output().unwrap();
    let df = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(df.contains(" fuse.ptsd "), "df -T: {df}");
    // umount -a -t fuse.ptsd, in a private mount namespace so that only this
    // process's copies of the machine's ptsd mounts go. Lazily (-l): the
    // namespace also holds copies of other tests' mounts, one of which may be
    // mid-mount or have a killed daemon, and a plain umount of that copy
    // can wait on it (seen once as a hung test).
    let script = format!(
        "umount -a -l -t fuse.ptsd && ! findmnt {} >/dev/null",
        m.dir.display()
    );
    let st = Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", &script])
        .status()
        .unwrap();
    assert!(st.success(), "umount -a -t fuse.ptsd did not unmount it");
    assert!(
        is_fuse_mounted(&m.dir),
        "the namespace's umount reached out"
    );
    m.umount();
    m.fsck();
}

// ---- issue 11 §2-§4: locks, a journal that is gone, the remount race ----

/// Run `ptsd ARGS`; returns (success, stdout + stderr). A command still
/// running after 30 s (a foreground mount that should have been refused)
/// is killed and counts as a failure to refuse.
fn ptsd(args: &[&std::ffi::OsStr]) -> (bool, String) {
    let mut child = Command::new(PTSD)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            // A mount it made: detach it so the test can clean up.
            if let Some(dir) = args.last() {
                let c = cstr(Path::new(dir));
                // SAFETY: valid NUL-terminated path.
                unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
            }
            let out = child.wait_with_output().unwrap();
            return (
                true,
                format!(
                    "still running after 30 s: {}",
                    String::from_utf8_lossy(&out.stdout)
                ),
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn os(s: &str) -> &std::ffi::OsStr {
    std::ffi::OsStr::new(s)
}

/// A second `ptsd mount` (same journal, or another journal), `ptsd mkfs`
/// and `ptsd fsck --repair` / `ptsd fsck` of a mounted image are refused,
/// naming the daemon's PID; nothing on the mount is lost.
#[test]
fn a_mounted_image_is_not_mounted_twice_formatted_or_repaired() {
    require_fuse!();
    let mut m = Mounted::new("64M");
    let pid = m.child.as_ref().unwrap().id();
    for i in 0..20 {
        std::fs::write(m.p(&format!("f{i}")), format!("file {i}")).unwrap();
    }
    let dir2 = m.dir.with_file_name("mnt2");
    std::fs::create_dir(&dir2).unwrap();
    let other_journal = m.journal.with_file_name("journal2");
    let in_use = format!("in use by PID {pid}");
    let attempts: Vec<(&str, Vec<&std::ffi::OsStr>)> = vec![
        (
            "mount + mount",
            vec![
                os("mount"),
                os("-f"),
                os("--device"),
                m.img.as_os_str(),
                os("--journal"),
                m.journal.as_os_str(),
                dir2.as_os_str(),
            ],
        ),
        (
            "two journals on one image",
            vec![
                os("mount"),
                os("-f"),
                os("--device"),
                m.img.as_os_str(),
                os("--journal"),
                other_journal.as_os_str(),
                dir2.as_os_str(),
            ],
        ),
        ("mount + mkfs", vec![os("mkfs"), m.img.as_os_str()]),
        (
            "mount + mkfs --size",
            vec![os("mkfs"), m.img.as_os_str(), os("--size"), os("64M")],
        ),
        (
            "mount + fsck --repair",
            vec![
                os("fsck"),
                m.img.as_os_str(),
                os("--journal"),
                m.journal.as_os_str(),
                os("--repair"),
            ],
        ),
        (
            "mount + fsck",
            vec![
                os("fsck"),
                m.img.as_os_str(),
                os("--journal"),
                m.journal.as_os_str(),
            ],
        ),
    ];
    for (what, args) in attempts {
        let (ok, text) = ptsd(&args);
        assert!(
            !ok && text.contains(&in_use),
            "{what}: not refused:\n{text}"
        );
        assert!(!is_fuse_mounted(&dir2), "{what}: mounted a second time");
    }
    assert!(
        !other_journal.exists(),
        "a refused mount left a journal behind"
    );
    for i in 0..20 {
        assert_eq!(
            std::fs::read_to_string(m.p(&format!("f{i}"))).unwrap(),
            format!("file {i}")
        );
    }
    m.umount();
    let report = m.fsck();
    assert!(report.contains("20 files"), "{report}");
}

/// After `kill -9` and a lost `--journal` file, `ptsd mount` refuses and
/// says what to do; `ptsd fsck --repair` says what was lost and leaves a
/// file system that mounts (before: "clean", and the refusal forever).
#[test]
fn a_missing_journal_file_is_repaired_by_fsck_and_the_fs_mounts_again() {
    require_fuse!();
    let mut m = Mounted::new("64M");
    std::fs::write(m.p("a"), b"hello").unwrap();
    std::fs::File::open(m.p("a")).unwrap().sync_all().unwrap();
    m.kill9();
    std::fs::remove_file(&m.journal).unwrap();
    let mount_args = [
        os("mount"),
        os("-f"),
        os("--device"),
        m.img.as_os_str(),
        os("--journal"),
        m.journal.as_os_str(),
        m.dir.as_os_str(),
    ];
    let (ok, text) = ptsd(&mount_args);
    assert!(!ok && text.contains("fsck --repair"), "{text}");
    assert!(!is_fuse_mounted(&m.dir));
    let (ok, text) = ptsd(&[
        os("fsck"),
        m.img.as_os_str(),
        os("--journal"),
        m.journal.as_os_str(),
    ]);
    assert!(
        !ok && text.contains("journal missing"),
        "read-only fsck must not say clean:\n{text}"
    );
    let (ok, text) = ptsd(&[
        os("fsck"),
        m.img.as_os_str(),
        os("--journal"),
        m.journal.as_os_str(),
        os("--repair"),
    ]);
    assert!(ok, "{text}");
    assert!(
        text.contains("journal missing; changes not yet checkpointed before the crash are lost"),
        "{text}"
    );
    m.mount();
    std::fs::write(m.p("b"), b"after").unwrap();
    m.umount();
    m.fsck();
}

/// The same, in one step: `ptsd mount --discard-missing-journal`.
#[test]
fn mount_discard_missing_journal_mounts_in_one_step() {
    require_fuse!();
    let mut m = Mounted::new("64M");
    std::fs::write(m.p("a"), b"hello").unwrap();
    m.kill9();
    std::fs::remove_file(&m.journal).unwrap();
    m.extra.push("--discard-missing-journal".into());
    m.mount();
    std::fs::write(m.p("b"), b"after").unwrap();
    m.umount();
    m.fsck();
}

/// The default RAM journal (/dev/shm) gone after a "reboot": `ptsd mount`
/// says what was lost and mounts.
#[test]
fn default_ram_journal_lost_at_reboot_is_discarded_after_saying_so() {
    require_fuse!();
    if !Path::new("/dev/shm").is_dir() {
        eprintln!("SKIP: no /dev/shm");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("mnt");
    let data = tmp.path().join("data");
    std::fs::create_dir(&dir).unwrap();
    let mount = || {
        let out = Command::new(PTSD)
            .arg("mount")
            .arg(&dir)
            .env("PTSD_DATA_DIR", &data)
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    };
    let (ok, text) = mount();
    assert!(ok, "{text}");
    let journal = text
        .split_once("durability: journal ")
        .and_then(|(_, t)| t.split(" [").next())
        .map(PathBuf::from)
        .expect("journal path in the mount message");
    std::fs::write(dir.join("a"), b"hello").unwrap();
    let pid: i32 = std::fs::read_to_string(pid_file(&dir))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // SAFETY: kill has no memory preconditions.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let c = cstr(&dir);
    // SAFETY: valid NUL-terminated path.
    unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    // Bounded: a daemon thread stuck on a request to its own mount once
    // kept a killed daemon alive for good (see `raise_readahead`).
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while Path::new(&format!("/proc/{pid}")).exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the killed daemon {pid} is still there after 60 s: {}",
            std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = std::fs::remove_file(pid_file(&dir));
    std::fs::remove_file(&journal).unwrap(); // what a reboot does to /dev/shm
    let (ok, text) = mount();
    assert!(ok, "the mount must go on without the RAM journal:\n{text}");
    assert!(text.contains("journal missing"), "{text}");
    std::fs::write(dir.join("b"), b"after").unwrap();
    let (ok, text) = ptsd(&[os("umount"), dir.as_os_str()]);
    assert!(ok, "{text}");
    let (ok, text) = ptsd(&[os("fsck"), os("--data-dir"), data.as_os_str()]);
    assert!(ok && text.contains("clean"), "{text}");
    let _ = std::fs::remove_file(&journal);
}

/// Plain `umount` returns while the daemon still checkpoints; a mount of
/// the same image right away waits for it, and the old daemon never
/// deletes the journal the new mount uses: a file fsync'd on the new mount
/// survives its `kill -9`.
#[test]
fn remount_right_after_umount_waits_for_the_old_daemon() {
    require_fuse!();
    let mut m = Mounted::with_args("256M", &["--checkpoint-interval", "0"]);
    // Enough un-checkpointed data that the old daemon's close takes a while.
    let chunk = vec![0x5au8; 1 << 20];
    for i in 0..40 {
        std::fs::write(m.p(&format!("big{i}")), &chunk).unwrap();
    }
    let old = m.child.take().unwrap();
    assert!(Command::new("umount")
        .arg(&m.dir)
        .status()
        .unwrap()
        .success());
    m.mount();
    let mut old = old;
    assert!(old.wait().unwrap().success());
    let new_pid = m.child.as_ref().unwrap().id();
    assert!(
        m.journal.exists(),
        "the old daemon deleted the new mount's journal"
    );
    let fds = std::fs::read_dir(format!("/proc/{new_pid}/fd")).unwrap();
    for fd in fds.flatten() {
        let target = std::fs::read_link(fd.path()).unwrap_or_default();
        assert!(
            !target.to_string_lossy().ends_with("(deleted)"),
            "the new daemon holds a deleted file: {}",
            target.display()
        );
    }
    let mut f = std::fs::File::create(m.p("kept")).unwrap();
    f.write_all(b"fsync'd on the new mount").unwrap();
    f.sync_all().unwrap();
    drop(f);
    m.kill9();
    m.fsck();
    m.mount();
    assert_eq!(
        std::fs::read(m.p("kept")).unwrap(),
        b"fsync'd on the new mount"
    );
    assert_eq!(std::fs::read(m.p("big39")).unwrap(), chunk);
    m.umount();
    m.fsck();
}

/// A block device (a loop device) is held with O_EXCL and flock while
/// mounted: mkfs and fsck --repair are refused, naming the daemon.
#[test]
fn a_mounted_block_device_is_held_exclusively() {
    require_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    let backing = tmp.path().join("loop.img");
    std::fs::File::create(&backing)
        .unwrap()
        .set_len(64 << 20)
        .unwrap();
    let out = Command::new("losetup")
        .args(["-f", "--show"])
        .arg(&backing)
        .output();
    let dev = match out {
        Ok(o) if o.status.success() => PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()),
        _ => {
            eprintln!("SKIP: no loop device (losetup failed)");
            return;
        }
    };
    struct Detach(PathBuf);
    impl Drop for Detach {
        fn drop(&mut self) {
            let _ = Command::new("losetup").arg("-d").arg(&self.0).status();
        }
    }
    let _detach = Detach(dev.clone());
    let (ok, text) = ptsd(&[os("mkfs"), dev.as_os_str()]);
    assert!(ok, "{text}");
    let dir = tmp.path().join("mnt");
    std::fs::create_dir(&dir).unwrap();
    let journal = tmp.path().join("j");
    let (ok, text) = ptsd(&[
        os("mount"),
        os("--device"),
        dev.as_os_str(),
        os("--journal"),
        journal.as_os_str(),
        dir.as_os_str(),
    ]);
    assert!(ok, "{text}");
    let pid: u32 = std::fs::read_to_string(pid_file(&dir))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    std::fs::write(dir.join("a"), b"on a block device").unwrap();
    for args in [
        vec![os("mkfs"), dev.as_os_str()],
        vec![
            os("fsck"),
            dev.as_os_str(),
            os("--journal"),
            journal.as_os_str(),
            os("--repair"),
        ],
    ] {
        let (ok, text) = ptsd(&args);
        assert!(
            !ok && text.contains(&format!("in use by PID {pid}")),
            "{args:?}: {text}"
        );
    }
    let (ok, text) = ptsd(&[os("umount"), dir.as_os_str()]);
    assert!(ok, "{text}");
    let (ok, text) = ptsd(&[os("fsck"), dev.as_os_str()]);
    assert!(ok && text.contains("clean; 1 files"), "{text}");
}

/// Issue 11 §5: SEEK_DATA/SEEK_HOLE find the holes of a sparse file (the
/// kernel's fallback without FUSE_LSEEK calls the whole file data), so
/// `cp --sparse` and friends skip them; unknown xattr namespaces are
/// EOPNOTSUPP as on ext4.
fn sparse_seek_and_xattr_namespaces(t: Transport) {
    require_fuse!();
    require_transport!(t);
    let mut m = Mounted::on(t, "256M", &[]);
    let p = m.p("sparse");
    {
        let f = std::fs::File::create(&p).unwrap();
        f.set_len(1 << 30).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&f, &[1u8; 8192], 64 << 20).unwrap();
        f.sync_all().unwrap();
    }
    let f = std::fs::File::open(&p).unwrap();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&f);
    // SAFETY: lseek on an open descriptor.
    let seek = |off: i64, whence: i32| unsafe { libc::lseek(fd, off, whence) };
    assert_eq!(seek(0, libc::SEEK_DATA), 64 << 20);
    assert_eq!(seek(0, libc::SEEK_HOLE), 0);
    assert_eq!(seek(64 << 20, libc::SEEK_HOLE), (64 << 20) + 8192);
    assert_eq!(seek((64 << 20) + 8192, libc::SEEK_DATA), -1);
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::ENXIO)
    );
    drop(f);
    let copy = m.p("copy");
    sh(&m.dir, "cp --sparse=always sparse copy && cmp sparse copy");
    // Only the written blocks (and no more than a few metadata blocks).
    let blocks = std::fs::metadata(&copy).unwrap().blocks();
    assert!(blocks <= 8192 / 512 + 8, "copy has {blocks} sectors");

    let c = cstr(&p);
    for (name, want) in [("bogus.ns", libc::EOPNOTSUPP), ("user.", libc::EINVAL)] {
        let n = CString::new(name).unwrap();
        // SAFETY: valid NUL-terminated strings and a 1-byte value.
        let r = unsafe { libc::setxattr(c.as_ptr(), n.as_ptr(), b"v".as_ptr().cast(), 1, 0) };
        assert_eq!((r, errno_of(r)), (-1, want), "setxattr {name}");
    }
    let n = CString::new("user.ok").unwrap();
    // SAFETY: as above.
    let r = unsafe { libc::setxattr(c.as_ptr(), n.as_ptr(), b"v".as_ptr().cast(), 1, 0) };
    assert_eq!(r, 0);
    m.umount();
    m.fsck();
}

/// Issue 11 §5: symlink targets up to Linux's 4 095 bytes, across a remount.
fn symlink_targets_up_to_4095_bytes(t: Transport) {
    require_fuse!();
    require_transport!(t);
    let mut m = Mounted::on(t, "64M", &[]);
    let target: String = (0..4095).map(|i| (b'a' + (i % 26) as u8) as char).collect();
    std::os::unix::fs::symlink(&target, m.p("long")).unwrap();
    std::os::unix::fs::symlink(&target[..3953], m.p("mid")).unwrap();
    m.umount();
    m.fsck();
    m.mount();
    assert_eq!(
        std::fs::read_link(m.p("long")).unwrap().as_os_str(),
        target.as_str()
    );
    assert_eq!(
        std::fs::read_link(m.p("mid")).unwrap().as_os_str(),
        &target[..3953]
    );
    assert_eq!(std::fs::symlink_metadata(m.p("long")).unwrap().len(), 4095);
    std::fs::remove_file(m.p("long")).unwrap();
    m.umount();
    m.fsck();
}

on_both_transports!(
    posix_operations_through_std_fs,
    writes_by_others_drop_setuid_setgid_and_capabilities,
    shell_tools_cp_tar_git_rm,
    concurrent_writers_with_fsync,
    fsx_random_operations,
    kill9_during_fsync_workload_then_recover,
    fio_verify_preallocated_random_writes_across_drop_caches_and_remount,
    sparse_seek_and_xattr_namespaces,
    symlink_targets_up_to_4095_bytes,
);

/// O_TMPFILE then linkat, as systemd and databases use them. Over io_uring
/// ptsd's own codec handles FUSE_TMPFILE; fuser 0.18 answers every opcode
/// it does not know with ENOSYS before the file system sees it, so the
/// classic transport says EOPNOTSUPP (the kernel's word after ENOSYS).
fn o_tmpfile_then_linkat(t: Transport) {
    require_fuse!();
    require_transport!(t);
    let mut m = Mounted::on(t, "64M", &[]);
    let dir = cstr(&m.dir);
    // SAFETY: `dir` is a NUL-terminated path; the mode is passed as O_TMPFILE requires.
    let fd = unsafe { libc::open(dir.as_ptr(), libc::O_TMPFILE | libc::O_RDWR, 0o640) };
    if t == Transport::Classic {
        assert_eq!(fd, -1);
        assert_eq!(errno_of(fd), libc::EOPNOTSUPP);
        m.umount();
        return;
    }
    assert!(fd >= 0, "O_TMPFILE: {}", std::io::Error::last_os_error());
    // SAFETY: fd is ours, open; from here the File owns it.
    let mut f = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    f.write_all(b"born nameless").unwrap();
    assert_eq!(f.metadata().unwrap().nlink(), 0);
    // Nothing in the directory yet.
    assert_eq!(std::fs::read_dir(&m.dir).unwrap().count(), 0);
    let proc_path = cstr(Path::new(&format!("/proc/self/fd/{fd}")));
    let named = cstr(&m.p("named"));
    // SAFETY: both paths are NUL-terminated; AT_FDCWD is a valid dirfd.
    let r = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            proc_path.as_ptr(),
            libc::AT_FDCWD,
            named.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    assert_eq!(r, 0, "linkat: {}", std::io::Error::last_os_error());
    drop(f);
    // A second one, never named: freed at its last close.
    // SAFETY: as above.
    let fd2 = unsafe { libc::open(dir.as_ptr(), libc::O_TMPFILE | libc::O_WRONLY, 0o600) };
    assert!(fd2 >= 0);
    // SAFETY: fd2 is ours and open.
    unsafe {
        libc::write(fd2, b"gone".as_ptr().cast(), 4);
        libc::close(fd2);
    }
    m.umount();
    m.fsck();
    m.mount();
    assert_eq!(std::fs::read(m.p("named")).unwrap(), b"born nameless");
    assert_eq!(std::fs::metadata(m.p("named")).unwrap().nlink(), 1);
    assert_eq!(std::fs::read_dir(&m.dir).unwrap().count(), 1);
    m.umount();
    m.fsck();
}

on_both_transports!(o_tmpfile_then_linkat,);

/// The polling mode of the io_uring transport serves the same operations.
#[test]
fn posix_operations_over_uring_polling() {
    posix_operations_through_std_fs(Transport::UringPoll);
}

/// `fstrim` (FITRIM through FUSE's ioctl) discards the free space and
/// leaves the files as they were.
fn fstrim_discards_free_space(t: Transport) {
    require_fuse!();
    require_transport!(t);
    if Command::new("fstrim").arg("--version").output().is_err() {
        eprintln!("SKIP: no fstrim (util-linux)");
        return;
    }
    let mut m = Mounted::on(t, "512M", &[]);
    let keep: Vec<u8> = (0..(8u32 << 20)).map(|i| (i % 253) as u8).collect();
    std::fs::write(m.dir.join("keep"), &keep).unwrap();
    std::fs::write(m.dir.join("gone"), vec![7u8; 16 << 20]).unwrap();
    std::fs::remove_file(m.dir.join("gone")).unwrap();
    let out = Command::new("fstrim")
        .arg("-v")
        .arg(&m.dir)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{said} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // "DIR: 487.5 MiB (511180800 bytes) trimmed": at least what was freed.
    let bytes: u64 = said
        .split('(')
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("fstrim said {said:?}"));
    assert!(bytes >= 16 << 20, "{said}");
    assert_eq!(std::fs::read(m.dir.join("keep")).unwrap(), keep);
    m.umount();
    m.fsck();
}

on_both_transports!(fstrim_discards_free_space,);

/// Write-only opens bypass the page cache (`-o direct_writes`, the
/// default): a reader holding the file open with cached pages sees each
/// write made through another, write-only descriptor, in place and past
/// the end; a new reader too; and mmap through a readable descriptor
/// sees the same bytes.
fn write_only_writers_and_cached_readers_agree(t: Transport) {
    require_fuse!();
    require_transport!(t);
    let mut m = Mounted::on(t, "64M", &[]);
    let f = m.p("shared");
    std::fs::write(&f, vec![b'A'; 8192]).unwrap();
    let reader = std::fs::File::open(&f).unwrap();
    let mut buf = vec![0u8; 8192];
    reader.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(buf, vec![b'A'; 8192], "the reader's pages are cached now");
    let writer = std::fs::OpenOptions::new().write(true).open(&f).unwrap();
    writer.write_all_at(&[b'B'; 4096], 4096).unwrap();
    writer.write_all_at(b"tail", 8192).unwrap();
    let mut want = vec![b'A'; 4096];
    want.extend_from_slice(&[b'B'; 4096]);
    want.extend_from_slice(b"tail");
    let mut got = vec![0u8; want.len()];
    reader.read_exact_at(&mut got, 0).unwrap();
    assert_eq!(got, want, "the cached reader sees the direct writes");
    assert_eq!(reader.metadata().unwrap().len(), 8196);
    assert_eq!(std::fs::read(&f).unwrap(), want);
    // Appends through a write-only descriptor, as logs do.
    let mut log = std::fs::OpenOptions::new().append(true).open(&f).unwrap();
    log.write_all(b"+more").unwrap();
    want.extend_from_slice(b"+more");
    drop((writer, log));
    let mapped = std::fs::File::open(&f).unwrap();
    let len = want.len();
    // SAFETY: a private read-only mapping of a file we hold open, read
    // within its length and unmapped before the file is closed.
    let seen = unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            mapped.as_raw_fd(),
            0,
        );
        assert_ne!(
            p,
            libc::MAP_FAILED,
            "mmap: {}",
            std::io::Error::last_os_error()
        );
        let seen = std::slice::from_raw_parts(p as *const u8, len).to_vec();
        libc::munmap(p, len);
        seen
    };
    assert_eq!(seen, want);
    drop((reader, mapped));
    m.umount();
    m.fsck();
}

on_both_transports!(write_only_writers_and_cached_readers_agree,);

/// Run `script` with `sh -c` as uid/gid 65534 (no capabilities).
fn sh_as_nobody(dir: &Path, script: &str) {
    use std::os::unix::process::CommandExt;
    let out = Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "`{script}` as nobody failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Issue 45 item 4: fallocate of every mode (preallocate, punch hole, zero
/// range) and an O_DIRECT write by an unprivileged user drop setuid and
/// setgid, and the mode the kernel shows (and exec uses) right after, with
/// no cache drop, agrees.
fn fallocate_and_direct_writes_by_others_drop_set_id_bits(t: Transport) {
    require_fuse!();
    require_transport!(t);
    let mut m = Mounted::on(t, "64M", &["--allow-other"]);
    std::fs::set_permissions(m._tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let f = m.p("suid");
    std::fs::write(&f, vec![1u8; 64 << 10]).unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    for cmd in [
        "fallocate -l 128KiB suid",
        "fallocate -n -o 128KiB -l 64KiB suid",
        "fallocate -p -o 4096 -l 8192 suid",
        "fallocate -z -o 16384 -l 8192 suid",
        "dd if=/dev/zero of=suid bs=4096 count=1 oflag=direct conv=notrunc status=none",
    ] {
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o6777)).unwrap();
        assert_eq!(mode(&f), 0o6777);
        sh_as_nobody(&m.dir, cmd);
        assert_eq!(mode(&f), 0o0777, "after `{cmd}` as nobody");
    }
    // Root (CAP_FSETID) keeps them.
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o6777)).unwrap();
    sh(&m.dir, "fallocate -p -o 0 -l 4096 suid");
    assert_eq!(mode(&f), 0o6777);
    m.umount();
    m.fsck();
}

/// Issue 45 item 6: a directory removed, or renamed over, while open:
/// fstat on its descriptor succeeds with nlink 0, and creating in it fails
/// with ENOENT.
fn fstat_of_an_open_removed_directory(t: Transport) {
    require_fuse!();
    require_transport!(t);
    let mut m = Mounted::on(t, "64M", &[]);
    for d in ["gone", "over", "new"] {
        std::fs::create_dir(m.p(d)).unwrap();
    }
    let gone = std::fs::File::open(m.p("gone")).unwrap();
    let over = std::fs::File::open(m.p("over")).unwrap();
    std::fs::remove_dir(m.p("gone")).unwrap();
    std::fs::rename(m.p("new"), m.p("over")).unwrap();
    for (name, f) in [("gone", &gone), ("over", &over)] {
        let st = f
            .metadata()
            .unwrap_or_else(|e| panic!("fstat of {name}: {e}"));
        assert!(st.is_dir());
        assert_eq!(st.nlink(), 0, "{name}");
        let at = CString::new("x").unwrap();
        // SAFETY: a valid directory fd and a NUL-terminated name.
        let r = unsafe { libc::mkdirat(f.as_raw_fd(), at.as_ptr(), 0o755) };
        assert_eq!((r, errno_of(r)), (-1, libc::ENOENT), "mkdir in {name}");
    }
    drop((gone, over));
    m.umount();
    m.fsck();
}

/// `name_to_handle_at` of `p`: the handle's bytes (struct file_handle).
fn handle_of(p: &Path) -> Vec<u8> {
    let c = cstr(p);
    let mut buf = vec![0u8; 8 + 128];
    buf[..4].copy_from_slice(&128u32.to_ne_bytes());
    let mut mount_id = 0i32;
    // SAFETY: buf holds a file_handle with room for 128 bytes of handle.
    let r = unsafe {
        libc::name_to_handle_at(
            libc::AT_FDCWD,
            c.as_ptr(),
            buf.as_mut_ptr().cast(),
            &mut mount_id,
            0,
        )
    };
    assert_eq!(
        r,
        0,
        "name_to_handle_at: {}",
        std::io::Error::last_os_error()
    );
    buf
}

/// `open_by_handle_at` through the mount at `dir`: the file's contents, or
/// the errno.
fn read_by_handle(dir: &Path, handle: &[u8]) -> Result<Vec<u8>, i32> {
    let mnt = std::fs::File::open(dir).unwrap();
    let mut h = handle.to_vec();
    // SAFETY: `h` is a file_handle from name_to_handle_at.
    let fd = unsafe { libc::open_by_handle_at(mnt.as_raw_fd(), h.as_mut_ptr().cast(), 0) };
    if fd < 0 {
        return Err(errno_of(fd));
    }
    // SAFETY: fd is ours, open; the File owns it from here.
    let mut f = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    let mut out = Vec::new();
    f.read_to_end(&mut out).unwrap();
    Ok(out)
}

/// Issue 45 item 8: file handles (NFS export) work after the kernel
/// dropped the inode and across a remount; a deleted file's handle is
/// ESTALE.
fn file_handles_survive_cache_drops_and_remounts(t: Transport) {
    require_fuse!();
    require_transport!(t);
    let mut m = Mounted::on(t, "64M", &[]);
    std::fs::create_dir(m.p("d")).unwrap();
    std::fs::write(m.p("d/f"), b"by handle").unwrap();
    std::fs::write(m.p("d/doomed"), b"x").unwrap();
    let h = handle_of(&m.p("d/f"));
    let doomed = handle_of(&m.p("d/doomed"));
    assert_eq!(read_by_handle(&m.dir, &h).unwrap(), b"by handle");
    drop_caches();
    assert_eq!(read_by_handle(&m.dir, &h).unwrap(), b"by handle");
    std::fs::remove_file(m.p("d/doomed")).unwrap();
    drop_caches();
    assert_eq!(read_by_handle(&m.dir, &doomed), Err(libc::ESTALE));
    m.umount();
    m.mount();
    assert_eq!(read_by_handle(&m.dir, &h).unwrap(), b"by handle");
    m.umount();
    m.fsck();
}

on_both_transports!(
    fallocate_and_direct_writes_by_others_drop_set_id_bits,
    fstat_of_an_open_removed_directory,
    file_handles_survive_cache_drops_and_remounts,
);
