//! Membership under the fault schedule: every child incarnation keeps a kazoo-layout
//! party member and a protected-sequential persistent node (data: its owner) alive for
//! as long as its session lives, while the parent watches both directories.
//!
//! Judged: no view ever shows one owner twice (a lost create adopted, never doubled),
//! and once the faults stop both views converge on exactly the children's latest
//! incarnations (each recreated its nodes, nothing stale stayed), as the server's own
//! listing confirms.

use super::children::Ctx;
use super::MEMBERSHIP;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};
use zk_harness::history::{Event, HistoryWriter};
use zookeeper_mt::ZooKeeper;
use zookeeper_mt_recipes::nodes::{
    Group, GroupEvent, GroupLayout, GroupMember, NodeMode, PersistentNode,
};

/// The party directory (kazoo `Party` layout; a member's data is its id).
pub fn party(base: &str) -> String {
    format!("{base}/party")
}

/// The directory of the protected-sequential persistent nodes (data: the owner).
pub fn nodes(base: &str) -> String {
    format!("{base}/members")
}

/// The child's role: one party member and one persistent node for this incarnation;
/// returns how many times they were created.
pub fn member_role(ctx: &Ctx, _: &mut HistoryWriter) -> u64 {
    let Ok(member) = GroupMember::builder(&party(&ctx.paths.base), &ctx.owner)
        .layout(GroupLayout::KazooParty)
        .build(&ctx.zk)
    else {
        return 0;
    };
    let Ok(node) = PersistentNode::builder(&format!("{}/m-", nodes(&ctx.paths.base)))
        .mode(NodeMode::ProtectedSequential)
        .data(ctx.owner.as_bytes())
        .build(&ctx.zk)
    else {
        member.leave();
        return 0;
    };
    ctx.wait_until_over();
    let created = node.creations() + member.node().creations();
    node.close();
    member.leave();
    created
}

/// What one watched directory showed over the run.
#[derive(Default)]
struct Seen {
    /// Views examined (one per membership event).
    views: usize,
    /// Views that held one owner more than once.
    doubled: BTreeSet<String>,
}

/// The parent's watch over both directories.
pub struct Observer {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<(Group, Seen)>>,
}

impl Observer {
    /// Starts watching (the directories are created by the watch if missing).
    pub fn start(zk: &ZooKeeper, base: &str) -> Observer {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = [
            (party(base), GroupLayout::KazooParty),
            (nodes(base), GroupLayout::CuratorGroupMember),
        ]
        .into_iter()
        .map(|(path, layout)| {
            let group = Group::watch(zk, &path, layout).expect("watching a group");
            let stop = Arc::clone(&stop);
            thread::spawn(move || {
                let mut seen = Seen::default();
                while !stop.load(Ordering::SeqCst) {
                    let changed = matches!(
                        group.events().recv_timeout(Duration::from_millis(100)),
                        Ok(GroupEvent::Joined(_) | GroupEvent::Updated(_))
                    );
                    if changed {
                        seen.views += 1;
                        if let Some(view) = doubled(&owners(&group)) {
                            seen.doubled.insert(format!("{path}: {view}"));
                        }
                    }
                }
                (group, seen)
            })
        })
        .collect();
        Observer { stop, threads }
    }

    /// Ends the watch once both views (and the server's listings) hold exactly one
    /// owner per child, or after `timeout`; the event recording what was seen.
    pub fn finish(self, zk: &ZooKeeper, base: &str, children: usize, timeout: Duration) -> Event {
        self.stop.store(true, Ordering::SeqCst);
        let watched: Vec<(Group, Seen)> = self
            .threads
            .into_iter()
            .map(|t| t.join().expect("membership observer"))
            .collect();
        let converged = |group: &Group| {
            let owners = owners(group);
            let per_child: BTreeSet<&str> = owners
                .iter()
                .filter_map(|o| o.split_once('.').map(|(child, _)| child))
                .collect();
            owners.len() == children && per_child.len() == children
        };
        let on_server = |path: &str| {
            zk.sync(path).ok()?;
            zk.get_children(path).ok().map(|c| c.len())
        };
        let deadline = Instant::now() + timeout;
        let done = loop {
            let views = watched.iter().all(|(group, _)| converged(group));
            let listed = [party(base), nodes(base)]
                .iter()
                .all(|path| on_server(path) == Some(children));
            if views && listed {
                break true;
            }
            if Instant::now() >= deadline {
                break false;
            }
            thread::sleep(Duration::from_millis(50));
        };
        let doubled: Vec<&str> = watched
            .iter()
            .flat_map(|(_, seen)| seen.doubled.iter().map(String::as_str))
            .collect();
        let event = Event::new(MEMBERSHIP)
            .with("views", watched.iter().map(|(_, s)| s.views).sum::<usize>())
            .with("doubled", doubled.join(";"))
            .with("converged", done)
            .with("party", owners(&watched[0].0).join(","))
            .with("nodes", owners(&watched[1].0).join(","));
        for (group, _) in watched {
            group.close();
        }
        event
    }
}

/// The owners a group shows, sorted, one entry per node.
fn owners(group: &Group) -> Vec<String> {
    let mut owners: Vec<String> = group
        .members()
        .into_iter()
        .map(|m| String::from_utf8_lossy(&m.data).into_owned())
        .collect();
    owners.sort();
    owners
}

/// The view, if it holds one owner more than once.
fn doubled(owners: &[String]) -> Option<String> {
    let mut count: BTreeMap<&str, usize> = BTreeMap::new();
    for owner in owners {
        *count.entry(owner).or_default() += 1;
    }
    count.values().any(|&n| n > 1).then(|| owners.join(","))
}

/// Violations in the recorded membership event: a doubled view, no convergence, or a
/// final view that is not the children's latest incarnations (`latest`, sorted).
pub fn judge(event: Option<&Event>, latest: &[String]) -> Vec<String> {
    let Some(event) = event else {
        return vec!["no membership record".to_string()];
    };
    let mut violations = Vec::new();
    if let Some(doubled) = event.get("doubled").filter(|d| !d.is_empty()) {
        violations.push(format!("membership: one owner with two nodes: {doubled}"));
    }
    if event.get("converged") != Some("true") {
        violations.push(format!(
            "membership: the views never settled on one node per child: {event}"
        ));
    }
    let expected = latest.join(",");
    for key in ["party", "nodes"] {
        if event.get(key) != Some(expected.as_str()) {
            violations.push(format!(
                "membership: final {key} view {:?}, the latest incarnations are {expected:?}",
                event.get(key)
            ));
        }
    }
    violations
}

#[test]
fn a_view_with_one_owner_twice_is_doubled() {
    let view = |owners: &[&str]| owners.iter().map(|o| o.to_string()).collect::<Vec<_>>();
    assert_eq!(doubled(&view(&["w0.1", "w1.0"])), None);
    assert_eq!(
        doubled(&view(&["w0.1", "w0.1", "w1.0"])).as_deref(),
        Some("w0.1,w0.1,w1.0")
    );
}
