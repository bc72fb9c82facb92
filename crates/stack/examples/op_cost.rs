//! What one file-system operation costs on the default stack (emulated SSD,
//! journal file), in-process: no FUSE, no kernel, so the figure is ptsd's
//! own share of a FUSE benchmark's time.
//!
//! ```text
//! cargo run --release -p ptsd-stack --example op_cost -- creates DIR [FILES]
//! cargo run --release -p ptsd-stack --example op_cost -- cold-read DIR [MIB]
//! ```
//!
//! `creates`: the tokubench-like file (lookup, create, one 4 KiB write,
//! getattr, release; 1000 per directory), timed per call, with the blocks
//! and transactions each file journals and the process CPU per file
//! (every thread: the checkpointers' and the image writer's work included,
//! measured after a settle pause so the background catches up).
//! `cold-read`: writes a file of MIB MiB, remounts, and reads it back in
//! 1 MiB calls four times, each after dropping the page cache (root only),
//! printing throughput and process CPU per MiB; `THREADS=N` writes N files
//! of MIB/N MiB at once and reads them back at once, as the FUSE bench's
//! threads do. DIR is the data directory
//! (a fresh one gives a fresh SSD image); the journal is
//! `/dev/shm/op_cost-PID.journal`, removed by the clean close. `FILL=F` sets the
//! journal's checkpoint fill level (`JournalConfig::checkpoint_fill`),
//! `JMIB=N` its size in MiB, for experiments. Malloc is tuned as the `ptsd`
//! binary tunes it (`ptsd_stack::tune_malloc`); `MALLOC=default` keeps
//! glibc's defaults, to compare. `COALESCE=0` stages every transaction's
//! blocks at once instead of once per commit window
//! (`StackSpec::coalesce`), to compare; `creates` ends with one fsync (as
//! tokubench ends with a syncfs), so every window is counted.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ptsd_fs::Caller;
use ptsd_stack::{DeviceSpec, JournalSpec, Stack, StackSpec};

const ROOT: Caller = Caller { uid: 0, gid: 0 };

/// CPU seconds of every thread of this process so far.
fn process_cpu() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for clock_gettime to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

fn spec(dir: &Path, journal: &Path) -> StackSpec {
    let mut s = StackSpec::new(
        DeviceSpec::DataDir(dir.to_path_buf()),
        JournalSpec::File(journal.to_path_buf()),
    );
    if let Some(f) = std::env::var("FILL").ok().and_then(|v| v.parse().ok()) {
        s.journal_config.checkpoint_fill = f;
    }
    if let Some(m) = std::env::var("JMIB")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        s.journal_bytes = m << 20;
    }
    if std::env::var("COALESCE").is_ok_and(|v| v == "0") {
        s.coalesce = false;
    }
    s
}

fn creates(dir: &Path, journal: &Path, files: u64) {
    let stack = Stack::open(spec(dir, journal)).expect("opening the stack");
    let fs = stack.fs().clone();
    let top = fs
        .mkdir(
            fs.root(),
            format!("op_cost-{}", std::process::id()).as_bytes(),
            0o755,
            ROOT,
        )
        .expect("mkdir")
        .ino;
    let data = vec![0x5a_u8; 4096];
    let mut spent = [Duration::ZERO; 5];
    let mut parent = top;
    let (mut slowest, mut stalls, mut stalled) = (Duration::ZERO, Duration::ZERO, 0u64);
    let stats0 = stack.store().journal().stats();
    let (cpu0, wall0) = (process_cpu(), Instant::now());
    for i in 0..files {
        if i % 1000 == 0 {
            parent = fs
                .mkdir(top, format!("d{:05}", i / 1000).as_bytes(), 0o755, ROOT)
                .expect("mkdir")
                .ino;
        }
        let name = format!("f{:04}", i % 1000);
        let began = Instant::now();
        let mut lap = began;
        let mut step = |k: usize| {
            let now = Instant::now();
            spent[k] += now - lap;
            lap = now;
        };
        let _ = fs.lookup(parent, name.as_bytes());
        step(0);
        let a = fs
            .create(parent, name.as_bytes(), 0o644, ROOT)
            .expect("create");
        step(1);
        fs.write(a.ino, 0, &data).expect("write");
        step(2);
        fs.getattr(a.ino).expect("getattr");
        step(3);
        fs.release(a.ino).expect("release");
        step(4);
        let took = began.elapsed();
        slowest = slowest.max(took);
        if took >= Duration::from_millis(1) {
            stalls += took;
            stalled += 1;
        }
    }
    fs.fsync().expect("fsync");
    let wall = wall0.elapsed();
    std::thread::sleep(Duration::from_millis(1500));
    let cpu = process_cpu() - cpu0;
    // After the settle: its checkpoints count (nothing is staged meanwhile).
    let st = stack.store().journal().stats();
    let per = |d: Duration| d.as_secs_f64() * 1e6 / files as f64;
    println!(
        "{files} files in {:.2} s: {:.1} us per file in the calling thread \
         (lookup {:.1}, create {:.1}, write {:.1}, getattr {:.1}, release {:.1})",
        wall.as_secs_f64(),
        per(wall),
        per(spent[0]),
        per(spent[1]),
        per(spent[2]),
        per(spent[3]),
        per(spent[4]),
    );
    println!(
        "process CPU {:.1} us per file (all threads, 1.5 s settle included); \
         {:.2} blocks in {:.2} transactions journaled per file",
        cpu * 1e6 / files as f64,
        (st.staged_blocks - stats0.staged_blocks) as f64 / files as f64,
        (st.finished_txs - stats0.finished_txs) as f64 / files as f64,
    );
    println!(
        "{stalled} files took 1 ms or more, {:.0} ms in all ({:.1} % of the time); slowest {:.1} ms",
        stalls.as_secs_f64() * 1e3,
        stalls.as_secs_f64() * 100.0 / wall.as_secs_f64(),
        slowest.as_secs_f64() * 1e3,
    );
    println!(
        "journal: {} checkpoints, {:.2} blocks checkpointed per file, {} stage waits for ring space",
        st.checkpoints - stats0.checkpoints,
        (st.checkpointed_blocks - stats0.checkpointed_blocks) as f64 / files as f64,
        st.backpressure_waits - stats0.backpressure_waits,
    );
    drop(fs);
    stack.close().expect("closing the stack");
}

