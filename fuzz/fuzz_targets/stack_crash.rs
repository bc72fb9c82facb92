//! cargo-fuzz target `stack_crash`: the body is `ptsd_crashcheck::stack_crash::run` (see
//! its module docs); a violation panics with its description.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(v) = ptsd_crashcheck::stack_crash::run(data) {
        panic!("{v}");
    }
});
