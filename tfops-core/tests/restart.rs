//! A run survives a restart of whoever drives it: the apply is recorded in status before it
//! starts, and the next driver attaches to it instead of applying again.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::json;
use tfops_core::api::{ObjectKey, TerraformStatus};
use tfops_core::conditions::{ConditionStatus::*, ConditionType};
use tfops_core::ports::PortError;
use tfops_core::testing::{FakeOp, FakeWorld};

/// Reconciles `key` with a driver that dies after its apply; returns the status it left.
async fn apply_and_die(w: &FakeWorld, key: &ObjectKey) -> TerraformStatus {
    w.crash_after_next_apply();
    let died = w.reconcile(key).await;
    assert!(died.is_err(), "the first driver stopped");
    assert_eq!(w.applies(key), 1, "it applied");
    w.object(key).unwrap().status
}

#[tokio::test]
async fn a_new_driver_attaches_to_the_recorded_apply_and_never_applies_again() {
    let w = world();
    let key = w.create(object("vpc", json!({"approvePlan": "auto"})));
    let left = apply_and_die(&w, &key).await;
    let active = left
        .active_run
        .expect("the apply was recorded before it started");
    assert_eq!(active.step, "Apply");
    assert_eq!(active.plan_id, "plan-main-1111111111");
    assert_eq!(active.plan_digest.len(), 64);
    assert!(
        left.last_applied_revision.is_none(),
        "its result was not recorded"
    );

    let report = reconcile(&w, &key).await;
    assert_eq!(w.applies(&key), 1, "applied once");
    assert_eq!(w.calls_of(&key, FakeOp::Plan), 1, "nothing planned again");
    assert_eq!(w.calls_of(&key, FakeOp::Attach), 1);
    let steps: Vec<_> = report.records.iter().map(|r| r.step).collect();
    assert!(
        !steps.contains(&tfops_core::reconcile::StepKind::StartRunner),
        "{steps:?}"
    );
    let o = w.object(&key).unwrap();
    let (status, reason, message) = ready(&w, &key);
    assert_eq!((status, reason.as_str()), (True, "TerraformAppliedSucceed"));
    assert!(message.contains("attached to run"), "{message}");
    assert!(o.status.active_run.is_none());
    assert_eq!(o.status.plan.last_applied, "plan-main-1111111111");
    assert_eq!(
        o.status.available_outputs.len(),
        2,
        "outputs read on the attached runner"
    );

    w.advance(std::time::Duration::from_secs(601));
    reconcile(&w, &key).await;
    assert_eq!(ready(&w, &key).1, "NoDrift");
}

/// Found by the soak (seed 7): the spec changed while an apply was under way and its driver
/// was gone; the driver that took the apply up recorded the new generation as observed, so the
/// change was never planned (until the drift check at `spec.interval`).
#[tokio::test]
async fn a_spec_changed_during_an_apply_taken_up_after_a_restart_is_planned_next() {
    let w = world();
    let key = w.create(object("vpc", json!({"approvePlan": "auto"})));
    let left = apply_and_die(&w, &key).await;
    assert_eq!(left.active_run.as_ref().map(|a| a.generation), Some(1));
    w.edit(&key, |spec| {
        spec.vars.push(tfops_core::api::Variable {
            name: "size".into(),
            value: Some(json!("large")),
            value_from: None,
        })
    });

    let report = reconcile(&w, &key).await;
    assert_eq!(w.calls_of(&key, FakeOp::Attach), 1);
    let o = w.object(&key).unwrap();
    assert_eq!(
        o.status.observed_generation, 1,
        "the apply answered generation 1, not the one written meanwhile"
    );
    assert_eq!(
        report.requeue_after,
        Some(std::time::Duration::ZERO),
        "the newer spec is taken up at once"
    );

    reconcile(&w, &key).await;
    assert_eq!(
        w.calls_of(&key, FakeOp::Plan),
        2,
        "the newer spec was planned"
    );
    assert_eq!(w.object(&key).unwrap().status.observed_generation, 2);
    assert_eq!(w.applies(&key), 2, "and applied once");
}

