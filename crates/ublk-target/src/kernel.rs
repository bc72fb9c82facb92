// Over 800 lines: one libublk device, its queue threads and both data paths (shared buffer and user copy) share the setup.
//! The kernel side: a libublk device whose queue threads run
//! [`crate::engine::serve`] over the real ublk queue.
//!
//! Everything libublk-specific lives here; the request path itself never
//! sees a libublk type.

use crate::backend::{Backend, IoBufPtr};
use crate::engine::{
    serve, Clock, Engine, EngineConfig, Incoming, QueueDown, QueueIo, QueueSide, Shared, Waker,
};
use crate::request::RawDesc;
use crate::spec::DeviceSpec;
use crate::stats::{OpStats, StatsReport};
use crate::usercopy::UserCopy;
use crate::zoned::ZoneGeometry;
use libublk::ctrl::{UblkCtrl, UblkCtrlBuilder};
use libublk::helpers::IoBuf;
use libublk::io::{BufDescList, UblkDev, UblkIOCtx, UblkQueue};
use libublk::{BufDesc, UblkFlags, UblkIORes};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The ublk control node; its absence means no driver.
pub const CONTROL_PATH: &str = "/dev/ublk-control";

/// Where the daemon keeps its pid and stats files.
pub const RUN_DIR: &str = "/run/ptsd-ublk";

/// What can go wrong talking to the kernel.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    /// The kernel has no ublk driver (no /dev/ublk-control).
    #[error("this kernel has no ublk driver ({CONTROL_PATH} is missing): modprobe ublk_drv, or build with CONFIG_BLK_DEV_UBLK")]
    NoDriver,
    /// A ublk control or queue command failed.
    #[error("ublk device {id}: {what} failed{}", .errno.map(|n| format!(" (errno {n})")).unwrap_or_default())]
    Ublk {
        /// The device.
        id: i32,
        /// The command.
        what: &'static str,
        /// The errno libublk's error carries (its message leaves it out).
        errno: Option<i32>,
        /// libublk's error.
        #[source]
        source: libublk::UblkError,
    },
    /// A device id below -1.
    #[error("invalid device id {0}")]
    BadId(i32),
    /// No ublk device has this id.
    #[error("no such ublk device {0} (`ptsd ublk list` shows the devices)")]
    NoSuchDevice(i32),
    /// Recovery asked for a device whose daemon is alive.
    #[error("device {id} is live (served by pid {pid}): only a device whose daemon died can be recovered")]
    Live {
        /// The device.
        id: i32,
        /// Its daemon.
        pid: i32,
    },
    /// Recovery asked for a device that is not quiesced.
    #[error("device {id} is {state}, not quiesced: nothing to recover (delete it with `ptsd ublk del {id}`)")]
    NotQuiesced {
        /// The device.
        id: i32,
        /// Its state ("live", "dead"...).
        state: String,
    },
    /// The device was created without user recovery.
    #[error("device {0} was created without UBLK_F_USER_RECOVERY: it cannot be recovered")]
    NoRecoveryFlag(i32),
    /// The device's data lived in the dead daemon's memory.
    #[error("device {id} keeps its data in the daemon's memory ({what}): the data died with the daemon, nothing to recover; delete it with `ptsd ublk del {id}`")]
    RamBacked {
        /// The device.
        id: i32,
        /// What kind of RAM device.
        what: &'static str,
    },
    /// The driver cannot serve a zoned device.
    #[error("this kernel's ublk driver has no zoned support (UBLK_F_ZONED with UBLK_F_USER_COPY needs Linux 6.6+ built with CONFIG_BLK_DEV_ZONED)")]
    NoZoned,
    /// The device carries no ptsd description (not made by `ptsd ublk add`).
    #[error("device {0} has no ptsd device description (not created by ptsd ublk add?)")]
    NoSpec(i32),
    /// A file operation failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

fn ublk_err(id: i32, what: &'static str) -> impl FnOnce(libublk::UblkError) -> KernelError {
    move |e| KernelError::Ublk {
        id,
        what,
        errno: errno_of(&e),
        source: e,
    }
}

/// The errno a libublk error carries, if any.
fn errno_of(e: &libublk::UblkError) -> Option<i32> {
    match e {
        libublk::UblkError::UringIOError(n) | libublk::UblkError::OtherError(n) => Some(-n),
        libublk::UblkError::IOError(io) => io.raw_os_error(),
        _ => None,
    }
}

