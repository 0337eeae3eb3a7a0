//! Runs that cannot hang, end to end on the real control plane (container runners under
//! `scripts/test`): an apply whose provisioner never returns is stopped at `spec.timeout`,
//! what it made stays in the state, its lock is free and the next commit applies; and with
//! one slot (`--concurrent 1`) an object that hangs holds it no longer than its deadline.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Instant;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use serde_json::json;
use support::operator::{CONFIG, Operator, condition, ready_with};
use support::state::state_ids;

/// A resource made at once, then one whose provisioner sleeps `secs` seconds (a number of
/// each test's own, so that a test can tell its sleep from another's).
fn hangs(secs: u32) -> String {
    format!(
        "resource \"terraform_data\" \"first\" {{\n  input = \"made\"\n}}\nresource \"terraform_data\" \"hangs\" {{\n  depends_on = [terraform_data.first]\n  provisioner \"local-exec\" {{\n    command = \"exec sleep {secs}\"\n  }}\n}}\n"
    )
}

/// Whether a process `sleep secs` runs on this machine (a runner container's included: they
/// share its kernel).
/// Waits (at most three minutes) until [`hangs`]'s provisioner of `secs` runs: the apply is
/// under way then (Ready says applying a little before the apply command starts).
async fn until_sleeping(secs: u32) {
    let began = Instant::now();
    while !sleeping(secs) {
        assert!(began.elapsed().as_secs() < 180, "the provisioner never ran");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

fn sleeping(secs: u32) -> bool {
    let wanted = format!("sleep\0{secs}\0");
    std::fs::read_dir("/proc").unwrap().any(|e| {
        e.ok()
            .and_then(|e| std::fs::read(e.path().join("cmdline")).ok())
            .is_some_and(|c| c == wanted.as_bytes())
    })
}

/// [`hangs`] once fixed: the same resources, nothing that sleeps.
const FIXED: &str = r#"
resource "terraform_data" "first" {
  input = "made"
}
resource "terraform_data" "hangs" {
  depends_on = [terraform_data.first]
}
"#;

fn timed_out(t: &tfops_kube::Terraform) -> Option<String> {
    condition(t, "Ready")
        .filter(|(_, reason, _)| reason == "TerraformTimedOut")
        .map(|(_, _, message)| message)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hung_apply_is_stopped_at_its_timeout_and_keeps_what_it_made() {
    let op = Operator::start().await;
    op.git.commit("infra", &[("main.tf", &hangs(3601))]);
    op.apply(&op.manifest("stuck", json!({"approvePlan": "auto", "timeout": "15s"})));
    let t = op
        .wait_for("stuck", "stopped at its timeout", 180, |t| {
            timed_out(t).is_some()
        })
        .await;
    let message = timed_out(&t).unwrap();
    assert!(
        message.contains("apply ran past its timeout of 15s"),
        "{message}"
    );
    // Interrupted, not killed: Terraform wrote what it made, and freed its lock.
    let made = state_ids(&op, "stuck").await;
    let first = made
        .get("terraform_data.first")
        .cloned()
        .unwrap_or_else(|| panic!("the resource made before the hang is in the state: {made:?}"));
    let leases: Api<Lease> = Api::namespaced(op.admin.clone(), "team-a");
    let lock = leases.get_opt("lock-tfstate-default-stuck").await.unwrap();
    assert!(
        lock.and_then(|l| l.spec?.holder_identity).is_none(),
        "the lock was released"
    );

    // The next commit is applied; what the stopped apply made is kept, not made again.
    op.git.commit("infra", &[("main.tf", FIXED)]);
    op.wait_for("stuck", "applied after the fix", 180, |t| {
        ready_with(t, "TerraformAppliedSucceed")
    })
    .await;
    let last = state_ids(&op, "stuck").await;
    assert_eq!(last.get("terraform_data.first"), Some(&first), "{last:?}");
    assert!(last.contains_key("terraform_data.hangs"), "{last:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_one_slot_an_object_that_hangs_stops_another_no_longer_than_its_deadline() {
    let op = Operator::start_with(&["--concurrent", "1"]).await;
    op.git.commit(
        "infra",
        &[("stuck/main.tf", &hangs(3602)), ("other/main.tf", CONFIG)],
    );
    op.apply(&op.manifest(
        "stuck",
        json!({"path": "stuck", "approvePlan": "auto", "timeout": "20s"}),
    ));
    until_sleeping(3602).await;
    // The one slot is held by the hung apply now.
    let asked = Instant::now();
    op.apply(&op.manifest("other", json!({"path": "other", "approvePlan": "auto"})));
    op.wait_for("other", "applied while the other hangs", 240, |t| {
        ready_with(t, "TerraformAppliedSucceed")
    })
    .await;
    println!(
        "figure: another object applied {:.1} s after it was created, one slot, a hung object's timeout 20 s",
        asked.elapsed().as_secs_f64()
    );
    let t = op.terraforms().get("stuck").await.unwrap();
    assert!(
        timed_out(&t).is_some()
            || condition(&t, "Ready").is_some_and(|(_, r, _)| r == "TerraformApplying"),
        "{:?}",
        condition(&t, "Ready")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_frozen_runner_is_given_up_at_its_deadline_and_the_object_goes_on() {
    let op = Operator::start_in_containers_with(&["--runner-deadline-margin", "10s"]).await;
    op.git.commit("infra", &[("main.tf", &hangs(3603))]);
    op.apply(&op.manifest("frozen", json!({"approvePlan": "auto", "timeout": "20s"})));
    until_sleeping(3603).await;
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(op.admin.clone(), "team-a");
    let pod = pods.get("frozen-tf-runner").await.unwrap();
    let uid = pod.metadata.uid.clone().unwrap();
    // Frozen whole (the cgroup freezer): the runner cannot stop Terraform at its deadline,
    // nor answer the manager.
    let paused = std::process::Command::new("podman")
        .args(["--runtime", "runc", "pause", &format!("tfops-pod-{uid}")])
        .status()
        .unwrap();
    assert!(paused.success());
    let frozen_at = Instant::now();
    op.git.commit("infra", &[("main.tf", FIXED)]);
    op.wait_for(
        "frozen",
        "applied after the frozen runner was given up",
        300,
        |t| ready_with(t, "TerraformAppliedSucceed"),
    )
    .await;
    println!(
        "figure: a frozen runner's object applied again {:.1} s after the freeze (timeout 20 s, margin 10 s)",
        frozen_at.elapsed().as_secs_f64()
    );
    // The frozen Pod is gone (a new one ran the fix).
    let now = pods.get_opt("frozen-tf-runner").await.unwrap();
    assert!(now.is_none_or(|p| p.metadata.uid.as_deref() != Some(uid.as_str())));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_user_stops_an_apply_which_keeps_what_it_made_and_says_who() {
    let op = Operator::start().await;
    op.git.commit("infra", &[("main.tf", &hangs(3604))]);
    op.apply(&op.manifest("halted", json!({"approvePlan": "auto"})));
    until_sleeping(3604).await;
    let key = tfops_core::api::ObjectKey::new("team-a", "halted");
    let actions = tfops_kube::actions::Actions::new(op.admin.clone());
    // What `tfops cancel` does, as the admin.
    actions
        .request(&key, tfops_kube::actions::Request::Cancel)
        .await
        .unwrap();
    let t = op
        .wait_for("halted", "stopped by the user", 120, |t| {
            condition(t, "Ready").is_some_and(|(_, reason, _)| reason == "RunCancelled")
        })
        .await;
    let (_, _, message) = condition(&t, "Ready").unwrap();
    assert!(
        message.contains("stopped by ") && message.contains("infra.argocd.io/cancel="),
        "{message}"
    );
    assert!(
        !message.contains("stopped by tfops cancel"),
        "the user is named: {message}"
    );
    let made = state_ids(&op, "halted").await;
    assert!(made.contains_key("terraform_data.first"), "{made:?}");
    let leases: Api<Lease> = Api::namespaced(op.admin.clone(), "team-a");
    let lock = leases.get_opt("lock-tfstate-default-halted").await.unwrap();
    assert!(lock.and_then(|l| l.spec?.holder_identity).is_none());
    // Not started again (its next run is at spec.interval, an hour): a run now, asked for, is.
    op.git.commit("infra", &[("main.tf", FIXED)]);
    actions
        .request(&key, tfops_kube::actions::Request::Reconcile)
        .await
        .unwrap();
    op.wait_for("halted", "applied when asked", 180, |t| {
        ready_with(t, "TerraformAppliedSucceed")
    })
    .await;
    let last = state_ids(&op, "halted").await;
    assert_eq!(
        last.get("terraform_data.first"),
        made.get("terraform_data.first")
    );
}
