//! `Error::from_code` / `Error::code` round-trip for any C code; `Display` never panics.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| zk_fuzz::error_code_input(data));
