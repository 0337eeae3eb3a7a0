//! The plans being made: one task per plan, at most `concurrency` at once and one at a time
//! per object (its pull-request runner Pod has one name), each cancelled when its head is
//! superseded or its pull request closes.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams};
use tfops_core::api::{ObjectKey, RunnerRole, TerraformObject};
use tfops_core::pulls::{PlanRef, PullRequest};
use tokio::sync::{Semaphore, watch};

use super::{Group, Shared};

/// The plans under way, by repository.
pub(crate) struct Tasks {
    running: Mutex<BTreeMap<(String, PlanRef), watch::Sender<bool>>>,
    slots: Arc<Semaphore>,
    objects: Mutex<BTreeMap<ObjectKey, Arc<tokio::sync::Mutex<()>>>>,
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Tasks {
    pub(crate) fn new(concurrency: usize) -> Self {
        Self {
            running: Mutex::default(),
            slots: Arc::new(Semaphore::new(concurrency)),
            objects: Mutex::default(),
        }
    }

    /// The plans of `repository` under way.
    pub(crate) fn running(&self, repository: &str) -> Vec<PlanRef> {
        locked(&self.running)
            .keys()
            .filter(|(r, _)| r == repository)
            .map(|(_, p)| p.clone())
            .collect()
    }

    /// Whether `plan` of `repository` is under way.
    pub(crate) fn is_running(&self, repository: &str, plan: &PlanRef) -> bool {
        locked(&self.running).contains_key(&(repository.to_string(), plan.clone()))
    }

    /// Cancels `plan` of `repository` if under way.
    pub(crate) fn cancel(&self, repository: &str, plan: &PlanRef) {
        if let Some(cancel) = locked(&self.running).remove(&(repository.to_string(), plan.clone()))
        {
            let _ = cancel.send(true);
        }
    }

    fn object_lock(&self, key: &ObjectKey) -> Arc<tokio::sync::Mutex<()>> {
        locked(&self.objects)
            .entry(key.clone())
            .or_default()
            .clone()
    }
}

/// Starts making `plan` of `object` for `pull` in a task of its own; when it is made (and not
/// cancelled) it is stored and the pull request's comment and statuses published again.
pub(crate) fn start(
    shared: &Arc<Shared>,
    group: &Group,
    object: &TerraformObject,
    pull: &PullRequest,
    plan: PlanRef,
) {
    let (cancel, mut cancelled) = watch::channel(false);
    locked(&shared.tasks.running).insert((group.id.clone(), plan.clone()), cancel);
    let (shared, object, pull) = (shared.clone(), object.clone(), pull.clone());
    let repository = group.id.clone();
    tokio::spawn(async move {
        let key = object.key();
        let made = async {
            let _slot = shared.tasks.slots.acquire().await.ok()?;
            let lock = shared.tasks.object_lock(&key);
            let _one = lock.lock().await;
            let made = tokio::select! {
                made = tfops_core::pulls::plan_pull_request(&shared.ports, &object, &pull) => Some(made),
                _ = cancelled.wait_for(|c| *c) => None,
            };
            if made.is_none() {
                // The plan was dropped mid-way: its runner Pod goes too (under the object's
                // lock, before its next plan starts one of the same name).
                remove_runner(&shared.client, &object).await;
            }
            made
        }
        .await;
        let Some(made) = made else {
            shared.metrics.plan("cancelled");
            tracing::info!(object = %key, pull = pull.number, "a pull request's plan was superseded");
            return;
        };
        // Superseded while it was being stored: not stored.
        if !shared.tasks.is_running(&repository, &plan) {
            shared.metrics.plan("superseded");
            return;
        }
        let failed = matches!(made.plan.outcome, tfops_core::pulls::Outcome::Failed { .. });
        shared
            .metrics
            .plan(if failed { "failed" } else { "planned" });
        let stored = shared
            .store
            .save(
                &object,
                &repository,
                pull.number,
                &pull.head_sha,
                &made.plan,
                &made.digest,
            )
            .await;
        shared.tasks.cancel(&repository, &plan);
        if let Err(e) = stored {
            tracing::warn!(object = %key, pull = pull.number, error = %e, "storing a pull request's plan");
        }
        // Published by the next look, asked for now.
        shared.nudge.repository_id(&repository);
    });
}

/// Deletes `object`'s pull-request runner Pod, if any.
async fn remove_runner(client: &kube::Client, object: &TerraformObject) {
    let name = object.runner_pod_name(RunnerRole::PullRequest);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &object.metadata.namespace);
    if let Err(e) = pods.delete(&name, &DeleteParams::default()).await {
        let gone = matches!(&e, kube::Error::Api(a) if a.code == 404);
        if !gone {
            tracing::warn!(pod = %name, error = %e, "removing a cancelled plan's runner Pod");
        }
    }
}
