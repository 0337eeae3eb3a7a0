//! Pull requests on the test Gitea, as the tests of the pull-request loop read them: the
//! admin's repository, opening a pull request, tfops' comment and the commit statuses, waited
//! for until a condition holds.

use std::time::{Duration, Instant};

use super::operator::Operator;
use reqwest::Method;
use serde_json::{Value, json};
use tfops_core::pulls::MARKER;
use tfops_testcluster::gitea::Gitea;

/// The repository's path of `user`'s repository `infra`.
pub fn repo(gitea: &Gitea) -> String {
    format!("/repos/{}/infra", gitea.admin.login)
}

/// Opens a pull request of `branch` into `main` as the admin: its number.
pub async fn open(gitea: &Gitea, branch: &str) -> u64 {
    let body = json!({"head": branch, "base": "main", "title": format!("change {branch}")});
    let pull = gitea
        .call(
            &gitea.admin,
            Method::POST,
            &format!("{}/pulls", repo(gitea)),
            Some(body),
        )
        .await
        .unwrap();
    pull["number"].as_u64().unwrap()
}

/// The comments on pull request `number` that carry tfops' marker.
pub async fn ours(gitea: &Gitea, number: u64) -> Vec<String> {
    let path = format!("{}/issues/{number}/comments", repo(gitea));
    let all = gitea
        .call(&gitea.admin, Method::GET, &path, None)
        .await
        .unwrap();
    all.as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["body"].as_str())
        .filter(|b| b.starts_with(MARKER))
        .map(str::to_string)
        .collect()
}

/// The newest status per context on `sha`: (state, description). Of two entries of one
/// context in Gitea's combined status, the one created last (highest id) counts.
pub async fn statuses(
    gitea: &Gitea,
    sha: &str,
) -> std::collections::BTreeMap<String, (String, String)> {
    let path = format!("{}/commits/{sha}/status", repo(gitea));
    let combined = gitea
        .call(&gitea.admin, Method::GET, &path, None)
        .await
        .unwrap();
    let mut newest: std::collections::BTreeMap<String, (u64, (String, String))> =
        Default::default();
    for s in combined["statuses"].as_array().into_iter().flatten() {
        let id = s["id"].as_u64().unwrap_or(0);
        let entry = (
            id,
            (
                state_of(s),
                s["description"].as_str().unwrap_or("").to_string(),
            ),
        );
        let context = s["context"].as_str().unwrap().to_string();
        if newest.get(&context).is_none_or(|(seen, _)| *seen < id) {
            newest.insert(context, entry);
        }
    }
    newest.into_iter().map(|(c, (_, v))| (c, v)).collect()
}

/// Every state the status `context` on `sha` had, oldest first (Gitea keeps each one set).
pub async fn history(gitea: &Gitea, sha: &str, context: &str) -> Vec<String> {
    // Gitea's `highestindex` orders by index ascending (its `leastindex` is descending).
    let path = format!(
        "{}/commits/{sha}/statuses?sort=highestindex&limit=50",
        repo(gitea)
    );
    let all = gitea
        .call(&gitea.admin, Method::GET, &path, None)
        .await
        .unwrap();
    all.as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["context"].as_str() == Some(context))
        .map(state_of)
        .collect()
}

/// A commit status's state (`status` in Gitea's combined status, `state` in its list).
fn state_of(status: &Value) -> String {
    status["status"]
        .as_str()
        .or(status["state"].as_str())
        .unwrap_or("")
        .to_string()
}

/// Waits (at most `seconds`) until `test` of the pull request's single tfops comment holds;
/// gives it. Panics when there is ever more than one.
pub async fn comment_where(
    gitea: &Gitea,
    number: u64,
    seconds: u64,
    test: impl Fn(&str) -> bool,
) -> String {
    let start = Instant::now();
    loop {
        let found = ours(gitea, number).await;
        assert!(found.len() <= 1, "one comment per pull request: {found:#?}");
        if let Some(body) = found.first().filter(|b| test(b)) {
            return body.clone();
        }
        assert!(
            start.elapsed() < Duration::from_secs(seconds),
            "#{number}: no such comment within {seconds} s; now: {found:#?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

pub async fn status_where(
    gitea: &Gitea,
    sha: &str,
    context: &str,
    seconds: u64,
    test: impl Fn(&str, &str) -> bool,
) -> (String, String) {
    let start = Instant::now();
    loop {
        let now = statuses(gitea, sha).await;
        if let Some((state, description)) = now.get(context).filter(|(s, d)| test(s, d)) {
            return (state.clone(), description.clone());
        }
        assert!(
            start.elapsed() < Duration::from_secs(seconds),
            "{sha}: no such status {context} within {seconds} s; now: {now:#?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The signature Gitea sends of `body` with the webhook secret `secret` (`X-Gitea-Signature`).
pub fn sign(secret: &str, body: &[u8]) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
    tfops_core::digest::hex(ring::hmac::sign(&key, body).as_ref())
}

/// Posts `body` to the receiver at `addr` as a Gitea delivery of `event`: its status code.
pub async fn deliver(
    addr: &str,
    event: &str,
    delivery: &str,
    signature: Option<&str>,
    body: &[u8],
) -> u16 {
    let mut request = reqwest::Client::new()
        .post(format!("http://{addr}/hooks/gitea"))
        .header("X-Gitea-Event", event)
        .header("X-Gitea-Delivery", delivery)
        .header("Content-Type", "application/json")
        .body(body.to_vec());
    if let Some(signature) = signature {
        request = request.header("X-Gitea-Signature", signature);
    }
    request.send().await.unwrap().status().as_u16()
}

/// The operator with its webhook receiver on a free port, checking signatures with `secret`,
/// its poll an hour apart (only deliveries make it look sooner); the receiver's address. The
/// directory holds the secret's file and must outlive the operator.
pub async fn with_webhooks(secret: &str) -> (Operator, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let secret_file = dir.path().join("secret");
    std::fs::write(&secret_file, secret).unwrap();
    let op = Operator::start_with(&[
        "--source-poll-interval",
        "1h",
        "--webhook-addr",
        "127.0.0.1:0",
        "--webhook-secret-file",
        secret_file.to_str().unwrap(),
    ])
    .await;
    let receiver = op.manager().webhooks.clone();
    (op, receiver, dir)
}

/// Makes Gitea deliver `events` of the admin's repository `infra` to `receiver`, signed with
/// `secret`.
pub async fn add_hook(gitea: &Gitea, receiver: &str, secret: &str, events: &[&str]) {
    gitea
        .call(
            &gitea.admin,
            Method::POST,
            &format!("{}/hooks", repo(gitea)),
            Some(json!({
                "type": "gitea", "active": true, "events": events,
                "config": {"url": format!("http://{receiver}/hooks/gitea"), "content_type": "json", "secret": secret},
            })),
        )
        .await
        .unwrap();
}

/// The ConfigMap `name` of `team-a` (a pull request's plan), when there is one.
pub async fn stored(op: &Operator, name: &str) -> Option<k8s_openapi::api::core::v1::ConfigMap> {
    kube::Api::namespaced(op.admin.clone(), "team-a")
        .get_opt(name)
        .await
        .unwrap()
}
