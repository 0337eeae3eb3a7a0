//! End-to-end scenarios on the test cluster (the real control plane) with real runner Pods and
//! Terraform: drift found and remediated in auto mode (3), a `dependsOn` chain of three
//! applied in order (4), and a missing `varsFrom` Secret reported, then created, and the
//! object recovering by itself (10); and `--concurrent` holding across watched namespaces.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::json;
use support::operator::{Operator, condition, reading, ready_with, slow, upstream_state};
use tfops_kube::Terraform;

fn applied(t: &tfops_kube::Terraform) -> bool {
    ready_with(t, "TerraformAppliedSucceed") || ready_with(t, "TerraformOutputsWritten")
}

/// Whether the run that handled reconcile request `token` is over.
fn handled(t: &tfops_kube::Terraform, token: &str) -> bool {
    t.status
        .as_ref()
        .and_then(|s| s.last_handled_reconcile_at.as_deref())
        == Some(token)
        && condition(t, "Reconciling").is_none()
}

async fn request_run(op: &Operator, name: &str, token: &str) {
    op.terraforms()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"infra.argocd.io/reconcile": token}}}),
            ),
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn drift_behind_terraforms_back_is_detected_and_remediated_in_auto_mode() {
    let op = Operator::start_with_processes(&[]).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("upstream.tfstate");
    upstream_state(&file, "blue", 1);
    op.git.commit("drifting", &[("main.tf", &reading(&file))]);
    op.apply(&op.manifest(
        "app",
        json!({"approvePlan": "auto", "sourceRef": {"url": op.git.url("drifting")}}),
    ));
    let first = op.wait_for("app", "applied", 120, applied).await;
    let applied_at = first.status.as_ref().unwrap().last_apply_started_at;
    assert!(
        first
            .status
            .as_ref()
            .unwrap()
            .last_drift_detected_at
            .is_none()
    );

    // Nothing changed: a requested run checks for drift, finds none, applies nothing.
    request_run(&op, "app", "1").await;
    let t = op
        .wait_for("app", "checked for drift", 120, |t| {
            handled(t, "1") && ready_with(t, "NoDrift")
        })
        .await;
    assert_eq!(t.status.as_ref().unwrap().last_apply_started_at, applied_at);

    // The infrastructure changes behind Terraform's back.
    upstream_state(&file, "red", 2);
    request_run(&op, "app", "2").await;
    let t = op
        .wait_for("app", "remediated the drift", 120, |t| {
            let drift = t
                .status
                .as_ref()
                .is_some_and(|s| s.last_drift_detected_at.is_some());
            handled(t, "2") && drift && applied(t)
        })
        .await;
    let status = t.status.unwrap();
    assert!(status.last_apply_started_at > applied_at, "applied again");
    op.wait_for_runs("app", 3).await;
    let history = tfops_kube::history::KubeRunHistory::new(op.admin.clone())
        .read(&tfops_core::api::ObjectKey::new("team-a", "app"))
        .await
        .unwrap();
    let runs = history
        .iter()
        .map(|r| (&r.trigger, &r.steps, &r.drifted, r.applied, &r.reason))
        .collect::<Vec<_>>();
    assert_eq!(history[0].drifted, ["output.upstream_color"], "{runs:#?}");
    assert!(history[0].applied, "{runs:#?}");
    assert!(
        history[1].drifted.is_empty() && !history[1].applied,
        "{:#?}",
        history
            .iter()
            .map(|r| (&r.trigger, &r.steps, &r.drifted, r.applied))
            .collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_chain_of_three_applies_in_dependency_order() {
    let op = Operator::start().await;
    // Applied last first: each waits for the one it depends on.
    op.apply(&op.manifest(
        "c",
        json!({"approvePlan": "auto", "dependsOn": [{"name": "b"}]}),
    ));
    op.apply(&op.manifest(
        "b",
        json!({"approvePlan": "auto", "dependsOn": [{"name": "a"}]}),
    ));
    let waiting = op
        .wait_for("c", "waited for b", 60, |t| {
            condition(t, "Ready").is_some_and(|(_, r, _)| r == "DependencyNotReady")
        })
        .await;
    assert!(
        condition(&waiting, "Ready").unwrap().2.contains("team-a/b"),
        "{:?}",
        condition(&waiting, "Ready")
    );
    op.apply(&op.manifest("a", json!({"approvePlan": "auto"})));
    let mut started = Vec::new();
    for name in ["a", "b", "c"] {
        let t = op.wait_for(name, "applied", 180, applied).await;
        started.push(t.status.unwrap().last_apply_started_at.unwrap());
    }
    assert!(
        started[0] < started[1] && started[1] < started[2],
        "in order: {started:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_missing_vars_secret_is_reported_and_the_object_recovers_once_it_exists() {
    let op = Operator::start().await;
    op.apply(&op.manifest(
        "app",
        json!({"approvePlan": "auto", "writeOutputsToSecret": {"name": "app-out"},
               "varsFrom": [{"kind": "Secret", "name": "app-vars"}]}),
    ));
    let t = op
        .wait_for("app", "reported the missing Secret", 60, |t| {
            condition(t, "Ready")
                .is_some_and(|(s, r, _)| s == "False" && r == "VarsGenerationFailed")
        })
        .await;
    let (_, _, message) = condition(&t, "Ready").unwrap();
    assert!(message.contains("app-vars"), "{message}");

    // Created later: no edit of the object, it recovers on its own retry.
    Api::<Secret>::namespaced(op.admin.clone(), "team-a")
        .create(
            &PostParams::default(),
            &support::from_json(json!({
                "metadata": {"name": "app-vars"},
                "stringData": {"greeting": "hola"},
            })),
        )
        .await
        .unwrap();
    op.wait_for("app", "recovered", 120, applied).await;
    let out = Api::<Secret>::namespaced(op.admin.clone(), "team-a")
        .get("app-out")
        .await
        .unwrap();
    let greeting = out.data.unwrap()["greeting"].0.clone();
    assert_eq!(String::from_utf8(greeting).unwrap(), "hola");
}

/// `--concurrent` counts across namespaces: with 1, two objects in two watched namespaces
/// never run at once (each namespace has its own watch, and once each its own limit).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_concurrency_limit_holds_across_watched_namespaces() {
    let op =
        Operator::start_with(&["--concurrent", "1", "--watch-namespaces", "team-a,team-b"]).await;
    op.add_namespace("team-b").await;
    // The most runner Pods alive (not being deleted) at any one time, across namespaces.
    let most = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = most.clone();
    let pods: Api<Pod> = Api::all(op.admin.clone());
    let watch = tokio::spawn(async move {
        let mut alive = std::collections::BTreeSet::new();
        let mut stream = watcher(pods, watcher::Config::default()).boxed();
        while let Some(Ok(event)) = stream.next().await {
            match event {
                watcher::Event::Apply(p) | watcher::Event::InitApply(p) => {
                    let key = (p.metadata.namespace.clone(), p.metadata.name.clone());
                    if p.metadata.deletion_timestamp.is_some() {
                        alive.remove(&key);
                    } else {
                        alive.insert(key);
                    }
                }
                watcher::Event::Delete(p) => {
                    alive.remove(&(p.metadata.namespace.clone(), p.metadata.name.clone()));
                }
                _ => {}
            }
            seen.fetch_max(alive.len(), std::sync::atomic::Ordering::SeqCst);
        }
    });
    op.git.commit("infra", &[("main.tf", &slow(3))]);
    let a = op.manifest("one", json!({"approvePlan": "auto"}));
    let b = op
        .manifest("two", json!({"approvePlan": "auto"}))
        .replace("namespace: team-a", "namespace: team-b");
    op.apply(&format!("{a}---\n{b}"));
    op.wait_for("one", "applied", 180, |t| {
        ready_with(t, "TerraformAppliedSucceed")
    })
    .await;
    let other: Api<Terraform> = Api::namespaced(op.admin.clone(), "team-b");
    let done = |t: Option<&Terraform>| t.is_some_and(|t| ready_with(t, "TerraformAppliedSucceed"));
    tokio::time::timeout(
        Duration::from_secs(180),
        kube::runtime::wait::await_condition(other, "two", done),
    )
    .await
    .expect("team-b/two applied")
    .unwrap();
    watch.abort();
    assert_eq!(
        most.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "one run at a time across both namespaces"
    );
}

/// Regression (found by the soak, seed 20261205): a commit elsewhere in the repository moved
/// the shared source past the revision an approved (manual) dependency applied; its dependant
/// then waited for it to "apply" the new revision, which it never would (nothing of its own
/// changed), writing its status again and again meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dependant_follows_a_manual_dependency_when_the_source_moves_elsewhere() {
    let op = Operator::start_with(&["--source-poll-interval", "2s"]).await;
    let config = support::operator::CONFIG;
    op.git
        .commit("infra", &[("a/main.tf", config), ("d/main.tf", config)]);
    op.apply(&op.manifest("a", json!({"approvePlan": "", "path": "a"})));
    op.apply(&op.manifest(
        "d",
        json!({"approvePlan": "auto", "path": "d", "dependsOn": [{"name": "a"}]}),
    ));
    let planned = op
        .wait_for("a", "planned", 120, |t| {
            !support::operator::pending(t).is_empty()
        })
        .await;
    let plan = support::operator::pending(&planned);
    // The repository moves on elsewhere while a's plan waits for its approval.
    let head = op
        .git
        .commit("infra", &[("docs/readme.txt", "nothing of a or d\n")]);
    let seen = head.clone();
    op.wait_for("a", "looked at the new revision", 60, move |t| {
        t.status
            .as_ref()
            .and_then(|s| s.last_attempted_revision.as_deref())
            .is_some_and(|r| r.ends_with(&seen))
    })
    .await;
    op.approve("a", &plan, "first").await;
    op.wait_for("a", "applied", 120, applied).await;
    let d = op
        .wait_for("d", "applied at the new revision", 120, move |t| {
            applied(t)
                && t.status
                    .as_ref()
                    .and_then(|s| s.last_applied_revision.as_deref())
                    .is_some_and(|r| r.ends_with(&head))
        })
        .await;
    // And then quiet: no status written again and again.
    let version = d.metadata.resource_version.clone();
    let mut writes = 0;
    let began = std::time::Instant::now();
    let api: Api<Terraform> = Api::namespaced(op.admin.clone(), "team-a");
    let mut events = watcher(api, watcher::Config::default().fields("metadata.name=d")).boxed();
    while let Ok(Some(event)) = tokio::time::timeout(
        Duration::from_secs(10).saturating_sub(began.elapsed()),
        events.next(),
    )
    .await
    {
        if let Ok(watcher::Event::Apply(t)) = event
            && t.metadata.resource_version != version
        {
            writes += 1;
        }
    }
    assert!(
        writes <= 1,
        "{writes} status writes in 10 s with nothing to do"
    );
}
