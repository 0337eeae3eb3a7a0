//! Faults on the operator, end to end: a runner killed or OOM-killed mid-apply, a runner Pod
//! that never becomes Ready, a quota with no room, and the controller itself killed mid-apply.
//! Each ends in its reason within a bounded time, and the next run succeeds; the restarted
//! controller attaches to the apply under way instead of applying again.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use k8s_openapi::api::core::v1::ResourceQuota;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;
use support::operator::{Operator, applying, condition, hungry, ready_with, slow};

async fn annotate(op: &Operator, name: &str, annotations: serde_json::Value) {
    op.terraforms()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": annotations}})),
        )
        .await
        .unwrap();
}

fn reason_is(t: &tfops_kube::Terraform, reason: &str) -> bool {
    condition(t, "Ready").is_some_and(|(_, r, _)| r == reason)
}

/// A runner killed mid-apply (its process crashes; `oom`: its apply grows past the runner
/// Pod's memory limit and the kernel's OOM killer ends the container): reported with the
/// container's reason; the killed Terraform's lock then stops the next run (its state may be
/// partial) and is shown in status, whose lock id this returns.
async fn killed_mid_apply(op: &Operator, name: &str, oom: bool) -> String {
    let gate = tempfile::tempdir().unwrap();
    let runner = if oom {
        support::operator::memory_limit("512Mi")
    } else {
        json!({})
    };
    op.git
        .commit("infra", &[("main.tf", &hungry(&gate.path().join("go")))]);
    op.apply(&op.manifest(name, json!({"approvePlan": "auto", "runner": runner})));
    applying(op, name).await;
    let pod = format!("{name}-tf-runner");
    if oom {
        std::fs::write(gate.path().join("go"), "").unwrap();
    } else {
        assert!(op.cluster.node().unwrap().kill("team-a", &pod));
    }
    let said = if oom {
        "OOMKilled (exit code 137)"
    } else {
        "Error (exit code 137)"
    };
    let expected = format!("runner Pod team-a/{pod} died: {said}");
    let expected_ = expected.clone();
    let t = op
        .wait_for(name, "reported the runner's death", 60, move |t| {
            t.status
                .as_ref()
                .is_some_and(|s| s.conditions.iter().any(|c| c.message.contains(&expected_)))
        })
        .await;
    assert!(
        condition(&t, "Apply").is_some_and(|(s, _, _)| s == "False"),
        "{:?}",
        condition(&t, "Apply")
    );
    // The dead Terraform's lock is shown with its holder, and nothing breaks it silently.
    let t = op
        .wait_for(name, "reported the held lock", 60, |t| {
            reason_is(t, "LockHeld")
        })
        .await;
    let lock = t.status.as_ref().unwrap().lock.clone();
    assert!(!lock.pending.is_empty(), "{lock:?}");
    // (Terraform's `Who` is user@hostname; in a cluster the hostname is the Pod's name, on the
    // node agent it is this machine's.)
    assert!(lock.holder.contains('@'), "the holder is shown: {lock:?}");
    lock.pending
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn runners_killed_or_oom_killed_mid_apply_are_reported_and_the_next_run_succeeds() {
    let op = Operator::start().await;
    let killed = killed_mid_apply(&op, "killed", false).await;
    let oom = killed_mid_apply(&op, "oom", true).await;
    // The slow resource is made quick; the user releases each lock with the id status shows
    // (the force-unlock action); both runs succeed.
    op.git.commit("infra", &[("main.tf", &slow(0))]);
    for (name, lock) in [("killed", killed), ("oom", oom)] {
        annotate(
            &op,
            name,
            json!({"infra.argocd.io/force-unlock": lock, "infra.argocd.io/reconcile": "unlock"}),
        )
        .await;
        op.wait_for(name, "applied after the fix", 120, |t| {
            ready_with(t, "TerraformAppliedSucceed")
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pod_never_ready_and_a_full_quota_end_in_their_reasons_then_runs_succeed() {
    let op = Operator::start_with(&["--runner-creation-timeout", "4s"]).await;
    // No node takes Pods (cordoned): the runner Pod is never scheduled, never Ready.
    support::cordon(&op.admin, true).await;
    op.apply(&op.manifest("stuck", json!({"approvePlan": "auto"})));
    let t = op
        .wait_for("stuck", "gave up on the Pod", 60, |t| {
            reason_is(t, "RunnerConnectionFailed")
        })
        .await;
    let (_, _, message) = condition(&t, "Ready").unwrap();
    assert!(
        message.contains("did not become Ready within 4 s"),
        "{message}"
    );
    support::cordon(&op.admin, false).await;
    op.wait_for("stuck", "applied once the Pod could start", 120, |t| {
        ready_with(t, "TerraformAppliedSucceed")
    })
    .await;

    let quotas: Api<ResourceQuota> = Api::namespaced(op.admin.clone(), "team-a");
    support::quota(&op.admin, "team-a", "pods", json!({"pods": "0"})).await;
    op.apply(&op.manifest("over", json!({"approvePlan": "auto"})));
    let t = op
        .wait_for("over", "reported the quota", 60, |t| {
            reason_is(t, "RunnerQuotaExhausted")
        })
        .await;
    assert!(condition(&t, "Ready").unwrap().2.contains("exceeded quota"));
    quotas
        .delete("pods", &DeleteParams::default())
        .await
        .unwrap();
    op.wait_for("over", "applied once the quota allowed it", 120, |t| {
        ready_with(t, "TerraformAppliedSucceed")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_controller_killed_mid_apply_is_followed_by_one_that_attaches() {
    let mut op = Operator::start().await;
    op.git.commit("infra", &[("main.tf", &slow(6))]);
    op.apply(&op.manifest(
        "vpc",
        json!({"approvePlan": "auto", "writeOutputsToSecret": {"name": "vpc-out"}}),
    ));
    // The apply is recorded in status and under way, then the controller dies.
    applying(&op, "vpc").await;
    op.kill_controller();
    op.start_controller();
    // One runner Pod, one apply: the new controller never started another.
    support::operator::attached_once(&op, "vpc").await;
    // The outputs read after attaching were written by the runner, never by the controller.
    let writers: Vec<String> = op
        .cluster
        .audit()
        .into_iter()
        .filter(|a| a.method != "GET" && a.path.ends_with("/secrets/vpc-out"))
        .map(|a| a.user)
        .collect();
    assert!(!writers.is_empty());
    assert!(
        writers
            .iter()
            .all(|u| u == "system:serviceaccount:team-a:tf-runner"),
        "{writers:?}"
    );
}
