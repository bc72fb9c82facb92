// Over 800 lines: mkfs, fsck, mount and umount share the mount options' parsing and the stack assembly; that parsing's tests close the file.
//! `ptsd mkfs`, `ptsd fsck`, `ptsd mount`, `ptsd umount`, and the
//! `mount.fuse.ptsd` helper that makes `mount -t fuse.ptsd` and /etc/fstab
//! work.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use ptsd_blockdev::size::parse_size;
use std::sync::Arc;

use ptsd_fs::frontend::{self, FsHandler, ServeOptions};
use ptsd_fs::fuse::{MountFlags, MountOpts};
use ptsd_fs::opcount::OpCounts;
use ptsd_fs::uring::{choose_transport, UringWish};
use ptsd_stack::{DeviceSpec, JournalSpec, MissingJournal, Stack, StackSpec};

use crate::userpaths::{make_run_dir, pid_file, user_allow_other};

#[derive(Args, Debug)]
pub struct MkfsArgs {
    /// Image file or block device to format.
    pub device: PathBuf,
    /// Size of the image (e.g. 512MiB, 4GiB; K/M/G/T = powers of 1024,
    /// KB/MB/GB = powers of 1000); creates or resizes an image file.
    /// Without it the device's whole size is used.
    #[arg(long, value_parser = parse_size)]
    pub size: Option<u64>,
    /// Owner of the root directory, UID:GID (numbers) [default: the user
    /// running mkfs].
    #[arg(long, value_parser = parse_owner, value_name = "UID:GID")]
    pub root_owner: Option<(u32, u32)>,
}

#[derive(Args, Debug)]
pub struct FsckArgs {
    /// Image file or block device to check (unmounted; a mounted one is
    /// refused). Default: the
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
    /// Journal partitions [default: 4; 1 for a journal on a disk file,
    /// where each partition's ring is one more disk write per commit].
    #[arg(long)]
    pub journal_partitions: Option<u32>,
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
    /// After an unclean stop whose journal is gone (a deleted --journal
    /// file), mount anyway: what was committed but not yet checkpointed is
    /// lost, the device is repaired as `ptsd fsck --repair` would. A missing
    /// RAM journal (in /dev/shm: gone after a reboot) is discarded without
    /// this flag, after saying so.
    #[arg(long)]
    pub discard_missing_journal: bool,
    /// Let other users access the mount (a user other than root needs
    /// `user_allow_other` in /etc/fuse.conf for it).
    #[arg(long)]
    pub allow_other: bool,
    /// Owner of the root directory when this mount creates the file system
    /// (the default device's first mount), UID:GID [default: the user
    /// running the mount].
    #[arg(long, value_parser = parse_owner, value_name = "UID:GID")]
    pub root_owner: Option<(u32, u32)>,
    /// Print nothing on success (what `mount -t fuse.ptsd` does unless
    /// given -v).
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// FUSE worker threads (default: 1 per CPU, at least 2).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Stay in the foreground instead of detaching.
    #[arg(long, short = 'f')]
    pub foreground: bool,
    /// Count FUSE requests per opcode into this file, readable while
    /// mounted (`ptsd bench fs` does, for every FUSE target alike).
    #[arg(long, hide = true)]
    pub op_counts: Option<PathBuf>,
    /// Mount options as given by mount(8) (-o a,b,c); understood:
    /// allow_other, journal=PATH, journal_partitions=N, journal_size=SIZE,
    /// threads=N, data_dir=PATH, discard_missing_journal; uring / nouring
    /// (by default FUSE over io_uring where the kernel has it on, /dev/fuse
    /// otherwise; `uring` as root first turns the kernel's
    /// fuse.enable_uring on, saying so; `nouring`: /dev/fuse only; the
    /// mount line names the transport), uring_poll[=MICROSECONDS] (busy-poll the io_uring
    /// queues that long, 100 by default, before sleeping); direct_writes /
    /// nodirect_writes (write-only opens bypass the kernel's page cache,
    /// the default, or are cached like the others); commit_window /
    /// nocommit_window (stage the blocks of many operations once per
    /// commit window, except right after an fsync: fewer journal blocks
    /// per created file; on by default); discard /
    /// nodiscard (tell the device about freed blocks online and at
    /// unmount, the default, or only on `fstrim`); and every generic
    /// mount(8) option: ro/rw, nosuid, nodev, noexec, sync, dirsync and the
    /// atime family (relatime by default; noatime, strictatime,
    /// nodiratime, lazytime, which the file system applies) go to the
    /// kernel mount, remount changes those of a mounted DIR (`-o
    /// remount,ro`, which the daemon follows), defaults, auto, nofail,
    /// _netdev, user(s), x-* are mount(8)'s own. May be given more than
    /// once; later options win.
    #[arg(short = 'o')]
    pub options: Vec<String>,
    /// FUSE over io_uring: `-o uring`, `-o nouring`, or neither (io_uring
    /// where the kernel has it on).
    #[arg(skip = UringWish::Default)]
    pub uring: UringWish,
    /// Discard freed blocks online and at unmount (`-o discard`, the
    /// default / `-o nodiscard`).
    #[arg(skip = true)]
    pub discard: bool,
    /// Busy-poll the io_uring queues this long (`-o uring_poll`).
    #[arg(skip)]
    pub uring_poll: Option<std::time::Duration>,
    /// Write-only opens bypass the kernel's page cache (`-o direct_writes`,
    /// the default / `-o nodirect_writes`).
    #[arg(skip = true)]
    pub direct_writes: bool,
    /// Stage operations once per commit window (`-o commit_window`, the
    /// default / `-o nocommit_window`).
    #[arg(skip = true)]
    pub commit_window: bool,
    /// The generic mount(8) options (`-o ro,nosuid,noatime,remount,…`).
    #[arg(skip)]
    pub flags: MountFlags,
    /// Where to mount.
    pub dir: PathBuf,
}

