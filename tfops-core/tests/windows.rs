//! Apply windows (`spec.applyWindows`) through the driver and the fakes: what waits, what a
//! user reads while it waits, and (as a property) that no apply ever starts outside a window.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use proptest::prelude::*;
use serde_json::{Value, json};
use tfops_core::api::{ApprovePlan, ObjectKey, annotations};
use tfops_core::conditions::{ConditionStatus::*, ConditionType};
use tfops_core::health::{HealthStatus, health};
use tfops_core::testing::{FakeOp, FakeWorld};

/// Weekdays 22:00 to 02:00 UTC. The fakes' clock starts on Sunday 2026-11-29, 12:00 UTC.
fn nightly() -> Value {
    json!([{"schedule": "0 22 * * 1-5", "duration": "4h"}])
}

fn at(s: &str) -> jiff::Timestamp {
    s.parse().unwrap()
}

fn advance_to(w: &FakeWorld, t: &str) {
    let now = w.lock().now;
    let ms = at(t).as_millisecond() - now.as_millisecond();
    w.advance(Duration::from_millis(u64::try_from(ms).unwrap()));
}

#[tokio::test]
async fn an_automatic_plan_waits_for_the_window_and_is_applied_when_it_opens() {
    let w = world();
    let key = w.create(object(
        "vpc",
        json!({"approvePlan": "auto", "applyWindows": nightly()}),
    ));
    let report = reconcile(&w, &key).await;
    assert_eq!(w.calls_of(&key, FakeOp::Plan), 1, "plans run at any time");
    assert_eq!(w.applies(&key), 0, "no apply outside the window");
    let (status, reason, message) = ready(&w, &key);
    assert_eq!((status, reason.as_str()), (Unknown, "ApplyWindowClosed"));
    assert!(
        message.contains("outside every allow window")
            && message.contains("2026-11-30T22:00:00Z")
            && message.contains("plan-main-1111111111"),
        "{message}"
    );
    let o = w.object(&key).unwrap();
    assert_eq!(health(&o).status, HealthStatus::Suspended);
    assert!(
        health(&o)
            .message
            .starts_with("waiting for an apply window: ")
    );
    // Back at the interval (sooner than the opening): a new revision may be planned meanwhile.
    assert_eq!(report.requeue_after, Some(Duration::from_secs(600)));

    // An interval later, still outside: planned again, still not applied.
    w.advance(Duration::from_secs(601));
    reconcile(&w, &key).await;
    assert_eq!(w.applies(&key), 0);
    assert_eq!(ready(&w, &key).1, "ApplyWindowClosed");

    // Monday 21:59:30: the run is not due yet, and the wait is until the opening.
    advance_to(&w, "2026-11-30T21:59:30Z");
    reconcile(&w, &key).await;
    let again = reconcile(&w, &key).await;
    assert!(again.records.is_empty(), "{:?}", again.records);
    assert!(again.requeue_after.unwrap() <= Duration::from_secs(30));

    // The window opens: the run is due at once and applies.
    advance_to(&w, "2026-11-30T22:00:00Z");
    reconcile(&w, &key).await;
    assert_eq!(w.applies(&key), 1);
    assert_eq!(ready(&w, &key).1, "TerraformAppliedSucceed");
}

#[tokio::test]
async fn an_approved_plan_waits_and_its_approval_still_counts_when_the_window_opens() {
    let w = world();
    let key = w.create(object("vpc", json!({"applyWindows": nightly()})));
    reconcile(&w, &key).await;
    assert_eq!(ready(&w, &key).1, "TerraformPlannedWithChanges");
    let pending = w
        .object(&key)
        .map(|o| o.status.plan.pending)
        .unwrap_or_default();
    w.annotate(&key, annotations::APPROVE, &format!("{pending}@t1"));
    w.annotate(&key, annotations::RECONCILE, "t1");
    reconcile(&w, &key).await;
    assert_eq!(w.applies(&key), 0);
    assert_eq!(ready(&w, &key).1, "ApplyWindowClosed");

    advance_to(&w, "2026-12-01T23:30:00Z");
    reconcile(&w, &key).await;
    assert_eq!(
        w.applies(&key),
        1,
        "the approval given outside the window counts"
    );
    assert_eq!(ready(&w, &key).1, "TerraformAppliedSucceed");
}

#[tokio::test]
async fn force_ignores_windows_and_a_deny_window_wins_over_an_allow_window() {
    let w = world();
    let forced = w.create(object(
        "forced",
        json!({"force": true, "applyWindows": nightly()}),
    ));
    reconcile(&w, &forced).await;
    assert_eq!(w.applies(&forced), 1);

    // Allowed all day, but Sundays are frozen.
    let frozen = w.create(object(
        "frozen",
        json!({"approvePlan": "auto", "applyWindows": [
            {"schedule": "0 0 * * *", "duration": "24h"},
            {"kind": "deny", "schedule": "0 0 * * 0", "duration": "24h", "timeZone": "UTC"},
        ]}),
    ));
    reconcile(&w, &frozen).await;
    assert_eq!(w.applies(&frozen), 0);
    let message = ready(&w, &frozen).2;
    assert!(
        message.contains("inside the deny window deny `0 0 * * 0` for 24h (UTC)")
            && message.contains("2026-11-30T00:00:00Z"),
        "{message}"
    );
}

