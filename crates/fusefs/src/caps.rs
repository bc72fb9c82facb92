//! Whether a FUSE caller holds CAP_FSETID, which decides if its write,
//! truncate or fallocate keeps a file's setuid/setgid bits. The kernel
//! says so itself on WRITE (`FUSE_WRITE_KILL_SUIDGID`) and SETATTR
//! (`FATTR_KILL_SUIDGID`), but not on FALLOCATE: there the request's pid
//! is all a daemon has.

/// `CAP_FSETID`'s bit in a capability set.
const CAP_FSETID: u32 = 4;

/// True if process `pid` (a FUSE request's pid) lacks CAP_FSETID in its
/// effective set, read from `/proc/PID/status`. When that cannot be read
/// (the process is gone, or the pid is 0 for a kernel-internal request),
/// falls back to "not uid 0", which is what the capability means for an
/// ordinary process.
///
/// ```
/// // This test process: root in the CI sandbox has CAP_FSETID.
/// let me = std::process::id();
/// let uid = unsafe { libc::geteuid() };
/// assert_eq!(ptsd_fs::caps::lacks_fsetid(me, uid), !ptsd_fs::caps::has_cap_in_status(
///     &std::fs::read_to_string("/proc/self/status").unwrap(), 4).unwrap_or(uid == 0));
/// ```
pub fn lacks_fsetid(pid: u32, uid: u32) -> bool {
    let status = if pid == 0 {
        None
    } else {
        std::fs::read_to_string(format!("/proc/{pid}/status")).ok()
    };
    match status.and_then(|s| has_cap_in_status(&s, CAP_FSETID)) {
        Some(has) => !has,
        None => uid != 0,
    }
}

/// Whether the `CapEff:` line of a `/proc/PID/status` text has
/// capability `cap`; `None` if there is no such line or it does not parse.
///
/// ```
/// use ptsd_fs::caps::has_cap_in_status;
/// assert_eq!(has_cap_in_status("Name:\tsh\nCapEff:\t0000000000000010\n", 4), Some(true));
/// assert_eq!(has_cap_in_status("CapEff:\t0000000000000000\n", 4), Some(false));
/// assert_eq!(has_cap_in_status("Name:\tsh\n", 4), None);
/// ```
pub fn has_cap_in_status(status: &str, cap: u32) -> Option<bool> {
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))?
        .trim();
    let set = u64::from_str_radix(hex, 16).ok()?;
    Some(set & (1u64 << cap) != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_process_falls_back_to_the_uid() {
        // pid 0 is never a process; u32::MAX is above pid_max.
        assert!(lacks_fsetid(0, 1000));
        assert!(!lacks_fsetid(0, 0));
        assert!(lacks_fsetid(u32::MAX, 1000));
        assert!(!lacks_fsetid(u32::MAX, 0));
        assert_eq!(has_cap_in_status("CapEff:\tzz\n", 4), None);
    }
}
