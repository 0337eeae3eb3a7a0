//! The reconciler through its driver and the in-memory fakes: what a user sees for each branch
//! of a run's steps (README, "A run, step by step").
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use serde_json::json;
use tfops_core::api::{FINALIZER, annotations};
use tfops_core::conditions::{ConditionStatus::*, ConditionType, Reason};
use tfops_core::health::{HealthStatus, health};
use tfops_core::ports::{EventType, PortError};
use tfops_core::testing::FakeOp;

#[tokio::test]
async fn auto_approve_applies_then_the_next_interval_only_checks_drift() {
    let w = world();
    let key = w.create(object("vpc", json!({"approvePlan": "auto"})));
    let report = reconcile(&w, &key).await;

    let o = w.object(&key).unwrap();
    assert!(o.metadata.finalizers.contains(&FINALIZER.to_string()));
    assert_eq!(ready(&w, &key).0, True);
    assert_eq!(ready(&w, &key).1, "TerraformAppliedSucceed");
    assert_eq!(o.status.observed_generation, 1);
    let rev = format!("main@sha1:{SHA1}");
    assert_eq!(
        o.status.last_applied_revision.as_deref(),
        Some(rev.as_str())
    );
    assert_eq!(o.status.plan.last_applied, "plan-main-1111111111");
    assert!(o.status.plan.pending.is_empty());
    assert_eq!(o.status.inventory.len(), 2);
    assert_eq!(o.status.available_outputs, vec!["resource_count", "token"]);
    assert_eq!(o.status.binary.as_deref(), Some("fake-terraform 1.0.0"));
    assert!(conditions_absent(&w, &key, ConditionType::Reconciling));
    assert_eq!(health(&o).status, HealthStatus::Healthy);
    assert_eq!(report.requeue_after, Some(Duration::from_secs(600)));
    assert_eq!(w.applies(&key), 1);
    assert_eq!(
        w.calls_of(&key, FakeOp::Cleanup),
        1,
        "the runner is cleaned up"
    );

    // A reconcile caused by the status update itself starts nothing.
    let again = reconcile(&w, &key).await;
    assert!(again.records.is_empty(), "{:?}", again.records);
    assert!(again.requeue_after.unwrap() < Duration::from_secs(600));

    w.advance(Duration::from_secs(601));
    reconcile(&w, &key).await;
    assert_eq!(w.calls_of(&key, FakeOp::RefreshPlan), 1);
    assert_eq!(w.applies(&key), 1, "no second apply when nothing changed");
    assert_eq!(ready(&w, &key).1, "NoDrift");
}

fn conditions_absent(
    w: &tfops_core::testing::FakeWorld,
    key: &tfops_core::api::ObjectKey,
    kind: ConditionType,
) -> bool {
    condition(w, key, kind).is_none()
}

#[tokio::test]
async fn manual_approval_waits_refuses_stale_ids_and_replans_before_applying() {
    let w = world();
    let key = w.create(object("vpc", json!({})));
    reconcile(&w, &key).await;
    let o = w.object(&key).unwrap();
    assert_eq!(o.status.plan.pending, "plan-main-1111111111");
    assert_eq!(ready(&w, &key).0, Unknown);
    assert_eq!(ready(&w, &key).1, "TerraformPlannedWithChanges");
    assert!(ready(&w, &key).2.contains("plan-main-1111111111"));
    assert_eq!(health(&o).status, HealthStatus::Suspended);
    assert_eq!(w.applies(&key), 0);
    assert_eq!(w.lock().plans.len(), 1, "the plan is stored for review");

    // A plan id for another revision is stale.
    w.edit(&key, |s| s.approve_plan = "plan-main-9999999999".into());
    reconcile(&w, &key).await;
    assert_eq!(w.applies(&key), 0);
    assert!(
        ready(&w, &key)
            .2
            .contains("does not match the pending plan plan-main-1111111111")
    );

    w.edit(&key, |s| s.approve_plan = "plan-main-1111111111".into());
    reconcile(&w, &key).await;
    assert_eq!(w.applies(&key), 1);
    let calls: Vec<FakeOp> = w
        .lock()
        .calls
        .iter()
        .filter(|c| c.session == 2)
        .map(|c| c.op)
        .collect();
    let plan_at = calls.iter().position(|op| *op == FakeOp::Plan).unwrap();
    let apply_at = calls.iter().position(|op| *op == FakeOp::Apply).unwrap();
    assert!(
        plan_at < apply_at,
        "re-planned in the same session before applying: {calls:?}"
    );
    let o = w.object(&key).unwrap();
    assert_eq!(ready(&w, &key).1, "TerraformAppliedSucceed");
    assert_eq!(o.status.plan.last_applied, "plan-main-1111111111");
    assert!(o.status.plan.pending.is_empty());
}

