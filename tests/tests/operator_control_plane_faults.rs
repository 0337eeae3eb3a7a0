//! The control plane itself failing under tfops: the kube-apiserver killed and started again,
//! etcd killed and started again on its data, and etcd paused, each while an apply is under
//! way. An outside witness (a ledger file the resource's provisioner appends to on the host,
//! outside Terraform's state) counts what Terraform really did: each approved plan is applied
//! exactly once, and the object converges. What the manager asks of the API server while it is
//! away is measured from its own request counter.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;
use support::operator::{CONFIG, Operator, applying, ready_with};

/// How long each fault lasts.
const OUTAGE: Duration = Duration::from_secs(10);

/// [`CONFIG`] with a resource of `stamp` whose create writes `start-<stamp>` to `ledger`, waits
/// for the file `gate`, then writes `done-<stamp>`.
fn witnessed(ledger: &Path, gate: &Path, stamp: &str) -> String {
    format!(
        "{CONFIG}\nresource \"terraform_data\" \"w\" {{\n  triggers_replace = \"{stamp}\"\n  provisioner \"local-exec\" {{\n    command = \"echo start-{stamp} >> '{ledger}'; while [ ! -e '{gate}' ]; do sleep 0.1; done; echo done-{stamp} >> '{ledger}'\"\n  }}\n}}\n",
        ledger = ledger.display(),
        gate = gate.display(),
    )
}

