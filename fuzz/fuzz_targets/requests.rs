//! Arbitrary arguments through every request's Rust->C conversion (on a closed handle):
//! a typed validation error the input deserves, or `Closed`; never a panic.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| zk_fuzz::request_input(zk_fuzz::closed_handle(), data));
