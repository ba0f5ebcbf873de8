//! Raw FFI bindings to the Apache ZooKeeper multi-threaded C client, `libzookeeper_mt`
//! (the 3.8 API: bindings generated from the 3.8.0 header; Debian's system library is
//! 3.8.0, the vendored source 3.8.2).
//!
//! Nothing here is safe: every function is the C function, every struct the C struct. The
//! `zookeeper-mt` crate builds the safe client on top, and its module docs give the
//! threading and lifetime rules that C code imposes on any caller (which thread runs
//! completions and watchers, when C frees what it returns).
//!
//! The build looks for the library in this order: the `vendored` feature (the pinned C
//! client built from source), `ZOOKEEPER_LIB_DIR` / `ZOOKEEPER_INCLUDE_DIR`
//! (`ZOOKEEPER_STATIC=1` links the `.a`), pkg-config, then the standard paths (Debian's
//! `libzookeeper-mt-dev`). `build.rs` and the workspace's `docs/building.md` give the
//! details. The bindings are committed, so no libclang is needed.
//!
//! # Feature flags
//!
//! - `vendored`: compile the pinned C client (3.8.2 source of the 3.8 API) and link it
//!   statically. The published package carries that source, so nothing needs fetching;
//!   in the repository `vendor/fetch-c-client.sh` puts it in place, and
//!   `ZOOKEEPER_C_CLIENT_SRC` (an absolute path) builds another source tree. It wins over every
//!   other way of finding the library.
//! - `tls`: the vendored client compiled with OpenSSL (implies `vendored`; links the
//!   system OpenSSL): adds the `tls` module (`zookeeper_init_ssl`).
//! - `sasl`: the vendored client compiled with Cyrus SASL (implies `vendored`; links the
//!   system libsasl2): adds the `sasl` module (`zookeeper_init_sasl`).
//! - `buildtime-bindgen`: regenerate the bindings from the header in use (needs
//!   libclang).
//!
//! The committed bindings are generated without OpenSSL and Cyrus SASL, as Debian's
//! library is built. With `tls` or `sasl`, hand-written declarations of that API are
//! added: the `tls` and `sasl` modules, and `zookeeper_mt_sys_init_secure` (TLS, SASL and
//! a log callback in one init call). A test checks them against the header compiled with
//! the same defines.
//!
//! MSRV: Rust 1.82 or newer; it is raised only in a new minor release (see `docs/msrv.md`
//! in the repository).
#![cfg_attr(docsrs, feature(doc_cfg))]
#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals)]
#![allow(clippy::all)]

#[cfg(not(feature = "buildtime-bindgen"))]
mod bindings;
#[cfg(feature = "buildtime-bindgen")]
mod bindings {
    include!(concat!(env!("OUT_DIR"), "/bindings.rs"));
}

pub use bindings::*;

#[cfg(feature = "tls")]
#[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
pub mod tls;
#[cfg(feature = "tls")]
pub use tls::*;

#[cfg(feature = "sasl")]
#[cfg_attr(docsrs, doc(cfg(feature = "sasl")))]
pub mod sasl;
#[cfg(feature = "sasl")]
pub use sasl::*;

#[cfg(any(feature = "tls", feature = "sasl"))]
mod secure_init;
#[cfg(any(feature = "tls", feature = "sasl"))]
pub use secure_init::*;

/// What the C compiler saw in the header in use, compiled from `src/layout_probe.c`.
/// For tests of the bindings; not part of the C client's API.
#[doc(hidden)]
pub mod probe {
    extern "C" {
        pub fn zookeeper_mt_sys_probe_version() -> *const libc::c_char;
        pub fn zookeeper_mt_sys_probe_size(which: libc::c_int) -> libc::size_t;
        pub fn zookeeper_mt_sys_probe_int(which: libc::c_int) -> libc::c_int;
    }

    // The TLS/SASL part, compiled from `src/security_probe.c` with the vendored build's
    // defines (features `tls`, `sasl`).
    #[cfg(any(feature = "tls", feature = "sasl"))]
    extern "C" {
        pub fn zookeeper_mt_sys_probe_security_features() -> libc::c_int;
        pub fn zookeeper_mt_sys_probe_security_size(which: libc::c_int) -> libc::size_t;
        pub fn zookeeper_mt_sys_probe_security_int(which: libc::c_int) -> libc::c_long;
        pub fn zookeeper_mt_sys_probe_security_fn(which: libc::c_int) -> *mut libc::c_void;
    }
}

/// The README's examples, compiled as doc tests so they cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExamples;
