//! Plans on pull requests, end to end: a real Gitea (built from its module) holds a repository
//! of three objects and delivers its own signed webhooks to the manager, which plans in runner
//! Pods each object a pull request touches, at its head, and shows the plans in one comment and
//! a commit status per object. The objects' own plans, status and state are left alone.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use kube::api::Api;
use reqwest::Method;
use serde_json::{Value, json};
use support::operator::{CONFIG, Operator, pending, ready_with};
use support::pulls::{
    comment_where, deliver, open, ours, repo, sign, status_where, statuses, stored,
};
use tfops_testcluster::gitea::Gitea;

const SECRET: &str = "pull-s3cret";

/// Every request the manager made to the forge so far (`tfops_forge_requests_total`).
async fn forge_requests(op: &Operator) -> f64 {
    let (_, text) = op.manager().get("/metrics").await;
    text.lines()
        .filter(|l| l.starts_with("tfops_forge_requests_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn short(sha: &str) -> &str {
    &sha[..12]
}

/// The object manifests: `a` waits for approval, `b` applies itself, `c` trusts only the
/// reviewer's pull requests; all plan the pull requests of the repository with the admin's
/// token.
fn objects(op: &Operator, gitea: &Gitea) -> String {
    let url = gitea.clone_url("infra");
    let pulls = json!({"forge": "gitea", "tokenSecretRef": {"name": "forge"}});
    let one = |name: &str, extra: Value| {
        let mut spec = json!({"path": name, "sourceRef": {"url": url, "pullRequests": pulls}});
        json_patch::merge(&mut spec, &extra);
        op.manifest(name, spec)
    };
    [
        one("a", json!({})),
        one("b", json!({"approvePlan": "auto"})),
        one(
            "c",
            json!({"approvePlan": "auto", "sourceRef": {"pullRequests": {"trustedAuthors": ["reviewer"]}}}),
        ),
    ]
    .join("---\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pull_requests_are_planned_in_one_comment_with_a_status_per_object() {
    let gitea = Gitea::start().await.unwrap();
    gitea.create_repo("infra").await.unwrap();
    let files = [
        ("a/main.tf", CONFIG),
        ("b/main.tf", CONFIG),
        ("c/main.tf", CONFIG),
    ];
    gitea
        .push(&gitea.admin, "infra", "main", &files, "three objects")
        .await
        .unwrap();
    gitea
        .add_collaborator("infra", &gitea.reviewer, "write")
        .await
        .unwrap();
    let (op, receiver, _secret) = support::pulls::with_webhooks(SECRET).await;
    op.apply(&format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: forge, namespace: team-a}}\nstringData: {{token: {}}}\n",
        gitea.admin.token
    ));
    op.apply(&objects(&op, &gitea));
    let a = op
        .wait_for("a", "planned", 180, |t| {
            ready_with(t, "TerraformPlannedWithChanges") && !pending(t).is_empty()
        })
        .await;
    for name in ["b", "c"] {
        op.wait_for(name, "applied", 180, |t| {
            ready_with(t, "TerraformAppliedSucceed")
        })
        .await;
    }
    // A pull request touching a, opened before Gitea has a webhook (and an hour before the
    // manager's poll): only a delivery can make tfops look.
    let head1 = gitea
        .push(
            &gitea.admin,
            "infra",
            "change-a",
            &[("a/main.tf", &CONFIG.replace("hello", "bonjour"))],
            "a says bonjour",
        )
        .await
        .unwrap();
    let pr = open(&gitea, "change-a").await;
    let delivery = serde_json::to_vec(&json!({
        "action": "opened", "number": pr,
        "repository": {"full_name": "tfops-admin/infra", "clone_url": gitea.clone_url("infra")},
    }))
    .unwrap();
    assert_eq!(
        deliver(&receiver, "pull_request", "forged", None, &delivery).await,
        401
    );
    let wrong = sign(SECRET, b"another body");
    assert_eq!(
        deliver(
            &receiver,
            "pull_request",
            "forged-2",
            Some(&wrong),
            &delivery
        )
        .await,
        401
    );
    assert!(
        ours(&gitea, pr).await.is_empty(),
        "a refused delivery plans nothing"
    );
    assert!(stored(&op, &format!("tfops-pr-a-{pr}")).await.is_none());
    let signed = sign(SECRET, &delivery);
    let delivered = Instant::now();
    assert_eq!(
        deliver(&receiver, "pull_request", "d-1", Some(&signed), &delivery).await,
        202
    );

    // One comment with a's plan, b and c not named, a's status success, a's own pending plan
    // and status as they were.
    let body = comment_where(&gitea, pr, 120, |b| b.contains("✅")).await;
    println!(
        "delivery to comment (1 object): {:.1} s",
        delivered.elapsed().as_secs_f64()
    );
    // The same delivery again: answered as a duplicate, nothing planned again.
    let version = stored(&op, &format!("tfops-pr-a-{pr}"))
        .await
        .unwrap()
        .metadata
        .resource_version;
    assert_eq!(
        deliver(&receiver, "pull_request", "d-1", Some(&signed), &delivery).await,
        200
    );
    support::pulls::add_hook(
        &gitea,
        &receiver,
        SECRET,
        &["push", "pull_request", "issue_comment"],
    )
    .await;
    assert!(
        body.contains("**team-a/a**") && body.contains("`+1 ~0 -0`"),
        "{body}"
    );
    assert!(body.contains(short(&head1)), "{body}");
    assert!(
        !body.contains("team-a/b") && !body.contains("team-a/c"),
        "{body}"
    );
    assert!(
        body.contains("bonjour"),
        "the plan's text is folded in: {body}"
    );
    let (state, _) =
        status_where(&gitea, &head1, "tfops/team-a/a", 30, |s, _| s == "success").await;
    assert_eq!(state, "success");
    status_where(&gitea, &head1, "tfops", 30, |s, _| s == "success").await;
    let plan = stored(&op, &format!("tfops-pr-a-{pr}"))
        .await
        .expect("a's plan stored");
    assert_eq!(
        plan.metadata.annotations.unwrap()["infra.argocd.io/head-sha"],
        head1
    );
    let now = op.terraforms().get("a").await.unwrap();
    assert_eq!(now.status, a.status, "a's own status is untouched");

    let again = stored(&op, &format!("tfops-pr-a-{pr}")).await.unwrap();
    assert_eq!(again.metadata.resource_version, version, "planned once");

    // A second push: the same comment edited, the status on the new head.
    let (pushed, requests) = (Instant::now(), forge_requests(&op).await);
    let head2 = gitea
        .push(
            &gitea.admin,
            "infra",
            "change-a",
            &[("a/main.tf", &CONFIG.replace("hello", "hola"))],
            "a says hola",
        )
        .await
        .unwrap();
    let body = comment_where(&gitea, pr, 120, |b| {
        b.contains(short(&head2)) && b.contains("✅")
    })
    .await;
    assert!(body.contains("hola") && !body.contains("bonjour"), "{body}");
    status_where(&gitea, &head2, "tfops", 30, |s, _| s == "success").await;
    println!(
        "push to comment and statuses (1 object, Gitea's webhooks): {:.1} s, {} requests to Gitea",
        pushed.elapsed().as_secs_f64(),
        forge_requests(&op).await - requests
    );
    status_where(&gitea, &head2, "tfops/team-a/a", 30, |s, _| s == "success").await;
    let plan = stored(&op, &format!("tfops-pr-a-{pr}")).await.unwrap();
    assert_eq!(
        plan.metadata.annotations.unwrap()["infra.argocd.io/head-sha"],
        head2
    );
    let planned_once = plan.metadata.resource_version;

    policy_and_failures(&op, &gitea).await;
    untrusted_until_asked(&gitea).await;
    from_a_fork(&gitea).await;
    // Every delivery since (pushes, pull requests, comments) made tfops look again; none
    // planned a head it had planned.
    let plan = stored(&op, &format!("tfops-pr-a-{pr}")).await.unwrap();
    assert_eq!(
        plan.metadata.resource_version, planned_once,
        "each head planned once"
    );

    superseded_mid_plan(&op, &gitea, pr).await;

    // Closed: its plans go, the comment says so.
    gitea
        .call(
            &gitea.admin,
            Method::PATCH,
            &format!("{}/pulls/{pr}", repo(&gitea)),
            Some(json!({"state": "closed"})),
        )
        .await
        .unwrap();
    comment_where(&gitea, pr, 60, |b| b.contains("was closed")).await;
    assert!(stored(&op, &format!("tfops-pr-a-{pr}")).await.is_none());

    // No pull request's runner Pod is left.
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(op.admin.clone(), "team-a");
    let role = kube::api::ListParams::default().labels("infra.argocd.io/runner-role=pull-request");
    let start = Instant::now();
    while !pods.list(&role).await.unwrap().items.is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "a pull request's runner Pod is left"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Nothing applied from any pull request; a still waits with its own plan.
    let now = op.terraforms().get("a").await.unwrap();
    assert_eq!(pending(&now), pending(&a));
    assert_eq!(now.status.unwrap().last_applied_revision, None);
}

