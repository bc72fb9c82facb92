//! Issue 45's remaining rules, against Linux itself where it decides:
//! atime under each mount option, remounts reaching the daemon, set-gid
//! on create, chmod and ACL changes by a non-member (a differential test
//! against tmpfs: the same system calls, the same unprivileged callers).

use super::*;

const NOBODY: u32 = 65534;
/// A group `nobody` is not in (unless a test adds it).
const OTHER_GID: u32 = 4242;

fn atime_of(p: &Path) -> (i64, i64) {
    let m = std::fs::metadata(p).unwrap();
    (m.atime(), m.atime_nsec())
}

/// Read `p` through a cold page cache, so the READ reaches the daemon.
fn read_cold(p: &Path) {
    drop_caches();
    std::fs::read(p).unwrap();
}

/// Set `p`'s atime `secs` seconds back (its ctime moves to now).
fn age_atime(p: &Path, secs: i64) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let times = [
        libc::timespec {
            tv_sec: now - secs,
            tv_nsec: 0,
        },
        libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
    ];
    let c = cstr(p);
    // SAFETY: NUL-terminated path, two valid timespecs.
    let r = unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), times.as_ptr(), 0) };
    assert_eq!(r, 0, "utimensat: {}", std::io::Error::last_os_error());
}

/// `ptsd mount -o OPTS DIR` on a mounted DIR (a remount), then time for
/// the daemon's mountinfo watcher to apply it (it wakes at once; the
/// margin is for a loaded machine).
fn remount(dir: &Path, opts: &str) {
    let st = Command::new(PTSD)
        .args(["mount", "-o", opts])
        .arg(dir)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success(), "ptsd mount -o {opts}");
    std::thread::sleep(Duration::from_secs(1));
}

/// Issue 45 item 4 (and item 1's remount reaching the core): a READ
/// moves the atime as the mount says: `relatime` (the default) once
/// after a change, not again; `strictatime` every time; `noatime`
/// never; read-only never. `remount,…` changes it on a mounted fs.
fn atime_follows_the_mount_options_and_remounts(t: Transport) {
    require_fuse!();
    require_transport!(t);
    let mut m = Mounted::on(t, "64M", &[]);
    let f = m.p("f");
    std::fs::write(&f, b"data").unwrap();
    age_atime(&f, 2 * 86400);
    let aged = atime_of(&f);
    read_cold(&f);
    let a1 = atime_of(&f);
    assert!(a1 > aged, "relatime: an atime older than ctime moves");
    read_cold(&f);
    assert_eq!(atime_of(&f), a1, "relatime: then it stays");
    remount(&m.dir, "remount,strictatime");
    read_cold(&f);
    let a2 = atime_of(&f);
    assert!(a2 > a1, "strictatime after a remount: every read");
    remount(&m.dir, "remount,noatime");
    age_atime(&f, 2 * 86400);
    let aged = atime_of(&f);
    read_cold(&f);
    assert_eq!(atime_of(&f), aged, "noatime: never");
    // Read-only reached the core: a read there leaves the atime even
    // under strictatime (seen once the mount is writable again).
    remount(&m.dir, "remount,strictatime");
    age_atime(&f, 2 * 86400);
    let aged = atime_of(&f);
    remount(&m.dir, "remount,ro,strictatime");
    read_cold(&f);
    remount(&m.dir, "remount,rw,strictatime");
    drop_caches();
    assert_eq!(atime_of(&f), aged, "no atime update while read-only");
    read_cold(&f);
    assert!(atime_of(&f) > aged, "read-write again: updated");
    // A directory listing moves the directory's atime.
    let d = m.p("d");
    std::fs::create_dir(&d).unwrap();
    age_atime(&d, 2 * 86400);
    let aged = atime_of(&d);
    drop_caches();
    std::fs::read_dir(&d).unwrap().for_each(drop);
    assert!(atime_of(&d) > aged, "readdir under strictatime");
    m.umount();
    m.fsck();
    // Mounted with noatime and nodiratime from the start.
    m.extra
        .extend(["-o", "noatime,nodiratime"].map(String::from));
    m.mount();
    age_atime(&f, 2 * 86400);
    let aged = atime_of(&f);
    read_cold(&f);
    assert_eq!(atime_of(&f), aged, "mounted noatime");
    m.umount();
    m.fsck();
}

