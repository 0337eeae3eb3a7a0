//! Approvals on pull requests carried across the merge, end to end on a real Gitea: what an
//! approver approved on the pull request is applied after the merge without another approval,
//! once; an approval that does not count (a non-approver's, a stale one, the author's) applies
//! nothing; a plan at the merge commit that differs from the approved one is held, and the
//! pull request says why; branch protection on `tfops*` refuses a merge whose plan failed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use reqwest::Method;
use serde_json::{Value, json};
use support::operator::{CONFIG, Operator, pending, ready_with};
use support::pulls::{comment_where, open, repo, status_where, stored};
use tfops_testcluster::gitea::{Gitea, User};

const SECRET: &str = "approvals-s3cret";

/// `user` reviews pull request `number` at `commit` with `event` (`APPROVED`, ...).
async fn review(
    gitea: &Gitea,
    user: &User,
    number: u64,
    commit: &str,
    event: &str,
) -> Result<Value, String> {
    gitea
        .call(
            user,
            Method::POST,
            &format!("{}/pulls/{number}/reviews", repo(gitea)),
            Some(json!({"event": event, "body": "reviewed", "commit_id": commit})),
        )
        .await
        .map_err(|e| e.to_string())
}

/// Merges pull request `number` as the admin; the merge commit. Gitea checks whether a pull
/// request can be merged after each push, in the background, and until then answers "Please
/// try again later": asked again until it has decided.
async fn merge(gitea: &Gitea, number: u64) -> Result<String, String> {
    let start = Instant::now();
    loop {
        let answer = gitea
            .call(
                &gitea.admin,
                Method::POST,
                &format!("{}/pulls/{number}/merge", repo(gitea)),
                Some(json!({"Do": "merge"})),
            )
            .await
            .map_err(|e| e.to_string());
        match answer {
            Err(e)
                if e.contains("try again later") && start.elapsed() < Duration::from_secs(60) =>
            {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(e) => return Err(e),
            Ok(_) => break,
        }
    }
    let pull = gitea
        .call(
            &gitea.admin,
            Method::GET,
            &format!("{}/pulls/{number}", repo(gitea)),
            None,
        )
        .await
        .map_err(|e| e.to_string())?;
    Ok(pull["merge_commit_sha"]
        .as_str()
        .unwrap_or_default()
        .to_string())
}

/// The runs of `name` recorded in its history that applied.
async fn applied_runs(op: &Operator, name: &str) -> Vec<Value> {
    let maps: Api<ConfigMap> = Api::namespaced(op.admin.clone(), "team-a");
    let Some(history) = maps
        .get_opt(&tfops_kube::history::history_name(name))
        .await
        .unwrap()
    else {
        return Vec::new();
    };
    let runs: Vec<Value> = history
        .data
        .and_then(|d| d.get("runs.json").cloned())
        .and_then(|j| serde_json::from_str(&j).ok())
        .unwrap_or_default();
    runs.into_iter().filter(|r| r["applied"] == true).collect()
}

fn message(t: &tfops_kube::Terraform) -> String {
    t.status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.message.clone())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn what_approvers_approved_on_the_pull_request_is_applied_after_the_merge_once() {
    let gitea = Gitea::start().await.unwrap();
    gitea.create_repo("infra").await.unwrap();
    let files = [("a/main.tf", CONFIG), ("b/main.tf", CONFIG)];
    gitea
        .push(&gitea.admin, "infra", "main", &files, "two objects")
        .await
        .unwrap();
    gitea
        .add_collaborator("infra", &gitea.reviewer, "write")
        .await
        .unwrap();
    let (op, receiver, _secret) = support::pulls::with_webhooks(SECRET).await;
    let events = [
        "push",
        "pull_request",
        "pull_request_review_approved",
        "pull_request_review_rejected",
        "issue_comment",
    ];
    support::pulls::add_hook(&gitea, &receiver, SECRET, &events).await;
    op.apply(&format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: forge, namespace: team-a}}\nstringData: {{token: {}}}\n",
        gitea.admin.token
    ));
    // a: the reviewer (and the author, whose own approval must not count) approve; b: only
    // someone else does. Both applied first, then waiting for approvals.
    let url = gitea.clone_url("infra");
    let object = |name: &str, approvers: Value, approve: &str| {
        op.manifest(
            name,
            json!({"path": name, "approvePlan": approve, "sourceRef": {"url": url,
                "pullRequests": {"forge": "gitea", "tokenSecretRef": {"name": "forge"},
                                 "approvers": {"users": approvers}}}}),
        )
    };
    let admin = gitea.admin.login.clone();
    let manifests = |approve: &str| {
        [
            object("a", json!(["reviewer", admin]), approve),
            object("b", json!(["someone-else"]), approve),
        ]
        .join("---\n")
    };
    op.apply(&manifests("auto"));
    for name in ["a", "b"] {
        op.wait_for(name, "applied", 180, |t| {
            ready_with(t, "TerraformAppliedSucceed")
        })
        .await;
    }
    op.apply(&manifests(""));
    for name in ["a", "b"] {
        op.wait_for(name, "manual, nothing to do", 120, |t| {
            let s = t.status.as_ref().unwrap();
            s.observed_generation == t.metadata.generation.unwrap()
                && ready_with(t, "TerraformPlannedNoChanges")
        })
        .await;
    }

    // A pull request changing both.
    let bonjour = CONFIG.replace("hello", "bonjour");
    let head1 = gitea
        .push(
            &gitea.admin,
            "infra",
            "greet",
            &[("a/main.tf", &bonjour), ("b/main.tf", &bonjour)],
            "bonjour",
        )
        .await
        .unwrap();
    let pr = open(&gitea, "greet").await;
    let body = comment_where(&gitea, pr, 180, |b| {
        b.matches("✅").count() >= 2 && b.contains("not approved yet")
    })
    .await;
    assert!(body.contains("#### Approvals"), "{body}");

    // The author may not approve their own pull request: Gitea refuses it.
    let own = review(&gitea, &gitea.admin, pr, &head1, "APPROVED").await;
    assert!(own.is_err(), "Gitea took the author's approval: {own:?}");
    // The reviewer approves the head: a's plan is approved for its content, b's is not (the
    // reviewer is not one of b's approvers).
    review(&gitea, &gitea.reviewer, pr, &head1, "APPROVED")
        .await
        .unwrap();
    let body = comment_where(&gitea, pr, 60, |b| {
        b.contains("`team-a/a`: ✅ approved by reviewer for this content")
    })
    .await;
    assert!(
        body.contains("`team-a/b`: not approved yet (approvers: someone-else)"),
        "{body}"
    );

    // A push makes the approval stale: the new head's plan is not approved.
    let salut = CONFIG.replace("hello", "salut");
    let head2 = gitea
        .push(
            &gitea.admin,
            "infra",
            "greet",
            &[("a/main.tf", &salut), ("b/main.tf", &salut)],
            "salut",
        )
        .await
        .unwrap();
    let body = comment_where(&gitea, pr, 180, |b| {
        b.contains(&head2[..12]) && b.matches("✅").count() >= 2
    })
    .await;
    assert!(
        body.contains("`team-a/a`: not approved yet"),
        "a stale approval counted: {body}"
    );
    review(&gitea, &gitea.reviewer, pr, &head2, "APPROVED")
        .await
        .unwrap();
    comment_where(&gitea, pr, 60, |b| {
        b.contains("`team-a/a`: ✅ approved by reviewer for this content")
    })
    .await;

    // Merged: a is applied at the merge commit without another approval, once; b waits.
    let merged_at = Instant::now();
    let merge_sha = merge(&gitea, pr).await.unwrap();
    let a = op
        .wait_for(
            "a",
            "applied with the pull request's approval",
            180,
            move |t| {
                ready_with(t, "TerraformAppliedSucceed")
                    && message(t).contains(&format!("approved in pull request #{pr} by reviewer"))
            },
        )
        .await;
    println!(
        "merge to applied with the pull request's approval: {:.1} s",
        merged_at.elapsed().as_secs_f64()
    );
    assert!(
        a.status
            .as_ref()
            .unwrap()
            .last_applied_revision
            .as_deref()
            .unwrap()
            .contains(&merge_sha),
        "applied at the merge commit"
    );
    let b = op
        .wait_for("b", "waiting for its own approval", 120, |t| {
            ready_with(t, "TerraformPlannedWithChanges") && !pending(t).is_empty()
        })
        .await;
    assert!(message(&b).contains("awaits approval"), "{}", message(&b));
    let body = comment_where(&gitea, pr, 60, |b| b.contains("merged as")).await;
    let body = if body.contains("✅ `team-a/a`") {
        body
    } else {
        comment_where(&gitea, pr, 60, |b| b.contains("✅ `team-a/a`")).await
    };
    assert!(body.contains("approved by reviewer"), "{body}");
    status_where(&gitea, &merge_sha, "tfops/team-a/a", 60, |s, _| {
        s == "success"
    })
    .await;
    // Its record goes once reported; the history names the pull request and the reviewer.
    let start = Instant::now();
    while stored(&op, &format!("tfops-pr-a-{pr}")).await.is_some() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the merged record stays"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    op.wait_for_runs("a", 3).await;
    let applied = applied_runs(&op, "a").await;
    assert_eq!(
        applied.len(),
        2,
        "applied once after the merge: {applied:#?}"
    );
    let by = format!("approved in pull request #{pr} by reviewer");
    assert!(
        applied
            .iter()
            .any(|r| r["message"].as_str().unwrap().contains(&by)),
        "{applied:#?}"
    );

    held_when_main_moved(&op, &gitea).await;
    // Nothing more was applied to a than that one apply.
    assert_eq!(applied_runs(&op, "a").await.len(), 2);
    protected_by_its_status(&op, &gitea).await;
}

