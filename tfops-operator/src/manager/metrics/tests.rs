//! The metrics as a scrape shows them after reconciles reported as the driver reports them,
//! at a clock the test sets.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use tfops_core::api::{ObjectKey, TerraformStatus};
use tfops_core::conditions::{Condition, ConditionStatus, Reason};
use tfops_core::ports::PlanSummary;
use tfops_core::reconcile::{Outcome, Record, RunReport, StepFailure, StepKind};
use tfops_kube::controller::ReconcileObserver;

use super::Metrics;

/// Seconds after the epoch of the test's clock.
const T0: i64 = 1_800_000_000;

fn at(seconds: i64) -> jiff::Timestamp {
    jiff::Timestamp::from_second(T0 + seconds).unwrap()
}

/// Metrics whose clock reads `now` (seconds after [`T0`]).
fn metrics() -> (Metrics, Arc<AtomicI64>) {
    let now = Arc::new(AtomicI64::new(0));
    let clock = now.clone();
    let m = Metrics::with_clock(Arc::new(move || at(clock.load(Ordering::Relaxed))));
    (m, now)
}

fn ok(step: StepKind, seconds: i64, outcome: Outcome) -> Record {
    Record {
        step,
        at: at(seconds),
        result: Ok(outcome),
    }
}

fn failed(step: StepKind, seconds: i64, reason: Reason) -> Record {
    Record {
        step,
        at: at(seconds),
        result: Err(StepFailure {
            reason,
            message: "refused".into(),
            lock: None,
            lock_holder_gone: false,
        }),
    }
}

fn planned(seconds: i64) -> Record {
    ok(
        StepKind::Plan,
        seconds,
        Outcome::Planned {
            has_changes: true,
            summary: PlanSummary::default(),
            digest: "d".into(),
            violations: Vec::new(),
        },
    )
}

/// A report whose status has `Ready` at `status` and `reason` since `since` seconds.
fn report(records: Vec<Record>, status: ConditionStatus, reason: Reason, since: i64) -> RunReport {
    let status = TerraformStatus {
        conditions: vec![Condition {
            type_: "Ready".into(),
            status,
            reason: reason.as_str().into(),
            message: String::new(),
            last_transition_time: at(since),
            observed_generation: 1,
        }],
        ..Default::default()
    };
    RunReport {
        records,
        requeue_after: None,
        status,
        output_tail: String::new(),
    }
}

fn awaiting(records: Vec<Record>, since: i64) -> RunReport {
    let mut r = report(
        records,
        ConditionStatus::Unknown,
        Reason::TerraformPlannedWithChanges,
        since,
    );
    r.status.plan.pending = "plan-main-0123456789".into();
    r
}

fn applied(seconds: i64) -> RunReport {
    report(
        vec![ok(StepKind::Apply, seconds, Outcome::Applied)],
        ConditionStatus::True,
        Reason::TerraformAppliedSucceed,
        seconds,
    )
}

fn feed(m: &Metrics, name: &str, r: &RunReport) {
    m.reconciled(&key(name), Duration::from_millis(5), Ok(r));
}

fn key(name: &str) -> ObjectKey {
    let (ns, name) = name.split_once('/').unwrap_or(("team-a", name));
    ObjectKey::new(ns, name)
}

/// The value of the series `series` (name and labels as scraped), `None` when absent.
fn value(m: &Metrics, series: &str) -> Option<f64> {
    m.encode().lines().find_map(|l| {
        let rest = l.strip_prefix(series)?.strip_prefix(' ')?;
        rest.parse().ok()
    })
}

fn waiting_series(name: &str) -> String {
    format!("tfops_plan_awaiting_approval_seconds{{namespace=\"team-a\",name=\"{name}\"}}")
}

