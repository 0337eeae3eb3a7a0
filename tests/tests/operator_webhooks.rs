//! The forge's push webhook on the operator, end to end: a real Gitea (built from its module)
//! holds the repository and delivers its own signed `push` webhooks to the manager's receiver.
//! The manager polls sources only once an hour and the object's interval is an hour, so only
//! the webhook can make it apply a new commit within the test. A delivery without the right
//! signature is refused (401) and starts nothing; the same delivery twice acts once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::json;
use support::operator::{CONFIG, ready_with};
use support::pulls::{deliver, sign, with_webhooks};
use tfops_testcluster::gitea::Gitea;

const SECRET: &str = "webhook-s3cret";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_signed_push_reconciles_at_once_and_an_unsigned_one_is_refused() {
    let gitea = Gitea::start().await.unwrap();
    gitea.create_repo("infra").await.unwrap();
    let first = gitea
        .push(
            &gitea.admin,
            "infra",
            "main",
            &[("main.tf", CONFIG)],
            "first",
        )
        .await
        .unwrap();
    // The secret's file as `kubectl create secret --from-file` mounts it: with a newline.
    let (op, receiver, _dir) = with_webhooks(&format!("{SECRET}\n")).await;
    assert_ne!(
        receiver, "-",
        "the manager names where it receives webhooks"
    );
    let url = gitea.clone_url("infra");
    op.apply(&op.manifest(
        "app",
        json!({"approvePlan": "auto", "sourceRef": {"url": url}}),
    ));
    let first_ = first.clone();
    op.wait_for("app", "applied the first commit", 180, move |t| {
        ready_with(t, "TerraformAppliedSucceed")
            && t.status.as_ref().is_some_and(|s| {
                s.last_applied_revision
                    .as_deref()
                    .is_some_and(|r| r.ends_with(&first_))
            })
    })
    .await;

    // Gitea's own webhook, signed with the secret, to the manager's receiver.
    let hooks = format!("/repos/{}/infra/hooks", gitea.admin.login);
    gitea
        .call(
            &gitea.admin,
            reqwest::Method::POST,
            &hooks,
            Some(json!({
                "type": "gitea", "active": true, "events": ["push"],
                "config": {"url": format!("http://{receiver}/hooks/gitea"), "content_type": "json", "secret": SECRET},
            })),
        )
        .await
        .unwrap();

    // Deliveries without the secret's signature: refused, nothing asked of the poller.
    let forged = serde_json::to_vec(&json!({
        "ref": "refs/heads/main",
        "repository": {"full_name": "tfops-admin/infra", "clone_url": url},
    }))
    .unwrap();
    assert_eq!(
        deliver(&receiver, "push", "forged-1", None, &forged).await,
        401
    );
    let wrong = sign(SECRET, b"something else");
    assert_eq!(
        deliver(&receiver, "push", "forged-2", Some(&wrong), &forged).await,
        401
    );
    // Signed, the same delivery twice: accepted once, then answered as a duplicate.
    let signed = sign(SECRET, &forged);
    assert_eq!(
        deliver(&receiver, "push", "replayed", Some(&signed), &forged).await,
        202
    );
    assert_eq!(
        deliver(&receiver, "push", "replayed", Some(&signed), &forged).await,
        200
    );

    // A push: Gitea delivers it, the manager polls that repository at once, the object
    // applies the new commit an hour before its poll or interval would.
    let pushed = std::time::Instant::now();
    let second = gitea
        .push(
            &gitea.admin,
            "infra",
            "main",
            &[("main.tf", &CONFIG.replace("hello", "bonjour"))],
            "second",
        )
        .await
        .unwrap();
    let second_ = second.clone();
    let t = op
        .wait_for("app", "applied the pushed commit", 120, move |t| {
            ready_with(t, "TerraformAppliedSucceed")
                && t.status.as_ref().is_some_and(|s| {
                    s.last_applied_revision
                        .as_deref()
                        .is_some_and(|r| r.ends_with(&second_))
                })
        })
        .await;
    println!(
        "push to applied (plan and apply included): {:.1} s, at {:?}",
        pushed.elapsed().as_secs_f64(),
        t.status.unwrap().last_applied_revision
    );
    let manager = op.manager();
    let count = |result: &str| {
        format!("tfops_webhook_deliveries_total{{event=\"push\",result=\"{result}\"}}")
    };
    // Refused ones are counted without the event they claimed (an unsigned caller makes no
    // new series).
    assert_eq!(
        manager
            .counter("tfops_webhook_deliveries_total{event=\"-\",result=\"refused\"}")
            .await,
        2.0
    );
    assert_eq!(manager.counter(&count("duplicate")).await, 1.0);
    assert!(
        manager.counter(&count("accepted")).await >= 2.0,
        "our signed one and Gitea's: {}",
        manager.get("/metrics").await.1
    );
}
