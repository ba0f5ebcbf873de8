//! Reading: the queue of paths to (re)read, pipelined reads, applying their results
//! to the tree and signalling the changes.

use super::*;

impl Worker {
    // -----------------------------------------------------------------------------------
    // Reading.
    // -----------------------------------------------------------------------------------

    pub(super) fn enqueue(&mut self, path: &str) {
        if let Some(node) = self.nodes.get_mut(path) {
            if !node.queued {
                node.queued = true;
                self.work.push_back(path.to_string());
            }
        }
    }

    /// Works through the queue while connected, in batches of pipelined reads; after
    /// a failure, [`Following::failed`] decides when to go on. True when a stop request
    /// interrupted a long load.
    pub(super) async fn process(&mut self, stop: &StopSignal) -> bool {
        if self.following.sync_first {
            match self.following.zk.sync_async(&self.config.root).await {
                Ok(_) => self.following.sync_first = false,
                Err(error) => {
                    self.following.failed(&error);
                    return false;
                }
            }
        }
        let mut done = 0;
        while !self.work.is_empty() {
            // Submit the reads of up to BATCH nodes, then take their replies in order
            // (the server answers in order, so this costs about one round trip).
            let mut reads = Vec::new();
            let mut failure = None;
            while reads.len() < BATCH {
                let Some(path) = self.work.pop_front() else {
                    break;
                };
                if let Some(node) = self.nodes.get_mut(&path) {
                    node.queued = false;
                }
                match self.check_absent_root(&path).await {
                    Ok(true) => {}
                    Ok(false) => continue,
                    Err(error) => {
                        failure = self.read_failed(&path, error);
                        break;
                    }
                }
                // Children first: a reader told that a node was added finds both its
                // watches armed.
                for read in [self.submit_children(&path), self.submit_data(&path)]
                    .into_iter()
                    .flatten()
                {
                    reads.push((path.clone(), read));
                }
            }
            done += reads.len();
            // The server answers one session's requests in order: once the last reply
            // is in, so are the others (but a rare one refused in the binding), and the
            // driver wakes once per batch instead of once per reply. Applied in order.
            let last = match reads.pop() {
                Some((path, read)) => Some((path, read.reply().await)),
                None => None,
            };
            for (path, read) in reads {
                if let Err(error) = self.finish(&path, read).await {
                    let error = self.read_failed(&path, error);
                    failure = failure.or(error);
                }
            }
            if let Some((path, (kind, result))) = last {
                if let Err(error) = self.apply(&path, kind, result).await {
                    let error = self.read_failed(&path, error);
                    failure = failure.or(error);
                }
            }
            if let Some(error) = failure {
                self.following.failed(&error);
                return false;
            }
            if done >= STOP_CHECK_EVERY {
                done = 0;
                if stop.is_stopped() {
                    return true;
                }
            }
        }
        self.following.succeeded();
        false
    }

    /// A read of `path` failed: a connection or session error is returned (the node
    /// is read again later); anything else is logged and the node skipped.
    pub(super) fn read_failed(&mut self, path: &str, error: Error) -> Option<Error> {
        if error.is_retryable() || error.is_session_terminal() {
            if let Some(node) = self.nodes.get_mut(path) {
                if !node.queued {
                    node.queued = true;
                    self.work.push_front(path.to_string());
                }
            }
            return Some(error);
        }
        log::warn!("recipes: cache cannot read {path}: {error}");
        None
    }

    /// For an absent root with its exists watch armed: whether to read it now (only
    /// a forced re-read checks again, with a plain `exists`). `true` for other nodes.
    pub(super) async fn check_absent_root(&mut self, path: &str) -> zookeeper_mt::Result<bool> {
        if path != self.config.root {
            return Ok(true);
        }
        let Some(node) = self.nodes.get_mut(path) else {
            return Ok(false);
        };
        if node.present || node.data_watch.is_none() {
            return Ok(true);
        }
        if !node.dirty_data && !node.dirty_children {
            return Ok(false);
        }
        let exists = self.following.zk.exists_async(path).await?;
        let Some(node) = self.nodes.get_mut(path) else {
            return Ok(false);
        };
        match exists {
            None => {
                node.dirty_data = false;
                node.dirty_children = false;
                Ok(false)
            }
            // Created: its exists watch serves as its data watch from now on.
            Some(_) => {
                node.present = true;
                Ok(true)
            }
        }
    }