#[tokio::test]
async fn approval_by_annotation_leaves_the_spec_to_git() {
    let w = world();
    let key = w.create(object("vpc", json!({})));
    reconcile(&w, &key).await;
    w.annotate(&key, annotations::APPROVE, "plan-main-1111111111");
    w.annotate(&key, annotations::RECONCILE, "2026-11-29T12:01:00Z");
    reconcile(&w, &key).await;
    assert_eq!(w.applies(&key), 1);
    assert_eq!(
        w.object(&key)
            .unwrap()
            .status
            .last_handled_reconcile_at
            .as_deref(),
        Some("2026-11-29T12:01:00Z")
    );
}

#[tokio::test]
async fn a_new_revision_gets_a_new_plan_id_and_the_old_approval_is_stale() {
    let w = world();
    let key = w.create(object(
        "vpc",
        json!({"approvePlan": "plan-main-1111111111"}),
    ));
    reconcile(&w, &key).await; // pending plan-main-1111111111
    w.publish(REPO, "main", SHA2, &[("terraform_data.a", "2")]);
    w.advance(Duration::from_secs(601));
    reconcile(&w, &key).await;
    assert_eq!(w.applies(&key), 0);
    assert_eq!(
        w.object(&key).unwrap().status.plan.pending,
        "plan-main-2222222222"
    );
}

#[tokio::test]
async fn drift_is_reported_in_manual_mode_and_corrected_in_auto_mode() {
    let w = world();
    let manual = w.create(object("manual", json!({"force": true})));
    reconcile(&w, &manual).await;
    assert_eq!(w.applies(&manual), 1);
    w.edit(&manual, |s| s.force = false);
    reconcile(&w, &manual).await; // a new generation: plans, no changes
    w.drift(&manual, "terraform_data.a", "changed by hand");
    w.advance(Duration::from_secs(601));
    reconcile(&w, &manual).await;
    let (status, reason, message) = ready(&w, &manual);
    assert_eq!((status, reason.as_str()), (False, "DriftDetected"));
    assert!(message.contains("terraform_data.a"), "{message}");
    assert!(
        w.object(&manual)
            .unwrap()
            .status
            .last_drift_detected_at
            .is_some()
    );
    assert_eq!(w.applies(&manual), 1, "drift is only reported without auto");

    let auto = w.create(object("auto", json!({"approvePlan": "auto"})));
    reconcile(&w, &auto).await;
    w.drift(&auto, "terraform_data.b", "changed by hand");
    w.advance(Duration::from_secs(601));
    reconcile(&w, &auto).await;
    assert_eq!(w.applies(&auto), 2, "re-planned and applied");
    assert_eq!(ready(&w, &auto).1, "TerraformAppliedSucceed");
    assert_eq!(w.lock().infra[&auto].real["terraform_data.b"], "1");
}

#[tokio::test]
async fn drift_action_report_never_acts_even_in_auto_mode() {
    let w = world();
    let key = w.create(object(
        "vpc",
        json!({"approvePlan": "auto", "driftAction": "Report"}),
    ));
    reconcile(&w, &key).await;
    w.drift(&key, "terraform_data.a", "x");
    w.advance(Duration::from_secs(601));
    reconcile(&w, &key).await;
    assert_eq!(ready(&w, &key).1, "DriftDetected");
    assert_eq!(w.applies(&key), 1);
}

#[tokio::test]
async fn failures_back_off_and_success_resets_the_count() {
    let w = world();
    let key = w.create(object("vpc", json!({"approvePlan": "auto"})));
    w.fail_next(
        FakeOp::Plan,
        PortError::Terraform("Error: Unsupported argument\n  on main.tf line 3".into()),
    );
    let report = reconcile(&w, &key).await;
    let (status, reason, message) = ready(&w, &key);
    assert_eq!((status, reason.as_str()), (False, "TFExecPlanFailed"));
    assert!(message.contains("Unsupported argument"), "{message}");
    assert_eq!(
        condition(&w, &key, ConditionType::Plan).unwrap().1,
        "TFExecPlanFailed"
    );
    assert_eq!(report.requeue_after, Some(Duration::from_secs(15)));
    assert_eq!(w.object(&key).unwrap().status.reconciliation_failures, 1);
    assert_eq!(
        w.calls_of(&key, FakeOp::Cleanup),
        1,
        "the runner is cleaned up after a failure"
    );
    assert_eq!(
        health(&w.object(&key).unwrap()).status,
        HealthStatus::Degraded
    );
    let warned =
        w.lock().events.iter().any(|(_, e)| {
            e.event_type == EventType::Warning && e.reason == Reason::TFExecPlanFailed
        });
    assert!(warned, "a Warning event with the same reason");

    w.advance(Duration::from_secs(5));
    assert!(
        reconcile(&w, &key).await.records.is_empty(),
        "backoff not elapsed"
    );
    w.advance(Duration::from_secs(15));
    reconcile(&w, &key).await;
    assert_eq!(ready(&w, &key).1, "TerraformAppliedSucceed");
    assert_eq!(w.object(&key).unwrap().status.reconciliation_failures, 0);
}