#[tokio::test]
async fn a_recorded_apply_whose_runner_is_gone_is_reported_and_planned_again_from_the_state() {
    let w = world();
    let key = w.create(object("vpc", json!({"approvePlan": "auto"})));
    apply_and_die(&w, &key).await;
    w.lose_runners();
    reconcile(&w, &key).await;
    assert_eq!(
        w.applies(&key),
        1,
        "the state shows it was applied: nothing to do"
    );
    let (status, reason, _) = ready(&w, &key);
    assert_eq!(
        (status, reason.as_str()),
        (True, "TerraformPlannedNoChanges")
    );
    let apply = condition(&w, &key, ConditionType::Apply).unwrap();
    assert_eq!(apply.0, Unknown);
    assert!(apply.2.contains("its result is unknown"), "{}", apply.2);
    let events: Vec<String> = w
        .lock()
        .events
        .iter()
        .map(|(_, e)| e.message.clone())
        .collect();
    assert!(
        events.iter().any(|m| m.contains("was interrupted")),
        "an event says what happened: {events:?}"
    );
}

#[tokio::test]
async fn an_unreachable_runner_keeps_the_record_and_the_retry_attaches() {
    let w = world();
    let key = w.create(object("vpc", json!({"approvePlan": "auto"})));
    apply_and_die(&w, &key).await;
    w.fail_next(
        FakeOp::Attach,
        PortError::Unavailable("connection refused".into()),
    );
    reconcile(&w, &key).await;
    let (status, reason, _) = ready(&w, &key);
    assert_eq!((status, reason.as_str()), (False, "RunnerConnectionFailed"));
    assert!(
        w.object(&key).unwrap().status.active_run.is_some(),
        "kept to attach again"
    );
    assert_eq!(
        w.calls_of(&key, FakeOp::Plan),
        1,
        "no new plan while the apply may run"
    );

    w.advance(std::time::Duration::from_secs(16));
    reconcile(&w, &key).await;
    assert_eq!(ready(&w, &key).1, "TerraformAppliedSucceed");
    assert_eq!(w.applies(&key), 1);
}

#[tokio::test]
async fn force_unlock_auto_never_breaks_a_lock_of_this_objects_own_runner() {
    let w = world();
    let key = w.create(object(
        "vpc",
        json!({"approvePlan": "auto", "tfstate": {"forceUnlock": "auto"}}),
    ));
    // Held by the runner Pod of this very object: perhaps an apply still running.
    let host = tfops_core::naming::runner_host(&key.namespace, "vpc-tf-runner");
    w.lock_state(&key, "lock-7", &format!("runner@{host}"));
    reconcile(&w, &key).await;
    assert_eq!(
        w.calls_of(&key, FakeOp::Unlock),
        0,
        "not broken automatically"
    );
    let (status, reason, _) = ready(&w, &key);
    assert_eq!((status, reason.as_str()), (False, "LockHeld"));
    assert_eq!(w.object(&key).unwrap().status.lock.pending, "lock-7");

    // Someone else's stale lock is released as asked.
    w.lock_state(&key, "lock-8", "runner@other-host");
    w.advance(std::time::Duration::from_secs(16));
    reconcile(&w, &key).await;
    assert_eq!(w.calls_of(&key, FakeOp::Unlock), 1);
    assert_eq!(ready(&w, &key).1, "TerraformAppliedSucceed");
}

#[tokio::test]
async fn a_lock_of_this_objects_own_runner_proved_gone_is_released_whatever_force_unlock_says() {
    let w = world();
    // `forceUnlock` left at its default (`no`).
    let key = w.create(object("vpc", json!({"approvePlan": "auto"})));
    w.lock_state_of_dead_runner(&key, "lock-9");
    reconcile(&w, &key).await;
    assert_eq!(w.calls_of(&key, FakeOp::Unlock), 1, "released once");
    assert_eq!(ready(&w, &key).1, "TerraformAppliedSucceed");
    assert_eq!(w.applies(&key), 1);
    assert!(w.object(&key).unwrap().status.lock.pending.is_empty());
    let said = w
        .lock()
        .events
        .iter()
        .any(|(k, e)| *k == key && e.reason == tfops_core::conditions::Reason::LockHolderGone);
    assert!(said, "an event says why the lock was broken");
}