#[test]
fn a_plan_waits_for_approval_from_when_it_was_made_until_it_is_applied() {
    let (m, now) = metrics();
    // The run began at 0 (Ready went Unknown then); the plan was made at 40.
    feed(&m, "app", &awaiting(vec![planned(40)], 0));
    now.store(3640, Ordering::Relaxed);
    assert_eq!(value(&m, &waiting_series("app")), Some(3600.0));
    assert_eq!(value(&m, "tfops_plans_awaiting_approval"), Some(1.0));
    assert_eq!(
        value(
            &m,
            "tfops_runs_total{result=\"awaiting_approval\",reason=\"TerraformPlannedWithChanges\"}"
        ),
        Some(1.0)
    );
    // Re-planned at the next interval (the same or a new plan): still waiting since 40.
    feed(&m, "app", &awaiting(vec![planned(3600)], 0));
    now.store(7240, Ordering::Relaxed);
    assert_eq!(value(&m, &waiting_series("app")), Some(7200.0));
    // Approved and applied: the series goes, the count drops.
    feed(&m, "app", &applied(7300));
    assert_eq!(value(&m, &waiting_series("app")), None);
    assert_eq!(value(&m, "tfops_plans_awaiting_approval"), Some(0.0));
    assert_eq!(
        value(
            &m,
            "tfops_runs_total{result=\"applied\",reason=\"TerraformAppliedSucceed\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        value(&m, "tfops_objects{reason=\"TerraformAppliedSucceed\"}"),
        Some(1.0)
    );
}

#[test]
fn after_a_restart_a_waiting_plan_counts_from_readys_transition() {
    let (m, now) = metrics();
    // Nothing due: the first reconcile of this process performs no plan.
    feed(
        &m,
        "app",
        &awaiting(vec![ok(StepKind::Done, 50, Outcome::CleanedUp)], 10),
    );
    now.store(100, Ordering::Relaxed);
    assert_eq!(value(&m, &waiting_series("app")), Some(90.0));
    // planOnly: a plan with changes that is never applied waits for nobody.
    let mut plan_only = report(
        vec![planned(20)],
        ConditionStatus::True,
        Reason::TerraformPlannedWithChanges,
        20,
    );
    plan_only.status.plan.pending = "plan-main-0123456789".into();
    feed(&m, "only", &plan_only);
    assert_eq!(value(&m, &waiting_series("only")), None);
    assert_eq!(
        value(
            &m,
            "tfops_runs_total{result=\"planned\",reason=\"TerraformPlannedWithChanges\"}"
        ),
        Some(1.0)
    );
}

#[test]
fn drift_is_one_until_corrected_and_every_object_has_the_series() {
    let (m, _) = metrics();
    let drifted = |seconds| {
        report(
            vec![ok(
                StepKind::DetectDrift,
                seconds,
                Outcome::DriftChecked {
                    drifted: vec!["aws_s3_bucket.b".into()],
                },
            )],
            ConditionStatus::False,
            Reason::DriftDetected,
            seconds,
        )
    };
    feed(&m, "app", &drifted(10));
    feed(&m, "calm", &applied(10));
    let series =
        |name: &str| format!("tfops_object_drifted{{namespace=\"team-a\",name=\"{name}\"}}");
    assert_eq!(value(&m, &series("app")), Some(1.0));
    assert_eq!(value(&m, &series("calm")), Some(0.0));
    assert_eq!(value(&m, "tfops_drift_detected_total"), Some(1.0));
    assert_eq!(
        value(
            &m,
            "tfops_runs_total{result=\"drift_detected\",reason=\"DriftDetected\"}"
        ),
        Some(1.0)
    );
    // A plan made to correct it waits for approval: still drifted.
    let mut correcting = awaiting(vec![planned(30)], 30);
    correcting.status.plan.is_drift_detection_plan = true;
    feed(&m, "app", &correcting);
    assert_eq!(value(&m, &series("app")), Some(1.0));
    let no_drift = report(
        vec![ok(
            StepKind::DetectDrift,
            40,
            Outcome::DriftChecked { drifted: vec![] },
        )],
        ConditionStatus::True,
        Reason::NoDrift,
        40,
    );
    feed(&m, "app", &no_drift);
    assert_eq!(value(&m, &series("app")), Some(0.0));
    assert_eq!(
        value(
            &m,
            "tfops_runs_total{result=\"no_changes\",reason=\"NoDrift\"}"
        ),
        Some(1.0)
    );
}

#[test]
fn the_runner_queue_counts_objects_the_quota_refused_and_their_longest_wait() {
    let (m, now) = metrics();
    let refused = |seconds, since| {
        report(
            vec![failed(
                StepKind::StartRunner,
                seconds,
                Reason::RunnerQuotaExhausted,
            )],
            // Waiting, not failed: the decision writes Ready=Unknown for the queue.
            ConditionStatus::Unknown,
            Reason::RunnerQuotaExhausted,
            since,
        )
    };
    // Ready was already Unknown (a first run) since 0: the wait is from the refusal.
    feed(&m, "q/one", &refused(100, 0));
    feed(&m, "q/two", &refused(200, 200));
    feed(&m, "team-a/idle", &applied(5));
    now.store(400, Ordering::Relaxed);
    assert_eq!(
        value(&m, "tfops_runner_queue_objects{namespace=\"q\"}"),
        Some(2.0)
    );
    assert_eq!(
        value(&m, "tfops_runner_queue_wait_seconds{namespace=\"q\"}"),
        Some(300.0)
    );
    assert_eq!(
        value(&m, "tfops_runner_queue_objects{namespace=\"team-a\"}"),
        Some(0.0)
    );
    // Retried and refused again: the wait goes on from the first refusal.
    feed(&m, "q/one", &refused(350, 0));
    assert_eq!(
        value(&m, "tfops_runner_queue_wait_seconds{namespace=\"q\"}"),
        Some(300.0)
    );
    assert_eq!(
        value(
            &m,
            "tfops_runs_total{result=\"waiting\",reason=\"RunnerQuotaExhausted\"}"
        ),
        Some(3.0)
    );
    let not_ready = "tfops_object_not_ready_seconds{namespace=\"q\",name=\"one\",reason=\"RunnerQuotaExhausted\"}";
    assert_eq!(value(&m, not_ready), Some(400.0));
    // Both got a runner Pod: nothing waits.
    feed(&m, "q/one", &applied(390));
    feed(&m, "q/two", &applied(395));
    assert_eq!(
        value(&m, "tfops_runner_queue_objects{namespace=\"q\"}"),
        Some(0.0)
    );
    assert_eq!(
        value(&m, "tfops_runner_queue_wait_seconds{namespace=\"q\"}"),
        Some(0.0)
    );
    assert_eq!(value(&m, not_ready), None);
}

#[test]
fn a_deleted_object_leaves_no_series() {
    let (m, _) = metrics();
    feed(&m, "app", &awaiting(vec![planned(10)], 0));
    feed(&m, "other", &applied(10));
    assert!(m.encode().contains("name=\"app\""));
    // Its last reconcile removes the finalizer: no reconcile follows it.
    let mut released = report(
        vec![
            ok(
                StepKind::DeletePlansAndOutputs,
                19,
                Outcome::PlansAndOutputsDeleted,
            ),
            ok(StepKind::RemoveFinalizer, 20, Outcome::FinalizerRemoved),
        ],
        ConditionStatus::Unknown,
        Reason::Finalizing,
        20,
    );
    released.status.plan.pending = "plan-main-0123456789".into();
    feed(&m, "app", &released);
    let text = m.encode();
    assert!(!text.contains("name=\"app\""), "{text}");
    assert_eq!(value(&m, "tfops_plans_awaiting_approval"), Some(0.0));
    assert_eq!(
        value(&m, "tfops_objects{reason=\"TerraformPlannedWithChanges\"}"),
        None
    );
    assert_eq!(
        value(
            &m,
            "tfops_runs_total{result=\"deleted\",reason=\"Finalizing\"}"
        ),
        Some(1.0)
    );
    // Found gone (deleted while this manager was not looking, or moved to another shard).
    m.deleted(&key("other"));
    let text = m.encode();
    assert!(!text.contains("name=\"other\""), "{text}");
    assert_eq!(
        value(&m, "tfops_objects{reason=\"TerraformAppliedSucceed\"}"),
        None
    );
}

#[test]
fn runs_are_counted_by_result_and_a_reconcile_that_ran_nothing_is_no_run() {
    let (m, _) = metrics();
    feed(
        &m,
        "idle",
        &report(
            vec![ok(StepKind::Done, 1, Outcome::CleanedUp)],
            ConditionStatus::True,
            Reason::TerraformAppliedSucceed,
            0,
        ),
    );
    feed(
        &m,
        "dep",
        &report(
            vec![ok(
                StepKind::ResolveSource,
                1,
                Outcome::Fetched {
                    sha256: String::new(),
                },
            )],
            ConditionStatus::False,
            Reason::DependencyNotReady,
            1,
        ),
    );
    // An apply whose health checks failed afterwards failed.
    let mut unhealthy = applied(2);
    unhealthy.status.conditions[0].status = ConditionStatus::False;
    unhealthy.status.conditions[0].reason = Reason::HealthChecksFailed.as_str().into();
    feed(&m, "sick", &unhealthy);
    let text = m.encode();
    let mut runs: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("tfops_runs_total"))
        .collect();
    // A family's series come in no set order.
    runs.sort_unstable();
    assert_eq!(
        runs,
        [
            "tfops_runs_total{result=\"failed\",reason=\"HealthChecksFailed\"} 1",
            "tfops_runs_total{result=\"waiting\",reason=\"DependencyNotReady\"} 1",
        ],
        "{text}"
    );
    assert_eq!(
        value(&m, "tfops_reconciles_total{result=\"success\"}"),
        Some(3.0)
    );
}

