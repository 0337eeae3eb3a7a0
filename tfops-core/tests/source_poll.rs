//! Source polling: a revision the caller's poller saw starts a run at once, which looks at the
//! source only and starts no runner Pod when the revision changed nothing of the object's.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use serde_json::json;
use tfops_core::api::ObjectKey;
use tfops_core::conditions::ConditionType;
use tfops_core::reconcile::{Place, RunReport, RunnerQueue, Slot, StepKind};
use tfops_core::testing::{FakeOp, FakeWorld};

const SHA3: &str = "3333333333cccccccccc3333333333cccccccccc";
const RESOURCES: &[(&str, &str)] = &[("terraform_data.a", "1"), ("terraform_data.b", "1")];

/// A reconcile as the operator makes it when its poller saw the source's current revision.
async fn polled(w: &FakeWorld, key: &ObjectKey) -> RunReport {
    polled_in(w, key, RunnerQueue::default()).await
}

/// [`polled`], the object standing in its namespace's queue for runner Pods as `queue` says.
async fn polled_in(w: &FakeWorld, key: &ObjectKey, queue: RunnerQueue) -> RunReport {
    let seen = w.polled_revision(&w.object(key).unwrap());
    w.reconcile_polled(key, queue, seen).await.unwrap().unwrap()
}

fn sessions(w: &FakeWorld) -> usize {
    w.lock().sessions
}

fn steps(report: &RunReport) -> Vec<StepKind> {
    report.records.iter().map(|r| r.step).collect()
}

fn prod(w: &FakeWorld) -> ObjectKey {
    w.create(object(
        "prod",
        json!({"approvePlan": "auto", "path": "envs/prod"}),
    ))
}

#[tokio::test]
async fn a_polled_revision_elsewhere_starts_no_runner_and_keeps_the_drift_check_on_time() {
    let w = world();
    let key = prod(&w);
    reconcile(&w, &key).await;
    let first = w.object(&key).unwrap().status;
    let started = sessions(&w);

    // Nothing new: not due before the interval.
    w.advance(Duration::from_secs(60));
    let report = polled(&w, &key).await;
    assert!(report.records.is_empty(), "{:?}", steps(&report));

    // A commit to another directory, seen by the poller 2 minutes after the last run.
    w.publish(REPO, "main", SHA2, RESOURCES);
    w.changed_between(SHA1, SHA2, &["envs/staging/main.tf"]);
    w.advance(Duration::from_secs(60));
    let before = w.object(&key).unwrap();
    let report = polled(&w, &key).await;
    assert_eq!(
        steps(&report),
        vec![StepKind::ResolveSource, StepKind::CompareSource]
    );
    assert_eq!(sessions(&w), started, "no runner for a foreign change");
    let st = w.object(&key).unwrap().status;
    let sha2 = format!("main@sha1:{SHA2}");
    assert_eq!(st.last_attempted_revision.as_deref(), Some(sha2.as_str()));
    assert_eq!(st.last_applied_revision.as_deref(), Some(sha2.as_str()));
    assert_eq!(
        st.last_run_at, first.last_run_at,
        "the interval's clock runs on"
    );
    assert!(condition(&w, &key, ConditionType::Reconciling).is_none());
    assert_eq!(ready(&w, &key).1, "TerraformAppliedSucceed");
    // Back when the interval from the last run elapses (less the look's own steps).
    let back = report.requeue_after.unwrap();
    assert!(
        back <= Duration::from_secs(480) && back > Duration::from_secs(460),
        "{back:?}"
    );
    let history = tfops_core::history::entry(&before, &report, before.status.last_run_at.unwrap());
    assert!(history.is_none(), "a look is no run in the history");
    assert!(tfops_core::history::looked_only(&report));

    // The same revision again: nothing due.
    let report = polled(&w, &key).await;
    assert!(report.records.is_empty(), "{:?}", steps(&report));

    // The interval elapses: the drift check at the new revision, with its runner.
    w.advance(Duration::from_secs(481));
    polled(&w, &key).await;
    assert_eq!(sessions(&w), started + 1);
    assert_eq!(ready(&w, &key).1, "NoDrift");
    assert_eq!(w.calls_of(&key, FakeOp::Plan), 1);
}

