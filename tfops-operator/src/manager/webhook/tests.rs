//! Deliveries as Gitea signs them: only a signed push asks for a poll, once per delivery.

use super::*;

const SECRET: &[u8] = b"webhook-secret";

fn receiver() -> (Receiver, PollNow, Arc<Metrics>) {
    let now = PollNow::default();
    let metrics = Arc::new(Metrics::new());
    let leading = Arc::new(AtomicBool::new(true));
    (
        Receiver::new(SECRET, now.clone(), metrics.clone(), leading),
        now,
        metrics,
    )
}

fn push() -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "ref": "refs/heads/main",
        "after": "0123456789abcdef0123456789abcdef01234567",
        "repository": {
            "full_name": "team/infra",
            "clone_url": "http://127.0.0.1:3000/team/infra.git",
            "html_url": "http://127.0.0.1:3000/team/infra",
            "ssh_url": "git@127.0.0.1:team/infra.git",
        },
    }))
    .unwrap()
}

/// The hex HMAC-SHA256 of `body` with `secret`, as Gitea sends it.
fn sign(secret: &[u8], body: &[u8]) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret);
    tfops_core::digest::hex(ring::hmac::sign(&key, body).as_ref())
}

#[test]
fn a_signed_push_asks_for_a_poll_of_its_repository() {
    let (r, now, metrics) = receiver();
    let body = push();
    let (verdict, status, message) = r.decide("push", "d-1", &sign(SECRET, &body), &body);
    assert_eq!((verdict, status), (Verdict::Accepted, StatusCode::ACCEPTED));
    assert_eq!(message, "polling the sources of team/infra");
    assert_eq!(now.asked(), ["127.0.0.1/team/infra"]);
    r.count("push", verdict);
    assert!(
        metrics
            .encode()
            .contains("tfops_webhook_deliveries_total{event=\"push\",result=\"accepted\"} 1")
    );
}

#[test]
fn a_missing_wrong_or_foreign_signature_is_refused_and_asks_nothing() {
    let (r, now, _) = receiver();
    let body = push();
    let mut tampered = body.clone();
    tampered.extend_from_slice(b" ");
    for (signature, body) in [
        (String::new(), &body),
        ("zz".repeat(32), &body),
        (sign(b"another secret", &body), &body),
        (sign(SECRET, &body), &tampered),
        (sign(SECRET, &body)[..62].to_string(), &body),
    ] {
        let (verdict, status, message) = r.decide("push", "d-2", &signature, body);
        assert_eq!(
            (verdict, status),
            (Verdict::Refused, StatusCode::UNAUTHORIZED)
        );
        assert!(
            message.starts_with("refused: X-Gitea-Signature"),
            "{message}"
        );
    }
    assert!(now.asked().is_empty(), "nothing asked: {:?}", now.asked());
    // A refused delivery is not remembered: the genuine one with its id still counts.
    let (verdict, ..) = r.decide("push", "d-2", &sign(SECRET, &body), &body);
    assert_eq!(verdict, Verdict::Accepted);
}

#[test]
fn the_same_delivery_twice_acts_once() {
    let (r, now, _) = receiver();
    let body = push();
    let signature = sign(SECRET, &body);
    assert_eq!(
        r.decide("push", "d-3", &signature, &body).0,
        Verdict::Accepted
    );
    let _ = now.asked();
    let (verdict, status, message) = r.decide("push", "d-3", &signature, &body);
    assert_eq!((verdict, status), (Verdict::Duplicate, StatusCode::OK));
    assert!(message.contains("received before"), "{message}");
}

#[test]
fn other_events_and_bad_payloads_are_said_so() {
    let (r, now, _) = receiver();
    let body = br#"{"action":"opened","number":1}"#;
    let (verdict, status, _) = r.decide("pull_request", "d-4", &sign(SECRET, body), body);
    assert_eq!((verdict, status), (Verdict::Ignored, StatusCode::ACCEPTED));
    let body = b"not json";
    let (verdict, status, _) = r.decide("push", "d-5", &sign(SECRET, body), body);
    assert_eq!(
        (verdict, status),
        (Verdict::Invalid, StatusCode::BAD_REQUEST)
    );
    let body = br#"{"repository":{}}"#;
    let (verdict, ..) = r.decide("push", "d-6", &sign(SECRET, body), body);
    assert_eq!(verdict, Verdict::Invalid);
    assert!(now.asked().is_empty());
}

#[test]
fn metric_labels_come_from_a_fixed_set_whatever_a_caller_sends() {
    let (r, _, metrics) = receiver();
    r.count("push", Verdict::Accepted);
    r.count("made-up-event-1", Verdict::Ignored);
    r.count("made-up-event-2", Verdict::Ignored);
    r.count("-", Verdict::Refused);
    let text = metrics.encode();
    assert!(
        text.contains("tfops_webhook_deliveries_total{event=\"other\",result=\"ignored\"} 2"),
        "{text}"
    );
    assert!(
        text.contains("tfops_webhook_deliveries_total{event=\"-\",result=\"refused\"} 1"),
        "{text}"
    );
    assert!(!text.contains("made-up"), "{text}");
}

#[test]
fn pull_request_and_comment_deliveries_ask_the_pull_request_loop_not_the_poller() {
    let (r, now, _) = receiver();
    let pulls = PollNow::default();
    let r = r.with_pull_requests(pulls.clone());
    let mut body: serde_json::Value = serde_json::from_slice(&push()).unwrap();
    body["action"] = "synchronized".into();
    let body = serde_json::to_vec(&body).unwrap();
    let signature = sign(SECRET, &body);
    let (verdict, status, message) = r.decide("pull_request", "p-1", &signature, &body);
    assert_eq!((verdict, status), (Verdict::Accepted, StatusCode::ACCEPTED));
    assert!(message.contains("pull requests of team/infra"), "{message}");
    assert_eq!(pulls.asked(), ["127.0.0.1/team/infra"]);
    assert!(now.asked().is_empty(), "a pull request moves no branch");
    // The same delivery again acts once.
    let (verdict, ..) = r.decide("pull_request", "p-1", &signature, &body);
    assert_eq!(verdict, Verdict::Duplicate);
    let (verdict, ..) = r.decide("issue_comment", "p-2", &signature, &body);
    assert_eq!(verdict, Verdict::Accepted);
    // Unsigned: nothing asked.
    let (verdict, ..) = r.decide("issue_comment", "p-3", "00", &body);
    assert_eq!(verdict, Verdict::Refused);
}