#[tokio::test]
async fn the_destroy_of_a_deletion_waits_for_a_window_too() {
    let w = world();
    let key = w.create(object(
        "vpc",
        json!({"approvePlan": "auto", "destroyResourcesOnDeletion": true}),
    ));
    reconcile(&w, &key).await;
    assert_eq!(w.applies(&key), 1);
    w.edit(&key, |s| {
        s.apply_windows = serde_json::from_value(nightly()).unwrap();
    });
    w.delete(&key);
    reconcile(&w, &key).await;
    assert_eq!(w.applies(&key), 1, "no destroy outside the window");
    assert!(w.object(&key).is_some(), "the object waits, not released");
    assert_eq!(ready(&w, &key).1, "ApplyWindowClosed");

    advance_to(&w, "2026-11-30T22:10:00Z");
    reconcile(&w, &key).await;
    assert_eq!(w.applies(&key), 2, "destroyed in the window");
    assert!(w.object(&key).is_none(), "released after the destroy");
}

#[tokio::test]
async fn invalid_windows_stall_the_object_naming_each_field() {
    let w = world();
    let key = w.create(object(
        "vpc",
        json!({"applyWindows": [
            {"schedule": "0 22 * *", "duration": "4h"},
            {"schedule": "0 22 * * *", "duration": "4h", "timeZone": "Mars/Olympus"},
        ]}),
    ));
    reconcile(&w, &key).await;
    let stalled = condition(&w, &key, ConditionType::Stalled).unwrap();
    let (_, reason, message) = stalled;
    assert_eq!(reason, "InvalidSpec");
    assert!(
        message.contains("spec.applyWindows[0].schedule")
            && message.contains("spec.applyWindows[1].timeZone"),
        "{message}"
    );
    assert_eq!(w.calls_of(&key, FakeOp::Plan), 0);
}

/// The windows of the property below and the model of each: whether an apply may start at a
/// time, computed from the time's fields without cron or the implementation.
#[derive(Debug, Clone, Copy)]
enum ModelWindow {
    /// Allow, the first 20 minutes of every hour.
    EarlyInTheHour,
    /// Allow, 09:00 to 17:00 on weekdays, two hours east of UTC (`Etc/GMT-2`).
    OfficeHoursEast,
    /// Deny, minutes 30 to 44 of every hour.
    HalfPast,
}

impl ModelWindow {
    fn spec(self) -> Value {
        match self {
            Self::EarlyInTheHour => json!({"schedule": "0 * * * *", "duration": "20m"}),
            Self::OfficeHoursEast => {
                json!({"schedule": "0 9 * * 1-5", "duration": "8h", "timeZone": "Etc/GMT-2"})
            }
            Self::HalfPast => json!({"kind": "deny", "schedule": "30 * * * *", "duration": "15m"}),
        }
    }

    fn deny(self) -> bool {
        matches!(self, Self::HalfPast)
    }

    fn contains(self, t: jiff::Timestamp) -> bool {
        let secs = t.as_second();
        let minute = secs.div_euclid(60).rem_euclid(60);
        match self {
            Self::EarlyInTheHour => minute < 20,
            Self::HalfPast => (30..45).contains(&minute),
            Self::OfficeHoursEast => {
                let local = secs + 2 * 3600;
                let hour = local.div_euclid(3600).rem_euclid(24);
                // 1970-01-01 was a Thursday: day 0 → weekday 4 (Sunday 0).
                let weekday = (local.div_euclid(86_400) + 4).rem_euclid(7);
                (1..=5).contains(&weekday) && (9..17).contains(&hour)
            }
        }
    }
}

fn model_open(windows: &[ModelWindow], t: jiff::Timestamp) -> bool {
    let denied = windows.iter().any(|w| w.deny() && w.contains(t));
    let allows: Vec<_> = windows.iter().filter(|w| !w.deny()).collect();
    !denied && (allows.is_empty() || allows.iter().any(|w| w.contains(t)))
}

#[derive(Debug, Clone)]
enum Action {
    Reconcile,
    SetWindows(Vec<ModelWindow>),
    ToggleAuto,
    ToggleForce,
    Approve,
    NewRevision(u8),
    Advance(u64),
    Drift,
    Fail(FakeOp),
    SplitApply,
    CrashAfterApply,
    Delete,
}

