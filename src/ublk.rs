// Over 800 lines: the ublk subcommands share the option structs, the daemon fork and the claim kept for the serving process.
//! `ptsd ublk …`: serve a device as `/dev/ublkbN` (crate `ptsd-ublk`).

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use ptsd_blockdev::size::parse_size;
use ptsd_ftl::zoned::{ZonedConfig, ZonedSsd};
use ptsd_ftl::StoreKind;
use ptsd_stack::{Claim, Holder};
use ptsd_ublk::ftl::Timing;
use ptsd_ublk::kernel::{self, DeviceOptions, Started};
use ptsd_ublk::spec::{BackendSpec, DeviceSpec, FtlScheme, FtlStore, Opened};
use ptsd_ublk::{Backend, LockMode, SchedulerKind};
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[derive(Subcommand)]
pub enum UblkCmd {
    /// Create a device, print its /dev/ublkbN path, and serve it.
    Add(AddArgs),
    /// List ublk devices.
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Delete device N (or every device with --all).
    Del {
        id: Option<i32>,
        #[arg(long, conflicts_with = "id")]
        all: bool,
    },
    /// Print device N's latency histograms (per operation, JSON).
    Stats { id: i32 },
    /// Write and read random extents of a block device with O_DIRECT and
    /// check every byte (a small seeded fio --verify of our own).
    Verify(VerifyArgs),
    /// Export device N over NVMe/TCP through the kernel's NVMe target
    /// (nvmet, nvmet-tcp; configured in configfs): other hosts connect with
    /// `nvme connect -t tcp -a ADDR -s PORT -n nqn.2014-08.org.ptsd:ublkbN`.
    Export {
        id: i32,
        /// Listen on ADDR:PORT (e.g. 0.0.0.0:4420, `[::]:4420`, 127.0.0.1:4420).
        #[arg(long, value_name = "ADDR:PORT")]
        nvmet_tcp: ptsd_ublk::nvmet::TcpAddr,
    },
    /// Take down the NVMe/TCP export of device N (its port too, once unused).
    Unexport { id: i32 },
    /// Reattach a new daemon to device N after its daemon died.
    Recover {
        id: i32,
        /// Detach and run in the background once the device is live.
        #[arg(long)]
        daemon: bool,
    },
}

#[derive(Args)]
pub struct AddArgs {
    /// Serve the emulated SSD with this mapping scheme: page, dftl or ptsd
    /// (the default when no --backing/--mem is given).
    #[arg(long, conflicts_with_all = ["backing", "mem"])]
    ftl: Option<FtlScheme>,
    /// Serve a plain RAM disk instead of the emulated SSD.
    #[arg(long)]
    mem: bool,
    /// Device size (e.g. 256MiB, 4GiB; K/M/G/T = powers of 1024, KB/MB/GB = powers of 1000).
    #[arg(long, default_value = "256MiB", value_parser = parse_size)]
    size: u64,
    /// Where the emulated SSD keeps data: none (timing only), mem, or an
    /// image FILE.
    #[arg(long, default_value = "mem")]
    store: String,
    /// off: complete as soon as served; emulate: complete at the NAND
    /// model's time (wall clock).
    #[arg(long, default_value = "off")]
    timing: Timing,
    /// Serve this file or block device instead (loop-style).
    #[arg(long)]
    backing: Option<PathBuf>,
    /// Block size in bytes (the device's logical and physical block).
    #[arg(long, default_value_t = 4096)]
    block_size: u32,
    /// Number of ublk queues (one thread each).
    #[arg(long, default_value_t = 1)]
    queues: u16,
    /// Tags per queue.
    #[arg(long, default_value_t = 128)]
    depth: u16,
    /// Largest single request in bytes.
    #[arg(long, default_value_t = 512 << 10)]
    io_buf_bytes: u32,
    /// Reap completions by polling (the default).
    #[arg(long, overrides_with = "no_poll")]
    poll: bool,
    /// Sleep until completions arrive instead of polling.
    #[arg(long)]
    no_poll: bool,
    /// Request order at the device: fifo or read-priority (default: the
    /// FTL variant's own — FIFO for page/dftl, read priority for ptsd;
    /// read priority for plain devices).
    #[arg(long)]
    sched: Option<SchedulerKind>,
    /// Hand-off between queues and device: swap (one lock per batch) or
    /// per-request.
    #[arg(long, default_value = "swap", value_parser = parse_lock_mode)]
    lock: LockMode,
    /// Serve a host-managed zoned SSD (ZNS): zones written sequentially at
    /// their write pointer, zone append, open/close/finish/reset, zone
    /// report; no device GC. Takes --size, --store and --timing; not
    /// --ftl, --mem, --backing, --sched or --block-size (4 KiB blocks).
    #[arg(long, conflicts_with_all = ["ftl", "mem", "backing"])]
    zoned: bool,
    /// Zone size with --zoned: a power of two of at least one 1 MiB erase
    /// block (--size must be a multiple of it times the chip groups: 4 for
    /// zones of 8 MiB or more).
    #[arg(long, default_value = "8MiB", value_parser = parse_size, requires = "zoned")]
    zone_size: u64,
    /// Writable bytes of each zone with --zoned (default: the zone size; a
    /// shipping ZNS drive's capacity is below its zone size).
    #[arg(long, value_parser = parse_size, requires = "zoned")]
    zone_capacity: Option<u64>,
    /// Most zones open at once with --zoned (0 = no limit).
    #[arg(long, default_value_t = 14, requires = "zoned")]
    max_open: u32,
    /// Most zones open or closed at once with --zoned (0 = no limit).
    #[arg(long, default_value_t = 14, requires = "zoned")]
    max_active: u32,
    /// Device id to ask for (default: the driver picks).
    #[arg(long, default_value_t = -1, allow_negative_numbers = true)]
    id: i32,
    /// Detach and run in the background once the device is live.
    #[arg(long)]
    daemon: bool,
}

