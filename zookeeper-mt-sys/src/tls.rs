//! The TLS part of the C API (`HAVE_OPENSSL_H`), declared by hand: the committed bindings
//! are generated without it. Feature `tls`.

use crate::{clientid_t, watcher_fn, zhandle_t};
use std::os::raw::{c_char, c_int, c_void};

extern "C" {
    /// Upstream's TLS init. `cert` is `"ca,cert,key[,passwd]"`: PEM files of the CA that
    /// signed the server certificate, the client certificate (chain) and its private key,
    /// and the key's passphrase if it is encrypted. No log callback and no SASL: prefer
    /// [`zookeeper_mt_sys_init_secure`](crate::zookeeper_mt_sys_init_secure).
    ///
    /// The C client checks the server certificate against the CA (chain and validity) but
    /// not the host name. A failed handshake is logged with `ZSSLCONNECTIONERROR` and the
    /// client keeps reconnecting; no session event reports it.
    pub fn zookeeper_init_ssl(
        host: *const c_char,
        cert: *const c_char,
        fn_: watcher_fn,
        recv_timeout: c_int,
        clientid: *const clientid_t,
        context: *mut c_void,
        flags: c_int,
    ) -> *mut zhandle_t;
}