#[tokio::test]
async fn the_retry_limit_stalls_until_a_human_asks_again() {
    let w = world();
    let key = w.create(object(
        "vpc",
        json!({"approvePlan": "auto", "remediation": {"retries": 1}}),
    ));
    w.fail_always(FakeOp::Apply, PortError::Terraform("Error: quota".into()));
    reconcile(&w, &key).await;
    assert_eq!(ready(&w, &key).1, "TFExecApplyFailed");
    w.advance(Duration::from_secs(16));
    let report = reconcile(&w, &key).await;
    assert_eq!(ready(&w, &key).1, "RetryLimitReached");
    assert!(ready(&w, &key).2.contains("TFExecApplyFailed"));
    assert_eq!(
        condition(&w, &key, ConditionType::Stalled).unwrap().1,
        "RetryLimitReached"
    );
    assert_eq!(report.requeue_after, None);
    w.advance(Duration::from_secs(86_400));
    assert!(reconcile(&w, &key).await.records.is_empty());

    w.heal(FakeOp::Apply);
    w.annotate(&key, annotations::RECONCILE, "now");
    reconcile(&w, &key).await;
    assert_eq!(ready(&w, &key).1, "TerraformAppliedSucceed");
    assert!(condition(&w, &key, ConditionType::Stalled).is_none());
}

#[tokio::test]
async fn an_invalid_spec_stalls_with_every_problem_listed_and_no_runner() {
    let w = world();
    let key = w.create(object(
        "vpc",
        json!({"interval": "often", "approvePlan": "yes please", "parallelism": -1, "runner": {"binary": "tofu"}}),
    ));
    let report = reconcile(&w, &key).await;
    let (status, reason, message) = ready(&w, &key);
    assert_eq!((status, reason.as_str()), (False, "InvalidSpec"));
    for field in ["spec.interval", "spec.approvePlan", "spec.parallelism"] {
        assert!(message.contains(field), "{field} missing from {message}");
    }
    assert_eq!(
        condition(&w, &key, ConditionType::Stalled).unwrap().1,
        "InvalidSpec"
    );
    assert_eq!(w.lock().sessions, 0);
    assert_eq!(report.requeue_after, None);

    w.edit(&key, |s| {
        s.interval = "5m".into();
        s.approve_plan = "auto".into();
        s.parallelism = 0;
    });
    reconcile(&w, &key).await;
    assert_eq!(ready(&w, &key).1, "TerraformAppliedSucceed");
    assert!(condition(&w, &key, ConditionType::Stalled).is_none());
}

#[tokio::test]
async fn suspend_stops_runs_and_resume_continues() {
    let w = world();
    let key = w.create(object(
        "vpc",
        json!({"approvePlan": "auto", "suspend": true}),
    ));
    reconcile(&w, &key).await;
    assert_eq!(ready(&w, &key).1, "Suspended");
    assert_eq!(
        health(&w.object(&key).unwrap()).status,
        HealthStatus::Suspended
    );
    assert_eq!(w.lock().sessions, 0);
    w.edit(&key, |s| s.suspend = false);
    reconcile(&w, &key).await;
    assert_eq!(w.applies(&key), 1);
}

#[tokio::test]
async fn the_suspend_annotation_stops_runs_says_why_and_its_removal_resumes() {
    let w = world();
    let key = w.create(object("vpc", json!({"approvePlan": "auto"})));
    reconcile(&w, &key).await;
    assert_eq!(w.applies(&key), 1);
    let sessions = w.lock().sessions;
    w.annotate(&key, annotations::SUSPEND, "change freeze until Monday");
    reconcile(&w, &key).await;
    let (status, reason, message) = ready(&w, &key);
    assert_eq!((status, reason.as_str()), (Unknown, "Suspended"));
    assert_eq!(
        message,
        "reconciliation is suspended (infra.argocd.io/suspend: change freeze until Monday)"
    );
    let h = health(&w.object(&key).unwrap());
    assert_eq!(h.status, HealthStatus::Suspended);
    assert_eq!(
        h.message,
        "reconciliation is suspended (infra.argocd.io/suspend: change freeze until Monday; the resume action resumes it)"
    );
    assert_eq!(w.lock().sessions, sessions, "no runner while suspended");
    assert_eq!(w.applies(&key), 1);
    // Removing the annotation moves no generation and nothing is due on the interval: the
    // next reconcile runs all the same, so Ready stops saying Suspended.
    w.unannotate(&key, annotations::SUSPEND);
    reconcile(&w, &key).await;
    let (status, reason, _) = ready(&w, &key);
    assert_eq!(status, True, "{reason}");
    assert!(w.lock().sessions > sessions, "a run after resuming");
    assert_eq!(
        health(&w.object(&key).unwrap()).status,
        HealthStatus::Healthy
    );
}

