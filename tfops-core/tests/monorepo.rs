//! Monorepos: a new revision plans an object only when it changed a file under its
//! `spec.path` or its `watchPaths`; otherwise the revision is recorded as seen and the run goes
//! on as for an unchanged one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use serde_json::json;
use tfops_core::api::annotations;
use tfops_core::conditions::ConditionStatus;
use tfops_core::testing::FakeOp;

const SHA3: &str = "3333333333cccccccccc3333333333cccccccccc";
const RESOURCES: &[(&str, &str)] = &[("terraform_data.a", "1"), ("terraform_data.b", "1")];

fn status_of(
    w: &tfops_core::testing::FakeWorld,
    key: &tfops_core::api::ObjectKey,
) -> tfops_core::api::TerraformStatus {
    w.object(key).unwrap().status
}

#[tokio::test]
async fn a_commit_elsewhere_in_the_repository_makes_no_plan_and_one_under_the_path_does() {
    let w = world();
    let key = w.create(object(
        "prod",
        json!({"approvePlan": "auto", "path": "envs/prod"}),
    ));
    reconcile(&w, &key).await;
    assert_eq!(w.applies(&key), 1);
    assert_eq!(w.calls_of(&key, FakeOp::Plan), 1);

    // Another object's directory changed: recorded as seen, counted as applied, drift checked.
    w.publish(REPO, "main", SHA2, RESOURCES);
    w.changed_between(SHA1, SHA2, &["envs/staging/main.tf", "README.md"]);
    w.advance(Duration::from_secs(601));
    reconcile(&w, &key).await;
    let st = status_of(&w, &key);
    assert_eq!(
        w.calls_of(&key, FakeOp::Plan),
        1,
        "no plan for a foreign change"
    );
    assert_eq!(ready(&w, &key).1, "NoDrift");
    assert_eq!(
        st.last_attempted_revision.as_deref(),
        Some(format!("main@sha1:{SHA2}").as_str())
    );
    assert_eq!(
        st.last_applied_revision.as_deref(),
        Some(format!("main@sha1:{SHA2}").as_str()),
        "the object's files at SHA2 are those applied"
    );
    assert_eq!(w.lock().comparisons, vec![(SHA1.into(), SHA2.into())]);

    // A file of its own changed: planned and applied.
    w.publish(
        REPO,
        "main",
        SHA3,
        &[("terraform_data.a", "2"), ("terraform_data.b", "1")],
    );
    w.changed_between(SHA2, SHA3, &["envs/prod/main.tf"]);
    w.advance(Duration::from_secs(601));
    reconcile(&w, &key).await;
    assert_eq!(w.calls_of(&key, FakeOp::Plan), 2);
    assert_eq!(w.applies(&key), 2);
    assert_eq!(
        status_of(&w, &key).last_applied_revision.as_deref(),
        Some(format!("main@sha1:{SHA3}").as_str())
    );
}

#[tokio::test]
async fn watch_paths_make_a_shared_module_change_count() {
    let w = world();
    let key = w.create(object(
        "prod",
        json!({"approvePlan": "auto", "path": "envs/prod",
               "sourceRef": {"watchPaths": ["modules/network/", "!modules/network/*.md"]}}),
    ));
    reconcile(&w, &key).await;
    w.publish(REPO, "main", SHA2, RESOURCES);
    w.changed_between(SHA1, SHA2, &["modules/network/README.md"]);
    w.advance(Duration::from_secs(601));
    reconcile(&w, &key).await;
    assert_eq!(w.calls_of(&key, FakeOp::Plan), 1, "an excluded file");

    w.publish(REPO, "main", SHA3, RESOURCES);
    w.changed_between(SHA2, SHA3, &["modules/network/main.tf"]);
    w.advance(Duration::from_secs(601));
    reconcile(&w, &key).await;
    assert_eq!(
        w.calls_of(&key, FakeOp::Plan),
        2,
        "the shared module changed"
    );
}