fn parse_lock_mode(s: &str) -> Result<LockMode, String> {
    match s {
        "swap" => Ok(LockMode::Swap),
        "per-request" | "mutex" => Ok(LockMode::PerRequest),
        other => Err(format!(
            "unknown lock mode {other:?} (expected swap or per-request)"
        )),
    }
}

pub fn run(cmd: UblkCmd) -> Result<()> {
    match cmd {
        UblkCmd::Add(args) => add(args),
        UblkCmd::List { json } => list(json),
        UblkCmd::Del { id, all } => del(id, all),
        UblkCmd::Stats { id } => {
            let report = kernel::read_stats(id)
                .with_context(|| format!("no stats for device {id} (is it served by ptsd?)"))?;
            outln!("{}", serde_json::to_string_pretty(&report)?);
            Ok(())
        }
        UblkCmd::Recover { id, daemon } => recover(id, daemon),
        UblkCmd::Export { id, nvmet_tcp } => {
            let dev = PathBuf::from(format!("/dev/ublkb{id}"));
            let nvmet = ptsd_ublk::nvmet::Nvmet::system();
            let e = ptsd_ublk::nvmet::export(&nvmet, &format!("ublkb{id}"), &dev, nvmet_tcp)?;
            outln!(
                "{} exported as {} on tcp {} (nvmet port {}); connect: nvme connect -t tcp -a {} -s {} -n {}",
                dev.display(),
                e.nqn,
                e.addr,
                e.port_id,
                e.addr.0.ip(),
                e.addr.0.port(),
                e.nqn
            );
            Ok(())
        }
        UblkCmd::Unexport { id } => {
            let nvmet = ptsd_ublk::nvmet::Nvmet::system();
            ptsd_ublk::nvmet::unexport(&nvmet, &format!("ublkb{id}"))?;
            outln!("/dev/ublkb{id} is no longer exported");
            Ok(())
        }
        UblkCmd::Verify(args) => verify(args),
    }
}

/// `--queues` and `--depth` within what the driver takes (it would
/// silently change other values).
fn check_shape(queues: u16, depth: u16) -> Result<()> {
    let max_q = kernel::max_queues();
    if queues == 0 || queues > max_q {
        bail!(
            "--queues {queues} is out of range: allowed 1..={max_q} (at most one queue per CPU; this machine has {max_q})"
        );
    }
    if depth == 0 || depth > kernel::MAX_DEPTH {
        bail!(
            "--depth {depth} is out of range: allowed 1..={} tags per queue",
            kernel::MAX_DEPTH
        );
    }
    Ok(())
}

