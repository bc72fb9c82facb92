//! `ptsd sim --zoned`: a zoned workload on the zoned SSD, or (`--compare`)
//! the conventional SSD against the zoned one under a host log-structured
//! layer on the same workload.

use std::path::Path;

use anyhow::{bail, Context, Result};
use ptsd_bench::zns::{compare, ZnsOptions};
use ptsd_ftl::zoned::{ZonedConfig, ZonedPhase, ZonedRunner, ZonedSsd, ZonedWorkload};
use ptsd_ftl::{FtlConfig, StoreKind};

use crate::sim::{print_outputs, print_report};

/// What `ptsd sim --zoned` was asked (from the `sim` options).
pub struct ZonedArgs<'a> {
    pub compare: bool,
    pub workload: &'a str,
    pub size: u64,
    pub op: f64,
    pub qd: u32,
    pub request_pages: u32,
    pub requests: Option<u64>,
    pub seed: u64,
    pub channels: Option<u32>,
    pub chips: Option<u32>,
    pub pages_per_block: Option<u32>,
    pub stripe: u32,
    pub zone_capacity: Option<u64>,
    pub max_open: u32,
    pub max_active: u32,
    pub mixed_reads: u8,
    pub out: &'a Path,
    pub json: bool,
}

pub fn run(a: &ZonedArgs<'_>) -> Result<()> {
    if a.compare {
        return run_compare(a);
    }
    let kind: ZonedWorkload = a.workload.parse().map_err(anyhow::Error::msg)?;
    let cfg = zoned_config(a)?;
    let dev = ZonedSsd::new(cfg).context("zoned SSD")?;
    let pages = dev.logical_pages();
    let requests = a
        .requests
        .unwrap_or((pages / 4 / u64::from(a.request_pages.max(1))).max(1));
    let mut runner = ZonedRunner::new(dev, a.seed);
    let phase = runner
        .run(a.workload, kind, a.qd, a.request_pages, requests)
        .context("zoned simulation")?;
    let d = runner.device();
    let mut table = format!(
        "zoned SSD: {} zones of {} pages (capacity {}), {} chip groups, max open/active {}/{}\n\n",
        d.zone_count(),
        d.zone_pages(),
        d.zone_capacity(),
        d.chip_groups(),
        a.max_open,
        a.max_active,
    );
    table.push_str(&phase_table(&phase));
    let json = if a.json {
        Some(serde_json::to_string_pretty(&phase)?)
    } else {
        None
    };
    print_outputs(&table, json)
}

/// The zoned device: the default board (with the geometry options), as
/// many blocks per chip as `--size` needs, no over-provisioning.
fn zoned_config(a: &ZonedArgs<'_>) -> Result<ZonedConfig> {
    let mut nand = FtlConfig::default();
    if let Some(c) = a.channels {
        nand.channels = c;
    }
    if let Some(c) = a.chips {
        nand.chips_per_channel = c;
    }
    if let Some(p) = a.pages_per_block {
        nand.pages_per_block = p;
    }
    nand.store = StoreKind::None;
    let mut cfg = ZonedConfig {
        nand,
        stripe_chips: a.stripe,
        zone_capacity_pages: a.zone_capacity,
        max_open_zones: a.max_open,
        max_active_zones: a.max_active,
        ..ZonedConfig::default()
    };
    let chips = u64::from(cfg.nand.channels) * u64::from(cfg.nand.chips_per_channel);
    let per_block_row = chips * u64::from(cfg.nand.pages_per_block) * u64::from(cfg.nand.page_size);
    if per_block_row == 0 {
        bail!("channels, chips and pages per block must be positive");
    }
    cfg.nand.blocks_per_chip = u32::try_from(a.size.div_ceil(per_block_row).max(1))
        .context("--size is too large for this board")?;
    cfg.validate().context("invalid zoned SSD configuration")?;
    Ok(cfg)
}

fn phase_table(p: &ZonedPhase) -> String {
    let mut out = format!(
        "{:<12} {:>4} {:>6} {:>9} {:>9} {:>8} {:>11} {:>11} {:>10} {:>10} {:>12} {:>7} {:>7}\n",
        "workload",
        "qd",
        "pages",
        "requests",
        "IOPS",
        "MB/s",
        "wr p50 us",
        "wr p99 us",
        "rd p50 us",
        "rd p99 us",
        "reset avg us",
        "erases",
        "WAF"
    );
    out.push_str(&format!(
        "{:<12} {:>4} {:>6} {:>9} {:>9.0} {:>8.1} {:>11.0} {:>11.0} {:>10.0} {:>10.0} {:>12.0} {:>7} {:>7.2}\n",
        p.name,
        p.qd,
        p.pages_per_request,
        p.requests,
        p.iops,
        p.mb_per_s,
        p.write.p50_us,
        p.write.p99_us,
        p.read.p50_us,
        p.read.p99_us,
        p.reset.mean_us,
        p.device.erases,
        p.device.waf,
    ));
    if matches!(p.workload, ZonedWorkload::Append { .. }) {
        out.push_str(&format!(
            "appends placed at {} distinct pages of {} appended\n",
            p.distinct_append_pages, p.device.append_pages
        ));
    }
    out
}

fn run_compare(a: &ZonedArgs<'_>) -> Result<()> {
    let opts = ZnsOptions {
        logical_bytes: a.size,
        op: a.op,
        qd: a.qd,
        read_percent: a.mixed_reads,
        seed: a.seed,
        channels: a.channels,
        chips_per_channel: a.chips,
        pages_per_block: a.pages_per_block,
        stripe_chips: a.stripe,
        ..ZnsOptions::default()
    };
    let report = compare(&opts).context("conventional vs zoned comparison")?;
    let files = report.write_outputs(a.out)?;
    print_report(report.table(), &files, &report, a.json)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(workload: &str) -> ZonedArgs<'_> {
        ZonedArgs {
            compare: false,
            workload,
            size: 64 << 20,
            op: 0.2,
            qd: 8,
            request_pages: 1,
            requests: Some(500),
            seed: 1,
            channels: Some(2),
            chips: Some(2),
            pages_per_block: Some(64),
            stripe: 2,
            zone_capacity: Some(100),
            max_open: 4,
            max_active: 6,
            mixed_reads: 70,
            out: Path::new("/nonexistent"),
            json: false,
        }
    }

    #[test]
    fn the_zoned_device_is_sized_and_shaped_by_the_options() {
        let cfg = zoned_config(&args("seqwrite")).unwrap();
        // 64 MiB over 4 chips of 64-page blocks: 64 blocks per chip.
        assert_eq!(cfg.nand.blocks_per_chip, 64);
        assert_eq!(cfg.zone_pages(), 128);
        assert_eq!(cfg.zones(), 128);
        let mut bad = args("seqwrite");
        bad.stripe = 3;
        assert!(zoned_config(&bad).is_err());
        assert!(
            run(&args("append:9")).is_err(),
            "9 zones at once exceed 6 active"
        );
        assert!(run(&args("sideways")).is_err());
        run(&args("append:2")).unwrap();
    }
}
