//! Who owns the root directory of a new file system: the user it is made
//! for (`StackSpec::root_owner`, `mkfs_with`), so that an unprivileged
//! user's own mount is writable by them; a later open keeps the owner.

use std::sync::Arc;
use std::time::Duration;

use ptsd_blockdev::CrashDevice;
use ptsd_fs::MkfsOptions;
use ptsd_ftl::Ssd;
use ptsd_nvjournal::CrashRegion;
use ptsd_stack::{
    invoking_user, mkfs_with, small_ssd_config, DeviceSpec, JournalSpec, Stack, StackSpec,
};

fn root_owner(stack: &Stack) -> (u32, u32) {
    let fs = stack.fs();
    let a = fs.getattr(fs.root()).unwrap();
    (a.uid, a.gid)
}

#[test]
fn a_blank_ssd_is_formatted_for_the_given_owner_and_keeps_it() {
    let cfg = small_ssd_config(16 << 20);
    let image = Arc::new(CrashDevice::new(4096, Ssd::image_blocks(&cfg, 4096)).unwrap());
    let region = CrashRegion::new(4 << 20);
    let spec = |owner: (u32, u32)| {
        let mut s = StackSpec::new(
            DeviceSpec::Ssd {
                config: Box::new(cfg.clone()),
                image: image.clone(),
            },
            JournalSpec::Region(Arc::new(region.clone())),
        );
        s.journal_config.checkpoint_interval = None;
        s.lock_wait = Duration::ZERO;
        s.root_owner = owner;
        s
    };
    assert_eq!(
        StackSpec::new(DeviceSpec::Path("x".into()), JournalSpec::File("j".into())).root_owner,
        invoking_user()
    );
    let stack = Stack::open(spec((4321, 8765))).unwrap();
    assert!(stack.info().formatted);
    assert_eq!(root_owner(&stack), (4321, 8765));
    stack.close().unwrap();
    // Opening an existing file system never changes its owner.
    let stack = Stack::open(spec((1, 1))).unwrap();
    assert!(!stack.info().formatted);
    assert_eq!(root_owner(&stack), (4321, 8765));
    stack.close().unwrap();
}

#[test]
fn mkfs_with_an_owner_on_an_image_file() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("fs.img");
    let opts = MkfsOptions {
        root_owner: (1000, 100),
        ..MkfsOptions::default()
    };
    mkfs_with(
        &DeviceSpec::Path(img.clone()),
        Some(16 << 20),
        Duration::ZERO,
        &opts,
    )
    .unwrap();
    let mut spec = StackSpec::new(
        DeviceSpec::Path(img),
        JournalSpec::File(dir.path().join("j")),
    );
    spec.journal_bytes = 8 << 20;
    spec.lock_wait = Duration::ZERO;
    let stack = Stack::open(spec).unwrap();
    assert_eq!(root_owner(&stack), (1000, 100));
    stack.close().unwrap();
}
