//! The whole stack in one process: over simulated devices (emulated SSD on a
//! `CrashDevice`, journal on a `CrashRegion`) for open / close / crash /
//! recovery, and over real files for the locks and the missing journal.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ptsd_blockdev::{BlockDevice, CrashDevice};
use ptsd_fs::{Caller, FileSystem};
use ptsd_ftl::{FtlConfig, Ssd};
use ptsd_nvjournal::CrashRegion;
use ptsd_stack::{
    fsck, mkfs, small_ssd_config, DeviceSpec, JournalSpec, MissingJournal, Stack, StackError,
    StackSpec, LOST_NOTE,
};

fn ssd_cfg() -> FtlConfig {
    small_ssd_config(16 << 20)
}

fn sim_spec(image: &Arc<CrashDevice>, region: &CrashRegion) -> StackSpec {
    let mut s = StackSpec::new(
        DeviceSpec::Ssd {
            config: Box::new(ssd_cfg()),
            image: image.clone(),
        },
        JournalSpec::Region(Arc::new(region.clone())),
    );
    // Deterministic: no timer-driven checkpoints.
    s.journal_config.checkpoint_interval = None;
    s.lock_wait = Duration::ZERO;
    s
}

fn blank_image() -> Arc<CrashDevice> {
    let cfg = ssd_cfg();
    Arc::new(CrashDevice::new(4096, Ssd::image_blocks(&cfg, 4096)).unwrap())
}

fn body(n: usize, salt: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31) ^ salt).collect()
}

fn write_file(fs: &FileSystem, name: &str, data: &[u8]) {
    let f = fs
        .create(fs.root(), name.as_bytes(), 0o644, Caller::default())
        .unwrap();
    fs.write(f.ino, 0, data).unwrap();
    fs.release(f.ino).unwrap();
}

fn read_file(fs: &FileSystem, name: &str) -> Option<Vec<u8>> {
    let a = fs.lookup(fs.root(), name.as_bytes()).ok()?;
    Some(fs.read(a.ino, 0, a.size as u32 + 1).unwrap())
}

#[test]
fn open_write_close_reopen_read_back_on_simulated_devices() {
    let image = blank_image();
    let region = CrashRegion::new(4 << 20);
    let stack = Stack::open(sim_spec(&image, &region)).unwrap();
    assert!(stack.info().formatted, "a blank SSD image is formatted");
    assert_eq!(stack.info().replayed_blocks, None);
    let big = body(300_000, 7);
    write_file(stack.fs(), "big", &big);
    write_file(stack.fs(), "small", b"hello");
    stack.close().unwrap();

    // After a clean close everything is on the SSD: a zeroed journal region
    // (a new one) is fine, and nothing is replayed.
    let stack = Stack::open(sim_spec(&image, &CrashRegion::new(4 << 20))).unwrap();
    assert!(!stack.info().formatted);
    assert_eq!(stack.info().replayed_blocks, None);
    assert!(stack.info().notes.is_empty(), "{:?}", stack.info().notes);
    assert_eq!(read_file(stack.fs(), "big").unwrap(), big);
    assert_eq!(read_file(stack.fs(), "small").unwrap(), b"hello");
    stack.close().unwrap();

    let mut s = sim_spec(&image, &CrashRegion::new(4 << 20));
    s.missing_journal = MissingJournal::Refuse;
    let out = fsck(&s, false).unwrap();
    assert!(out.clean, "{:?} {:?}", out.notes, out.report.problems);
    assert_eq!(out.report.files, 2);
}