fn add(args: AddArgs) -> Result<()> {
    check_shape(args.queues, args.depth)?;
    if args.zoned {
        // The zoned device has no request scheduler (zone writes arrive in
        // order, one per zone at a time) and its block is the NAND page.
        if args.sched.is_some() {
            bail!("--sched does not apply to --zoned (the zoned device serves requests in arrival order)");
        }
        if args.block_size != 4096 {
            bail!(
                "--block-size {} does not apply to --zoned: its block is the 4096-byte NAND page",
                args.block_size
            );
        }
    }
    let backend = match &args.backing {
        Some(path) => BackendSpec::Backing {
            path: std::path::absolute(path)
                .with_context(|| format!("backing file {}", path.display()))?,
            block_size: args.block_size,
        },
        None if args.mem => BackendSpec::Mem {
            bytes: args.size,
            block_size: args.block_size,
        },
        None if args.zoned => BackendSpec::Zoned {
            bytes: args.size,
            zone_bytes: args.zone_size,
            zone_capacity_bytes: args.zone_capacity,
            max_open: args.max_open,
            max_active: args.max_active,
            store: absolute_store(&args.store)?,
            timing: args.timing,
        },
        None => BackendSpec::Ftl {
            scheme: args.ftl.unwrap_or(FtlScheme::Ptsd),
            bytes: args.size,
            store: absolute_store(&args.store)?,
            timing: args.timing,
        },
    };
    let spec = DeviceSpec {
        backend,
        sched: args.sched,
        lock_mode: args.lock,
        poll: !args.no_poll,
    };
    check_image_kind(&spec)?;
    let opts = DeviceOptions {
        id: args.id,
        queues: args.queues,
        depth: args.depth,
        io_buf_bytes: args.io_buf_bytes,
        spec,
    };
    // Fail before forking when there is no driver, with the clear message.
    // The backend is opened (and its image locked) by the process that
    // serves it, after the fork: the lock names the daemon's PID.
    kernel::check_driver()?;
    serve(opts, false, args.daemon)
}

/// `--store`: none, mem, or an image file (made absolute: the daemon
/// runs from `/`).
fn absolute_store(store: &str) -> Result<FtlStore> {
    Ok(match FtlStore::parse(store) {
        FtlStore::File(p) => FtlStore::File(
            std::path::absolute(&p).with_context(|| format!("store file {}", p.display()))?,
        ),
        other => other,
    })
}

fn recover(id: i32, daemon: bool) -> Result<()> {
    // Refuse a live, dead, unknown or RAM-backed device before forking.
    let (spec, info) = kernel::recoverable(id)?;
    let opts = DeviceOptions {
        id,
        queues: info.nr_hw_queues,
        depth: info.queue_depth,
        io_buf_bytes: info.max_io_buf_bytes,
        spec,
    };
    serve(opts, true, daemon)
}

/// How long to wait for another ptsd command to let go of the image or
/// backing device (as `ptsd mount`: a mkfs or fsck finishing); a mount or
/// a ublk daemon serving it is refused at once.
const LOCK_WAIT: Duration = Duration::from_secs(60);

/// Open what `spec` serves through ptsd-stack — the emulated SSD (its image
/// formatted, reopened or recovered) or the backing file or device, locked
/// exclusively for `ptsd ublk` — and build the backend on it. The returned
/// claim must live as long as the device is served.
fn open_backend(spec: &DeviceSpec, wait: Duration) -> Result<(Box<dyn Backend>, Option<Claim>)> {
    let (opened, claim) = match &spec.backend {
        BackendSpec::Mem { .. } => (None, None),
        BackendSpec::Backing { path, block_size } => {
            let (dev, claim) = ptsd_stack::claim_device(path, *block_size, Holder::Ublk, wait)
                .context("backing store")?;
            (Some(Opened::Device(Arc::new(dev))), Some(claim))
        }
        BackendSpec::Ftl { .. } => {
            let cfg = spec
                .ftl_config()
                .context("an FTL device spec without an FTL configuration")?;
            let (ssd, claim) =
                ptsd_stack::claim_ssd(cfg, Holder::Ublk, wait).context("emulated SSD")?;
            (Some(Opened::Ssd(Box::new(ssd))), claim)
        }
        BackendSpec::Zoned { .. } => {
            let cfg = spec
                .zoned_config()
                .context("a zoned device spec without a zoned configuration")?
                .context("zoned SSD")?;
            let (ssd, claim) = claim_zoned(cfg, wait)?;
            (Some(Opened::Zoned(Box::new(ssd))), claim)
        }
    };
    let backend = spec.build_backend(opened).context("backend")?;
    Ok((backend, claim))
}