fn cold_read(dir: &Path, journal: &Path, mib: u64) {
    let threads: u64 = std::env::var("THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1u64)
        .clamp(1, 64);
    let per_thread = (mib / threads).max(1);
    let names: Vec<String> = (0..threads)
        .map(|t| format!("op_cost-{}-{t}", std::process::id()))
        .collect();
    {
        let stack = Stack::open(spec(dir, journal)).expect("opening the stack");
        let fs = stack.fs().clone();
        std::thread::scope(|s| {
            for name in &names {
                let fs = fs.clone();
                s.spawn(move || {
                    let a = fs
                        .create(fs.root(), name.as_bytes(), 0o644, ROOT)
                        .expect("create");
                    let chunk = vec![0x5a_u8; 1 << 20];
                    for i in 0..per_thread {
                        fs.write(a.ino, i << 20, &chunk).expect("write");
                    }
                    fs.release(a.ino).expect("release");
                });
            }
        });
        fs.fsync().expect("fsync");
        drop(fs);
        stack.close().expect("closing the stack");
    }
    let stack = Stack::open(spec(dir, journal)).expect("reopening the stack");
    let fs = stack.fs().clone();
    let inos: Vec<u64> = names
        .iter()
        .map(|n| fs.lookup(fs.root(), n.as_bytes()).expect("lookup").ino)
        .collect();
    let total = per_thread * threads;
    for _ in 0..4 {
        if let Err(e) = std::fs::write("/proc/sys/vm/drop_caches", "3") {
            println!("(page cache not dropped: {e}; the reads are not cold)");
        }
        let (cpu0, wall0) = (process_cpu(), Instant::now());
        std::thread::scope(|s| {
            for &ino in &inos {
                let fs = fs.clone();
                s.spawn(move || {
                    for i in 0..per_thread {
                        let got = fs.read(ino, i << 20, 1 << 20).expect("read");
                        assert_eq!(got.len(), 1 << 20, "short read at MiB {i}");
                    }
                });
            }
        });
        let wall = wall0.elapsed().as_secs_f64();
        let cpu = process_cpu() - cpu0;
        println!(
            "cold read {:.0} MB/s ({threads} threads), process CPU {:.0} us per MiB ({cpu:.2} s in {wall:.2} s)",
            (total << 20) as f64 / wall / 1e6,
            cpu * 1e6 / total as f64,
        );
    }
    for name in &names {
        fs.unlink(fs.root(), name.as_bytes()).expect("unlink");
    }
    drop(fs);
    stack.close().expect("closing the stack");
}

fn main() {
    if std::env::var("MALLOC").as_deref() != Ok("default") {
        ptsd_stack::tune_malloc();
    }
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: op_cost creates DIR [FILES] | op_cost cold-read DIR [MIB]";
    let (Some(mode), Some(dir)) = (args.get(1), args.get(2)) else {
        eprintln!("{usage}");
        std::process::exit(2);
    };
    let dir = PathBuf::from(dir);
    std::fs::create_dir_all(&dir).expect("creating DIR");
    let journal = PathBuf::from(format!("/dev/shm/op_cost-{}.journal", std::process::id()));
    let n = |default: u64| args.get(3).map_or(default, |s| s.parse().expect("a count"));
    match mode.as_str() {
        "creates" => creates(&dir, &journal, n(200_000)),
        "cold-read" => cold_read(&dir, &journal, n(512)),
        _ => {
            eprintln!("{usage}");
            std::process::exit(2);
        }
    }
}