/// Power cuts at several points of a seeded workload: what was fsync'd
/// before the cut is there after `Stack::open` recovered the SSD map and
/// replayed the journal; what was not may be gone but nothing is torn; the
/// recovered stack checks clean and takes new writes.
/// `PTSD_STACK_SEED=N` runs that one seed (failures print it).
#[test]
fn crash_drops_unflushed_state_and_reopen_recovers_what_was_fsynced() {
    let seeds: Vec<u64> = match std::env::var("PTSD_STACK_SEED") {
        Ok(v) => vec![v.parse().expect("PTSD_STACK_SEED is a number")],
        Err(_) => (0..6).collect(),
    };
    for seed in seeds {
        eprintln!(
            "seed {seed}; replay: PTSD_STACK_SEED={seed} cargo test -p ptsd-stack --test stack crash_drops"
        );
        let image = blank_image();
        let region = CrashRegion::new(4 << 20);
        let stack = Stack::open(sim_spec(&image, &region)).unwrap();
        let fs = stack.fs().clone();
        let mut durable = Vec::new();
        for i in 0..(3 + seed as usize) {
            let name = format!("f{i}");
            let data = body(5_000 + 9_000 * i, seed as u8 + i as u8);
            write_file(&fs, &name, &data);
            durable.push((name, data));
        }
        fs.fsync().unwrap();
        // Some of them reach the SSD (a checkpoint: the SSD's write
        // buffer and OOB are flushed), the rest only the journal.
        if seed % 2 == 1 {
            stack.fs().checkpoint().unwrap();
        }
        for i in 0..3 {
            write_file(&fs, &format!("late{i}"), &body(20_000, 99));
        }
        // The cut: the SSD image keeps a seeded subset of its unflushed
        // writes, the journal region a seeded subset of unpersisted lines.
        image.crash(seed);
        region.crash_now();
        drop(fs);
        drop(stack);
        let image = Arc::new(image.reopen());
        let region = CrashRegion::from_image(region.crash_image(seed));

        let stack = Stack::open(sim_spec(&image, &region))
            .unwrap_or_else(|e| panic!("seed {seed}: reopen failed: {e}"));
        assert!(stack.info().replayed_blocks.is_some(), "seed {seed}");
        for (name, data) in &durable {
            assert_eq!(
                read_file(stack.fs(), name).as_deref(),
                Some(&data[..]),
                "seed {seed}: fsync'd {name} lost or changed"
            );
        }
        for i in 0..3 {
            let got = read_file(stack.fs(), &format!("late{i}"));
            assert!(
                got.as_ref().is_none_or(|g| body(20_000, 99).starts_with(g)),
                "seed {seed}: late{i} holds foreign bytes"
            );
        }
        write_file(stack.fs(), "after", b"new life");
        stack.close().unwrap();
        let s = sim_spec(&image, &CrashRegion::new(4 << 20));
        let out = fsck(&s, false).unwrap();
        assert!(
            out.clean && out.report.problems.is_empty(),
            "seed {seed}: {:?}",
            out.report.problems
        );
        let stack = Stack::open(s).unwrap();
        assert_eq!(read_file(stack.fs(), "after").unwrap(), b"new life");
        stack.close().unwrap();
    }
}

/// Issue 11 §2, in process: a journal that is gone after an unclean stop
/// (a zeroed region = a RAM journal after a reboot).
#[test]
fn missing_journal_is_refused_then_repaired_by_fsck_and_mounts_again() {
    let image = blank_image();
    let region = CrashRegion::new(4 << 20);
    let stack = Stack::open(sim_spec(&image, &region)).unwrap();
    write_file(stack.fs(), "kept", b"checkpointed");
    stack.fs().checkpoint().unwrap();
    write_file(stack.fs(), "lost", b"only in the journal");
    stack.fs().fsync().unwrap();
    image.crash_keep_none();
    region.crash_now();
    drop(stack);
    let image = Arc::new(image.reopen());

    // Mount refuses and says what to do.
    let mut spec = sim_spec(&image, &CrashRegion::new(4 << 20));
    spec.missing_journal = MissingJournal::Refuse;
    let err = Stack::open(spec.clone()).err().expect("mount must refuse");
    assert!(matches!(err, StackError::JournalMissing { .. }), "{err}");
    assert!(err.to_string().contains("fsck --repair"), "{err}");

    // Read-only fsck says it is not mountable, and why.
    let out = fsck(&spec, false).unwrap();
    assert!(!out.clean);
    assert!(
        out.notes.iter().any(|n| n.contains(LOST_NOTE)),
        "{:?}",
        out.notes
    );

    // fsck --repair leaves a mountable file system (before the fix it said
    // "clean" and left the superblock dirty: the mount refused forever).
    let out = fsck(&spec, true).unwrap();
    assert!(out.clean);
    assert!(
        out.notes.iter().any(|n| n.contains(LOST_NOTE)),
        "{:?}",
        out.notes
    );
    let stack = Stack::open(spec.clone()).unwrap();
    assert_eq!(read_file(stack.fs(), "kept").unwrap(), b"checkpointed");
    stack.close().unwrap();
    let out = fsck(&spec, false).unwrap();
    assert!(out.clean && out.report.problems.is_empty());
}