/// Refuse, before any fork and with a clear message, a zoned shape the
/// kernel would not take and an image of the other kind: a zoned image
/// served as a conventional SSD or the reverse (opening would refuse
/// either, less plainly).
fn check_image_kind(spec: &DeviceSpec) -> Result<()> {
    let (path, zoned) = match &spec.backend {
        BackendSpec::Ftl {
            store: FtlStore::File(path),
            ..
        } => (path, false),
        BackendSpec::Zoned { store, .. } => {
            spec.zoned_config()
                .context("a zoned device spec without a zoned configuration")?
                .context("--zoned")?;
            match store {
                FtlStore::File(path) => (path, true),
                _ => return Ok(()),
            }
        }
        _ => return Ok(()),
    };
    let Some(h) = image_header(path) else {
        return Ok(());
    };
    let is_zoned = ZonedSsd::is_zoned_image(&h);
    if !zoned && is_zoned {
        bail!(
            "{} is a zoned SSD image: serve it with --zoned (and the zone options it was made with)",
            path.display()
        );
    }
    if zoned && !is_zoned && h != [0; 8] {
        bail!(
            "{} is not a zoned SSD image (a conventional ptsd SSD image, or other data): serve a conventional image without --zoned",
            path.display()
        );
    }
    Ok(())
}

/// The first bytes of the image at `path`, if it exists and holds any.
fn image_header(path: &Path) -> Option<[u8; 8]> {
    let mut h = [0u8; 8];
    std::fs::File::open(path).ok()?.read_exact(&mut h).ok()?;
    Some(h)
}

/// Open the zoned SSD `cfg` describes: in memory, or its image (a new one
/// made at its full size) locked through ptsd-stack as a conventional
/// image is, and its write pointers and zone states recovered from it.
fn claim_zoned(cfg: ZonedConfig, wait: Duration) -> Result<(ZonedSsd, Option<Claim>)> {
    let StoreKind::File { path } = &cfg.nand.store else {
        return Ok((ZonedSsd::new(cfg).context("zoned SSD")?, None));
    };
    let path = path.clone();
    let bytes = ZonedSsd::image_bytes(&cfg);
    let empty = std::fs::metadata(&path)
        .map(|m| m.len() == 0)
        .unwrap_or(true);
    if empty {
        // A new image: all zeroes, which opening formats.
        std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .and_then(|f| f.set_len(bytes))
            .with_context(|| format!("creating the zoned SSD image {}", path.display()))?;
    }
    let (dev, claim) = ptsd_stack::claim_device(&path, cfg.nand.page_size, Holder::Ublk, wait)
        .context("zoned SSD image")?;
    let ssd = ZonedSsd::open_on(cfg, Box::new(dev))
        .with_context(|| format!("opening the zoned SSD image {}", path.display()))?;
    Ok((ssd, Some(claim)))
}

static STOP_REQUESTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(_: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    STOP_REQUESTED.store(true, Ordering::SeqCst);
}