/// Found by the soak on a new machine: a runner killed in `init`, while Terraform wrote the
/// workspace's first state under the lock, left the lock held; every later run stopped at its
/// own `init` (setup never succeeded, so the lock was never released) until a human came.
#[tokio::test]
async fn a_lock_a_dead_runner_left_in_init_is_released_and_the_object_converges() {
    let w = world();
    let key = w.create(object("vpc", json!({"approvePlan": "auto"})));
    w.lock_state_at_init_of_dead_runner(&key, "lock-init");
    reconcile(&w, &key).await;
    assert_eq!(w.calls_of(&key, FakeOp::Unlock), 1, "released once");
    assert_eq!(
        w.calls_of(&key, FakeOp::Init),
        2,
        "init again after the release"
    );
    assert_eq!(ready(&w, &key).1, "TerraformAppliedSucceed");
    assert_eq!(w.applies(&key), 1);
    assert!(w.object(&key).unwrap().status.lock.pending.is_empty());
}

/// A lock someone else holds at `init` is released when a user asks for it (the annotation
/// naming it), as after any other command, though setup never succeeds while it holds; and
/// with `forceUnlock: auto`, at once.
#[tokio::test]
async fn a_lock_at_init_is_released_as_asked() {
    let w = world();
    let key = w.create(object("vpc", json!({"approvePlan": "auto"})));
    w.lock_state(&key, "lock-a", "someone@laptop");
    w.lock().infra.get_mut(&key).unwrap().lock_at_init = true;
    reconcile(&w, &key).await;
    assert_eq!(ready(&w, &key).1, "LockHeld");
    w.annotate(&key, tfops_core::api::annotations::FORCE_UNLOCK, "lock-a");
    w.advance(std::time::Duration::from_secs(16));
    reconcile(&w, &key).await;
    assert_eq!(w.calls_of(&key, FakeOp::Unlock), 1);
    assert_eq!(ready(&w, &key).1, "TerraformAppliedSucceed");

    let auto = w.create(object(
        "db",
        json!({"approvePlan": "auto", "tfstate": {"forceUnlock": "auto"}}),
    ));
    w.lock_state(&auto, "lock-b", "someone@laptop");
    w.lock().infra.get_mut(&auto).unwrap().lock_at_init = true;
    reconcile(&w, &auto).await;
    assert_eq!(w.calls_of(&auto, FakeOp::Unlock), 1);
    assert_eq!(ready(&w, &auto).1, "TerraformAppliedSucceed");
}

/// A lock someone else holds at `init` is not this object's runner's: with `forceUnlock: no`
/// it stays, and the object says who holds it.
#[tokio::test]
async fn a_lock_of_another_holder_at_init_is_kept_and_said() {
    let w = world();
    let key = w.create(object("vpc", json!({"approvePlan": "auto"})));
    w.lock_state(&key, "lock-other", "someone@laptop");
    w.lock().infra.get_mut(&key).unwrap().lock_at_init = true;
    reconcile(&w, &key).await;
    assert_eq!(w.calls_of(&key, FakeOp::Unlock), 0);
    assert_eq!(w.applies(&key), 0);
    let (status, reason, _) = ready(&w, &key);
    assert_eq!((status, reason.as_str()), (False, "LockHeld"));
    assert_eq!(w.object(&key).unwrap().status.lock.pending, "lock-other");
}

#[tokio::test]
async fn deletion_that_keeps_the_resources_does_not_wait_for_a_recorded_apply() {
    let w = world();
    let key = w.create(object("vpc", json!({"approvePlan": "auto"})));
    apply_and_die(&w, &key).await;
    // The runner of the recorded apply cannot be reached; deletion needs none.
    w.fail_always(
        FakeOp::Attach,
        PortError::Unavailable("connection refused".into()),
    );
    w.delete(&key);
    reconcile(&w, &key).await;
    assert!(w.object(&key).is_none(), "deleted without the runner");
}

/// Controllers run reconciles on a multi-threaded runtime: the driver's future must be `Send`
/// (a policy evaluation holding non-`Send` values across an await once broke this).
#[test]
fn the_reconcile_future_is_send() {
    fn send<T: Send>(_: &T) {}
    let w = world();
    let key = w.create(object("vpc", json!({})));
    let driver = tfops_core::reconcile::Driver::new(w.ports());
    let future = driver.reconcile(w.object(&key).unwrap(), Vec::new(), Vec::new());
    send(&future);
}

