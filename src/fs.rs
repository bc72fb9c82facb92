//! `ptsd mkfs`, `ptsd fsck`, `ptsd mount`, `ptsd umount`, and the
//! `mount.fuse.ptsd` helper that makes `mount -t fuse.ptsd` and /etc/fstab
//! work.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use ptsd_blockdev::size::parse_size;
use ptsd_blockdev::{BlockDevice, FileDevice, FileDeviceOptions};
use ptsd_fs::format::{Superblock, STATE_DIRTY};
use ptsd_fs::fuse::{mount_config, FuseFs, MountOpts};
use ptsd_fs::{mkfs, DirectStore, FileSystem, JournalStore, MkfsOptions, Store};
use ptsd_ftl::{FtlConfig, Ssd, SsdDevice, StoreKind, Variant};
use ptsd_nvjournal::{Journal, JournalConfig, PmemRegion, RegionMode};

/// Logical size of the embedded default device (the emulated SSD).
const DEFAULT_IMAGE_BYTES: u64 = 4 << 30;

#[derive(Args, Debug)]
pub struct MkfsArgs {
    /// Image file or block device to format.
    pub device: PathBuf,
    /// Size of the image (e.g. 512MiB, 4GiB; K/M/G/T = powers of 1024,
    /// KB/MB/GB = powers of 1000); creates or resizes an image file.
    /// Without it the device's whole size is used.
    #[arg(long, value_parser = parse_size)]
    pub size: Option<u64>,
}

#[derive(Args, Debug)]
pub struct FsckArgs {
    /// Image file or block device to check (unmounted). Default: the
    /// embedded emulated SSD of the data directory.
    pub device: Option<PathBuf>,
    /// Data directory of the default device (as for `ptsd mount`).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Journal to replay first (the one the file system was mounted with).
    #[arg(long)]
    pub journal: Option<PathBuf>,
    /// Fix what is wrong (orphans, bitmaps, link counts, bad entries).
    #[arg(long)]
    pub repair: bool,
}

#[derive(Args, Debug, Clone)]
pub struct MountArgs {
    /// Device or image file (default: the embedded emulated device in the
    /// data directory, created and formatted on first use).
    #[arg(long)]
    pub device: Option<PathBuf>,
    /// Journal file (default: /dev/shm/ptsd-UUID.journal when /dev/shm
    /// exists, else in the data directory).
    #[arg(long)]
    pub journal: Option<PathBuf>,
    /// Journal partitions.
    #[arg(long, default_value_t = 4)]
    pub journal_partitions: u32,
    /// Seconds between background checkpoints (0: only when the journal
    /// fills, at fsck/unmount, or under memory pressure of the rings).
    #[arg(long, default_value_t = 5.0)]
    pub checkpoint_interval: f64,
    /// Journal size (e.g. 256MiB; K/M/G = powers of 1024, KB/MB/GB = powers of 1000).
    #[arg(long, value_parser = parse_size, default_value = "256MiB")]
    pub journal_size: u64,
    /// Data directory for the default device and journal
    /// (default: /var/lib/ptsd for root, ~/.local/share/ptsd otherwise;
    /// or $PTSD_DATA_DIR).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Let other users access the mount.
    #[arg(long)]
    pub allow_other: bool,
    /// FUSE worker threads (default: 2 per CPU).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Stay in the foreground instead of detaching.
    #[arg(long, short = 'f')]
    pub foreground: bool,
    /// Mount options as given by mount(8) (-o a,b,c); understood:
    /// allow_other, journal=PATH, journal_partitions=N, journal_size=SIZE,
    /// threads=N.
    #[arg(short = 'o')]
    pub options: Option<String>,
    /// Where to mount.
    pub dir: PathBuf,
}

#[derive(Args, Debug)]
pub struct UmountArgs {
    /// The mount point.
    pub dir: PathBuf,
}

fn open_device(path: &Path) -> Result<Arc<dyn BlockDevice>> {
    let dev = FileDevice::open(path, 4096)
        .with_context(|| format!("opening device {}", path.display()))?;
    Ok(Arc::new(dev))
}