/// SIGINT/SIGTERM delete the device cleanly (SIGKILL leaves it for
/// `ptsd ublk recover`).
fn watch_stop_signals(id: i32) {
    // SAFETY: installs a handler that only stores to an atomic.
    unsafe {
        libc::signal(
            libc::SIGINT,
            on_stop_signal as *const () as libc::sighandler_t,
        );
        libc::signal(
            libc::SIGTERM,
            on_stop_signal as *const () as libc::sighandler_t,
        );
    }
    let _ = std::thread::Builder::new()
        .name("ptsd-ublk-signals".into())
        .spawn(move || loop {
            if STOP_REQUESTED.load(Ordering::SeqCst) {
                if let Err(e) = kernel::delete(id) {
                    eoutln!("ptsd ublk: cannot delete device {id}: {e}");
                }
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        });
}

/// Run the device, in the foreground or as a daemon that reports back
/// through a pipe once the device is live.
fn serve(opts: DeviceOptions, recover: bool, daemon: bool) -> Result<()> {
    if let Err(e) = kernel::leave_working_directory() {
        tracing::warn!(error = %e, "cannot chdir to /");
    }
    if !daemon {
        let (backend, claim) = open_backend(&opts.spec, LOCK_WAIT)?;
        let stats = kernel::run(&opts, recover, backend, |s: &Started| {
            outln!("{}", s.bdev);
            let _ = std::io::stdout().flush();
            watch_stop_signals(s.id);
            if !s.recovery {
                eoutln!(
                    "ptsd ublk: the driver has no UBLK_F_USER_RECOVERY; `recover` will not work"
                );
            }
        })?;
        drop(claim);
        outln!("{}", serde_json::to_string_pretty(&stats.report())?);
        return Ok(());
    }

    let mut fds = [0; 2];
    // SAFETY: pipe2 fills the two-element array on success.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error()).context("pipe");
    }
    // SAFETY: both descriptors are fresh and owned from here on.
    let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: the process is still single-threaded here (no thread has been
    // started yet), so the child may keep running ordinary Rust code.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(std::io::Error::last_os_error()).context("fork");
    }
    if pid > 0 {
        drop(wr);
        let mut msg = String::new();
        std::fs::File::from(rd).read_to_string(&mut msg)?;
        return match msg.strip_prefix("ok ") {
            Some(bdev) => {
                outln!("{}", bdev.trim());
                Ok(())
            }
            None if msg.is_empty() => bail!("the ublk daemon exited before the device was live"),
            None => bail!("{}", msg.trim_start_matches("err ").trim()),
        };
    }
    drop(rd);
    // Child: detach from the terminal.
    // SAFETY: setsid has no memory-safety preconditions.
    unsafe { libc::setsid() };
    let log = std::fs::create_dir_all(kernel::RUN_DIR).and_then(|_| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(std::path::Path::new(kernel::RUN_DIR).join("daemon.log"))
    });
    redirect_stdio(log.ok());
    let report = std::sync::Arc::new(std::sync::Mutex::new(Some(std::fs::File::from(wr))));
    let on_started = {
        let report = report.clone();
        move |s: &Started| {
            if let Some(mut f) = report.lock().ok().and_then(|mut g| g.take()) {
                let _ = writeln!(f, "ok {}", s.bdev);
            }
            watch_stop_signals(s.id);
        }
    };
    // The daemon holds the image's lock (named by its PID) until the device
    // is gone.
    let result = open_backend(&opts.spec, LOCK_WAIT).and_then(|(backend, claim)| {
        let stats = kernel::run(&opts, recover, backend, on_started)?;
        drop(claim);
        Ok(stats)
    });
    let code = match result {
        Ok(stats) => {
            eoutln!(
                "{}",
                serde_json::to_string(&stats.report()).unwrap_or_default()
            );
            0
        }
        Err(e) => {
            if let Some(mut f) = report.lock().ok().and_then(|mut g| g.take()) {
                let _ = writeln!(f, "err {e:#}");
            }
            eoutln!("ptsd ublk daemon: {e:#}");
            1
        }
    };
    std::process::exit(code);
}

fn redirect_stdio(log: Option<std::fs::File>) {
    use std::os::fd::AsRawFd;
    let null = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null");
    // SAFETY: dup2 onto the standard descriptors; the sources stay open
    // for the duration of the calls.
    unsafe {
        if let Ok(n) = &null {
            libc::dup2(n.as_raw_fd(), 0);
        }
        let out = log
            .as_ref()
            .map(|f| f.as_raw_fd())
            .or(null.as_ref().ok().map(|n| n.as_raw_fd()));
        if let Some(fd) = out {
            libc::dup2(fd, 1);
            libc::dup2(fd, 2);
        }
    }
}

fn list(json: bool) -> Result<()> {
    let devs = kernel::list()?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&devs)?);
        return Ok(());
    }
    outln!(
        "{:>4} {:<9} {:>12} {:>6} {:>5} {:>8}  backend",
        "id",
        "state",
        "bytes",
        "queues",
        "depth",
        "pid"
    );
    for d in devs {
        let backend = match &d.spec {
            Some(s) => match &s.backend {
                BackendSpec::Mem { .. } => "memory".to_string(),
                BackendSpec::Backing { path, .. } => format!("file {}", path.display()),
                BackendSpec::Ftl {
                    scheme,
                    store,
                    timing,
                    ..
                } => format!("ftl {scheme:?} store {store:?} timing {timing:?}"),
                BackendSpec::Zoned {
                    zone_bytes,
                    store,
                    timing,
                    ..
                } => format!("zoned, zones of {zone_bytes} B, store {store:?} timing {timing:?}"),
            },
            None => "(not ptsd)".to_string(),
        };
        outln!(
            "{:>4} {:<9} {:>12} {:>6} {:>5} {:>8}  {backend}",
            d.id,
            d.state,
            d.bytes,
            d.queues,
            d.depth,
            d.daemon_pid
        );
    }
    Ok(())
}