/// Approved, but another pull request touching the same object is merged first: the plan at
/// the merge commit also does the other's change, so it is held, and the pull request says so.
async fn held_when_main_moved(op: &Operator, gitea: &Gitea) {
    let approved_head = gitea
        .push(
            &gitea.admin,
            "infra",
            "approved",
            &[("a/main.tf", &CONFIG.replace("hello", "ciao"))],
            "ciao",
        )
        .await
        .unwrap();
    let approved = open(gitea, "approved").await;
    let extra = "resource \"terraform_data\" \"extra\" {\n  input = 2\n}\n";
    gitea
        .push(
            &gitea.admin,
            "infra",
            "other",
            &[("a/extra.tf", extra)],
            "extra",
        )
        .await
        .unwrap();
    let other = open(gitea, "other").await;
    comment_where(gitea, approved, 180, |b| {
        b.contains("✅") && b.contains("not approved yet")
    })
    .await;
    review(gitea, &gitea.reviewer, approved, &approved_head, "APPROVED")
        .await
        .unwrap();
    comment_where(gitea, approved, 60, |b| {
        b.contains("approved by reviewer for this content")
    })
    .await;
    comment_where(gitea, other, 180, |b| b.contains("✅")).await;
    merge(gitea, other).await.unwrap();
    op.wait_for(
        "a",
        "waiting for approval of the other's change",
        180,
        |t| ready_with(t, "TerraformPlannedWithChanges") && message(t).contains("awaits approval"),
    )
    .await;
    let merge_sha = merge(gitea, approved).await.unwrap();
    let a = op
        .wait_for("a", "held: differs from the approved plan", 180, move |t| {
            message(t).contains(&format!(
                "differs from the plan approved in pull request #{approved}"
            ))
        })
        .await;
    assert!(
        ready_with(&a, "TerraformPlannedWithChanges"),
        "{:?}",
        a.status
    );
    let body = comment_where(gitea, approved, 60, |b| b.contains("**not applied**")).await;
    assert!(body.contains("`team-a/a`"), "{body}");
    status_where(gitea, &merge_sha, "tfops/team-a/a", 60, |s, _| {
        s == "failure"
    })
    .await;
    forged_record_applies_nothing(op, &a).await;
}

