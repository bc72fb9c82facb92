//! Recovery of an image: from the checkpoint after a clean shutdown, or
//! from the OOB entries and mapping pages after a power cut (see the parent
//! module's docs for the rules).

use super::{Entry, ImageError, PersistentStore};
use crate::config::FtlConfig;
use crate::error::FtlError;
use crate::flash::{POOL_DATA, POOL_FREE, POOL_MAP};
use crate::ssd::UNMAPPED;
use crate::store::{NandStoreError, PageKind};
use ptsd_blockdev::le::{get_u32, get_u64};

/// What recovery found, to install into a fresh `Ssd`.
pub(super) struct Recovered {
    pub(super) l2p: Vec<u32>,
    pub(super) gtd: Vec<u32>,
    pub(super) gtd_seq: Vec<u64>,
    /// Per block: pool and write pointer.
    pub(super) pool: Vec<u8>,
    pub(super) wp: Vec<u32>,
    pub(super) erases: Option<Vec<u32>>,
    pub(super) trim_pages: Vec<u32>,
    pub(super) max_seq: u64,
    /// Mapping pages whose flash copy is older than the recovered map.
    pub(super) stale_map_pages: Vec<u32>,
}

/// Read the checkpoint and the mapping pages it names.
pub(super) fn recover_clean(cfg: &FtlConfig, s: &PersistentStore) -> Result<Recovered, FtlError> {
    let g = cfg.geometry();
    let lay = s.lay;
    let ck = s.read_pages(lay.ckpt_first, lay.ckpt_pages)?;
    let m = g.map_pages as usize;
    let blocks = g.total_blocks() as usize;
    let end = 32 + 12 * m + 4 * blocks;
    if get_u64(&ck, 8) != g.map_pages
        || get_u64(&ck, 16) != g.total_blocks()
        || crc32c::crc32c(&ck[..end]) != get_u32(&ck, end)
    {
        return Err(NandStoreError::from(ImageError::CheckpointChecksum).into());
    }
    let seq = get_u64(&ck, 0);
    let gtd: Vec<u32> = (0..m).map(|i| get_u32(&ck, 32 + 4 * i)).collect();
    let gtd_seq: Vec<u64> = (0..m).map(|i| get_u64(&ck, 32 + 4 * m + 8 * i)).collect();
    let erases: Vec<u32> = (0..blocks)
        .map(|i| get_u32(&ck, 32 + 12 * m + 4 * i))
        .collect();
    let mut l2p = vec![UNMAPPED; g.logical_pages as usize];
    let epp = g.entries_per_map_page as usize;
    let mut page = vec![0u8; lay.page];
    for (mpn, &p) in gtd.iter().enumerate() {
        if p == UNMAPPED {
            continue;
        }
        if u64::from(p) >= g.physical_pages {
            return Err(NandStoreError::from(ImageError::CheckpointChecksum).into());
        }
        s.dev
            .read(s.data_block(p), &mut page)
            .map_err(NandStoreError::from)?;
        for i in 0..epp {
            let lpn = mpn * epp + i;
            if lpn < l2p.len() {
                let v = get_u32(&page, 4 * i);
                l2p[lpn] = if u64::from(v) < g.physical_pages {
                    v
                } else {
                    UNMAPPED
                };
            }
        }
    }
    let (pool, wp) = blocks_from_oob(cfg, s, |ppa| s.entry(ppa));
    Ok(Recovered {
        l2p,
        gtd,
        gtd_seq,
        pool,
        wp,
        erases: Some(erases),
        trim_pages: Vec::new(),
        max_seq: seq,
        stale_map_pages: Vec::new(),
    })
}

/// Pool and write pointer of each block from its pages' entries; the kind
/// with the newest entry decides the pool.
fn blocks_from_oob(
    cfg: &FtlConfig,
    _s: &PersistentStore,
    entry: impl Fn(u32) -> Option<Entry>,
) -> (Vec<u8>, Vec<u32>) {
    let g = cfg.geometry();
    let ppb = g.pages_per_block;
    let blocks = g.total_blocks() as usize;
    let mut pool = vec![POOL_FREE; blocks];
    let mut wp = vec![0u32; blocks];
    for b in 0..blocks {
        let mut newest = 0u64;
        for off in 0..ppb {
            let ppa = b as u32 * ppb + off;
            if let Some(e) = entry(ppa) {
                wp[b] = off + 1;
                if e.oob.seq >= newest {
                    newest = e.oob.seq;
                    pool[b] = if e.oob.kind == PageKind::Data {
                        POOL_DATA
                    } else {
                        POOL_MAP
                    };
                }
            }
        }
    }
    (pool, wp)
}