#[tokio::test]
async fn a_polled_revision_under_the_path_plans_and_applies_at_once() {
    let w = world();
    let key = prod(&w);
    reconcile(&w, &key).await;
    w.publish(
        REPO,
        "main",
        SHA2,
        &[("terraform_data.a", "2"), ("terraform_data.b", "1")],
    );
    w.changed_between(SHA1, SHA2, &["envs/prod/main.tf"]);
    w.advance(Duration::from_secs(30));
    let before = w.object(&key).unwrap();
    let report = polled(&w, &key).await;
    assert!(
        steps(&report).contains(&StepKind::Apply),
        "{:?}",
        steps(&report)
    );
    assert_eq!(w.applies(&key), 2);
    let st = w.object(&key).unwrap().status;
    assert_eq!(
        st.last_applied_revision.as_deref(),
        Some(format!("main@sha1:{SHA2}").as_str())
    );
    assert_eq!(ready(&w, &key).1, "TerraformAppliedSucceed");
    let entry = tfops_core::history::entry(&before, &report, st.last_run_at.unwrap());
    assert!(
        entry.is_some_and(|e| e.applied),
        "the run is in the history"
    );
}

#[tokio::test]
async fn a_pending_plan_keeps_its_id_through_a_foreign_commit_and_is_replaced_by_its_own() {
    let w = world();
    let key = w.create(object("prod", json!({"path": "envs/prod"})));
    reconcile(&w, &key).await;
    let pending = w.object(&key).unwrap().status.plan.pending;
    assert!(!pending.is_empty());
    let started = sessions(&w);

    w.publish(REPO, "main", SHA2, RESOURCES);
    w.changed_between(SHA1, SHA2, &["envs/staging/main.tf"]);
    w.advance(Duration::from_secs(30));
    polled(&w, &key).await;
    let st = w.object(&key).unwrap().status;
    assert_eq!(st.plan.pending, pending);
    assert_eq!(sessions(&w), started);
    assert_eq!(ready(&w, &key).1, "TerraformPlannedWithChanges");

    w.publish(REPO, "main", SHA3, &[("terraform_data.a", "9")]);
    w.changed_between(SHA1, SHA3, &["envs/prod/main.tf"]);
    w.advance(Duration::from_secs(30));
    polled(&w, &key).await;
    let st = w.object(&key).unwrap().status;
    assert_ne!(st.plan.pending, pending, "a new plan for its own change");
    assert_eq!(
        st.last_planned_revision.as_deref(),
        Some(format!("main@sha1:{SHA3}").as_str())
    );
    assert_eq!(w.applies(&key), 0, "never applied without approval");
}

#[tokio::test]
async fn a_failing_object_keeps_its_backoff_and_the_root_path_plans_every_polled_revision() {
    let w = world();
    let key = prod(&w);
    w.fail_next(
        FakeOp::Plan,
        tfops_core::ports::PortError::Unavailable("provider down".into()),
    );
    reconcile(&w, &key).await;
    assert_eq!(w.object(&key).unwrap().status.reconciliation_failures, 1);
    w.publish(REPO, "main", SHA2, RESOURCES);
    w.changed_between(SHA1, SHA2, &["envs/prod/main.tf"]);
    w.advance(Duration::from_secs(1));
    let report = polled(&w, &key).await;
    assert!(report.records.is_empty(), "waits for its retry");

    let root = w.create(object("root", json!({"approvePlan": "auto"})));
    reconcile(&w, &root).await;
    let plans = w.calls_of(&root, FakeOp::Plan);
    w.publish(REPO, "main", SHA3, RESOURCES);
    w.advance(Duration::from_secs(1));
    polled(&w, &root).await;
    assert_eq!(w.calls_of(&root, FakeOp::Plan), plans + 1);
}

