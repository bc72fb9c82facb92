//! Shared by the integration tests: the tiny device they all drive hard.

use ptsd_ftl::{FtlConfig, GcPolicy, SchedulerKind, SchemeConfig, StoreKind};

/// Page size of [`small`] devices.
pub const PAGE: usize = 512;

/// A tiny device: 4 chips, 8-page blocks, 512 B pages, 320 logical pages in
/// 3 mapping pages, a 4-page write buffer and a mapping-cache budget of the
/// GTD plus 2 pages (1 clean + 1 dirty): plenty of GC and cache misses.
pub fn small(scheme: SchemeConfig, scheduler: SchedulerKind, policy: GcPolicy) -> FtlConfig {
    let mut cfg = FtlConfig {
        page_size: PAGE as u32,
        channels: 2,
        chips_per_channel: 2,
        blocks_per_chip: 24,
        pages_per_block: 8,
        logical_bytes: Some(320 * PAGE as u64),
        scheme,
        scheduler,
        store: StoreKind::Memory,
        write_buffer_pages: 4,
        ..FtlConfig::default()
    };
    cfg.gc.policy = policy;
    cfg.op_ratio = 0.1;
    cfg.map_memory_bytes = match scheme {
        SchemeConfig::Page => None,
        _ => Some(3 * 4 + 2 * PAGE as u64),
    };
    cfg
}