pub fn mkfs_cmd(a: &MkfsArgs) -> Result<()> {
    let dev: Arc<dyn BlockDevice> = match a.size {
        Some(bytes) => {
            let meta = std::fs::metadata(&a.device).ok();
            if meta
                .as_ref()
                .is_some_and(|m| std::os::unix::fs::FileTypeExt::is_block_device(&m.file_type()))
            {
                bail!(
                    "--size only applies to image files; {} is a block device",
                    a.device.display()
                );
            }
            Arc::new(
                FileDevice::create(&a.device, 4096, bytes / 4096)
                    .with_context(|| format!("creating image {}", a.device.display()))?,
            )
        }
        None => {
            if !a.device.exists() {
                bail!(
                    "{} does not exist (give --size to create an image file)",
                    a.device.display()
                );
            }
            open_device(&a.device)?
        }
    };
    let store = DirectStore::new(dev)?;
    let sb = mkfs(&store, &MkfsOptions::default())?;
    println!(
        "ptsd mkfs: {} blocks of 4096 bytes ({} MiB) on {}, uuid {}",
        sb.num_blocks,
        (sb.num_blocks * 4096) >> 20,
        a.device.display(),
        hex(&sb.uuid)
    );
    Ok(())
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub fn fsck_cmd(a: &FsckArgs) -> Result<()> {
    let data = a.data_dir.clone().unwrap_or_else(default_data_dir);
    let mut ssd = None;
    let dev = match &a.device {
        Some(p) => open_device(p)?,
        None => {
            let s = Arc::new(open_default_ssd(&data)?.0);
            ssd = Some(s.clone());
            s as Arc<dyn BlockDevice>
        }
    };
    let res = fsck_on(a, dev, &data);
    if let Some(s) = ssd {
        s.with_ssd(|x| x.shutdown())?;
    }
    if !res? {
        // fsck(8) convention: 4 = errors left uncorrected.
        std::process::exit(4);
    }
    Ok(())
}

/// Returns whether the file system is (now) clean.
fn fsck_on(a: &FsckArgs, dev: Arc<dyn BlockDevice>, data: &Path) -> Result<bool> {
    let sb = read_superblock(&dev)?;
    if sb.state == STATE_DIRTY {
        let jpath = a
            .journal
            .clone()
            .unwrap_or_else(|| default_journal_path(&sb, data));
        if jpath.exists() {
            // Replay what was committed, then check the device alone.
            let store = open_journaled(dev.clone(), &sb, &jpath, 0, 1, 0.0)?;
            store.close()?;
            println!("ptsd fsck: replayed journal {}", jpath.display());
        } else {
            println!("ptsd fsck: not cleanly unmounted and no journal at {}: checking the device as it is", jpath.display());
        }
    }
    let store: Arc<dyn Store> = Arc::new(DirectStore::new(dev)?);
    let report = ptsd_fs::fsck::check(store.clone(), a.repair)?;
    for p in &report.problems {
        println!("{p}");
    }
    println!("{}", report.summary());
    Ok(report.problems.is_empty() || a.repair)
}

/// The embedded default device: the emulated SSD (PTSD mapping) whose
/// persistent image is `ssd.img` in the data directory. Returns it, the
/// image path, and whether the image is new.
fn open_default_ssd(data: &Path) -> Result<(SsdDevice, PathBuf, bool)> {
    let img = data.join("ssd.img");
    let fresh = std::fs::metadata(&img)
        .map(|m| m.len() == 0)
        .unwrap_or(true);
    let mut cfg = FtlConfig::paper(Variant::WriteOpt, DEFAULT_IMAGE_BYTES);
    cfg.store = StoreKind::File { path: img.clone() };
    // The image is the emulated NAND's backing store, written one 4 KiB
    // page per program. Through the page cache those writes are memory
    // copies that the kernel writes back in large runs; O_DIRECT would make
    // each one a device I/O (in a VM: an exit per page), which cost the
    // checkpoint threads more CPU than everything else in the file system.
    // Durability is the same: the FTL's sync points flush the file
    // (fdatasync), as they flushed the disk cache under O_DIRECT.
    let opts = FileDeviceOptions::new()
        .block_size(cfg.page_size)
        .direct(false);
    let dev = if fresh {
        opts.create(&img, Ssd::image_blocks(&cfg, cfg.page_size))
    } else {
        opts.open(&img)
    }
    .with_context(|| format!("opening the emulated SSD image {}", img.display()))?;
    let ssd = Ssd::open_on(cfg, Box::new(dev))
        .with_context(|| format!("opening the emulated SSD {}", img.display()))?;
    Ok((SsdDevice::virtual_time(ssd), img, fresh))
}

fn read_superblock(dev: &Arc<dyn BlockDevice>) -> Result<Superblock> {
    let mut b = vec![0u8; 4096];
    dev.read(0, &mut b).context("reading the superblock")?;
    Ok(Superblock::decode(&b, dev.num_blocks())?)
}

/// Where a file system's journal lives unless `--journal` says otherwise:
/// /dev/shm when present (RAM, like the paper's NVM emulation), else the
/// data directory. Named by the file system's uuid, so a journal never
/// meets a file system it does not belong to.
fn default_journal_path(sb: &Superblock, data_dir: &Path) -> PathBuf {
    let name = format!("ptsd-{}.journal", hex(&sb.uuid));
    if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm").join(name)
    } else {
        data_dir.join(name)
    }
}