fn del(id: Option<i32>, all: bool) -> Result<()> {
    let ids: Vec<i32> = match (id, all) {
        (Some(id), false) => vec![id],
        (None, true) => kernel::list()?.into_iter().map(|d| d.id).collect(),
        _ => bail!("give a device id or --all"),
    };
    for id in ids {
        kernel::delete(id)?;
        outln!("deleted /dev/ublkb{id}");
    }
    Ok(())
}

#[derive(Args)]
pub struct VerifyArgs {
    /// The device (or file) to exercise.
    dev: PathBuf,
    /// Random operations (writes and reads of 1–8 blocks).
    #[arg(long, default_value_t = 2000)]
    ops: u64,
    /// PRNG seed (printed on failure).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Bytes of the device to use, from offset 0 (default: all of it).
    #[arg(long, value_parser = parse_size)]
    span: Option<u64>,
    /// Block size of the requests.
    #[arg(long, default_value_t = 4096)]
    bs: usize,
    /// Percentage of operations that write.
    #[arg(long, default_value_t = 50)]
    write_pct: u32,
}

/// A block-sized pattern that names its block, generation and seed, so a
/// misplaced or stale block is detected.
fn fill_pattern(buf: &mut [u8], block: u64, generation: u64, seed: u64) {
    let mut x = block.wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ generation.wrapping_mul(0xC2B2_AE3D_27D4_EB4F)
        ^ seed;
    for chunk in buf.chunks_mut(8) {
        // xorshift64*: cheap and good enough to tell blocks apart.
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        let v = x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
}

/// A buffer aligned for O_DIRECT, carved out of a larger Vec (no unsafe).
struct AlignedBuf {
    raw: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    fn new(len: usize, align: usize) -> Self {
        let raw = vec![0u8; len + align];
        let start = raw.as_ptr().align_offset(align).min(align);
        AlignedBuf { raw, start, len }
    }
    fn get(&mut self, n: usize) -> &mut [u8] {
        &mut self.raw[self.start..self.start + n.min(self.len)]
    }
}

fn percentile(v: &mut [u64], q: f64) -> u64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    v[((v.len() - 1) as f64 * q).round() as usize]
}