/// A policy denial and a plan error are failure statuses with the reason.
async fn policy_and_failures(op: &Operator, gitea: &Gitea) {
    op.apply(
        "apiVersion: infra.argocd.io/v1alpha1\nkind: TerraformPolicy\nmetadata: {name: no-new, namespace: team-a}\nspec:\n  rules:\n    - name: nothing-new\n      expression: \"size(creates) == 0\"\n      message: no new resources\n",
    );
    let more = format!("{CONFIG}\nresource \"terraform_data\" \"y\" {{\n  input = 1\n}}\n");
    let denied_head = gitea
        .push(
            &gitea.admin,
            "infra",
            "more-b",
            &[("b/main.tf", &more)],
            "b grows",
        )
        .await
        .unwrap();
    let denied = open(gitea, "more-b").await;
    let (verdict, said) = status_where(gitea, &denied_head, "tfops/team-a/b", 120, |s, _| {
        s != "pending"
    })
    .await;
    assert_eq!(verdict, "failure");
    let (aggregate, _) =
        status_where(gitea, &denied_head, "tfops", 30, |s, _| s != "pending").await;
    assert_eq!(aggregate, "failure");
    // Each status went from pending to its verdict once: never back to pending.
    for context in ["tfops/team-a/b", "tfops"] {
        let states = support::pulls::history(gitea, &denied_head, context).await;
        let verdict = states.iter().position(|s| s != "pending");
        assert!(
            verdict.is_some_and(|v| states[v..].iter().all(|s| s == "failure")),
            "{context}: {states:?}"
        );
    }
    assert!(
        said.contains("denied by policy") && said.contains("no new resources"),
        "{said}"
    );
    let body = comment_where(gitea, denied, 30, |b| b.contains("denied by policy")).await;
    assert!(body.contains("**team-a/b**"), "{body}");

    let broken_head = gitea
        .push(
            &gitea.admin,
            "infra",
            "broken-a",
            &[(
                "a/main.tf",
                "resource \"terraform_data\" \"x\" {\n  input = var.nope\n}\n",
            )],
            "broken",
        )
        .await
        .unwrap();
    let broken = open(gitea, "broken-a").await;
    let (state, said) = status_where(gitea, &broken_head, "tfops/team-a/a", 120, |s, _| {
        s != "pending"
    })
    .await;
    assert_eq!(state, "failure");
    assert!(said.contains("TFExecPlanFailed"), "{said}");
    let body = comment_where(gitea, broken, 30, |b| b.contains("plan failed")).await;
    assert!(body.contains("TFExecPlanFailed"), "{body}");

    // One that touches nothing says so.
    gitea
        .push(
            &gitea.admin,
            "infra",
            "docs",
            &[("README.md", "# infra\n")],
            "docs",
        )
        .await
        .unwrap();
    let docs = open(gitea, "docs").await;
    comment_where(gitea, docs, 60, |b| b.contains("nothing to plan")).await;
}

