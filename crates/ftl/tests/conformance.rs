//! The conformance kit on every built-in scheme, GC policy and scheduler:
//! what an external scheme's test runs (see `ptsd_ftl::conformance`).

use std::sync::Arc;

use ptsd_ftl::conformance::{Check, Kit};
use ptsd_ftl::mapping::{MapAction, MapGeometry, MappingScheme, SchemeFactory};
use ptsd_ftl::policy::{CostBenefit, ReadPriority};
use ptsd_ftl::SchemeConfig;

fn ptsd(entry_dirty: bool, adaptive: bool) -> SchemeConfig {
    SchemeConfig::Ptsd {
        clean_ratio: 0.5,
        entry_dirty,
        adaptive,
    }
}

#[test]
fn page_ftl_passes_the_kit() {
    let r = Kit::new(Arc::new(SchemeConfig::Page))
        .full_map_budget()
        .cases(3)
        .check();
    assert!(r.gc_runs > 0);
    assert_eq!(r.map_reads, 0);
}

#[test]
fn dftl_passes_the_kit_with_either_gc_policy() {
    for cb in [false, true] {
        let mut kit = Kit::new(Arc::new(SchemeConfig::Dftl)).cases(3);
        if cb {
            kit = kit.gc_policy(Arc::new(CostBenefit));
        }
        let r = kit.check();
        assert!(
            r.gc_runs > 0 && r.map_reads > 0 && r.map_programs > 0,
            "{r:?}"
        );
        assert!(r.cuts > 0, "{r:?}");
    }
}

#[test]
fn ptsd_variants_pass_the_kit_with_either_scheduler() {
    for (entry, adaptive, rp) in [
        (false, false, false),
        (false, false, true),
        (true, false, true),
        (true, true, false),
        (false, true, true),
    ] {
        let mut kit = Kit::new(Arc::new(ptsd(entry, adaptive))).cases(2);
        if rp {
            kit = kit.scheduler(Arc::new(ReadPriority));
        }
        let r = kit.check();
        assert!(r.gc_runs > 0 && r.map_reads > 0, "{r:?}");
    }
}

/// A scheme that models more DRAM than its budget: the kit must catch it,
/// and name a seed that replays the failure.
#[derive(Debug)]
struct HogFactory;

#[derive(Clone)]
struct Hog(u64);

impl MappingScheme for Hog {
    fn read(&mut self, _: u32, _: u32, _: &mut Vec<MapAction>) -> bool {
        true
    }
    fn write(&mut self, _: u32, _: u32, _: &mut Vec<MapAction>) -> bool {
        self.0 += 8;
        true
    }
    fn gc_update(&mut self, _: u32, _: &[u32], _: &mut Vec<MapAction>) {}
    fn write_back_all(&mut self, _: &mut Vec<MapAction>) {}
    fn memory_bytes(&self) -> u64 {
        self.0
    }
    fn clone_box(&self) -> Box<dyn MappingScheme> {
        Box::new(self.clone())
    }
}

impl SchemeFactory for HogFactory {
    fn name(&self) -> String {
        "hog".into()
    }
    fn build(&self, _: &MapGeometry) -> Box<dyn MappingScheme> {
        Box::new(Hog(0))
    }
}

#[test]
fn the_kit_catches_a_scheme_over_its_budget_and_names_a_replayable_seed() {
    let f = Kit::new(Arc::new(HogFactory)).cases(1).run().unwrap_err();
    assert_eq!(f.check, Check::Oracle);
    assert!(f.message.contains("over its"), "{}", f.message);
    assert!(f.to_string().contains(&format!("PTSD_KIT_SEED={}", f.seed)));
    let again = Kit::new(Arc::new(HogFactory))
        .seed(f.seed)
        .run()
        .unwrap_err();
    assert_eq!((again.seed, again.message), (f.seed, f.message));
}

/// A scheme whose budget check refuses the device: a clear error, no panic.
#[derive(Debug)]
struct Picky;

impl SchemeFactory for Picky {
    fn name(&self) -> String {
        "picky".into()
    }
    fn check(&self, g: &MapGeometry) -> Result<(), ptsd_ftl::ConfigError> {
        Err(ptsd_ftl::ConfigError::Scheme {
            scheme: self.name(),
            reason: format!("{} B is not enough", g.budget_bytes),
        })
    }
    fn build(&self, _: &MapGeometry) -> Box<dyn MappingScheme> {
        Box::new(Hog(0))
    }
}

#[test]
fn a_refused_budget_is_a_device_failure() {
    let f = Kit::new(Arc::new(Picky)).run().unwrap_err();
    assert_eq!(f.check, Check::Device);
    assert!(f.message.contains("1036 B is not enough"), "{}", f.message);
}