fn verify(a: VerifyArgs) -> Result<()> {
    use rand::{Rng, SeedableRng};
    use std::collections::HashMap;
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    use std::time::Instant;

    if a.bs == 0 || a.bs % 512 != 0 {
        bail!("--bs must be a non-zero multiple of 512");
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(&a.dev)
        .with_context(|| format!("open {} with O_DIRECT", a.dev.display()))?;
    let dev_bytes = {
        use std::io::Seek;
        (&file).seek(std::io::SeekFrom::End(0))?
    };
    let span = match &a.span {
        Some(s) => (*s).min(dev_bytes),
        None => dev_bytes,
    };
    let blocks = span / a.bs as u64;
    if blocks < 8 {
        bail!(
            "{} has only {blocks} blocks of {} bytes",
            a.dev.display(),
            a.bs
        );
    }
    let mut rng = rand::rngs::SmallRng::seed_from_u64(a.seed);
    let mut gens: HashMap<u64, u64> = HashMap::new();
    let mut buf = AlignedBuf::new(8 * a.bs, 4096);
    let mut expect = vec![0u8; a.bs];
    let (mut reads, mut writes, mut checked) = (0u64, 0u64, 0u64);
    let (mut read_lat, mut write_lat) = (Vec::new(), Vec::new());
    let mut next_gen = 1u64;
    let fail = |what: String| -> anyhow::Error {
        anyhow::anyhow!("verify FAILED (seed {}): {what}", a.seed)
    };
    for _ in 0..a.ops {
        let n = rng.gen_range(1..=8u64).min(blocks);
        let first = rng.gen_range(0..=blocks - n);
        let bytes = n as usize * a.bs;
        let off = first * a.bs as u64;
        if rng.gen_range(0..100) < a.write_pct {
            let b = buf.get(bytes);
            for i in 0..n {
                gens.insert(first + i, next_gen);
                let chunk = &mut b[i as usize * a.bs..(i as usize + 1) * a.bs];
                fill_pattern(chunk, first + i, next_gen, a.seed);
            }
            next_gen += 1;
            let t = Instant::now();
            file.write_all_at(b, off)
                .map_err(|e| fail(format!("write at {off}: {e}")))?;
            if n == 1 {
                write_lat.push(t.elapsed().as_nanos() as u64);
            }
            writes += 1;
        } else {
            let b = buf.get(bytes);
            let t = Instant::now();
            file.read_exact_at(b, off)
                .map_err(|e| fail(format!("read at {off}: {e}")))?;
            if n == 1 {
                read_lat.push(t.elapsed().as_nanos() as u64);
            }
            reads += 1;
            for i in 0..n {
                if let Some(&g) = gens.get(&(first + i)) {
                    fill_pattern(&mut expect, first + i, g, a.seed);
                    if b[i as usize * a.bs..(i as usize + 1) * a.bs] != expect[..] {
                        return Err(fail(format!(
                            "block {} (generation {g}) reads back wrong",
                            first + i
                        )));
                    }
                    checked += 1;
                }
            }
        }
    }
    file.sync_all().map_err(|e| fail(format!("fsync: {e}")))?;
    // Final pass: every block ever written holds its last generation.
    let mut all: Vec<_> = gens.into_iter().collect();
    all.sort_unstable();
    for (block, g) in all {
        let b = buf.get(a.bs);
        file.read_exact_at(b, block * a.bs as u64)
            .map_err(|e| fail(format!("final read of block {block}: {e}")))?;
        fill_pattern(&mut expect, block, g, a.seed);
        if b[..] != expect[..] {
            return Err(fail(format!(
                "block {block} (generation {g}) lost after fsync"
            )));
        }
        checked += 1;
    }
    outln!(
        "verify ok ops={} writes={writes} reads={reads} blocks_checked={checked} read_p50_us={:.1} read_p99_us={:.1} write_p50_us={:.1} seed={}",
        a.ops,
        percentile(&mut read_lat, 0.5) as f64 / 1e3,
        percentile(&mut read_lat, 0.99) as f64 / 1e3,
        percentile(&mut write_lat, 0.5) as f64 / 1e3,
        a.seed
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        cmd: UblkCmd,
    }

    #[test]
    fn add_and_verify_sizes_use_the_one_syntax() {
        let add = |size: &str| match Cli::try_parse_from(["ublk", "add", "--size", size])?.cmd {
            UblkCmd::Add(a) => Ok::<u64, clap::Error>(a.size),
            _ => unreachable!(),
        };
        assert_eq!(add("4GiB").unwrap(), 4 << 30);
        assert_eq!(add("4G").unwrap(), 4 << 30);
        assert_eq!(add("4GB").unwrap(), 4_000_000_000);
        assert!(add("4 parsecs").is_err());
        match Cli::try_parse_from(["ublk", "verify", "/dev/null", "--span", "64MiB"])
            .unwrap()
            .cmd
        {
            UblkCmd::Verify(v) => assert_eq!(v.span, Some(64 << 20)),
            _ => unreachable!(),
        }
    }

    fn spec(backend: BackendSpec) -> DeviceSpec {
        DeviceSpec {
            backend,
            sched: None,
            lock_mode: LockMode::Swap,
            poll: false,
        }
    }

    fn refused(r: Result<impl Sized>, who: &str, what: &str) {
        match r {
            Ok(_) => panic!("{what}: not refused"),
            Err(e) => {
                let msg = format!("{e:#}");
                let want = format!("in use by PID {} ({who})", std::process::id());
                assert!(msg.contains(&want), "{what}: {msg}");
            }
        }
    }

    /// Issue 44 §2, the host half: `ptsd ublk add/recover` opens its image
    /// through ptsd-stack under the mount's lock. A mounted image is refused
    /// to ublk (as a backing file and as an SSD image), and an image ublk
    /// serves is refused to mount, mkfs, fsck (--repair) and a second ublk,
    /// each naming the holder; once ublk lets go, all is well again.
    #[test]
    fn ublk_and_the_file_system_commands_refuse_each_others_images() {
        use ptsd_stack::{fsck, mkfs, JournalSpec, MissingJournal, Stack, StackSpec};
        let tmp = tempfile::tempdir().unwrap();
        let img = tmp.path().join("fs.img");
        let fs_dev = ptsd_stack::DeviceSpec::Path(img.clone());
        mkfs(&fs_dev, Some(64 << 20), Duration::ZERO).unwrap();
        let mut fs_spec = StackSpec::new(fs_dev.clone(), JournalSpec::File(tmp.path().join("j")));
        fs_spec.journal_bytes = 8 << 20;
        fs_spec.lock_wait = Duration::ZERO;
        fs_spec.missing_journal = MissingJournal::Refuse;
        let backing = spec(BackendSpec::Backing {
            path: img.clone(),
            block_size: 4096,
        });
        let ftl_on = |path: &std::path::Path| {
            spec(BackendSpec::Ftl {
                scheme: FtlScheme::Ptsd,
                bytes: 16 << 20,
                store: FtlStore::File(path.to_path_buf()),
                timing: Timing::Off,
            })
        };

        // mount, then ublk.
        let stack = Stack::open(fs_spec.clone()).unwrap();
        refused(
            open_backend(&backing, Duration::ZERO),
            "ptsd mount",
            "mount + ublk --backing",
        );
        refused(
            open_backend(&ftl_on(&img), Duration::ZERO),
            "ptsd mount",
            "mount + ublk --store",
        );
        stack.close().unwrap();

        // ublk, then mount, mkfs, fsck --repair, fsck, ublk.
        let (backend, claim) = open_backend(&backing, Duration::ZERO).unwrap();
        assert_eq!(backend.num_blocks(), (64 << 20) / 4096);
        let stack_err = Stack::open(fs_spec.clone())
            .map(drop)
            .map_err(anyhow::Error::from);
        refused(stack_err, "ptsd ublk", "ublk + mount");
        let mkfs_err = mkfs(&fs_dev, None, Duration::ZERO).map_err(anyhow::Error::from);
        refused(mkfs_err, "ptsd ublk", "ublk + mkfs");
        let mkfs_size = mkfs(&fs_dev, Some(64 << 20), Duration::ZERO).map_err(anyhow::Error::from);
        refused(mkfs_size, "ptsd ublk", "ublk + mkfs --size");
        for repair in [true, false] {
            let r = fsck(&fs_spec, repair).map_err(anyhow::Error::from);
            refused(r, "ptsd ublk", &format!("ublk + fsck (repair: {repair})"));
        }
        refused(
            open_backend(&backing, Duration::ZERO),
            "ptsd ublk",
            "ublk + ublk",
        );
        let msg = format!(
            "{:#}",
            open_backend(&backing, Duration::ZERO).err().unwrap()
        );
        assert!(msg.contains("ptsd ublk del"), "{msg}");
        drop((backend, claim));
        let out = fsck(&fs_spec, false).unwrap();
        assert!(out.clean, "{:?}", out.report.problems);

        // An emulated SSD image: ublk holds it against mkfs and itself, and
        // reopens it once let go.
        let ssd_img = tmp.path().join("ssd.img");
        let (backend, claim) = open_backend(&ftl_on(&ssd_img), Duration::ZERO).unwrap();
        assert!(claim.is_some());
        let ssd_dev = ptsd_stack::DeviceSpec::Path(ssd_img.clone());
        let r = mkfs(&ssd_dev, None, Duration::ZERO).map_err(anyhow::Error::from);
        refused(r, "ptsd ublk", "ublk --store + mkfs");
        refused(
            open_backend(&ftl_on(&ssd_img), Duration::ZERO),
            "ptsd ublk",
            "ublk --store twice",
        );
        drop((backend, claim));
        open_backend(&ftl_on(&ssd_img), Duration::ZERO).unwrap();

        // A RAM device holds nothing.
        let mem = spec(BackendSpec::Mem {
            bytes: 1 << 20,
            block_size: 4096,
        });
        let (a, claim) = open_backend(&mem, Duration::ZERO).unwrap();
        assert!(claim.is_none());
        let (b, _) = open_backend(&mem, Duration::ZERO).unwrap();
        assert_eq!(a.num_blocks(), b.num_blocks());
    }
}