#[tokio::test]
async fn a_dependant_waits_for_its_dependency_to_be_ready() {
    let w = world();
    let app = w.create(object(
        "app",
        json!({"approvePlan": "auto", "dependsOn": [{"name": "vpc"}]}),
    ));
    reconcile(&w, &app).await;
    let (status, reason, message) = ready(&w, &app);
    assert_eq!((status, reason.as_str()), (Unknown, "DependencyNotReady"));
    assert!(message.contains("team-a/vpc does not exist"), "{message}");

    let vpc = w.create(object("vpc", json!({})));
    reconcile(&w, &vpc).await; // waits for approval: not Ready
    let report = reconcile(&w, &app).await;
    assert_eq!(report.requeue_after, Some(Duration::from_secs(15)));
    assert_eq!(w.applies(&app), 0);
    assert!(ready(&w, &app).2.contains("team-a/vpc is not Ready"));

    w.edit(&vpc, |s| s.approve_plan = "auto".into());
    reconcile(&w, &vpc).await;
    reconcile(&w, &app).await;
    assert_eq!(w.applies(&app), 1);
}

#[tokio::test]
async fn deletion_without_destroy_needs_no_runner_and_keeps_state() {
    let w = world();
    let key = w.create(object(
        "vpc",
        json!({"approvePlan": "auto", "writeOutputsToSecret": {"name": "vpc-outputs"}, "tfstate": {"deleteOnDestroy": false}}),
    ));
    reconcile(&w, &key).await;
    assert!(
        w.lock()
            .output_secrets
            .contains_key(&("team-a".into(), "vpc-outputs".into()))
    );
    // What makes other controllers' finalizers stick: no runner identity, no vars Secret.
    w.fail_always(
        FakeOp::Start,
        PortError::NotFound("serviceaccount tf-runner".into()),
    );
    w.fail_always(FakeOp::Inputs, PortError::NotFound("secret vars".into()));
    let sessions = w.lock().sessions;
    w.delete(&key);
    reconcile(&w, &key).await;
    assert!(w.object(&key).is_none(), "finalizer removed, object gone");
    assert_eq!(
        w.lock().sessions,
        sessions,
        "no runner for deletion without destroy"
    );
    assert!(w.lock().output_secrets.is_empty(), "outputs removed");
    assert!(w.lock().deleted_states.is_empty(), "state kept");
    assert_eq!(w.lock().infra[&key].state.len(), 2, "infrastructure kept");
}

#[tokio::test]
async fn deletion_with_destroy_retries_a_failing_destroy_then_finishes() {
    let w = world();
    let key = w.create(object(
        "vpc",
        json!({"approvePlan": "auto", "destroyResourcesOnDeletion": true, "tfstate": {"deleteOnDestroy": true}}),
    ));
    reconcile(&w, &key).await;
    w.delete(&key);
    w.fail_next(
        FakeOp::Apply,
        PortError::Terraform("Error: DependencyViolation".into()),
    );
    let report = reconcile(&w, &key).await;
    assert_eq!(ready(&w, &key).1, "TFExecDestroyFailed");
    assert_eq!(report.requeue_after, Some(Duration::from_secs(15)));
    assert!(
        w.object(&key).is_some(),
        "finalizer kept while resources exist"
    );
    w.advance(Duration::from_secs(16));
    reconcile(&w, &key).await;
    assert!(w.object(&key).is_none());
    assert!(w.lock().infra[&key].real.is_empty(), "resources destroyed");
    assert_eq!(w.lock().deleted_states.len(), 1, "state deleted as asked");
}

#[tokio::test]
async fn a_dependency_is_released_only_after_its_dependants_are_gone() {
    let w = world();
    let vpc = w.create(object("vpc", json!({"approvePlan": "auto"})));
    let app = w.create(object(
        "app",
        json!({"approvePlan": "auto", "dependsOn": [{"name": "vpc"}]}),
    ));
    reconcile(&w, &vpc).await;
    reconcile(&w, &app).await;
    w.delete(&vpc);
    reconcile(&w, &vpc).await;
    assert_eq!(ready(&w, &vpc).1, "DeletionBlockedByDependants");
    assert!(ready(&w, &vpc).2.contains("team-a/app"));
    w.delete(&app);
    reconcile(&w, &app).await;
    assert!(w.object(&app).is_none());
    reconcile(&w, &vpc).await;
    assert!(w.object(&vpc).is_none());
}

#[tokio::test]
async fn a_held_lock_is_reported_and_released_on_request() {
    let w = world();
    let key = w.create(object("vpc", json!({"approvePlan": "auto"})));
    w.lock_state(&key, "lock-123", "runner-crashed@node-1");
    reconcile(&w, &key).await;
    let o = w.object(&key).unwrap();
    assert_eq!(ready(&w, &key).1, "LockHeld");
    assert_eq!(o.status.lock.pending, "lock-123");
    assert_eq!(o.status.lock.holder, "runner-crashed@node-1");
    assert_eq!(
        condition(&w, &key, ConditionType::StateLocked).unwrap().0,
        True
    );

    w.annotate(&key, annotations::FORCE_UNLOCK, "lock-123");
    w.annotate(&key, annotations::RECONCILE, "unlock");
    reconcile(&w, &key).await;
    let o = w.object(&key).unwrap();
    assert_eq!(ready(&w, &key).1, "TerraformAppliedSucceed");
    assert!(o.status.lock.pending.is_empty());
    assert!(condition(&w, &key, ConditionType::StateLocked).is_none());
}

