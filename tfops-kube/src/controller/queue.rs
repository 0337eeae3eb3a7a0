//! The queue for runner Pods, where the controller sees every object of a namespace and its
//! ResourceQuotas: where an object stands among the waiters (the core's
//! [`tfops_core::reconcile::queue`]), whether a Pod may start for it now, and whom to wake
//! when a quota changes.
//!
//! A quota's change (its `status.used` going down as the quota controller counts a runner Pod
//! gone, a `hard` raised, the quota deleted) wakes the longest waiters, as many as it has room
//! for: they go first, in order, and the others keep waiting without an attempt. The objects
//! and quotas come from the controller's caches (the quotas' reflector is updated before the
//! event that wakes anyone, so the woken reconcile sees the room that woke it).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::ResourceQuota;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use tfops_core::api::{ObjectKey, TerraformObject};
use tfops_core::reconcile::queue::{self, Waiter};
use tfops_core::reconcile::{Outcome, RunReport, RunnerQueue, StepKind};

use crate::Terraform;
use crate::quota::{Room, room};

/// The queues of every watched namespace.
pub(super) struct RunnerQueues {
    objects: Vec<Store<Terraform>>,
    quotas: Vec<Store<ResourceQuota>>,
    /// The quotas as they were when each object was last refused a Pod ([`digest`]): under
    /// the same quotas it is given no turn again (its refusal came from another limit, or
    /// another object took the room first), so a status write cannot loop it.
    refused: Mutex<HashMap<ObjectKey, String>>,
}

impl RunnerQueues {
    pub(super) fn new(objects: Vec<Store<Terraform>>, quotas: Vec<Store<ResourceQuota>>) -> Self {
        Self {
            objects,
            quotas,
            refused: Mutex::new(HashMap::new()),
        }
    }

    fn quotas_in(&self, namespace: &str) -> Vec<Arc<ResourceQuota>> {
        self.quotas
            .iter()
            .flat_map(Store::state)
            .filter(|q| q.metadata.namespace.as_deref() == Some(namespace))
            .collect()
    }

    /// The waiters of `namespace` as cached, in the queue's order; `me` as given (it was just
    /// read from the API server) rather than as cached.
    fn waiters(&self, namespace: &str, me: Option<&TerraformObject>) -> Vec<Waiter> {
        let mine = me.map(TerraformObject::key);
        let mut waiters: Vec<Waiter> = self
            .objects
            .iter()
            .flat_map(Store::state)
            .filter(|tf| tf.metadata.namespace.as_deref() == Some(namespace))
            .filter_map(|tf| {
                let since = queue::waiting_since(tf.status.as_ref()?)?;
                let key = ObjectKey::new(namespace, tf.name_any());
                (Some(&key) != mine.as_ref()).then_some(Waiter { key, since })
            })
            .collect();
        waiters.extend(me.and_then(queue::waiter));
        queue::order(&mut waiters);
        waiters
    }

    /// Where `object` stands, and the quotas' [`digest`] this was seen under. Namespaces with
    /// no quota cost nothing more, unless the object waits.
    pub(super) fn view(&self, object: &TerraformObject) -> (RunnerQueue, String) {
        let namespace = &object.metadata.namespace;
        let quotas = self.quotas_in(namespace);
        let waiting = queue::waiting_since(&object.status).is_some();
        if quotas.is_empty() && !waiting {
            return (RunnerQueue::default(), String::new());
        }
        let seen = digest(&quotas);
        let room = room(quotas.iter().map(AsRef::as_ref));
        let waiters = self.waiters(namespace, Some(object));
        let place = queue::place(&waiters, &object.key());
        let refused_here = self
            .refused
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&object.key())
            == Some(&seen);
        let slot = queue::slot(place, waiting, room.free, refused_here, |free| {
            room.why(namespace, free)
        });
        let queue = RunnerQueue {
            place: Some(place),
            slot,
        };
        (queue, seen)
    }

    /// Remembers whether the reconcile of `key`, begun under quotas `seen`, was refused a Pod.
    pub(super) fn record(&self, key: &ObjectKey, seen: String, report: &RunReport) {
        let mut refused = self.refused.lock().unwrap_or_else(PoisonError::into_inner);
        let refusal = report.records.iter().any(|r| {
            matches!(r.step, StepKind::StartRunner | StepKind::StartApplyRunner)
                && matches!(&r.result, Err(f) if f.reason == tfops_core::conditions::Reason::RunnerQuotaExhausted)
        });
        if refusal {
            refused.insert(key.clone(), seen);
        } else if report
            .records
            .iter()
            .any(|r| matches!(r.result, Ok(Outcome::RunnerStarted { .. })))
        {
            refused.remove(key);
        }
    }

    /// Forgets a deleted object.
    pub(super) fn forget(&self, key: &ObjectKey) {
        self.refused
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
    }

    /// The objects to wake after `quota` changed: the longest waiters of its namespace, as
    /// many as its quotas now have room for; the longest alone when no quota counts Pods
    /// (its turn tells whether CPU or memory room came); every waiter when no quota is left.
    pub(super) fn wake(&self, quota: &ResourceQuota) -> Vec<ObjectRef<Terraform>> {
        let Some(namespace) = quota.metadata.namespace.as_deref() else {
            return Vec::new();
        };
        let quotas = self.quotas_in(namespace);
        let waiters = self.waiters(namespace, None);
        let Room { free, .. } = room(quotas.iter().map(AsRef::as_ref));
        let n = match free {
            _ if quotas.is_empty() => waiters.len(),
            Some(free) => usize::try_from(free).unwrap_or(usize::MAX),
            None => 1,
        };
        waiters
            .into_iter()
            .take(n)
            .map(|w| ObjectRef::new(&w.key.name).within(namespace))
            .collect()
    }
}

/// What identifies the state of a namespace's quotas: their names and resource versions.
fn digest(quotas: &[Arc<ResourceQuota>]) -> String {
    let mut seen: Vec<String> = quotas
        .iter()
        .map(|q| {
            format!(
                "{}@{}",
                q.name_any(),
                q.resource_version().unwrap_or_default()
            )
        })
        .collect();
    seen.sort();
    seen.join(",")
}

/// The quotas of `api`'s scope, cached into `writer` before each change is passed on (so
/// that whoever it wakes reads the new room), deletions included. A watch refused (no RBAC
/// to read quotas) is retried with backoff; meanwhile waiters retry on their own.
pub(super) fn quota_changes(
    api: Api<ResourceQuota>,
    writer: Writer<ResourceQuota>,
) -> impl Stream<Item = Result<ResourceQuota, watcher::Error>> + Send + 'static {
    watcher(api, watcher::Config::default())
        .backoff(crate::watch_backoff::watch_backoff())
        .modify(|q| q.metadata.managed_fields = None)
        .reflect(writer)
        .touched_objects()
        .inspect(|r| {
            if let Err(error) = r {
                tracing::warn!(%error, "watching ResourceQuotas for the runner Pod queue");
            }
        })
}
