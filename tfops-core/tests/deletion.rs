//! Deletion with `destroyResourcesOnDeletion`: through a destroy plan that the plan policies
//! check, and never skipped by guessing that nothing was applied.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::json;
use tfops_core::api::annotations;
use tfops_core::conditions::ConditionStatus::*;
use tfops_core::testing::FakeOp;

fn destroying(name: &str) -> tfops_core::api::TerraformObject {
    object(
        name,
        json!({"approvePlan": "auto", "destroyResourcesOnDeletion": true}),
    )
}

#[tokio::test]
async fn deletion_destroys_by_applying_a_stored_destroy_plan() {
    let w = world();
    let key = w.create(destroying("vpc"));
    reconcile(&w, &key).await;
    assert_eq!(w.applies(&key), 1);
    w.delete(&key);
    let calls_before = w.lock().calls.len();
    reconcile(&w, &key).await;
    let ops: Vec<FakeOp> = w.lock().calls[calls_before..]
        .iter()
        .map(|c| c.op)
        .collect();
    let plan = ops.iter().position(|o| *o == FakeOp::Plan).expect("a plan");
    let apply = ops
        .iter()
        .position(|o| *o == FakeOp::Apply)
        .expect("an apply");
    assert!(plan < apply, "{ops:?}");
    assert!(w.lock().infra[&key].real.is_empty());
    assert!(w.object(&key).is_none(), "released once destroyed");
    assert!(
        w.lock().plans.is_empty(),
        "the destroy plan is removed with the object"
    );
}

#[tokio::test]
async fn a_policy_that_denies_the_destroy_blocks_deletion_and_says_how_to_proceed() {
    let w = world();
    let key = w.create(destroying("db"));
    reconcile(&w, &key).await;
    w.lock().policies.push(
        serde_json::from_value(json!({
            "metadata": {"name": "keep-data", "namespace": "team-a"},
            "spec": {"rules": [{"name": "no-deletes", "expression": "size(deletes) == 0",
                                "message": "nothing may be deleted"}]}
        }))
        .unwrap(),
    );
    w.delete(&key);
    reconcile(&w, &key).await;
    assert!(w.object(&key).is_some(), "deletion is blocked");
    assert_eq!(w.lock().infra[&key].real.len(), 2, "nothing destroyed");
    let (status, reason, message) = ready(&w, &key);
    assert_eq!((status, reason.as_str()), (False, "ValidationFailed"));
    assert!(message.contains("keep-data/no-deletes"), "{message}");
    assert!(
        message.contains("remove destroyResourcesOnDeletion"),
        "{message}"
    );

    // Keeping the resources is the way out that needs no policy change.
    w.edit(&key, |s| s.destroy_resources_on_deletion = false);
    w.annotate(&key, annotations::RECONCILE, "again");
    reconcile(&w, &key).await;
    assert!(w.object(&key).is_none());
    assert_eq!(
        w.lock().infra[&key].real.len(),
        2,
        "resources kept as asked"
    );
}

/// The status written before the first apply is all that is left when the controller dies
/// during it: no `Apply` condition, no applied revision. Deletion must still destroy.
#[tokio::test]
async fn a_crash_during_the_first_apply_still_destroys_on_deletion() {
    let w = world();
    let key = w.create(destroying("vpc"));
    reconcile(&w, &key).await;
    let started = w.object(&key).unwrap().status.last_apply_started_at;
    assert!(started.is_some(), "recorded before the apply");
    // What the status looked like when the apply began (the resources already exist).
    {
        let mut l = w.lock();
        let o = l.objects.get_mut(&key).unwrap();
        o.status.last_applied_revision = None;
        o.status
            .conditions
            .retain(|c| c.type_ != "Apply" && c.type_ != "Ready");
    }
    w.delete(&key);
    reconcile(&w, &key).await;
    assert!(w.object(&key).is_none());
    assert!(
        w.lock().infra[&key].real.is_empty(),
        "the resources of the interrupted apply were destroyed"
    );
}

/// A driver that records another outcome for the destroy plan than a plan (a bug in an
/// embedder's driver) ends the run with an internal error; it is never read as "nothing to
/// destroy", which would release the object with its resources still there.
#[tokio::test]
async fn a_destroy_plan_recorded_as_something_else_never_releases_the_object() {
    use tfops_core::reconcile::{Outcome, Progress, Snapshot, Step, StepKind, decide};
    let w = world();
    let key = w.create(destroying("vpc"));
    reconcile(&w, &key).await;
    w.delete(&key);
    let object = w.object(&key).unwrap();
    let report = reconcile(&w, &key).await;
    let plan = report
        .records
        .iter()
        .position(|r| r.step == StepKind::Plan)
        .expect("a destroy plan");
    let mut records = report.records[..=plan].to_vec();
    records[plan].result = Ok(Outcome::DriftChecked { drifted: vec![] });
    let now = w.lock().now;
    let decision = decide(&Snapshot {
        object,
        dependencies: vec![],
        dependants: vec![],
        progress: Progress { records },
        now,
        started_at: now,
        queue: Default::default(),
        source_revision: None,
        pull_approvals: Vec::new(),
    });
    assert!(
        !matches!(decision.step, Step::RemoveFinalizer),
        "released on a bad record"
    );
    let ready = tfops_core::conditions::find(
        &decision.status.conditions,
        tfops_core::conditions::ConditionType::Ready,
    )
    .unwrap();
    assert!(
        ready
            .message
            .contains("internal error: unexpected outcome recorded for Plan"),
        "{}",
        ready.message
    );
}
