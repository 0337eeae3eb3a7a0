//! A pull request's plan of one object, made through the ports: at the pull request's head, in
//! a runner of its own, without the state lock, and leaving the object as it was: its status,
//! its pending plan, its state and what is real.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::json;
use tfops_core::api::{ObjectKey, RunnerRole};
use tfops_core::ports::{PlanSummary, PortError};
use tfops_core::pulls::{Outcome, PullRequest, plan_pull_request};
use tfops_core::testing::{FakeOp, FakeWorld};

const HEAD: &str = "feedfacefeedfacefeedfacefeedfacefeedface";

fn pull() -> PullRequest {
    PullRequest {
        number: 7,
        head_sha: HEAD.into(),
        base_ref: "main".into(),
        author: "alice".into(),
        from_fork: false,
        changed_files: vec!["main.tf".into()],
    }
}

/// An object applied at the branch, then a pull request whose head changes `a` and adds `c`.
async fn applied(w: &FakeWorld) -> ObjectKey {
    let key = w.create(object("vpc", json!({"approvePlan": "auto"})));
    reconcile(w, &key).await;
    assert_eq!(w.applies(&key), 1);
    w.commit(
        HEAD,
        &[
            ("terraform_data.a", "2"),
            ("terraform_data.b", "1"),
            ("terraform_data.c", "1"),
        ],
    );
    key
}

#[tokio::test]
async fn a_pull_request_plan_reads_the_head_and_leaves_the_object_as_it_was() {
    let w = world();
    let key = applied(&w).await;
    let before = w.object(&key).unwrap();
    let (state, real) = {
        let l = w.lock();
        let infra = l.infra.get(&key).cloned().unwrap();
        (infra.state, infra.real)
    };
    let plans_before = w.lock().plans.len();
    // Someone holds the state lock (an apply under way): a pull request's plan takes none.
    w.lock_state(&key, "lock-1", "runner@elsewhere");

    let object = w.object(&key).unwrap();
    let made = plan_pull_request(&w.ports(), &object, &pull()).await;
    let Outcome::Planned {
        summary,
        denials,
        replaced,
        ..
    } = &made.plan.outcome
    else {
        panic!("not planned: {:?}", made.plan.outcome);
    };
    assert_eq!(
        *summary,
        PlanSummary {
            add: 1,
            change: 1,
            destroy: 0
        }
    );
    assert!(denials.is_empty() && replaced.is_empty());
    assert_eq!(made.plan.key, key);
    assert!(
        made.digest.is_empty() == made.json.is_empty(),
        "a digest exactly when the plan's JSON is known"
    );

    // Its own runner, removed after; nothing applied, stored, or written to the object.
    let roles = w.lock().session_roles.clone();
    assert_eq!(roles.last(), Some(&RunnerRole::PullRequest));
    assert!(
        w.calls_of(&key, FakeOp::Cleanup) > 0,
        "the runner is removed"
    );
    assert_eq!(w.applies(&key), 1);
    assert_eq!(w.lock().plans.len(), plans_before, "no plan stored");
    assert_eq!(w.calls_of(&key, FakeOp::SavePlan), 0);
    let after = w.object(&key).unwrap();
    assert_eq!(
        after.status, before.status,
        "the object's status is untouched"
    );
    let l = w.lock();
    let infra = l.infra.get(&key).unwrap();
    assert_eq!((&infra.state, &infra.real), (&state, &real));
    assert!(infra.lock.is_some(), "the lock is not taken over or broken");
}

#[tokio::test]
async fn a_plan_that_fails_is_a_failure_with_its_reason_not_an_error() {
    let w = world();
    let key = applied(&w).await;
    w.fail_next(
        FakeOp::Plan,
        PortError::Terraform("Error: Unsupported argument".into()),
    );
    let object = w.object(&key).unwrap();
    let made = plan_pull_request(&w.ports(), &object, &pull()).await;
    match made.plan.outcome {
        Outcome::Failed { reason, message } => {
            assert_eq!(reason, "TFExecPlanFailed");
            assert!(message.contains("Unsupported argument"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert!(made.digest.is_empty());
    assert!(
        w.calls_of(&key, FakeOp::Cleanup) > 0,
        "the runner goes after a failure too"
    );

    // A head that does not exist: the source's failure, named.
    let mut gone = pull();
    gone.head_sha = "0000000000000000000000000000000000000000".into();
    let made = plan_pull_request(&w.ports(), &object, &gone).await;
    match made.plan.outcome {
        Outcome::Failed { reason, .. } => assert_eq!(reason, "SourceNotFound"),
        other => panic!("{other:?}"),
    }
}
