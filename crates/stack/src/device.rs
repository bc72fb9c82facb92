//! The device under the file system: a plain block device, an image file or
//! `/dev` node, or the emulated SSD over its persistent image.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ptsd_blockdev::{BlockDevice, FileDeviceOptions, WriteBehind};
use ptsd_ftl::{FtlConfig, Ssd, SsdDevice, StoreKind, Variant};

use crate::error::StackError;
use crate::lock::{Holder, LockMode, PathLock};

/// Bytes of the SSD image's write-outs in flight at once (two of the FTL's
/// 4 MiB batches, so one is written while the next fills).
const IMAGE_WRITE_BEHIND: usize = 8 << 20;
/// Image write batches of at least this size go out uncached: the staging
/// filled up (a stream of programs), not a sync writing a few pages.
const IMAGE_UNCACHED_BATCH: usize = 2 << 20;
/// Under a RAM journal, the newest image writes kept in the page cache.
const IMAGE_CACHE_WINDOW: u64 = 256 << 20;

/// Logical size of the embedded default device (the emulated SSD).
pub const DEFAULT_SSD_BYTES: u64 = 4 << 30;

/// Where the file system lives.
#[derive(Clone)]
pub enum DeviceSpec {
    /// A block device given as an object (a `MemDevice` or `CrashDevice` in
    /// tests). Not locked: the caller owns it.
    Device(Arc<dyn BlockDevice>),
    /// An image file or a block device node (`/dev/…`), locked while open.
    Path(PathBuf),
    /// The emulated SSD whose persistent image (data pages, OOB, map
    /// checkpoint) is on `image` — a `CrashDevice` in power-cut tests. A
    /// blank image is formatted and gets a fresh file system.
    Ssd {
        /// The SSD's geometry, timing and mapping scheme.
        config: Box<FtlConfig>,
        /// Where its persistent state lives.
        image: Arc<dyn BlockDevice>,
    },
    /// The embedded default device: the emulated SSD (PTSD mapping,
    /// [`DEFAULT_SSD_BYTES`]) whose image is `ssd.img` in this data
    /// directory, created and formatted on first use; locked while open.
    DataDir(PathBuf),
}

impl std::fmt::Debug for DeviceSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceSpec::Device(d) => write!(f, "Device({} blocks)", d.num_blocks()),
            DeviceSpec::Path(p) => write!(f, "Path({})", p.display()),
            DeviceSpec::Ssd { image, .. } => {
                write!(f, "Ssd(image of {} blocks)", image.num_blocks())
            }
            DeviceSpec::DataDir(p) => write!(f, "DataDir({})", p.display()),
        }
    }
}

/// The configuration of the embedded default SSD with its image at `img`.
pub fn default_ssd_config(img: &Path) -> FtlConfig {
    let mut cfg = FtlConfig::paper(Variant::WriteOpt, DEFAULT_SSD_BYTES);
    cfg.store = StoreKind::File {
        path: img.to_path_buf(),
    };
    cfg
}

/// An opened device with what it took to open it.
pub(crate) struct Opened {
    pub dev: Arc<dyn BlockDevice>,
    /// The emulated SSD, shut down cleanly at the end.
    pub ssd: Option<Arc<SsdDevice>>,
    /// For messages: "d.img" or "DATA/ssd.img (emulated SSD, PTSD FTL, new)".
    pub desc: String,
    /// The emulated SSD was blank and has just been formatted.
    pub fresh: bool,
    /// The locked image or device file, canonical.
    pub source: Option<PathBuf>,
    /// Held until dropped (the device is ours meanwhile).
    pub _lock: Option<PathLock>,
}

impl Opened {
    /// Shut the emulated SSD down cleanly (map checkpoint: no scan at the
    /// next open).
    pub fn shutdown_ssd(&self) -> Result<(), StackError> {
        if let Some(ssd) = &self.ssd {
            ssd.with_ssd(|s| s.shutdown())
                .map_err(|source| StackError::Ssd {
                    what: "shutting down",
                    image: self.desc.clone(),
                    source,
                })?;
        }
        Ok(())
    }
}

/// How to open a device.
pub(crate) struct OpenHow {
    pub mode: LockMode,
    /// Recorded in the lock, named to a second owner.
    pub holder: Holder,
    /// Create a missing default SSD image (mount); fsck refuses instead.
    pub create: bool,
    pub wait: Duration,
    /// Write the emulated SSD's image uncached in large batches: the
    /// journal survives a power cut, so every fsync flushes the device
    /// and whatever the image has cached must reach the disk at once.
    pub uncached_image: bool,
}

