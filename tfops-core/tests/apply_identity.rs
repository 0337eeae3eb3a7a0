//! Apply as a separate identity (`spec.runner.apply`): what runs in which runner, told as
//! scenarios a user goes through. The property test (`properties.rs`) holds the same rules over
//! random histories; these pin the messages and the status a user reads.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::json;
use tfops_core::api::{ObjectKey, RunnerRole, annotations};
use tfops_core::conditions::ConditionStatus::*;
use tfops_core::testing::{FakeOp, FakeWorld};

const PLAN: &str = "plan-main-1111111111";

fn split(name: &str, spec: serde_json::Value) -> tfops_core::api::TerraformObject {
    let mut o = object(name, spec);
    o.spec.runner = serde_json::from_value(json!({
        "serviceAccountName": "tf-plan",
        "apply": {"serviceAccountName": "tf-apply"}
    }))
    .unwrap();
    o
}

/// The role of every command `op` ran with for `key`.
fn roles_of(w: &FakeWorld, key: &ObjectKey, op: FakeOp) -> Vec<RunnerRole> {
    w.lock()
        .calls
        .iter()
        .filter(|c| &c.object == key && c.op == op)
        .map(|c| c.role)
        .collect()
}

fn apply_sessions(w: &FakeWorld) -> usize {
    w.lock()
        .session_roles
        .iter()
        .filter(|r| **r == RunnerRole::Apply)
        .count()
}

#[tokio::test]
async fn a_pending_plan_and_drift_checks_never_start_the_apply_runner() {
    let w = world();
    let key = w.create(split("vpc", json!({})));
    reconcile(&w, &key).await;
    let o = w.object(&key).unwrap();
    assert_eq!(o.status.plan.pending, PLAN);
    assert_eq!(o.status.last_planned_by.as_deref(), Some("fake:plan"));
    assert_eq!(o.status.last_applied_by, None);
    assert_eq!(apply_sessions(&w), 0, "nobody approved anything yet");

    // As `tfops approve` does: the approval and a run request.
    w.annotate(&key, annotations::APPROVE, PLAN);
    w.annotate(&key, annotations::RECONCILE, "approved");
    reconcile(&w, &key).await;
    assert_eq!(w.applies(&key), 1);
    assert_eq!(ready(&w, &key).1, "TerraformAppliedSucceed");
    assert_eq!(roles_of(&w, &key, FakeOp::Apply), [RunnerRole::Apply]);
    assert_eq!(apply_sessions(&w), 1);
    let o = w.object(&key).unwrap();
    assert_eq!(o.status.last_applied_by.as_deref(), Some("fake:apply"));
    assert_eq!(o.status.last_planned_by.as_deref(), Some("fake:plan"));

    // A drift check with nothing drifted, and one that finds drift (manual approval: it only
    // plans the remediation), both stay in the plan runner.
    for round in ["r1", "r2"] {
        if round == "r2" {
            w.drift(&key, "terraform_data.a", "9");
        }
        w.annotate(&key, annotations::RECONCILE, round);
        reconcile(&w, &key).await;
    }
    assert_eq!(w.applies(&key), 1);
    assert_eq!(
        apply_sessions(&w),
        1,
        "a drift check started the apply runner"
    );
    assert_eq!(roles_of(&w, &key, FakeOp::Apply), [RunnerRole::Apply]);
}

#[tokio::test]
async fn a_plan_that_changed_at_the_hand_over_is_pending_again_and_not_applied() {
    let w = world();
    let key = w.create(split("db", json!({"approvePlan": "auto"})));
    w.change_before_next_apply_runner();
    reconcile(&w, &key).await;
    assert_eq!(w.applies(&key), 0, "a plan nobody accepted was applied");
    let (status, reason, message) = ready(&w, &key);
    assert_eq!(
        (status, reason.as_str()),
        (Unknown, "TerraformPlannedWithChanges")
    );
    assert!(
        message.contains("changed before it was applied"),
        "{message}"
    );
    assert!(
        message.contains("fake:apply"),
        "names who planned: {message}"
    );
    assert!(
        message.contains(
            "the next run plans and applies it (after interval 10m, or when a run is requested)"
        ),
        "says when it goes on: {message}"
    );
    assert_eq!(w.object(&key).unwrap().status.last_applied_by, None);

    // With auto, the next run plans again, accepts that plan and applies it.
    w.annotate(&key, annotations::RECONCILE, "again");
    reconcile(&w, &key).await;
    assert_eq!(w.applies(&key), 1);
    assert_eq!(ready(&w, &key).1, "TerraformAppliedSucceed");
    assert_eq!(roles_of(&w, &key, FakeOp::Apply), [RunnerRole::Apply]);
}

