//! Submitting a request: one path for every operation. The [`Request`] builder says
//! what the request arms (a watch) and keeps alive (a multi's buffers); `submit`
//! registers the contexts, checks for an ended session, calls C and turns a failed
//! submission into a failed future.

use crate::client::ZooKeeper;
use crate::context::{self, RequestEntry};
use crate::error::{Error, Result};
use crate::reply::{Fulfiller, Reply, ReplySlot, ZkFuture};
use crate::watch::Watch;
use crate::watch_table::WatchRequest;
use std::os::raw::{c_int, c_void};
use std::sync::Arc;
use zookeeper_mt_sys as sys;

impl ZooKeeper {
    /// A request to prepare and [`send`](Request::send).
    pub(crate) fn request(&self) -> Request<'_> {
        Request {
            zk: self,
            watch: None,
            buffers: None,
        }
    }

    /// Submits one asynchronous C call. `call` gets the handle, the watch context (NULL
    /// unless `watch` is a watching read) and the request context, and returns the C
    /// return code.
    fn submit<T: 'static>(
        &self,
        watch: Option<WatchRequest<'_>>,
        multi: Option<Box<context::MultiBuffers>>,
        call: impl FnOnce(*mut sys::zhandle_t, *mut c_void, *const c_void) -> c_int,
        convert: impl FnOnce(Reply, Option<Watch>) -> Result<T> + Send + 'static,
    ) -> ZkFuture<T> {
        let client = self.client_key();
        let permit = match self.in_flight_permit() {
            Ok(permit) => permit,
            Err(error) => return ZkFuture::failed(error),
        };
        let slot = ReplySlot::new();
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
            let prepared = self.watch_table().prepare(watch)?;
            let request_id = context::register_request(
                client,
                RequestEntry {
                    fulfiller: Fulfiller::new(Arc::clone(&slot), permit),
                    watch: prepared.hook,
                    multi,
                },
            );
            let rc = terminal_code(
                zh,
                call(zh, prepared.context, context::id_to_ptr(request_id)),
            );
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
        match outcome {
            Ok(Ok(watch)) => ZkFuture::pending(slot, watch, convert),
            Ok(Err(error)) | Err(error) => ZkFuture::failed(error),
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
    watch: Option<WatchRequest<'a>>,
    buffers: Option<Box<context::MultiBuffers>>,
}

impl<'a> Request<'a> {
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

    /// Submits with `call` (given the handle, the watcher context and the request
    /// context) and converts the reply with `convert` (given the armed watch).
    pub(crate) fn send<T: 'static>(
        self,
        call: impl FnOnce(*mut sys::zhandle_t, *mut c_void, *const c_void) -> c_int,
        convert: impl FnOnce(Reply, Option<Watch>) -> Result<T> + Send + 'static,
    ) -> ZkFuture<T> {
        self.zk.submit(self.watch, self.buffers, call, convert)
    }
}