/// c trusts only the reviewer: the admin's pull request waits until the reviewer asks for
/// its head with `/tfops plan <sha>`.
async fn untrusted_until_asked(gitea: &Gitea) {
    let head = gitea
        .push(
            &gitea.admin,
            "infra",
            "change-c",
            &[("c/main.tf", &CONFIG.replace("hello", "hej"))],
            "c",
        )
        .await
        .unwrap();
    let pr = open(gitea, "change-c").await;
    let body = comment_where(gitea, pr, 60, |b| b.contains("not planned")).await;
    assert!(body.contains(&format!("/tfops plan {head}")), "{body}");
    let (state, _) = status_where(gitea, &head, "tfops/team-a/c", 30, |_, _| true).await;
    assert_eq!(state, "pending");
    // A prefix of the head is not enough; the whole sha from the reviewer is.
    let ask = |text: String| {
        let path = format!("{}/issues/{pr}/comments", repo(gitea));
        async move {
            gitea
                .call(
                    &gitea.reviewer,
                    Method::POST,
                    &path,
                    Some(json!({"body": text})),
                )
                .await
                .unwrap();
        }
    };
    ask(format!("/tfops plan {}", short(&head))).await;
    ask(format!("/tfops plan {head}")).await;
    let body = comment_where(gitea, pr, 120, |b| b.contains("✅")).await;
    assert!(
        body.contains("**team-a/c**") && body.contains("hej"),
        "{body}"
    );
    status_where(gitea, &head, "tfops/team-a/c", 30, |s, _| s == "success").await;
}

