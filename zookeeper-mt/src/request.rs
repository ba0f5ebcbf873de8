//! Submitting a request: one path for every operation. The [`Request`] builder says
//! what the request arms (a watch) and keeps alive (a multi's buffers); `submit`
//! registers the contexts, checks for an ended session, calls C and turns a failed
//! submission into a failed future.

use crate::client::ZooKeeper;
use crate::context::{self, RequestEntry};
use crate::error::{Error, Result};
use crate::in_flight::Permit;
use crate::reply::{Fulfiller, Reply, ReplySlot, ZkFuture};
use crate::types::WatcherType;
use crate::watch::Watch;
use crate::watch_table::{WatchKind, WatchRequest};
use parking_lot::Mutex;
use std::os::raw::{c_char, c_int, c_void};
use std::sync::Arc;
use zookeeper_mt_sys as sys;

impl ZooKeeper {
    /// A request to prepare and [`send`](Request::send).
    pub(crate) fn request(&self) -> Request<'_> {
        Request {
            zk: self,
            path: None,
            watch: None,
            buffers: None,
            bytes: None,
        }
    }

    /// Submits one asynchronous C call, now if there is room in flight, else queued
    /// (never waiting here; see `in_flight.rs`). `call` gets the handle, the watch
    /// context (NULL unless `watch` is a watching read), the request context and the
    /// request's path and bytes, and returns the C return code.
    #[allow(clippy::too_many_arguments)]
    fn submit<T: 'static, C>(
        &self,
        path: Option<&str>,
        watch: Option<WatchRequest<'_>>,
        multi: Option<Box<context::MultiBuffers>>,
        bytes: Option<&[u8]>,
        call: C,
        convert: impl FnOnce(Reply, Option<Watch>) -> Result<T> + Send + 'static,
    ) -> ZkFuture<T>
    where
        C: FnOnce(*mut sys::zhandle_t, *mut c_void, *const c_void, CallArgs) -> c_int
            + Send
            + 'static,
    {
        let in_flight = self.in_flight();
        if let Some(permit) = in_flight.try_acquire() {
            let slot = ReplySlot::new();
            let sent = self.send_now(permit, &slot, path, watch, None, multi, bytes, call);
            return match sent {
                Ok(watch) => ZkFuture::pending(slot, watch, convert),
                Err(error) => ZkFuture::failed(error),
            };
        }
        // No room: a closed or ended session still fails at once.
        if let Err(error) = self.with_handle(|_| ()) {
            return ZkFuture::failed(error);
        }
        // Queued with everything it needs, owned: sent when room is made, in order. A
        // request whose future is dropped meanwhile is still sent (as one sent at once
        // is: dropping a future never cancels its request).
        let slot = ReplySlot::new();
        let armed = watch.is_some().then(|| Arc::new(Mutex::new(None::<Watch>)));
        let watch = watch.map(OwnedWatchRequest::of);
        let bytes = bytes.map(<[u8]>::to_vec);
        let path = path.map(str::to_owned);
        let zk = self.downgrade();
        let (unsent, job_armed) = (Unsent(Some(Arc::clone(&slot))), armed.clone());
        in_flight.enqueue(Box::new(move |permit| {
            let Some(job_slot) = unsent.take() else {
                return;
            };
            // Gone with every clone: the close failed everything else already.
            let Some(zk) = zk.upgrade() else {
                job_slot.fulfill(Err(Error::Closed));
                return;
            };
            let watch = watch.as_ref().map(OwnedWatchRequest::borrowed);
            let sent = zk.send_now(
                permit,
                &job_slot,
                path.as_deref(),
                watch,
                job_armed.as_deref(),
                multi,
                bytes.as_deref(),
                call,
            );
            if let Err(error) = sent {
                job_slot.fulfill(Err(error));
            }
        }));
        ZkFuture::pending(slot, None, move |reply, _| {
            let watch = armed.and_then(|armed| armed.lock().take());
            convert(reply, watch)
        })
    }

    /// Sends one request with its place in flight. The armed watch is returned, or put
    /// in `armed` before the C call (a queued request's future reads it from there once
    /// the reply is in, which can be before the C call returns).
    #[allow(clippy::too_many_arguments)]
    fn send_now(
        &self,
        permit: Permit,
        slot: &Arc<ReplySlot>,
        path: Option<&str>,
        watch: Option<WatchRequest<'_>>,
        armed: Option<&Mutex<Option<Watch>>>,
        multi: Option<Box<context::MultiBuffers>>,
        bytes: Option<&[u8]>,
        call: impl FnOnce(*mut sys::zhandle_t, *mut c_void, *const c_void, CallArgs) -> c_int,
    ) -> Result<Option<Watch>> {
        let client = self.client_key();
        let is_multi = multi.is_some();
        let outcome = self.with_handle(|zh| {
            if is_multi {
                // An ended session is answered here, before C, for two reasons. In
                // 3.8 `zoo_amulti` checks the state once per operation, and when one
                // check fails it still frees each later operation's request path,
                // which it never initialised (a stale pointer: in practice the
                // previous operation's path, i.e. our buffer), and with a chroot it
                // frees the failing operation's path twice: heap corruption. And it
                // folds that ZINVALIDSTATE into ZMARSHALLINGERROR, the code it also
                // returns for an allocation failure after queueing, after which the
                // buffers must be kept. The check cannot close the window in which
                // the IO thread ends the session during the call itself.
                if let Some(error) = terminal_error(zh) {
                    return Err(error);
                }
            }
            let mut prepared = match watch {
                None => crate::watch_table::Prepared::none(),
                watch => self.watch_table().prepare(watch)?,
            };
            if let Some(armed) = armed {
                *armed.lock() = prepared.watch.take();
            }
            let request_id = context::register_request(
                client,
                RequestEntry {
                    fulfiller: Fulfiller::new(Arc::clone(slot), permit),
                    watch: prepared.hook,
                    multi,
                },
            );
            // The path is made NUL-terminated here, in this frame, for the one C call
            // (C copies it into the request before returning): nothing moves it.
            let rc = with_c_path(path, |path| {
                let (data, len) = crate::ops::data_ptr(bytes.unwrap_or_default());
                let args = CallArgs { path, data, len };
                terminal_code(
                    zh,
                    call(zh, prepared.context, context::id_to_ptr(request_id), args),
                )
            });
            if rc == sys::ZMARSHALLINGERROR && is_multi {
                // The session ended during the call: that is the error (the slot keeps
                // the first result); the buffers are still kept below, as C may hold them.
                if let Some(error) = terminal_error(zh) {
                    slot.fulfill(Err(error));
                }
            }
            if rc != sys::ZOK {
                context::submission_failed(request_id, rc);
            }
            Ok(prepared.watch)
        });
        outcome?
    }
}

