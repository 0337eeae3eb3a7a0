//! The forge's webhooks (`--webhook-addr`, `POST /hooks/gitea`): a `push` makes the source
//! poller resolve that repository's sources at once, instead of at its next poll.
//!
//! The signature (`X-Gitea-Signature`, HMAC-SHA256 of the raw body with the secret of
//! `--webhook-secret-file`) is checked, in constant time, before anything of the body is
//! parsed; a missing or wrong one is refused with 401 and nothing happens. What an unsigned
//! caller can cost is bounded: a body of at most [`MAX_BODY`], read within [`READ_TIMEOUT`],
//! at most [`CONNECTIONS`] connections at once, and metric labels from a fixed set. A delivery id seen before
//! (`X-Gitea-Delivery`) is answered and not acted on again. The answer comes at once (Gitea
//! gives up after 5 s); the poll runs after. A push only names the repository to poll: the
//! revision run is whatever the poll resolves, so even a replayed delivery can start nothing
//! a poll would not.

use std::collections::{HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tfops_kube::controller::PollNow;

use super::metrics::Metrics;

/// Where Gitea's deliveries are received.
pub const GITEA_PATH: &str = "/hooks/gitea";

/// The largest body read. Gitea's push payload lists at most a few dozen commits (its
/// `[webhook]` settings), far below this.
pub const MAX_BODY: usize = 5 << 20;

/// How long a request's head and body may take to arrive.
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections served at once; more wait to be accepted.
pub const CONNECTIONS: usize = 64;

/// The events a delivery is counted under; anything else is `other`, and an unsigned one `-`
/// (so that a caller without the secret cannot make new metric series).
const EVENTS: [&str; 5] = [
    "push",
    "pull_request",
    "issue_comment",
    "pull_request_approved",
    "pull_request_rejected",
];

/// How many delivery ids are remembered to refuse duplicates.
const REMEMBERED: usize = 4096;

/// Receives the forge's webhooks.
pub struct Receiver {
    key: ring::hmac::Key,
    poll_now: PollNow,
    /// Asks the pull-request loop to look at a repository (`pull_request`, `issue_comment`,
    /// reviews).
    pulls: Option<PollNow>,
    metrics: Arc<Metrics>,
    seen: Mutex<Seen>,
    /// This replica leads (only the leader's poller runs).
    leading: Arc<AtomicBool>,
}

impl std::fmt::Debug for Receiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receiver").finish_non_exhaustive()
    }
}

/// The delivery ids received lately, oldest first.
#[derive(Default)]
struct Seen {
    order: VecDeque<String>,
    ids: HashSet<String>,
}

impl Seen {
    /// Records `id`; whether it is new.
    fn first(&mut self, id: &str) -> bool {
        if !self.ids.insert(id.to_string()) {
            return false;
        }
        self.order.push_back(id.to_string());
        if self.order.len() > REMEMBERED
            && let Some(old) = self.order.pop_front()
        {
            self.ids.remove(&old);
        }
        true
    }
}

/// What a delivery came to (also the metric's `result`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Accepted,
    Duplicate,
    Ignored,
    Refused,
    Invalid,
    Standby,
}

impl Verdict {
    fn as_str(self) -> &'static str {
        match self {
            Self::Accepted => "accepted",
            Self::Duplicate => "duplicate",
            Self::Ignored => "ignored",
            Self::Refused => "refused",
            Self::Invalid => "invalid",
            Self::Standby => "standby",
        }
    }
}

