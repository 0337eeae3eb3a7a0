//! `/metrics`, `/healthz` and `/readyz` over plain HTTP/1 (hyper): what Prometheus scrapes and
//! what the kubelet probes.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

use super::metrics::Metrics;

/// What the endpoints answer from.
#[derive(Clone, Debug)]
pub struct Endpoints {
    /// The metrics.
    pub metrics: Arc<Metrics>,
    /// Ready: connected, and leading or standing by.
    pub ready: Arc<AtomicBool>,
}

fn answer(endpoints: &Endpoints, path: &str) -> Response<Full<Bytes>> {
    let (status, content_type, body) = match path {
        "/metrics" => (
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            endpoints.metrics.encode(),
        ),
        "/healthz" => (StatusCode::OK, "text/plain", "ok\n".to_string()),
        "/readyz" if endpoints.ready.load(Ordering::Relaxed) => {
            (StatusCode::OK, "text/plain", "ok\n".to_string())
        }
        "/readyz" => (
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain",
            "not ready\n".to_string(),
        ),
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found\n".to_string(),
        ),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    if let Ok(v) = content_type.parse() {
        response
            .headers_mut()
            .insert(hyper::header::CONTENT_TYPE, v);
    }
    response
}

/// Serves the endpoints on `addr` until the task is dropped.
///
/// # Errors
/// When `addr` cannot be bound.
pub async fn serve(addr: SocketAddr, endpoints: Endpoints) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let endpoints = endpoints.clone();
            tokio::spawn(async move {
                let service =
                    hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                        let response = answer(&endpoints, req.uri().path());
                        async move { Ok::<_, std::convert::Infallible>(response) }
                    });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(bound)
}