/// Without webhooks the manager's poll finds a pull request; one touching the shared module of
/// twenty objects plans them all into one comment (the monorepo case).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_webhooks_the_poll_plans_a_pull_request_of_twenty_objects() {
    const OBJECTS: usize = 20;
    let gitea = Gitea::start().await.unwrap();
    gitea.create_repo("infra").await.unwrap();
    let paths: Vec<String> = (0..OBJECTS)
        .map(|i| format!("envs/e{i:02}/main.tf"))
        .collect();
    let mut files: Vec<(&str, &str)> = paths.iter().map(|p| (p.as_str(), CONFIG)).collect();
    files.push(("modules/shared/README.md", "shared\n"));
    gitea
        .push(&gitea.admin, "infra", "main", &files, "twenty environments")
        .await
        .unwrap();
    let op = Operator::start_with(&["--source-poll-interval", "2s", "--concurrent", "4"]).await;
    op.apply(&format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: forge, namespace: team-a}}\nstringData: {{token: {}}}\n",
        gitea.admin.token
    ));
    let url = gitea.clone_url("infra");
    let pulls = json!({"forge": "gitea", "tokenSecretRef": {"name": "forge"}});
    let manifests: Vec<String> = (0..OBJECTS)
        .map(|i| {
            op.manifest(
                &format!("e{i:02}"),
                json!({
                    "path": format!("envs/e{i:02}"),
                    "sourceRef": {"url": url, "pullRequests": pulls, "watchPaths": ["modules/shared/**"]},
                }),
            )
        })
        .collect();
    op.apply(&manifests.join("---\n"));
    for i in 0..OBJECTS {
        op.wait_for(&format!("e{i:02}"), "planned", 300, |t| {
            ready_with(t, "TerraformPlannedWithChanges")
        })
        .await;
    }
    let (requests, pushed) = (forge_requests(&op).await, Instant::now());
    let head = gitea
        .push(
            &gitea.admin,
            "infra",
            "shared",
            &[("modules/shared/README.md", "shared, changed\n")],
            "the shared module",
        )
        .await
        .unwrap();
    let pr = open(&gitea, "shared").await;
    let body = comment_where(&gitea, pr, 300, |b| b.matches("✅").count() == OBJECTS).await;
    status_where(&gitea, &head, "tfops", 60, |s, _| s == "success").await;
    println!(
        "push to comment and statuses ({OBJECTS} objects, poll every 2 s, --concurrent 4): {:.1} s, {} requests to Gitea",
        pushed.elapsed().as_secs_f64(),
        forge_requests(&op).await - requests
    );
    for i in 0..OBJECTS {
        assert!(body.contains(&format!("**team-a/e{i:02}**")), "{body}");
    }
    assert_eq!(statuses(&gitea, &head).await.len(), OBJECTS + 1);
}