/// Open the control of an existing device: "no such device" for ENODEV.
fn open_existing(id: i32) -> Result<UblkCtrl, KernelError> {
    if id < 0 {
        return Err(KernelError::BadId(id));
    }
    UblkCtrl::new_simple(id).map_err(|e| match errno_of(&e) {
        Some(libc::ENODEV) | Some(libc::ENOENT) => KernelError::NoSuchDevice(id),
        _ => ublk_err(id, "open")(e),
    })
}

/// A negative result libublk returned as `Ok`.
fn check_result(id: i32, what: &'static str, r: i32) -> Result<(), KernelError> {
    if r >= 0 {
        return Ok(());
    }
    Err(KernelError::Ublk {
        id,
        what,
        errno: Some(-r),
        source: libublk::UblkError::IOError(std::io::Error::from_raw_os_error(-r)),
    })
}

/// What `recover` needs of device `id`, after checking that it can be
/// recovered: it exists, is ours, its daemon died (quiesced), it was
/// created with recovery, and its data outlives a daemon.
pub fn recoverable(
    id: i32,
) -> Result<(DeviceSpec, libublk::sys::ublksrv_ctrl_dev_info), KernelError> {
    check_driver()?;
    let ctrl = open_existing(id)?;
    let info = ctrl.dev_info();
    let state = u32::from(info.state);
    if state == libublk::sys::UBLK_S_DEV_LIVE {
        return Err(KernelError::Live {
            id,
            pid: info.ublksrv_pid,
        });
    }
    let spec = spec_of(&ctrl).ok_or(KernelError::NoSpec(id))?;
    if let Some(what) = spec.ram_backed() {
        return Err(KernelError::RamBacked { id, what });
    }
    if state != libublk::sys::UBLK_S_DEV_QUIESCED {
        return Err(KernelError::NotQuiesced {
            id,
            state: state_name(info.state),
        });
    }
    if info.flags & u64::from(libublk::sys::UBLK_F_USER_RECOVERY) == 0 {
        return Err(KernelError::NoRecoveryFlag(id));
    }
    Ok((spec, info))
}

fn spec_of(ctrl: &UblkCtrl) -> Option<DeviceSpec> {
    ctrl.get_target_data_from_json()
        .and_then(|v| v.get("ptsd").cloned())
        .and_then(|v| serde_json::from_value(v).ok())
}

/// Fail with [`KernelError::NoDriver`] unless the ublk driver is there.
pub fn check_driver() -> Result<(), KernelError> {
    if Path::new(CONTROL_PATH).exists() {
        Ok(())
    } else {
        Err(KernelError::NoDriver)
    }
}

/// Driver feature bits (`UBLK_F_*`), if the driver answers.
pub fn driver_features() -> Option<u64> {
    UblkCtrl::get_features()
}

/// Mark the calling thread as one that writes back for a block device, so
/// memory reclaim never waits on the I/O it is itself serving.
pub fn set_io_flusher() {
    const PR_SET_IO_FLUSHER: libc::c_int = 57;
    // SAFETY: prctl with integer arguments only; failure is harmless.
    let rc = unsafe { libc::prctl(PR_SET_IO_FLUSHER, 1, 0, 0, 0) };
    if rc != 0 {
        tracing::debug!(err = %std::io::Error::last_os_error(), "PR_SET_IO_FLUSHER refused");
    }
}

/// Detach the daemon from where it was started: its working directory
/// could be on a file system mounted on a ublk device, which the daemon
/// would then keep busy (`umount` fails with EBUSY). The daemon stays in its
/// caller's mount namespace on purpose: a namespace of its own would hold a
/// copy of every mount that exists when it starts — file systems on other
/// (or, after `recover`, its own) ublk devices — and keep them alive after
/// the user unmounts them.
pub fn leave_working_directory() -> std::io::Result<()> {
    std::env::set_current_dir("/")
}

/// Queues a device may have: one per CPU at most (the driver silently
/// caps more), and never more than the driver's own limit.
pub fn max_queues() -> u16 {
    // SAFETY: sysconf with a constant name has no preconditions.
    let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
    let hard = libublk::sys::UBLK_MAX_NR_QUEUES;
    u16::try_from(cpus.clamp(1, i64::from(hard))).unwrap_or(u16::MAX)
}

