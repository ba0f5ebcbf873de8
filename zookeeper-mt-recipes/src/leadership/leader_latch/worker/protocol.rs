//! The latch's protocol steps while connected: delete the nodes of ended terms, join,
//! find our place in line (lead or watch the predecessor), restart the counter at its
//! end, leave.

use super::*;

impl Worker {
    /// One round of work while connected: delete old nodes, join, find our place.
    pub(super) async fn step(&mut self) -> Flow {
        self.dirty = false;
        if !self.delete_stale().await {
            return self.failed(Error::ConnectionLoss);
        }
        if self.node.is_none() {
            if self.exhausted {
                return self.restart_counter().await;
            }
            match self.join().await {
                Flow::Go => {}
                stop => return stop,
            }
            if self.node.is_none() {
                return Flow::Go; // try again later (dirty is set)
            }
        }
        let flow = self.decide().await;
        if matches!(flow, Flow::Go) && !self.dirty {
            self.following.succeeded();
        }
        flow
    }

    /// Deletes our nodes of ended terms; `false` if the connection failed meanwhile.
    pub(super) async fn delete_stale(&mut self) -> bool {
        while let Some(path) = self.stale.last() {
            match self.zk().delete_async(path, None).await {
                Ok(()) | Err(Error::NoNode) => {
                    self.stale.pop();
                }
                Err(error) if error.is_retryable() || error.is_session_terminal() => {
                    return false;
                }
                Err(error) => {
                    log::warn!("recipes: latch cannot delete {path}: {error}");
                    self.stale.pop();
                }
            }
        }
        true
    }

    /// Creates our node (or adopts the one a create with a lost reply made).
    pub(super) async fn join(&mut self) -> Flow {
        let dir = self.config.dir.clone();
        if let Some(tag) = self.creating.take() {
            // The last create's outcome is unknown: catch up with the leader, then look
            // for its tag. Found: it applied (adopt it). Not found: it did not.
            if let Err(error) = self.zk().sync_async(&dir).await {
                self.creating = Some(tag);
                return self.failed(error);
            }
            let children = match self.zk().get_children_async(&dir).await {
                Ok(children) => children,
                Err(Error::NoNode) => Vec::new(),
                Err(error) => {
                    self.creating = Some(tag);
                    return self.failed(error);
                }
            };
            if let Some(name) = children.into_iter().find(|c| c.starts_with(&tag)) {
                let path = format!("{dir}/{name}");
                match self.zk().exists_async(&path).await {
                    Ok(Some(stat)) => return self.adopt(name, stat.czxid),
                    Ok(None) => {} // gone again (deleted): create anew
                    Err(error) => {
                        self.creating = Some(tag);
                        return self.failed(error);
                    }
                }
            }
        }
        let tag = self.config.layout.new_tag();
        // Recorded while in flight: a stop that abandons the reply leaves it to `leave`.
        self.creating = Some(tag.clone());
        let create = self.zk().create2_async(
            &format!("{dir}/{tag}"),
            self.config.id.as_bytes(),
            zookeeper_mt::CreateOptions::new(CreateMode::EphemeralSequential)
                .with_acl(self.config.nodes.acl_list()),
        );
        let created = create.await;
        self.creating = None;
        match created {
            Ok((path, stat)) => {
                let name = path.rsplit('/').next().unwrap_or_default().to_string();
                self.adopt(name, stat.czxid)
            }
            Err(Error::NoNode) => {
                if let Err(error) = create_dir_async(self.zk(), &dir, &self.config.nodes).await {
                    return self.failed(error);
                }
                self.dirty = true;
                Flow::Go
            }
            Err(error) => {
                if error.is_connection_loss() {
                    self.creating = Some(tag);
                }
                self.failed(error)
            }
        }
    }

    /// Takes `name` (just created, or found by its tag) as our node, unless its number
    /// is past the counter's end.
    pub(super) fn adopt(&mut self, name: String, token: i64) -> Flow {
        match sequence_of(&name) {
            Some(seq) if sequence_in_range(seq) => {
                self.node = Some(OwnNode { name, token });
                Flow::Go
            }
            seq => {
                // Never take part with a number that cannot be ordered: remove the node
                // and restart the directory's counter.
                log::warn!(
                    "recipes: latch on {}: node {name} has sequence {seq:?}, past the \
                     counter's end; restarting the directory",
                    self.config.dir
                );
                self.stale.push(format!("{}/{name}", self.config.dir));
                self.exhausted = true;
                self.dirty = true;
                Flow::Go
            }
        }
    }

