//! kube-apiserver's audit log, read back: who asked what, and what the server answered.
//!
//! The policy logs every request at the `Metadata` level and skips the `RequestReceived` stage,
//! so a request leaves one event when its response is complete, and a long-running one (a
//! watch, a log stream) one more when its response starts. [`read`] keeps the first event of
//! each `auditID`: a watch is counted when it starts, not only once it ends.

use std::collections::HashSet;
use std::path::Path;

use serde::Deserialize;

/// The audit policy the server is started with.
pub const POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
";

/// One request, as the audit log recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The Kubernetes verb (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
    /// `deletecollection`; for non-resource URLs the HTTP method in lower case).
    pub verb: String,
    /// The HTTP method the verb was asked with (`GET` for get, list and watch; `POST` create;
    /// `PUT` update; `PATCH` patch; `DELETE` delete and deletecollection).
    pub method: String,
    /// The path, without the query.
    pub path: String,
    /// The query string (empty when none).
    pub query: String,
    /// The resource (`pods`, `terraforms`, ...), empty for non-resource URLs.
    pub resource: String,
    /// The subresource (`status`, `log`, `token`, ...), empty when none.
    pub subresource: String,
    /// The object's namespace, empty when cluster-scoped or a list across namespaces.
    pub namespace: String,
    /// The object's name, empty for lists and creates without one.
    pub name: String,
    /// The status code answered (0 while a long-running response had not completed).
    pub code: u16,
    /// Who asked: `user.username` (`system:serviceaccount:NS:NAME` for a ServiceAccount token,
    /// a client certificate's CN).
    pub user: String,
    /// The impersonated user, when the request impersonated one.
    pub impersonated: Option<String>,
    /// The `User-Agent` the client sent.
    pub user_agent: String,
}

impl Request {
    /// The request as a count of requests names it: the HTTP method (`WATCH` for a watch)
    /// and the resource with its subresource (`PATCH terraforms/status`, `WATCH pods`); the
    /// path for a non-resource URL.
    pub fn kind(&self) -> String {
        let verb = if self.verb == "watch" {
            "WATCH"
        } else {
            &self.method
        };
        let what = match (self.resource.as_str(), self.subresource.as_str()) {
            ("", _) => self.path.clone(),
            (resource, "") => resource.to_string(),
            (resource, sub) => format!("{resource}/{sub}"),
        };
        format!("{verb} {what}")
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Event {
    #[serde(rename = "auditID")]
    audit_id: String,
    #[serde(default)]
    verb: String,
    #[serde(rename = "requestURI", default)]
    request_uri: String,
    #[serde(default)]
    user: User,
    #[serde(default)]
    impersonated_user: Option<User>,
    #[serde(default)]
    object_ref: Option<ObjectRef>,
    #[serde(default)]
    response_status: Option<ResponseStatus>,
    #[serde(default)]
    user_agent: String,
}

#[derive(Deserialize, Default)]
struct User {
    #[serde(default)]
    username: String,
}

#[derive(Deserialize, Default)]
struct ObjectRef {
    #[serde(default)]
    resource: String,
    #[serde(default)]
    subresource: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    name: String,
}

#[derive(Deserialize, Default)]
struct ResponseStatus {
    #[serde(default)]
    code: u16,
}

/// Every request in the audit log at `path`, in the order the server logged them. A line the
/// server has not finished writing is left for the next read.
pub fn read(path: &Path) -> Vec<Request> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    parse(&text)
}

/// The requests in audit log text (one JSON event a line).
pub fn parse(text: &str) -> Vec<Request> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for line in text.lines() {
        let Ok(e) = serde_json::from_str::<Event>(line) else {
            continue;
        };
        if !seen.insert(e.audit_id) {
            continue;
        }
        let (path, query) = match e.request_uri.split_once('?') {
            Some((p, q)) => (p.to_string(), q.to_string()),
            None => (e.request_uri.clone(), String::new()),
        };
        let object = e.object_ref.unwrap_or_default();
        let method = match e.verb.as_str() {
            "get" | "list" | "watch" => "GET",
            "create" => "POST",
            "update" => "PUT",
            "patch" => "PATCH",
            "delete" | "deletecollection" => "DELETE",
            other => other,
        }
        .to_ascii_uppercase();
        out.push(Request {
            method,
            verb: e.verb,
            path,
            query,
            resource: object.resource,
            subresource: object.subresource,
            namespace: object.namespace,
            name: object.name,
            code: e.response_status.map_or(0, |s| s.code),
            user: e.user.username,
            impersonated: e.impersonated_user.map(|u| u.username),
            user_agent: e.user_agent,
        });
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_watch_counts_once_from_its_first_event_and_queries_are_split() {
        let log = concat!(
            r#"{"kind":"Event","level":"Metadata","auditID":"a","stage":"ResponseStarted","requestURI":"/api/v1/namespaces/team-a/pods?watch=true&fieldSelector=metadata.name%3Dx","verb":"watch","user":{"username":"system:serviceaccount:tfops-system:tfops-controller"},"objectRef":{"resource":"pods","namespace":"team-a","apiVersion":"v1"},"responseStatus":{"metadata":{},"code":200},"userAgent":"tfops"}"#,
            "\n",
            r#"{"kind":"Event","level":"Metadata","auditID":"b","stage":"ResponseComplete","requestURI":"/api/v1/namespaces/team-a/secrets/tfstate-default-app","verb":"get","user":{"username":"system:serviceaccount:team-a:tf-runner"},"objectRef":{"resource":"secrets","namespace":"team-a","name":"tfstate-default-app"},"responseStatus":{"code":404}}"#,
            "\n",
            r#"{"kind":"Event","level":"Metadata","auditID":"a","stage":"ResponseComplete","requestURI":"/api/v1/namespaces/team-a/pods?watch=true","verb":"watch","user":{"username":"x"}}"#,
            "\n",
            r#"{"kind":"Event","auditID":"c","verb":"get","requestURI":"/readyz"#,
        );
        let r = parse(log);
        assert_eq!(r.len(), 2, "{r:?}");
        assert_eq!((r[0].verb.as_str(), r[0].method.as_str()), ("watch", "GET"));
        assert_eq!(r[0].path, "/api/v1/namespaces/team-a/pods");
        assert!(r[0].query.starts_with("watch=true"));
        assert_eq!(
            r[0].user,
            "system:serviceaccount:tfops-system:tfops-controller"
        );
        assert_eq!(r[1].code, 404);
        assert_eq!(r[1].name, "tfstate-default-app");
    }
}
