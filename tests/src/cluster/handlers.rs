//! HTTP in, registry calls, HTTP out: the path decoded into group, version, namespace,
//! resource and name, the body decoded from JSON, errors encoded as `Status`. Nothing else.

use serde_json::{Value, json};

use super::errors::ApiError;
use super::registry::{self, BUILT_IN, Resource};
use super::selectors::LabelSelector;
use super::store::Store;

/// What a request path names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The resource.
    pub resource: Resource,
    /// The namespace (`None`: cluster-scoped, or a list across namespaces).
    pub namespace: Option<String>,
    /// The object's name, for requests about one object.
    pub name: Option<String>,
}

/// Decodes `/api/v1/...` and `/apis/<group>/<version>/...`.
///
/// # Errors
/// 404 for a path that names no served resource.
pub fn target(path: &str) -> Result<Target, ApiError> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match parts.as_slice() {
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return Err(ApiError::no_route(path)),
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, resource, rest @ ..] => (Some(ns.to_string()), {
            let mut v = vec![*resource];
            v.extend_from_slice(rest);
            v
        }),
        other => (None, other.to_vec()),
    };
    let (plural, name) = match rest.as_slice() {
        [plural] => (*plural, None),
        [plural, name] => (*plural, Some(name.to_string())),
        _ => return Err(ApiError::no_route(path)),
    };
    let resource = BUILT_IN
        .iter()
        .find(|r| r.group == group && r.version == version && r.plural == plural)
        .ok_or_else(|| ApiError::no_route(path))?;
    // `/api/v1/namespaces/x` is the Namespace x itself, not a namespaced path.
    if plural == "namespaces" && name.is_none() && namespace.is_some() {
        return Ok(Target {
            resource: resource.clone(),
            namespace: None,
            name: namespace,
        });
    }
    if !resource.namespaced && namespace.is_some() {
        return Err(ApiError::no_route(path));
    }
    Ok(Target {
        resource: resource.clone(),
        namespace,
        name,
    })
}

/// `/version`, as kubectl and client-go ask for it.
pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": "33",
        "gitVersion": "v1.33.0-tfops-loopback",
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "2026-12-01T00:00:00Z",
        "goVersion": "none",
        "compiler": "rust",
        "platform": "linux/amd64",
    })
}

/// Legacy discovery (`/api`, `/apis`, `/api/v1`, `/apis/<group>/<version>`), which kubectl
/// falls back to when the server answers its aggregated-discovery request with plain JSON.
/// `None` for other paths.
pub fn discovery(path: &str) -> Option<Value> {
    let singular = |plural: &str| plural.trim_end_matches('s').to_string();
    let resources = |group: &str, version: &str| -> Vec<Value> {
        BUILT_IN
            .iter()
            .filter(|r| r.group == group && r.version == version)
            .map(|r| {
                json!({
                    "name": r.plural,
                    "singularName": singular(r.plural),
                    "namespaced": r.namespaced,
                    "kind": r.kind,
                    "verbs": ["create", "delete", "get", "list", "update", "watch"],
                })
            })
            .collect()
    };
    match path.trim_end_matches('/') {
        "/api" => Some(json!({
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [],
        })),
        "/apis" => Some(json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": []})),
        "/api/v1" => Some(json!({
            "kind": "APIResourceList",
            "groupVersion": "v1",
            "resources": resources("", "v1"),
        })),
        _ => None,
    }
}

/// One decoded request.
#[derive(Debug)]
pub struct Call<'a> {
    /// `GET`, `POST`, `PUT`, `PATCH`, `DELETE`.
    pub method: &'a str,
    /// What the path names.
    pub target: &'a Target,
    /// The `labelSelector` of a list.
    pub selector: &'a LabelSelector,
    /// The body's content type.
    pub media_type: &'a str,
    /// The body.
    pub body: &'a [u8],
}

/// Performs `call`; gives the status code and body.
///
/// # Errors
/// The registry's [`ApiError`]s; 400 for a body that is not JSON; 405 for another verb.
pub fn handle(
    store: &mut Store,
    call: &Call<'_>,
    uid: impl FnOnce() -> String,
    now: jiff::Timestamp,
) -> Result<(u16, Value), ApiError> {
    let Call {
        method,
        target: t,
        selector,
        media_type,
        body,
    } = *call;
    let ns = t.namespace.as_deref().unwrap_or("");
    let parse = || -> Result<Value, ApiError> {
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("the body is not JSON: {e}")))
    };
    match (method, &t.name) {
        ("GET", None) => Ok((
            200,
            registry::list(store, &t.resource, t.namespace.as_deref(), selector),
        )),
        ("GET", Some(name)) => registry::get(store, &t.resource, ns, name).map(|o| (200, o)),
        ("POST", None) => {
            registry::create(store, &t.resource, ns, parse()?, uid(), now).map(|o| (201, o))
        }
        ("PUT", Some(name)) => {
            registry::update(store, &t.resource, ns, name, parse()?).map(|o| (200, o))
        }
        ("PATCH", Some(name)) => {
            let kind = match media_type.split(';').next().unwrap_or("").trim() {
                "application/merge-patch+json" => registry::PatchKind::Merge,
                "application/json-patch+json" => registry::PatchKind::Json,
                other => return Err(ApiError::unsupported_media_type(other)),
            };
            registry::patch(store, &t.resource, ns, name, kind, &parse()?).map(|o| (200, o))
        }
        ("DELETE", Some(name)) => registry::delete(store, &t.resource, ns, name).map(|o| (200, o)),
        (m, _) => Err(ApiError::method_not_allowed(m)),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn paths_name_what_the_real_server_names() {
        let t = target("/api/v1/namespaces/team-a/secrets/db").unwrap();
        assert_eq!(
            (t.resource.plural, t.namespace.as_deref(), t.name.as_deref()),
            ("secrets", Some("team-a"), Some("db"))
        );
        let t = target("/api/v1/secrets").unwrap();
        assert_eq!((t.namespace, t.name), (None, None));
        let t = target("/api/v1/namespaces/team-a").unwrap();
        assert_eq!(
            (t.resource.plural, t.name.as_deref()),
            ("namespaces", Some("team-a"))
        );
        assert_eq!(target("/api/v1/nothings").unwrap_err().code, 404);
        assert_eq!(
            target("/api/v1/namespaces/a/namespaces/b")
                .unwrap_err()
                .code,
            404
        );
    }
}
