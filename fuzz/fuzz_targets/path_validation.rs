//! `validate_path` never panics and agrees with the server's `PathUtils.validatePath`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| zk_fuzz::path_input(data));
