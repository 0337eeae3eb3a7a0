//! Apply windows on the real control plane: an automatic plan made outside its window waits,
//! saying when the window opens, and is applied when it opens (the requeue for the opening,
//! not the hour-long interval, brings it back); a window that never opens holds the apply
//! until `spec.force` says otherwise.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::json;
use support::operator::{Operator, condition, ready_with};

/// The first whole minute at least 45 s from now: time for the first plan to be made and
/// seen waiting before the window opens.
fn next_opening() -> jiff::Timestamp {
    let soon = jiff::Timestamp::now().as_second() + 45;
    let minute = (soon + 59).div_euclid(60) * 60;
    jiff::Timestamp::from_second(minute).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn applies_wait_for_their_window_and_start_when_it_opens() {
    let op = Operator::start().await;
    let opens = next_opening();
    let (minute, hour) = (
        opens.as_second().div_euclid(60).rem_euclid(60),
        opens.as_second().div_euclid(3600).rem_euclid(24),
    );
    let schedule = format!("{minute} {hour} * * *");
    op.apply(&op.manifest(
        "nightly",
        json!({"approvePlan": "auto", "applyWindows": [
            {"schedule": schedule, "duration": "10m", "timeZone": "UTC"},
        ]}),
    ));
    // Always closed: a deny window every minute for a minute.
    op.apply(&op.manifest(
        "frozen",
        json!({"approvePlan": "auto", "applyWindows": [
            {"kind": "deny", "schedule": "* * * * *", "duration": "1m"},
        ]}),
    ));

    let t = op
        .wait_for("nightly", "waited for its window", 120, |t| {
            ready_with(t, "ApplyWindowClosed")
        })
        .await;
    let (status, _, message) = condition(&t, "Ready").unwrap();
    assert_eq!(status, "Unknown");
    assert!(
        message.contains("outside every allow window") && message.contains(&opens.to_string()),
        "{message}"
    );
    let s = t.status.as_ref().unwrap();
    assert!(
        s.last_applied_revision.is_none(),
        "applied outside the window"
    );
    assert!(s.last_apply_started_at.is_none());
    assert!(
        jiff::Timestamp::now() < opens,
        "the window opened before the plan waited"
    );

    let t = op
        .wait_for("nightly", "applied when the window opened", 240, |t| {
            ready_with(t, "TerraformAppliedSucceed")
        })
        .await;
    let started = t.status.as_ref().unwrap().last_apply_started_at.unwrap();
    assert!(
        started >= opens,
        "the apply started at {started}, before {opens}"
    );

    let t = op
        .wait_for("frozen", "held by its deny window", 60, |t| {
            ready_with(t, "ApplyWindowClosed")
        })
        .await;
    let (_, _, message) = condition(&t, "Ready").unwrap();
    assert!(
        message.contains("inside the deny window deny `* * * * *` for 1m (UTC)")
            && message.contains("no window opens before"),
        "{message}"
    );
    assert!(t.status.as_ref().unwrap().last_apply_started_at.is_none());
    // spec.force ignores windows.
    op.apply(&op.manifest(
        "frozen",
        json!({"approvePlan": "auto", "force": true, "applyWindows": [
            {"kind": "deny", "schedule": "* * * * *", "duration": "1m"},
        ]}),
    ));
    op.wait_for("frozen", "applied by force", 120, |t| {
        ready_with(t, "TerraformAppliedSucceed")
    })
    .await;
}
