//! Node data: create, delete, exists, get, set.

use super::*;
use crate::acl::CAcl;
use crate::client::ZooKeeper;
use crate::context;
use crate::error::{Error, Result};
use crate::path::{c_path, check_data, validate_path};
use crate::reply::{Payload, ZkFuture};
use crate::timeout::Version;
use crate::types::{Acl, CreateMode, Stat};
use crate::watch::Watch;
use crate::watch_table::{WatchKind, WatchRequest};
use crate::CreateOptions;
use std::ffi::CString;
use std::os::raw::c_int;
use zookeeper_mt_sys as sys;

/// A multi's create operation, checked before it reaches C.
pub(crate) struct CreateArgs {
    pub(crate) path: CString,
    pub(crate) acl: CAcl,
    pub(crate) mode: c_int,
}

/// A create's arguments for a multi operation (which C builds from pointers it keeps
/// until the multi is sent: the path is owned here). TTL modes are refused by the
/// multi before this.
pub(crate) fn create_args(
    path: &str,
    data: &[u8],
    acl: &[Acl],
    mode: CreateMode,
) -> Result<CreateArgs> {
    let checked = check_create(path, data, acl, mode)?;
    Ok(CreateArgs {
        path: c_path(path, mode.is_sequential())?,
        acl: checked.acl,
        mode: checked.mode,
    })
}

/// A create's checked arguments, the path left as it is (a single create hands it to C
/// through [`CallArgs`](crate::request::CallArgs)).
pub(crate) struct CheckedCreate {
    acl: CAcl,
    mode: c_int,
    ttl: i64,
}

fn check_create(path: &str, data: &[u8], acl: &[Acl], mode: CreateMode) -> Result<CheckedCreate> {
    validate_path(path, mode.is_sequential())?;
    check_data(data)?;
    if acl.is_empty() {
        return Err(Error::InvalidAcl);
    }
    check_request_len(request_len(path, data, acl))?;
    let (mode, ttl) = mode.to_c()?;
    Ok(CheckedCreate {
        acl: CAcl::new(acl)?,
        mode,
        ttl,
    })
}

impl ZooKeeper {
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
        let mut create = checked!(check_create(path, data, options.acl, options.mode));
        self.request().at(path).sending(data).send(
            move |zh, _, request, args| {
                let acl = create.acl.as_vector();
                // SAFETY: live handle; path, value and ACL are valid for the call and
                // serialized by C before it returns; the completion is ours and its
                // context is a registry id.
                unsafe {
                    if with_stat {
                        sys::zoo_acreate2_ttl(
                            zh,
                            args.path,
                            args.data,
                            args.len,
                            &acl,
                            create.mode,
                            create.ttl,
                            Some(context::string_stat_completion),
                            request,
                        )
                    } else {
                        sys::zoo_acreate_ttl(
                            zh,
                            args.path,
                            args.data,
                            args.len,
                            &acl,
                            create.mode,
                            create.ttl,
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

    /// Deletes a node at `version` (`None`: any version).
    pub fn delete(&self, path: &str, version: impl Into<Version>) -> Result<()> {
        self.delete_async(path, version).wait()
    }

    /// Async [`delete`](Self::delete).
    pub fn delete_async(&self, path: &str, version: impl Into<Version>) -> ZkFuture<()> {
        let version = version.into();
        checked!(validate_path(path, false));
        self.request().at(path).send(
            move |zh, _, request, args| {
                // SAFETY: live handle; the path is valid for the call; ours is the completion.
                unsafe {
                    sys::zoo_adelete(
                        zh,
                        args.path,
                        version_of(version),
                        Some(context::void_completion),
                        request,
                    )
                }
            },
            |reply, _| payload(reply).map(drop),
        )
    }

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
        checked!(validate_path(path_str, false));
        self.request()
            .at(path_str)
            .watching(watch.then_some(WatchRequest::Read(WatchKind::Exists, path_str)))
            .send(
                move |zh, watch_context, request, args| {
                    let watcher = context::path_watcher_if(watch);
                    // SAFETY: live handle; path valid for the call; the watcher context is a
                    // registry id (or NULL with no watcher); ours is the completion.
                    unsafe {
                        sys::zoo_awexists(
                            zh,
                            args.path,
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
        checked!(validate_path(path_str, false));
        self.request()
            .at(path_str)
            .watching(watch.then_some(WatchRequest::Read(WatchKind::Data, path_str)))
            .send(
                move |zh, watch_context, request, args| {
                    let watcher = context::path_watcher_if(watch);
                    // SAFETY: as in `exists_impl`.
                    unsafe {
                        sys::zoo_awget(
                            zh,
                            args.path,
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
        checked!(validate_path(path, false).and_then(|()| {
            check_data(data)?;
            check_request_len(request_len(path, data, &[]))
        }));
        self.request().at(path).sending(data).send(
            move |zh, _, request, args| {
                // SAFETY: live handle; path and data valid for the call and serialized by
                // C before it returns; ours is the completion.
                unsafe {
                    sys::zoo_aset(
                        zh,
                        args.path,
                        args.data,
                        args.len,
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
}