    /// Submits the listing of the node's children if they are dirty (with a child
    /// watch unless one is armed).
    pub(super) fn submit_children(&mut self, path: &str) -> Option<Read> {
        let node = self.nodes.get_mut(path)?;
        let wanted = node.dirty_children && node.depth < self.config.max_depth;
        node.dirty_children = false;
        if !wanted {
            return None;
        }
        Some(if node.child_watch.is_none() {
            let zk = &self.following.zk;
            Read::ChildrenWatch(watched(zk, zk.get_children_watch_async(path)))
        } else {
            Read::Children(self.following.zk.get_children_async(path))
        })
    }

    /// Submits the read of the node's data if it is dirty and cached (with a data
    /// watch unless one is armed).
    pub(super) fn submit_data(&mut self, path: &str) -> Option<Read> {
        let is_root = path == self.config.root;
        let node = self.nodes.get_mut(path)?;
        let wanted = node.dirty_data && (!is_root || self.config.root_data);
        node.dirty_data = false;
        if !wanted {
            return None;
        }
        Some(if node.data_watch.is_none() {
            let zk = &self.following.zk;
            Read::DataWatch(watched(zk, zk.get_watch_async(path)))
        } else {
            Read::Data(self.following.zk.get_async(path))
        })
    }

    /// Takes a read's reply and applies it. On an error other than "no node" the
    /// node is marked dirty again.
    pub(super) async fn finish(&mut self, path: &str, read: Read) -> zookeeper_mt::Result<()> {
        let (kind, result) = read.reply().await;
        self.apply(path, kind, result).await
    }

    /// Applies a read's reply (see [`finish`](Self::finish)).
    async fn apply(
        &mut self,
        path: &str,
        kind: Kind,
        result: zookeeper_mt::Result<Reply>,
    ) -> zookeeper_mt::Result<()> {
        match result {
            Ok(Reply::Children(names, watch)) => {
                if let Some(watch) = watch {
                    self.arm(path, Kind::Children, watch);
                }
                if let Some(node) = self.nodes.get_mut(path) {
                    node.present = true;
                    self.apply_children(path, names);
                }
                Ok(())
            }
            Ok(Reply::Data(data, stat, watch)) => {
                if let Some(watch) = watch {
                    self.arm(path, Kind::Data, watch);
                }
                self.apply_data(path, data, stat);
                Ok(())
            }
            Err(Error::NoNode) => self.gone(path).await,
            Err(error) => {
                if let Some(node) = self.nodes.get_mut(path) {
                    match kind {
                        Kind::Data => node.dirty_data = true,
                        Kind::Children => node.dirty_children = true,
                    }
                }
                Err(error)
            }
        }
    }

    /// A node's data as just read.
    pub(super) fn apply_data(&mut self, path: &str, data: Vec<u8>, stat: Stat) {
        let Some(node) = self.nodes.get_mut(path) else {
            return;
        };
        node.present = true;
        let fresh = Arc::new(NodeData {
            path: path.to_string(),
            data,
            stat,
        });
        match node.data.clone() {
            None => {
                node.data = Some(Arc::clone(&fresh));
                node.reported = None;
                self.changed(path, None, Some(fresh));
            }
            Some(old) if old.stat.czxid == stat.czxid && old.stat.mzxid == stat.mzxid => {
                // The same data; only child fields of the Stat may differ. No event (the
                // view shows the fresh Stat; the next event's `old` stays what was
                // reported).
                node.reported.get_or_insert(old);
                node.data = Some(Arc::clone(&fresh));
                self.shared.view.write().insert(path.to_string(), fresh);
            }
            Some(old) if newer(&stat, &old.stat) => {
                let reported = node.reported.take().unwrap_or(old);
                node.data = Some(Arc::clone(&fresh));
                self.changed(path, Some(reported), Some(fresh));
            }
            // Older than what the cache holds (a server behind the one read before).
            Some(_) => {}
        }
    }

    /// A node's children as just listed.
    pub(super) fn apply_children(&mut self, path: &str, names: Vec<String>) {
        let Some(node) = self.nodes.get_mut(path) else {
            return;
        };
        let depth = node.depth;
        let listed: BTreeSet<String> = names.into_iter().collect();
        let before = std::mem::replace(&mut node.children, listed.clone());
        for name in before.difference(&listed) {
            self.remove_subtree(&child_path(path, name));
        }
        for name in listed.difference(&before) {
            let child = child_path(path, name);
            self.nodes
                .entry(child.clone())
                .or_insert_with(|| Node::new(depth + 1));
            self.enqueue(&child);
        }
    }