/// Tags per queue the driver accepts.
pub const MAX_DEPTH: u16 = libublk::sys::UBLK_MAX_QUEUE_DEPTH as u16;

/// Shape of a new device.
#[derive(Clone, Debug)]
pub struct DeviceOptions {
    /// Device id, or -1 to let the driver pick.
    pub id: i32,
    /// Hardware queues (one thread each).
    pub queues: u16,
    /// Requests in flight per queue.
    pub depth: u16,
    /// Largest request, bytes.
    pub io_buf_bytes: u32,
    /// The request path to build.
    pub spec: DeviceSpec,
}

/// What the caller learns once the device is live.
#[derive(Clone, Debug)]
pub struct Started {
    /// The device's id.
    pub id: i32,
    /// Its block device node (`/dev/ublkbN`).
    pub bdev: String,
    /// Whether it was created with user recovery.
    pub recovery: bool,
}

const USER_DATA_TARGET: u64 = 1 << 63;

/// The kernel's ublk queue, seen through [`QueueIo`].
struct KernelQueue<'a> {
    q: &'a UblkQueue<'a>,
    bufs: &'a [IoBuf<u8>],
    /// The user-copy data path (zoned devices): data moves through the
    /// character device, and each tag remembers whether its request's
    /// data goes back to the kernel (a read or a zone report: its bytes).
    user_copy: Option<UserCopy>,
    copy_out: Vec<bool>,
    efd: Option<OwnedFd>,
    /// The eventfd read's 8-byte target; leaked (see `new`).
    efd_buf: *mut u64,
}

impl<'a> KernelQueue<'a> {
    fn new(
        q: &'a UblkQueue<'a>,
        bufs: &'a [IoBuf<u8>],
        wake: bool,
        user_copy: Option<UserCopy>,
    ) -> std::io::Result<Self> {
        let efd = if wake {
            // SAFETY: eventfd with constant flags; the fd is owned below.
            let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // SAFETY: `fd` is a fresh descriptor nobody else owns.
            Some(unsafe { OwnedFd::from_raw_fd(fd) })
        } else {
            None
        };
        // Leaked on purpose: an eventfd read may still be queued in the ring
        // when the queue goes down, and the ring outlives this struct.
        let efd_buf = Box::into_raw(Box::new(0u64));
        let kq = KernelQueue {
            q,
            bufs,
            user_copy,
            copy_out: vec![false; bufs.len()],
            efd,
            efd_buf,
        };
        kq.arm_wake()?;
        Ok(kq)
    }

    fn waker(&self) -> Option<Arc<dyn Waker>> {
        let fd = self.efd.as_ref()?.try_clone().ok()?;
        Some(Arc::new(EventFdWaker(fd)))
    }

    /// Keep one read of the eventfd queued, so a blocking wait on the ring
    /// also ends when the engine signals completions.
    fn arm_wake(&self) -> std::io::Result<()> {
        let Some(efd) = &self.efd else { return Ok(()) };
        let sqe = io_uring::opcode::Read::new(
            io_uring::types::Fd(efd.as_raw_fd()),
            self.efd_buf as *mut u8,
            8,
        )
        .build()
        .user_data(UblkIOCtx::build_user_data(0, 0, 0, true));
        self.q
            .ublk_submit_sqe_sync(sqe)
            .map_err(std::io::Error::other)
    }
}

