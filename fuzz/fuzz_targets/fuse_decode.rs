//! cargo-fuzz target `fuse_decode`: FUSE requests as the io_uring transport
//! receives them, decoded and answered over an in-memory ptsd-fs; the body
//! is `ptsd_fs::uring::fuzz::run` (see its module docs). Any panic is a
//! finding.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ptsd_fs::uring::fuzz::run(data);
});
