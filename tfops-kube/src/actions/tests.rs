//! The edits' conflict handling against a scripted API server: a conflict makes the edit be
//! decided again on a fresh read, so an approval never lands on a plan that changed under it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use http_body_util::BodyExt;
use serde_json::{Value, json};

use super::*;

/// What the scripted server answers, in order, and what it was sent.
#[derive(Default)]
struct Script {
    answers: VecDeque<(&'static str, u16, Value)>,
    patches: Vec<Value>,
    requests: usize,
}

fn object(version: &str, pending: &str) -> Value {
    json!({
        "apiVersion": "infra.argocd.io/v1alpha1", "kind": "Terraform",
        "metadata": {"name": "app", "namespace": "team-a", "resourceVersion": version},
        "spec": {"sourceRef": {"kind": "GitRepository", "url": "https://git.example/infra"}},
        "status": {"plan": {"pending": pending}},
    })
}

fn conflict() -> Value {
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "Operation cannot be fulfilled on terraforms.infra.argocd.io \"app\": the object has been modified; please apply your changes to the latest version and try again",
        "reason": "Conflict", "details": {"name": "app", "group": "infra.argocd.io", "kind": "terraforms"},
        "code": 409,
    })
}

/// Actions whose client talks to `script`.
fn actions(script: Arc<Mutex<Script>>) -> Actions {
    let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
        let script = script.clone();
        async move {
            let method = request.method().to_string();
            let body = request.into_body().collect().await.unwrap().to_bytes();
            let mut s = script.lock().unwrap();
            s.requests += 1;
            let (expected, code, answer) = s
                .answers
                .pop_front()
                .unwrap_or_else(|| panic!("an unexpected {method}"));
            assert_eq!(method, expected);
            if method == "PATCH" {
                s.patches.push(serde_json::from_slice(&body).unwrap());
            }
            let response = http::Response::builder()
                .status(code)
                .header("content-type", "application/json")
                .body(kube::client::Body::from(
                    serde_json::to_vec(&answer).unwrap(),
                ))
                .unwrap();
            Ok::<_, std::convert::Infallible>(response)
        }
    });
    Actions::new(kube::Client::new(service, "default"))
}

fn key() -> ObjectKey {
    ObjectKey::new("team-a", "app")
}

#[tokio::test]
async fn an_approval_refused_with_a_conflict_is_decided_again_on_the_new_plan() {
    // Plan A was pending when read; before the patch landed the controller made plan B.
    let script = Arc::new(Mutex::new(Script {
        answers: VecDeque::from([
            ("GET", 200, object("1", "plan-main-aaaaaaaaaa")),
            ("PATCH", 409, conflict()),
            ("GET", 200, object("2", "plan-main-bbbbbbbbbb")),
            ("PATCH", 200, object("3", "plan-main-bbbbbbbbbb")),
        ]),
        ..Script::default()
    }));
    let approved = actions(script.clone()).approve(&key(), None).await.unwrap();
    assert_eq!(approved.plan_id, "plan-main-bbbbbbbbbb");
    let s = script.lock().unwrap();
    assert_eq!(s.patches[0]["metadata"]["resourceVersion"], "1");
    assert_eq!(s.patches[1]["metadata"]["resourceVersion"], "2");
    let value = s.patches[1]["metadata"]["annotations"][annotations::APPROVE]
        .as_str()
        .unwrap();
    assert!(value.starts_with("plan-main-bbbbbbbbbb@"), "{value}");
}

#[tokio::test]
async fn an_approval_of_a_named_plan_that_changed_meanwhile_is_refused() {
    let script = Arc::new(Mutex::new(Script {
        answers: VecDeque::from([
            ("GET", 200, object("1", "plan-main-aaaaaaaaaa")),
            ("PATCH", 409, conflict()),
            ("GET", 200, object("2", "plan-main-bbbbbbbbbb")),
        ]),
        ..Script::default()
    }));
    let e = actions(script.clone())
        .approve(&key(), Some("plan-main-aaaaaaaaaa"))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, ActionError::StalePlan { given, pending, .. }
            if given == "plan-main-aaaaaaaaaa" && pending == "plan-main-bbbbbbbbbb"),
        "{e:?}"
    );
    let s = script.lock().unwrap();
    assert_eq!(s.patches.len(), 1, "nothing patched after the plan changed");
    assert!(s.answers.is_empty());
}

#[tokio::test]
async fn an_object_that_keeps_changing_ends_the_edit_with_a_clear_error() {
    let mut answers = VecDeque::new();
    for version in 0..ATTEMPTS {
        answers.push_back(("GET", 200, object(&version.to_string(), "")));
        answers.push_back(("PATCH", 409, conflict()));
    }
    let script = Arc::new(Mutex::new(Script {
        answers,
        ..Script::default()
    }));
    let e = actions(script.clone())
        .request(&key(), Request::Suspend)
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("team-a/app kept changing while it was edited ({ATTEMPTS} attempts)")
    );
    let s = script.lock().unwrap();
    assert_eq!(s.requests, 2 * ATTEMPTS);
    assert!(s.patches.iter().all(|p| {
        p["metadata"]["annotations"]["infra.argocd.io/suspend"]
            .as_str()
            .is_some_and(|v| v.starts_with("suspended with tfops suspend at "))
    }));
}

#[tokio::test]
async fn approving_a_plan_already_being_applied_is_refused_and_patches_nothing() {
    let mut applying = object("1", "plan-main-aaaaaaaaaa");
    applying["status"]["conditions"] = json!([{
        "type": "Ready", "status": "Unknown", "reason": "TerraformApplying",
        "message": "applying plan plan-main-aaaaaaaaaa (+1 ~0 -0) at main@sha1:aa, approved by approvePlan: auto",
        "lastTransitionTime": "2026-12-01T10:00:00Z", "observedGeneration": 1,
    }]);
    let script = Arc::new(Mutex::new(Script {
        answers: VecDeque::from([("GET", 200, applying)]),
        ..Script::default()
    }));
    let e = actions(script.clone())
        .approve(&key(), None)
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "plan plan-main-aaaaaaaaaa of team-a/app is already approved and being applied: nothing to approve (watch it with tfops get app)"
    );
    assert!(script.lock().unwrap().patches.is_empty());
}