impl QueueIo for KernelQueue<'_> {
    fn fetch(&mut self, wait: bool, out: &mut Vec<Incoming>) -> Result<(), QueueDown> {
        let q = self.q;
        let mut rearm = false;
        let first = out.len();
        let res = q.flush_and_wake_io_tasks(
            |user_data, cqe, _last| {
                if user_data & USER_DATA_TARGET != 0 {
                    rearm = true;
                    return;
                }
                // Only a successful fetch carries a request; an aborted
                // command means the queue is going down.
                if cqe.result() != libublk::sys::UBLK_IO_RES_OK as i32 {
                    return;
                }
                let tag = UblkIOCtx::user_data_to_tag(user_data) as u16;
                let iod = q.get_iod(tag);
                out.push(Incoming {
                    tag,
                    desc: RawDesc {
                        op_flags: iod.op_flags,
                        nr_sectors: iod.nr_sectors,
                        start_sector: iod.start_sector,
                    },
                });
            },
            usize::from(wait),
        );
        if rearm {
            if let Err(e) = self.arm_wake() {
                tracing::error!(error = %e, "cannot re-arm the queue's wake-up");
            }
        }
        if self.user_copy.is_some() {
            self.copy_requests_in(out, first);
        }
        res.map(|_| ()).map_err(|_| QueueDown)
    }

    fn buffer(&mut self, tag: u16) -> IoBufPtr {
        match self.bufs.get(tag as usize) {
            // SAFETY: libublk allocated this buffer for `tag`; it lives until
            // the queue thread returns, which `serve` delays until no
            // request is in flight; the kernel does not touch it between
            // handing us the tag and our commit.
            Some(b) => unsafe { IoBufPtr::new(b.as_mut_ptr(), b.len()) },
            None => IoBufPtr::NONE,
        }
    }

    fn complete(&mut self, tag: u16, result: i32, append_sector: Option<u64>) {
        let Some(buf) = self.bufs.get(tag as usize) else {
            return;
        };
        let mut result = result;
        let desc = match &self.user_copy {
            None => BufDesc::Slice(buf.as_slice()),
            Some(uc) => {
                let out = std::mem::take(&mut self.copy_out[tag as usize]);
                if out && result > 0 {
                    let data = &buf.as_slice()[..(result as usize).min(buf.len())];
                    if let Err(e) = uc.copy_out(tag, data) {
                        tracing::error!(tag, error = %e, "user copy to the kernel failed");
                        result = -libc::EIO;
                    }
                }
                match append_sector {
                    Some(sector) if result >= 0 => BufDesc::ZonedAppendLba(sector),
                    _ => BufDesc::Slice(&[]),
                }
            }
        };
        if let Err(e) = self
            .q
            .complete_io_cmd_unified(tag, desc, Ok(UblkIORes::Result(result)))
        {
            tracing::error!(tag, error = %e, "commit failed");
        }
    }
}

impl KernelQueue<'_> {
    /// User copy: fetch the data of the writes among `out[first..]` into
    /// their tags' buffers, and note which requests give data back. A
    /// request whose data cannot be fetched completes with EIO here.
    fn copy_requests_in(&mut self, out: &mut Vec<Incoming>, first: usize) {
        let mut i = first;
        while i < out.len() {
            let inc = out[i];
            let t = inc.tag as usize;
            let op = inc.desc.op();
            let (Some(uc), Some(buf)) = (&self.user_copy, self.bufs.get(t)) else {
                i += 1;
                continue;
            };
            self.copy_out[t] = matches!(
                op,
                crate::request::op::READ | crate::request::op::REPORT_ZONES
            );
            let fetch = matches!(
                op,
                crate::request::op::WRITE | crate::request::op::ZONE_APPEND
            );
            let bytes = u64::from(inc.desc.nr_sectors) * crate::request::SECTOR;
            // An oversized request is refused by `decode`; copy nothing.
            if fetch && bytes <= buf.len() as u64 && bytes > 0 {
                // SAFETY: the kernel just handed us this tag; nothing else
                // uses its buffer until we hand the request to the engine.
                let dst =
                    unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr(), bytes as usize) };
                if let Err(e) = uc.copy_in(inc.tag, dst) {
                    tracing::error!(tag = inc.tag, error = %e, "user copy from the kernel failed");
                    out.remove(i);
                    self.complete(inc.tag, -libc::EIO, None);
                    continue;
                }
            }
            i += 1;
        }
    }
}

struct EventFdWaker(OwnedFd);

impl Waker for EventFdWaker {
    fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid u64 to an eventfd we own.
        unsafe {
            libc::write(
                self.0.as_raw_fd(),
                &one as *const u64 as *const libc::c_void,
                8,
            );
        }
    }
}

