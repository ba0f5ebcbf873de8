//! Fuzz properties of the `zookeeper` crate, shared by the cargo-fuzz targets in
//! `fuzz/fuzz_targets/` and by plain `cargo test` loops over generated inputs (the tests
//! at the end of this file, which run on stable Rust in the normal test suite).
//!
//! Each entry point takes raw fuzzer bytes and panics only when a property fails:
//!
//! - [`path_input`]: `validate_path` never panics and accepts exactly what the server
//!   accepts: [`java_validate_path`] is `PathUtils.validatePath` of ZooKeeper 3.8.0
//!   ported line by line over UTF-16 code units (as Java sees the string), plus the
//!   request-size bound (a path over `MAX_DATA_LEN` bytes makes the server drop the
//!   connection).
//! - [`error_code_input`]: `Error::from_code` and `Error::code` round-trip for any i32,
//!   and `Display` and the predicates never panic.
//! - [`request_input`]: arbitrary paths, data, ACLs, create modes, versions, auth
//!   schemes, host lists and multi ops go through every request's Rust->C conversion
//!   (CString, ACL vectors, `zoo_*_op_init`) on a closed handle: each call gives exactly
//!   one of the validation errors the input deserves, or `Closed` if it deserves none.
//!   The closed handle comes from a handshake-only fake server on loopback
//!   ([`closed_handle`]): no ZooKeeper server is needed.

mod closed_handle;
mod error_codes;
mod generated;
mod paths;
mod requests;

pub use closed_handle::closed_handle;
pub use error_codes::{check_error_code, error_code_input};
pub use generated::{iterations, run_generated, Rng};
pub use paths::{check_path, java_validate_path, path_input, server_accepts_path};
pub use requests::{call_counts, request_input, Expect, Input};
