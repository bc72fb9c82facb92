//! A fatal failure stops the journal with a typed cause, and every later
//! operation gets that same cause.

use std::sync::Arc;

use ptsd_blockdev::{BlockDevice, CrashDevice, Fault};
use ptsd_nvjournal::{CrashRegion, Failure, Journal, JournalConfig, JournalError};

fn cause(e: &JournalError) -> &Failure {
    match e {
        JournalError::Failed(f) => f,
        other => panic!("expected a stopped journal, got {other}"),
    }
}

#[test]
fn a_failed_checkpoint_stops_the_journal_with_a_typed_cause() {
    let crash = Arc::new(CrashDevice::new(4096, 64).unwrap());
    let dev: Arc<dyn BlockDevice> = crash.clone();
    let cfg = JournalConfig {
        partitions: 2,
        checkpoint_interval: None,
        ..JournalConfig::default()
    };
    let j = Journal::create(CrashRegion::new(1 << 20), dev, cfg).unwrap();
    let mut tx = j.begin();
    tx.write(3, &[1u8; 4096]).unwrap();
    tx.finish().unwrap();
    // The home device dies: writing the block home fails.
    crash.inject(Fault::AllAfter(0));
    let first = j.checkpoint().unwrap_err();
    let f = cause(&first);
    assert!(
        matches!(
            f,
            Failure::Checkpoint {
                source: JournalError::Device(_),
                ..
            } | Failure::CheckpointRound(JournalError::Device(_))
        ),
        "{f:?}"
    );
    // The cause is a chain of typed errors down to the device's.
    let source = std::error::Error::source(&first).expect("a cause");
    assert!(source.source().is_some(), "{source}");
    // Later operations get the same failure (not a new one, not a string).
    let mut tx = j.begin();
    let later = tx
        .write(4, &[2u8; 4096])
        .and_then(|()| tx.finish().map(|_| ()))
        .unwrap_err();
    let JournalError::Failed(a) = &first else {
        unreachable!()
    };
    let JournalError::Failed(b) = &later else {
        panic!("later operation: {later}")
    };
    assert!(Arc::ptr_eq(a, b));
}