fn queue_thread(qid: u16, dev: &UblkDev, shared: Arc<Shared>) {
    set_io_flusher();
    let bufs = dev.alloc_queue_io_bufs();
    let user_copy = dev.dev_info.flags & u64::from(libublk::sys::UBLK_F_USER_COPY) != 0;
    let uc = if user_copy {
        // SAFETY: libublk keeps the character device open in `tgt.fds[0]`
        // for the device's life; we only duplicate it.
        let fd = unsafe { libc::dup(dev.tgt.fds[0]) };
        if fd < 0 {
            tracing::error!(qid, error = %std::io::Error::last_os_error(), "cannot duplicate the character device");
            return;
        }
        // SAFETY: `fd` is a fresh descriptor nobody else owns.
        let file = unsafe { std::fs::File::from_raw_fd(fd) };
        Some(UserCopy::new(file, qid))
    } else {
        None
    };
    let fetch_bufs = if user_copy { None } else { Some(&bufs) };
    let queue = match UblkQueue::new(qid, dev)
        .and_then(|q| q.submit_fetch_commands_unified(BufDescList::Slices(fetch_bufs)))
    {
        Ok(q) => q,
        Err(e) => {
            tracing::error!(qid, error = %e, "queue setup failed");
            return;
        }
    };
    let poll = shared.config().poll;
    let mut kq = match KernelQueue::new(&queue, &bufs, !poll, uc) {
        Ok(kq) => kq,
        Err(e) => {
            tracing::error!(qid, error = %e, "queue wake-up setup failed");
            return;
        }
    };
    if let Some(w) = kq.waker() {
        shared.set_waker(qid, w);
    }
    let mut side = QueueSide::new(shared, qid);
    serve(&mut kq, &mut side);
}

fn set_params(
    dev: &mut UblkDev,
    geo_bs: u32,
    num_blocks: u64,
    zones: Option<ZoneGeometry>,
    spec: &DeviceSpec,
) {
    let shift = geo_bs.trailing_zeros() as u8;
    let bytes = num_blocks * u64::from(geo_bs);
    dev.tgt.dev_size = bytes;
    dev.tgt.params = libublk::sys::ublk_params {
        types: libublk::sys::UBLK_PARAM_TYPE_BASIC | libublk::sys::UBLK_PARAM_TYPE_DISCARD,
        basic: libublk::sys::ublk_param_basic {
            // A volatile cache makes the kernel send FLUSH, which the
            // backend turns into a durable flush.
            attrs: libublk::sys::UBLK_ATTR_VOLATILE_CACHE,
            logical_bs_shift: shift,
            physical_bs_shift: shift,
            io_opt_shift: shift,
            io_min_shift: shift,
            max_sectors: dev.dev_info.max_io_buf_bytes >> 9,
            dev_sectors: bytes >> 9,
            ..Default::default()
        },
        discard: libublk::sys::ublk_param_discard {
            discard_granularity: geo_bs,
            max_discard_sectors: u32::MAX >> 9,
            // Some backends write real zeroes: keep each request to one
            // I/O buffer's worth.
            max_write_zeroes_sectors: dev.dev_info.max_io_buf_bytes >> 9,
            max_discard_segments: 1,
            ..Default::default()
        },
        ..Default::default()
    };
    if let Some(z) = zones {
        // Host-managed zoned: zone size as the chunk, the zone limits, no
        // discard (reclaim is by zone reset).
        let spb = geo_bs >> 9;
        let p = &mut dev.tgt.params;
        p.types = libublk::sys::UBLK_PARAM_TYPE_BASIC | libublk::sys::UBLK_PARAM_TYPE_ZONED;
        p.basic.chunk_sectors = u32::try_from(z.zone_blocks * u64::from(spb)).unwrap_or(u32::MAX);
        p.discard = Default::default();
        p.zoned = libublk::sys::ublk_param_zoned {
            max_open_zones: z.max_open,
            max_active_zones: z.max_active,
            max_zone_append_sectors: (z.max_append_blocks * spb).min(p.basic.max_sectors),
            ..Default::default()
        };
    }
    dev.set_target_json(serde_json::json!({ "ptsd": spec }));
}

/// Stats file of device `id`.
pub fn stats_path(id: i32) -> PathBuf {
    Path::new(RUN_DIR).join(format!("{id}.stats.json"))
}

/// Pid file of device `id`'s daemon.
pub fn pid_path(id: i32) -> PathBuf {
    Path::new(RUN_DIR).join(format!("{id}.pid"))
}

fn write_stats(id: i32, report: &StatsReport) {
    let path = stats_path(id);
    let tmp = path.with_extension("tmp");
    let ok = serde_json::to_vec_pretty(report)
        .map_err(std::io::Error::other)
        .and_then(|b| std::fs::write(&tmp, b))
        .and_then(|_| std::fs::rename(&tmp, &path));
    if let Err(e) = ok {
        tracing::warn!(error = %e, "cannot write {}", path.display());
    }
}

