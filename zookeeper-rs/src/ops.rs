//! Every request, in an asynchronous form returning a [`ZkFuture`] and a blocking form
//! that waits on it. Both go through `ZooKeeper::submit`, so sync and async calls share
//! one path, one ordering (the C completion FIFO) and one context discipline.

use crate::acl::CAcl;
use crate::client::ZooKeeper;
use crate::context::{self, MultiBuffers};
use crate::error::{Error, Result};
use crate::multi::{Op, OpResult};
use crate::path::{c_path, c_string, check_data};
use crate::reply::{Payload, Reply, ZkFuture};
use crate::timeout::Version;
use crate::types::{Acl, CreateMode, Stat, WatchRemoval, WatcherType};
use crate::watch::Watch;
use crate::watch_table::{WatchKind, WatchRequest};
use crate::{CreateOptions, Reconfig};
use std::ffi::CString;
use std::os::raw::{c_char, c_int};
use std::ptr;
use zookeeper_sys as sys;

/// Fails with the reply's error, or yields its payload.
fn payload(reply: Reply) -> Result<Payload> {
    Error::check(reply.rc)?;
    Ok(reply.payload)
}

/// A payload of an unexpected shape: a bug in this binding, reported, not panicked on.
fn unexpected<T>(payload: Payload) -> Result<T> {
    log::error!("zookeeper-rs: unexpected completion payload {payload:?}");
    Err(Error::SystemError)
}

fn stat_of(stat: Option<Stat>) -> Result<Stat> {
    stat.ok_or(Error::SystemError)
}

fn version_of(version: Version) -> c_int {
    version.as_raw()
}

fn data_ptr(data: &[u8]) -> (*const c_char, c_int) {
    if data.is_empty() {
        // An empty value is sent as a zero-length buffer, not a null node.
        (b"".as_ptr() as *const c_char, 0)
    } else {
        (data.as_ptr() as *const c_char, data.len() as c_int)
    }
}

fn watch_of(watch: Option<Watch>) -> Result<Watch> {
    watch.ok_or(Error::SystemError)
}

/// Everything a create needs, checked before it reaches C.
struct CreateArgs {
    path: CString,
    acl: CAcl,
    mode: c_int,
    ttl: i64,
}

fn create_args(path: &str, data: &[u8], acl: &[Acl], mode: CreateMode) -> Result<CreateArgs> {
    let c_path = c_path(path, mode.is_sequential())?;
    check_data(data)?;
    if acl.is_empty() {
        return Err(Error::InvalidAcl);
    }
    check_request_len(request_len(path, data, acl))?;
    let path = c_path;
    let (mode, ttl) = mode.to_c()?;
    Ok(CreateArgs {
        path,
        acl: CAcl::new(acl)?,
        mode,
        ttl,
    })
}

impl ZooKeeper {
    // ---------------- create ----------------