    /// The node at `path` does not exist (any more).
    pub(super) async fn gone(&mut self, path: &str) -> zookeeper_mt::Result<()> {
        if path != self.config.root {
            self.remove_subtree(path);
            if let Some((parent, name)) = parent_and_name(path) {
                if let Some(parent) = self.nodes.get_mut(parent) {
                    parent.children.remove(name);
                }
            }
            return Ok(());
        }
        // The root: everything below goes, and an exists watch waits for it to return.
        let Some(root) = self.nodes.get_mut(path) else {
            return Ok(());
        };
        let children: Vec<String> = std::mem::take(&mut root.children).into_iter().collect();
        for name in children {
            self.remove_subtree(&child_path(path, &name));
        }
        let root = self
            .nodes
            .get_mut(path)
            .expect("the root is always followed");
        root.present = false;
        root.dirty_data = false;
        root.dirty_children = false;
        let watches = [root.data_watch.take(), root.child_watch.take()];
        let old = root.reported.take().or(root.data.take());
        root.data = None;
        for watch in watches.into_iter().flatten() {
            self.unwatch(watch);
        }
        // The exists watch first, so a reader told of the removal finds it armed.
        let zk = &self.following.zk;
        let result = match watched(zk, zk.exists_watch_async(path)).await {
            Ok((stat, watch)) => {
                if stat.is_some() && !self.config.root_data {
                    // Created again meanwhile, and its data is not followed: on a present
                    // node this watch is a data watch, which only the listing's child
                    // watch (it sees the deletion too) makes redundant. Keep one watch.
                    let _ = self.following.zk.remove_watch(&watch);
                } else {
                    self.arm(path, Kind::Data, watch);
                }
                if stat.is_some() {
                    // Created again meanwhile: read it (its exists watch is its data watch
                    // when the data is followed).
                    let root = self
                        .nodes
                        .get_mut(path)
                        .expect("the root is always followed");
                    root.dirty_data = true;
                    root.dirty_children = true;
                    self.enqueue(path);
                }
                Ok(())
            }
            Err(error) => {
                let root = self
                    .nodes
                    .get_mut(path)
                    .expect("the root is always followed");
                root.dirty_data = true;
                root.dirty_children = true;
                Err(error)
            }
        };
        if old.is_some() {
            self.changed(path, old, None);
        }
        result
    }

    /// Stops following `path` and everything below it, reporting each removal
    /// (children first).
    pub(super) fn remove_subtree(&mut self, path: &str) {
        let Some(node) = self.nodes.remove(path) else {
            return;
        };
        for name in &node.children {
            self.remove_subtree(&child_path(path, name));
        }
        for watch in [node.data_watch, node.child_watch].into_iter().flatten() {
            self.unwatch(watch);
        }
        if node.data.is_some() {
            self.changed(path, node.reported.or(node.data), None);
        }
    }

    /// Records a change in the view and reports it.
    pub(super) fn changed(
        &mut self,
        path: &str,
        before: Option<Arc<NodeData>>,
        after: Option<Arc<NodeData>>,
    ) {
        {
            let mut view = self.shared.view.write();
            match &after {
                Some(node) => view.insert(path.to_string(), Arc::clone(node)),
                None => view.remove(path),
            };
        }
        if path != self.config.root || self.config.root_data {
            self.out.update(|buffer| buffer.change(path, before, after));
        }
    }

    pub(super) fn signal(&self, event: CacheEvent) {
        self.out.update(|buffer| buffer.signal(event));
    }
}

/// Whether `stat` is a later state of the node than `old` (a re-creation, or a later
/// modification). Zxids only grow; versions are not compared (they wrap).
pub(super) fn newer(stat: &Stat, old: &Stat) -> bool {
    stat.czxid > old.czxid || (stat.czxid == old.czxid && stat.mzxid > old.mzxid)
}

pub(in crate::caches) fn child_path(parent: &str, name: &str) -> String {
    if parent == "/" {
        format!("/{name}")
    } else {
        format!("{parent}/{name}")
    }
}

pub(super) fn parent_and_name(path: &str) -> Option<(&str, &str)> {
    let (parent, name) = path.rsplit_once('/')?;
    Some((if parent.is_empty() { "/" } else { parent }, name))
}

impl Read {
    /// Waits for the read's reply.
    async fn reply(self) -> (Kind, zookeeper_mt::Result<Reply>) {
        match self {
            Read::ChildrenWatch(reply) => (
                Kind::Children,
                reply
                    .await
                    .map(|(names, watch)| Reply::Children(names, Some(watch))),
            ),
            Read::Children(reply) => (
                Kind::Children,
                reply.await.map(|names| Reply::Children(names, None)),
            ),
            Read::DataWatch(reply) => (
                Kind::Data,
                reply
                    .await
                    .map(|(data, stat, watch)| Reply::Data(data, stat, Some(watch))),
            ),
            Read::Data(reply) => (
                Kind::Data,
                reply
                    .await
                    .map(|(data, stat)| Reply::Data(data, stat, None)),
            ),
        }
    }
}