/// Create a device (or, with `recover`, reattach to a quiesced one) and
/// serve `backend` — built from `opts.spec` on what the caller opened and
/// holds, or any other backend, such as the emulated SSD with a custom FTL
/// (`FtlBackend::new(Ssd::new(cfg.with_scheme(..))?, timing)`) — until it
/// is deleted. `opts.spec` is what the device records for `ptsd ublk
/// list`/`recover`, so a custom FTL's own daemon recovers its devices. `on_started` runs once it is live. Returns
/// the latency statistics of the whole run.
pub fn run(
    opts: &DeviceOptions,
    recover: bool,
    backend: Box<dyn Backend>,
    on_started: impl FnOnce(&Started) + Send + Sync + 'static,
) -> Result<OpStats, KernelError> {
    check_driver()?;
    let features = driver_features().unwrap_or(0);
    let recovery = features & u64::from(libublk::sys::UBLK_F_USER_RECOVERY) != 0;
    // A device whose data outlives its daemon is kept (quiesced) when the
    // daemon dies, and the requests in flight then are requeued and handed
    // to the next daemon instead of failing with EIO. A RAM-backed device's
    // data dies with the daemon: the device goes with it (its I/O fails at
    // once rather than hanging for a recovery that cannot be).
    let keep = recovery && opts.spec.ram_backed().is_none();
    let reissue = features & u64::from(libublk::sys::UBLK_F_USER_RECOVERY_REISSUE) != 0;
    let mut ctrl_flags = match (keep, reissue) {
        (true, true) => u64::from(
            libublk::sys::UBLK_F_USER_RECOVERY | libublk::sys::UBLK_F_USER_RECOVERY_REISSUE,
        ),
        (true, false) => u64::from(libublk::sys::UBLK_F_USER_RECOVERY),
        (false, _) => 0,
    };
    let zones = backend.zone_geometry();
    if zones.is_some() {
        // The driver takes a zoned device only with user copy (zone append
        // returns its sector through the commit, which needs it).
        let need = u64::from(libublk::sys::UBLK_F_ZONED | libublk::sys::UBLK_F_USER_COPY);
        if features & need != need {
            return Err(KernelError::NoZoned);
        }
        ctrl_flags |= need;
    }
    let id = opts.id;
    let ctrl = if recover {
        // Checked first so that a live device is refused at once (the
        // kernel would answer EBUSY, which libublk retries for 30 s).
        recoverable(id)?;
        let r = open_existing(id)?
            .start_user_recover()
            .map_err(ublk_err(id, "start recovery"))?;
        check_result(id, "start recovery", r)?;
        UblkCtrlBuilder::default()
            .name("ptsd")
            .id(id)
            .ctrl_flags(ctrl_flags)
            .dev_flags(UblkFlags::UBLK_DEV_F_RECOVER_DEV)
            .build()
            .map_err(ublk_err(id, "reopen for recovery"))?
    } else {
        UblkCtrlBuilder::default()
            .name("ptsd")
            .id(id)
            .nr_queues(opts.queues)
            .depth(opts.depth)
            .io_buf_bytes(opts.io_buf_bytes)
            .ctrl_flags(ctrl_flags)
            .dev_flags(UblkFlags::UBLK_DEV_F_ADD_DEV)
            .build()
            .map_err(ublk_err(id, "add"))?
    };
    let info = ctrl.dev_info();
    let dev_id = info.dev_id as i32;
    let (bs, num_blocks) = (backend.block_size(), backend.num_blocks());
    let config = EngineConfig {
        queues: info.nr_hw_queues,
        depth: info.queue_depth,
        max_io_bytes: info.max_io_buf_bytes,
        lock_mode: opts.spec.lock_mode,
        poll: opts.spec.poll,
    };
    let (engine, shared) = Engine::new(backend, config, Clock::wall());
    let worker = std::thread::Builder::new()
        .name("ptsd-ublk-dev".into())
        .spawn(move || {
            set_io_flusher();
            engine.run()
        })?;

    std::fs::create_dir_all(RUN_DIR)?;
    std::fs::write(pid_path(dev_id), format!("{}\n", std::process::id()))?;
    let stats_shared = shared.clone();
    let stats_thread = std::thread::Builder::new()
        .name("ptsd-ublk-stats".into())
        .spawn(move || {
            while !stats_shared.is_stopping() {
                write_stats(dev_id, &stats_shared.stats().report());
                std::thread::park_timeout(Duration::from_secs(1));
            }
        })?;

    let spec = opts.spec.clone();
    let q_shared = shared.clone();
    let started = Started {
        id: dev_id,
        bdev: ctrl.get_bdev_path(),
        recovery,
    };
    let result = ctrl.run_target(
        move |dev: &mut UblkDev| {
            set_params(dev, bs, num_blocks, zones, &spec);
            Ok(())
        },
        move |qid, dev: &UblkDev| queue_thread(qid, dev, q_shared.clone()),
        move |_ctrl: &UblkCtrl| on_started(&started),
    );
    shared.stop();
    stats_thread.thread().unpark();
    let _ = stats_thread.join();
    let _ = worker.join();
    let stats = shared.stats();
    write_stats(dev_id, &stats.report());
    // Only our own: a failed start must not take a live daemon's file.
    let ours = std::fs::read_to_string(pid_path(dev_id))
        .is_ok_and(|p| p.trim() == std::process::id().to_string());
    if ours {
        let _ = std::fs::remove_file(pid_path(dev_id));
    }
    result.map_err(ublk_err(dev_id, "serve"))?;
    Ok(stats)
}

