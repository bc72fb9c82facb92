//! cargo-fuzz target `decode`: the body is `ptsd_crashcheck::decode::run` (see
//! its module docs); a violation panics with its description.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(v) = ptsd_crashcheck::decode::run(data) {
        panic!("{v}");
    }
});
