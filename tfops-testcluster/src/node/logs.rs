//! The node agent's log server: `GET /containerLogs/NAMESPACE/POD/CONTAINER` over HTTPS, which
//! the API server calls for `pods/log` (so `kubectl logs` and `tfops logs -f` read logs through
//! it). `follow=true` streams what the container writes until it exits; `tailLines` and
//! `limitBytes` are honoured. The API server does not check this certificate (it is started
//! without `--kubelet-certificate-authority`, as the notes say), and this server does not ask
//! for the API server's: it listens on loopback only.

use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::Frame;
use hyper::{Request, Response, StatusCode};

use super::{NodeError, State, lock, pod_ref};

type Body = BoxBody<Bytes, Infallible>;

/// Starts the server on 127.0.0.1, port 0; gives its port and task.
pub(super) async fn serve(
    state: Arc<State>,
    ca: &crate::pki::Ca,
) -> Result<(u16, tokio::task::JoinHandle<()>), NodeError> {
    let cert = ca.serving(&[])?;
    let certs = vec![rustls::pki_types::CertificateDer::from(der(&cert.cert_pem))];
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(der(&cert.key_pem).into());
    let mut tls = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_no_client_auth()
    .with_single_cert(certs, key)?;
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let task = tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let (acceptor, state) = (acceptor.clone(), state.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = hyper::service::service_fn(move |req| {
                    let state = state.clone();
                    async move { Ok::<_, Infallible>(answer(&state, &req)) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    Ok((port, task))
}

/// The DER inside one PEM block.
fn der(pem: &str) -> Vec<u8> {
    use base64::Engine;
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    base64::engine::general_purpose::STANDARD
        .decode(body)
        .unwrap_or_default()
}

fn plain(code: StatusCode, text: String) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(text)).boxed());
    *r.status_mut() = code;
    r
}

fn answer(state: &Arc<State>, req: &Request<hyper::body::Incoming>) -> Response<Body> {
    let parts: Vec<&str> = req
        .uri()
        .path()
        .split('/')
        .filter(|p| !p.is_empty())
        .collect();
    let ["containerLogs", ns, pod, _container] = parts.as_slice() else {
        return plain(
            StatusCode::NOT_FOUND,
            format!("{} not found", req.uri().path()),
        );
    };
    let query: Vec<(String, String)> = req
        .uri()
        .query()
        .unwrap_or("")
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let get = |k: &str| query.iter().find(|(q, _)| q == k).map(|(_, v)| v.as_str());
    let follow = get("follow") == Some("true");
    let tail: Option<usize> = get("tailLines").and_then(|v| v.parse().ok());
    let limit: Option<usize> = get("limitBytes").and_then(|v| v.parse().ok());
    let key = pod_ref(ns, pod);
    let Some(path) = lock(&state.logs).get(&key).cloned() else {
        return plain(
            StatusCode::NOT_FOUND,
            format!("no logs of pod {key} on this node"),
        );
    };
    let text = std::fs::read(&path).unwrap_or_default();
    let start = match tail {
        Some(n) => {
            let mut newlines = 0;
            let mut at = 0;
            for (i, b) in text.iter().enumerate().rev() {
                if *b == b'\n' && i + 1 != text.len() {
                    newlines += 1;
                    if newlines == n {
                        at = i + 1;
                        break;
                    }
                }
            }
            if n == 0 { text.len() } else { at }
        }
        None => 0,
    };
    let mut first = text[start..].to_vec();
    if let Some(limit) = limit {
        first.truncate(limit);
    }
    if !follow {
        return Response::new(Full::new(Bytes::from(first)).boxed());
    }
    let offset = text.len();
    let running_uid = lock(&state.started)
        .iter()
        .find(|(_, r)| **r == key)
        .map(|(uid, _)| uid.clone());
    let stream = futures::stream::unfold(
        (Some(first), offset, state.clone(), path, running_uid, false),
        |(pending, offset, state, path, uid, done)| async move {
            if let Some(bytes) = pending {
                return Some((
                    Ok(Frame::data(Bytes::from(bytes))),
                    (None, offset, state, path, uid, done),
                ));
            }
            if done {
                return None;
            }
            loop {
                let running = uid
                    .as_ref()
                    .is_some_and(|u| lock(&state.running).contains_key(u));
                let len = std::fs::metadata(&path)
                    .map(|m| m.len() as usize)
                    .unwrap_or(0);
                if len > offset {
                    let bytes = read_from(&path, offset);
                    let next = offset + bytes.len();
                    return Some((
                        Ok(Frame::data(Bytes::from(bytes))),
                        (None, next, state, path, uid, !running),
                    ));
                }
                if !running {
                    return None;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        },
    );
    Response::new(BodyExt::boxed(StreamBody::new(stream)))
}

fn read_from(path: &PathBuf, offset: usize) -> Vec<u8> {
    std::fs::read(path)
        .map(|b| b.get(offset..).map(<[u8]>::to_vec).unwrap_or_default())
        .unwrap_or_default()
}