/// The numbers each differential case gives: (mode & 07777, gid), or a
/// negative errno in both.
const CASES: [&str; 12] = [
    "open(O_CREAT, 02755)",
    "open(O_CREAT, 02745)",
    "mkdir(02755)",
    "mknod(S_IFIFO | 02755)",
    "open(O_TMPFILE, 02755)",
    "create 0755 then fchmod(02755)",
    "chmod(02755) of nobody's file in group 4242",
    "setxattr(system.posix_acl_access) of a 02775 file",
    "open(O_CREAT, 02755) under umask 010",
    "open(O_TMPFILE, 02755) under umask 010",
    "mknod(S_IFSOCK | 02755)",
    "fchmod(02755) then fchown(-1, 4242) of an own file",
];
/// `sgacl`: setgid, group 4242, with a default ACL whose mask drops
/// group execute (xfstests generic/696's shape).
const DIRS: [&str; 4] = ["sg", "sgm", "plain", "sgacl"];
const N: usize = DIRS.len() * CASES.len() * 2;

/// Under `base` (as root): `sg` (setgid, group 4242), `sgm` (setgid,
/// group nobody), `plain` (group 4242), all 0777; in each `r` (nobody's,
/// group 4242, 0755) and `acl` (nobody's, the directory's group, 02775).
fn setgid_fixture(base: &Path) {
    use std::os::unix::fs::chown;
    for (d, gid, mode) in [
        ("sg", OTHER_GID, 0o2777),
        ("sgm", NOBODY, 0o2777),
        ("plain", OTHER_GID, 0o777),
        ("sgacl", OTHER_GID, 0o2777),
    ] {
        let name = d;
        let d = base.join(d);
        std::fs::create_dir(&d).unwrap();
        chown(&d, Some(0), Some(gid)).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(mode)).unwrap();
        if name == "sgacl" {
            let acl = acl_value(&[
                (0x01, 7, u32::MAX),
                (0x04, 6, u32::MAX),
                (0x10, 6, u32::MAX),
                (0x20, 7, u32::MAX),
            ]);
            set_xattr(&d, "system.posix_acl_default", &acl).unwrap();
        }
        for (f, fgid, fmode) in [("r", OTHER_GID, 0o755), ("acl", gid, 0o2775)] {
            let f = d.join(f);
            std::fs::write(&f, b"").unwrap();
            chown(&f, Some(NOBODY), Some(fgid)).unwrap();
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(fmode)).unwrap();
        }
    }
}

