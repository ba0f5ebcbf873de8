//! Claiming one item: `get` it, then delete it in one `multi` with an ephemeral take
//! marker named by a fresh guid, so that after a lost reply the marker tells whether the
//! delete that applied was this claim's or another's (another take of the same `Queue`
//! value included).

use super::settle::{lost_take, not_applied, ClaimStage, LostTake, PendingClaim};
use super::*;

/// What became of an item whose delete this consumer sent.
pub(super) enum Claimed {
    /// Ours: deliver it.
    Taken(Vec<u8>),
    /// Someone else's (or gone): try another.
    Missed,
    /// Our delete provably did not apply and the item is still there: try it again.
    Again,
}

/// `<receipts>/took-<claim guid>-<item>`: one name per claim attempt, never shared by two
/// claims (not even two takes of one `Queue` value, which share its cached listing and
/// may claim the same item at once).
pub(super) fn take_marker(store: &ItemStore, name: &str) -> String {
    format!("{}/took-{}-{name}", store.receipts, guid())
}

impl Queue {
    /// `get` one item, then delete it in one multi with a take marker of this attempt's
    /// own ([`take_marker`]): if the reply is lost, the marker tells whether the delete
    /// that applied was this claim's.
    pub(super) async fn claim(
        &self,
        zk: &ZooKeeper,
        name: &str,
        deadline: Deadline,
    ) -> Result<Claimed> {
        let path = format!("{}/{name}", self.path);
        let patience = self.patience.before(deadline);
        loop {
            let (data, stat) = match retry_async(zk, patience, || zk.get_async(&path)).await {
                Ok(found) => found,
                Err(RecipeError::ZooKeeper(Error::NoNode)) => return Ok(Claimed::Missed),
                Err(e) => return Err(e),
            };
            let marker = take_marker(&self.store, name);
            let take = [
                Op::delete(&path, stat.version),
                Op::create(
                    &marker,
                    b"",
                    zookeeper_mt::CreateOptions::new(CreateMode::Ephemeral)
                        .with_acl(self.store.nodes.acl_list()),
                ),
            ];
            // From here the claim may apply: a dropped future hands it to the background.
            let mut pending = PendingClaim {
                queue: self,
                zk,
                stage: Some(ClaimStage::Sent(zk.multi_async(&take))),
                name,
                path: &path,
                marker: &marker,
                data: &data,
            };
            let claimed = match pending.stage.as_mut() {
                Some(ClaimStage::Sent(claim)) => claim.await,
                _ => unreachable!("just sent"),
            };
            let error = match claimed {
                Ok(_) => {
                    pending.stage = None;
                    drop(pending);
                    // The marker has done its job; its delete need not be waited for
                    // (it is ephemeral: at worst it goes with the session).
                    drop(zk.delete_async(&marker, Version::Any));
                    return Ok(Claimed::Taken(data));
                }
                Err(error) => error,
            };
            if error.is_connection_loss() {
                // Still unsettled: a dropped future settles it in the background.
                pending.stage = Some(ClaimStage::ReplyLost);
                let outcome = lost_take(zk, self.patience, &path, &marker).await;
                pending.stage = None;
                drop(pending);
                return Ok(match outcome {
                    LostTake::NotApplied => Claimed::Again,
                    LostTake::Ours | LostTake::Unknown => Claimed::Taken(data),
                    LostTake::Others => Claimed::Missed,
                });
            }
            if !not_applied(&error) {
                // It may have applied (the handle closed with the claim in flight, ...)
                // and this session cannot tell: the item is settled like a dropped
                // take's, put back (on a new session if need be) unless it is still
                // there, and the take reports the error.
                log::debug!("queue: claim of {path} ended with {error}: settling it");
                pending.stage = Some(ClaimStage::Unknown);
                drop(pending);
                return Err(error.into());
            }
            pending.stage = None;
            drop(pending);
            match error {
                Error::MultiFailed { index: 0, error } => match *error {
                    Error::NoNode => return Ok(Claimed::Missed),
                    Error::BadVersion => continue, // rewritten meanwhile: read it again
                    error => return Err(error.into()),
                },
                Error::MultiFailed { index: 1, error } => match *error {
                    // The receipts node is gone (a container the server removed).
                    Error::NoNode => self.store.ensure_async(zk, patience).await?,
                    // Cannot be this attempt's own marker (a fresh guid); nothing was
                    // applied: try again with another.
                    Error::NodeExists => continue,
                    error => return Err(error.into()),
                },
                error => return Err(error.into()),
            }
        }
    }
}