#[test]
fn mount_can_discard_a_missing_journal_in_one_step() {
    let image = blank_image();
    let region = CrashRegion::new(4 << 20);
    let stack = Stack::open(sim_spec(&image, &region)).unwrap();
    write_file(stack.fs(), "kept", b"checkpointed");
    stack.fs().checkpoint().unwrap();
    image.crash_keep_none();
    region.crash_now();
    drop(stack);
    let image = Arc::new(image.reopen());
    let mut spec = sim_spec(&image, &CrashRegion::new(4 << 20));
    // A simulated region is not a RAM journal: the default refuses.
    assert!(Stack::open(spec.clone()).is_err());
    spec.missing_journal = MissingJournal::Discard;
    let stack = Stack::open(spec.clone()).unwrap();
    assert!(
        stack.info().notes.iter().any(|n| n.contains(LOST_NOTE)),
        "{:?}",
        stack.info().notes
    );
    assert_eq!(read_file(stack.fs(), "kept").unwrap(), b"checkpointed");
    stack.close().unwrap();
    spec.missing_journal = MissingJournal::Refuse;
    let stack = Stack::open(spec).unwrap();
    assert!(stack.info().notes.is_empty());
    stack.close().unwrap();
}

// ---- real files: locks and the missing journal file ----

fn file_spec(img: &Path, journal: &Path) -> StackSpec {
    let mut s = StackSpec::new(
        DeviceSpec::Path(img.to_path_buf()),
        JournalSpec::File(journal.to_path_buf()),
    );
    s.journal_bytes = 8 << 20;
    s.lock_wait = Duration::ZERO;
    s.missing_journal = MissingJournal::Refuse;
    s
}

fn new_image(dir: &Path) -> std::path::PathBuf {
    let img = dir.join("fs.img");
    mkfs(
        &DeviceSpec::Path(img.clone()),
        Some(64 << 20),
        Duration::ZERO,
    )
    .unwrap();
    img
}

fn assert_in_use(r: Result<impl Sized, StackError>, what: &str) {
    match r {
        Err(StackError::InUse { pid, .. }) => {
            assert_eq!(pid, Some(std::process::id() as i32), "{what}")
        }
        Err(e) => panic!("{what}: expected 'in use', got: {e}"),
        Ok(_) => panic!("{what}: succeeded on an image in use"),
    }
}