pub(crate) fn open(spec: &DeviceSpec, how: &OpenHow) -> Result<Opened, StackError> {
    match spec {
        DeviceSpec::Device(dev) => Ok(Opened {
            dev: dev.clone(),
            ssd: None,
            desc: format!("device of {} blocks", dev.num_blocks()),
            fresh: false,
            source: None,
            _lock: None,
        }),
        DeviceSpec::Path(p) => {
            if !p.exists() {
                return Err(StackError::Invalid(format!(
                    "{} does not exist",
                    p.display()
                )));
            }
            let lock = PathLock::acquire(p, how.mode, how.holder, false, how.wait)?;
            let dev = FileDeviceOptions::new()
                .block_size(4096)
                .open(p)
                .map_err(|source| StackError::Device {
                    what: "opening device",
                    device: p.display().to_string(),
                    source,
                })?;
            Ok(Opened {
                dev: Arc::new(dev),
                ssd: None,
                desc: p.display().to_string(),
                fresh: false,
                source: p.canonicalize().ok(),
                _lock: Some(lock),
            })
        }
        DeviceSpec::Ssd { config, image } => open_ssd(
            (**config).clone(),
            image.clone(),
            "emulated SSD image".into(),
            None,
        ),
        DeviceSpec::DataDir(data) => {
            let img = data.join("ssd.img");
            if !how.create && !img.exists() {
                return Err(StackError::Invalid(format!(
                    "no emulated SSD at {} (`ptsd mount` creates it on first use)",
                    img.display()
                )));
            }
            std::fs::create_dir_all(data).map_err(|source| StackError::Io {
                op: "creating data directory",
                path: data.clone(),
                source,
            })?;
            let lock = PathLock::acquire(&img, how.mode, how.holder, how.create, how.wait)?;
            let cfg = default_ssd_config(&img);
            let empty = lock.file().metadata().map(|m| m.len() == 0).unwrap_or(true);
            // The image is the emulated NAND's backing store, written one
            // page per program. Through the page cache those writes are
            // memory copies the kernel writes back in large runs; O_DIRECT
            // would make each one a device I/O (in a VM an exit per page),
            // which cost the checkpoint threads more CPU than everything
            // else. Durability is the same: the FTL's sync points fdatasync.
            // A host read of several pages reads them as one batch
            // (`Store::read_many`); through io_uring the batch's runs are
            // read in parallel, where pread would wait for each cold page in
            // turn. The FTL scatters neighbouring logical pages over chips,
            // so readahead around a page only fetches unrelated ones.
            // Under a power-loss-safe journal every fsync flushes the image,
            // so large program batches go out uncached (RWF_DONTCACHE where
            // the kernel has it): their writeback starts at once instead of
            // at the flush, and the pages are reused instead of taken fresh
            // (interleaved bench runs, ptsd-durable bulk write with fsync
            // 540-845 -> 820-1068 MB/s). Under a RAM journal only the
            // checkpoints flush, and the same change cost varmail 10-20 %
            // (its reads of lately checkpointed blocks went to the disk).
            // There the page cache keeps a window of the newest image
            // writes instead, and drops older ones once written back: new
            // writes reuse those pages, not fresh memory, which in a VM
            // costs a host fault per page (interleaved runs, tokubench
            // files/s after another mount's run: ptsd-uring 15-18 k ->
            // 23-28 k, ptsd 14-16 k -> 14-17 k; bulk write+fsync 564-748
            // -> 789-1076 MB/s; varmail within its spread).
            let opts = FileDeviceOptions::new()
                .block_size(cfg.page_size)
                .direct(false)
                .io_uring_buffered(true)
                .uncached_writes(how.uncached_image.then_some(IMAGE_UNCACHED_BATCH))
                .cache_window((!how.uncached_image).then_some(IMAGE_CACHE_WINDOW))
                .random_access(true)
                .preallocate(true);
            let dev = if empty {
                opts.create(&img, Ssd::image_blocks(&cfg, cfg.page_size))
            } else {
                opts.open(&img)
            }
            .map_err(|source| StackError::Device {
                what: "opening the emulated SSD image",
                device: img.display().to_string(),
                source,
            })?;
            // The FTL writes its staged programs out in batches of up to
            // 4 MiB while it holds the SSD's lock; the kernel's copy of a
            // batch into the page cache then happens on a thread of its
            // own, off the lock and off the request's path. Every flush
            // and other write waits for it first, a read only if it needs
            // one of the batch's pages.
            let dev = WriteBehind::new(Arc::new(dev), IMAGE_WRITE_BEHIND).map_err(|source| {
                StackError::Device {
                    what: "starting the emulated SSD image's writer",
                    device: img.display().to_string(),
                    source,
                }
            })?;
            open_ssd(cfg, Arc::new(dev), img.display().to_string(), Some(lock))
        }
    }
}

fn open_ssd(
    cfg: FtlConfig,
    image: Arc<dyn BlockDevice>,
    name: String,
    lock: Option<PathLock>,
) -> Result<Opened, StackError> {
    // Blank (first page all zeroes): Ssd::open_on formats it.
    let mut first = vec![0u8; image.block_size() as usize];
    image
        .read(0, &mut first)
        .map_err(|source| StackError::Device {
            what: "reading",
            device: name.clone(),
            source,
        })?;
    let fresh = first.iter().all(|&b| b == 0);
    let ssd = Ssd::open_on(cfg, Box::new(image.clone())).map_err(|source| StackError::Ssd {
        what: "opening",
        image: name.clone(),
        source,
    })?;
    let ssd = Arc::new(SsdDevice::virtual_time(ssd).prefetch_from(image.clone()));
    let how = if fresh { ", new" } else { "" };
    let source = lock.as_ref().and_then(|l| l.path().canonicalize().ok());
    Ok(Opened {
        dev: ssd.clone(),
        ssd: Some(ssd),
        desc: format!("{name} (emulated SSD, PTSD FTL{how})"),
        fresh,
        source,
        _lock: lock,
    })
}

/// A small emulated SSD (PTSD mapping; 2 channels × 2 chips, 32-page
/// blocks, 20 % over-provisioning) exposing `logical_bytes`: quick to open
/// and to recover in tests and fuzzing.
pub fn small_ssd_config(logical_bytes: u64) -> FtlConfig {
    let mut cfg = FtlConfig::paper(Variant::WriteOpt, logical_bytes);
    cfg.channels = 2;
    cfg.chips_per_channel = 2;
    cfg.pages_per_block = 32;
    cfg.with_logical_bytes(logical_bytes)
}