#[tokio::test]
async fn force_unlock_auto_releases_a_lock_once_and_retries_the_step() {
    let w = world();
    let key = w.create(object(
        "vpc",
        json!({"approvePlan": "auto", "tfstate": {"forceUnlock": "auto"}}),
    ));
    w.lock_state(&key, "lock-9", "someone");
    reconcile(&w, &key).await;
    assert_eq!(w.calls_of(&key, FakeOp::Unlock), 1);
    assert_eq!(ready(&w, &key).1, "TerraformAppliedSucceed");
}

#[tokio::test]
async fn spec_destroy_applies_a_destroy_plan() {
    let w = world();
    let key = w.create(object("vpc", json!({"approvePlan": "auto"})));
    reconcile(&w, &key).await;
    w.edit(&key, |s| s.destroy = true);
    reconcile(&w, &key).await;
    assert_eq!(ready(&w, &key).1, "TerraformDestroySucceed");
    assert!(w.lock().infra[&key].real.is_empty());
    assert!(w.object(&key).unwrap().status.inventory.is_empty());
}

#[tokio::test]
async fn plan_only_never_applies() {
    let w = world();
    let key = w.create(object(
        "vpc",
        json!({"planOnly": true, "approvePlan": "plan-main-1111111111"}),
    ));
    reconcile(&w, &key).await;
    w.annotate(&key, annotations::RECONCILE, "again");
    reconcile(&w, &key).await;
    assert_eq!(w.applies(&key), 0);
    let (status, reason, _) = ready(&w, &key);
    assert_eq!(
        (status, reason.as_str()),
        (True, "TerraformPlannedWithChanges")
    );
}

#[tokio::test]
async fn missing_variable_sources_are_reported() {
    let w = world();
    let key = w.create(object(
        "vpc",
        json!({"approvePlan": "auto", "varsFrom": [{"kind": "Secret", "name": "db-creds"}]}),
    ));
    reconcile(&w, &key).await;
    let (status, reason, message) = ready(&w, &key);
    assert_eq!((status, reason.as_str()), (False, "VarsGenerationFailed"));
    assert!(message.contains("Secret team-a/db-creds"), "{message}");

    w.set_secret("team-a", "db-creds", &[("password", "hunter2")]);
    w.advance(Duration::from_secs(16));
    reconcile(&w, &key).await;
    assert_eq!(ready(&w, &key).1, "TerraformAppliedSucceed");
    assert_eq!(
        w.lock().infra[&key].state["terraform_data.var_password"],
        "\"hunter2\""
    );
}

#[tokio::test]
async fn a_variable_edit_makes_a_new_plan() {
    let w = world();
    let key = w.create(object(
        "vpc",
        json!({"approvePlan": "auto", "vars": [{"name": "size", "value": 3}]}),
    ));
    reconcile(&w, &key).await;
    w.edit(&key, |s| s.vars[0].value = Some(json!(4)));
    reconcile(&w, &key).await;
    assert_eq!(w.applies(&key), 2);
    assert_eq!(w.lock().infra[&key].state["terraform_data.var_size"], "4");
}

#[tokio::test]
async fn replan_plans_even_when_nothing_changed() {
    let w = world();
    let key = w.create(object("vpc", json!({"force": true})));
    reconcile(&w, &key).await;
    w.drift(&key, "terraform_data.a", "hand-edited");
    w.annotate(&key, annotations::REPLAN, "1");
    reconcile(&w, &key).await;
    assert_eq!(
        w.calls_of(&key, FakeOp::RefreshPlan),
        0,
        "no drift shortcut on re-plan"
    );
    assert_eq!(w.applies(&key), 2);
    assert_eq!(
        w.object(&key)
            .unwrap()
            .status
            .last_handled_replan_at
            .as_deref(),
        Some("1")
    );
}

#[tokio::test]
async fn health_checks_and_outputs_are_reported() {
    health_checks_and_outputs(false).await;
}

/// The same when the runner writes the outputs itself and gives back only the values the
/// health checks read.
#[tokio::test]
async fn health_checks_and_outputs_are_reported_when_the_runner_writes_them() {
    health_checks_and_outputs(true).await;
}

async fn health_checks_and_outputs(runner_writes: bool) {
    let w = world();
    w.lock().runner_writes = runner_writes;
    let key = w.create(object(
        "vpc",
        json!({
            "approvePlan": "auto",
            "writeOutputsToSecret": {"name": "out", "outputs": ["resource_count:count"]},
            "healthChecks": [{"name": "api", "type": "tcp", "address": "{{.resource_count}}.example:443"}]
        }),
    ));
    w.fail_next(
        FakeOp::Health,
        PortError::Unavailable("connection refused".into()),
    );
    reconcile(&w, &key).await;
    let (status, reason, message) = ready(&w, &key);
    assert_eq!((status, reason.as_str()), (False, "HealthChecksFailed"));
    assert!(message.contains("api (2.example:443)"), "{message}");
    assert_eq!(
        w.lock().output_secrets[&("team-a".into(), "out".into())],
        [("count".to_string(), json!(2))].into()
    );

    w.advance(Duration::from_secs(16));
    reconcile(&w, &key).await;
    assert_eq!(ready(&w, &key).0, True);
    assert_eq!(
        condition(&w, &key, ConditionType::HealthCheck).unwrap().1,
        "HealthChecksSucceeded"
    );
    assert_eq!(
        condition(&w, &key, ConditionType::Output).unwrap().1,
        "TerraformOutputsWritten"
    );
}

