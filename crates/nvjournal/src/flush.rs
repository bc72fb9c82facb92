//! Cache-line write-back primitives, chosen once at run time from CPUID.
//!
//! Stable Rust has no `clwb`/`clflushopt` intrinsics, so they are emitted
//! with inline assembly; the assembler accepts them whatever the compile-time
//! target features are, and we only execute them after CPUID says the CPU
//! has them.

use std::sync::OnceLock;

/// Bytes per cache line: the unit of write-back and of crash atomicity.
pub const CACHE_LINE: usize = 64;

/// Which instruction writes a dirty cache line back to memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushInstr {
    /// `clwb`: write back, keep the line cached (best).
    Clwb,
    /// `clflushopt`: write back and invalidate, weakly ordered.
    ClflushOpt,
    /// `clflush`: write back and invalidate, strongly ordered (slowest).
    Clflush,
    /// Not an x86-64 CPU: only a memory fence is issued.
    FenceOnly,
}

impl std::fmt::Display for FlushInstr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FlushInstr::Clwb => "clwb",
            FlushInstr::ClflushOpt => "clflushopt",
            FlushInstr::Clflush => "clflush",
            FlushInstr::FenceOnly => "fence-only",
        })
    }
}

/// The flush instruction this CPU supports (detected once).
pub fn flush_instr() -> FlushInstr {
    static CHOICE: OnceLock<FlushInstr> = OnceLock::new();
    *CHOICE.get_or_init(detect)
}

#[cfg(target_arch = "x86_64")]
fn detect() -> FlushInstr {
    // `__cpuid` became a safe fn in newer Rust; keep the block for 1.85.
    #[allow(unused_unsafe)]
    // SAFETY: `cpuid` exists on every x86-64 CPU; leaf 7 is only read when
    // the maximum basic leaf (leaf 0, eax) is at least 7.
    let leaf7_ebx = unsafe {
        if std::arch::x86_64::__cpuid(0).eax >= 7 {
            std::arch::x86_64::__cpuid_count(7, 0).ebx
        } else {
            0
        }
    };
    if leaf7_ebx & (1 << 24) != 0 {
        FlushInstr::Clwb
    } else if leaf7_ebx & (1 << 23) != 0 {
        FlushInstr::ClflushOpt
    } else {
        FlushInstr::Clflush
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn detect() -> FlushInstr {
    FlushInstr::FenceOnly
}

/// Write back every cache line overlapping `[ptr, ptr + len)`.
///
/// # Safety
/// `ptr..ptr + len` must lie inside one live mapping of this process.
#[inline]
pub unsafe fn flush_range(ptr: *const u8, len: usize) {
    if len == 0 {
        return;
    }
    let start = (ptr as usize) & !(CACHE_LINE - 1);
    let end = ptr as usize + len;
    let instr = flush_instr();
    let mut line = start;
    while line < end {
        // SAFETY: the caller guarantees the range is mapped; the rounded-down
        // line start is in the same page as `ptr`, hence mapped too.
        unsafe { flush_line(instr, line as *const u8) };
        line += CACHE_LINE;
    }
}

#[cfg(target_arch = "x86_64")]
#[inline]
unsafe fn flush_line(instr: FlushInstr, p: *const u8) {
    // SAFETY: `p` is a mapped address (caller); these instructions only write
    // back / invalidate the line and never fault on a mapped address. CPUID
    // said the chosen instruction exists.
    unsafe {
        match instr {
            FlushInstr::Clwb => {
                std::arch::asm!("clwb [{0}]", in(reg) p, options(nostack, preserves_flags))
            }
            FlushInstr::ClflushOpt => {
                std::arch::asm!("clflushopt [{0}]", in(reg) p, options(nostack, preserves_flags))
            }
            FlushInstr::Clflush | FlushInstr::FenceOnly => std::arch::x86_64::_mm_clflush(p),
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline]
unsafe fn flush_line(_instr: FlushInstr, _p: *const u8) {}

/// Order every earlier write-back before later stores (`sfence`).
#[inline]
pub fn store_fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `sfence` has no preconditions.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
    #[cfg(not(target_arch = "x86_64"))]
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
}
