//! Any bytes on a connection: the decoder neither panics nor hangs.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tinystore::wire::fuzz_decode(data);
});