#[tokio::test]
async fn a_source_that_cannot_compare_plans_every_new_revision() {
    let w = world();
    let key = w.create(object(
        "prod",
        json!({"approvePlan": "auto", "path": "envs/prod"}),
    ));
    reconcile(&w, &key).await;
    // No changed files known for the pair: Unknown, which counts as a change.
    w.publish(REPO, "main", SHA2, RESOURCES);
    w.advance(Duration::from_secs(601));
    reconcile(&w, &key).await;
    assert_eq!(w.calls_of(&key, FakeOp::Plan), 2);

    // A failing comparison is no failure of the run: it plans as well.
    w.publish(REPO, "main", SHA3, RESOURCES);
    w.fail_next(
        FakeOp::Compare,
        tfops_core::ports::PortError::Unavailable("fetch of the old commit refused".into()),
    );
    w.advance(Duration::from_secs(601));
    reconcile(&w, &key).await;
    assert_eq!(w.calls_of(&key, FakeOp::Plan), 3);
    assert_eq!(ready(&w, &key).0, ConditionStatus::True);
}

#[tokio::test]
async fn the_root_path_and_a_spec_change_plan_without_comparing() {
    let w = world();
    let root = w.create(object("root", json!({"approvePlan": "auto"})));
    let sub = w.create(object(
        "sub",
        json!({"approvePlan": "auto", "path": "envs/prod"}),
    ));
    reconcile(&w, &root).await;
    reconcile(&w, &sub).await;
    w.publish(REPO, "main", SHA2, RESOURCES);
    w.changed_between(SHA1, SHA2, &["elsewhere.tf"]);
    w.edit(&sub, |s| s.retry_interval = "30s".into());
    w.advance(Duration::from_secs(601));
    reconcile(&w, &root).await;
    reconcile(&w, &sub).await;
    assert_eq!(
        w.calls_of(&root, FakeOp::Plan),
        2,
        "every file is the root's"
    );
    assert_eq!(w.calls_of(&sub, FakeOp::Plan), 2, "its spec changed");
    assert!(w.lock().comparisons.is_empty());
}

/// A plan awaiting approval keeps its id across commits that do not concern it, so the approval
/// a human gives for it still counts; it is applied only because the plan made again does the
/// same.
#[tokio::test]
async fn a_pending_plan_keeps_its_id_and_approval_across_foreign_commits() {
    let w = world();
    let key = w.create(object("prod", json!({"path": "envs/prod"})));
    reconcile(&w, &key).await;
    let plan_id = status_of(&w, &key).plan.pending;
    assert_eq!(plan_id, format!("plan-main-{}", &SHA1[..10]));

    w.publish(REPO, "main", SHA2, RESOURCES);
    w.changed_between(SHA1, SHA2, &["envs/staging/main.tf"]);
    w.advance(Duration::from_secs(601));
    reconcile(&w, &key).await;
    let st = status_of(&w, &key);
    assert_eq!(st.plan.pending, plan_id, "the same plan awaits approval");
    assert_eq!(
        st.last_planned_revision.as_deref(),
        Some(format!("main@sha1:{SHA1}").as_str())
    );
    assert_eq!(ready(&w, &key).0, ConditionStatus::Unknown);

    w.annotate(&key, annotations::APPROVE, &format!("{plan_id}@t1"));
    w.annotate(&key, annotations::RECONCILE, "r1");
    reconcile(&w, &key).await;
    assert_eq!(w.applies(&key), 1, "the approved plan was applied");
    assert_eq!(ready(&w, &key).0, ConditionStatus::True);
    assert!(status_of(&w, &key).plan.pending.is_empty());
}

/// A commit that touches the object after its plan was approved gives a new plan id: the
/// approval does not carry over to it.
#[tokio::test]
async fn an_approval_does_not_carry_over_to_a_commit_that_concerns_the_object() {
    let w = world();
    let key = w.create(object("prod", json!({"path": "envs/prod"})));
    reconcile(&w, &key).await;
    let plan_id = status_of(&w, &key).plan.pending;
    w.publish(
        REPO,
        "main",
        SHA2,
        &[("terraform_data.a", "9"), ("terraform_data.b", "1")],
    );
    w.changed_between(SHA1, SHA2, &["envs/prod/main.tf"]);
    w.annotate(&key, annotations::APPROVE, &format!("{plan_id}@t1"));
    w.annotate(&key, annotations::RECONCILE, "r1");
    reconcile(&w, &key).await;
    assert_eq!(w.applies(&key), 0);
    assert_eq!(
        status_of(&w, &key).plan.pending,
        format!("plan-main-{}", &SHA2[..10])
    );
}