/// Open the journal for `dev` (recovering it if the file system was not
/// unmounted cleanly, else starting a fresh one) and wrap it as the store.
fn open_journaled(
    dev: Arc<dyn BlockDevice>,
    sb: &Superblock,
    path: &Path,
    size: u64,
    partitions: u32,
    checkpoint_secs: f64,
) -> Result<Arc<dyn Store>> {
    let cfg = JournalConfig {
        checkpoint_interval: (checkpoint_secs > 0.0)
            .then(|| std::time::Duration::from_secs_f64(checkpoint_secs)),
        ..JournalConfig::partitioned(partitions.max(1))
    };
    let (journal, how) = if sb.state == STATE_DIRTY {
        if !path.exists() {
            bail!(
                "the file system was not unmounted cleanly and its journal {} is missing (a RAM journal does not survive a reboot); run `ptsd fsck --repair` on the device",
                path.display()
            );
        }
        let len = std::fs::metadata(path)?.len();
        let region = PmemRegion::open_file(path, len)
            .with_context(|| format!("mapping journal {}", path.display()))?;
        let (j, report) = Journal::open(region, dev.clone(), cfg)
            .with_context(|| format!("recovering journal {}", path.display()))?;
        (
            j,
            format!("recovered, {} blocks replayed", report.replayed_blocks),
        )
    } else {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).ok();
        }
        let size = size.max(8 << 20) / 4096 * 4096;
        let region = PmemRegion::open_file(path, size)
            .with_context(|| format!("mapping journal {}", path.display()))?;
        (
            Journal::create(region, dev.clone(), cfg)
                .with_context(|| format!("creating journal {}", path.display()))?,
            "new".to_string(),
        )
    };
    let mode = journal.mode();
    let durable = match mode {
        RegionMode::Dax => "power-loss safe (persistent memory, MAP_SYNC + cache-line flushes)",
        RegionMode::Msync => "power-loss safe (mmap + msync at each commit)",
        RegionMode::Tmpfs => {
            "process-crash safe only (RAM file: survives kill -9, not a power cut)"
        }
        RegionMode::Simulated => "simulated",
    };
    let what = format!(
        "journal {} [{mode}, {} partitions, {how}]: {durable}; fsync = journal commit",
        path.display(),
        journal.geometry().partitions
    );
    Ok(Arc::new(JournalStore::new(journal, dev, what)))
}

fn default_data_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("PTSD_DATA_DIR") {
        return PathBuf::from(d);
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        PathBuf::from("/var/lib/ptsd")
    } else {
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("."));
        home.join(".local/share/ptsd")
    }
}

fn pid_file(dir: &Path) -> PathBuf {
    let canon = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let name: String = canon
        .to_string_lossy()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let base = if Path::new("/run").is_dir() {
        PathBuf::from("/run/ptsd")
    } else {
        std::env::temp_dir().join("ptsd-run")
    };
    base.join(format!("{name}.pid"))
}