/// Runs every case as `nobody` with supplementary `groups` under `base`
/// (made by [`setgid_fixture`]). The child forks from a process with
/// other threads, so it only makes system calls on what was prepared.
fn setgid_cases(base: &Path, groups: &[u32]) -> [i64; N] {
    let paths: Vec<[CString; 12]> = DIRS
        .iter()
        .map(|d| {
            let d = base.join(d);
            ["", "f", "n", "d", "p", "c", "r", "acl", ".", "u", "s", "o"].map(|n| cstr(&d.join(n)))
        })
        .collect();
    let acl = acl_value(&[
        (0x01, 7, u32::MAX),
        (0x02, 5, 1234),
        (0x04, 7, u32::MAX),
        (0x10, 7, u32::MAX),
        (0x20, 5, u32::MAX),
    ]);
    let mut fds = [0i32; 2];
    // SAFETY: `fds` is a two-element array for pipe to fill.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: the child below only makes system calls (no allocation, no
    // lock) and leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        let mut out = [0i64; N];
        // SAFETY: plain system calls on buffers prepared before the fork.
        unsafe {
            let ok = libc::setgroups(groups.len(), groups.as_ptr()) == 0
                && libc::setresgid(NOBODY, NOBODY, NOBODY) == 0
                && libc::setresuid(NOBODY, NOBODY, NOBODY) == 0;
            if !ok {
                libc::_exit(2);
            }
            libc::umask(0);
            let err = || -i64::from(*libc::__errno_location());
            for (i, p) in paths.iter().enumerate() {
                let mut st: libc::stat = std::mem::zeroed();
                let creat = libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY;
                let mut record = |case: usize, r: i32, st: &libc::stat| {
                    let k = (i * CASES.len() + case) * 2;
                    if r < 0 {
                        out[k] = err();
                        out[k + 1] = out[k];
                    } else {
                        out[k] = i64::from(st.st_mode & 0o7777);
                        out[k + 1] = i64::from(st.st_gid);
                    }
                };
                for (case, name, mode) in [(0, 1, 0o2755), (1, 2, 0o2745)] {
                    let fd = libc::open(p[name].as_ptr(), creat, mode as libc::c_uint);
                    let r = if fd < 0 { fd } else { libc::fstat(fd, &mut st) };
                    record(case, r, &st);
                    libc::close(fd);
                }
                let mut r = libc::mkdir(p[3].as_ptr(), 0o2755);
                if r == 0 {
                    r = libc::stat(p[3].as_ptr(), &mut st);
                }
                record(2, r, &st);
                let mut r = libc::mknod(p[4].as_ptr(), libc::S_IFIFO | 0o2755, 0);
                if r == 0 {
                    r = libc::stat(p[4].as_ptr(), &mut st);
                }
                record(3, r, &st);
                let fd = libc::open(p[8].as_ptr(), libc::O_TMPFILE | libc::O_RDWR, 0o2755);
                let r = if fd < 0 { fd } else { libc::fstat(fd, &mut st) };
                record(4, r, &st);
                libc::close(fd);
                let fd = libc::open(p[5].as_ptr(), creat, 0o755);
                let mut r = if fd < 0 { fd } else { libc::fchmod(fd, 0o2755) };
                if r == 0 {
                    r = libc::fstat(fd, &mut st);
                }
                record(5, r, &st);
                libc::close(fd);
                let mut r = libc::chmod(p[6].as_ptr(), 0o2755);
                if r == 0 {
                    r = libc::stat(p[6].as_ptr(), &mut st);
                }
                record(6, r, &st);
                let mut r = libc::setxattr(
                    p[7].as_ptr(),
                    c"system.posix_acl_access".as_ptr(),
                    acl.as_ptr().cast(),
                    acl.len(),
                    0,
                );
                if r == 0 {
                    r = libc::stat(p[7].as_ptr(), &mut st);
                }
                record(7, r, &st);
                libc::umask(0o010);
                let fd = libc::open(p[9].as_ptr(), creat, 0o2755);
                let r = if fd < 0 { fd } else { libc::fstat(fd, &mut st) };
                record(8, r, &st);
                libc::close(fd);
                let fd = libc::open(p[8].as_ptr(), libc::O_TMPFILE | libc::O_RDWR, 0o2755);
                let r = if fd < 0 { fd } else { libc::fstat(fd, &mut st) };
                record(9, r, &st);
                libc::close(fd);
                libc::umask(0);
                let mut r = libc::mknod(p[10].as_ptr(), libc::S_IFSOCK | 0o2755, 0);
                if r == 0 {
                    r = libc::stat(p[10].as_ptr(), &mut st);
                }
                record(10, r, &st);
                let fd = libc::open(p[11].as_ptr(), creat, 0o755);
                let mut r = if fd < 0 { fd } else { libc::fchmod(fd, 0o2755) };
                if r == 0 {
                    r = libc::fchown(fd, u32::MAX, OTHER_GID);
                }
                if r == 0 {
                    r = libc::fstat(fd, &mut st);
                }
                record(11, r, &st);
                libc::close(fd);
            }
            let n = std::mem::size_of_val(&out);
            let w = libc::write(fds[1], out.as_ptr().cast(), n);
            libc::_exit(if w == n as isize { 0 } else { 3 });
        }
    }
    // SAFETY: our copy of the write end; then reading the child's numbers.
    unsafe { libc::close(fds[1]) };
    // SAFETY: fds[0] is ours alone from here on.
    let mut r = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fds[0]) };
    let mut bytes = Vec::new();
    r.read_to_end(&mut bytes).unwrap();
    let mut status = 0;
    // SAFETY: waiting for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child as nobody failed: status {status:#x}"
    );
    let mut out = [0i64; N];
    for (o, c) in out.iter_mut().zip(bytes.chunks_exact(8)) {
        *o = i64::from_ne_bytes(c.try_into().unwrap());
    }
    out
}