#[tokio::test]
async fn runner_quota_and_access_errors_have_their_own_reasons() {
    let w = world();
    let key = w.create(object("vpc", json!({"approvePlan": "auto"})));
    w.fail_next(
        FakeOp::Start,
        PortError::QuotaExhausted("pods: limited: 10".into()),
    );
    reconcile(&w, &key).await;
    assert_eq!(ready(&w, &key).1, "RunnerQuotaExhausted");
    w.fail_next(
        FakeOp::Resolve,
        PortError::AccessDenied("401 for https://git.example".into()),
    );
    w.advance(Duration::from_secs(16));
    reconcile(&w, &key).await;
    assert_eq!(ready(&w, &key).1, "AccessDenied");
}

#[tokio::test]
async fn a_source_that_does_not_exist_is_named_and_retried_at_the_interval() {
    let w = world();
    let key = w.create(object(
        "vpc",
        json!({"approvePlan": "auto", "interval": "10m", "retryInterval": "15s"}),
    ));
    w.fail_always(
        FakeOp::Resolve,
        PortError::NotFound(
            "git://git.example/nowhere: no such repository (repository not exported)".into(),
        ),
    );
    reconcile(&w, &key).await;
    let (status, reason, message) = ready(&w, &key);
    assert_eq!((status, reason.as_str()), (False, "SourceNotFound"));
    assert!(message.contains("no such repository"), "{message}");
    assert!(message.ends_with("(retry 1 in 10m)"), "{message}");
    // Not the quick backoff: no run (no second failure) before the interval.
    w.advance(Duration::from_secs(120));
    reconcile(&w, &key).await;
    assert_eq!(w.object(&key).unwrap().status.reconciliation_failures, 1);
    assert!(ready(&w, &key).2.ends_with("(retry 1 in 10m)"));
    // Someone creates it; the next run at the interval finds it.
    w.heal(FakeOp::Resolve);
    w.advance(Duration::from_secs(481));
    reconcile(&w, &key).await;
    assert_eq!(ready(&w, &key).1, "TerraformAppliedSucceed");
}

#[tokio::test]
async fn a_standing_approval_never_applies_a_plan_nobody_saw() {
    let w = world();
    // Pre-approved with the id a human computed from the commit: still reviewed first.
    let key = w.create(object(
        "vpc",
        json!({"approvePlan": "plan-main-1111111111", "vars": [{"name": "size", "value": 1}]}),
    ));
    reconcile(&w, &key).await;
    w.advance(Duration::from_secs(601));
    reconcile(&w, &key).await;
    assert_eq!(
        w.applies(&key),
        0,
        "an approval given before the plan existed does not count"
    );
    assert!(
        ready(&w, &key)
            .2
            .contains("was given before this plan was made"),
        "{}",
        ready(&w, &key).2
    );

    // Approving after seeing it (clear, then set again) applies.
    w.edit(&key, |s| s.approve_plan.clear());
    reconcile(&w, &key).await;
    w.edit(&key, |s| s.approve_plan = "plan-main-1111111111".into());
    reconcile(&w, &key).await;
    assert_eq!(w.applies(&key), 1);

    // Same revision, so the same plan id, but a variable changed: the old approval is not
    // an approval of the new plan.
    w.edit(&key, |s| s.vars[0].value = Some(json!(2)));
    reconcile(&w, &key).await;
    w.advance(Duration::from_secs(601));
    reconcile(&w, &key).await;
    assert_eq!(w.applies(&key), 1);
    assert_eq!(
        w.object(&key).unwrap().status.plan.pending,
        "plan-main-1111111111"
    );

    // Nor is it an approval of a drift-correcting re-plan.
    w.drift(&key, "terraform_data.a", "by hand");
    w.annotate(&key, annotations::REPLAN, "r1");
    reconcile(&w, &key).await;
    w.advance(Duration::from_secs(601));
    reconcile(&w, &key).await;
    assert_eq!(w.applies(&key), 1);
}

#[tokio::test]
async fn an_approved_plan_whose_apply_failed_is_applied_by_the_retry() {
    let w = world();
    let key = w.create(object("vpc", json!({})));
    reconcile(&w, &key).await;
    w.edit(&key, |s| s.approve_plan = "plan-main-1111111111".into());
    w.fail_next(
        FakeOp::Apply,
        PortError::Terraform("Error: throttled".into()),
    );
    reconcile(&w, &key).await;
    assert_eq!(ready(&w, &key).1, "TFExecApplyFailed");
    w.advance(Duration::from_secs(16));
    reconcile(&w, &key).await;
    assert_eq!(ready(&w, &key).1, "TerraformAppliedSucceed");
    assert_eq!(w.applies(&key), 2, "one failed apply, one retried");
}