impl Receiver {
    /// A receiver checking signatures with `secret` (the webhook's secret in Gitea) and asking
    /// `poll_now` for polls while `leading`.
    pub fn new(
        secret: &[u8],
        poll_now: PollNow,
        metrics: Arc<Metrics>,
        leading: Arc<AtomicBool>,
    ) -> Self {
        Self {
            key: ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret),
            poll_now,
            pulls: None,
            metrics,
            seen: Mutex::new(Seen::default()),
            leading,
        }
    }

    /// Also asks `pulls` to look at a repository's pull requests on its `pull_request` and
    /// `issue_comment` deliveries (else they are ignored).
    #[must_use]
    pub fn with_pull_requests(mut self, pulls: PollNow) -> Self {
        self.pulls = Some(pulls);
        self
    }

    /// Handles one request: the status and a line saying why.
    async fn handle(&self, request: Request<hyper::body::Incoming>) -> (StatusCode, String) {
        if request.uri().path() != GITEA_PATH {
            return (
                StatusCode::NOT_FOUND,
                format!("not found: deliveries go to {GITEA_PATH}"),
            );
        }
        if request.method() != Method::POST {
            return (StatusCode::METHOD_NOT_ALLOWED, "POST a delivery".into());
        }
        let header = |name: &str| {
            request
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string()
        };
        let (event, delivery, signature) = (
            header("X-Gitea-Event"),
            header("X-Gitea-Delivery"),
            header("X-Gitea-Signature"),
        );
        let declared = request
            .headers()
            .get(hyper::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
        if declared.is_some_and(|n| n > MAX_BODY) {
            self.count("-", Verdict::Invalid);
            return (
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("a delivery is at most {MAX_BODY} bytes"),
            );
        }
        let read = tokio::time::timeout(
            READ_TIMEOUT,
            Limited::new(request.into_body(), MAX_BODY).collect(),
        );
        let body = match read.await {
            Ok(Ok(body)) => body.to_bytes(),
            Ok(Err(e)) => {
                self.count("-", Verdict::Invalid);
                return (StatusCode::BAD_REQUEST, format!("reading the body: {e}"));
            }
            Err(_) => {
                self.count("-", Verdict::Invalid);
                return (StatusCode::REQUEST_TIMEOUT, "the body took too long".into());
            }
        };
        let (result, status, message) = self.decide(&event, &delivery, &signature, &body);
        if result == Verdict::Refused {
            // Nothing the caller chose is logged or counted: it proved nothing.
            self.count("-", result);
            tracing::warn!("webhook delivery refused: bad or no signature");
        } else {
            self.count(&event, result);
            tracing::info!(%event, %delivery, result = result.as_str(), %message, "webhook delivery");
        }
        (status, message)
    }

    /// Checks and acts on a delivery whose body was read whole.
    fn decide(
        &self,
        event: &str,
        delivery: &str,
        signature: &str,
        body: &[u8],
    ) -> (Verdict, StatusCode, String) {
        let signed = decode_hex(signature.trim())
            .is_some_and(|sig| ring::hmac::verify(&self.key, body, &sig).is_ok());
        if !signed {
            return (
                Verdict::Refused,
                StatusCode::UNAUTHORIZED,
                "refused: X-Gitea-Signature is missing or does not match the webhook secret".into(),
            );
        }
        // A standby's poller does not run: the forge records the failure, the leader's poll
        // picks the push up.
        if !self.leading.load(Ordering::Relaxed) {
            return (
                Verdict::Standby,
                StatusCode::SERVICE_UNAVAILABLE,
                "this replica is a standby, not the leader: its poll will find the push".into(),
            );
        }
        // A delivery id is a UUID; anything much longer is not remembered whole.
        let delivery: String = delivery.chars().take(64).collect();
        if !delivery.is_empty()
            && !self
                .seen
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .first(&delivery)
        {
            return (
                Verdict::Duplicate,
                StatusCode::OK,
                format!("delivery {delivery} was received before: nothing done again"),
            );
        }
        self.act(event, body)
    }

    /// Acts on a signed, new delivery: asks for a poll, or a look at pull requests, of the
    /// repository it names.
    fn act(&self, event: &str, body: &[u8]) -> (Verdict, StatusCode, String) {
        let target = match (event, &self.pulls) {
            ("push", _) => &self.poll_now,
            // A review (Gitea names approving and rejecting ones apart) changes what a plan's
            // approval is.
            (
                "pull_request"
                | "issue_comment"
                | "pull_request_approved"
                | "pull_request_rejected",
                Some(pulls),
            ) => pulls,
            _ => {
                return (
                    Verdict::Ignored,
                    StatusCode::ACCEPTED,
                    format!("event {event:?} is not acted on"),
                );
            }
        };
        let Ok(payload) = serde_json::from_slice::<serde_json::Value>(body) else {
            return (
                Verdict::Invalid,
                StatusCode::BAD_REQUEST,
                format!("the {event} payload is not JSON"),
            );
        };
        // tfops' own comment, edited: nothing new to look at.
        let own = payload["comment"]["body"]
            .as_str()
            .is_some_and(|b| b.starts_with(tfops_core::pulls::MARKER));
        if event == "issue_comment" && own {
            return (
                Verdict::Ignored,
                StatusCode::ACCEPTED,
                "tfops' own comment: nothing to do".into(),
            );
        }
        // Only which repository: what to plan or poll is read from the forge and the sources,
        // never from the delivery.
        let repository = &payload["repository"];
        let named = ["clone_url", "html_url", "ssh_url"]
            .iter()
            .filter_map(|k| repository[*k].as_str())
            .filter(|url| target.repository(url))
            .count();
        if named == 0 {
            return (
                Verdict::Invalid,
                StatusCode::BAD_REQUEST,
                format!("the {event} payload names no repository URL"),
            );
        }
        let name = repository["full_name"].as_str().unwrap_or("the repository");
        let doing = if event == "push" {
            "polling the sources of"
        } else {
            "looking at the pull requests of"
        };
        (
            Verdict::Accepted,
            StatusCode::ACCEPTED,
            format!("{doing} {name}"),
        )
    }

    fn count(&self, event: &str, result: Verdict) {
        let event = match event {
            "-" => "-",
            e => EVENTS.iter().find(|k| **k == e).copied().unwrap_or("other"),
        };
        self.metrics.webhook_delivery(event, result.as_str());
    }
}

/// Lowercase or uppercase hex as bytes; `None` for anything else (or nothing).
fn decode_hex(text: &str) -> Option<Vec<u8>> {
    if text.is_empty() || !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Serves `receiver` on `addr` in a task of its own, for as long as the process runs; gives
/// the address bound.
///
/// # Errors
/// When `addr` cannot be bound.
pub async fn serve(addr: SocketAddr, receiver: Arc<Receiver>) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let open = Arc::new(tokio::sync::Semaphore::new(CONNECTIONS));
    tokio::spawn(async move {
        loop {
            // The semaphore is never closed.
            let Ok(permit) = open.clone().acquire_owned().await else {
                return;
            };
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors, say: do not spin on it.
                    tracing::warn!(error = %e, "accepting a webhook connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let receiver = receiver.clone();
            tokio::spawn(async move {
                let _permit = permit;
                let service =
                    hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                        let receiver = receiver.clone();
                        async move {
                            let (status, message) = receiver.handle(req).await;
                            let mut response =
                                Response::new(Full::new(Bytes::from(message + "\n")));
                            *response.status_mut() = status;
                            Ok::<_, std::convert::Infallible>(response)
                        }
                    });
                let _ = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(READ_TIMEOUT)
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(bound)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