fn ledger_lines(ledger: &Path) -> Vec<String> {
    std::fs::read_to_string(ledger)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// How many creates of `stamp` the ledger saw.
fn creates(ledger: &Path, stamp: &str) -> usize {
    let line = format!("start-{stamp}");
    ledger_lines(ledger).iter().filter(|l| **l == line).count()
}

/// Waits (at most 120 s) until the ledger holds `line`.
async fn ledger_has(ledger: &Path, line: &str) {
    ledger_has_within(ledger, line, 120).await;
}

/// Waits (at most `seconds`) until the ledger holds `line`.
async fn ledger_has_within(ledger: &Path, line: &str, seconds: u64) {
    let start = Instant::now();
    while !ledger_lines(ledger).iter().any(|l| l == line) {
        assert!(
            start.elapsed() < Duration::from_secs(seconds),
            "the ledger never had {line}: {:?}",
            ledger_lines(ledger)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The manager's Kubernetes API requests so far: (all, failed to connect).
async fn requests(op: &Operator) -> (f64, f64) {
    let (_, text) = op.manager().get("/metrics").await;
    let mut all = 0.0;
    let mut unreached = 0.0;
    for line in text
        .lines()
        .filter(|l| l.starts_with("tfops_kube_api_requests_total{"))
    {
        let value: f64 = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        all += value;
        if line.contains("code=\"0\"") {
            unreached += value;
        }
    }
    (all, unreached)
}

/// One apply of `stamp` with `fault` striking while Terraform runs the provisioner, and
/// `heal` undoing it before the provisioner ends: the apply is recorded once, the ledger shows
/// one create, the object is Ready.
async fn apply_through(
    op: &mut Operator,
    ledger: &Path,
    stamp: &str,
    fault: &str,
) -> (Duration, f64, f64) {
    let gate = tempfile::tempdir().unwrap();
    let gate_file = gate.path().join("go");
    op.git.commit(
        "infra",
        &[("main.tf", &witnessed(ledger, &gate_file, stamp))],
    );
    let asked = Instant::now();
    op.apply(&op.manifest(
        "w",
        // A new value each time: a new generation runs at once (no poll to wait for).
        json!({"approvePlan": "auto", "interval": "1h",
               "vars": [{"name": "greeting", "value": stamp}]}),
    ));
    // Within 60 s, also right after the previous fault: the regression of the manager that
    // saw a change only 112-120 s after a kube-apiserver restart (kube-runtime's default
    // watch backoff, now tfops_kube::watch_backoff). Half that, so that a loaded machine of
    // two cores is not taken for the regression.
    ledger_has_within(ledger, &format!("start-{stamp}"), 60).await;
    applying(op, "w").await;
    println!(
        "{stamp}: from the spec's change to Terraform applying: {:.1} s",
        asked.elapsed().as_secs_f64()
    );
    let (before, unreached_before) = requests(op).await;
    let down = Instant::now();
    match fault {
        "kill kube-apiserver" => op.cluster.kill("kube-apiserver"),
        "kill etcd" => op.cluster.kill("etcd"),
        "pause etcd" => op.cluster.pause("etcd"),
        other => panic!("no such fault {other}"),
    }
    // The outage lasts 10 s (the fault's length, not a wait for anything): what the manager
    // asks meanwhile is read from its own counter.
    let mut during = (before, unreached_before);
    while down.elapsed() < OUTAGE {
        during = requests(op).await;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let away = down.elapsed();
    match fault {
        "kill kube-apiserver" => op.cluster.start_again("kube-apiserver").await.unwrap(),
        "kill etcd" => op.cluster.start_again("etcd").await.unwrap(),
        _ => op.cluster.resume("etcd"),
    }
    let back = Instant::now();
    std::fs::write(&gate_file, "").unwrap();
    let t = op
        .wait_for("w", "applied after the control plane came back", 180, |t| {
            ready_with(t, "TerraformAppliedSucceed")
        })
        .await;
    println!(
        "{fault}: from the control plane back to the object applied: {:.1} s",
        back.elapsed().as_secs_f64()
    );
    let message = support::operator::condition(&t, "Ready").unwrap().2;
    assert!(message.contains("applied plan"), "{message}");
    ledger_has(ledger, &format!("done-{stamp}")).await;
    let starts = creates(ledger, stamp);
    assert_eq!(
        starts,
        1,
        "applied more than once: {:?}",
        ledger_lines(ledger)
    );
    (away, during.0 - before, during.1 - unreached_before)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_apply_survives_the_api_server_and_etcd_killed_or_paused_and_runs_once() {
    let mut op = Operator::start_with_processes(&[]).await;
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("ledger");
    for (stamp, fault) in [
        ("r1", "kill kube-apiserver"),
        ("r2", "kill etcd"),
        ("r3", "pause etcd"),
    ] {
        let (away, asked, unreached) = apply_through(&mut op, &ledger, stamp, fault).await;
        println!(
            "{fault}: away {:.1} s; the manager's API requests meanwhile {asked} ({unreached} unreached, {:.1}/s)",
            away.as_secs_f64(),
            asked / away.as_secs_f64().max(0.001)
        );
    }
    // Three revisions, three creates, each once; nothing else ran.
    let lines = ledger_lines(&ledger);
    assert_eq!(
        lines,
        [
            "start-r1", "done-r1", "start-r2", "done-r2", "start-r3", "done-r3"
        ],
        "{lines:?}"
    );
}

/// Regression: after the kube-apiserver was away for 10 s and came back, the manager acted on
/// the next change to an object only 112–120 s later (its watches waited out kube-runtime's
/// default backoff, up to a minute a time, then a `410 Gone` for a resourceVersion the
/// restarted server no longer had). Now within seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_change_right_after_the_api_server_restarts_is_acted_on_within_seconds() {
    let mut op = Operator::start_with_processes(&[]).await;
    op.git.commit("infra", &[("main.tf", CONFIG)]);
    let spec = |greeting: &str| {
        json!({"approvePlan": "auto", "interval": "1h",
               "vars": [{"name": "greeting", "value": greeting}]})
    };
    op.apply(&op.manifest("w", spec("one")));
    op.wait_for("w", "applied the first", 120, |t| {
        ready_with(t, "TerraformAppliedSucceed")
    })
    .await;
    op.cluster.kill("kube-apiserver");
    // Away as long as in the test above (the outage's length, not a wait for anything).
    tokio::time::sleep(OUTAGE).await;
    op.cluster.start_again("kube-apiserver").await.unwrap();
    let back = Instant::now();
    op.apply(&op.manifest("w", spec("two")));
    // (`ready_with` holds only once the new generation is observed.)
    let t = op
        .wait_for("w", "applied the change", 60, |t| {
            ready_with(t, "TerraformAppliedSucceed")
        })
        .await;
    println!(
        "from the API server back to the change applied: {:.1} s",
        back.elapsed().as_secs_f64()
    );
    let message = support::operator::condition(&t, "Ready").unwrap().2;
    assert!(message.contains("applied plan"), "{message}");
}

/// Regression (found by the soak, seed 20261205): an apply whose end came while the
/// kube-apiserver was away could not write its state; the runner Pod went with Terraform's
/// `errored.tfstate`, the next run planned from the state before and created the resource a
/// second time. Now the runner pushes that state once the API server is back: one create.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_apply_ending_while_the_api_server_is_away_keeps_its_state_and_creates_once() {
    let mut op = Operator::start_with_processes(&[]).await;
    let dir = tempfile::tempdir().unwrap();
    let (ledger, gate) = (dir.path().join("ledger"), dir.path().join("go"));
    op.git
        .commit("infra", &[("main.tf", &witnessed(&ledger, &gate, "s1"))]);
    op.apply(&op.manifest(
        "w",
        json!({"approvePlan": "auto", "vars": [{"name": "greeting", "value": "s1"}]}),
    ));
    ledger_has(&ledger, "start-s1").await;
    op.cluster.kill("kube-apiserver");
    std::fs::write(&gate, "").unwrap();
    ledger_has(&ledger, "done-s1").await;
    // Terraform now ends and cannot write the state; the server stays away a while longer
    // (the outage's length, not a wait for anything).
    tokio::time::sleep(OUTAGE).await;
    op.cluster.start_again("kube-apiserver").await.unwrap();
    let settled = |t: &tfops_kube::Terraform| {
        let generation = t.metadata.generation.unwrap_or_default();
        t.status.as_ref().is_some_and(|s| {
            s.observed_generation >= generation
                && s.active_run.is_none()
                && s.conditions.iter().any(|c| {
                    c.type_ == "Ready" && c.status == tfops_core::conditions::ConditionStatus::True
                })
        })
    };
    op.wait_for("w", "Ready after the API server came back", 180, settled)
        .await;
    // A fresh plan from the state as the backend holds it: nothing to create.
    let runs = runs_of(&op, "w").await;
    op.terraforms()
        .patch(
            "w",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"annotations": {
                "infra.argocd.io/replan": "again",
                "infra.argocd.io/reconcile": "again",
            }}})),
        )
        .await
        .unwrap();
    op.wait_for_runs("w", runs + 1).await;
    let t = op.wait_for("w", "re-planned", 120, settled).await;
    let starts = creates(&ledger, "s1");
    assert_eq!(
        starts,
        1,
        "created again: {:?} {t:?}",
        ledger_lines(&ledger)
    );
}

/// How many runs the history of `name` (in `team-a`) holds.
async fn runs_of(op: &Operator, name: &str) -> usize {
    let maps: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(op.admin.clone(), "team-a");
    maps.get_opt(&tfops_kube::history::history_name(name))
        .await
        .unwrap()
        .and_then(|m| m.data?.get("runs.json").cloned())
        .and_then(|j| serde_json::from_str::<Vec<serde_json::Value>>(&j).ok())
        .map_or(0, |runs| runs.len())
}
