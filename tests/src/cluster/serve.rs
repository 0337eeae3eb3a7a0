//! HTTPS on 127.0.0.1 with a CA made at start, and authentication by bearer token.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};

use super::errors::ApiError;
use super::handlers;
use super::registry;
use super::selectors::{FieldSelector, LabelSelector};
use super::store::Store;

/// One request, as the server's audit log records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Audit {
    /// The verb (`GET`, `POST`, ...).
    pub method: String,
    /// The path.
    pub path: String,
    /// The query string (empty when none).
    pub query: String,
    /// The body's content type.
    pub media_type: String,
    /// The status code answered.
    pub code: u16,
    /// Who asked (the authenticated user, before any impersonation; empty when the token
    /// was refused), as the real audit log's `user.username`.
    pub user: String,
}

/// What every connection shares.
pub(super) struct Shared {
    pub addr: std::net::SocketAddr,
    pub ca_pem: String,
    pub kubelet: Option<Arc<super::kubelet::State>>,
    pub store: Mutex<Store>,
    pub audit: Mutex<Vec<Audit>>,
    pub tokens: Mutex<super::auth::Tokens>,
    pub uids: std::sync::atomic::AtomicU64,
}

impl Shared {
    /// A kubeconfig for this server authenticating with `token`.
    pub fn kubeconfig_for(&self, token: &str) -> String {
        super::kubeconfig_text(self.addr, &self.ca_pem, token)
    }
}