#[tokio::test]
async fn with_no_room_for_a_runner_a_foreign_revision_is_still_seen_and_an_own_one_waits_its_turn()
{
    let w = world();
    let key = prod(&w);
    reconcile(&w, &key).await;
    let full = || RunnerQueue {
        place: Some(Place { position: 1, of: 3 }),
        slot: Slot::Full {
            why: "quota runners: 2 of 2 Pods used".into(),
        },
    };
    let started = sessions(&w);

    w.publish(REPO, "main", SHA2, RESOURCES);
    w.changed_between(SHA1, SHA2, &["envs/staging/main.tf"]);
    w.advance(Duration::from_secs(30));
    polled_in(&w, &key, full()).await;
    let st = w.object(&key).unwrap().status;
    let sha2 = format!("main@sha1:{SHA2}");
    assert_eq!(st.last_applied_revision.as_deref(), Some(sha2.as_str()));
    assert!(
        tfops_core::reconcile::queue::waiting_since(&st).is_none(),
        "not queued"
    );

    w.publish(REPO, "main", SHA3, &[("terraform_data.a", "5")]);
    w.changed_between(SHA2, SHA3, &["envs/prod/main.tf"]);
    w.advance(Duration::from_secs(30));
    polled_in(&w, &key, full()).await;
    let st = w.object(&key).unwrap().status;
    assert_eq!(sessions(&w), started, "no runner Pod tried");
    assert!(
        tfops_core::reconcile::queue::waiting_since(&st).is_some(),
        "queued"
    );
    assert!(
        ready(&w, &key).2.contains("2 of 2 Pods used"),
        "{:?}",
        ready(&w, &key)
    );
}

#[tokio::test]
async fn a_look_waits_for_no_dependency_and_a_change_of_its_own_does() {
    let w = world();
    let vpc = w.create(object(
        "vpc",
        json!({"approvePlan": "auto", "path": "envs/vpc"}),
    ));
    let app = w.create(object(
        "app",
        json!({"approvePlan": "auto", "path": "envs/app", "dependsOn": [{"name": "vpc"}]}),
    ));
    reconcile(&w, &vpc).await;
    reconcile(&w, &app).await;
    assert_eq!(w.applies(&app), 1);

    // vpc now waits for a human on a change of its own: not Ready.
    w.edit(&vpc, |s| s.approve_plan = String::new());
    w.publish(REPO, "main", SHA2, &[("terraform_data.a", "5")]);
    w.changed_between(SHA1, SHA2, &["envs/vpc/main.tf"]);
    reconcile(&w, &vpc).await;
    assert_eq!(ready(&w, &vpc).1, "TerraformPlannedWithChanges");

    // app's look at it: nothing of app's changed, so it waits for nothing.
    w.advance(Duration::from_secs(30));
    polled(&w, &app).await;
    assert_eq!(ready(&w, &app).1, "TerraformAppliedSucceed");
    let sha2 = format!("main@sha1:{SHA2}");
    let st = w.object(&app).unwrap().status;
    assert_eq!(st.last_applied_revision.as_deref(), Some(sha2.as_str()));

    // A change of app's own: it waits for vpc, and says so.
    w.publish(REPO, "main", SHA3, &[("terraform_data.a", "7")]);
    w.changed_between(SHA2, SHA3, &["envs/app/main.tf"]);
    w.advance(Duration::from_secs(30));
    let report = polled(&w, &app).await;
    assert_eq!(ready(&w, &app).1, "DependencyNotReady");
    assert!(
        !tfops_core::history::looked_only(&report),
        "a wait is no look"
    );
    assert_eq!(w.applies(&app), 1);
    // Its retry (the revision still not attempted) waits as long as vpc is not Ready.
    w.advance(Duration::from_secs(16));
    polled(&w, &app).await;
    assert_eq!(ready(&w, &app).1, "DependencyNotReady");
    assert_eq!(w.applies(&app), 1);
}
