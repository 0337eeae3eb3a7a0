//! What a command asks of an object before it is reconciled (approve, replan, unlock, …),
//! written as the annotations a cluster user would set.

use tfops_core::api::annotations;

use super::manifest::Manifest;
use super::{Local, LocalError};

/// A request made to one object before reconciling it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// Reconcile now (`apply`).
    Reconcile,
    /// Only when due (`watch`).
    WhenDue,
    /// Approve this plan id.
    Approve(Option<String>),
    /// Plan even when nothing changed.
    Replan,
    /// Release the reported lock.
    Unlock,
    /// Destroy and forget the object.
    Destroy,
}

impl Request {
    /// The command that makes this request, as the state directory's lock names it.
    pub(super) fn command(&self) -> String {
        match self {
            Request::Reconcile => "tfops local apply".into(),
            Request::WhenDue => "tfops local watch".into(),
            Request::Approve(_) => "tfops local approve".into(),
            Request::Replan => "tfops local replan".into(),
            Request::Unlock => "tfops local unlock".into(),
            Request::Destroy => "tfops local destroy".into(),
        }
    }
}

fn now_token() -> String {
    tfops_core::Timestamp::now().to_string()
}

impl Local {
    pub(super) fn prepare(&self, m: &Manifest, request: &Request) -> Result<(), LocalError> {
        let key = &m.key;
        let mut p = self.persisted(key);
        match request {
            Request::WhenDue => {}
            Request::Reconcile => {
                p.annotations
                    .insert(annotations::RECONCILE.into(), now_token());
            }
            Request::Approve(id) => {
                let pending = p.status.plan.pending.clone();
                if pending.is_empty() {
                    return Err(LocalError::NoPendingPlan(key.to_string()));
                }
                let id = id.clone().unwrap_or_else(|| pending.clone());
                if id != pending {
                    return Err(LocalError::StalePlan { given: id, pending });
                }
                // A fresh token: an approval counts once, so approving the same id again
                // (its plan changed) must be a new value.
                let token = now_token();
                p.annotations
                    .insert(annotations::APPROVE.into(), format!("{id}@{token}"));
                p.annotations.insert(annotations::RECONCILE.into(), token);
            }
            Request::Replan => {
                p.annotations
                    .insert(annotations::REPLAN.into(), now_token());
            }
            Request::Unlock => {
                if p.status.lock.pending.is_empty() {
                    return Err(LocalError::NoLock(key.to_string()));
                }
                p.annotations.insert(
                    annotations::FORCE_UNLOCK.into(),
                    p.status.lock.pending.clone(),
                );
                p.annotations
                    .insert(annotations::RECONCILE.into(), now_token());
            }
            Request::Destroy => {
                p.deletion_requested_at = Some(tfops_core::Timestamp::now());
            }
        }
        self.world.dir.save(key, &p)?;
        self.world
            .objects
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.clone(), p);
        Ok(())
    }
}
