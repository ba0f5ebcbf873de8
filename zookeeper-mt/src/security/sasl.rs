//! The Cyrus SASL side: one-time library init and the callback list that answers
//! user, password and realm from memory (upstream's helper reads the password from
//! a file, or prompts on the terminal without one).

use super::*;
use std::os::raw::{c_char, c_uint, c_ulong};
use std::sync::OnceLock;

/// The SASL parameters and everything their callbacks read. Boxed and never moved
/// or changed after `new`: C holds pointers into it until the handle is closed.
pub(crate) struct SaslState {
    params: sys::zoo_sasl_params_t,
    callbacks: Box<[sys::sasl_callback_t]>,
    _service: CString,
    _host: CString,
    _mechanism: CString,
    user: CString,
    realm: Option<CString>,
    /// A `sasl_secret_t` (length, then the bytes and a NUL), in `c_ulong` units for
    /// its alignment.
    secret: Box<[c_ulong]>,
}

// SAFETY: the raw pointers point into the state's own heap data, which is never
// written after construction; C reads it from its IO thread.
unsafe impl Send for SaslState {}
// SAFETY: as above.
unsafe impl Sync for SaslState {}

impl SaslState {
    pub(crate) fn new(config: &SaslConfig) -> Result<Box<SaslState>> {
        client_init()?;
        if config.user.is_empty() {
            return Err(Error::InvalidArgument("SASL user name is empty"));
        }
        let service = c_string(&config.service, "SASL service")?;
        let host = c_string(&config.host, "SASL host")?;
        let mechanism = c_string(&config.mechanism, "SASL mechanism")?;
        let user = c_string(&config.user, "SASL user")?;
        let realm = config
            .realm
            .as_deref()
            .map(|realm| c_string(realm, "SASL realm"))
            .transpose()?;
        let password = c_string(&config.password, "SASL password")?;

        let header = std::mem::size_of::<c_ulong>();
        let bytes = password.as_bytes_with_nul();
        let mut secret = vec![0 as c_ulong; 1 + bytes.len().div_ceil(header)].into_boxed_slice();
        secret[0] = password.as_bytes().len() as c_ulong;
        // SAFETY: `secret` has room for the header word plus `bytes.len()` bytes; the
        // regions do not overlap.
        unsafe {
            ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                (secret.as_mut_ptr() as *mut u8).add(header),
                bytes.len(),
            );
        }
        // `sasl_secret_t.data` starts right after `len`: checked against the header
        // by zookeeper-mt-sys's layout test.
        debug_assert_eq!(std::mem::offset_of!(sys::sasl_secret_t, data), header);

        let mut state = Box::new(SaslState {
            params: sys::zoo_sasl_params_t {
                service: service.as_ptr(),
                host: host.as_ptr(),
                mechlist: mechanism.as_ptr(),
                callbacks: ptr::null(),
            },
            callbacks: Box::new([]),
            _service: service,
            _host: host,
            _mechanism: mechanism,
            user,
            realm,
            secret,
        });
        let user_ptr = state.user.as_ptr() as *mut c_void;
        let realm_ptr = state
            .realm
            .as_ref()
            .map_or(ptr::null_mut(), |realm| realm.as_ptr() as *mut c_void);
        let secret_ptr = state.secret.as_mut_ptr() as *mut c_void;
        // SAFETY: Cyrus SASL stores every callback as `int (*)(void)` and calls it
        // with the signature its id stands for; each function below has that one.
        let (simple, pass, realm_cb) = unsafe {
            (
                std::mem::transmute::<sys::sasl_getsimple_t, unsafe extern "C" fn() -> c_int>(
                    get_simple,
                ),
                std::mem::transmute::<sys::sasl_getsecret_t, unsafe extern "C" fn() -> c_int>(
                    get_secret,
                ),
                std::mem::transmute::<sys::sasl_getrealm_t, unsafe extern "C" fn() -> c_int>(
                    get_realm,
                ),
            )
        };
        let entry = |id, proc_, context| sys::sasl_callback_t { id, proc_, context };
        state.callbacks = vec![
            entry(sys::SASL_CB_GETREALM, Some(realm_cb), realm_ptr),
            entry(sys::SASL_CB_USER, Some(simple), user_ptr),
            entry(sys::SASL_CB_AUTHNAME, Some(simple), user_ptr),
            entry(sys::SASL_CB_PASS, Some(pass), secret_ptr),
            entry(sys::SASL_CB_LIST_END, None, ptr::null_mut()),
        ]
        .into_boxed_slice();
        state.params.callbacks = state.callbacks.as_ptr();
        Ok(state)
    }

    /// The `zoo_sasl_params_t *` for init; valid while `self` lives, unmoved.
    pub(crate) fn params_ptr(&self) -> *mut c_void {
        &self.params as *const sys::zoo_sasl_params_t as *mut c_void
    }
}