/// Issue 11 §3: mount + mount (same journal, another journal), mount +
/// mkfs, mount + fsck --repair, mount + fsck; and one journal on two images.
#[test]
fn an_open_image_or_journal_cannot_be_used_twice() {
    let tmp = tempfile::tempdir().unwrap();
    let img = new_image(tmp.path());
    let j1 = tmp.path().join("j1");
    let j2 = tmp.path().join("j2");
    let stack = Stack::open(file_spec(&img, &j1)).unwrap();
    write_file(stack.fs(), "a", b"one");

    assert_in_use(Stack::open(file_spec(&img, &j1)), "mount + mount");
    let err = Stack::open(file_spec(&img, &j2)).err().unwrap();
    assert!(
        err.to_string()
            .contains(&format!("in use by PID {}", std::process::id())),
        "two journals on one image: {err}"
    );
    assert_in_use(
        mkfs(&DeviceSpec::Path(img.clone()), None, Duration::ZERO),
        "mount + mkfs",
    );
    assert_in_use(
        mkfs(
            &DeviceSpec::Path(img.clone()),
            Some(64 << 20),
            Duration::ZERO,
        ),
        "mount + mkfs --size",
    );
    assert_in_use(fsck(&file_spec(&img, &j1), true), "mount + fsck --repair");
    assert_in_use(fsck(&file_spec(&img, &j1), false), "mount + fsck");
    // One journal, two images.
    let other = tmp.path().join("other");
    std::fs::create_dir(&other).unwrap();
    let img2 = new_image(&other);
    assert_in_use(
        Stack::open(file_spec(&img2, &j1)),
        "one journal on two images",
    );
    assert!(
        !j2.exists(),
        "a refused mount leaves no journal file behind"
    );

    stack.close().unwrap();
    assert!(!j1.exists(), "a clean close removes its journal");
    let stack = Stack::open(file_spec(&img, &j2)).unwrap();
    assert_eq!(read_file(stack.fs(), "a").unwrap(), b"one");
    // Read-only checks may share with each other, not with a mount.
    stack.close().unwrap();
    let s = file_spec(&img, &j2);
    assert!(fsck(&s, false).unwrap().clean);
}

/// Issue 11 §4: a new open waits for a holder that is finishing (the old
/// daemon after `umount`) and then finds the journal it needs.
#[test]
fn a_new_open_waits_for_the_old_one_to_finish_closing() {
    let tmp = tempfile::tempdir().unwrap();
    let img = new_image(tmp.path());
    let j = tmp.path().join("j");
    let stack = Stack::open(file_spec(&img, &j)).unwrap();
    write_file(stack.fs(), "a", b"before remount");
    let closer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        stack.close().unwrap();
    });
    let mut s = file_spec(&img, &j);
    s.lock_wait = Duration::from_secs(30);
    let stack = Stack::open(s).unwrap();
    closer.join().unwrap();
    // The old close removed its journal before letting go; ours is new and
    // stays while we hold it.
    assert_eq!(stack.info().replayed_blocks, None);
    assert!(j.exists(), "the old stack removed the new stack's journal");
    assert_eq!(read_file(stack.fs(), "a").unwrap(), b"before remount");
    stack.close().unwrap();
}

/// Issue 11 §2 with a journal file: an image left dirty (a copy taken while
/// mounted = `kill -9`) whose `--journal` file is gone.
#[test]
fn missing_journal_file_is_refused_and_fsck_repair_makes_it_mountable() {
    let tmp = tempfile::tempdir().unwrap();
    let img = new_image(tmp.path());
    let j = tmp.path().join("j");
    let stack = Stack::open(file_spec(&img, &j)).unwrap();
    write_file(stack.fs(), "a", b"checkpointed");
    stack.fs().checkpoint().unwrap();
    let crashed = tmp.path().join("crashed.img");
    std::fs::copy(&img, &crashed).unwrap();
    stack.close().unwrap();

    let gone = tmp.path().join("gone.journal");
    let spec = file_spec(&crashed, &gone);
    let err = Stack::open(spec.clone()).err().unwrap();
    assert!(
        matches!(err, StackError::JournalMissing { ram: false, .. }),
        "{err}"
    );
    assert!(!gone.exists());
    let out = fsck(&spec, true).unwrap();
    assert!(out.clean);
    assert!(out.notes.iter().any(|n| n.contains(LOST_NOTE)));
    let stack = Stack::open(spec).unwrap();
    assert_eq!(read_file(stack.fs(), "a").unwrap(), b"checkpointed");
    stack.close().unwrap();
}

#[test]
fn a_device_without_a_file_system_is_a_clear_error() {
    let dev: Arc<dyn BlockDevice> = Arc::new(CrashDevice::new(4096, 1024).unwrap());
    let spec = StackSpec::new(
        DeviceSpec::Device(dev),
        JournalSpec::Region(Arc::new(CrashRegion::new(1 << 20))),
    );
    let err = Stack::open(spec).err().unwrap();
    assert!(matches!(err, StackError::NoFileSystem { .. }), "{err}");
}