#[derive(Args, Debug)]
pub struct UmountArgs {
    /// The mount point.
    pub dir: PathBuf,
}

fn lock_wait() -> std::time::Duration {
    std::time::Duration::from_secs(60)
}

pub fn mkfs_cmd(a: &MkfsArgs) -> Result<()> {
    if a.size.is_none() && !a.device.exists() {
        bail!(
            "{} does not exist (give --size to create an image file)",
            a.device.display()
        );
    }
    let (uid, gid) = a.root_owner.unwrap_or_else(ptsd_stack::invoking_user);
    let opts = ptsd_fs::MkfsOptions {
        root_owner: (uid, gid),
        ..Default::default()
    };
    let f = ptsd_stack::mkfs_with(
        &DeviceSpec::Path(a.device.clone()),
        a.size,
        lock_wait(),
        &opts,
    )?;
    let sb = &f.superblock;
    outln!(
        "ptsd mkfs: {} blocks of 4096 bytes ({} MiB) on {}, uuid {}, root directory owned by {uid}:{gid}",
        sb.num_blocks,
        (sb.num_blocks * 4096) >> 20,
        a.device.display(),
        sb.uuid_hex()
    );
    Ok(())
}

/// `UID:GID`, both numbers (as `mke2fs -E root_owner=`).
fn parse_owner(s: &str) -> Result<(u32, u32), String> {
    let bad = || format!("{s:?}: expected UID:GID, two numbers (e.g. 1000:1000)");
    let (u, g) = s.split_once(':').ok_or_else(bad)?;
    Ok((
        u.trim().parse().map_err(|_| bad())?,
        g.trim().parse().map_err(|_| bad())?,
    ))
}

/// The stack `--device`/`--data-dir`/`--journal` name (shared by mount and
/// fsck).
fn spec_of(
    device: &Option<PathBuf>,
    data_dir: &Option<PathBuf>,
    journal: &Option<PathBuf>,
) -> StackSpec {
    let data = data_dir.clone().unwrap_or_else(default_data_dir);
    let dev = match device {
        Some(p) => DeviceSpec::Path(p.clone()),
        None => DeviceSpec::DataDir(data.clone()),
    };
    let journal = match journal {
        Some(p) => JournalSpec::File(p.clone()),
        None => JournalSpec::Default { data_dir: data },
    };
    let mut spec = StackSpec::new(dev, journal);
    spec.lock_wait = lock_wait();
    spec
}