    /// Restarts the directory's sequence counter by deleting the directory (only
    /// possible while it is empty), or waits for it to drain.
    pub(super) async fn restart_counter(&mut self) -> Flow {
        let dir = self.config.dir.clone();
        match self.zk().delete_async(&dir, None).await {
            Ok(()) | Err(Error::NoNode) => {
                log::info!("recipes: latch restarted the sequence counter of {dir}");
                self.exhausted = false;
                if let Err(error) = create_dir_async(self.zk(), &dir, &self.config.nodes).await {
                    return self.failed(error);
                }
                self.dirty = true;
                Flow::Go
            }
            Err(Error::NotEmpty) => {
                if matches!(
                    self.watch,
                    Some(Armed {
                        target: Target::Children,
                        ..
                    })
                ) {
                    return Flow::Go; // still waiting for a change
                }
                let read = self.zk().get_children_watch_async(&dir);
                match crate::support::watched(self.zk(), read).await {
                    Ok((children, watch)) => {
                        self.set_watch(watch, Target::Children);
                        if children.is_empty() {
                            self.dirty = true; // drained meanwhile
                        }
                        Flow::Go
                    }
                    Err(Error::NoNode) => {
                        self.dirty = true;
                        Flow::Go
                    }
                    Err(error) => self.failed(error),
                }
            }
            Err(error) => self.failed(error),
        }
    }

    /// Lists the participants and acts on our place: lead, or watch the node before ours.
    pub(super) async fn decide(&mut self) -> Flow {
        let dir = self.config.dir.clone();
        loop {
            let Some(own) = self.node.as_ref().map(|n| n.name.clone()) else {
                return Flow::Go;
            };
            if self.following.sync_first {
                if let Err(error) = self.zk().sync_async(&dir).await {
                    return self.failed(error);
                }
                self.following.sync_first = false;
            }
            // The leader keeps a child watch on the directory; the others list without.
            let leader_watch = self.term.is_some()
                && !matches!(
                    self.watch,
                    Some(Armed {
                        target: Target::Children,
                        ..
                    })
                );
            let listing = if leader_watch {
                let read = self.zk().get_children_watch_async(&dir);
                crate::support::watched(self.zk(), read)
                    .await
                    .map(|(children, watch)| (children, Some(watch)))
            } else {
                self.zk()
                    .get_children_async(&dir)
                    .await
                    .map(|children| (children, None))
            };
            let children = match listing {
                Ok((children, watch)) => {
                    if let Some(watch) = watch {
                        self.set_watch(watch, Target::Children);
                    }
                    children
                }
                Err(Error::NoNode) => Vec::new(), // the directory is gone, our node too
                Err(error) => return self.failed(error),
            };
            let order = self.config.layout.order(children);
            match order.iter().position(|name| *name == own) {
                None => {
                    // Our node is gone: deleted by someone (or a stale read of a session
                    // that is about to be reported expired). Join again.
                    if self.term.is_some() {
                        self.lose(LeadershipLost::NodeDeleted, false);
                    } else {
                        self.unwatch();
                    }
                    self.node = None;
                    self.dirty = true;
                    return Flow::Go;
                }
                Some(0) => {
                    if self.term.is_none() {
                        let token = self.node.as_ref().map_or(0, |n| n.token);
                        self.elect(token, format!("{dir}/{own}"));
                        continue; // arm the leader's child watch (and look again)
                    }
                    return Flow::Go;
                }
                Some(position) => {
                    if self.term.is_some() {
                        self.lose(LeadershipLost::Preempted, true);
                        return Flow::Go;
                    }
                    let predecessor = order[position - 1].clone();
                    if matches!(&self.watch, Some(Armed { target: Target::Predecessor(p), .. }) if *p == predecessor)
                    {
                        return Flow::Go; // already watching it
                    }
                    let get = self.zk().get_watch_async(&format!("{dir}/{predecessor}"));
                    match crate::support::watched(self.zk(), get).await {
                        Ok((_, _, watch)) => {
                            self.set_watch(watch, Target::Predecessor(predecessor));
                            return Flow::Go;
                        }
                        Err(Error::NoNode) => continue, // gone already: look again
                        Err(error) => return self.failed(error),
                    }
                }
            }
        }
    }

    /// At the end: deletes our nodes (in the background if the connection is down now).
    pub(super) async fn leave(&mut self) {
        if let Some(node) = self.node.take() {
            self.stale
                .push(format!("{}/{}", self.config.dir, node.name));
        }
        if self.zk().state().is_terminal() {
            return; // the session's nodes are gone with it
        }
        if self.following.connected {
            self.delete_stale().await;
        }
        for path in std::mem::take(&mut self.stale) {
            delete_in_background(self.zk(), &path);
        }
        if let Some(tag) = self.creating.take() {
            // A create whose outcome is unknown: find its node by the tag and delete it.
            withdraw_tagged_in_background(self.zk(), &self.config.dir, &tag);
        }
    }
}
