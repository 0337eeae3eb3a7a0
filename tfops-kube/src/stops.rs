//! Users' requests to stop a run under way (the `infra.argocd.io/cancel` annotation): the
//! controller registers each reconcile with the annotation's value as it began, the watch of
//! the objects notices a new value, and the runner session of that reconcile is told who
//! stops it ([`tfops_runner::client::Session::stop_on`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tfops_core::api::{ObjectKey, annotations};
use tfops_runner::client::StopSignal;
use tokio::sync::watch;

use crate::Terraform;

struct Run {
    /// The annotation's value when the reconcile began: only another one stops it.
    began_with: String,
    said: watch::Sender<Option<String>>,
}

/// The reconciles under way that a user may stop, by object.
#[derive(Default)]
pub struct Stops {
    runs: Mutex<HashMap<ObjectKey, Run>>,
}

impl std::fmt::Debug for Stops {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stops").finish_non_exhaustive()
    }
}

fn cancel_value(tf: &Terraform) -> String {
    tf.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(annotations::CANCEL))
        .cloned()
        .unwrap_or_default()
}

impl Stops {
    fn runs(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectKey, Run>> {
        // A panic while holding the lock leaves a map that is still whole.
        self.runs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A reconcile of `object` (as cached when it began) begins; it can be stopped until the
    /// guard is dropped.
    pub fn begin(self: &Arc<Self>, key: &ObjectKey, object: &Terraform) -> StopGuard {
        let (said, _) = watch::channel(None);
        self.runs().insert(
            key.clone(),
            Run {
                began_with: cancel_value(object),
                said,
            },
        );
        StopGuard {
            stops: self.clone(),
            key: key.clone(),
        }
    }

    /// What says who stops the reconcile of `key` under way, if one is.
    pub fn signal(&self, key: &ObjectKey) -> Option<StopSignal> {
        self.runs().get(key).map(|r| r.said.subscribe())
    }

    /// `object` as the watch sees it now: a cancel value other than the one its reconcile
    /// began with stops that reconcile. Whether it did.
    pub fn notice(&self, key: &ObjectKey, object: &Terraform) -> bool {
        let value = cancel_value(object);
        let runs = self.runs();
        let Some(run) = runs.get(key) else {
            return false;
        };
        if value.is_empty() || value == run.began_with || run.said.borrow().is_some() {
            return false;
        }
        let who = annotations::cancelled_by(&value);
        let who = if who.is_empty() { "a user" } else { who };
        run.said.send_replace(Some(format!(
            "{who} (annotation {}={value})",
            annotations::CANCEL
        )));
        true
    }

    /// `object` (`key`) as the watch of the objects delivers it: [`Stops::notice`], logged.
    pub fn seen(&self, key: &ObjectKey, object: &Terraform) {
        if self.notice(key, object) {
            tracing::info!(object = %key, "a user asked to stop the run under way");
        }
    }
}

/// Unregisters a reconcile when dropped.
pub struct StopGuard {
    stops: Arc<Stops>,
    key: ObjectKey,
}

impl Drop for StopGuard {
    fn drop(&mut self) {
        self.stops.runs().remove(&self.key);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn with_cancel(value: Option<&str>) -> Terraform {
        let mut tf: Terraform = serde_json::from_value(serde_json::json!({
            "apiVersion": "infra.argocd.io/v1alpha1", "kind": "Terraform",
            "metadata": {"name": "vpc", "namespace": "team-a"},
            "spec": {"sourceRef": {"kind": "GitRepository", "url": "https://example.com/x.git"}},
        }))
        .unwrap();
        if let Some(v) = value {
            tf.metadata
                .annotations
                .get_or_insert_default()
                .insert(annotations::CANCEL.into(), v.into());
        }
        tf
    }

    #[test]
    fn only_a_new_value_stops_only_the_reconcile_under_way() {
        let stops = Arc::new(Stops::default());
        let key = ObjectKey::new("team-a", "vpc");
        assert!(
            !stops.notice(&key, &with_cancel(Some("alice@1"))),
            "none under way"
        );
        let guard = stops.begin(&key, &with_cancel(Some("alice@1")));
        let signal = stops.signal(&key).unwrap();
        assert!(
            !stops.notice(&key, &with_cancel(Some("alice@1"))),
            "the value it began with"
        );
        assert!(!stops.notice(&key, &with_cancel(None)));
        assert!(signal.borrow().is_none());
        assert!(stops.notice(&key, &with_cancel(Some("bob@2"))));
        assert_eq!(
            signal.borrow().as_deref(),
            Some("bob (annotation infra.argocd.io/cancel=bob@2)")
        );
        assert!(
            !stops.notice(&key, &with_cancel(Some("carol@3"))),
            "said once"
        );
        drop(guard);
        assert!(stops.signal(&key).is_none(), "gone with its reconcile");
    }
}
