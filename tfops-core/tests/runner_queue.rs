//! Waiting for a runner Pod when a ResourceQuota refuses it: what a user sees in `Ready`, when
//! the object tries again, and that the queue's turn (the controller's `RunnerQueue`) decides
//! who starts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use serde_json::json;
use tfops_core::api::{ObjectKey, annotations};
use tfops_core::conditions::{self, ConditionStatus::*, ConditionType, Reason};
use tfops_core::health::{HealthStatus, health};
use tfops_core::ports::PortError;
use tfops_core::reconcile::{Place, RunnerQueue, Slot};
use tfops_core::testing::{FakeOp, FakeWorld};

const REFUSED: &str = "the ResourceQuota pods in team-a allows no more Pods (used 1 of 1)";

fn refuse(w: &FakeWorld) {
    w.fail_next(FakeOp::Start, PortError::QuotaExhausted(REFUSED.into()));
}

fn queue(position: usize, of: usize, slot: Slot) -> RunnerQueue {
    RunnerQueue {
        place: Some(Place { position, of }),
        slot,
    }
}

fn full() -> Slot {
    Slot::Full {
        why: REFUSED.into(),
    }
}

/// Whether the reconcile tried to start a runner Pod.
fn attempted(report: &tfops_core::reconcile::RunReport) -> bool {
    report
        .records
        .iter()
        .any(|r| r.step == tfops_core::reconcile::StepKind::StartRunner)
}

/// `Ready`'s transition time: when the object started waiting.
fn ready_since(w: &FakeWorld, key: &ObjectKey) -> tfops_core::Timestamp {
    let o = w.object(key).unwrap();
    conditions::find(&o.status.conditions, ConditionType::Ready)
        .unwrap()
        .last_transition_time
}

#[tokio::test]
async fn a_refused_runner_pod_waits_in_the_queue_counting_no_failure_until_one_starts() {
    let w = world();
    // With no retries allowed, a failure would stall the object at once.
    let spec = json!({"approvePlan": "auto", "remediation": {"retries": 0}});
    let key = w.create(object("vpc", spec));
    refuse(&w);
    let report = w
        .reconcile_queued(&key, queue(2, 2, Slot::Unknown))
        .await
        .unwrap()
        .unwrap();
    let (status, reason, message) = ready(&w, &key);
    assert_eq!((status, reason.as_str()), (Unknown, "RunnerQuotaExhausted"));
    let wait = report.requeue_after.unwrap();
    assert!(
        wait >= Duration::from_secs(1) && wait <= Duration::from_secs(15),
        "{wait:?}"
    );
    let want = format!(
        "waiting for a runner Pod: {REFUSED} (position 2 of 2); retry in {}",
        tfops_core::duration::format(Duration::from_secs(wait.as_secs()))
    );
    assert_eq!(message, want);
    let o = w.object(&key).unwrap();
    assert_eq!(o.status.reconciliation_failures, 0);
    assert!(condition(&w, &key, ConditionType::Stalled).is_none());
    assert_eq!(health(&o).status, HealthStatus::Progressing);
    assert_eq!(health(&o).message, want);
    let since = ready_since(&w, &key);
    // An attempt that found no room is no run worth recording.
    assert!(tfops_core::history::entry(&o, &report, since).is_none());

    // Before its wait is over nothing is attempted; after it, the next attempt is refused
    // again: the wait's start is kept, and the message says how long it has waited.
    assert!(!attempted(&reconcile(&w, &key).await));
    w.advance(wait);
    refuse(&w);
    assert!(attempted(&reconcile(&w, &key).await));
    assert_eq!(w.lock().sessions, 0);
    assert_eq!(ready_since(&w, &key), since);
    let (_, reason, message) = ready(&w, &key);
    assert_eq!(reason, "RunnerQuotaExhausted");
    assert!(message.contains("waiting "), "{message}");
    assert_eq!(w.object(&key).unwrap().status.reconciliation_failures, 0);

    // Its turn: the Pod starts, Ready says how long it waited, and the run goes through.
    let before = w.object(&key).unwrap();
    let report = w
        .reconcile_queued(&key, queue(1, 2, Slot::Free))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ready(&w, &key).0, True);
    let started = w.lock().events.iter().any(|(_, e)| {
        e.reason == Reason::Progressing
            && e.message.starts_with("a runner Pod started after waiting ")
    });
    assert!(started, "{:?}", w.lock().events);
    let entry = tfops_core::history::entry(&before, &report, since).unwrap();
    assert_eq!(entry.trigger, "its turn for a runner Pod");
}

