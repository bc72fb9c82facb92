//! Permission semantics of issue 45: set-id bits dropped where Linux drops
//! them, and POSIX ACLs.

use std::sync::{Arc, Mutex};

use ptsd_blockdev::{BlockDevice, MemDevice};
use ptsd_fs::{mkfs, Caller, DirectStore, FileSystem, MkfsOptions, SetAttr};

const ROOT: Caller = Caller { uid: 0, gid: 0 };

fn fresh(blocks: u64) -> (Arc<dyn BlockDevice>, FileSystem) {
    let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(4096, blocks).unwrap());
    let store = Arc::new(DirectStore::new(dev.clone()).unwrap());
    mkfs(&*store, &MkfsOptions::default()).unwrap();
    (dev, FileSystem::mount(store).unwrap())
}

fn mode(fs: &FileSystem, ino: u64) -> u32 {
    fs.getattr(ino).unwrap().mode & 0o7777
}

fn chmod(fs: &FileSystem, ino: u64, m: u32) {
    fs.setattr(
        ino,
        SetAttr {
            mode: Some(m),
            ..Default::default()
        },
    )
    .unwrap();
}

/// Item 4: every fallocate mode by a caller without CAP_FSETID drops
/// setuid (and setgid when group-executable) like a write, and tells the
/// transport the kernel's cached mode is stale; a privileged caller keeps
/// them; setgid without group-exec stays.
#[test]
fn fallocate_of_every_mode_drops_set_id_bits_for_the_unprivileged() {
    let (_dev, fs) = fresh(4096);
    let stale = Arc::new(Mutex::new(Vec::new()));
    let s = stale.clone();
    fs.set_attr_invalidator(Box::new(move |ino| s.lock().unwrap().push(ino)));
    let f = fs.create(fs.root(), b"f", 0o644, ROOT).unwrap().ino;
    fs.write_as(f, 0, &vec![1u8; 64 << 10], false).unwrap();
    let keep = libc::FALLOC_FL_KEEP_SIZE;
    let modes = [
        0,
        keep,
        libc::FALLOC_FL_PUNCH_HOLE | keep,
        libc::FALLOC_FL_ZERO_RANGE,
        libc::FALLOC_FL_ZERO_RANGE | keep,
    ];
    for m in modes {
        chmod(&fs, f, 0o6755);
        stale.lock().unwrap().clear();
        // Privileged: kept, nothing to invalidate.
        fs.fallocate_as(f, 4096, 8192, m, false).unwrap();
        assert_eq!(mode(&fs, f), 0o6755, "mode {m:#x} by root");
        assert!(stale.lock().unwrap().is_empty());
        fs.fallocate_as(f, 4096, 8192, m, true).unwrap();
        assert_eq!(mode(&fs, f), 0o0755, "fallocate mode {m:#x}");
        assert_eq!(*stale.lock().unwrap(), [f], "mode {m:#x} invalidates");
        // setgid without group execute marks mandatory locking: kept.
        chmod(&fs, f, 0o2644);
        stale.lock().unwrap().clear();
        fs.fallocate(f, 0, 4096, m).unwrap();
        assert_eq!(mode(&fs, f), 0o2644);
        assert!(
            stale.lock().unwrap().is_empty(),
            "unchanged: no invalidation"
        );
    }
    // A direct write by the unprivileged drops them and invalidates too.
    chmod(&fs, f, 0o6755);
    stale.lock().unwrap().clear();
    fs.write_as(f, 0, b"x", true).unwrap();
    assert_eq!(mode(&fs, f), 0o0755);
    assert_eq!(*stale.lock().unwrap(), [f]);
    fs.release(f).unwrap();
}
