//! Children listings, with and without a watch.

use super::*;
use crate::client::ZooKeeper;
use crate::context;
use crate::error::Result;
use crate::path::validate_path;
use crate::reply::{Payload, ZkFuture};
use crate::types::Stat;
use crate::watch::Watch;
use crate::watch_table::{WatchKind, WatchRequest};
use zookeeper_mt_sys as sys;

impl ZooKeeper {
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
        checked!(validate_path(path_str, false));
        self.request()
            .at(path_str)
            .watching(watch.then_some(WatchRequest::Read(WatchKind::Children, path_str)))
            .send(
                move |zh, watch_context, request, args| {
                    let watcher = context::path_watcher_if(watch);
                    // SAFETY: as in `exists_impl`.
                    unsafe {
                        sys::zoo_awget_children2(
                            zh,
                            args.path,
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
}