/// Everything `ptsd mount` resolved, for the message it prints.
struct Prepared {
    fs: Arc<FileSystem>,
    device: String,
    /// The embedded emulated SSD, shut down cleanly after the unmount.
    ssd: Option<Arc<SsdDevice>>,
    /// The journal file (removed after a clean unmount: nothing in it is
    /// needed any more, and in /dev/shm it holds RAM).
    journal: PathBuf,
}

fn prepare(a: &MountArgs) -> Result<Prepared> {
    let mut ssd = None;
    let (dev, device_desc): (Arc<dyn BlockDevice>, String) = match &a.device {
        Some(p) => (open_device(p)?, p.display().to_string()),
        None => {
            // The embedded default: the emulated SSD (PTSD mapping) with a
            // persistent image in the data directory.
            let data = a.data_dir.clone().unwrap_or_else(default_data_dir);
            std::fs::create_dir_all(&data)
                .with_context(|| format!("creating data directory {}", data.display()))?;
            let (s, img, fresh) = open_default_ssd(&data)?;
            let s = Arc::new(s);
            let dev: Arc<dyn BlockDevice> = s.clone();
            if fresh {
                mkfs(&DirectStore::new(dev.clone())?, &MkfsOptions::default())?;
            }
            ssd = Some(s);
            let how = if fresh { ", new" } else { "" };
            (
                dev,
                format!("{} (emulated SSD, PTSD FTL{how})", img.display()),
            )
        }
    };
    let data = a.data_dir.clone().unwrap_or_else(default_data_dir);
    let sb = read_superblock(&dev).map_err(|e| anyhow!("cannot mount {device_desc}: {e}"))?;
    let jpath = a
        .journal
        .clone()
        .unwrap_or_else(|| default_journal_path(&sb, &data));
    let store = open_journaled(
        dev,
        &sb,
        &jpath,
        a.journal_size,
        a.journal_partitions,
        a.checkpoint_interval,
    )?;
    let fs = FileSystem::mount(store).map_err(|e| anyhow!("cannot mount {}: {e}", device_desc))?;
    Ok(Prepared {
        fs: Arc::new(fs),
        device: device_desc,
        ssd,
        journal: jpath,
    })
}

/// Apply `-o` options from mount(8).
fn apply_options(a: &mut MountArgs) -> Result<()> {
    let Some(opts) = a.options.clone() else {
        return Ok(());
    };
    for o in opts.split(',').filter(|o| !o.is_empty()) {
        let (k, v) = o
            .split_once('=')
            .map(|(k, v)| (k, Some(v)))
            .unwrap_or((o, None));
        match (k, v) {
            ("allow_other", None) => a.allow_other = true,
            ("journal", Some(v)) => a.journal = Some(v.into()),
            ("journal_partitions", Some(v)) => {
                a.journal_partitions = v.parse().context("journal_partitions")?
            }
            ("threads", Some(v)) => a.threads = Some(v.parse().context("threads")?),
            ("journal_size", Some(v)) => a.journal_size = parse_size(v)?,
            ("data_dir", Some(v)) => a.data_dir = Some(v.into()),
            // Generic options mount(8) passes along; the kernel side is fixed.
            (
                "rw"
                | "defaults"
                | "auto"
                | "noauto"
                | "user"
                | "nouser"
                | "dev"
                | "suid"
                | "exec"
                | "nofail"
                | "_netdev"
                | "noatime"
                | "relatime"
                | "default_permissions",
                _,
            ) => {}
            (k, _) if k.starts_with("x-") => {}
            _ => bail!("unknown mount option {o:?}"),
        }
    }
    Ok(())
}