/// `out` as lines `dir: case: mode gid`.
fn describe(out: &[i64; N]) -> Vec<String> {
    let mut v = Vec::new();
    for (i, d) in DIRS.iter().enumerate() {
        for (c, name) in CASES.iter().enumerate() {
            let k = (i * CASES.len() + c) * 2;
            v.push(match out[k] {
                e if e < 0 => format!("{d}: {name}: errno {}", -e),
                mode => format!("{d}: {name}: {mode:o} {}", out[k + 1]),
            });
        }
    }
    v
}

/// Issue 45 items 2 and 3: set-gid on create (open, mknod, mkdir,
/// O_TMPFILE) in setgid and plain directories, chmod g+s, and setting an
/// access ACL, by `nobody` as a member and as a non-member of the group
/// concerned, end exactly as on tmpfs (the kernel's own rules:
/// `inode_init_owner`, `mode_strip_sgid`, `setattr_prepare`,
/// `posix_acl_update_mode`).
fn setgid_rules_match_tmpfs(t: Transport) {
    require_fuse!();
    require_transport!(t);
    let mut m = Mounted::on(t, "64M", &["--allow-other"]);
    std::fs::set_permissions(m._tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    std::fs::set_permissions(shm.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    for (who, groups) in [
        ("non-member", &[NOBODY][..]),
        ("member", &[NOBODY, OTHER_GID][..]),
    ] {
        let (ours, theirs) = (m.p(who), shm.path().join(who));
        for b in [&ours, &theirs] {
            std::fs::create_dir(b).unwrap();
            std::fs::set_permissions(b, std::fs::Permissions::from_mode(0o755)).unwrap();
            setgid_fixture(b);
        }
        let (got, want) = (setgid_cases(&ours, groups), setgid_cases(&theirs, groups));
        let (got, want) = (describe(&got), describe(&want));
        let diff: Vec<String> = got
            .iter()
            .zip(&want)
            .filter(|(g, w)| g != w)
            .map(|(g, w)| format!("ptsd {g}\ntmpfs {w}"))
            .collect();
        assert!(diff.is_empty(), "{who}:\n{}", diff.join("\n"));
        // The rules as Linux states them, so tmpfs itself is checked.
        let line = |d: &str, case: usize| {
            want[DIRS.iter().position(|x| *x == d).unwrap() * CASES.len() + case].clone()
        };
        if who == "non-member" {
            assert!(line("sg", 0).ends_with(": 755 4242"), "{}", line("sg", 0));
            assert!(line("sg", 2).ends_with(": 2755 4242"), "{}", line("sg", 2));
            assert!(line("sg", 6).ends_with(": 755 4242"), "{}", line("sg", 6));
            assert!(line("sg", 7).ends_with(": 775 4242"), "{}", line("sg", 7));
        } else {
            assert!(line("sg", 0).ends_with(": 2755 4242"), "{}", line("sg", 0));
            assert!(line("sg", 7).ends_with(": 2775 4242"), "{}", line("sg", 7));
        }
    }
    m.umount();
    m.fsck();
}

on_both_transports!(
    atime_follows_the_mount_options_and_remounts,
    setgid_rules_match_tmpfs,
);
