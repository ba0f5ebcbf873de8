//! The Cyrus SASL part of the C API (`HAVE_CYRUS_SASL_H`), and the few Cyrus SASL
//! declarations needed to use it, declared by hand: the committed bindings are generated
//! without them. Feature `sasl`.

use crate::{clientid_t, log_callback_fn, watcher_fn, zhandle_t};
use std::os::raw::{c_char, c_int, c_uchar, c_ulong, c_void};

/// Cyrus SASL's per-connection state (opaque).
#[repr(C)]
pub struct sasl_conn_t {
    _private: [u8; 0],
}

/// One entry of a Cyrus SASL callback list (`sasl_callback_t`). `proc_` is stored as
/// `int (*)(void)` and called with the signature its `id` implies; the list ends with an
/// entry whose id is [`SASL_CB_LIST_END`].
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct sasl_callback_t {
    pub id: c_ulong,
    pub proc_: Option<unsafe extern "C" fn() -> c_int>,
    pub context: *mut c_void,
}

/// A secret handed to Cyrus SASL (`sasl_secret_t`): `len` bytes starting at `data`
/// (declared with one element, allocated larger).
#[repr(C)]
#[derive(Debug)]
pub struct sasl_secret_t {
    pub len: c_ulong,
    pub data: [c_uchar; 1],
}

/// SASL parameters of a handle (`zoo_sasl_params_t`). The strings are copied by
/// `zookeeper_init_sasl`; the callback list is only referenced and must outlive the
/// handle.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct zoo_sasl_params_t {
    /// The service name, usually `"zookeeper"`.
    pub service: *const c_char,
    /// The server name; for DIGEST-MD5 against the Java server, `"zk-sasl-md5"`. NULL: the
    /// server's host name as resolved from its address.
    pub host: *const c_char,
    /// Mechanisms to try, e.g. `"DIGEST-MD5"`.
    pub mechlist: *const c_char,
    /// The callback list.
    pub callbacks: *const sasl_callback_t,
}

pub const SASL_CONTINUE: c_int = 1;
pub const SASL_OK: c_int = 0;
pub const SASL_FAIL: c_int = -1;
pub const SASL_NOMEM: c_int = -2;
pub const SASL_BADPARAM: c_int = -7;

pub const SASL_CB_LIST_END: c_ulong = 0;
/// `int (*)(void *context, int id, const char **availrealms, const char **result)`
pub const SASL_CB_GETREALM: c_ulong = 0x4008;
/// `int (*)(void *context, int id, const char **result, unsigned *len)`
pub const SASL_CB_USER: c_ulong = 0x4001;
/// As [`SASL_CB_USER`].
pub const SASL_CB_AUTHNAME: c_ulong = 0x4002;
/// `int (*)(sasl_conn_t *conn, void *context, int id, sasl_secret_t **psecret)`
pub const SASL_CB_PASS: c_ulong = 0x4004;

/// `SASL_CB_USER` / `SASL_CB_AUTHNAME` callback signature.
pub type sasl_getsimple_t = unsafe extern "C" fn(
    context: *mut c_void,
    id: c_int,
    result: *mut *const c_char,
    len: *mut std::os::raw::c_uint,
) -> c_int;
/// `SASL_CB_PASS` callback signature.
pub type sasl_getsecret_t = unsafe extern "C" fn(
    conn: *mut sasl_conn_t,
    context: *mut c_void,
    id: c_int,
    psecret: *mut *mut sasl_secret_t,
) -> c_int;
/// `SASL_CB_GETREALM` callback signature.
pub type sasl_getrealm_t = unsafe extern "C" fn(
    context: *mut c_void,
    id: c_int,
    availrealms: *mut *const c_char,
    result: *mut *const c_char,
) -> c_int;

extern "C" {
    /// Cyrus SASL: loads the client plug-ins. Call once per process before the first SASL
    /// handle (the ZooKeeper C client does not).
    pub fn sasl_client_init(callbacks: *const sasl_callback_t) -> c_int;

    /// Upstream's SASL init: [`zookeeper_init2`](crate::zookeeper_init2) plus SASL
    /// parameters (NULL: no SASL). When authentication fails the handle goes to
    /// `ZOO_AUTH_FAILED_STATE` and its IO thread stops, but no session event reports it:
    /// poll `zoo_state`.
    pub fn zookeeper_init_sasl(
        host: *const c_char,
        fn_: watcher_fn,
        recv_timeout: c_int,
        clientid: *const clientid_t,
        context: *mut c_void,
        flags: c_int,
        log_callback: log_callback_fn,
        sasl_params: *mut zoo_sasl_params_t,
    ) -> *mut zhandle_t;

    /// A malloc'ed callback list answering `SASL_CB_USER`/`AUTHNAME` with `user`,
    /// `SASL_CB_GETREALM` with `realm` and `SASL_CB_PASS` with the first line of
    /// `password_file`. Beware: with a NULL `password_file` it prompts on the terminal.
    /// Free with `free` only after the handle is closed.
    pub fn zoo_sasl_make_basic_callbacks(
        user: *const c_char,
        realm: *const c_char,
        password_file: *const c_char,
    ) -> *mut sasl_callback_t;
}