pub fn mount_cmd(a: &MountArgs) -> Result<()> {
    let mut a = a.clone();
    apply_options(&mut a)?;
    if !a.dir.is_dir() {
        bail!("mount point {} is not a directory", a.dir.display());
    }
    if a.foreground {
        return serve(&a, None);
    }
    // Detach: fork before any thread exists; the parent waits for the child
    // to say whether the mount worked.
    let mut fds = [0i32; 2];
    // SAFETY: `fds` is a valid two-element array for pipe to fill.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        bail!("pipe: {}", std::io::Error::last_os_error());
    }
    // SAFETY: the process is still single-threaded here, so the child may
    // run arbitrary code after fork.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        bail!("fork: {}", std::io::Error::last_os_error());
    }
    if pid > 0 {
        // SAFETY: fds[1] is our open write end; fds[0] is an open fd we now own.
        unsafe { libc::close(fds[1]) };
        let mut r = unsafe { std::fs::File::from_raw_fd(fds[0]) };
        let mut msg = String::new();
        let _ = r.read_to_string(&mut msg);
        if let Some(ok) = msg.strip_prefix("OK ") {
            println!("{ok}");
            return Ok(());
        }
        bail!(
            "{}",
            if msg.is_empty() {
                "the mount daemon exited without a word".to_string()
            } else {
                msg
            }
        );
    }
    // Child.
    // SAFETY: closing our copy of the read end; setsid has no preconditions.
    unsafe {
        libc::close(fds[0]);
        libc::setsid();
    }
    // SAFETY: fds[1] is an open fd the child owns from here on.
    let w = unsafe { std::fs::File::from_raw_fd(fds[1]) };
    let res = serve(&a, Some(w));
    std::process::exit(if res.is_ok() { 0 } else { 1 });
}

fn serve(a: &MountArgs, mut notify: Option<std::fs::File>) -> Result<()> {
    let p = match prepare(a) {
        Ok(p) => p,
        Err(e) => {
            if let Some(w) = notify.as_mut() {
                let _ = write!(w, "{e:#}");
            }
            return Err(e);
        }
    };
    let opts = MountOpts {
        allow_other: a.allow_other,
        threads: a.threads.unwrap_or(MountOpts::default().threads),
        fsname: p.device.split(' ').next().unwrap_or("ptsd").to_string(),
        auto_unmount: false,
    };
    let mode = p.fs.describe_store();
    let session = match fuser::Session::new(FuseFs::new(p.fs.clone()), &a.dir, &mount_config(&opts))
    {
        Ok(s) => s,
        Err(e) => {
            let msg = format!("mounting FUSE at {}: {e}", a.dir.display());
            if let Some(w) = notify.as_mut() {
                let _ = write!(w, "{msg}");
            }
            let _ = p.fs.close();
            bail!(msg);
        }
    };
    let pidf = pid_file(&a.dir);
    if let Some(parent) = pidf.parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    let _ = std::fs::write(&pidf, format!("{}\n", std::process::id()));
    let line = format!(
        "ptsd: mounted {} on {}; {} FUSE threads; orphans freed: {}\nptsd: durability: {}",
        p.device,
        a.dir.display(),
        opts.threads,
        p.fs.orphans_freed,
        mode
    );
    match notify.take() {
        Some(mut w) => {
            let _ = write!(w, "OK {line}");
            drop(w);
            // Detach from the terminal; errors go to a log beside the pid file.
            let log = pidf.with_extension("log");
            if let Ok(null) = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open("/dev/null")
            {
                let err = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&log)
                    .unwrap_or(null.try_clone()?);
                // SAFETY: dup2 onto the standard descriptors of this process.
                unsafe {
                    libc::dup2(null.as_raw_fd(), 0);
                    libc::dup2(null.as_raw_fd(), 1);
                    libc::dup2(err.as_raw_fd(), 2);
                }
            }
        }
        None => println!("{line}"),
    }
    let res = session.run();
    if let Err(e) = p.fs.close() {
        tracing::error!("clean unmount failed: {e}");
    }
    if p.fs.is_clean() {
        let _ = std::fs::remove_file(&p.journal);
    }
    if let Some(ssd) = &p.ssd {
        if let Err(e) = ssd.with_ssd(|s| s.shutdown()) {
            tracing::error!("emulated SSD shutdown failed: {e}");
        }
    }
    drop(p);
    let _ = std::fs::remove_file(&pidf);
    res.context("FUSE session")
}

