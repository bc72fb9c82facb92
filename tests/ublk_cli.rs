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
