//! Monorepos on the operator, end to end with real Terraform and a real `git daemon`: two
//! objects at two paths of one repository, the manager polling its sources. A commit to one
//! path plans and applies that object at once (its interval is an hour); the other records the
//! revision as seen and applied without a run (no runner Pod, no history entry, `lastRunAt`
//! unchanged). A shared module named in `watchPaths` counts for the object naming it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use serde_json::{Value, json};
use support::operator::{CONFIG, Operator, ready_with};
use tfops_kube::Terraform;

fn status(t: &Terraform) -> tfops_core::api::TerraformStatus {
    t.status.clone().unwrap_or_default()
}

/// Whether `revision` (a status field's `main@sha1:<commit>`) names `commit`.
fn names(revision: Option<&str>, commit: &str) -> bool {
    revision.is_some_and(|r| r.ends_with(commit))
}

/// The run history of `name`, newest first.
async fn history(op: &Operator, name: &str) -> Vec<Value> {
    let maps: Api<ConfigMap> = Api::namespaced(op.admin.clone(), "team-a");
    let map = maps
        .get(&tfops_kube::history::history_name(name))
        .await
        .unwrap();
    let runs = map.data.unwrap_or_default().remove("runs.json").unwrap();
    serde_json::from_str(&runs).unwrap()
}

async fn applied_at(op: &Operator, name: &str, commit: &str) -> Terraform {
    let commit_ = commit.to_string();
    op.wait_for(name, &format!("applied {commit}"), 180, move |t| {
        ready_with(t, "TerraformAppliedSucceed")
            && names(status(t).last_applied_revision.as_deref(), &commit_)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_commit_to_one_path_runs_that_object_only_and_the_others_record_it_without_a_runner() {
    let op = Operator::start_with(&["--source-poll-interval", "1s"]).await;
    let first = op.git.commit(
        "mono",
        &[
            ("envs/net/main.tf", CONFIG),
            ("envs/app/main.tf", CONFIG),
            ("modules/shared/README.md", "shared\n"),
        ],
    );
    let url = op.git.url("mono");
    op.apply(&op.manifest(
        "net",
        json!({"approvePlan": "auto", "path": "envs/net", "sourceRef": {"url": url}}),
    ));
    op.apply(&op.manifest(
        "app",
        json!({"approvePlan": "auto", "path": "envs/app",
               "sourceRef": {"url": url, "watchPaths": ["modules/shared/"]}}),
    ));
    let net = applied_at(&op, "net", &first).await;
    applied_at(&op, "app", &first).await;
    op.wait_for_runs("net", 1).await;
    op.wait_for_runs("app", 1).await;
    let net_ran_at = status(&net).last_run_at;

    // A commit to app's directory: app plans and applies it with no request (the poller).
    let second = op.git.commit(
        "mono",
        &[("envs/app/main.tf", &CONFIG.replace("hello", "bonjour"))],
    );
    applied_at(&op, "app", &second).await;
    let second_ = second.clone();
    let net = op
        .wait_for("net", "saw the second commit", 60, move |t| {
            names(status(t).last_attempted_revision.as_deref(), &second_)
        })
        .await;
    let st = status(&net);
    assert!(
        names(st.last_applied_revision.as_deref(), &second),
        "net's files at the second commit are those applied: {st:?}"
    );
    assert_eq!(st.last_run_at, net_ran_at, "no run of net");
    assert!(ready_with(&net, "TerraformAppliedSucceed"), "{st:?}");
    op.wait_for_runs("app", 2).await;
    let app_runs = history(&op, "app").await;
    assert_eq!(app_runs[0]["trigger"], "new revision", "{app_runs:?}");
    assert_eq!(app_runs[0]["applied"], true);
    assert_eq!(history(&op, "net").await.len(), 1, "nothing ran for net");

    // A change to the shared module app watches: app plans again (nothing changes in its
    // configuration, so Terraform finds nothing to do), net still does not run.
    let third = op
        .git
        .commit("mono", &[("modules/shared/README.md", "shared, v2\n")]);
    let third_ = third.clone();
    op.wait_for("app", "planned the third commit", 120, move |t| {
        names(status(t).last_applied_revision.as_deref(), &third_)
            && status(t).reconciliation_failures == 0
    })
    .await;
    op.wait_for_runs("app", 3).await;
    let third_ = third.clone();
    let net = op
        .wait_for("net", "saw the third commit", 60, move |t| {
            names(status(t).last_attempted_revision.as_deref(), &third_)
        })
        .await;
    assert_eq!(status(&net).last_run_at, net_ran_at, "no run of net");
    assert_eq!(history(&op, "net").await.len(), 1, "nothing ran for net");
}
