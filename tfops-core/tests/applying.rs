//! What the status says while an approved plan is applied, and when its conditions changed:
//! read as a person reads the object while each runner command runs (the fake runner records
//! the stored status at every command).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::json;
use tfops_core::api::{TerraformStatus, annotations};
use tfops_core::conditions::{self, Condition, ConditionStatus::*, ConditionType};
use tfops_core::health::{HealthStatus, health};
use tfops_core::testing::{FakeOp, FakeWorld};

const PLAN: &str = "plan-main-1111111111";

fn ready_of(status: &TerraformStatus) -> Condition {
    conditions::find(&status.conditions, ConditionType::Ready)
        .cloned()
        .expect("Ready")
}

/// The stored status while the runner ran `op` for the `n`th time (counting from 0).
fn status_during(w: &FakeWorld, op: FakeOp, n: usize) -> TerraformStatus {
    w.lock()
        .calls
        .iter()
        .filter(|c| c.op == op)
        .nth(n)
        .unwrap_or_else(|| panic!("no {op:?} number {n}"))
        .status
        .clone()
}

#[tokio::test]
async fn an_approved_plan_reads_as_applying_from_the_approval_to_the_end_of_its_apply() {
    let w = world();
    let key = w.create(object("vpc", json!({})));
    reconcile(&w, &key).await;
    let waiting = w.object(&key).unwrap();
    assert_eq!(waiting.status.plan.pending, PLAN);
    let h = health(&waiting);
    assert_eq!(h.status, HealthStatus::Suspended);
    // One sentence: the plan, what it does, and the ways to approve it, once.
    assert_eq!(
        h.message.matches("awaits approval").count(),
        1,
        "{}",
        h.message
    );
    assert!(
        h.message
            .starts_with(&format!("plan {PLAN} (+2 ~0 -0) at main@sha1:"))
    );
    assert!(
        h.message.contains("Argo CD's approve action"),
        "{}",
        h.message
    );
    assert_eq!(waiting.status.applying(), None);

    w.annotate(
        &key,
        annotations::APPROVE,
        &format!("{PLAN}@2026-11-29T12:05:00Z"),
    );
    w.annotate(&key, annotations::RECONCILE, "r1");
    reconcile(&w, &key).await;
    assert_eq!(w.applies(&key), 1);

    // While the approved plan is made again to check it, the approval is already taken up.
    let replanning = status_during(&w, FakeOp::Plan, 1);
    let r = ready_of(&replanning);
    assert_eq!(
        (r.status, r.reason.as_str()),
        (Unknown, "TerraformApplying")
    );
    assert!(
        r.message.starts_with(&format!(
            "plan {PLAN} was approved with the infra.argocd.io/approve annotation at 2026-11-29T12:05:00Z: making it again"
        )),
        "{}",
        r.message
    );
    assert_eq!(replanning.applying(), Some(PLAN));

    // During the apply: applying, by whom, and working (Argo CD: Progressing, not Suspended).
    let during = status_during(&w, FakeOp::Apply, 0);
    let r = ready_of(&during);
    assert_eq!(
        (r.status, r.reason.as_str()),
        (Unknown, "TerraformApplying")
    );
    assert!(
        r.message
            .starts_with(&format!("applying plan {PLAN} (+2 ~0 -0) at main@sha1:")),
        "{}",
        r.message
    );
    assert!(
        r.message.ends_with(
            "approved with the infra.argocd.io/approve annotation at 2026-11-29T12:05:00Z"
        ),
        "{}",
        r.message
    );
    let reconciling = conditions::find(&during.conditions, ConditionType::Reconciling).unwrap();
    assert_eq!(reconciling.status, True);
    assert!(
        reconciling
            .message
            .starts_with(&format!("applying plan {PLAN}"))
    );
    assert_eq!(during.applying(), Some(PLAN));
    let mut seen = waiting.clone();
    seen.status = during.clone();
    let h = health(&seen);
    assert_eq!(
        (h.status, h.message.as_str()),
        (HealthStatus::Progressing, r.message.as_str())
    );

    // After: each condition changed when the step that changed it ended, not at the run's
    // start (the fake clock moves a second at each reading).
    let done = w.object(&key).unwrap().status;
    let started = during
        .active_run
        .as_ref()
        .expect("recorded under way")
        .started_at;
    let ready = ready_of(&done);
    assert_eq!(
        (ready.status, ready.reason.as_str()),
        (True, "TerraformAppliedSucceed")
    );
    let apply = conditions::find(&done.conditions, ConditionType::Apply).unwrap();
    assert!(
        apply.last_transition_time > started,
        "{apply:?} vs {started}"
    );
    assert!(ready.last_transition_time >= apply.last_transition_time);
    assert_eq!(Some(ready.last_transition_time), done.last_run_at);
    let plan = conditions::find(&done.conditions, ConditionType::Plan).unwrap();
    assert!(plan.last_transition_time < started);
    assert_eq!(done.applying(), None);
    assert!(conditions::find(&done.conditions, ConditionType::Reconciling).is_none());
}

