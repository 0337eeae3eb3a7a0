//! Plans and outputs are removed by what was written: renaming the outputs Secret or changing
//! the workspace leaves nothing behind, and deletion removes what is recorded. Each holds
//! both when the driver writes through its stores and when the runner writes them itself (as
//! runner Pods do).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::json;

fn secrets(w: &tfops_core::testing::FakeWorld) -> Vec<String> {
    w.lock()
        .output_secrets
        .keys()
        .map(|(_, n)| n.clone())
        .collect()
}

#[tokio::test]
async fn a_renamed_or_removed_outputs_secret_is_deleted() {
    renamed_or_removed_outputs(false).await;
    renamed_or_removed_outputs(true).await;
}

async fn renamed_or_removed_outputs(runner_writes: bool) {
    let w = world();
    w.lock().runner_writes = runner_writes;
    let key = w.create(object(
        "vpc",
        json!({"approvePlan": "auto", "writeOutputsToSecret": {"name": "vpc-out"}}),
    ));
    reconcile(&w, &key).await;
    assert_eq!(secrets(&w), vec!["vpc-out"]);
    assert_eq!(
        w.object(&key).unwrap().status.outputs_secret.as_deref(),
        Some("vpc-out")
    );

    w.edit(&key, |s| {
        s.write_outputs_to_secret.as_mut().unwrap().name = "vpc-outputs".into()
    });
    reconcile(&w, &key).await;
    assert_eq!(secrets(&w), vec!["vpc-outputs"], "the old name is gone");

    w.edit(&key, |s| s.write_outputs_to_secret = None);
    reconcile(&w, &key).await;
    assert!(secrets(&w).is_empty(), "{:?}", secrets(&w));
    assert!(w.object(&key).unwrap().status.outputs_secret.is_none());
}

#[tokio::test]
async fn a_changed_workspace_leaves_no_plan_and_deletion_removes_what_was_written() {
    changed_workspace_and_deletion(false).await;
    changed_workspace_and_deletion(true).await;
}

async fn changed_workspace_and_deletion(runner_writes: bool) {
    let w = world();
    w.lock().runner_writes = runner_writes;
    let key = w.create(object(
        "vpc",
        json!({"workspace": "blue", "writeOutputsToSecret": {"name": "vpc-out"}}),
    ));
    reconcile(&w, &key).await;
    let stored = |w: &tfops_core::testing::FakeWorld| -> Vec<String> {
        w.lock().plans.keys().map(|(_, ws)| ws.clone()).collect()
    };
    assert_eq!(stored(&w), vec!["blue"]);
    w.edit(&key, |s| s.workspace = "green".into());
    reconcile(&w, &key).await;
    assert_eq!(
        stored(&w),
        vec!["green"],
        "the plan of the old workspace is gone"
    );

    // Applied with outputs written, then the name changes in the spec and the object is
    // deleted at once: both the recorded Secret and the plan go.
    w.edit(&key, |s| s.approve_plan = "auto".into());
    reconcile(&w, &key).await;
    assert_eq!(secrets(&w), vec!["vpc-out"]);
    w.edit(&key, |s| {
        s.write_outputs_to_secret.as_mut().unwrap().name = "renamed".into()
    });
    w.delete(&key);
    reconcile(&w, &key).await;
    assert!(w.object(&key).is_none());
    assert!(secrets(&w).is_empty(), "{:?}", secrets(&w));
    assert!(stored(&w).is_empty(), "{:?}", stored(&w));
}