/// Found by the property tests: a force-unlock requested for a lock that its holder released
/// meanwhile failed on every run and blocked the object (and its deletion) for good.
#[tokio::test]
async fn regression_unlock_of_an_already_released_lock_does_not_block() {
    let w = world();
    let key = w.create(object(
        "vpc",
        json!({"approvePlan": "auto", "destroyResourcesOnDeletion": true}),
    ));
    w.lock_state(&key, "lock-1", "crashed-runner");
    reconcile(&w, &key).await;
    assert_eq!(ready(&w, &key).1, "LockHeld");
    w.lock().infra.get_mut(&key).unwrap().lock = None; // the holder came back and released it
    w.annotate(&key, annotations::FORCE_UNLOCK, "lock-1");
    w.annotate(&key, annotations::RECONCILE, "1");
    reconcile(&w, &key).await;
    assert_eq!(ready(&w, &key).1, "TerraformAppliedSucceed");
    assert!(w.object(&key).unwrap().status.lock.pending.is_empty());
    let warned = w
        .lock()
        .events
        .iter()
        .any(|(_, e)| e.reason == Reason::ForceUnlockFailed);
    assert!(warned, "the failed unlock is still reported as an event");
    w.delete(&key);
    reconcile(&w, &key).await;
    assert!(w.object(&key).is_none());
}

#[tokio::test]
async fn deletion_with_destroy_of_an_object_that_never_applied_needs_no_runner() {
    let w = world();
    let key = w.create(object(
        "vpc",
        json!({"approvePlan": "auto", "destroyResourcesOnDeletion": true, "varsFrom": [{"kind": "Secret", "name": "gone"}]}),
    ));
    reconcile(&w, &key).await;
    assert_eq!(ready(&w, &key).1, "VarsGenerationFailed");
    let sessions = w.lock().sessions;
    w.delete(&key);
    w.advance(Duration::from_secs(16));
    reconcile(&w, &key).await;
    assert!(
        w.object(&key).is_none(),
        "nothing to destroy, so nothing holds the deletion"
    );
    assert_eq!(w.lock().sessions, sessions);
}

#[tokio::test]
async fn a_dependency_on_the_same_source_must_have_applied_the_same_revision() {
    let w = world();
    let net = w.create(object("net", json!({"approvePlan": "auto"})));
    let app = w.create(object(
        "app",
        json!({"approvePlan": "auto", "path": "app", "dependsOn": [{"name": "net"}]}),
    ));
    reconcile(&w, &net).await;
    w.publish(REPO, "main", SHA2, &[("terraform_data.a", "2")]);
    let report = reconcile(&w, &app).await;
    let (status, reason, message) = ready(&w, &app);
    assert_eq!((status, reason.as_str()), (Unknown, "DependencyNotReady"));
    assert!(
        message.contains(&format!("has not applied main@sha1:{SHA2}")),
        "{message}"
    );
    assert_eq!(w.lock().sessions, 1, "no runner for the waiting dependant");
    assert_eq!(report.requeue_after, Some(Duration::from_secs(15)));
    w.annotate(&net, annotations::RECONCILE, "new commit");
    reconcile(&w, &net).await;
    reconcile(&w, &app).await;
    assert_eq!(w.applies(&app), 1);
}

#[tokio::test]
async fn a_failed_status_write_ends_the_reconcile_without_leaving_a_runner() {
    let w = world();
    let key = w.create(object("vpc", json!({"approvePlan": "auto"})));
    // Writes: run started, revision resolved, runner started; the next one (after the plan)
    // fails while the runner is up.
    w.fail_after(
        FakeOp::WriteStatus,
        3,
        PortError::Unavailable("apiserver".into()),
    );
    let err = w.reconcile(&key).await.unwrap_err();
    assert!(
        err.to_string().contains("writing the status of team-a/vpc"),
        "{err}"
    );
    assert_eq!(w.lock().sessions, 1);
    assert_eq!(
        w.calls_of(&key, FakeOp::Plan),
        1,
        "the failure came after the plan"
    );
    assert_eq!(
        w.calls_of(&key, FakeOp::Cleanup),
        1,
        "the started runner is cleaned up"
    );
    // The next reconcile recovers: the apply runs and is recorded.
    reconcile(&w, &key).await;
    assert_eq!(ready(&w, &key).1, "TerraformAppliedSucceed");
}

#[test]
fn an_unknown_binary_is_refused_with_the_allowed_values() {
    let err = serde_json::from_value::<tfops_core::api::TerraformSpec>(json!({
        "sourceRef": {"kind": "GitRepository", "url": REPO},
        "runner": {"binary": "tofuu"}
    }))
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("tofuu") && err.contains("terraform") && err.contains("tofu"),
        "{err}"
    );
}