pub fn umount_cmd(a: &UmountArgs) -> Result<()> {
    let pidf = pid_file(&a.dir);
    let pid: Option<i32> = std::fs::read_to_string(&pidf)
        .ok()
        .and_then(|s| s.trim().parse().ok());
    let c =
        std::ffi::CString::new(a.dir.as_os_str().as_encoded_bytes()).context("mount point path")?;
    // SAFETY: `c` is a valid NUL-terminated path.
    let r = unsafe { libc::umount2(c.as_ptr(), 0) };
    if r != 0 {
        let err = std::io::Error::last_os_error();
        // Not root: let fusermount3 do it.
        let st = std::process::Command::new("fusermount3")
            .arg("-u")
            .arg(&a.dir)
            .status();
        if !st.map(|s| s.success()).unwrap_or(false) {
            bail!("unmounting {}: {err}", a.dir.display());
        }
    }
    // Wait for the daemon's clean shutdown (checkpoint, superblock clean).
    if let Some(pid) = pid {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        while Path::new(&format!("/proc/{pid}")).exists() && std::time::Instant::now() < deadline {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            if stat.split(' ').nth(2) == Some("Z") {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
    println!("ptsd: unmounted {}", a.dir.display());
    Ok(())
}

/// When the binary runs as `mount.fuse.ptsd SRC DIR [-o opts]` (mount(8)'s
/// helper for type `fuse.ptsd`), mount SRC on DIR and exit.
pub fn mount_helper_main() -> Option<Result<()>> {
    let mut args = std::env::args_os();
    let argv0 = PathBuf::from(args.next()?);
    if argv0.file_name()? != "mount.fuse.ptsd" {
        return None;
    }
    let rest: Vec<String> = args.map(|a| a.to_string_lossy().into_owned()).collect();
    let mut pos = Vec::new();
    let mut options = None;
    let mut i = 0;
    while i < rest.len() {
        match rest[i].as_str() {
            "-o" => {
                options = rest.get(i + 1).cloned();
                i += 2;
            }
            s if s.starts_with("-o") => {
                options = Some(s[2..].to_string());
                i += 1;
            }
            s if s.starts_with('-') => i += 1, // -n, -v, -s: nothing to do
            s => {
                pos.push(s.to_string());
                i += 1;
            }
        }
    }
    if pos.len() != 2 {
        return Some(Err(anyhow!("usage: mount.fuse.ptsd SOURCE DIR [-o options] (SOURCE: a device/image or 'ptsd' for the default)")));
    }
    let device = if pos[0] == "ptsd" || pos[0] == "default" {
        None
    } else {
        Some(PathBuf::from(&pos[0]))
    };
    let a = MountArgs {
        device,
        journal: None,
        journal_partitions: 4,
        journal_size: 256 << 20,
        checkpoint_interval: 5.0,
        data_dir: None,
        allow_other: false,
        threads: None,
        foreground: false,
        options,
        dir: PathBuf::from(&pos[1]),
    };
    Some(mount_cmd(&a))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn sizes_use_the_one_syntax() {
        #[derive(Parser)]
        struct Mkfs {
            #[command(flatten)]
            a: MkfsArgs,
        }
        #[derive(Parser)]
        struct Mount {
            #[command(flatten)]
            a: MountArgs,
        }
        let mkfs = |size: &str| {
            Mkfs::try_parse_from(["mkfs", "disk.img", "--size", size]).map(|m| m.a.size)
        };
        assert_eq!(mkfs("4GiB").unwrap(), Some(4 << 30));
        assert_eq!(mkfs("4G").unwrap(), Some(4 << 30));
        assert_eq!(mkfs("2GB").unwrap(), Some(2_000_000_000));
        assert!(mkfs("4 parsecs").is_err());
        let mut m = Mount::try_parse_from(["mount", "/mnt", "-o", "journal_size=64MiB,threads=2"])
            .unwrap()
            .a;
        assert_eq!(m.journal_size, 256 << 20);
        apply_options(&mut m).unwrap();
        assert_eq!(m.journal_size, 64 << 20);
        m.options = Some("journal_size=64 parsecs".into());
        let e = apply_options(&mut m).unwrap_err().to_string();
        assert!(e.contains("invalid size \"64 parsecs\""), "{e}");
    }
}