/// A queued request's slot until it is sent: a job dropped without running (which the
/// queue never does: every place held is given back, at the latest by a close's sweep)
/// still tells its caller, with `Closed`.
struct Unsent(Option<Arc<ReplySlot>>);

impl Unsent {
    fn take(mut self) -> Option<Arc<ReplySlot>> {
        self.0.take()
    }
}

impl Drop for Unsent {
    fn drop(&mut self) {
        if let Some(slot) = self.0.take() {
            slot.fulfill(Err(Error::Closed));
        }
    }
}

/// What a request hands C, as C takes it, valid for the C call it is given to: the
/// node path (NUL-terminated; NULL for a request without one) and the bytes it sends
/// (a value, credentials; an empty buffer if none).
#[derive(Clone, Copy)]
pub(crate) struct CallArgs {
    pub(crate) path: *const c_char,
    pub(crate) data: *const c_char,
    pub(crate) len: c_int,
}

/// Runs `f` with `path` NUL-terminated (NULL for `None`). The path was checked when the
/// request was made (no NUL inside). Up to [`INLINE_PATH`] bytes it is copied to a
/// buffer in this frame, longer ones to the heap.
fn with_c_path<R>(path: Option<&str>, f: impl FnOnce(*const c_char) -> R) -> R {
    let Some(path) = path else {
        return f(std::ptr::null());
    };
    let bytes = path.as_bytes();
    if bytes.len() > INLINE_PATH {
        let mut owned = Vec::with_capacity(bytes.len() + 1);
        owned.extend_from_slice(bytes);
        owned.push(0);
        return f(owned.as_ptr().cast());
    }
    let mut buffer = [std::mem::MaybeUninit::<u8>::uninit(); INLINE_PATH + 1];
    // SAFETY: `bytes.len() <= INLINE_PATH`, so the path and its NUL fit the buffer; the
    // source is a `&[u8]` and cannot overlap a local array.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), buffer.as_mut_ptr().cast(), bytes.len());
    }
    buffer[bytes.len()].write(0);
    f(buffer.as_ptr().cast())
}

