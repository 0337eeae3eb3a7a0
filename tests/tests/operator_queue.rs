//! The queue for runner Pods on the real control plane: a ResourceQuota of one Pod (enforced
//! by the real quota admission, counted by the real kube-controller-manager's quota
//! controller) and five objects. Every object ends Ready; no more than one runner Pod ever
//! counts against the quota (Pods are watched, not sampled); the objects that waited start in
//! the order they began waiting; and `Ready` says where each stands meanwhile. Without the
//! right to read quotas the same five are refused and retry after jittered waits, and still
//! all end Ready with never two Pods counted.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{Api, PostParams};
use kube::runtime::watcher::{self, Event};
use serde_json::json;
use support::operator::{Operator, condition, ready_with};
use tfops_kube::Terraform;

/// What the Pod watch saw.
#[derive(Debug, Default)]
struct Pods {
    /// Runner Pods the quota counts now (not Succeeded or Failed), by name.
    counted: BTreeSet<String>,
    /// Runner Pod objects that exist now, by name.
    present: BTreeSet<String>,
    /// The most counted at once, and the most present at once.
    most_counted: usize,
    most_present: usize,
    /// The objects whose runner Pod was created, in order (an object again when it runs again).
    started: Vec<String>,
}

impl Pods {
    fn seen(&mut self, pod: &Pod) {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if self.present.insert(name.clone()) {
            self.started
                .push(name.trim_end_matches("-tf-runner").to_string());
        }
        if matches!(phase, Some("Succeeded" | "Failed")) {
            self.counted.remove(&name);
        } else {
            self.counted.insert(name);
        }
        self.most_counted = self.most_counted.max(self.counted.len());
        self.most_present = self.most_present.max(self.present.len());
    }

    fn gone(&mut self, pod: &Pod) {
        let name = pod.metadata.name.clone().unwrap_or_default();
        self.counted.remove(&name);
        self.present.remove(&name);
    }
}

/// What the watch of the objects saw.
#[derive(Debug, Default)]
struct Objects {
    /// When each object began waiting (its `Ready` transition time under the reason).
    since: BTreeMap<String, tfops_core::Timestamp>,
    /// Waiters whose `Ready` was not `Unknown`, or whose wait's start moved.
    wrong: Vec<String>,
    /// Waiting now, and the most at once.
    waiting: BTreeSet<String>,
    most_waiting: usize,
    /// Every distinct queue message.
    messages: BTreeSet<String>,
}

impl Objects {
    fn seen(&mut self, t: &Terraform) {
        let name = t.metadata.name.clone().unwrap_or_default();
        let ready = t
            .status
            .as_ref()
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"));
        match ready.filter(|c| c.reason == "RunnerQuotaExhausted") {
            Some(c) => {
                if c.status != tfops_core::conditions::ConditionStatus::Unknown {
                    self.wrong.push(format!("{name}: Ready {:?}", c.status));
                }
                let since = *self
                    .since
                    .entry(name.clone())
                    .or_insert(c.last_transition_time);
                if since != c.last_transition_time && self.waiting.contains(&name) {
                    self.wrong.push(format!(
                        "{name}: wait began {since}, then {}",
                        c.last_transition_time
                    ));
                }
                self.messages.insert(c.message.clone());
                self.waiting.insert(name);
            }
            None => {
                self.waiting.remove(&name);
            }
        }
        self.most_waiting = self.most_waiting.max(self.waiting.len());
    }
}

fn watch<K, F>(api: Api<K>, config: watcher::Config, mut on: F) -> tokio::task::JoinHandle<()>
where
    K: kube::Resource
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    K::DynamicType: Default + Clone + std::hash::Hash + Eq,
    F: FnMut(Event<K>) + Send + 'static,
{
    tokio::spawn(async move {
        let mut events = watcher::watcher(api, config).boxed();
        while let Some(event) = events.next().await {
            match event {
                Ok(e) => on(e),
                Err(e) => panic!("watch failed: {e}"),
            }
        }
    })
}

/// What a run of five objects under a quota of one Pod saw.
struct Seen {
    pods: Pods,
    objects: Objects,
}

