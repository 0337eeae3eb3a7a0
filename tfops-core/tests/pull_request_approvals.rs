//! Approvals given on a pull request, carried across the merge: the object's plan at the merge
//! commit is applied without another approval only when it does exactly what the approvers
//! read on the pull request, and with that approval only once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::json;
use tfops_core::api::ObjectKey;
use tfops_core::conditions::ConditionStatus;
use tfops_core::ports::PullApproval;
use tfops_core::pulls::{Outcome, PullRequest, plan_pull_request};
use tfops_core::testing::FakeWorld;

const URL: &str = "https://git.example/team/infra.git";
const HEAD: &str = "feedfacefeedfacefeedfacefeedfacefeedface";
const MERGE: &str = "3333333333cccccccccc3333333333cccccccccc";
const HEAD_RESOURCES: [(&str, &str); 3] = [
    ("terraform_data.a", "2"),
    ("terraform_data.b", "1"),
    ("terraform_data.c", "1"),
];

/// An object of `URL` applied at SHA1, waiting for approvals from then on, with a pull request
/// whose head changes `a` and adds `c`.
async fn applied(w: &FakeWorld) -> ObjectKey {
    w.publish(
        URL,
        "main",
        SHA1,
        &[("terraform_data.a", "1"), ("terraform_data.b", "1")],
    );
    let pulls = json!({"forge": "gitea", "tokenSecretRef": {"name": "forge"},
        "approvers": {"users": ["alice"]}});
    let key = w.create(object(
        "vpc",
        json!({"approvePlan": "auto", "sourceRef": {"url": URL, "pullRequests": pulls}}),
    ));
    reconcile(w, &key).await;
    assert_eq!(w.applies(&key), 1);
    w.edit(&key, |s| s.approve_plan.clear());
    reconcile(w, &key).await;
    w.commit(HEAD, &HEAD_RESOURCES);
    key
}

/// The pull request's plan of the object at HEAD, approved by alice, as the manager records it.
async fn approved_on_the_pull_request(w: &FakeWorld, key: &ObjectKey) -> PullApproval {
    let pull = PullRequest {
        number: 3,
        head_sha: HEAD.into(),
        base_ref: "main".into(),
        author: "dave".into(),
        from_fork: false,
        changed_files: vec!["main.tf".into()],
    };
    let made = plan_pull_request(&w.ports(), &w.object(key).unwrap(), &pull).await;
    let Outcome::Planned { summary, .. } = made.plan.outcome else {
        panic!("not planned: {:?}", made.plan.outcome);
    };
    PullApproval {
        number: 3,
        head_sha: HEAD.into(),
        digest: made.digest,
        summary,
        reviewers: vec!["alice".into()],
    }
}

fn record(w: &FakeWorld, key: &ObjectKey, approval: &PullApproval) {
    w.lock()
        .pull_approvals
        .insert(key.clone(), vec![approval.clone()]);
}

/// Main moves to `sha` holding `resources`, and the object runs for it as the poller's run.
async fn merged(w: &FakeWorld, key: &ObjectKey, sha: &str, resources: &[(&str, &str)]) {
    w.publish(URL, "main", sha, resources);
    let seen = w.polled_revision(&w.object(key).unwrap());
    w.reconcile_polled(key, Default::default(), seen)
        .await
        .unwrap();
}

#[tokio::test]
async fn what_was_approved_on_the_pull_request_is_applied_after_the_merge_once() {
    let w = world();
    let key = applied(&w).await;
    let approval = approved_on_the_pull_request(&w, &key).await;
    record(&w, &key, &approval);
    merged(&w, &key, MERGE, &HEAD_RESOURCES).await;

    assert_eq!(w.applies(&key), 2, "applied without another approval");
    let (status, _, message) = ready(&w, &key);
    assert_eq!(status, ConditionStatus::True, "{message}");
    assert!(
        message.contains("approved in pull request #3 by alice"),
        "{message}"
    );
    let o = w.object(&key).unwrap();
    assert_eq!(o.status.plan.used_pull_approvals, vec![approval.key()]);
    assert!(o.status.plan.pending.is_empty());

    // Everything it did is undone by hand, state included: the same content would be planned
    // again, and that approval has been used.
    {
        let mut l = w.lock();
        let infra = l.infra.get_mut(&key).unwrap();
        for address in ["terraform_data.a", "terraform_data.c"] {
            infra.real.remove(address);
            infra.state.remove(address);
        }
        infra.real.insert("terraform_data.a".into(), "1".into());
        infra.state.insert("terraform_data.a".into(), "1".into());
    }
    w.edit(&key, |s| s.vars.clear());
    w.annotate(&key, "infra.argocd.io/replan", "again");
    reconcile(&w, &key).await;
    let o = w.object(&key).unwrap();
    assert_eq!(o.status.plan.pending_digest, approval.digest);
    assert_eq!(w.applies(&key), 2, "an approved content applied twice");
    let (status, _, message) = ready(&w, &key);
    assert_eq!(status, ConditionStatus::Unknown, "{message}");
    assert!(message.contains("awaits approval"), "{message}");
}

#[tokio::test]
async fn a_plan_that_differs_from_the_approved_one_waits_and_says_why() {
    let w = world();
    let key = applied(&w).await;
    let approval = approved_on_the_pull_request(&w, &key).await;
    record(&w, &key, &approval);
    // Another change reached main before this pull request merged: the merge commit's plan
    // also changes `b`.
    let mut at_merge = HEAD_RESOURCES.to_vec();
    at_merge[1] = ("terraform_data.b", "5");
    merged(&w, &key, MERGE, &at_merge).await;

    assert_eq!(w.applies(&key), 1, "applied content nobody approved");
    let (status, _, message) = ready(&w, &key);
    assert_eq!(status, ConditionStatus::Unknown, "{message}");
    assert!(
        message.contains("differs from the plan approved in pull request #3 by alice (+1 ~1 -0"),
        "{message}"
    );
    assert!(
        w.object(&key)
            .unwrap()
            .status
            .plan
            .used_pull_approvals
            .is_empty()
    );
}

#[tokio::test]
async fn an_approval_recorded_after_the_merge_starts_a_run_once() {
    let w = world();
    let key = applied(&w).await;
    let approval = approved_on_the_pull_request(&w, &key).await;
    // The object planned the merge before the manager recorded the approval.
    merged(&w, &key, MERGE, &HEAD_RESOURCES).await;
    let o = w.object(&key).unwrap();
    assert_eq!(o.status.plan.pending_digest, approval.digest);
    assert_eq!(w.applies(&key), 1);

    // An approval of other content starts nothing.
    let mut other = approval.clone();
    other.number = 4;
    other.digest = "0".repeat(64);
    record(&w, &key, &other);
    let sessions = w.lock().sessions;
    reconcile(&w, &key).await;
    assert_eq!(w.lock().sessions, sessions, "a run for another content");

    record(&w, &key, &approval);
    reconcile(&w, &key).await;
    assert_eq!(w.applies(&key), 2);
    let sessions = w.lock().sessions;
    reconcile(&w, &key).await;
    assert_eq!(
        w.lock().sessions,
        sessions,
        "a run again for a used approval"
    );
}