#[tokio::test]
async fn a_plan_without_changes_counts_as_applied_so_the_next_interval_checks_drift() {
    let w = world();
    let key = w.create(object("vpc", json!({"approvePlan": "auto"})));
    reconcile(&w, &key).await;
    w.edit(&key, |s| s.retry_interval = "20s".into()); // a new generation, same plan
    reconcile(&w, &key).await;
    assert_eq!(ready(&w, &key).1, "TerraformPlannedNoChanges");
    w.advance(Duration::from_secs(601));
    reconcile(&w, &key).await;
    assert_eq!(ready(&w, &key).1, "NoDrift");
    assert_eq!(w.applies(&key), 1);
}

#[tokio::test]
async fn a_run_writes_its_status_a_few_times_not_at_every_step() {
    let w = world();
    let key = w.create(object("vpc", json!({"approvePlan": "auto"})));
    let report = reconcile(&w, &key).await;
    let steps = report.records.len();
    let writes = w.lock().status_writes;
    // Run started, revision resolved, runner known, plan made, applied, outputs and the end of
    // the run: each changes what a user sees; fetch, setup and cleanup write nothing new.
    assert_eq!((steps, writes), (9, 6), "{:?}", report.records);
    // Nothing changed, nothing written.
    reconcile(&w, &key).await;
    assert_eq!(w.lock().status_writes, 6);
}

fn no_deletes(action: &str) -> tfops_core::policy::TerraformPolicy {
    serde_json::from_value(json!({
        "metadata": {"name": "keep-data", "namespace": "team-a"},
        "spec": {"rules": [{
            "name": "no-deletes", "scope": "Resource", "action": action,
            "expression": "!('delete' in change.actions)",
            "messageExpression": "change.address + ' would be deleted'"
        }]}
    }))
    .unwrap()
}

#[tokio::test]
async fn a_deny_policy_blocks_the_apply_even_in_auto_mode_and_names_the_resources() {
    let w = world();
    let key = w.create(object("vpc", json!({"approvePlan": "auto"})));
    reconcile(&w, &key).await;
    assert_eq!(w.applies(&key), 1);
    w.lock().policies.push(no_deletes("Deny"));
    w.publish(REPO, "main", SHA2, &[("terraform_data.a", "1")]); // b goes away
    w.advance(Duration::from_secs(601));
    reconcile(&w, &key).await;
    assert_eq!(w.applies(&key), 1, "no apply");
    let (status, reason, message) = ready(&w, &key);
    assert_eq!((status, reason.as_str()), (False, "ValidationFailed"));
    assert!(
        message
            .contains("keep-data/no-deletes: terraform_data.b would be deleted (terraform_data.b)"),
        "{message}"
    );
    let violations = w.object(&key).unwrap().status.policy_violations;
    assert_eq!(violations.len(), 1);
    assert_eq!(
        (
            violations[0].action.as_str(),
            violations[0].addresses.clone()
        ),
        ("Deny", vec!["terraform_data.b".to_string()])
    );

    // The policy is relaxed to a warning: the next (re)plan is applied and the warning kept.
    w.lock().policies = vec![no_deletes("Warn")];
    w.advance(Duration::from_secs(16));
    reconcile(&w, &key).await;
    assert_eq!(w.applies(&key), 2);
    assert_eq!(ready(&w, &key).1, "TerraformAppliedSucceed");
    assert_eq!(
        w.object(&key).unwrap().status.policy_violations[0].action,
        "Warn"
    );
    let warned =
        w.lock().events.iter().any(|(_, e)| {
            e.event_type == EventType::Warning && e.message.contains("would be deleted")
        });
    assert!(warned, "a Warn violation is an event");
}

#[tokio::test]
async fn a_broken_policy_never_silently_passes() {
    let w = world();
    let key = w.create(object("vpc", json!({"approvePlan": "auto"})));
    let broken: tfops_core::policy::TerraformPolicy = serde_json::from_value(json!({
        "metadata": {"name": "typo", "namespace": "team-a"},
        "spec": {"rules": [{"name": "r", "expression": "chnges.size() == 0"}]}
    }))
    .unwrap();
    w.lock().policies.push(broken);
    reconcile(&w, &key).await;
    assert_eq!(w.applies(&key), 0);
    let (_, reason, message) = ready(&w, &key);
    assert_eq!(reason, "ValidationFailed");
    assert!(message.contains("chnges"), "{message}");
}

#[tokio::test]
async fn a_broken_policy_only_blocks_the_objects_it_selects() {
    let w = world();
    let key = w.create(object("vpc", json!({"approvePlan": "auto"})));
    let broken: tfops_core::policy::TerraformPolicy = serde_json::from_value(json!({
        "metadata": {"name": "typo", "namespace": "team-a"},
        "spec": {"selector": {"tier": "prod"},
                 "rules": [{"name": "r", "expression": "chnges.size() == 0"}]}
    }))
    .unwrap();
    w.lock().policies.push(broken);
    reconcile(&w, &key).await;
    assert_eq!(w.applies(&key), 1, "vpc has no tier=prod label");
    let (_, reason, _) = ready(&w, &key);
    assert_ne!(reason, "ValidationFailed");
}