/// Applies five objects under a ResourceQuota of one Pod and waits until all are Ready,
/// watching the runner Pods and the objects all along; checks what holds however the queue
/// learns of room: all Ready, never two runner Pods counted at once, no failure counted.
async fn five_under_a_quota_of_one(op: &Operator) -> Seen {
    support::quota(&op.admin, "team-a", "pods", json!({"pods": "1"})).await;
    let pods = Arc::new(Mutex::new(Pods::default()));
    let seen = pods.clone();
    let pod_watch = watch(
        Api::<Pod>::namespaced(op.admin.clone(), "team-a"),
        watcher::Config::default().labels("app.kubernetes.io/name=tf-runner"),
        move |e| {
            let mut p = seen.lock().unwrap();
            match e {
                Event::Apply(pod) | Event::InitApply(pod) => p.seen(&pod),
                Event::Delete(pod) => p.gone(&pod),
                Event::Init | Event::InitDone => {}
            }
        },
    );
    let objects = Arc::new(Mutex::new(Objects::default()));
    let seen = objects.clone();
    let object_watch = watch(op.terraforms(), watcher::Config::default(), move |e| {
        if let Event::Apply(t) | Event::InitApply(t) = e {
            seen.lock().unwrap().seen(&t);
        }
    });

    let names: Vec<String> = (1..=5).map(|i| format!("q{i}")).collect();
    let started = Instant::now();
    for name in &names {
        op.apply(&op.manifest(name, json!({"approvePlan": "auto"})));
    }
    for name in &names {
        op.wait_for(name, "became Ready", 300, |t| {
            ready_with(t, "TerraformAppliedSucceed")
        })
        .await;
    }
    let took = started.elapsed();
    pod_watch.abort();
    object_watch.abort();
    let pods = std::mem::take(&mut *pods.lock().unwrap());
    let objects = std::mem::take(&mut *objects.lock().unwrap());
    println!(
        "5 objects, quota of 1 Pod: all Ready in {:.1} s; at most {} runner Pod counted and {} present at once; {} waited (at most {} at once); Pods in order {:?}; waits began {:?}",
        took.as_secs_f64(),
        pods.most_counted,
        pods.most_present,
        objects.since.len(),
        objects.most_waiting,
        pods.started,
        objects.since,
    );
    for m in &objects.messages {
        println!("  {m}");
    }
    assert_eq!(pods.most_counted, 1, "{pods:?}");
    assert!(objects.wrong.is_empty(), "{:?}", objects.wrong);
    assert!(pods.started.len() >= 5, "{pods:?}");
    for name in &names {
        let t = op.terraforms().get(name).await.unwrap();
        let status = t.status.clone().unwrap();
        assert_eq!(status.reconciliation_failures, 0, "{name}");
        assert!(condition(&t, "Stalled").is_none(), "{name}");
    }
    Seen { pods, objects }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_quota_of_one_pod_runs_five_objects_one_at_a_time_in_the_order_they_waited() {
    let op = Operator::start().await;
    let Seen { pods, objects } = five_under_a_quota_of_one(&op).await;
    // With room for one, at least three of the five waited, together.
    assert!(objects.most_waiting >= 3, "{objects:?}");
    assert!(
        objects.messages.iter().any(|m| m.starts_with(
            "waiting for a runner Pod: the ResourceQuota pods in team-a allows no more Pods (used 1 of 1) (position "
        )),
        "{:?}",
        objects.messages
    );
    // Those that waited got their Pod in the order they began waiting (the longest first).
    let mut by_wait: Vec<(&tfops_core::Timestamp, &String)> =
        objects.since.iter().map(|(n, s)| (s, n)).collect();
    by_wait.sort();
    let queued: Vec<&String> = by_wait.iter().map(|(_, n)| *n).collect();
    let mut first_pod: Vec<&String> = Vec::new();
    for name in &pods.started {
        if objects.since.contains_key(name) && !first_pod.contains(&name) {
            first_pod.push(name);
        }
    }
    assert_eq!(first_pod, queued, "Pods {:?}", pods.started);
}

/// Without the right to read ResourceQuotas the controller cannot tell the room: the
/// waiters are refused by the quota and retry on their own, after their jittered waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_reading_quotas_the_waiters_retry_after_jittered_waits_and_all_become_ready() {
    let mut op = Operator::prepare().await;
    let roles: Api<ClusterRole> = Api::all(op.admin.clone());
    let mut role = roles.get("tfops-controller").await.unwrap();
    let rules = role.rules.get_or_insert_default();
    rules.retain(|r| {
        !r.resources
            .as_ref()
            .is_some_and(|v| v.iter().any(|x| x == "resourcequotas"))
    });
    roles
        .replace("tfops-controller", &PostParams::default(), &role)
        .await
        .unwrap();
    op.start_prepared(&[]);
    let Seen { objects, .. } = five_under_a_quota_of_one(&op).await;
    // They were refused (retry), not told to wait their turn (next look).
    assert!(
        objects.messages.iter().any(|m| m.starts_with(
            "waiting for a runner Pod: the ResourceQuota pods in team-a allows no more Pods (used 1 of 1)"
        ) && m.contains("; retry in ")),
        "{:?}",
        objects.messages
    );
    assert!(
        !objects.messages.iter().any(|m| m.contains("next look")),
        "{:?}",
        objects.messages
    );
}