/// Locks `m`, whether or not a holder panicked.
pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic in one request cannot leave the store half-written in a way later requests
    // care about; keep serving.
    m.lock().unwrap_or_else(|e| e.into_inner())
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
/// server picks a random time of a few minutes; 30 s here) or the client goes. With
/// `allowWatchBookmarks` a `BOOKMARK` carries the reached version every second of quiet; with
/// `sendInitialEvents=true` the current objects come first, closed by a bookmark annotated
/// `k8s.io/initial-events-end` (the streaming list kube-rs and client-go can ask for). A
/// version older than the history kept ends the watch with an `ERROR` event holding a 410
/// `Expired` `Status`, as the real watch cache does.
fn watch(
    shared: Arc<Shared>,
    target: handlers::Target,
    options: registry::ListOptions,
    q: &std::collections::BTreeMap<String, String>,
) -> Response<Body> {
    let initial = q.get("sendInitialEvents").is_some_and(|v| v == "true");
    let bookmarks = q.get("allowWatchBookmarks").is_some_and(|v| v == "true");
    let since = q
        .get("resourceVersion")
        .filter(|v| !v.is_empty() && *v != "0")
        .and_then(|v| v.parse::<u64>().ok());
    let mut start = match since {
        Some(v) if !initial => registry::WatchStart::After(v),
        _ => registry::WatchStart::Current,
    };
    let timeout = q
        .get("timeoutSeconds")
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(30);
    let (tx, rx) = tokio::sync::mpsc::channel::<
        Result<hyper::body::Frame<Bytes>, std::convert::Infallible>,
    >(64);
    let resource = target.resource.clone();
    tokio::spawn(async move {
        let deadline = tokio::time::sleep(std::time::Duration::from_secs(timeout));
        tokio::pin!(deadline);
        let mut changed = lock(&shared.store).subscribe();
        let send = |event: Value| {
            let tx = tx.clone();
            async move {
                tx.send(Ok(hyper::body::Frame::data(Bytes::from(format!(
                    "{event}\n"
                )))))
                .await
                .is_ok()
            }
        };
        let bookmark = |version: u64, end: bool| {
            let mut metadata = json!({"resourceVersion": version.to_string()});
            if end {
                metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
            }
            json!({"type": "BOOKMARK", "object": {
                "kind": resource.kind, "apiVersion": resource.api_version(), "metadata": metadata,
            }})
        };
        let mut first = true;
        loop {
            let result = {
                let store = lock(&shared.store);
                registry::watch_events(
                    &store,
                    &target.resource,
                    target.namespace.as_deref(),
                    &options,
                    start,
                )
            };
            let (events, reached) = match result {
                Ok(r) => r,
                Err(e) => {
                    let _ = send(json!({"type": "ERROR", "object": e.status()})).await;
                    return;
                }
            };
            for event in events {
                if !send(event).await {
                    return;
                }
            }
            if first && initial && bookmarks && !send(bookmark(reached, true)).await {
                return;
            }
            first = false;
            start = registry::WatchStart::After(reached);
            tokio::select! {
                _ = changed.changed() => {}
                () = tokio::time::sleep(std::time::Duration::from_secs(1)), if bookmarks => {
                    if !send(bookmark(reached, false)).await {
                        return;
                    }
                }
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

fn error_response(e: &ApiError) -> Response<Body> {
    json_response(e.code, &e.status())
}

/// The list options of the query.
fn list_options(
    q: &std::collections::BTreeMap<String, String>,
    kind: &str,
) -> Result<registry::ListOptions, ApiError> {
    let text = |k: &str| q.get(k).map(String::as_str).unwrap_or("");
    Ok(registry::ListOptions {
        labels: LabelSelector::parse(text("labelSelector"))?,
        fields: FieldSelector::parse(text("fieldSelector"), kind)?,
        limit: q.get("limit").and_then(|l| l.parse().ok()).unwrap_or(0),
        continue_token: q.get("continue").filter(|c| !c.is_empty()).cloned(),
    })
}

/// Answers `req` and records it in the audit log (every answer, refusals included).
async fn respond(shared: Arc<Shared>, req: Request<Incoming>) -> Response<Body> {
    let method = req.method().as_str().to_string();
    let path = req.uri().path().to_string();
    let query_string = req.uri().query().unwrap_or("").to_string();
    let media_type = req
        .headers()
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let user = {
        let token = req
            .headers()
            .get(hyper::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("");
        let store = lock(&shared.store);
        lock(&shared.tokens)
            .authenticate(&store, token)
            .map(|who| who.user)
            .unwrap_or_default()
    };
    let response = answer(shared.clone(), req).await;
    lock(&shared.audit).push(Audit {
        method,
        path,
        query: query_string,
        media_type,
        code: response.status().as_u16(),
        user,
    });
    response
}

async fn answer(shared: Arc<Shared>, req: Request<Incoming>) -> Response<Body> {
    let token = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("")
        .to_string();
    let who = {
        let store = lock(&shared.store);
        lock(&shared.tokens).authenticate(&store, &token)
    };
    let Some(mut who) = who else {
        return error_response(&ApiError::unauthorized());
    };
    // Impersonation (`kubectl --as`): allowed by the `impersonate` verb on users and groups.
    if let Some(user) = req
        .headers()
        .get("impersonate-user")
        .and_then(|v| v.to_str().ok())
    {
        let groups: Vec<String> = req
            .headers()
            .get_all("impersonate-group")
            .iter()
            .filter_map(|v| v.to_str().ok().map(String::from))
            .collect();
        let store = lock(&shared.store);
        let asks = std::iter::once(("users", user.to_string()))
            .chain(groups.iter().map(|g| ("groups", g.clone())));
        for (resource, name) in asks {
            let a = super::auth::Attributes {
                verb: "impersonate".into(),
                group: String::new(),
                resource: resource.into(),
                subresource: String::new(),
                namespace: String::new(),
                name,
            };
            if !super::auth::allowed(&store, &who, &a) {
                return error_response(&super::auth::forbidden(&who, &a));
            }
        }
        let mut groups = groups;
        groups.push("system:authenticated".into());
        who = super::auth::Identity {
            user: user.to_string(),
            groups,
        };
    }
    let method = req.method().as_str().to_string();
    let path = req.uri().path().to_string();
    if path == "/version" {
        return json_response(200, &handlers::version());
    }
    let discovered = {
        let store = lock(&shared.store);
        handlers::discovery(&store, &path).or_else(|| handlers::openapi(&store, &path))
    };
    if let Some(d) = discovered {
        return json_response(200, &d);
    }
    let target = handlers::target(&lock(&shared.store), &path);
    let target = match target {
        Ok(t) => t,
        Err(e) => return error_response(&e),
    };
    let header = |name: hyper::header::HeaderName| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    let media = header(hyper::header::CONTENT_TYPE);
    let agent = header(hyper::header::USER_AGENT);
    let q = query(&req);
    let watching = q.get("watch").is_some_and(|v| v == "1" || v == "true");
    let attributes = super::auth::Attributes {
        verb: match (method.as_str(), target.name.is_some(), watching) {
            ("GET", _, true) => "watch",
            ("GET", true, _) => "get",
            ("GET", false, _) => "list",
            ("POST", _, _) => "create",
            ("PUT", _, _) => "update",
            ("PATCH", _, _) => "patch",
            ("DELETE", true, _) => "delete",
            ("DELETE", false, _) => "deletecollection",
            (other, _, _) => other,
        }
        .to_string(),
        group: target.resource.group.clone(),
        resource: target.resource.plural.clone(),
        subresource: target.subresource.clone().unwrap_or_default(),
        namespace: target.namespace.clone().unwrap_or_default(),
        name: target.name.clone().unwrap_or_default(),
    };
    // Every authenticated user may review its own access (system:basic-user).
    let self_review = target.resource.plural == "selfsubjectaccessreviews";
    let permitted = self_review || super::auth::allowed(&lock(&shared.store), &who, &attributes);
    if !permitted {
        return error_response(&super::auth::forbidden(&who, &attributes));
    }
    let options = match list_options(&q, &target.resource.kind) {
        Ok(o) => o,
        Err(e) => return error_response(&e),
    };
    if method == "GET" && target.name.is_none() && watching {
        return watch(shared, target, options, &q);
    }
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return error_response(&ApiError::bad_request(format!("reading the body: {e}"))),
    };
    let n = shared
        .uids
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    // The real server names an Update's manager after the user agent's program when the
    // request names none; an apply must name one.
    let is_apply = media.starts_with("application/apply-patch");
    let manager = match q.get("fieldManager") {
        Some(m) => m.clone(),
        None if is_apply => String::new(),
        None => agent.split('/').next().unwrap_or("unknown").to_string(),
    };
    if target.subresource.as_deref() == Some("log") && method == "GET" {
        return pod_log(&shared, &target, &q);
    }
    if self_review || target.subresource.as_deref() == Some("token") {
        let answer = identity_request(&shared, &who, &target, &media, &body);
        let (code, body) = answer.unwrap_or_else(|e| (e.code, e.status()));
        return json_response(code, &body);
    }
    let call = handlers::Call {
        method: &method,
        target: &target,
        list: &options,
        media_type: &media,
        body: &body,
        manager: &manager,
        force: q.get("force").is_some_and(|f| f == "true"),
        strict: q.get("fieldValidation").is_some_and(|v| v == "Strict"),
    };
    let ctx = registry::Ctx {
        now: jiff::Timestamp::now(),
        uid: format!("00000000-0000-4000-8000-{n:012x}"),
    };
    // dryRun=All: the whole write, admission and validation included, on a copy.
    let dry_run = q.get("dryRun").is_some_and(|v| v == "All");
    let result = if dry_run {
        let mut copy = lock(&shared.store).fork();
        handlers::handle(&mut copy, &call, &ctx)
    } else {
        handlers::handle(&mut lock(&shared.store), &call, &ctx)
    };
    let (code, body) = match result {
        Ok((code, body)) => (code, body),
        Err(e) => (e.code, e.status()),
    };
    json_response(code, &body)
}

/// `pods/<name>/log`: the container's output as plain text (`tailLines` honoured); with
/// `follow=true` it goes on streaming what the container writes until the container ends, as
/// the kubelet does.
fn pod_log(
    shared: &Shared,
    target: &handlers::Target,
    q: &std::collections::BTreeMap<String, String>,
) -> Response<Body> {
    let namespace = target.namespace.clone().unwrap_or_default();
    let name = target.name.clone().unwrap_or_default();
    let pod = lock(&shared.store)
        .get(&super::store::Key {
            resource: "pods".into(),
            namespace: namespace.clone(),
            name: name.clone(),
        })
        .cloned();
    let Some(pod) = pod else {
        return error_response(&ApiError::not_found("pods", "", &name));
    };
    let path = shared
        .kubelet
        .as_ref()
        .and_then(|k| lock(&k.logs).get(&format!("{namespace}/{name}")).cloned());
    let Some((path, text)) = path.and_then(|p| Some((p.clone(), std::fs::read_to_string(p).ok()?)))
    else {
        let container = pod["spec"]["containers"][0]["name"].as_str().unwrap_or("");
        return error_response(&ApiError::bad_request(format!(
            "container \"{container}\" in pod \"{name}\" is waiting to start: ContainerCreating"
        )));
    };
    let read = text.len() as u64;
    let text = match q.get("tailLines").and_then(|t| t.parse::<usize>().ok()) {
        Some(n) => {
            let lines: Vec<&str> = text.lines().collect();
            let mut tail = lines[lines.len().saturating_sub(n)..].join("\n");
            tail.push('\n');
            tail
        }
        None => text,
    };
    let uid = pod["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let body = match shared.kubelet.clone() {
        Some(kubelet) if q.get("follow").is_some_and(|f| f == "true") => {
            follow_log(kubelet, uid, path, (text, read))
        }
        _ => Full::new(Bytes::from(text)).boxed(),
    };
    let mut response = Response::new(body);
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain"),
    );
    response
}

/// A log body that starts with `text` (of the first `read` bytes of `path`) and goes on with
/// what is appended to `path` until the
/// container of Pod `uid` is no longer running (then the rest is sent and the body ends) or
/// the client goes away.
fn follow_log(
    kubelet: Arc<super::kubelet::State>,
    uid: String,
    path: std::path::PathBuf,
    (text, read): (String, u64),
) -> Body {
    let (tx, rx) = tokio::sync::mpsc::channel::<
        Result<hyper::body::Frame<Bytes>, std::convert::Infallible>,
    >(16);
    tokio::spawn(async move {
        let mut sent = read;
        if tx
            .send(Ok(hyper::body::Frame::data(Bytes::from(text))))
            .await
            .is_err()
        {
            return;
        }
        loop {
            // Checked before reading: what the container wrote before it ended is still sent.
            let ended = !kubelet.is_running(&uid);
            let more = std::fs::read(&path)
                .ok()
                .and_then(|all| all.get(usize::try_from(sent).ok()?..).map(<[u8]>::to_vec))
                .unwrap_or_default();
            if !more.is_empty() {
                sent += more.len() as u64;
                if tx
                    .send(Ok(hyper::body::Frame::data(Bytes::from(more))))
                    .await
                    .is_err()
                {
                    return;
                }
            }
            if ended {
                return;
            }
            // A file has no change notification here; a short poll stands in for the kubelet's.
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    });
    StreamBody::new(tokio_stream::wrappers::ReceiverStream::new(rx)).boxed()
}

/// The requests about identity rather than objects: a `SelfSubjectAccessReview` (answered
/// with RBAC's verdict, stored nowhere) and a ServiceAccount's `TokenRequest`.
fn identity_request(
    shared: &Shared,
    who: &super::auth::Identity,
    target: &handlers::Target,
    media: &str,
    body: &[u8],
) -> Result<(u16, Value), ApiError> {
    let mut request = handlers::decode_body(media, body)?;
    let store = lock(&shared.store);
    if target.resource.plural == "selfsubjectaccessreviews" {
        let r = &request["spec"]["resourceAttributes"];
        let text = |k: &str| r[k].as_str().unwrap_or("").to_string();
        let attributes = super::auth::Attributes {
            verb: text("verb"),
            group: text("group"),
            resource: text("resource"),
            subresource: text("subresource"),
            namespace: text("namespace"),
            name: text("name"),
        };
        let allowed = super::auth::allowed(&store, who, &attributes);
        request["status"] = json!({"allowed": allowed});
        if allowed && who.groups.iter().all(|g| g != "system:masters") {
            request["status"]["reason"] = json!("RBAC: allowed by a role binding");
        }
        return Ok((201, request));
    }
    let namespace = target.namespace.as_deref().unwrap_or("");
    let name = target.name.as_deref().unwrap_or("");
    let token = lock(&shared.tokens)
        .mint_service_account(&store, namespace, name)
        .ok_or_else(|| ApiError::not_found("serviceaccounts", "", name))?;
    let seconds = request["spec"]["expirationSeconds"]
        .as_i64()
        .unwrap_or(3600);
    let expires = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(seconds);
    request["apiVersion"] = json!("authentication.k8s.io/v1");
    request["kind"] = json!("TokenRequest");
    request["metadata"]["name"] = json!(name);
    request["metadata"]["namespace"] = json!(namespace);
    request["status"] = json!({
        "token": token,
        "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
    });
    Ok((201, request))
}

/// Runs the garbage collector and the namespace controller after every change.
pub(super) async fn collect_garbage(shared: Arc<Shared>) {
    let mut changed = lock(&shared.store).subscribe();
    let mut collector = super::garbage::Collector::default();
    loop {
        collector.run(&mut lock(&shared.store), jiff::Timestamp::now());
        if changed.changed().await.is_err() {
            return;
        }
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
