//! `zookeeper_mt_sys_init_secure`: an init call of this crate's vendored build (compiled from
//! `build/secure_init.c` with features `tls` or `sasl`), not of the upstream API.

use crate::{clientid_t, log_callback_fn, watcher_fn, zhandle_t};
#[cfg(feature = "tls")]
use libc::size_t;
use std::os::raw::{c_char, c_int, c_void};

extern "C" {
    /// `zookeeper_init2` plus TLS and SASL, in any combination: upstream's
    /// `zookeeper_init_ssl` takes no log callback and neither it nor `zookeeper_init_sasl`
    /// can do both.
    ///
    /// - `cert`: NULL (plaintext) or `"ca,cert,key[,passwd]"` as for `zookeeper_init_ssl`;
    ///   fewer than three fields fail with `EINVAL`. Needs feature `tls` (else `ENOTSUP`).
    /// - `sasl_params`: NULL or a `zoo_sasl_params_t *` (feature `sasl`, else `ENOTSUP`);
    ///   its callback list must outlive the handle.
    ///
    /// Returns NULL with `errno` set on failure, like `zookeeper_init`.
    pub fn zookeeper_mt_sys_init_secure(
        host: *const c_char,
        cert: *const c_char,
        fn_: watcher_fn,
        recv_timeout: c_int,
        clientid: *const clientid_t,
        context: *mut c_void,
        flags: c_int,
        log_callback: log_callback_fn,
        sasl_params: *mut c_void,
    ) -> *mut zhandle_t;
}

#[cfg(feature = "tls")]
extern "C" {
    /// Loads the files a `"ca,cert,key[,passwd]"` string names the way the C client does
    /// at each TLS connect, once, without connecting (never prompting for a password).
    /// The C client retries a failure there from its IO thread without pause until the
    /// handle is closed; checking first gives an immediate error instead.
    ///
    /// Returns 0 when everything loads; else the failed step: 1 CA file, 2 certificate
    /// chain, 3 private key (or its password), 4 key not matching the certificate,
    /// 5 malformed string, 6 out of memory. OpenSSL's reason goes to `error`
    /// (NUL-terminated, at most `error_len` bytes; may be NULL).
    pub fn zookeeper_mt_sys_check_tls(
        cert: *const c_char,
        error: *mut c_char,
        error_len: size_t,
    ) -> c_int;
}
