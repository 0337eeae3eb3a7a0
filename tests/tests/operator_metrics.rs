//! The metrics people alert on, scraped from the real manager process on the test cluster
//! while real runs happen: a plan awaiting approval and for how long (gone once approved, and
//! every series of an object gone once it is deleted), drift found and corrected, runs by
//! result, the runner queue while a ResourceQuota refuses runner Pods, and runner Pods while
//! one runs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::ResourceQuota;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;
use support::manager::Manager;
use support::operator::{CONFIG, Operator, pending, reading, ready_with, upstream_state};

/// The value of `series` (a name with its labels, as scraped) in `text`.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// Scrapes `/metrics` until `test` holds (at most 60 s; the metrics of a reconcile are
/// recorded just after its last status write); panics with the last scrape otherwise.
async fn scrape_until(m: &Manager, what: &str, test: impl Fn(&str) -> bool) -> String {
    let mut text = String::new();
    for _ in 0..600 {
        let (code, body) = m.get("/metrics").await;
        assert_eq!(code, 200);
        text = body;
        if test(&text) {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the metrics never showed {what}:\n{text}");
}

/// The sum of every series whose line starts with `prefix`.
fn sum(text: &str, prefix: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

fn of(metric: &str, name: &str) -> String {
    format!("{metric}{{namespace=\"team-a\",name=\"{name}\"}}")
}

async fn request_run(op: &Operator, name: &str, token: &str) {
    op.terraforms()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"infra.argocd.io/reconcile": token}}}),
            ),
        )
        .await
        .unwrap();
}

fn applied(t: &tfops_kube::Terraform) -> bool {
    ready_with(t, "TerraformAppliedSucceed") || ready_with(t, "TerraformOutputsWritten")
}

/// A plan waits: its gauge counts from when it was made, the count and the run say so; once
/// approved and applied the series goes; once the object is deleted none of its series stay.
async fn awaiting_approval(op: &Operator) {
    let m = op.manager();
    op.apply(&op.manifest("wait", json!({})));
    let t = op
        .wait_for("wait", "waited for approval", 120, |t| {
            ready_with(t, "TerraformPlannedWithChanges") && !pending(t).is_empty()
        })
        .await;
    let waiting = of("tfops_plan_awaiting_approval_seconds", "wait");
    let text = scrape_until(m, "the waiting plan", |t| {
        value(t, &waiting).is_some_and(|s| s > 0.0)
    })
    .await;
    assert_eq!(value(&text, "tfops_plans_awaiting_approval"), Some(1.0));
    assert!(
        value(
            &text,
            "tfops_runs_total{result=\"awaiting_approval\",reason=\"TerraformPlannedWithChanges\"}"
        )
        .is_some_and(|n| n >= 1.0),
        "{text}"
    );
    let not_ready = "tfops_object_not_ready_seconds{namespace=\"team-a\",name=\"wait\",reason=\"TerraformPlannedWithChanges\"}";
    assert!(value(&text, not_ready).is_some(), "{text}");
    op.approve("wait", &pending(&t), "t1").await;
    op.wait_for("wait", "applied the approved plan", 120, applied)
        .await;
    let text = scrape_until(m, "no waiting plan", |t| value(t, &waiting).is_none()).await;
    assert_eq!(value(&text, "tfops_plans_awaiting_approval"), Some(0.0));
    assert!(value(&text, not_ready).is_none(), "{text}");
    assert_eq!(value(&text, &of("tfops_object_drifted", "wait")), Some(0.0));
    assert!(
        sum(&text, "tfops_runs_total{result=\"applied\",") >= 1.0,
        "{text}"
    );
    op.terraforms()
        .delete("wait", &DeleteParams::default())
        .await
        .unwrap();
    scrape_until(m, "no series of the deleted object", |t| {
        !t.contains("name=\"wait\"")
    })
    .await;
}

