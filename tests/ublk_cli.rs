//! `ptsd ublk` on the host. The host kernel normally has no ublk driver:
//! the commands must then fail cleanly; the real-kernel checks run in the
//! VM (`tests/vm/run.sh`).

use std::path::Path;
use std::process::Command;

fn ptsd() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ptsd"))
}

#[test]
fn without_a_ublk_driver_commands_fail_with_a_clear_error() {
    if Path::new("/dev/ublk-control").exists() {
        eprintln!(
            "skipped: this kernel has a ublk driver; the no-driver path is not reachable here"
        );
        return;
    }
    for args in [
        &["ublk", "add", "--size", "16M"][..],
        &["ublk", "add", "--daemon"][..],
        &["ublk", "list"][..],
        &["ublk", "del", "0"][..],
        &["ublk", "recover", "0"][..],
    ] {
        let out = ptsd()
            .args(args)
            .env("RUST_BACKTRACE", "0")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains("this kernel has no ublk driver")
                && stderr.contains("modprobe ublk_drv"),
            "{args:?}: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

#[test]
fn bad_arguments_are_refused_without_a_panic() {
    for args in [
        &["ublk", "add", "--size", "12Q"][..],
        &["ublk", "add", "--sched", "elevator"][..],
        &["ublk", "add", "--lock", "spin"][..],
        &["ublk", "del"][..],
    ] {
        let out = ptsd()
            .args(args)
            .env("RUST_BACKTRACE", "0")
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
    }
}

#[test]
fn out_of_range_queues_and_depth_name_the_value_and_the_range() {
    // Checked before the driver is looked for: the same on any host.
    for (args, want) in [
        (
            &["--queues", "0"][..],
            "--queues 0 is out of range: allowed 1..=",
        ),
        (
            &["--queues", "5000"][..],
            "--queues 5000 is out of range: allowed 1..=",
        ),
        (
            &["--depth", "0"][..],
            "--depth 0 is out of range: allowed 1..=4096",
        ),
        (
            &["--depth", "5000"][..],
            "--depth 5000 is out of range: allowed 1..=4096",
        ),
    ] {
        let out = ptsd()
            .args(["ublk", "add", "--mem", "--size", "16M"])
            .args(args)
            .env("RUST_BACKTRACE", "0")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(want), "{args:?}: {stderr}");
    }
}

#[test]
fn verify_tool_checks_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("img");
    std::fs::write(&img, vec![0u8; 4 << 20]).unwrap();
    let out = ptsd()
        .args(["ublk", "verify"])
        .arg(&img)
        .args(["--ops", "300", "--seed", "3"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() && stderr.contains("O_DIRECT") {
        eprintln!(
            "skipped: {} does not support O_DIRECT: {stderr}",
            dir.path().display()
        );
        return;
    }
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.starts_with("verify ok ops=300"), "{stdout}");
}

/// Run `ptsd` with `args`; its exit code and stderr.
fn fails(args: &[&str]) -> (Option<i32>, String) {
    let out = ptsd()
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{args:?} succeeded");
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    (out.status.code(), stderr)
}

#[test]
fn zoned_shapes_and_options_are_checked_before_any_driver() {
    // Refused before the driver is looked for: the message is the same
    // with or without one.
    let (code, e) = fails(&["ublk", "add", "--zoned", "--zone-size", "3MiB"]);
    assert_eq!(code, Some(1));
    assert!(e.contains("--zoned") && e.contains("power of two"), "{e}");
    let (_, e) = fails(&["ublk", "add", "--zoned", "--size", "100MiB"]);
    assert!(e.contains("multiple of 33554432"), "{e}");
    let (_, e) = fails(&[
        "ublk",
        "add",
        "--zoned",
        "--size",
        "64MiB",
        "--max-open",
        "9",
    ]);
    assert!(
        e.contains("max open zones 9 is more than the device's 8 zones"),
        "{e}"
    );
    let (_, e) = fails(&["ublk", "add", "--zoned", "--zone-capacity", "9MiB"]);
    assert!(e.contains("zone capacity"), "{e}");
    // Zone options need --zoned; --zoned takes no other backend.
    let (code, e) = fails(&["ublk", "add", "--zone-size", "16MiB"]);
    assert_eq!(code, Some(2), "{e}");
    assert!(e.contains("--zoned"), "{e}");
    let (_, e) = fails(&["ublk", "add", "--zoned", "--sched", "fifo"]);
    assert!(e.contains("--sched does not apply to --zoned"), "{e}");
    let (_, e) = fails(&["ublk", "add", "--zoned", "--block-size", "512"]);
    assert!(e.contains("4096-byte NAND page"), "{e}");
    let (code, e) = fails(&["ublk", "add", "--zoned", "--mem"]);
    assert_eq!(code, Some(2), "{e}");
    assert!(e.contains("cannot be used with"), "{e}");
}

#[test]
fn an_image_of_the_other_kind_is_refused_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    // A real zoned image, served as a conventional SSD.
    let zimg = dir.path().join("zoned.img");
    let cfg = ptsd_ftl::zoned::ZonedConfig::small();
    let dev = ptsd_blockdev::FileDevice::create(
        &zimg,
        4096,
        ptsd_ftl::zoned::ZonedSsd::image_bytes(&cfg) / 4096,
    )
    .unwrap();
    drop(ptsd_ftl::zoned::ZonedSsd::open_on(cfg, Box::new(dev)).unwrap());
    let z = zimg.to_str().unwrap();
    let (code, e) = fails(&["ublk", "add", "--store", z]);
    assert_eq!(code, Some(1));
    assert!(
        e.contains("is a zoned SSD image: serve it with --zoned"),
        "{e}"
    );
    // Anything else (here: text) served as zoned.
    let other = dir.path().join("conventional.img");
    std::fs::write(&other, b"not a zoned image, some other data").unwrap();
    let o = other.to_str().unwrap();
    let (code, e) = fails(&["ublk", "add", "--zoned", "--store", o]);
    assert_eq!(code, Some(1));
    assert!(e.contains("is not a zoned SSD image"), "{e}");
}
