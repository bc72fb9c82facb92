//! Engine counters ([`FtlStats`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Mapping-page operations split by what caused them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ByCause {
    /// While serving a host read (a CMT miss; for DFTL also its write-backs).
    pub host_read: u64,
    /// While serving host writes (buffer flushes) and discards.
    pub host_write: u64,
    /// GC updating the mapping of the pages it moved.
    pub gc: u64,
    /// Host flush / checkpoint (persistence of discards and dirty pages).
    pub checkpoint: u64,
}

impl ByCause {
    pub fn total(&self) -> u64 {
        self.host_read + self.host_write + self.gc + self.checkpoint
    }
}

/// What the SSD did, counted since creation or the last
/// [`reset_stats`](crate::Ssd::reset_stats). Erase-count figures are over
/// the device's life.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FtlStats {
    pub host_read_pages: u64,
    pub host_write_pages: u64,
    pub host_discard_pages: u64,
    pub host_flushes: u64,
    /// Host reads served from the write buffer.
    pub buffer_read_hits: u64,
    /// Host data pages read from flash.
    pub flash_data_reads: u64,
    /// Host data pages programmed (buffer flushes).
    pub flash_data_programs: u64,
    pub map_reads: ByCause,
    pub map_programs: ByCause,
    pub cmt_read_hits: u64,
    pub cmt_read_misses: u64,
    pub cmt_write_hits: u64,
    pub cmt_write_misses: u64,
    /// Flash programs (of any kind, GC copies included) issued by host
    /// reads themselves (DFTL's write-backs of dirty mapping pages on a
    /// read miss, and GC those set off at the free-block floor). PTSD keeps
    /// this at zero.
    pub programs_issued_by_reads: u64,
    /// Flash reads of host reads (data or mapping pages) that found their
    /// chip busy with a program or an erase (host, mapping or GC) and
    /// waited for it; and their total wait, in ns.
    pub reads_behind_writes: u64,
    pub read_wait_behind_writes_ns: u64,
    pub buffer_flushes: u64,
    /// Times the read-priority scheduler set `write_stop`.
    pub write_stops: u64,
    pub gc_data_runs: u64,
    /// Times a chip reached the free-block floor and finished its GC ahead
    /// of host I/O.
    pub gc_urgent: u64,
    pub gc_map_runs: u64,
    pub gc_data_copies: u64,
    pub gc_map_copies: u64,
    pub erases: u64,
    /// Pages of discard records programmed (persistent store only).
    pub trim_pages: u64,
    pub max_erase_count: u32,
    pub mean_erase_count: f64,
    /// All flash programs / host pages written.
    pub waf: f64,
    /// Modelled mapping DRAM in use now.
    pub map_memory_bytes: u64,
    /// PTSD: share of the cache budget the clean region has now.
    pub clean_share: f64,
    /// A mapping scheme's own counters
    /// ([`MappingScheme::counters`](crate::mapping::MappingScheme::counters)),
    /// by name; empty (and absent from the JSON) for the built-ins.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub scheme: BTreeMap<String, u64>,
}

impl FtlStats {
    /// Every flash program: data, GC copies, mapping and trim pages.
    pub fn flash_programs(&self) -> u64 {
        self.flash_data_programs
            + self.gc_data_copies
            + self.gc_map_copies
            + self.map_programs.total()
            + self.trim_pages
    }

    pub(crate) fn refresh_waf(&mut self) {
        self.waf = if self.host_write_pages == 0 {
            0.0
        } else {
            self.flash_programs() as f64 / self.host_write_pages as f64
        };
    }
}
