//! The device under a block frontend (`ptsd ublk`): opened and recovered
//! here, under the same exclusive image lock as a mount, and handed to the
//! frontend with a [`Claim`] that keeps the lock for as long as it serves.
//!
//! ptsd-ublk may not import this crate (nor this crate ptsd-ublk): the
//! binary asks for the opened, locked device here and gives the device to
//! ptsd-ublk, keeping the [`Claim`] until the ublk device is gone.

use std::path::Path;
use std::time::Duration;

use ptsd_blockdev::{FileDevice, FileDeviceOptions};
use ptsd_ftl::{FtlConfig, Ssd, StoreKind};

use crate::error::StackError;
use crate::lock::{Holder, LockMode, PathLock};

/// An image, file or block device held exclusively: any other ptsd command
/// (mount, ublk, mkfs, fsck) is refused it, naming this holder, until this
/// is dropped.
#[derive(Debug)]
pub struct Claim {
    _lock: PathLock,
}

/// Open (formatting a new or empty image, recovering one left by a crash)
/// the emulated SSD `cfg` describes, for `holder`. A file store
/// (`StoreKind::File`) is locked exclusively first, waiting up to `wait`
/// for a holder that is finishing (one that serves a mount or a ublk device
/// is refused at once); a RAM or timing-only SSD has nothing to lock.
///
/// ```
/// use std::time::Duration;
/// use ptsd_ftl::StoreKind;
/// use ptsd_stack::{claim_ssd, small_ssd_config, Holder};
///
/// let dir = tempfile::tempdir().unwrap();
/// let mut cfg = small_ssd_config(16 << 20);
/// cfg.store = StoreKind::File { path: dir.path().join("ssd.img") };
/// let (ssd, claim) = claim_ssd(cfg.clone(), Holder::Ublk, Duration::ZERO).unwrap();
/// assert_eq!(ssd.logical_pages(), 4096);
/// let err = claim_ssd(cfg.clone(), Holder::Ublk, Duration::ZERO).err().unwrap();
/// assert!(err.to_string().contains("(ptsd ublk)"), "{err}");
/// drop((ssd, claim));
/// assert!(claim_ssd(cfg, Holder::Ublk, Duration::ZERO).is_ok());
/// ```
pub fn claim_ssd(
    cfg: FtlConfig,
    holder: Holder,
    wait: Duration,
) -> Result<(Ssd, Option<Claim>), StackError> {
    let StoreKind::File { path } = &cfg.store else {
        let ssd = Ssd::new(cfg).map_err(|source| StackError::Ssd {
            what: "creating",
            image: "in memory".into(),
            source,
        })?;
        return Ok((ssd, None));
    };
    let path = path.clone();
    let lock = PathLock::acquire(&path, LockMode::Exclusive, holder, true, wait)?;
    let empty = lock.file().metadata().map(|m| m.len() == 0).unwrap_or(true);
    // As `Ssd::open` does (plain file, the page as block), but on the
    // file this lock holds.
    let dev = if empty {
        FileDevice::create(&path, cfg.page_size, Ssd::image_blocks(&cfg, cfg.page_size))
    } else {
        FileDevice::open(&path, cfg.page_size)
    }
    .map_err(|source| StackError::Device {
        what: "opening the emulated SSD image",
        device: path.display().to_string(),
        source,
    })?;
    let ssd = Ssd::open_on(cfg, Box::new(dev)).map_err(|source| StackError::Ssd {
        what: "opening",
        image: path.display().to_string(),
        source,
    })?;
    Ok((ssd, Some(Claim { _lock: lock })))
}

/// Open the existing file or block device `path` with `block_size`-byte
/// blocks for `holder`, locked exclusively (a block device also with
/// `O_EXCL`), waiting up to `wait` as [`claim_ssd`] does.
///
/// ```
/// use std::time::Duration;
/// use ptsd_blockdev::BlockDevice;
/// use ptsd_stack::{claim_device, Holder};
///
/// let dir = tempfile::tempdir().unwrap();
/// let img = dir.path().join("disk.img");
/// std::fs::write(&img, vec![0u8; 1 << 20]).unwrap();
/// let (dev, _claim) = claim_device(&img, 4096, Holder::Ublk, Duration::ZERO).unwrap();
/// assert_eq!(dev.num_blocks(), 256);
/// assert!(claim_device(&img, 4096, Holder::Ublk, Duration::ZERO).is_err());
/// ```
pub fn claim_device(
    path: &Path,
    block_size: u32,
    holder: Holder,
    wait: Duration,
) -> Result<(FileDevice, Claim), StackError> {
    if !path.exists() {
        return Err(StackError::Invalid(format!(
            "{} does not exist",
            path.display()
        )));
    }
    let lock = PathLock::acquire(path, LockMode::Exclusive, holder, false, wait)?;
    let dev = FileDeviceOptions::new()
        .block_size(block_size)
        .open(path)
        .map_err(|source| StackError::Device {
            what: "opening device",
            device: path.display().to_string(),
            source,
        })?;
    Ok((dev, Claim { _lock: lock }))
}
