//! `mkfs` and `fsck` of an unmounted stack, under the same locks and the
//! same journal decision as [`Stack::open`](crate::Stack::open).

use std::os::unix::fs::FileTypeExt;
use std::sync::Arc;
use std::time::Duration;

use ptsd_blockdev::FileDevice;
use ptsd_fs::format::Superblock;
use ptsd_fs::{ChecksumStore, DirectStore, MkfsOptions, Store};

use crate::device::{self, DeviceSpec, OpenHow, Opened};
use crate::error::StackError;
use crate::journal::{self, Place, Plan, LOST_NOTE};
use crate::lock::{Holder, LockMode, PathLock};
use crate::stack::{direct, repair_device, StackSpec};

/// What [`mkfs`] made.
#[derive(Debug)]
pub struct Formatted {
    /// The new file system's superblock.
    pub superblock: Superblock,
    /// The device, for messages.
    pub device: String,
}

/// Write a new, empty file system on `device`, holding it exclusively
/// meanwhile (a mounted image is refused). With `size`, an image file is
/// created (or replaced) first. The root directory belongs to root; see
/// [`mkfs_with`] for another owner.
pub fn mkfs(
    device: &DeviceSpec,
    size: Option<u64>,
    lock_wait: Duration,
) -> Result<Formatted, StackError> {
    mkfs_with(device, size, lock_wait, &MkfsOptions::default())
}

/// [`mkfs`] with the file system's options, e.g. the root directory's
/// owner (what `ptsd mkfs --root-owner` sets).
///
/// ```
/// use std::time::Duration;
/// use ptsd_fs::MkfsOptions;
/// use ptsd_stack::{mkfs_with, DeviceSpec};
///
/// let dir = tempfile::tempdir().unwrap();
/// let img = dir.path().join("fs.img");
/// let opts = MkfsOptions { root_owner: (1000, 1000), ..Default::default() };
/// let made = mkfs_with(&DeviceSpec::Path(img), Some(16 << 20), Duration::ZERO, &opts).unwrap();
/// assert!(made.device.ends_with("fs.img"));
/// ```
pub fn mkfs_with(
    device: &DeviceSpec,
    size: Option<u64>,
    lock_wait: Duration,
    options: &MkfsOptions,
) -> Result<Formatted, StackError> {
    let opened = match (device, size) {
        (DeviceSpec::Path(p), Some(bytes)) => {
            if std::fs::metadata(p).is_ok_and(|m| m.file_type().is_block_device()) {
                return Err(StackError::Invalid(format!(
                    "--size only applies to image files; {} is a block device",
                    p.display()
                )));
            }
            let lock = PathLock::acquire(p, LockMode::Exclusive, Holder::Mkfs, true, lock_wait)?;
            let dev =
                FileDevice::create(p, 4096, bytes / 4096).map_err(|source| StackError::Device {
                    what: "creating image",
                    device: p.display().to_string(),
                    source,
                })?;
            Opened {
                dev: Arc::new(dev),
                ssd: None,
                desc: p.display().to_string(),
                fresh: false,
                source: p.canonicalize().ok(),
                _lock: Some(lock),
            }
        }
        (_, Some(_)) => {
            return Err(StackError::Invalid(
                "a size only applies to an image file".into(),
            ))
        }
        (spec, None) => device::open(
            spec,
            &OpenHow {
                mode: LockMode::Exclusive,
                holder: Holder::Mkfs,
                create: true,
                wait: lock_wait,
                uncached_image: false,
            },
        )?,
    };
    let desc = opened.desc.clone();
    let direct: Arc<dyn Store> =
        Arc::new(
            DirectStore::new(opened.dev.clone()).map_err(|e| StackError::Fs {
                what: format!("opening {desc}"),
                source: e.into(),
            })?,
        );
    // A plain device gets block checksums (file data has no crc of its
    // own); the emulated SSD checks every page itself.
    let store: Result<Arc<dyn Store>, StackError> = if opened.ssd.is_some() {
        Ok(direct)
    } else {
        ChecksumStore::format(direct)
            .map(|c| Arc::new(c) as Arc<dyn Store>)
            .map_err(|e| StackError::Fs {
                what: format!("laying out block checksums on {desc}"),
                source: e.into(),
            })
    };
    let made = store.and_then(|store| {
        ptsd_fs::mkfs(&*store, options).map_err(|source| StackError::Fs {
            what: format!("formatting {desc}"),
            source,
        })
    });
    let shut = opened.shutdown_ssd();
    let superblock = made?;
    shut?;
    Ok(Formatted {
        superblock,
        device: desc,
    })
}

/// What [`fsck`] found and did.
#[derive(Debug)]
pub struct FsckOutcome {
    /// The check of the device (after any journal replay).
    pub report: ptsd_fs::fsck::Report,
    /// What happened to the journal, what was lost, what to do.
    pub notes: Vec<String>,
    /// The file system is clean (or was repaired) and can be mounted.
    pub clean: bool,
}

/// Check the unmounted file system `spec` names: replay its journal if it
/// was not unmounted cleanly (or say the journal is gone), check the device,
/// and with `repair` fix what is wrong and mark it clean, so that it mounts.
/// Holds the device shared (read-only check) or exclusively (repair), and
/// the journal exclusively while replaying it.
pub fn fsck(spec: &StackSpec, repair: bool) -> Result<FsckOutcome, StackError> {
    let opened = device::open(
        &spec.device,
        &OpenHow {
            mode: if repair {
                LockMode::Exclusive
            } else {
                LockMode::Shared
            },
            holder: Holder::Fsck,
            create: false,
            wait: spec.lock_wait,
            uncached_image: false,
        },
    )?;
    let res = fsck_on(spec, &opened, repair);
    let shut = opened.shutdown_ssd();
    let out = res?;
    shut?;
    Ok(out)
}

fn fsck_on(spec: &StackSpec, opened: &Opened, repair: bool) -> Result<FsckOutcome, StackError> {
    let (dev, desc) = (&opened.dev, &opened.desc);
    let sb = journal::read_superblock(dev, desc)?;
    let place = Place::locate(
        &spec.journal,
        &sb,
        Some(Holder::Fsck),
        false,
        spec.lock_wait,
    )?;
    let mut notes = Vec::new();
    let plan = journal::plan(&sb, place.present());
    match plan {
        Plan::Fresh => {}
        Plan::Replay => {
            let (j, report) = place.replay(dev.clone(), spec.journal_config.clone())?;
            j.close().map_err(|source| StackError::Journal {
                what: "checkpointing replayed journal",
                path: place.label.clone(),
                source,
            })?;
            notes.push(format!(
                "replayed journal {} ({} blocks)",
                place.label, report.replayed_blocks
            ));
        }
        Plan::Lost => notes.push(format!("{LOST_NOTE} ({})", place.label)),
    }
    let report = if repair {
        repair_device(dev, desc)?
    } else {
        let store = direct(dev, desc)?;
        ptsd_fs::fsck::check(store, false).map_err(|source| StackError::Fs {
            what: format!("checking {desc}"),
            source,
        })?
    };
    let lost_unrepaired = plan == Plan::Lost && !repair;
    if lost_unrepaired {
        notes.push(
            "not unmounted cleanly and the journal is gone: it mounts again after \
             `ptsd fsck --repair` (or `ptsd mount --discard-missing-journal`) accepts that loss"
                .into(),
        );
    }
    let clean = (report.problems.is_empty() || repair) && !lost_unrepaired;
    Ok(FsckOutcome {
        report,
        notes,
        clean,
    })
}