#[tokio::test]
async fn an_automatic_apply_says_what_let_it_apply() {
    let w = world();
    let key = w.create(object("vpc", json!({"approvePlan": "auto"})));
    reconcile(&w, &key).await;
    let during = status_during(&w, FakeOp::Apply, 0);
    let r = ready_of(&during);
    assert_eq!(r.reason, "TerraformApplying");
    assert!(
        r.message.ends_with(", approved by approvePlan: auto"),
        "{}",
        r.message
    );

    let w = world();
    let key = w.create(object("vpc", json!({"force": true})));
    reconcile(&w, &key).await;
    let r = ready_of(&status_during(&w, FakeOp::Apply, 0));
    assert!(
        r.message.ends_with(", applied because spec.force is set"),
        "{}",
        r.message
    );
}

/// Approving again while the approved plan is applied (the actions refuse it; an edit by hand
/// still can) approves nothing: the value was given before the next plan existed.
#[tokio::test]
async fn an_approval_given_during_the_apply_applies_no_later_plan() {
    let w = world();
    let key = w.create(object("vpc", json!({"vars": [{"name": "n", "value": 1}]})));
    reconcile(&w, &key).await;
    w.annotate(&key, annotations::APPROVE, &format!("{PLAN}@t1"));
    w.annotate(&key, annotations::RECONCILE, "r1");
    reconcile(&w, &key).await;
    assert_eq!(w.applies(&key), 1);

    // Written while that apply ran, read by the next run.
    w.annotate(&key, annotations::APPROVE, &format!("{PLAN}@t2"));
    w.edit(&key, |s| s.vars[0].value = Some(json!(2)));
    reconcile(&w, &key).await;
    assert_eq!(
        w.applies(&key),
        1,
        "the approval given during the apply applied a new plan"
    );
    let (status, reason, message) = ready(&w, &key);
    assert_eq!(
        (status, reason.as_str()),
        (Unknown, "TerraformPlannedWithChanges")
    );
    assert!(message.contains("does not count"), "{message}");
    assert_eq!(w.object(&key).unwrap().status.applying(), None);
}

/// A plan approved but made again differently is not applied, and Ready says it awaits
/// approval again (no longer applying); it stayed Unknown, so its transition time stays.
#[tokio::test]
async fn an_approved_plan_that_changed_goes_back_to_awaiting_approval() {
    let w = world();
    w.set_secret("team-a", "db", &[("password", "one")]);
    let key = w.create(object(
        "db",
        json!({"varsFrom": [{"kind": "Secret", "name": "db"}]}),
    ));
    reconcile(&w, &key).await;
    let before = ready_of(&w.object(&key).unwrap().status);
    w.annotate(&key, annotations::APPROVE, &format!("{PLAN}@t1"));
    w.annotate(&key, annotations::RECONCILE, "r1");
    w.set_secret("team-a", "db", &[("password", "two")]);
    reconcile(&w, &key).await;
    assert_eq!(w.applies(&key), 0);
    let after = w.object(&key).unwrap().status;
    let r = ready_of(&after);
    assert_eq!(
        (r.status, r.reason.as_str()),
        (Unknown, "TerraformPlannedWithChanges")
    );
    assert!(
        r.message.contains("changed since it was approved"),
        "{}",
        r.message
    );
    assert_eq!(
        r.last_transition_time, before.last_transition_time,
        "still Unknown"
    );
    assert_eq!(after.applying(), None);
    assert_eq!(
        health(&w.object(&key).unwrap()).status,
        HealthStatus::Suspended
    );
}