#[tokio::test]
async fn with_no_room_for_it_an_object_starts_no_pod_and_fetches_nothing_until_its_turn() {
    let w = world();
    let key = w.create(object("vpc", json!({"approvePlan": "auto"})));
    let report = w
        .reconcile_queued(&key, queue(3, 3, full()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(w.lock().sessions, 0);
    assert!(
        report
            .records
            .iter()
            .all(|r| r.step == tfops_core::reconcile::StepKind::AddFinalizer),
        "{:?}",
        report.records
    );
    let (status, reason, message) = ready(&w, &key);
    assert_eq!((status, reason.as_str()), (Unknown, "RunnerQuotaExhausted"));
    assert!(
        message.starts_with(&format!(
            "waiting for a runner Pod: {REFUSED} (position 3 of 3); next look in "
        )),
        "{message}"
    );
    let since = ready_since(&w, &key);

    // Looked at again after its wait, still without room: the message moves on, the wait's
    // start stays.
    w.advance(report.requeue_after.unwrap());
    w.reconcile_queued(&key, queue(2, 2, full())).await.unwrap();
    assert_eq!(w.lock().sessions, 0);
    assert_eq!(ready_since(&w, &key), since);
    assert!(ready(&w, &key).2.contains("(position 2 of 2, waiting "));

    // Its turn comes (the quota freed room): it runs at once, with no wait to sit out.
    w.reconcile_queued(&key, queue(1, 1, Slot::Free))
        .await
        .unwrap();
    assert_eq!(w.lock().sessions, 1);
    assert_eq!(ready(&w, &key).0, True);
}

#[tokio::test]
async fn a_spec_change_waits_its_turn_but_a_person_asking_for_a_run_tries_at_once() {
    let w = world();
    let key = w.create(object("vpc", json!({"approvePlan": "auto"})));
    reconcile(&w, &key).await;
    assert_eq!(w.lock().sessions, 1);
    // A new generation (a Git push synced by Argo CD): in the queue like any other run.
    w.edit(&key, |s| s.retry_interval = "20s".into());
    w.reconcile_queued(&key, queue(2, 2, full())).await.unwrap();
    assert_eq!(w.lock().sessions, 1);
    assert_eq!(ready(&w, &key).1, "RunnerQuotaExhausted");
    // The reconcile annotation is a person asking: one attempt now, refused here.
    w.annotate(&key, annotations::RECONCILE, "now");
    refuse(&w);
    let report = w.reconcile_queued(&key, queue(2, 2, full())).await.unwrap();
    assert!(attempted(&report.unwrap()));
    assert_eq!(w.lock().sessions, 1);
    assert!(
        ready(&w, &key).2.contains("; retry in "),
        "{:?}",
        ready(&w, &key)
    );
    w.annotate(&key, annotations::RECONCILE, "again");
    w.reconcile_queued(&key, queue(2, 2, full())).await.unwrap();
    assert_eq!(w.lock().sessions, 2);
    assert_eq!(ready(&w, &key).0, True);
}

#[tokio::test]
async fn a_destroy_on_deletion_waits_in_the_queue_too() {
    let w = world();
    let spec = json!({"approvePlan": "auto", "destroyResourcesOnDeletion": true});
    let key = w.create(object("vpc", spec));
    reconcile(&w, &key).await;
    w.delete(&key);
    w.reconcile_queued(&key, queue(1, 1, full())).await.unwrap();
    assert_eq!(w.lock().sessions, 1);
    assert!(w.object(&key).is_some());
    assert_eq!(ready(&w, &key).1, "RunnerQuotaExhausted");
    // Refused when it tries on its own: still waiting, no failure counted.
    w.advance(Duration::from_secs(16));
    refuse(&w);
    w.reconcile_queued(&key, queue(1, 1, Slot::Unknown))
        .await
        .unwrap();
    assert_eq!(w.object(&key).unwrap().status.reconciliation_failures, 0);
    assert_eq!(ready(&w, &key).1, "RunnerQuotaExhausted");
    w.reconcile_queued(&key, queue(1, 1, Slot::Free))
        .await
        .unwrap();
    assert!(w.object(&key).is_none(), "destroyed and released");
}

#[test]
fn reasons_and_their_name_stay_what_metrics_read() {
    // A metrics reader counts the queue by this reason; it must not change name.
    assert_eq!(
        Reason::RunnerQuotaExhausted.as_str(),
        "RunnerQuotaExhausted"
    );
}
