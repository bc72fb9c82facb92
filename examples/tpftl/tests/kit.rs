//! TPFTL through the conformance kit, as any external scheme would be.

use std::sync::Arc;

use ptsd_example_tpftl::Tpftl;
use ptsd_ftl::conformance::Kit;
use ptsd_ftl::policy::{CostBenefit, ReadPriority};

#[test]
fn tpftl_passes_the_kit() {
    let r = Kit::new(Arc::new(Tpftl::default())).check();
    assert!(
        r.gc_runs > 0 && r.map_reads > 0 && r.map_programs > 0,
        "{r:?}"
    );
}

#[test]
fn tpftl_passes_the_kit_with_a_roomier_cache_read_priority_and_cost_benefit_gc() {
    Kit::new(Arc::new(Tpftl::default()))
        .map_budget(12 + 600)
        .scheduler(Arc::new(ReadPriority))
        .gc_policy(Arc::new(CostBenefit))
        .cases(4)
        .check();
}

#[test]
fn every_ablation_passes_the_kit() {
    for (prefetch, clean_first, request_prefetch) in [
        (false, true, true),
        (true, false, true),
        (true, true, false),
        (false, false, false),
    ] {
        Kit::new(Arc::new(Tpftl {
            prefetch,
            clean_first,
            request_prefetch,
        }))
        .cases(3)
        .check();
    }
}