pub fn fsck_cmd(a: &FsckArgs) -> Result<()> {
    let spec = spec_of(&a.device, &a.data_dir, &a.journal);
    let out = ptsd_stack::fsck(&spec, a.repair)?;
    for n in &out.notes {
        outln!("ptsd fsck: {n}");
    }
    for p in &out.report.problems {
        outln!("{p}");
    }
    outln!("{}", out.report.summary());
    if !out.clean {
        // fsck(8) convention: 4 = errors left uncorrected.
        std::process::exit(4);
    }
    Ok(())
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

fn open_stack(a: &MountArgs) -> Result<Stack> {
    let mut spec = spec_of(&a.device, &a.data_dir, &a.journal);
    spec.journal_bytes = a.journal_size;
    spec.coalesce = a.commit_window;
    spec.journal_config.checkpoint_interval = (a.checkpoint_interval > 0.0)
        .then(|| std::time::Duration::from_secs_f64(a.checkpoint_interval));
    if let Some(n) = a.journal_partitions {
        // Asked for: on a disk file too.
        spec.journal_config.partitions = n.max(1);
        spec.disk_journal_partitions = None;
    }
    if a.discard_missing_journal {
        spec.missing_journal = MissingJournal::Discard;
    }
    if let Some(owner) = a.root_owner {
        spec.root_owner = owner;
    }
    Ok(Stack::open(spec)?)
}

/// Apply `-o` options from mount(8).
fn apply_options(a: &mut MountArgs) -> Result<()> {
    let opts = a.options.join(",");
    for o in opts.split(',').filter(|o| !o.is_empty()) {
        let (k, v) = o
            .split_once('=')
            .map(|(k, v)| (k, Some(v)))
            .unwrap_or((o, None));
        match (k, v) {
            ("allow_other", None) => a.allow_other = true,
            ("journal", Some(v)) => a.journal = Some(v.into()),
            ("journal_partitions", Some(v)) => {
                a.journal_partitions = Some(v.parse().context("journal_partitions")?)
            }
            ("threads", Some(v)) => a.threads = Some(v.parse().context("threads")?),
            ("journal_size", Some(v)) => a.journal_size = parse_size(v)?,
            ("data_dir", Some(v)) => a.data_dir = Some(v.into()),
            ("discard_missing_journal", None) => a.discard_missing_journal = true,
            ("uring", None) => a.uring = UringWish::Asked,
            ("nouring", None) => a.uring = UringWish::Off,
            ("discard", None) => a.discard = true,
            ("nodiscard", None) => a.discard = false,
            ("direct_writes", None) => a.direct_writes = true,
            ("nodirect_writes", None) => a.direct_writes = false,
            ("commit_window", None) => a.commit_window = true,
            ("nocommit_window", None) => a.commit_window = false,
            ("uring_poll", v) => {
                let us: u64 = v.map_or(Ok(100), str::parse).context("uring_poll")?;
                a.uring = UringWish::Asked;
                a.uring_poll = Some(std::time::Duration::from_micros(us));
            }
            // The generic options the kernel mount takes.
            (k, None) if a.flags.apply(k) => {}
            // Generic options for mount(8) itself, which it passes along.
            (
                "defaults"
                | "auto"
                | "noauto"
                | "user"
                | "nouser"
                | "users"
                | "owner"
                | "group"
                | "nofail"
                | "_netdev"
                | "default_permissions",
                None,
            )
            | ("comment", Some(_)) => {}
            // FUSE's own kernel options: mount(8) repeats them from
            // /proc/mounts on `mount -o remount,…`; the daemon sets them
            // itself on a new mount, so they carry nothing to apply.
            ("user_id" | "group_id" | "rootmode" | "max_read" | "blksize" | "fd", Some(_)) => {}
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
    if a.allow_other && ptsd_stack::invoking_user().0 != 0 && !user_allow_other() {
        bail!(
            "allow_other: a user other than root may use it only when /etc/fuse.conf has \
             the line `user_allow_other` (root adds it); mount without it otherwise"
        );
    }
    if a.flags.remount {
        ptsd_fs::fuse::remount(&a.dir, &a.flags)
            .with_context(|| format!("remounting {}", a.dir.display()))?;
        let rw = if a.flags.read_only { "ro" } else { "rw" };
        if !a.quiet {
            eoutln!("ptsd: remounted {} {rw}", a.dir.display());
        }
        return Ok(());
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
        // SAFETY: as above, fds[0] is ours alone from here on.
        let mut r = unsafe { std::fs::File::from_raw_fd(fds[0]) };
        let mut msg = String::new();
        let _ = r.read_to_string(&mut msg);
        if let Some(ok) = msg.strip_prefix("OK ") {
            // On stderr: stdout stays clean for scripts; `-q` and the
            // mount(8) helper print nothing on success.
            if !a.quiet {
                eoutln!("{ok}");
            }
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
    let stack = match open_stack(a) {
        Ok(s) => s,
        Err(e) => {
            if let Some(w) = notify.as_mut() {
                let _ = write!(w, "{}", crate::out::error_line(&e));
            }
            return Err(e);
        }
    };
    stack.fs().set_auto_trim(a.discard);
    // ro, sync, dirsync: the file system enforces them itself too, for
    // whatever reaches it (the kernel mount has them as well); the atime
    // options are the file system's alone (FUSE leaves atime to it).
    a.flags.apply_to(stack.fs());
    let info = stack.info().clone();
    let opts = MountOpts {
        allow_other: a.allow_other,
        threads: a.threads.unwrap_or(MountOpts::default().threads),
        fsname: info
            .source
            .as_ref()
            .map_or_else(|| "ptsd".to_string(), |p| p.display().to_string()),
        auto_unmount: false,
        flags: a.flags,
    };
    let counts = match a.op_counts.as_deref().map(OpCounts::create).transpose() {
        Ok(c) => c,
        Err(e) => {
            let msg = ptsd_blockdev::ErrorChain(&e).to_string();
            if let Some(w) = notify.as_mut() {
                let _ = write!(w, "{msg}");
            }
            let _ = stack.close();
            bail!(msg);
        }
    };
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let transport = choose_transport(a.uring, Path::new(ptsd_fs::uring::ENABLE_PARAM), root);
    let opts = ServeOptions {
        mount: opts,
        threads_given: a.threads.is_some(),
        uring: transport.uring,
        uring_poll: a.uring_poll,
        direct_writes: a.direct_writes,
        writeback_cache: false,
        counts,
    };
    let pidf = pid_file(&a.dir);
    let handler = Arc::new(FsHandler::new(stack.fs().clone()));
    let mut notify_err = notify.take();
    let announce = |served: &frontend::Served| {
        // From a thread, without a request to the mount.
        ptsd_fs::fuse::raise_readahead(&a.dir);
        // `mount -o remount,…` reaches the file system this way only.
        if let Err(e) = ptsd_fs::mountwatch::watch(&a.dir, stack.fs().clone()) {
            tracing::warn!("remounts will not reach the file system: {e}");
        }
        let have_run_dir = pidf.parent().and_then(make_run_dir).is_some();
        if have_run_dir {
            let _ = std::fs::write(&pidf, format!("{}\n", std::process::id()));
        }
        let mut line = String::new();
        for n in info.notes.iter().chain(&transport.note) {
            line.push_str(&format!("ptsd: {n}\n"));
        }
        line.push_str(&format!(
            "ptsd: mounted {} on {}; {}; orphans freed: {}\nptsd: durability: {}",
            info.device,
            a.dir.display(),
            served.transport(),
            info.orphans_freed,
            stack.durability()
        ));
        match notify_err.take() {
            Some(w) => detach(w, &line, have_run_dir.then_some(pidf.as_path())),
            None if !a.quiet => eoutln!("{line}"),
            None => {}
        }
    };
    // Returns once the kernel unmounted, with /dev/fuse closed and the
    // queues ended: a new mount that meets our locks during the close
    // below sees we no longer serve and waits for them instead of
    // refusing, and nothing is still in the file system when it closes.
    let res = frontend::serve(&a.dir, opts, handler, announce).map_err(anyhow::Error::from);
    if let (Err(e), Some(mut w)) = (&res, notify_err.take()) {
        let _ = write!(w, "{}", crate::out::error_line(e));
    }
    let ssd = stack.ssd().cloned();
    if let Err(e) = stack.close() {
        tracing::error!("clean unmount failed: {}", ptsd_blockdev::ErrorChain(&e));
    }
    if let Some(ssd) = ssd {
        // What the emulated SSD did over this mount (RUST_LOG=info).
        let s = ssd.stats();
        tracing::info!(
            "emulated SSD over this mount: {} pages written by the host, {} discarded, \
             {} GC copies of data and {} of mapping pages, {} erases",
            s.host_write_pages,
            s.host_discard_pages,
            s.gc_data_copies,
            s.gc_map_copies,
            s.erases
        );
    }
    let _ = std::fs::remove_file(&pidf);
    res
}

/// Tells the waiting parent the mount is up, then detaches from the
/// terminal; errors go to a log beside the pid file.
/// Hands the mount's line to the waiting parent, then detaches from the
/// terminal; errors go to a log beside the pid file (when the run
/// directory could be made), which starts with that line.
fn detach(mut w: std::fs::File, line: &str, pidf: Option<&Path>) {
    let _ = write!(w, "OK {line}");
    drop(w);
    let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    else {
        return;
    };
    let log = pidf.and_then(|p| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p.with_extension("log"))
            .ok()
    });
    let err = match log {
        Some(mut f) => {
            let _ = writeln!(f, "{line}");
            f
        }
        None => match null.try_clone() {
            Ok(n) => n,
            Err(_) => return,
        },
    };
    // SAFETY: dup2 onto the standard descriptors of this process.
    unsafe {
        libc::dup2(null.as_raw_fd(), 0);
        libc::dup2(null.as_raw_fd(), 1);
        libc::dup2(err.as_raw_fd(), 2);
    }
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
        match st {
            Ok(s) if s.success() => {}
            Ok(_) => bail!(
                "unmounting {}: {err}; fusermount3 -u failed",
                a.dir.display()
            ),
            Err(e) => bail!(
                "unmounting {}: {err}; fusermount3 (package fuse3) could not run: {e}",
                a.dir.display()
            ),
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
    outln!("ptsd: unmounted {}", a.dir.display());
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
    let mut options = Vec::new();
    let mut verbose = false;
    let mut i = 0;
    while i < rest.len() {
        match rest[i].as_str() {
            "-o" => {
                options.extend(rest.get(i + 1).cloned());
                i += 2;
            }
            s if s.starts_with("-o") => {
                options.push(s[2..].to_string());
                i += 1;
            }
            // mount(8) helpers print nothing on success unless mount -v.
            "-v" => {
                verbose = true;
                i += 1;
            }
            s if s.starts_with('-') => i += 1, // -n, -s: nothing to do
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
        journal_partitions: None,
        journal_size: 256 << 20,
        checkpoint_interval: 5.0,
        data_dir: None,
        discard_missing_journal: false,
        allow_other: false,
        root_owner: None,
        quiet: !verbose,
        threads: None,
        foreground: false,
        op_counts: None,
        options,
        uring: UringWish::Default,
        uring_poll: None,
        discard: true,
        direct_writes: true,
        commit_window: true,
        flags: MountFlags::default(),
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
        // The root directory's owner: two numbers, or a clear error.
        let owner = |o: &str| {
            Mkfs::try_parse_from(["mkfs", "disk.img", "--root-owner", o]).map(|m| m.a.root_owner)
        };
        assert_eq!(owner("1000:100").unwrap(), Some((1000, 100)));
        for bad in ["1000", "alice:users", "1000:", "1:2:3"] {
            let e = owner(bad).unwrap_err().to_string();
            assert!(e.contains("expected UID:GID"), "{bad}: {e}");
        }
        assert_eq!(mkfs("4G").unwrap(), Some(4 << 30));
        assert_eq!(mkfs("2GB").unwrap(), Some(2_000_000_000));
        assert!(mkfs("4 parsecs").is_err());
        let mut m = Mount::try_parse_from(["mount", "/mnt", "-o", "journal_size=64MiB,threads=2"])
            .unwrap()
            .a;
        assert_eq!(m.journal_size, 256 << 20);
        apply_options(&mut m).unwrap();
        assert_eq!(m.journal_size, 64 << 20);
        m.options = vec!["journal_size=64 parsecs".into()];
        let e = apply_options(&mut m).unwrap_err().to_string();
        assert!(e.contains("invalid size \"64 parsecs\""), "{e}");
        // The transport: io_uring unless told otherwise; -o may repeat.
        let parse = |args: &[&str]| {
            let mut m = Mount::try_parse_from(args).unwrap().a;
            apply_options(&mut m).map(|()| (m.uring, m.uring_poll))
        };
        assert_eq!(
            parse(&["mount", "/mnt"]).unwrap(),
            (UringWish::Default, None)
        );
        assert_eq!(
            parse(&["mount", "/mnt", "-o", "uring", "-o", "nouring"]).unwrap(),
            (UringWish::Off, None)
        );
        assert_eq!(
            parse(&["mount", "/mnt", "-o", "nouring,uring_poll=50"]).unwrap(),
            (UringWish::Asked, Some(std::time::Duration::from_micros(50)))
        );
        assert!(parse(&["mount", "/mnt", "-o", "uring_poll=soon"]).is_err());
        // Discards: on unless told otherwise.
        let discard = |args: &[&str]| {
            let mut m = Mount::try_parse_from(args).unwrap().a;
            apply_options(&mut m).map(|()| m.discard).unwrap()
        };
        assert!(discard(&["mount", "/mnt"]));
        assert!(!discard(&["mount", "/mnt", "-o", "nodiscard"]));
        assert!(discard(&["mount", "/mnt", "-o", "nodiscard,discard"]));
        // Every generic mount(8) option is taken; the kernel's go to the mount.
        let flags = |args: &[&str]| {
            let mut m = Mount::try_parse_from(args).unwrap().a;
            apply_options(&mut m).map(|()| m.flags)
        };
        let f = flags(&[
            "mount",
            "/mnt",
            "-o",
            "ro,nosuid,nodev,noexec,sync,dirsync,nodiratime,strictatime,lazytime,defaults,nofail,x-systemd.automount",
        ])
        .unwrap();
        assert!(f.read_only && f.nosuid && f.nodev && f.noexec && f.sync && f.dirsync);
        assert!(f.nodiratime && f.lazytime && !f.remount);
        assert_eq!(f.atime, ptsd_fs::fuse::Atime::Strictatime);
        let f = flags(&["mount", "/mnt", "-o", "remount,ro", "-o", "rw,noatime"]).unwrap();
        assert!(f.remount && !f.read_only);
        assert_eq!(f.atime, ptsd_fs::fuse::Atime::Noatime);
        assert_eq!(
            flags(&["mount", "/mnt"]).unwrap().atime,
            ptsd_fs::fuse::Atime::Relatime
        );
        assert!(flags(&["mount", "/mnt", "-o", "ro=1"]).is_err());
        // What mount(8) passes on a remount: /proc/mounts' options too.
        let f = flags(&[
            "mount",
            "/mnt",
            "-o",
            "remount,ro,user_id=0,group_id=0,default_permissions,allow_other",
        ])
        .unwrap();
        assert!(f.remount && f.read_only);
        assert!(flags(&["mount", "/mnt", "-o", "nosuchoption"]).is_err());
        // Write-only opens bypass the page cache unless told otherwise.
        let direct = |args: &[&str]| {
            let mut m = Mount::try_parse_from(args).unwrap().a;
            apply_options(&mut m).map(|()| m.direct_writes).unwrap()
        };
        assert!(direct(&["mount", "/mnt"]));
        assert!(!direct(&["mount", "/mnt", "-o", "nodirect_writes"]));
        assert!(direct(&[
            "mount",
            "/mnt",
            "-o",
            "nodirect_writes,direct_writes"
        ]));
        // Commit windows unless turned off.
        let window = |args: &[&str]| {
            let mut m = Mount::try_parse_from(args).unwrap().a;
            apply_options(&mut m).map(|()| m.commit_window).unwrap()
        };
        assert!(window(&["mount", "/mnt"]));
        assert!(!window(&["mount", "/mnt", "-o", "nocommit_window"]));
        assert!(window(&[
            "mount",
            "/mnt",
            "-o",
            "nocommit_window,commit_window"
        ]));
        assert!(!window(&[
            "mount",
            "/mnt",
            "-o",
            "commit_window,nocommit_window"
        ]));
    }
}
