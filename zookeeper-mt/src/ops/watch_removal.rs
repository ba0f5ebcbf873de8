//! Removing watches: by path and kind on the server or locally, or one `Watch`.

use super::*;
use crate::client::ZooKeeper;
use crate::context;
use crate::error::{Error, Result};
use crate::path::c_path;
use crate::types::{WatchRemoval, WatcherType};
use crate::watch::Watch;
use crate::watch_table::WatchRequest;
use std::os::raw::c_int;
use zookeeper_mt_sys as sys;

impl ZooKeeper {
    /// Removes this handle's watches on `path` of the given type (`zoo_remove_all_watches`).
    /// With [`WatchRemoval::Local`], only the client forgets them (works while
    /// disconnected); with [`WatchRemoval::Server`], the server does too and answers
    /// `NoWatcher` if it had none. Each removed [`Watch`] receives a `NotWatching` event.
    ///
    /// A watch set concurrently (its read not yet answered) is either removed too or
    /// stays armed and fires later: never both, never neither. On the server the
    /// request is asynchronous in C, so no lock is held while the server answers: a
    /// concurrent `close` never waits for it (the C client's blocking form can wait
    /// forever if it races the end of the session, ZOOKEEPER-2802).
    pub fn remove_watches(&self, path: &str, which: WatcherType, from: WatchRemoval) -> Result<()> {
        let c_path = c_path(path, false)?;
        if from == WatchRemoval::Server {
            return self
                .request()
                .watching(Some(WatchRequest::Remove(path, which)))
                .send(
                    move |zh, _, request, _args| {
                        // The header declares `void_completion_t *completion`, but C
                        // stores and later calls that pointer as the completion function
                        // itself (`c.void_result = (void_completion_t)dc`): pass the
                        // function, cast to the declared type.
                        let completion: unsafe extern "C" fn(c_int, *const std::ffi::c_void) =
                            context::void_completion;
                        // SAFETY: live handle; path valid for the call; the completion is
                        // ours (as above), its context a registry id. C removes the
                        // watches when the answer arrives, in order with replies and
                        // events.
                        unsafe {
                            sys::zoo_aremove_all_watches(
                                zh,
                                c_path.as_ptr(),
                                which.to_c(),
                                0,
                                completion as *const () as *mut sys::void_completion_t,
                                request,
                            )
                        }
                    },
                    |reply, _| payload(reply).map(drop),
                )
                .wait();
        }
        let rc = self.with_handle(|zh| {
            // SAFETY: live handle; path valid for the call. Sync form: `zoo_aremove_watches`
            // with local=1 is broken in 3.8.0 (it signals the caller's completion data as
            // its own sync completion and never calls the completion). With local=1 the
            // sync form never waits: C removes the entries under its watcher lock and
            // signals its completion before waiting on it.
            let rc = unsafe { sys::zoo_remove_all_watches(zh, c_path.as_ptr(), which.to_c(), 1) };
            crate::request::terminal_code(zh, rc)
        })?;
        Error::check(rc)?;
        self.watch_table().retire(path, which);
        Ok(())
    }

    /// Removes one watch; it receives a `NotWatching` event. `NoWatcher` if it already
    /// fired or was removed.
    ///
    /// Only the client forgets it: the server keeps one watch per path and type for the
    /// whole session, shared with every other watch there (the C client's
    /// `zoo_remove_watches` for one watcher does not remove it from the server either).
    /// When it was the last watch on its path and kind, the C registration is released.
    pub fn remove_watch(&self, watch: &Watch) -> Result<()> {
        if watch.table.client() != self.client_key() {
            return Err(Error::InvalidArgument(
                "the watch belongs to another handle",
            ));
        }
        // Fails on a closed or ended session, as every call does.
        self.with_handle(|_| ())?;
        watch.table.remove_one(watch.registration, watch.id)
    }
}
