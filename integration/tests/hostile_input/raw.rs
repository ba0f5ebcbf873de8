//! A handle of the raw C client, to see what it (and then the server) does with a path.

use super::*;

struct Connection {
    state: Mutex<c_int>,
    changed: Condvar,
}

unsafe extern "C" fn global_watcher(
    _zh: *mut sys::zhandle_t,
    event_type: c_int,
    state: c_int,
    _path: *const c_char,
    context: *mut c_void,
) {
    // SAFETY: the context is the boxed Connection, which outlives the handle.
    let connection = unsafe { &*(context as *const Connection) };
    // SAFETY: reading an extern const int.
    if event_type == unsafe { sys::ZOO_SESSION_EVENT } {
        *connection.state.lock().unwrap() = state;
        connection.changed.notify_all();
    }
}

/// One completion's result, filled on the C completion thread.
#[derive(Default)]
struct Slot {
    result: Mutex<Option<(c_int, Option<String>)>>,
    done: Condvar,
}

impl Slot {
    fn fill(&self, rc: c_int, value: Option<String>) {
        *self.result.lock().unwrap() = Some((rc, value));
        self.done.notify_all();
    }
}

unsafe extern "C" fn string_done(rc: c_int, value: *const c_char, data: *const c_void) {
    // SAFETY: `data` is an `Arc<Slot>` leaked by `submit` for this completion.
    let slot = unsafe { Arc::from_raw(data as *const Slot) };
    let value = (!value.is_null())
        // SAFETY: a NUL-terminated string valid during the call.
        .then(|| {
            unsafe { CStr::from_ptr(value) }
                .to_string_lossy()
                .into_owned()
        });
    slot.fill(rc, value);
}

unsafe extern "C" fn stat_done(rc: c_int, _stat: *const sys::Stat, data: *const c_void) {
    // SAFETY: as in `string_done`.
    let slot = unsafe { Arc::from_raw(data as *const Slot) };
    slot.fill(rc, None);
}

/// What the C client did with a request.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// The C call refused it before sending (its return code).
    ClientRejected(c_int),
    /// It was sent; the completion's code (and the created path).
    Server(c_int, Option<String>),
    /// The input cannot be a C string (it contains NUL).
    NotACString,
}

impl Verdict {
    pub fn describe(&self) -> String {
        match self {
            Verdict::ClientRejected(rc) => format!("C client: {}", rc_name(*rc)),
            Verdict::Server(rc, _) => format!("server: {}", rc_name(*rc)),
            Verdict::NotACString => "n/a (NUL: not a C string)".into(),
        }
    }
}

pub struct Handle {
    zh: *mut sys::zhandle_t,
    connection: Box<Connection>,
}

impl Handle {
    pub fn connect(hosts: &str) -> Handle {
        let hosts = CString::new(hosts).unwrap();
        let connection = Box::new(Connection {
            state: Mutex::new(0),
            changed: Condvar::new(),
        });
        // SAFETY: hosts NUL-terminated; the watcher context (the boxed Connection)
        // outlives the handle, closed in Drop before the box is freed.
        let zh = unsafe {
            sys::zookeeper_init(
                hosts.as_ptr(),
                Some(global_watcher),
                15_000,
                ptr::null(),
                &*connection as *const Connection as *mut c_void,
                0,
            )
        };
        assert!(!zh.is_null(), "zookeeper_init returned NULL");
        let handle = Handle { zh, connection };
        handle.wait_connected();
        handle
    }

    /// Waits (bounded) for ZOO_CONNECTED_STATE, e.g. after the server dropped the
    /// connection over an oversized request.
    pub fn wait_connected(&self) {
        // SAFETY: reading an extern const int.
        let want = unsafe { sys::ZOO_CONNECTED_STATE };
        let state = self.connection.state.lock().unwrap();
        let (state, _) = self
            .connection
            .changed
            .wait_timeout_while(state, WAIT, |s| *s != want)
            .unwrap();
        assert_eq!(*state, want, "raw C handle not connected within {WAIT:?}");
    }

    fn submit(&self, call: impl FnOnce(*const c_void) -> c_int) -> Verdict {
        self.wait_connected();
        let slot = Arc::new(Slot::default());
        let context = Arc::into_raw(Arc::clone(&slot)) as *const c_void;
        let rc = call(context);
        if rc != sys::ZOK {
            // SAFETY: the submission failed, so C never calls the completion.
            drop(unsafe { Arc::from_raw(context as *const Slot) });
            return Verdict::ClientRejected(rc);
        }
        let result = slot.result.lock().unwrap();
        let (mut result, _) = slot
            .done
            .wait_timeout_while(result, WAIT, |r| r.is_none())
            .unwrap();
        let (rc, value) = result.take().expect("no completion from the C client");
        Verdict::Server(rc, value)
    }

    /// `zoo_aset(path, data, version 123456)`.
    pub fn set(&self, path: &[u8], data: &[u8]) -> Verdict {
        let Ok(path) = CString::new(path) else {
            return Verdict::NotACString;
        };
        self.submit(|context| {
            // SAFETY: live handle; path and data valid for the call (serialized by
            // C before it returns); the completion owns `context`.
            unsafe {
                sys::zoo_aset(
                    self.zh,
                    path.as_ptr(),
                    data.as_ptr() as *const c_char,
                    data.len() as c_int,
                    123_456,
                    Some(stat_done),
                    context,
                )
            }
        })
    }

    /// `zoo_acreate(path, "", acl, mode)`; `acl` None: OPEN_ACL_UNSAFE.
    pub fn create(&self, path: &[u8], mode: c_int, acl: Option<&sys::ACL_vector>) -> Verdict {
        let Ok(path) = CString::new(path) else {
            return Verdict::NotACString;
        };
        self.submit(|context| {
            // SAFETY: live handle; path and ACL valid for the call; OPEN_ACL_UNSAFE
            // is the library's static vector, only read.
            unsafe {
                sys::zoo_acreate(
                    self.zh,
                    path.as_ptr(),
                    b"".as_ptr() as *const c_char,
                    0,
                    acl.map_or(ptr::addr_of!(sys::ZOO_OPEN_ACL_UNSAFE), |a| a as *const _),
                    mode,
                    Some(string_done),
                    context,
                )
            }
        })
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: no other thread uses the handle; not used after this.
        unsafe { sys::zookeeper_close(self.zh) };
    }
}