/// A push while the older head is being planned cancels that plan (its runner Pod removed
/// mid-way) and plans the new head: the comment and the stored plan move to the new head.
async fn superseded_mid_plan(op: &Operator, gitea: &Gitea, pr: u64) {
    let cancelled = "tfops_pull_request_plans_total{result=\"cancelled\"}";
    let before = op.manager().counter(cancelled).await;
    // Thirty thousand resources: a plan of about 20 s on this machine.
    let slow = format!(
        "{CONFIG}\nresource \"terraform_data\" \"many\" {{\n  count = 30000\n  input = count.index\n}}\n"
    );
    let slow_head = gitea
        .push(
            &gitea.admin,
            "infra",
            "change-a",
            &[("a/main.tf", &slow)],
            "a grows a lot",
        )
        .await
        .unwrap();
    status_where(gitea, &slow_head, "tfops/team-a/a", 60, |s, _| {
        s == "pending"
    })
    .await;
    let head = gitea
        .push(
            &gitea.admin,
            "infra",
            "change-a",
            &[("a/main.tf", &CONFIG.replace("hello", "ciao"))],
            "a says ciao",
        )
        .await
        .unwrap();
    let body = comment_where(gitea, pr, 120, |b| {
        // The namespace's policy denies a's plans now (they create its resource): a plan
        // made all the same.
        b.contains(short(&head)) && !b.contains("planning")
    })
    .await;
    assert!(
        body.contains("ciao") && body.contains("denied by policy"),
        "{body}"
    );
    assert_eq!(
        op.manager().counter(cancelled).await - before,
        1.0,
        "the slow head's plan was cancelled, not finished"
    );
    let plan = stored(op, &format!("tfops-pr-a-{pr}")).await.unwrap();
    assert_eq!(
        plan.metadata.annotations.unwrap()["infra.argocd.io/head-sha"],
        head
    );
    let statuses = statuses(gitea, &slow_head).await;
    assert_eq!(
        statuses["tfops/team-a/a"].0, "pending",
        "the superseded head's status is left as it was: {statuses:?}"
    );
}

/// A pull request from the reviewer's fork: its author may write to the repository, but a
/// fork's author is trusted only when listed, so it waits for `/tfops plan <sha>` from the
/// admin; its head is on no branch of the repository, fetched through `refs/pull/<n>/head`.
async fn from_a_fork(gitea: &Gitea) {
    let reviewer = &gitea.reviewer;
    gitea
        .call(
            reviewer,
            Method::POST,
            &format!("{}/forks", repo(gitea)),
            Some(json!({})),
        )
        .await
        .unwrap();
    let salut = CONFIG.replace("hello", "salut");
    let head = gitea
        .push_to(
            reviewer,
            &reviewer.login,
            "infra",
            "fork-b",
            &[("b/main.tf", &salut)],
            "b says salut",
        )
        .await
        .unwrap();
    let body = json!({"head": format!("{}:fork-b", reviewer.login), "base": "main", "title": "from a fork"});
    let pull = gitea
        .call(
            reviewer,
            Method::POST,
            &format!("{}/pulls", repo(gitea)),
            Some(body),
        )
        .await
        .unwrap();
    let pr = pull["number"].as_u64().unwrap();
    let body = comment_where(gitea, pr, 60, |b| b.contains("not planned")).await;
    assert!(
        body.contains("from a fork") && body.contains(&head),
        "{body}"
    );
    let path = format!("{}/issues/{pr}/comments", repo(gitea));
    gitea
        .call(
            &gitea.admin,
            Method::POST,
            &path,
            Some(json!({"body": format!("/tfops plan {head}")})),
        )
        .await
        .unwrap();
    let body = comment_where(gitea, pr, 120, |b| b.contains("✅")).await;
    assert!(
        body.contains("**team-a/b**") && body.contains("salut"),
        "{body}"
    );
    status_where(gitea, &head, "tfops/team-a/b", 30, |s, _| s == "success").await;
}
