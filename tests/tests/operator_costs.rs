//! What a reconcile costs at the API server (docs/scaling.md), counted in the test cluster's
//! audit log for the controller's identity: a reconcile that finds nothing due writes nothing,
//! and a drift check that finds no drift makes a bounded number of requests, printed by
//! resource and verb (run with `--nocapture` to see them; docs/scaling.md quotes them).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;
use support::operator::{Operator, ready_with};

const CONTROLLER: &str = "system:serviceaccount:tfops-system:tfops-controller";
const RECONCILES: &str = "tfops_reconciles_total{result=\"success\"}";

/// The controller's requests from `from` on, as `VERB resource` → count.
/// Waits (at most 60 s) until no runner Pod is left in `team-a`.
async fn no_runner_pods(op: &Operator) {
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(op.admin.clone(), "team-a");
    let runners = kube::api::ListParams::default().labels("app.kubernetes.io/name=tf-runner");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !pods.list(&runners).await.unwrap().items.is_empty() {
        assert!(std::time::Instant::now() < deadline, "a runner Pod stayed");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// The controller's requests from audit entry `from` on, by verb and resource
/// (`PATCH terraforms/status`, `WATCH pods`).
fn requests(op: &Operator, from: usize) -> BTreeMap<String, usize> {
    let mut counted = BTreeMap::new();
    for a in op.cluster.audit().into_iter().skip(from) {
        if a.user == CONTROLLER {
            *counted.entry(a.kind()).or_default() += 1;
        }
    }
    counted
}

async fn reconciles_after(op: &Operator, before: f64) {
    for _ in 0..600 {
        if op.manager().counter(RECONCILES).await > before {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no reconcile within 30 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reconcile_with_nothing_due_writes_nothing_and_a_drift_check_is_bounded() {
    let op = Operator::start().await;
    op.apply(&op.manifest("app", json!({"approvePlan": "auto"})));
    op.wait_for("app", "became Ready", 120, |t| {
        ready_with(t, "TerraformAppliedSucceed")
    })
    .await;
    op.wait_for_runs("app", 1).await;
    // Let the reconciles the run's own writes cause settle: count until one more finds
    // nothing to do.
    let before = op.manager().counter(RECONCILES).await;
    let mark = op.cluster.audit().len();

    // A label edit wakes the controller; nothing is due (interval 1h, no spec change).
    let (ok, out, err) = support::kubectl(
        &op.kubeconfig,
        &["label", "-n", "team-a", "terraform/app", "team=platform"],
    );
    assert!(ok, "{out}{err}");
    reconciles_after(&op, before).await;
    let idle = requests(&op, mark);
    let writes: Vec<&String> = idle
        .keys()
        .filter(|k| !k.starts_with("GET ") && !k.starts_with("WATCH "))
        .collect();
    println!("a reconcile with nothing due: {idle:?}");
    assert!(writes.is_empty(), "no write when nothing is due: {idle:?}");

    // A drift check (a reconcile request on an unchanged object): a runner Pod, a plan that
    // finds nothing, no apply. Counted from a quiet start: the last run's Pod is gone (a
    // container takes a moment to stop; a check that finds it still there waits for it).
    no_runner_pods(&op).await;
    let before = op.manager().counter(RECONCILES).await;
    let mark = op.cluster.audit().len();
    op.wait_for_runs("app", 1).await;
    let (ok, out, err) = support::kubectl(
        &op.kubeconfig,
        &[
            "annotate",
            "--overwrite",
            "-n",
            "team-a",
            "terraform/app",
            "infra.argocd.io/reconcile=check-1",
        ],
    );
    assert!(ok, "{out}{err}");
    op.wait_for("app", "handled the drift check", 120, |t| {
        t.status
            .as_ref()
            .and_then(|s| s.last_handled_reconcile_at.as_deref())
            == Some("check-1")
            && t.status.as_ref().is_some_and(|s| s.active_run.is_none())
    })
    .await;
    op.wait_for_runs("app", 2).await;
    reconciles_after(&op, before).await;
    let check = requests(&op, mark);
    println!("a drift check without drift: {check:?}");
    let total: usize = check.values().sum();
    let count = |k: &str| check.get(k).copied().unwrap_or(0);
    assert_eq!(count("POST pods"), 1, "one runner Pod: {check:?}");
    assert_eq!(count("DELETE pods"), 1, "and it goes: {check:?}");
    assert!(
        count("PATCH terraforms/status") <= 4,
        "status written per phase, not per poll: {check:?}"
    );
    assert!(
        count("WATCH pods") <= 2,
        "one Pod watch for Ready, one for the session: {check:?}"
    );
    assert!(
        total <= 24,
        "a bounded number of requests ({total}): {check:?}"
    );
}
