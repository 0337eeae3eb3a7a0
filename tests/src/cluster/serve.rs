//! HTTPS on 127.0.0.1 with a CA made at start, and authentication by bearer token.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::Value;

use super::errors::ApiError;
use super::handlers;
use super::store::Store;

/// What every connection shares.
pub(super) struct Shared {
    pub store: Mutex<Store>,
    pub admin_token: String,
    pub uids: std::sync::atomic::AtomicU64,
}

fn lock(store: &Mutex<Store>) -> std::sync::MutexGuard<'_, Store> {
    // A panic in one request cannot leave the store half-written in a way later requests
    // care about; keep serving.
    store.lock().unwrap_or_else(|e| e.into_inner())
}

type Body = BoxBody<Bytes, std::convert::Infallible>;

fn json_response(code: u16, body: &Value) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())).boxed());
    *response.status_mut() =
        hyper::StatusCode::from_u16(code).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}

/// The query's `key=value` pairs, decoded.
fn query(req: &Request<Incoming>) -> std::collections::BTreeMap<String, String> {
    form_urlencoded::parse(req.uri().query().unwrap_or_default().as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

/// A watch: events as JSON lines, from `resourceVersion` on, until `timeoutSeconds` (the real
/// server's default is a few minutes; 30 s here) or the client goes.
fn watch(
    shared: Arc<Shared>,
    target: handlers::Target,
    selector: super::selectors::LabelSelector,
    q: &std::collections::BTreeMap<String, String>,
) -> Response<Body> {
    let since = q
        .get("resourceVersion")
        .filter(|v| !v.is_empty() && *v != "0")
        .and_then(|v| v.parse::<u64>().ok());
    let timeout = q
        .get("timeoutSeconds")
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(30);
    let (tx, rx) = tokio::sync::mpsc::channel::<
        Result<hyper::body::Frame<Bytes>, std::convert::Infallible>,
    >(64);
    tokio::spawn(async move {
        let deadline = tokio::time::sleep(std::time::Duration::from_secs(timeout));
        tokio::pin!(deadline);
        let mut changed = lock(&shared.store).subscribe();
        let mut since = since;
        loop {
            let (events, reached) = {
                let store = lock(&shared.store);
                super::registry::watch_events(
                    &store,
                    &target.resource,
                    target.namespace.as_deref(),
                    &selector,
                    since,
                )
            };
            for event in events {
                let line = Bytes::from(format!("{event}\n"));
                if tx.send(Ok(hyper::body::Frame::data(line))).await.is_err() {
                    return;
                }
            }
            since = Some(reached);
            tokio::select! {
                _ = changed.changed() => {}
                () = &mut deadline => return,
            }
        }
    });
    let mut response =
        Response::new(StreamBody::new(tokio_stream::wrappers::ReceiverStream::new(rx)).boxed());
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}

async fn respond(shared: Arc<Shared>, req: Request<Incoming>) -> Response<Body> {
    let authorized = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|t| t == shared.admin_token);
    if !authorized {
        let e = ApiError::unauthorized();
        return json_response(e.code, &e.status());
    }
    let method = req.method().as_str().to_string();
    let path = req.uri().path().to_string();
    if path == "/version" {
        return json_response(200, &handlers::version());
    }
    if let Some(d) = handlers::discovery(&path) {
        return json_response(200, &d);
    }
    let target = match handlers::target(&path) {
        Ok(t) => t,
        Err(e) => return json_response(e.code, &e.status()),
    };
    let media = req
        .headers()
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .to_string();
    if matches!(method.as_str(), "POST" | "PUT") && !media.starts_with("application/json") {
        // (PATCH bodies name their patch type; the handler reads them.)
        let e = ApiError::unsupported_media_type(&media);
        return json_response(e.code, &e.status());
    }
    let q = query(&req);
    let selector = match super::selectors::LabelSelector::parse(
        q.get("labelSelector").map(String::as_str).unwrap_or(""),
    ) {
        Ok(s) => s,
        Err(e) => return json_response(e.code, &e.status()),
    };
    if method == "GET"
        && target.name.is_none()
        && q.get("watch").is_some_and(|v| v == "1" || v == "true")
    {
        return watch(shared, target, selector, &q);
    }
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            let e = ApiError::bad_request(format!("reading the body: {e}"));
            return json_response(e.code, &e.status());
        }
    };
    let uid = || {
        let n = shared
            .uids
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        format!("00000000-0000-4000-8000-{n:012x}")
    };
    let call = handlers::Call {
        method: &method,
        target: &target,
        selector: &selector,
        media_type: &media,
        body: &body,
    };
    let result = handlers::handle(&mut lock(&shared.store), &call, uid, jiff::Timestamp::now());
    match result {
        Ok((code, body)) => json_response(code, &body),
        Err(e) => json_response(e.code, &e.status()),
    }
}

/// Accepts TLS connections on `listener` and serves each (HTTP/1.1 or HTTP/2).
pub(super) async fn accept(
    listener: tokio::net::TcpListener,
    tls: Arc<rustls::ServerConfig>,
    shared: Arc<Shared>,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    while let Ok((tcp, _)) = listener.accept().await {
        let (acceptor, shared) = (acceptor.clone(), shared.clone());
        tokio::spawn(async move {
            let Ok(stream) = acceptor.accept(tcp).await else {
                return;
            };
            let service = hyper::service::service_fn(move |req| {
                let shared = shared.clone();
                async move { Ok::<_, std::convert::Infallible>(respond(shared, req).await) }
            });
            let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