#[tokio::test]
async fn deletion_destroys_through_the_apply_runner() {
    let w = world();
    let key = w.create(split(
        "cache",
        json!({"approvePlan": "auto", "destroyResourcesOnDeletion": true}),
    ));
    reconcile(&w, &key).await;
    assert_eq!(w.applies(&key), 1);
    w.delete(&key);
    reconcile(&w, &key).await;
    assert!(w.lock().infra[&key].real.is_empty(), "destroyed");
    assert!(w.object(&key).is_none(), "released once destroyed");
    assert_eq!(
        roles_of(&w, &key, FakeOp::Apply),
        [RunnerRole::Apply, RunnerRole::Apply],
        "the destroy is applied by the apply runner too"
    );
}

#[tokio::test]
async fn a_destroy_plan_that_changed_at_the_hand_over_fails_the_deletion_and_keeps_the_object() {
    let w = world();
    let key = w.create(split(
        "queue",
        json!({"approvePlan": "auto", "destroyResourcesOnDeletion": true}),
    ));
    reconcile(&w, &key).await;
    w.delete(&key);
    w.change_before_next_apply_runner();
    reconcile(&w, &key).await;
    assert!(w.object(&key).is_some(), "the finalizer stays");
    assert_eq!(w.applies(&key), 1, "only the first apply");
    let (status, reason, message) = ready(&w, &key);
    assert_eq!((status, reason.as_str()), (False, "TFExecDestroyFailed"));
    assert!(
        message.contains("changed before it was applied"),
        "{message}"
    );

    // The retry destroys what is there now.
    w.annotate(&key, annotations::RECONCILE, "retry");
    reconcile(&w, &key).await;
    assert!(w.object(&key).is_none(), "released once destroyed");
    assert!(w.lock().infra[&key].real.is_empty());
}

#[tokio::test]
async fn without_the_split_one_runner_plans_and_applies() {
    let w = world();
    let key = w.create(object("net", json!({"approvePlan": "auto"})));
    reconcile(&w, &key).await;
    assert_eq!(w.applies(&key), 1);
    assert_eq!(apply_sessions(&w), 0);
    assert_eq!(
        w.lock().sessions,
        1,
        "one runner session for plan and apply"
    );
    let o = w.object(&key).unwrap();
    assert_eq!(o.status.last_planned_by.as_deref(), Some("fake:plan"));
    assert_eq!(o.status.last_applied_by.as_deref(), Some("fake:plan"));
}

#[tokio::test]
async fn spec_destroy_is_planned_by_the_plan_runner_and_applied_by_the_apply_runner() {
    let w = world();
    let key = w.create(split("vpc", json!({"approvePlan": "auto"})));
    reconcile(&w, &key).await;
    assert_eq!(w.applies(&key), 1);

    // With manual approval from here on, the destroy plan waits in the plan runner.
    w.edit(&key, |s| {
        s.destroy = true;
        s.approve_plan = String::new();
    });
    reconcile(&w, &key).await;
    let pending = w.object(&key).unwrap().status.plan.pending;
    assert!(!pending.is_empty(), "the destroy plan awaits approval");
    assert_eq!(apply_sessions(&w), 1, "only the first apply's");
    assert_eq!(w.lock().infra[&key].real.len(), 2, "nothing destroyed yet");

    w.annotate(&key, annotations::APPROVE, &pending);
    w.annotate(&key, annotations::RECONCILE, "approved");
    reconcile(&w, &key).await;
    assert_eq!(ready(&w, &key).1, "TerraformDestroySucceed");
    assert!(w.lock().infra[&key].real.is_empty());
    assert_eq!(apply_sessions(&w), 2);
    assert_eq!(
        roles_of(&w, &key, FakeOp::Apply),
        [RunnerRole::Apply, RunnerRole::Apply]
    );
    let o = w.object(&key).unwrap();
    assert_eq!(o.status.last_applied_by.as_deref(), Some("fake:apply"));
}

#[tokio::test]
async fn plan_only_never_starts_the_apply_runner_even_with_the_plan_approved_in_the_spec() {
    let w = world();
    let key = w.create(split("vpc", json!({"planOnly": true, "approvePlan": PLAN})));
    reconcile(&w, &key).await;
    w.annotate(&key, annotations::RECONCILE, "again");
    reconcile(&w, &key).await;
    assert_eq!(w.applies(&key), 0);
    assert_eq!(apply_sessions(&w), 0);
    assert_eq!(
        w.object(&key).unwrap().status.last_planned_by.as_deref(),
        Some("fake:plan")
    );
}
