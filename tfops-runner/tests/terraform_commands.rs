//! The command layer against real binaries, local backend: plan, show, apply, outputs, drift,
//! destroy, diagnostics and cancellation, each with Terraform and with OpenTofu.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use test_case::test_case;
use tfops_core::api::Binary;
use tfops_runner::exec::Stream;
use tfops_runner::terraform::{Io, PlanKind, Terraform, TfError};
use tokio::sync::{mpsc, watch};

fn tf(binary: Binary, dir: &std::path::Path) -> Terraform {
    let cache = dir.join(".plugin-cache");
    std::fs::create_dir_all(&cache).unwrap();
    Terraform {
        program: program(binary),
        dir: dir.to_path_buf(),
        env: BTreeMap::from([(
            "TF_PLUGIN_CACHE_DIR".to_string(),
            cache.display().to_string(),
        )]),
        grace: Duration::from_secs(10),
    }
}

fn io() -> (
    Io,
    mpsc::UnboundedReceiver<(Stream, String)>,
    watch::Sender<bool>,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    let (cancel_tx, cancel_rx) = watch::channel(false);
    (
        Io {
            log: tx,
            cancel: cancel_rx,
        },
        rx,
        cancel_tx,
    )
}

#[test_case(Binary::Terraform ; "terraform")]
#[test_case(Binary::Tofu ; "tofu")]
#[tokio::test]
async fn plan_show_apply_outputs_drift_destroy(binary: Binary) {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), "");
    let t = tf(binary, dir.path());
    let (io, mut log, _cancel) = io();
    t.init(&io).await.unwrap();
    t.select_workspace("staging", &io).await.unwrap();
    t.select_workspace("staging", &io).await.unwrap(); // selecting an existing one works too

    let plan = t.plan(PlanKind::Normal, &[], 0, &io).await.unwrap();
    assert!(plan.has_changes);
    assert_eq!((plan.add, plan.change, plan.destroy), (2, 0, 0));
    let text = t.show_text(&io).await.unwrap();
    assert!(text.contains("terraform_data.a will be created"), "{text}");
    assert!(
        t.show_json(&io)
            .await
            .unwrap()
            .contains("\"resource_changes\"")
    );
    t.apply(&io).await.unwrap();

    let outputs = t.outputs(&io).await.unwrap();
    assert_eq!(outputs["a"].0, serde_json::json!("a-1"));
    assert_eq!(outputs["color"].0, serde_json::json!("blue"));
    assert!(outputs["secret"].1, "sensitive flag kept");
    let inventory = t.inventory(&io).await.unwrap();
    let addresses: Vec<&str> = inventory.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(addresses, vec!["terraform_data.a", "terraform_data.b"]);

    let refresh = t.plan(PlanKind::RefreshOnly, &[], 0, &io).await.unwrap();
    assert!(
        !refresh.has_changes,
        "no drift right after apply: {refresh:?}"
    );

    // Real drift: what `b` reads changed behind Terraform's back.
    std::fs::write(
        dir.path().join("upstream.tfstate"),
        upstream_state("red", 2),
    )
    .unwrap();
    let refresh = t.plan(PlanKind::RefreshOnly, &[], 0, &io).await.unwrap();
    assert!(refresh.has_changes);
    assert_eq!(
        refresh.drifted,
        vec!["output.upstream_color".to_string()],
        "{refresh:?}"
    );
    let normal = t.plan(PlanKind::Normal, &[], 0, &io).await.unwrap();
    assert_eq!(
        (normal.add, normal.change, normal.destroy),
        (0, 1, 0),
        "b is updated: {normal:?}"
    );
    assert!(
        normal.drifted.is_empty(),
        "a normal plan reports changes, not drift"
    );

    t.destroy(&[], 0, &io).await.unwrap();
    assert!(t.inventory(&io).await.unwrap().is_empty());
    let mut saw_lines = false;
    while let Ok((_, line)) = log.try_recv() {
        assert!(
            !line.contains("s3cr3t"),
            "a sensitive value reached the log: {line}"
        );
        saw_lines = true;
    }
    assert!(saw_lines, "terraform's lines are streamed");
}

#[test_case(Binary::Terraform ; "terraform")]
#[test_case(Binary::Tofu ; "tofu")]
#[tokio::test]
async fn a_broken_configuration_reports_terraforms_diagnostic(binary: Binary) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("main.tf"),
        "resource \"terraform_data\" \"x\" {\n  nonsense = 1\n}\n",
    )
    .unwrap();
    let t = tf(binary, dir.path());
    let (io, _log, _cancel) = io();
    t.init(&io).await.unwrap();
    let err = t.plan(PlanKind::Normal, &[], 0, &io).await.unwrap_err();
    match err {
        TfError::Failed { diagnostic, .. } => {
            assert!(
                diagnostic.starts_with("Error: Unsupported argument"),
                "{diagnostic}"
            );
            assert!(diagnostic.contains("nonsense"), "{diagnostic}");
        }
        other => panic!("{other:?}"),
    }
}

/// An apply that runs `seconds` (a provisioner sleeping), once its provisioner has started: its
/// directory, the command layer, the running apply and its cancel switch.
async fn slow_apply(
    binary: Binary,
    seconds: u32,
) -> (
    tempfile::TempDir,
    Terraform,
    tokio::task::JoinHandle<Result<(), TfError>>,
    watch::Sender<bool>,
) {
    let dir = tempfile::tempdir().unwrap();
    write_config(
        dir.path(),
        &format!(
            "resource \"terraform_data\" \"slow\" {{\n  provisioner \"local-exec\" {{\n    command = \"sleep {seconds}\"\n  }}\n}}"
        ),
    );
    let t = tf(binary, dir.path());
    let (io, mut log, cancel) = io();
    t.init(&io).await.unwrap();
    t.plan(PlanKind::Normal, &[], 0, &io).await.unwrap();
    let apply = tokio::spawn({
        let t = t.clone();
        async move { t.apply(&io).await }
    });
    // Both binaries print the provisioner's start ("Provisioning with 'local-exec'...").
    while let Some((_, line)) = log.recv().await {
        if line.contains("Provisioning with 'local-exec'") {
            break;
        }
    }
    (dir, t, apply, cancel)
}

#[test_case(Binary::Terraform ; "terraform")]
#[test_case(Binary::Tofu ; "tofu")]
#[tokio::test]
async fn a_cancelled_apply_stops_and_says_so(binary: Binary) {
    let started = std::time::Instant::now();
    let (_dir, _t, apply, cancel) = slow_apply(binary, 60).await;
    cancel.send(true).unwrap();
    let result = apply.await.unwrap();
    assert!(matches!(result, Err(TfError::Cancelled)), "{result:?}");
    assert!(
        started.elapsed() < Duration::from_secs(40),
        "stopped well before the sleep ended"
    );
}

#[test_case(Binary::Terraform ; "terraform")]
#[test_case(Binary::Tofu ; "tofu")]
#[tokio::test]
async fn a_held_state_lock_is_reported_with_its_id_and_holder(binary: Binary) {
    let (_dir, t, holder, _cancel) = slow_apply(binary, 8).await;
    let (io2, _log2, _c2) = io();
    let err = t.plan(PlanKind::Normal, &[], 0, &io2).await.unwrap_err();
    match err {
        TfError::Locked { lock_id, holder } => {
            assert!(!lock_id.is_empty(), "lock id parsed");
            assert!(!holder.is_empty(), "holder parsed");
        }
        other => panic!("expected a lock error, got {other:?}"),
    }
    holder.await.unwrap().unwrap();
}