/// Found by the reconciler's property test: a run taken up after a crash, whose runner turns
/// out to be gone, plans again; it must first wait for its dependencies like any run.
#[tokio::test]
async fn a_lost_apply_plans_again_only_once_its_dependencies_are_ready() {
    let w = world();
    let net = w.create(object("net", json!({"approvePlan": "auto"})));
    let app = w.create(object(
        "app",
        json!({"approvePlan": "auto", "dependsOn": [{"name": "net"}]}),
    ));
    reconcile(&w, &net).await;
    apply_and_die(&w, &app).await;
    // The dependency stops being Ready (its deletion waits for the dependant), and the
    // dependant's runner is gone.
    w.delete(&net);
    reconcile(&w, &net).await;
    assert_eq!(ready(&w, &net).1, "DeletionBlockedByDependants");
    w.lose_runners();
    let sessions = w.lock().sessions;
    reconcile(&w, &app).await;
    assert_eq!(
        w.lock().sessions,
        sessions,
        "no runner started for a new plan"
    );
    assert_eq!(ready(&w, &app).1, "DependencyNotReady");
    let status = w.object(&app).unwrap().status;
    assert!(status.active_run.is_none(), "{status:#?}");
    assert!(
        w.lock()
            .events
            .iter()
            .any(|(k, e)| *k == app && e.reason.as_str() == "ApplyInterrupted"),
        "the lost apply is reported"
    );
}

/// Found by the soak (seed 20261205, with `spec.runner.apply`): the apply runner was killed
/// mid-apply and its Pod deleted; its lock names the apply runner's host, which only that
/// runner could prove stale, and every later run stopped at the plan runner's `LockHeld`: the
/// apply runner never started again, and the object (being deleted) waited for a human.
#[tokio::test]
async fn a_lock_of_this_objects_apply_runner_whose_pod_is_gone_is_released() {
    let w = world();
    let key = w.create(object(
        "vpc",
        json!({"approvePlan": "auto", "runner": {"apply": {"serviceAccountName": "tf-apply"}}}),
    ));
    w.lock_state_of_apply_runner(&key, "lock-10", false);
    reconcile(&w, &key).await;
    assert_eq!(w.calls_of(&key, FakeOp::Unlock), 1, "released once");
    assert_eq!(ready(&w, &key).1, "TerraformAppliedSucceed");
    assert_eq!(w.applies(&key), 1);
    let said = w.lock().events.iter().any(|(k, e)| {
        *k == key
            && e.reason == tfops_core::conditions::Reason::LockHolderGone
            && e.message.contains("apply runner, whose Pod is gone")
    });
    assert!(said, "an event says why the lock was broken");
}

/// The other side: a lock of the apply runner whose Pod is still there may be an apply under
/// way, and is kept (whatever `forceUnlock: auto` says) until that Pod is gone.
#[tokio::test]
async fn a_lock_of_this_objects_apply_runner_still_there_is_kept_until_its_pod_is_gone() {
    let w = world();
    let key = w.create(object(
        "vpc",
        json!({"approvePlan": "auto", "tfstate": {"forceUnlock": "auto"}, "runner": {"apply": {"serviceAccountName": "tf-apply"}}}),
    ));
    // Its Pod is there: perhaps still applying. Not even `forceUnlock: auto` breaks it.
    w.lock_state_of_apply_runner(&key, "lock-11", true);
    reconcile(&w, &key).await;
    assert_eq!(w.calls_of(&key, FakeOp::Unlock), 0, "kept");
    let (status, reason, _) = ready(&w, &key);
    assert_eq!((status, reason.as_str()), (False, "LockHeld"));
    assert_eq!(w.applies(&key), 0);

    // Its Pod went (the apply ended, or the Pod was deleted): the next run releases it.
    w.lock_state_of_apply_runner(&key, "lock-11", false);
    w.advance(std::time::Duration::from_secs(16));
    reconcile(&w, &key).await;
    assert_eq!(w.calls_of(&key, FakeOp::Unlock), 1);
    assert_eq!(ready(&w, &key).1, "TerraformAppliedSucceed");
    assert_eq!(w.applies(&key), 1);
}