/// A driver that dies after taking an approval up, before the apply is recorded (here: its next
/// status write fails), leaves `Ready` saying applying; the next reconcile goes on at once,
/// without a new request, and applies the approved plan once.
#[tokio::test]
async fn an_approval_taken_up_by_a_driver_that_died_is_carried_on_at_once() {
    let w = world();
    let key = w.create(object("vpc", json!({})));
    reconcile(&w, &key).await;
    w.annotate(&key, annotations::APPROVE, &format!("{PLAN}@t1"));
    w.annotate(&key, annotations::RECONCILE, "r1");
    w.fail_after(
        FakeOp::WriteStatus,
        1,
        tfops_core::ports::PortError::Unavailable("the driver was killed".into()),
    );
    assert!(w.reconcile(&key).await.is_err(), "the driver died");
    assert_eq!(w.applies(&key), 0);
    let left = w.object(&key).unwrap().status;
    assert_eq!(ready_of(&left).reason, "TerraformApplying");
    assert!(left.active_run.is_none(), "no apply recorded");

    let report = reconcile(&w, &key).await;
    assert!(
        !report.records.is_empty(),
        "nothing done: the approval would wait for the interval"
    );
    assert_eq!(w.applies(&key), 1);
    assert_eq!(ready(&w, &key).1, "TerraformAppliedSucceed");
    // And nothing more after that.
    reconcile(&w, &key).await;
    assert_eq!(w.applies(&key), 1);
}

/// An approval given while no apply window is open does not read as applying: the run plans
/// again and waits for the window, saying so, without flipping to "applying" first.
#[tokio::test]
async fn an_approval_outside_the_apply_window_waits_without_saying_applying() {
    let w = world();
    // Weekdays 22:00 to 02:00 UTC; the fakes' clock starts on Sunday at noon.
    let nightly = json!([{"schedule": "0 22 * * 1-5", "duration": "4h"}]);
    let key = w.create(object("vpc", json!({"applyWindows": nightly})));
    reconcile(&w, &key).await;
    w.annotate(&key, annotations::APPROVE, &format!("{PLAN}@t1"));
    w.annotate(&key, annotations::RECONCILE, "r1");
    reconcile(&w, &key).await;
    assert_eq!(w.applies(&key), 0);
    let replanning = status_during(&w, FakeOp::Plan, 1);
    assert_ne!(ready_of(&replanning).reason, "TerraformApplying");
    assert_eq!(ready(&w, &key).1, "ApplyWindowClosed");
}

#[tokio::test]
async fn an_apply_stopped_at_its_timeout_fails_in_its_reason_and_the_rest_needs_a_new_approval() {
    let w = world();
    let key = w.create(object("vpc", json!({})));
    reconcile(&w, &key).await;
    w.edit(&key, |s| s.approve_plan = PLAN.into());
    w.time_out_next_apply();
    reconcile(&w, &key).await;
    let (status, reason, message) = ready(&w, &key);
    assert_eq!((status, reason.as_str()), (False, "TerraformTimedOut"));
    assert!(message.contains("ran past its timeout"), "{message}");
    let infra = w.lock().infra[&key].clone();
    assert_eq!(
        infra.state.len(),
        1,
        "one of the two changes made: {infra:?}"
    );

    // Retried: a new plan of the rest, which the old approval does not cover.
    w.advance(std::time::Duration::from_secs(60));
    reconcile(&w, &key).await;
    // (The same revision gives the same plan id; the approval is bound to the content the
    // person saw, which was two changes, not this one.)
    let (_, _, message) = ready(&w, &key);
    assert!(
        message.starts_with(&format!(
            "plan {PLAN} changed since it was approved (it would now do +1 ~0 -0): nothing was applied"
        )),
        "{message}"
    );
    assert_eq!(
        w.lock().infra[&key].state.len(),
        1,
        "nothing applied unapproved"
    );
    let applies = w
        .lock()
        .calls
        .iter()
        .filter(|c| c.op == FakeOp::Apply)
        .count();
    assert_eq!(applies, 1);
}

#[tokio::test]
async fn an_apply_a_user_stops_says_who_and_is_not_retried_before_the_interval() {
    let w = world();
    let key = w.create(object("vpc", json!({"approvePlan": "auto"})));
    w.stop_next_apply("alice (annotation infra.argocd.io/cancel=alice@1)");
    let report = reconcile(&w, &key).await;
    let (status, reason, message) = ready(&w, &key);
    assert_eq!((status, reason.as_str()), (False, "RunCancelled"));
    assert!(message.contains("stopped by alice"), "{message}");
    // Not started again at once, as a failure's backoff would.
    let interval = std::time::Duration::from_secs(600);
    assert_eq!(report.requeue_after, Some(interval), "{report:?}");
    assert_eq!(w.lock().infra[&key].state.len(), 1, "what it made is kept");
}