/// A record of a merged pull request written by anyone but the manager (a runner Pod may write
/// ConfigMaps in the namespace), approving exactly what is pending: ignored.
async fn forged_record_applies_nothing(op: &Operator, a: &tfops_kube::Terraform) {
    let status = a.status.as_ref().unwrap();
    let pending_digest = status.plan.pending_digest.clone();
    assert!(!pending_digest.is_empty());
    let approval = json!({"number": 99, "headSha": "f".repeat(40), "digest": pending_digest,
        "summary": {"add": 1, "change": 0, "destroy": 0}, "reviewers": ["reviewer"]});
    let map: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "tfops-pr-a-99", "namespace": "team-a",
            "labels": {"app.kubernetes.io/managed-by": "tfops", "infra.argocd.io/object": "a",
                       "infra.argocd.io/pull-request": "99"},
            "annotations": {"infra.argocd.io/head-sha": "f".repeat(40),
                            "infra.argocd.io/object-name": "a",
                            "infra.argocd.io/merged-sha": "e".repeat(40),
                            "infra.argocd.io/approval-signature": "00".repeat(32)}},
        "data": {"outcome.json": json!({"outcome": "planned",
                    "summary": {"add": 1, "change": 0, "destroy": 0},
                    "replaced": [], "warnings": [], "denials": [], "text": ""}).to_string(),
                 "digest": pending_digest, "approval.json": approval.to_string()},
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(op.admin.clone(), "team-a")
        .create(&Default::default(), &map)
        .await
        .unwrap();
    let token = "forged-record";
    op.terraforms()
        .patch(
            "a",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"annotations": {
                "infra.argocd.io/reconcile": token}}})),
        )
        .await
        .unwrap();
    let now = op
        .wait_for("a", "the reconcile asked for handled", 120, move |t| {
            t.status
                .as_ref()
                .and_then(|s| s.last_handled_reconcile_at.as_deref())
                == Some(token)
                && t.status.as_ref().is_some_and(|s| {
                    s.conditions.iter().all(|c| {
                        c.type_ != "Reconciling"
                            || c.status != tfops_core::conditions::ConditionStatus::True
                    })
                })
        })
        .await;
    assert!(
        ready_with(&now, "TerraformPlannedWithChanges"),
        "{:?}",
        now.status
    );
    assert!(
        now.status
            .unwrap()
            .plan
            .used_pull_approvals
            .iter()
            .all(|k| !k.starts_with("99@"))
    );
}

/// With branch protection requiring `tfops*` statuses, Gitea refuses to merge a pull request
/// whose plan failed.
async fn protected_by_its_status(op: &Operator, gitea: &Gitea) {
    gitea
        .call(
            &gitea.admin,
            Method::POST,
            &format!("{}/branch_protections", repo(gitea)),
            Some(
                json!({"rule_name": "main", "branch_name": "main", "enable_status_check": true,
                        "status_check_contexts": ["tfops*"]}),
            ),
        )
        .await
        .unwrap();
    let broken = format!("{CONFIG}\noutput \"nope\" {{\n  value = var.nope\n}}\n");
    let head = gitea
        .push(
            &gitea.admin,
            "infra",
            "broken",
            &[("b/main.tf", &broken)],
            "broken",
        )
        .await
        .unwrap();
    let pr = open(gitea, "broken").await;
    status_where(gitea, &head, "tfops/team-a/b", 180, |s, _| s == "failure").await;
    status_where(gitea, &head, "tfops", 30, |s, _| s == "failure").await;
    let refused = merge(gitea, pr).await;
    assert!(
        refused.is_err(),
        "merged despite a failed plan: {refused:?}"
    );
    let _ = op;
}
