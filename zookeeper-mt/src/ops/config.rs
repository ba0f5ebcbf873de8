//! `sync`, the ensemble configuration and reconfiguration.

use super::*;
use crate::client::ZooKeeper;
use crate::context;
use crate::error::{Error, Result};
use crate::path::{c_string, validate_path};
use crate::reply::{Payload, ZkFuture};
use crate::types::Stat;
use crate::watch::Watch;
use crate::watch_table::{WatchKind, WatchRequest};
use crate::Reconfig;
use std::ffi::CString;
use std::ptr;
use zookeeper_mt_sys as sys;

impl ZooKeeper {
    /// Waits until the server this session is connected to has caught up with the
    /// leader on `path` (`zoo_async`). Returns the path.
    pub fn sync(&self, path: &str) -> Result<String> {
        self.sync_async(path).wait()
    }

    /// Async [`sync`](Self::sync).
    pub fn sync_async(&self, path: &str) -> ZkFuture<String> {
        checked!(validate_path(path, false));
        self.request().at(path).send(
            move |zh, _, request, args| {
                // SAFETY: live handle; path valid for the call; ours is the completion.
                unsafe { sys::zoo_async(zh, args.path, Some(context::string_completion), request) }
            },
            |reply, _| match payload(reply)? {
                Payload::Path(path, _) => Ok(path),
                other => unexpected(other),
            },
        )
    }

    /// The ensemble configuration (`/zookeeper/config`) and its `Stat`.
    pub fn get_config(&self) -> Result<(Vec<u8>, Stat)> {
        self.config_impl(false, |data, stat, _| Ok((data, stat)))
            .wait()
    }

    /// [`get_config`](Self::get_config) and a watch on the configuration node.
    pub fn get_config_watch(&self) -> Result<(Vec<u8>, Stat, Watch)> {
        self.get_config_watch_async().wait()
    }

    /// Async [`get_config_watch`](Self::get_config_watch).
    pub fn get_config_watch_async(&self) -> ZkFuture<(Vec<u8>, Stat, Watch)> {
        self.config_impl(true, |data, stat, watch| Ok((data, stat, watch_of(watch)?)))
    }

    /// Async [`get_config`](Self::get_config).
    pub fn get_config_async(&self) -> ZkFuture<(Vec<u8>, Stat)> {
        self.config_impl(false, |data, stat, _| Ok((data, stat)))
    }

    fn config_impl<T: 'static>(
        &self,
        watch: bool,
        finish: impl FnOnce(Vec<u8>, Stat, Option<Watch>) -> Result<T> + Send + 'static,
    ) -> ZkFuture<T> {
        self.request()
            .watching(watch.then_some(WatchRequest::Read(WatchKind::Config, "/zookeeper/config")))
            .send(
                move |zh, watch_context, request, _args| {
                    let watcher = context::path_watcher_if(watch);
                    // SAFETY: live handle; the watcher context is a registry id or NULL;
                    // ours is the completion.
                    unsafe {
                        sys::zoo_awgetconfig(
                            zh,
                            watcher,
                            watch_context,
                            Some(context::data_completion),
                            request,
                        )
                    }
                },
                move |reply, watch| match payload(reply)? {
                    Payload::Data(data, stat) => finish(data, stat_of(stat)?, watch),
                    other => unexpected(other),
                },
            )
    }

    /// Changes the ensemble membership (`zoo_reconfig`), only from configuration
    /// version `from_config` if given. Returns the new configuration.
    ///
    /// Needs a server with `reconfigEnabled=true` and the `super` user or an ACL on
    /// `/zookeeper/config` that allows it.
    pub fn reconfig(
        &self,
        change: Reconfig<'_>,
        from_config: Option<i64>,
    ) -> Result<(Vec<u8>, Stat)> {
        self.reconfig_async(change, from_config).wait()
    }

    /// Async [`reconfig`](Self::reconfig).
    pub fn reconfig_async(
        &self,
        change: Reconfig<'_>,
        from_config: Option<i64>,
    ) -> ZkFuture<(Vec<u8>, Stat)> {
        let (joining, leaving, members) = match change {
            Reconfig::Incremental { joining, leaving } => (joining, leaving, ""),
            Reconfig::Bulk { members } => ("", "", members),
        };
        // An empty list is no list (NULL to C).
        let convert = |value: &str, what| {
            (!value.is_empty())
                .then(|| c_string(value, what))
                .transpose()
        };
        let (joining, leaving, members) = match (
            convert(joining, "joining servers"),
            convert(leaving, "leaving servers"),
            convert(members, "members"),
        ) {
            (Ok(j), Ok(l), Ok(m)) => (j, l, m),
            (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => return ZkFuture::failed(e),
        };
        if joining.is_none() && leaving.is_none() && members.is_none() {
            return ZkFuture::failed(Error::InvalidArgument("a reconfig without any change"));
        }
        let as_ptr = |value: &Option<CString>| value.as_ref().map_or(ptr::null(), |v| v.as_ptr());
        self.request().send(
            move |zh, _, request, _args| {
                // SAFETY: live handle; strings NULL or valid for the call; ours is the completion.
                unsafe {
                    sys::zoo_areconfig(
                        zh,
                        as_ptr(&joining),
                        as_ptr(&leaving),
                        as_ptr(&members),
                        from_config.unwrap_or(-1),
                        Some(context::data_completion),
                        request,
                    )
                }
            },
            |reply, _| match payload(reply)? {
                Payload::Data(data, stat) => Ok((data, stat_of(stat)?)),
                other => unexpected(other),
            },
        )
    }
}