/// An emulated SSD's image named as a plain device (`ptsd fsck
/// DATA/ssd.img`) says what it is and what to name instead.
#[test]
fn an_ssd_image_named_as_a_device_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut spec = StackSpec::new(
        DeviceSpec::DataDir(data.clone()),
        JournalSpec::File(dir.path().join("j")),
    );
    spec.journal_bytes = 8 << 20;
    spec.lock_wait = Duration::ZERO;
    Stack::open(spec).unwrap().close().unwrap();
    let img = std::fs::read_dir(&data)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "img"))
        .expect("the data directory holds an image");
    let mut spec = file_spec(&img, &dir.path().join("j"));
    spec.missing_journal = MissingJournal::Discard;
    let err = fsck(&spec, false).err().unwrap();
    assert!(matches!(err, StackError::SsdImage { .. }), "{err}");
    assert!(err.to_string().contains("--data-dir"), "{err}");
}

/// A journal created on a disk file gets one partition (each partition's
/// ring is one more disk write per commit); on a RAM file system the
/// configured four; asked for explicitly (`disk_journal_partitions: None`),
/// the configured count on a disk too.
#[test]
fn a_journal_on_a_disk_file_defaults_to_one_partition() {
    let mut dirs = vec![tempfile::tempdir_in("/var/tmp").unwrap()];
    if Path::new("/dev/shm").is_dir() {
        dirs.push(tempfile::tempdir_in("/dev/shm").unwrap());
    }
    let mut seen_disk = false;
    for dir in &dirs {
        let on_ram = ptsd_blockdev::dir_on_ram_fs(dir.path());
        seen_disk |= !on_ram;
        let img = new_image(dir.path());
        for explicit in [false, true] {
            let journal = dir.path().join(format!("j-{explicit}"));
            let mut spec = file_spec(&img, &journal);
            if explicit {
                spec.disk_journal_partitions = None;
            }
            let stack = Stack::open(spec).unwrap();
            let partitions = stack.store().journal().geometry().partitions;
            let want = if on_ram || explicit { 4 } else { 1 };
            assert_eq!(
                partitions,
                want,
                "{} (RAM: {on_ram}, explicit: {explicit})",
                dir.path().display()
            );
            stack.close().unwrap();
        }
    }
    assert!(
        seen_disk,
        "/var/tmp is on a RAM file system: nothing checked the disk case"
    );
}

/// Deleting files tells the emulated SSD: online trims once enough was
/// freed (as the FUSE layers ask after each request), and the rest at
/// unmount; the SSD counts every deleted page as discarded.
#[test]
fn deleted_files_are_discarded_on_the_emulated_ssd() {
    let image = blank_image();
    let region = CrashRegion::new(4 << 20);
    let stack = Stack::open(sim_spec(&image, &region)).unwrap();
    let fs = stack.fs();
    let body = body(1 << 20, 3);
    for round in 0..4 {
        for i in 0..10 {
            write_file(fs, &format!("r{round}f{i}"), &body);
        }
        stack.fs().checkpoint().unwrap();
        for i in 0..10 {
            fs.unlink(fs.root(), format!("r{round}f{i}").as_bytes())
                .unwrap();
            fs.trim_if_due();
        }
    }
    let s = stack.ssd().expect("an emulated SSD").stats();
    // Each trim discards whole free runs, so at least every deleted page
    // of the rounds trimmed online (the last may wait for the unmount).
    assert!(s.host_discard_pages >= 3 * 10 * 256, "{s:?}");
    stack.close().unwrap();
    let stack = Stack::open(sim_spec(&image, &CrashRegion::new(4 << 20))).unwrap();
    assert_eq!(
        stack.fs().readdir(stack.fs().root(), 0, 100).unwrap().len(),
        2
    );
    stack.close().unwrap();
}