/// Drift reported (`driftAction: Report`) is 1 until a drift check finds none.
async fn drift(op: &Operator) {
    let m = op.manager();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("upstream.tfstate");
    upstream_state(&file, "blue", 1);
    op.git.commit("drifting", &[("main.tf", &reading(&file))]);
    op.apply(&op.manifest(
        "drifty",
        json!({"approvePlan": "auto", "driftAction": "Report", "sourceRef": {"url": op.git.url("drifting")}}),
    ));
    op.wait_for("drifty", "applied", 120, applied).await;
    let drifted = of("tfops_object_drifted", "drifty");
    scrape_until(m, "no drift yet", |t| value(t, &drifted) == Some(0.0)).await;
    upstream_state(&file, "red", 2);
    request_run(op, "drifty", "1").await;
    op.wait_for("drifty", "reported the drift", 120, |t| {
        ready_with(t, "DriftDetected")
    })
    .await;
    let text = scrape_until(m, "the drift", |t| value(t, &drifted) == Some(1.0)).await;
    assert!(
        value(
            &text,
            "tfops_runs_total{result=\"drift_detected\",reason=\"DriftDetected\"}"
        )
        .is_some_and(|n| n >= 1.0),
        "{text}"
    );
    assert!(
        value(&text, "tfops_drift_detected_total").is_some_and(|n| n >= 1.0),
        "{text}"
    );
    // Put back as it was: the next check finds no drift.
    upstream_state(&file, "blue", 3);
    request_run(op, "drifty", "2").await;
    op.wait_for("drifty", "found no drift", 120, |t| {
        ready_with(t, "NoDrift")
    })
    .await;
    scrape_until(m, "the drift gone", |t| value(t, &drifted) == Some(0.0)).await;
}

/// A runner Pod counts while it runs (its apply waits for a file), and not once cleaned up.
async fn runner_pods(op: &Operator) {
    let m = op.manager();
    let dir = tempfile::tempdir().unwrap();
    let gate = dir.path().join("gate");
    let config = format!(
        "{CONFIG}\nresource \"terraform_data\" \"gated\" {{\n  provisioner \"local-exec\" {{\n    command = \"while [ ! -e '{}' ]; do sleep 0.1; done\"\n  }}\n}}\n",
        gate.display()
    );
    op.git.commit("gated", &[("main.tf", &config)]);
    op.apply(&op.manifest(
        "gated",
        json!({"approvePlan": "auto", "sourceRef": {"url": op.git.url("gated")}}),
    ));
    support::operator::applying(op, "gated").await;
    let running = "tfops_runner_pods{namespace=\"team-a\",role=\"plan\",phase=\"Running\"}";
    scrape_until(m, "the runner Pod", |t| value(t, running) == Some(1.0)).await;
    std::fs::write(&gate, "").unwrap();
    op.wait_for("gated", "applied", 120, applied).await;
    scrape_until(m, "no runner Pod", |t| value(t, running).is_none()).await;
}

/// While a ResourceQuota has no room for runner Pods the object is queued (no failed run),
/// and its wait shows; once the quota allows it, the queue is empty.
async fn queue(op: &Operator) {
    let m = op.manager();
    support::quota(&op.admin, "team-a", "pods", json!({"pods": "0"})).await;
    op.apply(&op.manifest("over", json!({"approvePlan": "auto"})));
    op.wait_for("over", "reported the quota", 60, |t| {
        ready_with(t, "RunnerQuotaExhausted")
    })
    .await;
    let queued = "tfops_runner_queue_objects{namespace=\"team-a\"}";
    let wait = "tfops_runner_queue_wait_seconds{namespace=\"team-a\"}";
    let text = scrape_until(m, "the queued object", |t| {
        value(t, queued) == Some(1.0) && value(t, wait).is_some_and(|s| s > 0.0)
    })
    .await;
    // Waiting is no failure: with no room at all the object did not even try (no run).
    assert!(
        value(
            &text,
            "tfops_runs_total{result=\"failed\",reason=\"RunnerQuotaExhausted\"}"
        )
        .is_none(),
        "{text}"
    );
    Api::<ResourceQuota>::namespaced(op.admin.clone(), "team-a")
        .delete("pods", &DeleteParams::default())
        .await
        .unwrap();
    op.wait_for("over", "applied once the quota allowed it", 120, applied)
        .await;
    scrape_until(m, "an empty queue", |t| {
        value(t, queued) == Some(0.0) && value(t, wait) == Some(0.0)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_metrics_people_alert_on_follow_real_runs() {
    let op = Operator::start_with_processes(&[]).await;
    awaiting_approval(&op).await;
    drift(&op).await;
    runner_pods(&op).await;
    queue(&op).await;
}