/// `sasl_client_init`, once per process.
fn client_init() -> Result<()> {
    static RESULT: OnceLock<c_int> = OnceLock::new();
    // SAFETY: NULL callbacks are allowed; called once (OnceLock), before any handle
    // of this crate uses SASL.
    let rc = *RESULT.get_or_init(|| unsafe { sys::sasl_client_init(ptr::null()) });
    if rc == sys::SASL_OK {
        Ok(())
    } else {
        log::error!("zookeeper-mt: sasl_client_init failed ({rc})");
        Err(Error::SystemError)
    }
}

// The callbacks run on the C IO thread. They only copy pointers (nothing can panic
// or block) and hand out data owned by `SaslState`, which Cyrus SASL does not free.

/// `SASL_CB_USER` / `SASL_CB_AUTHNAME`: the user name.
unsafe extern "C" fn get_simple(
    context: *mut c_void,
    id: c_int,
    result: *mut *const c_char,
    len: *mut c_uint,
) -> c_int {
    let id = id as c_ulong;
    if result.is_null()
        || context.is_null()
        || (id != sys::SASL_CB_USER && id != sys::SASL_CB_AUTHNAME)
    {
        return sys::SASL_BADPARAM;
    }
    // SAFETY: `context` is the user CString of a live SaslState; `result` and `len`
    // (when not NULL) are out-parameters Cyrus provides.
    unsafe {
        *result = context as *const c_char;
        if !len.is_null() {
            *len = std::ffi::CStr::from_ptr(context as *const c_char)
                .to_bytes()
                .len() as c_uint;
        }
    }
    sys::SASL_OK
}

/// `SASL_CB_PASS`: the password, as a `sasl_secret_t` owned by the state.
unsafe extern "C" fn get_secret(
    _conn: *mut sys::sasl_conn_t,
    context: *mut c_void,
    id: c_int,
    psecret: *mut *mut sys::sasl_secret_t,
) -> c_int {
    if psecret.is_null() || context.is_null() || id as c_ulong != sys::SASL_CB_PASS {
        return sys::SASL_BADPARAM;
    }
    // SAFETY: `context` is the secret buffer of a live SaslState, laid out as a
    // sasl_secret_t; `psecret` is an out-parameter Cyrus provides.
    unsafe { *psecret = context as *mut sys::sasl_secret_t };
    sys::SASL_OK
}

/// `SASL_CB_GETREALM`: the configured realm, else the first the server offers.
unsafe extern "C" fn get_realm(
    context: *mut c_void,
    id: c_int,
    availrealms: *mut *const c_char,
    result: *mut *const c_char,
) -> c_int {
    if result.is_null() || id as c_ulong != sys::SASL_CB_GETREALM {
        return sys::SASL_BADPARAM;
    }
    // SAFETY: `context` is NULL or the realm CString of a live SaslState;
    // `availrealms` is NULL or a NULL-terminated array Cyrus provides.
    unsafe {
        *result = if !context.is_null() {
            context as *const c_char
        } else if !availrealms.is_null() {
            *availrealms
        } else {
            ptr::null()
        };
    }
    sys::SASL_OK
}