/// Longest path copied to the stack for its C call (NUL excluded).
const INLINE_PATH: usize = 255;

/// A queued request's watch, owned until the request is sent.
enum OwnedWatchRequest {
    Read(WatchKind, String),
    Remove(String, WatcherType),
}

impl OwnedWatchRequest {
    fn of(watch: WatchRequest<'_>) -> OwnedWatchRequest {
        match watch {
            WatchRequest::Read(kind, path) => OwnedWatchRequest::Read(kind, path.to_string()),
            WatchRequest::Remove(path, which) => OwnedWatchRequest::Remove(path.to_string(), which),
        }
    }

    fn borrowed(&self) -> WatchRequest<'_> {
        match self {
            OwnedWatchRequest::Read(kind, path) => WatchRequest::Read(*kind, path),
            OwnedWatchRequest::Remove(path, which) => WatchRequest::Remove(path, *which),
        }
    }
}

/// C answers ZINVALIDSTATE for a call on a session that has just ended, before the
/// global watcher has told us: name the ending instead (`SessionExpired`, `AuthFailed`),
/// as calls made a moment later get it.
pub(crate) fn terminal_code(zh: *mut sys::zhandle_t, rc: c_int) -> c_int {
    if rc != sys::ZINVALIDSTATE {
        return rc;
    }
    terminal_error(zh)
        .and_then(|error| error.code())
        .unwrap_or(rc)
}

/// The error for a session the C client already knows has ended (expired or failed
/// authentication), whether or not its session event has reached us yet.
fn terminal_error(zh: *mut sys::zhandle_t) -> Option<Error> {
    // SAFETY: the caller holds the handle's read lock, so `zh` is live.
    let state = unsafe { sys::zoo_state(zh) };
    // SAFETY: reading `extern const int`s the C library defines and never writes.
    let (expired, auth_failed) =
        unsafe { (sys::ZOO_EXPIRED_SESSION_STATE, sys::ZOO_AUTH_FAILED_STATE) };
    if state == expired {
        Some(Error::SessionExpired)
    } else if state == auth_failed {
        Some(Error::AuthFailed)
    } else {
        None
    }
}

/// One request being prepared: the watch it arms and the buffers C writes into, if any;
/// [`send`](Self::send) submits it. Every operation goes through here, so registering
/// the contexts, the ended-session checks and the failure paths are written once.
pub(crate) struct Request<'a> {
    zk: &'a ZooKeeper,
    path: Option<&'a str>,
    watch: Option<WatchRequest<'a>>,
    buffers: Option<Box<context::MultiBuffers>>,
    bytes: Option<&'a [u8]>,
}

impl<'a> Request<'a> {
    /// The node path, already checked ([`validate_path`](crate::validate_path)): the
    /// call gets it NUL-terminated as [`CallArgs::path`] (copied only if the request is
    /// queued).
    pub(crate) fn at(mut self, path: &'a str) -> Self {
        self.path = Some(path);
        self
    }

    /// Sends `bytes` (a value or credentials): the call gets them in [`CallArgs`], valid
    /// for the call (copied only if the request is queued).
    pub(crate) fn sending(mut self, bytes: &'a [u8]) -> Self {
        self.bytes = Some(bytes);
        self
    }

    /// Arms `watch` with the request (`None`: no watch).
    pub(crate) fn watching(mut self, watch: Option<WatchRequest<'a>>) -> Self {
        self.watch = watch;
        self
    }

    /// Keeps `buffers` (which C writes the results into) until the completion or close.
    pub(crate) fn keeping(mut self, buffers: Box<context::MultiBuffers>) -> Self {
        self.buffers = Some(buffers);
        self
    }

    /// Submits with `call` (given the handle, the watcher context, the request context
    /// and the [`CallArgs`]) and converts the reply with `convert` (given the armed watch).
    /// `call` owns what it uses: a request made when the handle is full runs it later,
    /// on another thread.
    pub(crate) fn send<T: 'static>(
        self,
        call: impl FnOnce(*mut sys::zhandle_t, *mut c_void, *const c_void, CallArgs) -> c_int
            + Send
            + 'static,
        convert: impl FnOnce(Reply, Option<Watch>) -> Result<T> + Send + 'static,
    ) -> ZkFuture<T> {
        self.zk.submit(
            self.path,
            self.watch,
            self.buffers,
            self.bytes,
            call,
            convert,
        )
    }
}
