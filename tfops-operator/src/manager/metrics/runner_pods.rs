//! Runner Pods as the cluster has them: a watch of the Pods tfops made (by their labels) in
//! the watched namespaces, counted at every scrape by namespace, role and phase. The Pods
//! themselves, not the manager's sessions: a Pod left by a manager that died, or one that
//! cannot be scheduled, counts too.

use std::collections::BTreeMap;
use std::sync::Mutex;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet};
use tfops_kube::meta::MANAGED_BY;
use tfops_kube::runner::pod::LABEL_ROLE;

/// The labels every runner Pod carries (`tfops_kube::runner::pod`).
pub const SELECTOR: &str = "app.kubernetes.io/name=tf-runner,app.kubernetes.io/managed-by=tfops";

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
struct PodLabels {
    namespace: String,
    role: String,
    phase: String,
}

/// The caches of runner Pods, one per watched namespace (or one for all).
#[derive(Debug, Default)]
pub(super) struct RunnerPods {
    stores: Mutex<Vec<Store<Pod>>>,
}

/// Runner Pods by namespace, role (`plan`, `apply`) and phase (`Pending`, `Running`,
/// `Succeeded`, `Failed`, `Unknown`; a Pod without a phase yet is `Pending`).
fn census<'a>(pods: impl IntoIterator<Item = &'a Pod>) -> BTreeMap<PodLabels, i64> {
    let mut counts = BTreeMap::new();
    for pod in pods {
        let label = |k: &str| pod.metadata.labels.as_ref().and_then(|l| l.get(k)).cloned();
        if label(MANAGED_BY).as_deref() != Some("tfops") {
            continue;
        }
        let labels = PodLabels {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            role: label(LABEL_ROLE).unwrap_or_default(),
            phase: pod
                .status
                .as_ref()
                .and_then(|s| s.phase.clone())
                .unwrap_or_else(|| "Pending".into()),
        };
        *counts.entry(labels).or_default() += 1;
    }
    counts
}

impl RunnerPods {
    fn stores(&self) -> std::sync::MutexGuard<'_, Vec<Store<Pod>>> {
        // A panic while holding the lock leaves a list that is still whole.
        self.stores.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Watches the runner Pods of `namespaces` (empty: all) until dropped; the count reads
    /// the caches it fills.
    pub(super) async fn watch(&self, client: kube::Client, namespaces: &[String]) {
        let apis: Vec<Api<Pod>> = if namespaces.is_empty() {
            vec![Api::all(client)]
        } else {
            namespaces
                .iter()
                .map(|ns| Api::namespaced(client.clone(), ns))
                .collect()
        };
        let mut readers = Vec::new();
        let watches: Vec<_> = apis
            .into_iter()
            .map(|api| {
                let (reader, writer) = reflector::store();
                readers.push(reader);
                watcher(api, watcher::Config::default().labels(SELECTOR))
                    .backoff(tfops_kube::watch_backoff::watch_backoff())
                    // Only the labels and the phase are counted.
                    .modify(|pod: &mut Pod| {
                        pod.spec = None;
                        pod.metadata.managed_fields = None;
                        pod.metadata.annotations = None;
                    })
                    .reflect(writer)
                    .for_each(|event| async move {
                        if let Err(error) = event {
                            tracing::debug!(%error, "watching runner Pods");
                        }
                    })
            })
            .collect();
        // A watch started again (a new leadership) replaces the caches of the last one.
        *self.stores() = readers;
        futures::future::join_all(watches).await;
    }
}

impl Collector for RunnerPods {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let stores = self.stores();
        let pods: Vec<_> = stores.iter().flat_map(Store::state).collect();
        super::objects::gauges(
            &mut encoder,
            "runner_pods",
            "Runner Pods by namespace, role and phase.",
            census(pods.iter().map(AsRef::as_ref)),
        )
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn pod(ns: &str, role: &str, phase: Option<&str>, managed: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": ns, "labels": {
                "app.kubernetes.io/managed-by": managed, "infra.argocd.io/runner-role": role}},
            "status": {"phase": phase},
        }))
        .unwrap()
    }

    #[test]
    fn runner_pods_are_counted_by_namespace_role_and_phase() {
        let pods = [
            pod("a", "plan", Some("Running"), "tfops"),
            pod("a", "plan", Some("Running"), "tfops"),
            pod("a", "apply", None, "tfops"),
            pod("b", "plan", Some("Failed"), "tfops"),
            pod("b", "plan", Some("Running"), "someone-else"),
        ];
        let counts: Vec<_> = census(&pods)
            .into_iter()
            .map(|(l, n)| (l.namespace, l.role, l.phase, n))
            .collect();
        let row = |ns: &str, role: &str, phase: &str, n| (ns.into(), role.into(), phase.into(), n);
        assert_eq!(
            counts,
            vec![
                row("a", "apply", "Pending", 1),
                row("a", "plan", "Running", 2),
                row("b", "plan", "Failed", 1),
            ]
        );
    }
}
