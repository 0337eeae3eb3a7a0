//! What one object's drift check costs on the real control plane (etcd, kube-apiserver,
//! kube-controller-manager) with its runner Pod as a podman container of the runner image,
//! broken down by phase from what the cluster and the manager record: the request seen, the
//! runner Pod created, scheduled, its container running, Ready, the runner connected, the
//! upload and `init`, the `plan -refresh-only`, the status written, the Pod deleted and gone.
//! Twice: with a Pod per run (the default) and with the Pod kept (`runner.alwaysCleanup:
//! false`). Beside them, the floor: `podman run --rm` of the runner image, and `terraform init`
//! plus `plan -refresh-only` of the same configuration run directly.
//!
//!     TFOPS_RUNNER_IMAGE=… cargo bench -p tests --bench drift_check   # TFOPS_BENCH_SAMPLES=20
//!
//! The manager is `tfops-manager`'s code built with the benchmark (`manager-process`, the bench
//! profile); the runner is what the image holds (`scripts/build-images` builds release
//! binaries by default). It prints Markdown tables: medians, with the fastest and slowest.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../tests/support/mod.rs"]
mod support;

mod floor;
mod phases;
mod throughput;

use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use support::operator::{Operator, ready_with};

use phases::Check;

fn main() {
    let number = |name: &str, default: usize| {
        std::env::var(name)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default)
    };
    let samples = number("TFOPS_BENCH_SAMPLES", 10);
    let part = std::env::var("TFOPS_BENCH_PART").unwrap_or_default();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    let image = support::runner_image();
    if part != "throughput" {
        println!("drift_check: {samples} samples per kind, runner image {image}");
        let mut floor = floor::measure(&image, samples);
        let (fresh, _) = runtime.block_on(checks(samples, true));
        let (kept, direct_kubernetes) = runtime.block_on(checks(samples, false));
        floor.direct_kubernetes = direct_kubernetes;
        phases::print(&fresh, &kept, &floor);
    }
    if part != "phases" {
        let (objects, rounds) = (
            number("TFOPS_BENCH_OBJECTS", 12),
            number("TFOPS_BENCH_ROUNDS", 2),
        );
        println!("\n{objects} objects, all checked at once, {rounds} rounds:\n");
        println!("| `--concurrent` | drift checks per minute | objects at a 10-minute interval |");
        println!("| ---: | ---: | ---: |");
        for concurrent in [2, 4, 8] {
            let rate = runtime.block_on(throughput::per_minute(objects, concurrent, rounds));
            println!("| {concurrent} | {rate:.0} | {:.0} |", rate * 10.0);
        }
    }
}

/// `samples` drift checks of one object, each asked with the reconcile annotation and ended
/// when its run is recorded; `cleanup`: a Pod per run, else the Pod kept. With the Pod kept,
/// also the direct commands with their state in this cluster ([`floor::direct`]).
async fn checks(samples: usize, cleanup: bool) -> (Vec<Check>, Vec<Duration>) {
    let op = Operator::start_in_containers().await;
    let mut spec = json!({"approvePlan": "auto", "interval": "1h"});
    if !cleanup {
        spec["runner"] = json!({"alwaysCleanup": false});
    }
    op.apply(&op.manifest("checked", spec));
    op.wait_for("checked", "became Ready", 240, |t| {
        ready_with(t, "TerraformAppliedSucceed")
    })
    .await;
    op.wait_for_runs("checked", 1).await;
    // The first run's Pod goes before the first check.
    let pods = phases::watch_pods(op.admin.clone());
    let mut done = Vec::new();
    for i in 0..samples {
        let before = newest(&op).await;
        let asked = jiff::Timestamp::now();
        op.terraforms()
            .patch(
                "checked",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {
                    tfops_core::api::annotations::RECONCILE: format!("bench-{i}")
                }}})),
            )
            .await
            .unwrap();
        let recorded = recorded(&op, before.as_deref()).await;
        // The Pod's deletion is seen after the run is recorded: give it a moment to be gone.
        if cleanup {
            pods.wait_gone(Duration::from_secs(30)).await;
        }
        let log = op.manager().log.lock().unwrap().clone();
        done.push(Check::from_records(
            asked,
            recorded,
            &log,
            &pods.since(asked),
            cleanup,
        ));
    }
    let direct_kubernetes = if cleanup {
        Vec::new()
    } else {
        let kubeconfig = op.kubeconfig.clone();
        tokio::task::spawn_blocking(move || floor::direct(samples, Some(&kubeconfig)))
            .await
            .unwrap()
    };
    (done, direct_kubernetes)
}

/// The newest run of the object's history (the manager records a run just after its last
/// status write), as JSON text.
async fn newest(op: &Operator) -> Option<String> {
    let maps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(op.admin.clone(), "team-a");
    let name = tfops_kube::history::history_name("checked");
    maps.get_opt(&name)
        .await
        .ok()
        .flatten()
        .and_then(|m| m.data?.get("runs.json").cloned())
        .and_then(|j| serde_json::from_str::<Vec<serde_json::Value>>(&j).ok())
        .and_then(|runs| runs.first().map(ToString::to_string))
}

/// Waits until the history's newest run is another than `before`; the time it was seen.
async fn recorded(op: &Operator, before: Option<&str>) -> jiff::Timestamp {
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        if newest(op).await.as_deref() != before {
            return jiff::Timestamp::now();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the drift check was never recorded"
        );
        // Polled: the end is known to within this much.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