fn action() -> impl Strategy<Value = Action> {
    let window = prop_oneof![
        Just(ModelWindow::EarlyInTheHour),
        Just(ModelWindow::OfficeHoursEast),
        Just(ModelWindow::HalfPast),
    ];
    prop_oneof![
        8 => Just(Action::Reconcile),
        2 => proptest::collection::vec(window, 0..3).prop_map(Action::SetWindows),
        1 => Just(Action::ToggleAuto),
        1 => Just(Action::ToggleForce),
        3 => Just(Action::Approve),
        2 => (0u8..4).prop_map(Action::NewRevision),
        4 => proptest::sample::select(&[60u64, 600, 1500, 3600, 4 * 3600, 26 * 3600][..])
            .prop_map(Action::Advance),
        1 => Just(Action::Drift),
        1 => proptest::sample::select(&[FakeOp::Plan, FakeOp::Apply, FakeOp::Start, FakeOp::Output][..])
            .prop_map(Action::Fail),
        1 => Just(Action::SplitApply),
        1 => Just(Action::CrashAfterApply),
        1 => Just(Action::Delete),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// No apply starts outside the windows of the spec (unless `spec.force`), and an object
    /// that says it waits for a window is indeed outside one.
    #[test]
    fn no_apply_ever_starts_outside_a_window(actions in proptest::collection::vec(action(), 1..40)) {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let w = world();
        // Time stands still within a reconcile, so the time of each apply is the time of the
        // decision to start it.
        w.lock().tick = Duration::ZERO;
        let key: ObjectKey = w.create(object(
            "vpc",
            json!({"approvePlan": "auto", "destroyResourcesOnDeletion": true}),
        ));
        let mut windows: Vec<ModelWindow> = Vec::new();
        let mut token = 0;
        for action in actions {
            match action {
                Action::Reconcile => {
                    let Some(before) = w.object(&key) else {
                        // Deleted and released: nothing more can apply.
                        break;
                    };
                    let applies = w.applies(&key);
                    let now = w.lock().now;
                    // A fault may fail the run (or the status write): judged by what it did.
                    let _ = rt.block_on(w.reconcile(&key));
                    if w.applies(&key) > applies {
                        prop_assert!(
                            before.spec.force || model_open(&windows, now),
                            "applied at {now} outside {windows:?}"
                        );
                    }
                    let Some(after) = w.object(&key) else { break };
                    let found = tfops_core::conditions::find(&after.status.conditions, ConditionType::Ready);
                    let (reason, message) = found.map(|c| (c.reason.clone(), c.message.clone())).unwrap_or_default();
                    if reason == "ApplyWindowClosed" && after.status.active_run.is_none() {
                        prop_assert!(!model_open(&windows, now), "says closed at {now} inside {windows:?}: {message}");
                    }
                    let automatic = ApprovePlan::parse(&before.spec.approve_plan) == ApprovePlan::Auto;
                    // (A driver that died mid-apply left Ready as it was: the next run takes it up.)
                    let crashed = after.status.active_run.is_some();
                    if automatic && !crashed && model_open(&windows, now) && before.status.reconciliation_failures == 0 {
                        prop_assert_ne!(reason.as_str(), "ApplyWindowClosed", "waits inside {:?} at {}", windows, now);
                    }
                }
                Action::SetWindows(list) => {
                    let specs: Vec<Value> = list.iter().map(|m| m.spec()).collect();
                    w.edit(&key, |s| s.apply_windows = serde_json::from_value(Value::Array(specs)).unwrap());
                    windows = list;
                }
                Action::ToggleAuto => w.edit(&key, |s| {
                    s.approve_plan = if s.approve_plan == "auto" { String::new() } else { "auto".into() };
                }),
                Action::ToggleForce => w.edit(&key, |s| s.force = !s.force),
                Action::Approve => {
                    token += 1;
                    let pending = w.object(&key).map(|o| o.status.plan.pending).unwrap_or_default();
                    w.annotate(&key, annotations::APPROVE, &format!("{pending}@t{token}"));
                    w.annotate(&key, annotations::RECONCILE, &format!("t{token}"));
                }
                Action::NewRevision(r) => w.publish(REPO, "main", &format!("{r}c").repeat(20), &[("terraform_data.a", &r.to_string())]),
                Action::Advance(secs) => w.advance(Duration::from_secs(secs)),
                Action::Drift => w.drift(&key, "terraform_data.drifted", "by hand"),
                Action::Fail(op) => w.fail_next(op, tfops_core::ports::PortError::Terraform("Error: injected".into())),
                Action::SplitApply => w.edit(&key, |s| {
                    s.runner.apply = match s.runner.apply {
                        Some(_) => None,
                        None => Some(serde_json::from_value(json!({"serviceAccountName": "tf-apply"})).unwrap()),
                    }
                }),
                Action::CrashAfterApply => w.crash_after_next_apply(),
                Action::Delete => w.delete(&key),
            }
        }
    }
}