/// Read back the [`DeviceSpec`] stored with device `id`.
pub fn stored_spec(id: i32) -> Result<(DeviceSpec, UblkCtrl), KernelError> {
    check_driver()?;
    let ctrl = open_existing(id)?;
    let spec = spec_of(&ctrl).ok_or(KernelError::NoSpec(id))?;
    Ok((spec, ctrl))
}

/// One device as `ptsd ublk list` shows it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct DeviceSummary {
    /// The device's id.
    pub id: i32,
    /// Its state ("live", "quiesced", "dead"...).
    pub state: String,
    /// Capacity.
    pub bytes: u64,
    /// Hardware queues.
    pub queues: u16,
    /// Requests in flight per queue.
    pub depth: u16,
    /// The serving daemon's pid as the driver last recorded it.
    pub daemon_pid: i32,
    /// Its ptsd description, when it has one.
    pub spec: Option<DeviceSpec>,
}

fn state_name(state: u16) -> String {
    match u32::from(state) {
        libublk::sys::UBLK_S_DEV_DEAD => "dead".into(),
        libublk::sys::UBLK_S_DEV_LIVE => "live".into(),
        libublk::sys::UBLK_S_DEV_QUIESCED => "quiesced".into(),
        other => format!("state {other}"),
    }
}

/// Every ublk device on the system (ours described by their spec).
pub fn list() -> Result<Vec<DeviceSummary>, KernelError> {
    check_driver()?;
    let ids = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let collect = ids.clone();
    UblkCtrl::for_each_dev_id(move |id| {
        if let Ok(mut v) = collect.lock() {
            v.push(id as i32);
        }
    });
    let mut ids = ids.lock().map(|v| v.clone()).unwrap_or_default();
    ids.sort_unstable();
    let mut out = Vec::new();
    for id in ids {
        let Ok(ctrl) = UblkCtrl::new_simple(id) else {
            continue;
        };
        let info = ctrl.dev_info();
        let spec = spec_of(&ctrl);
        let bytes = ctrl.get_target_from_json().map(|t| t.dev_size).unwrap_or(0);
        out.push(DeviceSummary {
            id,
            state: state_name(info.state),
            bytes,
            queues: info.nr_hw_queues,
            depth: info.queue_depth,
            daemon_pid: info.ublksrv_pid,
            spec,
        });
    }
    Ok(out)
}

/// Delete device `id` (its daemon, if alive, sees its queues go down and
/// exits).
pub fn delete(id: i32) -> Result<(), KernelError> {
    check_driver()?;
    let ctrl = open_existing(id)?;
    let daemon = std::fs::read_to_string(pid_path(id))
        .ok()
        .and_then(|s| s.trim().parse::<libc::pid_t>().ok());
    ctrl.del_dev().map_err(ublk_err(id, "delete"))?;
    // Let the daemon finish (final stats, pid file) so the id can be reused
    // at once.
    if let Some(pid) = daemon {
        for _ in 0..100 {
            // SAFETY: signal 0 only checks that the process exists.
            if unsafe { libc::kill(pid, 0) } != 0 || !pid_path(id).exists() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Ok(())
}

/// The latest stats a device's daemon published.
pub fn read_stats(id: i32) -> Result<StatsReport, KernelError> {
    let bytes = std::fs::read(stats_path(id))?;
    serde_json::from_slice(&bytes).map_err(|e| KernelError::Io(std::io::Error::other(e)))
}