    /// Creates a node; returns its path (with the sequence suffix for sequential modes).
    pub fn create<'a>(
        &self,
        path: &str,
        data: &[u8],
        options: impl Into<CreateOptions<'a>>,
    ) -> Result<String> {
        self.create_async(path, data, options).wait()
    }

    /// Async [`create`](Self::create).
    pub fn create_async<'a>(
        &self,
        path: &str,
        data: &[u8],
        options: impl Into<CreateOptions<'a>>,
    ) -> ZkFuture<String> {
        self.create_impl(path, data, options.into(), false, |path, _| Ok(path))
    }

    /// Creates a node and returns its path and `Stat` (`zoo_create2`).
    pub fn create2<'a>(
        &self,
        path: &str,
        data: &[u8],
        options: impl Into<CreateOptions<'a>>,
    ) -> Result<(String, Stat)> {
        self.create2_async(path, data, options).wait()
    }

    /// Async [`create2`](Self::create2).
    pub fn create2_async<'a>(
        &self,
        path: &str,
        data: &[u8],
        options: impl Into<CreateOptions<'a>>,
    ) -> ZkFuture<(String, Stat)> {
        self.create_impl(path, data, options.into(), true, |path, stat| {
            Ok((path, stat_of(stat)?))
        })
    }

    /// One create: `zoo_acreate_ttl` (CREATE), or `zoo_acreate2_ttl` (CREATE2, which
    /// also answers the `Stat`) when `with_stat`.
    fn create_impl<T: 'static>(
        &self,
        path: &str,
        data: &[u8],
        options: CreateOptions<'_>,
        with_stat: bool,
        finish: impl FnOnce(String, Option<Stat>) -> Result<T> + Send + 'static,
    ) -> ZkFuture<T> {
        let mut args = match create_args(path, data, options.acl, options.mode) {
            Ok(args) => args,
            Err(error) => return ZkFuture::failed(error),
        };
        let (value, len) = data_ptr(data);
        self.submit(
            None,
            None,
            |zh, _, request| {
                let acl = args.acl.as_vector();
                // SAFETY: live handle; path, value and ACL are valid for the call and
                // serialized by C before it returns; the completion is ours and its
                // context is a registry id.
                unsafe {
                    if with_stat {
                        sys::zoo_acreate2_ttl(
                            zh,
                            args.path.as_ptr(),
                            value,
                            len,
                            &acl,
                            args.mode,
                            args.ttl,
                            Some(context::string_stat_completion),
                            request,
                        )
                    } else {
                        sys::zoo_acreate_ttl(
                            zh,
                            args.path.as_ptr(),
                            value,
                            len,
                            &acl,
                            args.mode,
                            args.ttl,
                            Some(context::string_completion),
                            request,
                        )
                    }
                }
            },
            move |reply, _| match payload(reply)? {
                Payload::Path(path, stat) => finish(path, stat),
                other => unexpected(other),
            },
        )
    }

    // ---------------- delete ----------------

    /// Deletes a node at `version` (`None`: any version).
    pub fn delete(&self, path: &str, version: impl Into<Version>) -> Result<()> {
        self.delete_async(path, version).wait()
    }

    /// Async [`delete`](Self::delete).
    pub fn delete_async(&self, path: &str, version: impl Into<Version>) -> ZkFuture<()> {
        let version = version.into();
        let path = match c_path(path, false) {
            Ok(path) => path,
            Err(error) => return ZkFuture::failed(error),
        };
        self.submit(
            None,
            None,
            |zh, _, request| {
                // SAFETY: live handle; the path is valid for the call; ours is the completion.
                unsafe {
                    sys::zoo_adelete(
                        zh,
                        path.as_ptr(),
                        version_of(version),
                        Some(context::void_completion),
                        request,
                    )
                }
            },
            |reply, _| payload(reply).map(drop),
        )
    }

    // ---------------- exists ----------------

    /// The node's `Stat`, or `None` if it does not exist.
    pub fn exists(&self, path: &str) -> Result<Option<Stat>> {
        self.exists_async(path).wait()
    }

    /// Async [`exists`](Self::exists).
    pub fn exists_async(&self, path: &str) -> ZkFuture<Option<Stat>> {
        self.exists_impl(path, false, |stat, _| Ok(stat))
    }

    /// [`exists`](Self::exists) and a watch that fires on the node's creation, deletion
    /// or data change (set whether or not the node exists).
    pub fn exists_watch(&self, path: &str) -> Result<(Option<Stat>, Watch)> {
        self.exists_watch_async(path).wait()
    }

    /// Async [`exists_watch`](Self::exists_watch).
    pub fn exists_watch_async(&self, path: &str) -> ZkFuture<(Option<Stat>, Watch)> {
        self.exists_impl(path, true, |stat, watch| Ok((stat, watch_of(watch)?)))
    }

    fn exists_impl<T: 'static>(
        &self,
        path_str: &str,
        watch: bool,
        finish: impl FnOnce(Option<Stat>, Option<Watch>) -> Result<T> + Send + 'static,
    ) -> ZkFuture<T> {
        let path = match c_path(path_str, false) {
            Ok(path) => path,
            Err(error) => return ZkFuture::failed(error),
        };
        self.submit(
            watch.then_some(WatchRequest::Read(WatchKind::Exists, path_str)),
            None,
            |zh, watch_context, request| {
                let watcher = if watch {
                    Some(context::path_watcher as _)
                } else {
                    None
                };
                // SAFETY: live handle; path valid for the call; the watcher context is a
                // registry id (or NULL with no watcher); ours is the completion.
                unsafe {
                    sys::zoo_awexists(
                        zh,
                        path.as_ptr(),
                        watcher,
                        watch_context,
                        Some(context::stat_completion),
                        request,
                    )
                }
            },
            move |reply, watch| {
                if reply.rc == sys::ZNONODE {
                    return finish(None, watch);
                }
                match payload(reply)? {
                    Payload::Stat(stat) => finish(Some(stat_of(stat)?), watch),
                    other => unexpected(other),
                }
            },
        )
    }

    // ---------------- get ----------------

    /// The node's data and `Stat`.
    pub fn get(&self, path: &str) -> Result<(Vec<u8>, Stat)> {
        self.get_async(path).wait()
    }

    /// Async [`get`](Self::get).
    pub fn get_async(&self, path: &str) -> ZkFuture<(Vec<u8>, Stat)> {
        self.get_impl(path, false, |data, stat, _| Ok((data, stat)))
    }

    /// [`get`](Self::get) and a watch that fires on the node's data change or deletion.
    pub fn get_watch(&self, path: &str) -> Result<(Vec<u8>, Stat, Watch)> {
        self.get_watch_async(path).wait()
    }

    /// Async [`get_watch`](Self::get_watch).
    pub fn get_watch_async(&self, path: &str) -> ZkFuture<(Vec<u8>, Stat, Watch)> {
        self.get_impl(path, true, |data, stat, watch| {
            Ok((data, stat, watch_of(watch)?))
        })
    }

    fn get_impl<T: 'static>(
        &self,
        path_str: &str,
        watch: bool,
        finish: impl FnOnce(Vec<u8>, Stat, Option<Watch>) -> Result<T> + Send + 'static,
    ) -> ZkFuture<T> {
        let path = match c_path(path_str, false) {
            Ok(path) => path,
            Err(error) => return ZkFuture::failed(error),
        };
        self.submit(
            watch.then_some(WatchRequest::Read(WatchKind::Data, path_str)),
            None,
            |zh, watch_context, request| {
                let watcher = if watch {
                    Some(context::path_watcher as _)
                } else {
                    None
                };
                // SAFETY: as in `exists_impl`.
                unsafe {
                    sys::zoo_awget(
                        zh,
                        path.as_ptr(),
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

    // ---------------- set ----------------

    /// Sets the node's data at `version` (`None`: any); returns the new `Stat` (`zoo_set2`).
    pub fn set(&self, path: &str, data: &[u8], version: impl Into<Version>) -> Result<Stat> {
        self.set_async(path, data, version).wait()
    }

    /// Async [`set`](Self::set).
    pub fn set_async(
        &self,
        path: &str,
        data: &[u8],
        version: impl Into<Version>,
    ) -> ZkFuture<Stat> {
        let version = version.into();
        let checked = c_path(path, false).and_then(|c| {
            check_data(data)?;
            check_request_len(request_len(path, data, &[]))?;
            Ok(c)
        });
        let path = match checked {
            Ok(path) => path,
            Err(error) => return ZkFuture::failed(error),
        };
        let (value, len) = data_ptr(data);
        self.submit(
            None,
            None,
            |zh, _, request| {
                // SAFETY: live handle; path and data valid for the call and serialized by
                // C before it returns; ours is the completion.
                unsafe {
                    sys::zoo_aset(
                        zh,
                        path.as_ptr(),
                        value,
                        len,
                        version_of(version),
                        Some(context::stat_completion),
                        request,
                    )
                }
            },
            |reply, _| match payload(reply)? {
                Payload::Stat(stat) => stat_of(stat),
                other => unexpected(other),
            },
        )
    }

    // ---------------- children ----------------

    /// The names of the node's children (unsorted, as the server sends them).
    pub fn get_children(&self, path: &str) -> Result<Vec<String>> {
        self.get_children_async(path).wait()
    }

    /// Async [`get_children`](Self::get_children).
    pub fn get_children_async(&self, path: &str) -> ZkFuture<Vec<String>> {
        self.children_impl(path, false, |children, _, _| Ok(children))
    }

    /// The children and the parent's `Stat` (`zoo_get_children2`).
    pub fn get_children2(&self, path: &str) -> Result<(Vec<String>, Stat)> {
        self.get_children2_async(path).wait()
    }

    /// Async [`get_children2`](Self::get_children2).
    pub fn get_children2_async(&self, path: &str) -> ZkFuture<(Vec<String>, Stat)> {
        self.children_impl(path, false, |children, stat, _| {
            Ok((children, stat_of(stat)?))
        })
    }

    /// [`get_children`](Self::get_children) and a watch that fires when a child is added
    /// or removed, or the node is deleted.
    pub fn get_children_watch(&self, path: &str) -> Result<(Vec<String>, Watch)> {
        self.get_children_watch_async(path).wait()
    }

    /// Async [`get_children_watch`](Self::get_children_watch).
    pub fn get_children_watch_async(&self, path: &str) -> ZkFuture<(Vec<String>, Watch)> {
        self.children_impl(path, true, |children, _, watch| {
            Ok((children, watch_of(watch)?))
        })
    }

    /// [`get_children2`](Self::get_children2) with a child watch.
    pub fn get_children2_watch(&self, path: &str) -> Result<(Vec<String>, Stat, Watch)> {
        self.get_children2_watch_async(path).wait()
    }

    /// Async [`get_children2_watch`](Self::get_children2_watch).
    pub fn get_children2_watch_async(&self, path: &str) -> ZkFuture<(Vec<String>, Stat, Watch)> {
        self.children_impl(path, true, |children, stat, watch| {
            Ok((children, stat_of(stat)?, watch_of(watch)?))
        })
    }

    fn children_impl<T: 'static>(
        &self,
        path_str: &str,
        watch: bool,
        finish: impl FnOnce(Vec<String>, Option<Stat>, Option<Watch>) -> Result<T> + Send + 'static,
    ) -> ZkFuture<T> {
        let path = match c_path(path_str, false) {
            Ok(path) => path,
            Err(error) => return ZkFuture::failed(error),
        };
        self.submit(
            watch.then_some(WatchRequest::Read(WatchKind::Children, path_str)),
            None,
            |zh, watch_context, request| {
                let watcher = if watch {
                    Some(context::path_watcher as _)
                } else {
                    None
                };
                // SAFETY: as in `exists_impl`.
                unsafe {
                    sys::zoo_awget_children2(
                        zh,
                        path.as_ptr(),
                        watcher,
                        watch_context,
                        Some(context::strings_stat_completion),
                        request,
                    )
                }
            },
            move |reply, watch| match payload(reply)? {
                Payload::Children(children, stat) => finish(children, stat, watch),
                other => unexpected(other),
            },
        )
    }

    // ---------------- ACLs and auth ----------------

    /// The node's ACL and `Stat`.
    pub fn get_acl(&self, path: &str) -> Result<(Vec<Acl>, Stat)> {
        self.get_acl_async(path).wait()
    }

    /// Async [`get_acl`](Self::get_acl).
    pub fn get_acl_async(&self, path: &str) -> ZkFuture<(Vec<Acl>, Stat)> {
        let path = match c_path(path, false) {
            Ok(path) => path,
            Err(error) => return ZkFuture::failed(error),
        };
        self.submit(
            None,
            None,
            |zh, _, request| {
                // SAFETY: live handle; path valid for the call; ours is the completion.
                unsafe {
                    sys::zoo_aget_acl(zh, path.as_ptr(), Some(context::acl_completion), request)
                }
            },
            |reply, _| match payload(reply)? {
                Payload::Acl(acl, stat) => Ok((acl, stat_of(stat)?)),
                other => unexpected(other),
            },
        )
    }

    /// Replaces the node's ACL at ACL `version` (`None`: any).
    pub fn set_acl(&self, path: &str, acl: &[Acl], version: impl Into<Version>) -> Result<()> {
        self.set_acl_async(path, acl, version).wait()
    }

    /// Async [`set_acl`](Self::set_acl).
    pub fn set_acl_async(
        &self,
        path: &str,
        acl: &[Acl],
        version: impl Into<Version>,
    ) -> ZkFuture<()> {
        let version = version.into();
        if acl.is_empty() {
            return ZkFuture::failed(Error::InvalidAcl);
        }
        let (path, mut acl) = match c_path(path, false).and_then(|p| Ok((p, CAcl::new(acl)?))) {
            Ok(args) => args,
            Err(error) => return ZkFuture::failed(error),
        };
        self.submit(
            None,
            None,
            |zh, _, request| {
                let mut vector = acl.as_vector();
                // SAFETY: live handle; path and ACL valid for the call and serialized by C
                // before it returns; ours is the completion.
                unsafe {
                    sys::zoo_aset_acl(
                        zh,
                        path.as_ptr(),
                        version_of(version),
                        &mut vector,
                        Some(context::void_completion),
                        request,
                    )
                }
            },
            |reply, _| payload(reply).map(drop),
        )
    }

    /// Adds credentials to the session (`zoo_add_auth`), e.g. `("digest", b"user:pass")`.
    /// Wrong credentials for a scheme the server checks end the session (`AuthFailed`).
    ///
    /// Scheme and credentials above the server's default request limit (`jute.maxbuffer`,
    /// 0xfffff bytes) fail with `DataTooLarge` before anything is sent: the server would
    /// drop the connection instead of answering, and the C client, which resends every
    /// credential after each reconnect, would reconnect in a loop until the session
    /// expired.
    pub fn add_auth(&self, scheme: &str, credentials: &[u8]) -> Result<()> {
        self.add_auth_async(scheme, credentials).wait()
    }

    /// Async [`add_auth`](Self::add_auth).
    pub fn add_auth_async(&self, scheme: &str, credentials: &[u8]) -> ZkFuture<()> {
        if let Err(error) = check_auth_len(scheme, credentials.len()) {
            return ZkFuture::failed(error);
        }
        let scheme = match c_string(scheme, "auth scheme") {
            Ok(scheme) if !scheme.as_bytes().is_empty() => scheme,
            Ok(_) => return ZkFuture::failed(Error::InvalidArgument("empty auth scheme")),
            Err(error) => return ZkFuture::failed(error),
        };
        // In range of `c_int`: checked above.
        let (cert, len) = data_ptr(credentials);
        self.submit(
            None,
            None,
            |zh, _, request| {
                // SAFETY: live handle; scheme and credentials are copied by C before it
                // returns (it keeps them to resend on reconnect), `len` is their true
                // length (bounded above, so no `int` truncation); ours is the completion.
                unsafe {
                    sys::zoo_add_auth(
                        zh,
                        scheme.as_ptr(),
                        cert,
                        len,
                        Some(context::void_completion),
                        request,
                    )
                }
            },
            |reply, _| payload(reply).map(drop),
        )
    }

    // ---------------- sync, config ----------------

    /// Waits until the server this session is connected to has caught up with the
    /// leader on `path` (`zoo_async`). Returns the path.
    pub fn sync(&self, path: &str) -> Result<String> {
        self.sync_async(path).wait()
    }

    /// Async [`sync`](Self::sync).
    pub fn sync_async(&self, path: &str) -> ZkFuture<String> {
        let path = match c_path(path, false) {
            Ok(path) => path,
            Err(error) => return ZkFuture::failed(error),
        };
        self.submit(
            None,
            None,
            |zh, _, request| {
                // SAFETY: live handle; path valid for the call; ours is the completion.
                unsafe {
                    sys::zoo_async(zh, path.as_ptr(), Some(context::string_completion), request)
                }
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
        self.submit(
            watch.then_some(WatchRequest::Read(WatchKind::Config, "/zookeeper/config")),
            None,
            |zh, watch_context, request| {
                let watcher = if watch {
                    Some(context::path_watcher as _)
                } else {
                    None
                };
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
        self.submit(
            None,
            None,
            |zh, _, request| {
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

    // ---------------- multi ----------------

    /// Runs `ops` atomically: all are applied or none. On failure the error is
    /// `MultiFailed { index, error }` naming the first failing operation (or a session
    /// error such as `ConnectionLoss` if the multi never got an answer).
    pub fn multi(&self, ops: &[Op]) -> Result<Vec<OpResult>> {
        self.multi_async(ops).wait()
    }

    /// Async [`multi`](Self::multi).
    pub fn multi_async(&self, ops: &[Op]) -> ZkFuture<Vec<OpResult>> {
        let mut buffers = match multi_buffers(ops) {
            Ok(buffers) => buffers,
            Err(error) => return ZkFuture::failed(error),
        };
        let kinds: Vec<OpKind> = ops.iter().map(OpKind::of).collect();
        let count = ops.len() as c_int;
        let ops_ptr = buffers.ops.as_ptr();
        let results_ptr = buffers.results.as_mut_ptr();
        self.submit(
            None,
            Some(buffers),
            |zh, _, request| {
                // SAFETY: live handle; `ops_ptr`/`results_ptr` point into the heap buffers
                // of the `MultiBuffers` now owned by the request's registry entry, which
                // lives until the completion has run (or close), as C requires.
                unsafe {
                    sys::zoo_amulti(
                        zh,
                        count,
                        ops_ptr,
                        results_ptr,
                        Some(context::multi_completion),
                        request,
                    )
                }
            },
            move |reply, _| {
                let Payload::Multi(outcomes) = reply.payload else {
                    Error::check(reply.rc)?;
                    return unexpected(reply.payload);
                };
                if reply.rc != sys::ZOK {
                    let whole = Error::from_code(reply.rc).unwrap_or(Error::SystemError);
                    if !is_per_op_error(&whole) {
                        // The multi as a whole got no answer (connection loss, expiry,
                        // close...): report that, so `is_connection_loss()` etc. hold.
                        return Err(whole);
                    }
                    let failed = outcomes
                        .iter()
                        .position(|o| o.rc != sys::ZOK && o.rc != sys::ZRUNTIMEINCONSISTENCY);
                    return Err(match failed {
                        Some(index) => Error::MultiFailed {
                            index,
                            error: Box::new(
                                Error::from_code(outcomes[index].rc).unwrap_or(Error::SystemError),
                            ),
                        },
                        None => Error::from_code(reply.rc).unwrap_or(Error::SystemError),
                    });
                }
                Ok(outcomes
                    .into_iter()
                    .zip(kinds)
                    .map(|(outcome, kind)| match kind {
                        OpKind::Create => OpResult::Created(outcome.path.unwrap_or_default()),
                        OpKind::Delete => OpResult::Deleted,
                        OpKind::SetData => OpResult::DataSet(outcome.stat.unwrap_or_default()),
                        OpKind::Check => OpResult::Checked,
                    })
                    .collect())
            },
        )
    }

    // ---------------- watch removal ----------------

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
                .submit(
                    Some(WatchRequest::Remove(path, which)),
                    None,
                    |zh, _, request| {
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
            crate::client::terminal_code(zh, rc)
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

#[derive(Clone, Copy)]
enum OpKind {
    Create,
    Delete,
    SetData,
    Check,
}

impl OpKind {
    fn of(op: &Op) -> OpKind {
        match op {
            Op::Create { .. } => OpKind::Create,
            Op::Delete { .. } => OpKind::Delete,
            Op::SetData { .. } => OpKind::SetData,
            Op::Check { .. } => OpKind::Check,
        }
    }
}

/// Longest path C may write back for a created node: the request path plus a
/// 10-digit sequence suffix and its NUL (plus slack).
fn created_path_capacity(path: &str) -> usize {
    path.len() + 32
}

/// Validates `ops` and lays out everything `zoo_amulti` reads and writes.
fn multi_buffers(ops: &[Op]) -> Result<Box<MultiBuffers>> {
    if ops.is_empty() {
        return Err(Error::InvalidArgument(
            "a multi needs at least one operation",
        ));
    }
    if ops.len() > i32::MAX as usize {
        return Err(Error::InvalidArgument("too many operations"));
    }
    let mut buffers = Box::new(MultiBuffers {
        // SAFETY: zoo_op_t is a plain C struct/union for which all-zero is a valid value;
        // each one is initialised by a zoo_*_op_init call below.
        ops: (0..ops.len())
            .map(|_| unsafe { std::mem::zeroed() })
            .collect(),
        // SAFETY: zoo_op_result_t is plain data; all-zero is valid (C fills it in).
        results: (0..ops.len())
            .map(|_| unsafe { std::mem::zeroed() })
            .collect(),
        path_buffers: Vec::with_capacity(ops.len()),
        stats: vec![sys::Stat::default(); ops.len()],
        _keep_alive: Vec::new(),
    });
    // Fill the path buffers first: pointers into them are taken below, after which no
    // vector in `buffers` may reallocate.
    for op in ops {
        let capacity = match op {
            Op::Create { path, .. } => created_path_capacity(path),
            _ => 0,
        };
        buffers.path_buffers.push(vec![0; capacity]);
    }
    let MultiBuffers {
        ops: c_ops,
        path_buffers,
        stats,
        _keep_alive: keep,
        ..
    } = &mut *buffers;
    for (index, op) in ops.iter().enumerate() {
        let c_op: *mut sys::zoo_op_t = &mut c_ops[index];
        match op {
            Op::Create {
                path,
                data,
                acl,
                mode,
            } => {
                if matches!(
                    mode,
                    CreateMode::PersistentWithTtl(_) | CreateMode::PersistentSequentialWithTtl(_)
                ) {
                    return Err(Error::InvalidArgument(
                        "the C client has no TTL create inside a multi",
                    ));
                }
                if *mode == CreateMode::Container {
                    // The server answers a container create inside a multi with a
                    // Create2Response (path + Stat) but the 3.8.0 C client parses a
                    // CreateResponse (path only), loses sync and aborts the process
                    // (`deserialize_multi: Assertion 'entry' failed`).
                    return Err(Error::InvalidArgument(
                        "the C client cannot create a container inside a multi",
                    ));
                }
                let mut args = create_args(path, data, acl, *mode)?;
                let (value, len) = data_ptr(data);
                let vector = Box::new(args.acl.as_vector());
                let buffer = &mut path_buffers[index];
                // SAFETY: every pointer is to memory owned by `buffers` (kept in
                // `_keep_alive` or its vectors) or by `ops`, which outlive the submission;
                // the path buffer stays owned by `buffers` until the completion.
                unsafe {
                    sys::zoo_create_op_init(
                        c_op,
                        args.path.as_ptr(),
                        value,
                        len,
                        &*vector,
                        args.mode,
                        buffer.as_mut_ptr(),
                        buffer.len() as c_int,
                    )
                };
                keep.push(Box::new(args.path));
                keep.push(Box::new(args.acl));
                keep.push(Box::new(SendBox(vector)));
            }
            Op::Delete { path, version } => {
                let path = c_path(path, false)?;
                // SAFETY: `c_op` is ours; the path is kept alive in `_keep_alive`.
                unsafe { sys::zoo_delete_op_init(c_op, path.as_ptr(), version.as_raw()) };
                keep.push(Box::new(path));
            }
            Op::SetData {
                path,
                data,
                version,
            } => {
                let path = c_path(path, false)?;
                check_data(data)?;
                let (value, len) = data_ptr(data);
                let stat: *mut sys::Stat = &mut stats[index];
                // SAFETY: `c_op` and `stat` are ours and outlive the completion; path and
                // data are valid through the submission, where C serializes them.
                unsafe {
                    sys::zoo_set_op_init(c_op, path.as_ptr(), value, len, version.as_raw(), stat)
                };
                keep.push(Box::new(path));
            }
            Op::Check { path, version } => {
                let path = c_path(path, false)?;
                // SAFETY: `c_op` is ours; the path is kept alive in `_keep_alive`.
                unsafe { sys::zoo_check_op_init(c_op, path.as_ptr(), version.as_raw()) };
                keep.push(Box::new(path));
            }
        }
    }
    let total: usize = ops
        .iter()
        .map(|op| match op {
            Op::Create {
                path, data, acl, ..
            } => request_len(path, data, acl),
            Op::SetData { path, data, .. } => request_len(path, data, &[]),
            Op::Delete { path, .. } | Op::Check { path, .. } => request_len(path, &[], &[]),
        })
        .sum();
    check_request_len(total)?;
    Ok(buffers)
}

/// An `ACL_vector` (raw pointers) owned by `MultiBuffers`.
struct SendBox(#[allow(dead_code)] Box<sys::ACL_vector>);

// SAFETY: it points into a `CAcl` owned by the same `MultiBuffers`.
unsafe impl Send for SendBox {}

/// Errors the server reports for one operation of a multi (the others then read
/// `RuntimeInconsistency`); anything else concerns the request as a whole.
fn is_per_op_error(error: &Error) -> bool {
    matches!(
        error,
        Error::NoNode
            | Error::NoAuth
            | Error::BadVersion
            | Error::NoChildrenForEphemerals
            | Error::NodeExists
            | Error::NotEmpty
            | Error::InvalidAcl
            | Error::EphemeralOnLocalSession
            | Error::BadArguments
            | Error::Unimplemented
    )
}

/// The server drops the connection on a request above `jute.maxbuffer` (default
/// 0xfffff bytes) instead of answering: refuse such a request before sending it.
const MAX_REQUEST_LEN: usize = 0xfffff;

/// A generous estimate of one (sub)request's serialized size: the strings and data with
/// their length prefixes, plus headers.
fn request_len(path: &str, data: &[u8], acl: &[Acl]) -> usize {
    let acl_len: usize = acl
        .iter()
        .map(|entry| 12 + entry.scheme.len() + entry.id.len())
        .sum();
    64 + path.len() + data.len() + acl_len
}

/// An auth request: scheme and credentials with their length prefixes, plus headers. It
/// travels alone (the C client sends each credential in its own packet, also when it
/// resends them after a reconnect), so it alone must fit the server's limit; that bound
/// also keeps the length within C's `int`.
fn check_auth_len(scheme: &str, credentials_len: usize) -> Result<()> {
    check_request_len(
        64usize
            .saturating_add(scheme.len())
            .saturating_add(credentials_len),
    )
}

fn check_request_len(len: usize) -> Result<()> {
    if len > MAX_REQUEST_LEN {
        return Err(Error::DataTooLarge {
            len,
            max: MAX_REQUEST_LEN,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auth_credentials_are_bounded_before_c_sees_an_int() {
        assert_eq!(check_auth_len("digest", 1000), Ok(()));
        assert!(matches!(
            check_auth_len("digest", MAX_REQUEST_LEN),
            Err(Error::DataTooLarge {
                max: MAX_REQUEST_LEN,
                ..
            })
        ));
        // Lengths that would wrap or go negative as a C `int` never get through.
        for len in [i32::MAX as usize + 1, u32::MAX as usize + 7, usize::MAX] {
            assert!(
                matches!(
                    check_auth_len("digest", len),
                    Err(Error::DataTooLarge { .. })
                ),
                "{len}"
            );
        }
        assert!(check_auth_len(&"s".repeat(MAX_REQUEST_LEN), 0).is_err());
    }
}
