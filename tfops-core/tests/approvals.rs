//! Approvals: what a human approved is what is applied, and an approval counts once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::json;
use tfops_core::api::annotations;
use tfops_core::conditions::ConditionStatus::*;

const PLAN: &str = "plan-main-1111111111";

/// A reported approval bug, as reproduced with `tfops local`: approve and apply; edit a variable (same
/// revision, so the same plan id); then a run requested without a new approval. The approve
/// annotation left from the first approval must not apply the second plan.
#[tokio::test]
async fn regression_leftover_annotation_approval_never_applies_a_later_plan() {
    let w = world();
    let key = w.create(object(
        "hello",
        json!({"vars": [{"name": "n", "value": 1}]}),
    ));
    w.annotate(&key, annotations::RECONCILE, "r1");
    reconcile(&w, &key).await;
    assert_eq!(w.object(&key).unwrap().status.plan.pending, PLAN);

    w.annotate(&key, annotations::APPROVE, PLAN);
    w.annotate(&key, annotations::RECONCILE, "r2");
    reconcile(&w, &key).await;
    assert_eq!(w.applies(&key), 1);
    assert_eq!(ready(&w, &key).1, "TerraformAppliedSucceed");

    w.edit(&key, |s| s.vars[0].value = Some(json!(2)));
    w.annotate(&key, annotations::RECONCILE, "r3");
    reconcile(&w, &key).await;
    assert_eq!(w.object(&key).unwrap().status.plan.pending, PLAN);

    w.annotate(&key, annotations::RECONCILE, "r4");
    reconcile(&w, &key).await;
    assert_eq!(
        w.applies(&key),
        1,
        "the leftover approval applied a new plan"
    );
    let (status, reason, message) = ready(&w, &key);
    assert_eq!(
        (status, reason.as_str()),
        (Unknown, "TerraformPlannedWithChanges")
    );
    assert!(message.contains("does not count"), "{message}");
    assert!(message.contains(&format!("{PLAN}@")), "says how: {message}");

    // Re-approving the same id after seeing the new plan takes a new value.
    w.annotate(&key, annotations::APPROVE, &format!("{PLAN}@second"));
    w.annotate(&key, annotations::RECONCILE, "r5");
    reconcile(&w, &key).await;
    assert_eq!(w.applies(&key), 2);
    assert_eq!(
        w.lock().infra[&key].real["terraform_data.var_n"],
        "2",
        "the second plan is what was applied"
    );
}

/// The plan re-made before applying is applied only when it does what was approved: a Secret
/// rotated after the approval changes the plan under the same id, and nothing is applied.
#[tokio::test]
async fn an_approval_applies_only_the_changes_that_were_approved() {
    let w = world();
    w.set_secret("team-a", "db", &[("password", "one")]);
    let key = w.create(object(
        "db",
        json!({"varsFrom": [{"kind": "Secret", "name": "db"}]}),
    ));
    reconcile(&w, &key).await;
    let first = w.object(&key).unwrap().status.plan;
    assert_eq!(first.pending, PLAN);
    assert_eq!(first.pending_digest.len(), 64);

    w.annotate(&key, annotations::APPROVE, &format!("{PLAN}@t1"));
    w.annotate(&key, annotations::RECONCILE, "r1");
    w.set_secret("team-a", "db", &[("password", "two")]);
    reconcile(&w, &key).await;
    assert_eq!(w.applies(&key), 0, "applied what nobody approved");
    let second = w.object(&key).unwrap().status.plan;
    assert_eq!(second.pending, PLAN, "same revision, same id");
    assert_ne!(second.pending_digest, first.pending_digest);
    let (status, _, message) = ready(&w, &key);
    assert_eq!(status, Unknown);
    assert!(
        message.contains("changed since it was approved"),
        "{message}"
    );

    // The same approval again does nothing; a new one, given after seeing the new plan, applies.
    w.annotate(&key, annotations::RECONCILE, "r2");
    reconcile(&w, &key).await;
    assert_eq!(w.applies(&key), 0);
    w.annotate(&key, annotations::APPROVE, &format!("{PLAN}@t2"));
    w.annotate(&key, annotations::RECONCILE, "r3");
    reconcile(&w, &key).await;
    assert_eq!(w.applies(&key), 1);
    let done = w.object(&key).unwrap().status.plan;
    assert_eq!(done.last_applied_digest, second.pending_digest);
    assert!(done.pending.is_empty() && done.pending_digest.is_empty());
}

/// `spec.approvePlan` left in Git approves nothing later: not the next plan of the same
/// revision, and not after unrelated edits of the spec.
#[tokio::test]
async fn a_spec_approval_left_in_place_survives_no_other_edit() {
    let w = world();
    let key = w.create(object("vpc", json!({"vars": [{"name": "n", "value": 1}]})));
    reconcile(&w, &key).await;
    w.edit(&key, |s| s.approve_plan = PLAN.into());
    reconcile(&w, &key).await;
    assert_eq!(w.applies(&key), 1);

    w.edit(&key, |s| s.vars[0].value = Some(json!(2)));
    reconcile(&w, &key).await;
    // Edits that leave the plan as it is (here the interval) are not approvals.
    w.edit(&key, |s| s.interval = "11m".into());
    reconcile(&w, &key).await;
    w.edit(&key, |s| s.retry_interval = "20s".into());
    reconcile(&w, &key).await;
    assert_eq!(w.applies(&key), 1);
    assert_eq!(w.object(&key).unwrap().status.plan.pending, PLAN);

    // Withdrawn and given again after the plan was seen: that is an approval.
    w.edit(&key, |s| s.approve_plan.clear());
    reconcile(&w, &key).await;
    w.edit(&key, |s| s.approve_plan = PLAN.into());
    reconcile(&w, &key).await;
    assert_eq!(w.applies(&key), 2);
}