/// Rebuild the map after a power cut (see the module docs).
pub(super) fn recover_after_cut(
    cfg: &FtlConfig,
    s: &PersistentStore,
) -> Result<Recovered, FtlError> {
    let g = cfg.geometry();
    let lay = s.lay;
    let phys = g.physical_pages as u32;
    let epp = g.entries_per_map_page as usize;
    // Verified entries: the OOB entry is intact and matches its page's data.
    let mut verified: Vec<Option<Entry>> = vec![None; phys as usize];
    let mut page = vec![0u8; lay.page];
    for ppa in 0..phys {
        if let Some(e) = s.entry(ppa) {
            s.dev
                .read(s.data_block(ppa), &mut page)
                .map_err(NandStoreError::from)?;
            if crc32c::crc32c(&page) == e.data_crc {
                verified[ppa as usize] = Some(e);
            }
        }
    }
    let (pool, wp) = blocks_from_oob(cfg, s, |ppa| verified[ppa as usize]);
    let ppb = g.pages_per_block;
    let in_own_pool = |ppa: u32, e: &Entry| {
        let p = pool[(ppa / ppb) as usize];
        (e.oob.kind == PageKind::Data) == (p == POOL_DATA)
    };
    let mut max_seq = 0;
    let mut best_data: Vec<(u64, u32)> = vec![(0, UNMAPPED); g.logical_pages as usize];
    let mut best_map: Vec<(u64, u32, u64)> = vec![(0, UNMAPPED, 0); g.map_pages as usize];
    let mut trim_pages = Vec::new();
    for ppa in 0..phys {
        let Some(e) = verified[ppa as usize] else {
            continue;
        };
        max_seq = max_seq.max(e.oob.seq).max(e.oob.aux);
        if !in_own_pool(ppa, &e) {
            continue;
        }
        match e.oob.kind {
            PageKind::Data => {
                if let Some(b) = best_data.get_mut(e.oob.id as usize) {
                    if e.oob.seq > b.0 {
                        *b = (e.oob.seq, ppa);
                    }
                }
            }
            PageKind::Map => {
                if let Some(b) = best_map.get_mut(e.oob.id as usize) {
                    if e.oob.seq > b.0 {
                        *b = (e.oob.seq, ppa, e.oob.aux);
                    }
                }
            }
            PageKind::Trim => trim_pages.push(ppa),
            PageKind::Free => {}
        }
    }
    let data_seq = |p: u32| -> Option<u64> {
        if p >= phys {
            return None;
        }
        verified[p as usize]
            .filter(|e| e.oob.kind == PageKind::Data)
            .map(|e| e.oob.seq)
    };
    // 1. The newest copy of each mapping page, valid as of its `aux`.
    let mut l2p = vec![UNMAPPED; g.logical_pages as usize];
    let mut tseq = vec![0u64; g.map_pages as usize];
    let mut stale = vec![false; g.map_pages as usize];
    for (mpn, &(_, p, asof)) in best_map.iter().enumerate() {
        if p == UNMAPPED {
            continue;
        }
        tseq[mpn] = asof;
        s.dev
            .read(s.data_block(p), &mut page)
            .map_err(NandStoreError::from)?;
        for i in 0..epp {
            let lpn = mpn * epp + i;
            if lpn >= l2p.len() {
                break;
            }
            let v = get_u32(&page, 4 * i);
            if v == UNMAPPED {
                continue;
            }
            let ok = data_seq(v).is_some_and(|sq| sq <= asof)
                && verified[v as usize].is_some_and(|e| e.oob.id as usize == lpn);
            if ok {
                l2p[lpn] = v;
            } else {
                // Its page is gone: a later write or discard replaced it.
                stale[mpn] = true;
            }
        }
    }
    // 2. Newer data pages override.
    for (lpn, &(sq, p)) in best_data.iter().enumerate() {
        if p != UNMAPPED && sq > tseq[lpn / epp] {
            l2p[lpn] = p;
            stale[lpn / epp] = true;
        }
    }
    // 3. Newer discards override older data.
    for &tp in &trim_pages {
        s.dev
            .read(s.data_block(tp), &mut page)
            .map_err(NandStoreError::from)?;
        let n = (get_u64(&page, 0) as usize).min((lay.page - 8) / 16);
        for k in 0..n {
            let at = 8 + 16 * k;
            let (first, count, sq) = (
                get_u32(&page, at),
                get_u32(&page, at + 4),
                get_u64(&page, at + 8),
            );
            for lpn in u64::from(first)..(u64::from(first) + u64::from(count)).min(g.logical_pages)
            {
                let lpn = lpn as usize;
                if sq <= tseq[lpn / epp] {
                    continue;
                }
                let cur = l2p[lpn];
                if cur != UNMAPPED && data_seq(cur).is_some_and(|d| d < sq) {
                    l2p[lpn] = UNMAPPED;
                    stale[lpn / epp] = true;
                }
            }
        }
    }
    let gtd = best_map.iter().map(|&(_, p, _)| p).collect();
    let gtd_seq = best_map.iter().map(|&(_, _, a)| a).collect();
    let stale_map_pages = stale
        .iter()
        .enumerate()
        .filter(|(_, &st)| st)
        .map(|(m, _)| m as u32)
        .collect();
    Ok(Recovered {
        l2p,
        gtd,
        gtd_seq,
        pool,
        wp,
        erases: None,
        trim_pages,
        max_seq,
        stale_map_pages,
    })
}
