//! Model digest: a hash of every completion (id, op, submit, dispatch and
//! done times) and of the counters after each phase of a fixed seeded
//! workload, per variant. A speed change to the engine must leave every
//! digest as it was (it changes how fast, not what, is simulated).
//!
//! `cargo run --release -p ptsd-ftl --example digest -- [GiB] [variant...]`
//! (default: 1 GiB, all five variants, then the adaptive PTSD variants and
//! DFTL with cost-benefit GC: `part-adaptive`, `writeopt-adaptive`,
//! `dftl-cb`).

use ptsd_ftl::{FtlConfig, GcPolicy, SchemeConfig, Ssd, Variant};
use rand::rngs::SmallRng;
use rand::SeedableRng;

/// FNV-1a over 64-bit words: stable across runs and toolchains.
struct Fnv(u64);

impl Fnv {
    fn word(&mut self, x: u64) {
        for b in x.to_le_bytes() {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x100_0000_01b3);
        }
    }
    fn bytes(&mut self, s: &[u8]) {
        for &b in s {
            self.word(u64::from(b));
        }
    }
}

#[path = "../benches/common/mod.rs"]
mod common;

/// Closed loop at queue depth 128: `read_pct` % reads, sequential LPNs
/// (wrapping) or uniform random ones; every completion goes into `h`.
fn run(
    ssd: &mut Ssd,
    rng: &mut SmallRng,
    h: &mut Fnv,
    requests: u64,
    read_pct: u32,
    sequential: bool,
) {
    let pages = ssd.logical_pages();
    let make = |id: u64| common::one_page(rng, id, read_pct, pages, sequential.then(|| id % pages));
    common::closed_loop(ssd, 128, requests, make, |d| {
        let c = d.completion;
        h.word(c.id);
        h.word(c.op as u64);
        h.word(c.submit_ns);
        h.word(c.dispatch_ns);
        h.word(c.done_ns);
        h.word(u64::from(d.failed));
    });
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let gib: u64 = args.get(1).map_or(1, |s| s.parse().unwrap());
    let names: Vec<String> = if args.len() > 2 {
        args[2..].to_vec()
    } else {
        [
            "page",
            "dftl",
            "part",
            "part-sched",
            "writeopt",
            "part-adaptive",
            "writeopt-adaptive",
            "dftl-cb",
        ]
        .map(String::from)
        .to_vec()
    };
    for name in names {
        let (cfg, label) = config(&name, gib << 30);
        let mut ssd = Ssd::new(cfg).unwrap();
        let mut rng = SmallRng::seed_from_u64(7);
        let pages = ssd.logical_pages();
        let mut all = Fnv(0xcbf2_9ce4_8422_2325);
        let mut line = String::new();
        for (name, n, pct, seq) in [
            ("fill", pages, 0, true),
            ("randwrite", pages, 0, false),
            ("mixed70r", pages / 2, 70, false),
            ("randread", pages / 4, 100, false),
        ] {
            let mut h = Fnv(0xcbf2_9ce4_8422_2325);
            run(&mut ssd, &mut rng, &mut h, n, pct, seq);
            ssd.refresh_stats();
            h.bytes(serde_json::to_string(ssd.stats()).unwrap().as_bytes());
            ssd.reset_stats();
            all.word(h.0);
            line += &format!(" {name}={:016x}", h.0);
        }
        if gib <= 2 {
            ssd.check_invariants().unwrap();
        }
        println!("{label:<10} {gib} GiB all={:016x}{line}", all.0);
    }
}

/// A paper variant by name, or one of the extra built-ins (adaptive PTSD,
/// cost-benefit GC), and its label.
fn config(name: &str, bytes: u64) -> (FtlConfig, String) {
    let adaptive = |v: Variant| {
        let mut cfg = FtlConfig::paper(v, bytes);
        if let SchemeConfig::Ptsd { adaptive, .. } = &mut cfg.scheme {
            *adaptive = true;
        }
        cfg
    };
    match name {
        "part-adaptive" => (adaptive(Variant::Part), "PART-ADAPT".into()),
        "writeopt-adaptive" => (adaptive(Variant::WriteOpt), "WO-ADAPT".into()),
        "dftl-cb" => {
            let mut cfg = FtlConfig::paper(Variant::Dftl, bytes);
            cfg.gc.policy = GcPolicy::CostBenefit;
            (cfg, "DFTL-CB".into())
        }
        v => {
            let v: Variant = v.parse().unwrap();
            (FtlConfig::paper(v, bytes), v.name().into())
        }
    }
}
