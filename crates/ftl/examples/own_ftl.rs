//! The minimal custom FTL of the README's "Write your own FTL": DFTL with
//! FIFO replacement instead of LRU, checked by the conformance kit and
//! simulated beside the built-in DFTL.
//!
//! `cargo run --release -p ptsd-ftl --example own_ftl`

use std::collections::VecDeque;
use std::sync::Arc;

use ptsd_ftl::conformance::Kit;
use ptsd_ftl::mapping::{MapAction, MapGeometry, MappingScheme, SchemeFactory};
use ptsd_ftl::sim::Simulator;
use ptsd_ftl::workload::{precondition, WorkloadSpec};
use ptsd_ftl::{FtlConfig, Ssd, Variant};

/// Whole mapping pages cached, evicted first in, first out.
#[derive(Debug)]
struct FifoDftl;

#[derive(Clone)]
struct Fifo {
    /// Per mapping page: 0 not cached, 1 clean, 2 dirty.
    state: Vec<u8>,
    order: VecDeque<u32>,
    cap: usize,
    gtd_bytes: u64,
    page_bytes: u64,
}

impl Fifo {
    fn access(&mut self, mpn: u32, dirty: bool, acts: &mut Vec<MapAction>) -> bool {
        let s = &mut self.state[mpn as usize];
        if *s != 0 {
            *s = (*s).max(1 + u8::from(dirty));
            return true;
        }
        // Miss: make room (writing back a dirty victim), then read the page.
        while self.order.len() >= self.cap {
            let Some(v) = self.order.pop_front() else {
                break;
            };
            if self.state[v as usize] == 2 {
                acts.push(MapAction::WriteBack {
                    mpn: v,
                    read_first: false,
                });
            }
            self.state[v as usize] = 0;
        }
        acts.push(MapAction::Load(mpn));
        self.state[mpn as usize] = 1 + u8::from(dirty);
        self.order.push_back(mpn);
        false
    }
}

impl MappingScheme for Fifo {
    fn read(&mut self, _lpn: u32, mpn: u32, acts: &mut Vec<MapAction>) -> bool {
        self.access(mpn, false, acts)
    }
    fn write(&mut self, _lpn: u32, mpn: u32, acts: &mut Vec<MapAction>) -> bool {
        self.access(mpn, true, acts)
    }
    fn gc_update(&mut self, mpn: u32, _lpns: &[u32], acts: &mut Vec<MapAction>) {
        match self.state[mpn as usize] {
            0 => acts.push(MapAction::WriteBack {
                mpn,
                read_first: true,
            }),
            _ => self.state[mpn as usize] = 2,
        }
    }
    fn write_back_all(&mut self, acts: &mut Vec<MapAction>) {
        for (mpn, s) in self.state.iter_mut().enumerate() {
            if *s == 2 {
                acts.push(MapAction::WriteBack {
                    mpn: mpn as u32,
                    read_first: false,
                });
                *s = 1;
            }
        }
    }
    fn memory_bytes(&self) -> u64 {
        self.gtd_bytes + self.order.len() as u64 * self.page_bytes
    }
    fn clone_box(&self) -> Box<dyn MappingScheme> {
        Box::new(self.clone())
    }
}

impl SchemeFactory for FifoDftl {
    fn name(&self) -> String {
        "fifo-dftl".into()
    }
    fn check(&self, g: &MapGeometry) -> Result<(), ptsd_ftl::ConfigError> {
        let needed = g.gtd_bytes() + u64::from(g.page_size);
        if g.budget_bytes < needed {
            return Err(ptsd_ftl::ConfigError::Scheme {
                scheme: self.name(),
                reason: format!("needs at least {needed} B of mapping memory"),
            });
        }
        Ok(())
    }
    fn build(&self, g: &MapGeometry) -> Box<dyn MappingScheme> {
        let page_bytes = u64::from(g.page_size);
        Box::new(Fifo {
            state: vec![0; g.map_pages as usize],
            order: VecDeque::new(),
            cap: ((g.budget_bytes - g.gtd_bytes()) / page_bytes) as usize,
            gtd_bytes: g.gtd_bytes(),
            page_bytes,
        })
    }
}

fn main() {
    // 1. The conformance kit (what the scheme's test calls).
    let report = Kit::new(Arc::new(FifoDftl)).check();
    println!("conformance kit: passed {report:?}");

    // 2. The simulator, beside the built-in DFTL (same device, same budget).
    let bytes = 256 << 20;
    for cfg in [
        FtlConfig::paper(Variant::Dftl, bytes),
        FtlConfig::paper_with(Arc::new(FifoDftl), bytes),
    ] {
        let name = cfg.scheme_name();
        let pages = cfg.logical_pages();
        let mut sim = Simulator::new(Ssd::new(cfg).expect("a valid configuration"));
        let [fill, randwrite] = precondition(pages, 1.0, 1);
        let mixed = WorkloadSpec::mixed(pages, 70, pages / 4, 2);
        for (phase, spec) in [("fill", fill), ("randwrite", randwrite), ("mixed70", mixed)] {
            let mut w = spec.build().expect("a valid workload");
            let r = sim
                .run_closed(phase, &mut w, 128)
                .expect("the simulation runs");
            if phase == "mixed70" {
                println!(
                    "{name:<10} mixed70: {:>7.0} IOPS, read p99 {:>6.0} us, map reads {}, map programs {}",
                    r.throughput.iops,
                    r.read.p99_us,
                    r.device.map_reads.total(),
                    r.device.map_programs.total()
                );
            }
        }
    }
}
