//! glibc malloc settings for a process that serves a mount.

/// Allocations below this come from malloc's arenas instead of an `mmap`
/// of their own.
pub const MMAP_THRESHOLD: usize = 4 << 20;
/// Free memory at the top of an arena kept before it is given back.
pub const TRIM_THRESHOLD: usize = 32 << 20;

/// Keep freed memory for reuse instead of returning it to the kernel at
/// once: allocations up to [`MMAP_THRESHOLD`] come from malloc's arenas, and
/// an arena keeps up to [`TRIM_THRESHOLD`] free at its top.
///
/// The stack allocates and frees buffers of 128 KiB to a few MiB at a
/// steady rate (the emulated SSD's staged programs, handed to the image's
/// writer thread and freed there). With glibc's defaults each comes from a
/// fresh `mmap` or a trimmed arena, so every page of it is faulted in and
/// zeroed again: measured with `op_cost creates`, that was 15-20 % of the
/// process's CPU per small file. The `ptsd` binary calls this first thing;
/// an embedder serving a mount may too. Call it early: it shapes only the
/// allocations made after it.
/// Returns false where it does nothing (not glibc, or refused).
///
/// ```
/// let tuned = ptsd_stack::tune_malloc();
/// assert_eq!(tuned, cfg!(all(target_os = "linux", target_env = "gnu")));
/// ```
pub fn tune_malloc() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let set = |param, value: usize| {
            let value = libc::c_int::try_from(value).unwrap_or(libc::c_int::MAX);
            // SAFETY: mallopt only changes malloc's tuning parameters; it
            // takes no pointers and is safe to call at any time.
            unsafe { libc::mallopt(param, value) == 1 }
        };
        set(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD) & set(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}