#[test]
fn a_reconcile_under_way_shows_how_long_it_has_run_until_it_ends() {
    let (m, now) = metrics();
    let series = "tfops_reconcile_in_progress_seconds{namespace=\"team-a\",name=\"vpc\"}";
    assert_eq!(
        value(&m, "tfops_longest_reconcile_in_progress_seconds"),
        Some(0.0)
    );
    m.started(&key("vpc"));
    now.store(10, Ordering::Relaxed);
    m.started(&key("dns"));
    now.store(7200, Ordering::Relaxed);
    assert_eq!(value(&m, series), Some(7200.0));
    assert_eq!(
        value(&m, "tfops_longest_reconcile_in_progress_seconds"),
        Some(7200.0)
    );
    let stopped = report(
        vec![failed(StepKind::Apply, 7200, Reason::TerraformTimedOut)],
        ConditionStatus::False,
        Reason::TerraformTimedOut,
        7200,
    );
    feed(&m, "vpc", &stopped);
    assert_eq!(value(&m, series), None, "gone once it ended");
    assert_eq!(
        value(&m, "tfops_longest_reconcile_in_progress_seconds"),
        Some(7190.0)
    );
    assert_eq!(
        value(
            &m,
            "tfops_runs_total{result=\"failed\",reason=\"TerraformTimedOut\"}"
        ),
        Some(1.0),
        "a run stopped at its timeout is counted by its reason"
    );
    m.deleted(&key("dns"));
    assert_eq!(
        value(&m, "tfops_longest_reconcile_in_progress_seconds"),
        Some(0.0)
    );
}
