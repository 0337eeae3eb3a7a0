//! The runner CA rotates while a run is in flight. The run completes
//! (its connection was made under the previous CA, which runners keep trusting until it
//! expires), and the next run's runner Pod gets a certificate of the new CA.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::watcher;
use serde_json::json;
use support::operator::{Operator, applying, condition, ready_with, slow};

/// The controller's CA Secret as stored now (it changes when the CA rotates).
async fn ca(op: &Operator) -> String {
    let secret = Api::<Secret>::namespaced(op.admin.clone(), "tfops-system")
        .get("tfops-ca")
        .await
        .unwrap();
    serde_json::to_string(&secret.data).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_ca_rotated_mid_run_lets_the_run_finish_and_the_next_run_uses_the_new_one() {
    // CAs and certificates for 30 s, renewed 24 s ahead: a new CA every 6 s, checked often.
    let op = Operator::start_with(&[
        "--ca-validity-duration",
        "30s",
        "--cert-validity-duration",
        "30s",
        "--cert-renew-before",
        "24s",
        "--cert-rotation-check-frequency",
        "200ms",
    ])
    .await;
    // The certificate version each runner Pod was made with.
    let versions = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = versions.clone();
    let pods: Api<Pod> = Api::namespaced(op.admin.clone(), "team-a");
    let watch = tokio::spawn(async move {
        let mut stream = watcher(pods, watcher::Config::default()).boxed();
        while let Some(Ok(event)) = stream.next().await {
            if let watcher::Event::Apply(p) | watcher::Event::InitApply(p) = event {
                let v = p
                    .metadata
                    .annotations
                    .unwrap_or_default()
                    .get("infra.argocd.io/tls-version")
                    .cloned()
                    .unwrap_or_default();
                let mut seen = seen.lock().unwrap();
                if !seen.contains(&v) {
                    seen.push(v);
                }
            }
        }
    });
    op.git.commit("infra", &[("main.tf", &slow(8))]);
    op.apply(&op.manifest("app", json!({"approvePlan": "auto"})));
    applying(&op, "app").await;
    let before = ca(&op).await;
    // The CA rotates while Terraform applies.
    let mut rotated = false;
    for _ in 0..200 {
        if ca(&op).await != before {
            rotated = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(rotated, "the CA rotated within 10 s");
    let t = op
        .wait_for("app", "finished the run begun under the old CA", 120, |t| {
            ready_with(t, "TerraformAppliedSucceed")
                && t.status.as_ref().is_some_and(|s| s.active_run.is_none())
        })
        .await;
    assert!(t.status.unwrap().last_apply_started_at.is_some());

    // The next run (on a new revision) runs in a new runner Pod with a certificate of a newer
    // CA, and succeeds.
    let revision = op
        .git
        .commit("infra", &[("main.tf", &format!("{}\n# v2\n", slow(1)))]);
    op.terraforms()
        .patch(
            "app",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"infra.argocd.io/reconcile": "2"}}})),
        )
        .await
        .unwrap();
    op.wait_for("app", "ran on the next revision", 120, move |t| {
        let s = t.status.as_ref();
        let on_it = s
            .and_then(|s| s.last_attempted_revision.as_deref())
            .is_some_and(|r| r.ends_with(&revision));
        on_it
            && condition(t, "Reconciling").is_none()
            && condition(t, "Ready").is_some_and(|(s, _, _)| s == "True")
    })
    .await;
    watch.abort();
    let versions = versions.lock().unwrap().clone();
    let distinct: BTreeSet<&String> = versions.iter().filter(|v| !v.is_empty()).collect();
    assert!(
        distinct.len() >= 2,
        "the second runner Pod has another certificate: {versions:?}"
    );
}
