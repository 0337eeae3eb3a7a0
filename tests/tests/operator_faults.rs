//! Faults on the operator, end to end: a runner killed or OOM-killed mid-apply, a runner Pod
//! that never becomes Ready, a quota with no room, and the controller itself killed mid-apply.
//! Each ends in its reason within a bounded time, and the next run succeeds; the restarted
//! controller attaches to the apply under way instead of applying again.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ResourceQuota;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use support::operator::{Operator, applying, condition, hungry, ready_with, says, slow};

fn reason_is(t: &tfops_kube::Terraform, reason: &str) -> bool {
    condition(t, "Ready").is_some_and(|(_, r, _)| r == reason)
}

/// A runner killed mid-apply (SIGKILL to its container, or, with `oom`, the apply outgrows the
/// Pod's memory limit and the kernel's OOM killer ends the container): reported with the
/// container's reason at once; the killed Terraform's lock then stops the next run, and, its
/// holder being this object's runner Pod, which is gone, the controller releases it (the
/// `LockHolderGone` event says so) and plans again: the object converges with no human.
async fn killed_mid_apply_converges(op: &Operator, name: &str, oom: bool) {
    let gate = tempfile::tempdir().unwrap();
    let runner = if oom {
        support::operator::memory_limit("512Mi")
    } else {
        json!({})
    };
    op.git.commit(
        "infra",
        &[("main.tf", &hungry(Some(&gate.path().join("go"))))],
    );
    op.apply(&op.manifest(name, json!({"approvePlan": "auto", "runner": runner})));
    applying(op, name).await;
    let pod = format!("{name}-tf-runner");
    if oom {
        std::fs::write(gate.path().join("go"), "").unwrap();
    } else {
        assert!(op.cluster.node().unwrap().kill("team-a", &pod));
    }
    let said = if oom {
        "killed (OOMKilled: over its memory limit, exit code 137)"
    } else {
        "killed by SIGKILL (exit code 137)"
    };
    let expected = format!("runner Pod team-a/{pod} died: {said}");
    let expected_ = expected.clone();
    let t = op
        .wait_for(name, "reported the runner's death", 60, move |t| {
            says(t, &expected_)
        })
        .await;
    assert!(
        condition(&t, "Apply").is_some_and(|(s, _, _)| s == "False"),
        "{:?}",
        condition(&t, "Apply")
    );
    // The slow resource is made quick (else the next apply waits for the gate again); nobody
    // touches the lock.
    op.git.commit("infra", &[("main.tf", &slow(0))]);
    op.wait_for(
        name,
        "applied after the dead runner's lock was released",
        180,
        |t| ready_with(t, "TerraformAppliedSucceed"),
    )
    .await;
    let message = lock_released(op, name).await;
    assert!(
        message.contains(&pod) && message.contains("gone"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn runners_killed_or_oom_killed_mid_apply_are_reported_and_converge_with_no_human() {
    let op = Operator::start_with_processes(&[]).await;
    killed_mid_apply_converges(&op, "killed", false).await;
    killed_mid_apply_converges(&op, "oom", true).await;
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
    // Waiting, not failed: no room at all, so no attempt either.
    let (status, _, message) = condition(&t, "Ready").unwrap();
    assert_eq!(status, "Unknown");
    // (How many Pods the quota counts as used lags behind: the quota controller may still
    // count the previous object's runner Pod, just deleted.)
    assert!(
        message.starts_with(
            "waiting for a runner Pod: the ResourceQuota pods in team-a allows no more Pods (used "
        ) && message.contains(" of 0) (position 1 of 1)"),
        "{message}"
    );
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

/// Found by the soak (seed 20261205): with a separate apply runner (`spec.runner.apply`), the
/// apply runner killed mid-apply left its lock naming the apply runner's host; every later run
/// planned in the plan runner, found the lock, and stopped (`LockHeld`), since only the apply
/// runner itself could prove it stale and it never started again. Now the run looks for the
/// apply runner's Pod, finds it gone, releases the lock (`LockHolderGone`) and converges.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_apply_runner_killed_mid_apply_leaves_no_lock_that_stops_the_object() {
    // Runner Pods as real containers where `scripts/test` asks for them, as in the soak.
    let op = Operator::start().await;
    let name = "split";
    op.git.commit("infra", &[("main.tf", &slow(60))]);
    let runner = json!({"apply": {"serviceAccountName": "tf-runner"}});
    op.apply(&op.manifest(name, json!({"approvePlan": "auto", "runner": runner})));
    applying(&op, name).await;
    let pod = format!("{name}-tf-runner-apply");
    assert!(
        op.cluster.node().unwrap().kill("team-a", &pod),
        "the apply runner runs"
    );
    let expected = format!("runner Pod team-a/{pod} died");
    op.wait_for(name, "reported the apply runner's death", 60, move |t| {
        says(t, &expected)
    })
    .await;
    op.git.commit("infra", &[("main.tf", &slow(0))]);
    op.wait_for(
        name,
        "applied after the dead apply runner's lock was released",
        180,
        |t| ready_with(t, "TerraformAppliedSucceed"),
    )
    .await;
    let message = lock_released(&op, name).await;
    assert!(
        message.contains("apply runner, whose Pod is gone"),
        "{message}"
    );
}

/// Found by the soak on a new machine (seed 20261205): a runner killed in `init`, while
/// Terraform wrote the workspace's first state, left the state's Lease held (`Operation:
/// init`) and no state Secret. Every later `init` stopped on it ("the state is already locked
/// by another terraform client", which was not even read as a lock), and Terraform's own
/// `force-unlock` cannot release it: it loads that state first, which takes the same lock.
/// What the killed runner leaves is made here as the kubernetes backend leaves it (the kill
/// itself falls between two requests Terraform makes a few milliseconds apart); the run finds
/// the lock in `init`, proves its holder gone (its own runner's host), frees the Lease and
/// converges.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lock_left_by_a_runner_killed_in_init_does_not_stop_the_object() {
    let op = Operator::start().await;
    let name = "fresh";
    let host = tfops_core::naming::runner_host("team-a", &format!("{name}-tf-runner"));
    let lock_id = "7d3e0c52-init-left";
    let info = json!({"ID": lock_id, "Path": "", "Operation": "init",
        "Who": format!("65532@{host}"), "Version": "1.11.4",
        "Created": "2026-12-05T10:00:00Z", "Info": ""});
    let leases: Api<Lease> = Api::namespaced(op.admin.clone(), "team-a");
    let lease = format!("lock-tfstate-default-{name}");
    let made = leases
        .create(
            &PostParams::default(),
            &support::from_json(json!({
                "metadata": {"name": lease,
                    "annotations": {"app.terraform.io/lock-info": info.to_string()}},
                "spec": {"holderIdentity": lock_id},
            })),
        )
        .await
        .unwrap();
    op.git.commit("infra", &[("main.tf", &slow(0))]);
    op.apply(&op.manifest(name, json!({"approvePlan": "auto"})));
    op.wait_for(
        name,
        "applied after the lock left in init was freed",
        180,
        |t| ready_with(t, "TerraformAppliedSucceed"),
    )
    .await;
    let message = lock_released(&op, name).await;
    assert!(
        message.contains(lock_id) && message.contains("which is gone"),
        "{message}"
    );
    // Freed where it was, as the backend frees a lock (the same Lease, no holder: Terraform
    // would have deleted and made it anew only after it was freed), and the state written.
    let left = leases.get(&lease).await.unwrap();
    assert_eq!(left.metadata.uid, made.metadata.uid);
    assert!(left.spec.and_then(|s| s.holder_identity).is_none());
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(op.admin.clone(), "team-a");
    assert!(
        secrets
            .get_opt(&format!("tfstate-default-{name}"))
            .await
            .unwrap()
            .is_some()
    );
}

/// The message of the event saying that object `name`'s lock was released, its holder gone.
async fn lock_released(op: &Operator, name: &str) -> String {
    let events: Api<k8s_openapi::api::core::v1::Event> =
        Api::namespaced(op.admin.clone(), "team-a");
    events
        .list(&kube::api::ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(name))
        .find(|e| e.reason.as_deref() == Some("LockHolderGone"))
        .expect("an event says the dead runner's lock was released")
        .message
        .unwrap_or_default()
}
