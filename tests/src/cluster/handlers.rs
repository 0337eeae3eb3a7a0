//! HTTP in, registry calls, HTTP out: the path decoded into group, version, namespace,
//! resource and name, the body decoded from JSON, errors encoded as `Status`. Nothing else.

use serde_json::{Value, json};

use super::errors::ApiError;
use super::managed;
use super::protobuf;
use super::registry;
use super::resources::{self, Resource};
use super::store::Store;

/// What a request path names.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    /// The resource.
    pub resource: Resource,
    /// The namespace (`None`: cluster-scoped, or a list across namespaces).
    pub namespace: Option<String>,
    /// The object's name, for requests about one object.
    pub name: Option<String>,
    /// The subresource (`status`, `finalize`), for requests about one.
    pub subresource: Option<String>,
}

/// Decodes `/api/v1/...` and `/apis/<group>/<version>/...`.
///
/// # Errors
/// 404 for a path that names no served resource or subresource.
pub fn target(store: &Store, path: &str) -> Result<Target, ApiError> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match parts.as_slice() {
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return Err(ApiError::no_route(path)),
    };
    // `/api/v1/namespaces/x[/status|/finalize]` is the Namespace x itself.
    let (namespace, rest): (Option<String>, Vec<&str>) = match rest {
        ["namespaces", name] | ["namespaces", name, "status" | "finalize"] if group.is_empty() => {
            (None, rest.to_vec())
        }
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some(ns.to_string()), rest.to_vec()),
        other => (None, other.to_vec()),
    };
    let (plural, name, subresource) = match rest.as_slice() {
        [plural] => (*plural, None, None),
        [plural, name] => (*plural, Some(name.to_string()), None),
        [plural, name, sub] => (*plural, Some(name.to_string()), Some(sub.to_string())),
        _ => return Err(ApiError::no_route(path)),
    };
    let resource =
        resources::find(store, group, version, plural).ok_or_else(|| ApiError::no_route(path))?;
    if !resource.namespaced && namespace.is_some() {
        return Err(ApiError::no_route(path));
    }
    let served = match subresource.as_deref() {
        None => true,
        Some("status") => resource.status_subresource,
        Some("finalize") => resource.kind == "Namespace" && resource.group.is_empty(),
        Some("token") => resource.kind == "ServiceAccount" && resource.group.is_empty(),
        Some("log") => resource.kind == "Pod" && resource.group.is_empty(),
        Some(_) => false,
    };
    if !served {
        return Err(ApiError::no_route(path));
    }
    Ok(Target {
        resource,
        namespace,
        name,
        subresource,
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
pub fn discovery(store: &Store, path: &str) -> Option<Value> {
    let served = resources::all(store);
    let resources = |group: &str, version: &str| -> Vec<Value> {
        let mut out = Vec::new();
        for r in served
            .iter()
            .filter(|r| r.group == group && r.version == version)
        {
            out.push(json!({
                "name": r.plural,
                "singularName": r.singular,
                "shortNames": r.short_names,
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
            }));
            if r.status_subresource {
                out.push(json!({
                    "name": format!("{}/status", r.plural),
                    "singularName": "",
                    "namespaced": r.namespaced,
                    "kind": r.kind,
                    "verbs": ["get", "patch", "update"],
                }));
            }
        }
        out
    };
    let path = path.trim_end_matches('/');
    if path == "/api" {
        return Some(json!({
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ""}],
        }));
    }
    if path == "/api/v1" {
        return Some(json!({
            "kind": "APIResourceList",
            "groupVersion": "v1",
            "resources": resources("", "v1"),
        }));
    }
    // Groups in the order first served, versions likewise (the first is the preferred one).
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for r in served.iter().filter(|r| !r.group.is_empty()) {
        match groups.iter_mut().find(|(g, _)| *g == r.group) {
            Some((_, versions)) if !versions.contains(&r.version) => {
                versions.push(r.version.clone())
            }
            Some(_) => {}
            None => groups.push((r.group.clone(), vec![r.version.clone()])),
        }
    }
    let group_json = |(name, versions): &(String, Vec<String>)| {
        let versions: Vec<Value> = versions
            .iter()
            .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
            .collect();
        json!({"name": name, "versions": versions, "preferredVersion": versions[0]})
    };
    if path == "/apis" {
        let groups: Vec<Value> = groups.iter().map(group_json).collect();
        return Some(json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}));
    }
    let parts: Vec<&str> = path.trim_start_matches("/apis/").split('/').collect();
    let known = |g: &str| groups.iter().find(|(name, _)| name == g);
    match (path.starts_with("/apis/"), parts.as_slice()) {
        (true, [group]) => known(group).map(|g| {
            let mut v = group_json(g);
            v["kind"] = json!("APIGroup");
            v["apiVersion"] = json!("v1");
            v
        }),
        (true, [group, version]) => known(group)
            .filter(|(_, versions)| versions.iter().any(|v| v == version))
            .map(|_| {
                json!({
                    "kind": "APIResourceList",
                    "apiVersion": "v1",
                    "groupVersion": format!("{group}/{version}"),
                    "resources": resources(group, version),
                })
            }),
        _ => None,
    }
}

/// OpenAPI v3 discovery (`/openapi/v3` and `/openapi/v3/<api|apis/group>/<version>`), as
/// far as kubectl reads it: one document per group-version whose PATCH operations name the
/// `fieldValidation` parameter, which tells kubectl to leave validation to the server
/// (`fieldValidation=Strict`). The documents carry no schemas: kubectl then computes
/// client-side apply patches from its compiled-in types, as it does for a server without
/// OpenAPI. `None` for other paths.
pub fn openapi(store: &Store, path: &str) -> Option<Value> {
    let served = resources::all(store);
    let group_version = |r: &Resource| {
        if r.group.is_empty() {
            format!("api/{}", r.version)
        } else {
            format!("apis/{}/{}", r.group, r.version)
        }
    };
    if path.trim_end_matches('/') == "/openapi/v3" {
        let mut paths = serde_json::Map::new();
        for r in &served {
            let gv = group_version(r);
            paths.insert(
                gv.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{gv}?hash=loopback")}),
            );
        }
        return Some(json!({"paths": paths}));
    }
    let gv = path.strip_prefix("/openapi/v3/")?;
    let mut paths = serde_json::Map::new();
    for r in served.iter().filter(|r| group_version(r) == gv) {
        let object = if r.namespaced {
            format!("/{gv}/namespaces/{{namespace}}/{}/{{name}}", r.plural)
        } else {
            format!("/{gv}/{}/{{name}}", r.plural)
        };
        let gvk = json!({"group": r.group, "version": r.version, "kind": r.kind});
        let param = json!({"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}});
        let operation =
            json!({"x-kubernetes-group-version-kind": gvk, "parameters": [param], "responses": {}});
        paths.insert(
            object,
            json!({"get": operation, "put": operation, "patch": operation, "delete": operation}),
        );
    }
    if paths.is_empty() {
        return None;
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.33.0"},
        "paths": paths,
        "components": {"schemas": {}},
    }))
}

/// One decoded request.
#[derive(Debug)]
pub struct Call<'a> {
    /// `GET`, `POST`, `PUT`, `PATCH`, `DELETE`.
    pub method: &'a str,
    /// What the path names.
    pub target: &'a Target,
    /// The selectors and paging of a list.
    pub list: &'a registry::ListOptions,
    /// The body's content type.
    pub media_type: &'a str,
    /// The body.
    pub body: &'a [u8],
    /// `fieldManager` (or what the real server derives from the user agent).
    pub manager: &'a str,
    /// `force` of a server-side apply.
    pub force: bool,
    /// `fieldValidation=Strict`: unknown fields of a custom resource are an error rather
    /// than silently pruned.
    pub strict: bool,
}

/// Decodes a POST, PUT or DELETE body: JSON, or the protobuf encoding client-go's typed
/// clients send.
///
/// # Errors
/// 415 for another media type; 400 for a body that does not parse.
pub fn decode_body(media_type: &str, body: &[u8]) -> Result<Value, ApiError> {
    match media_type.split(';').next().unwrap_or("").trim() {
        "" | "application/json" | "*/*" => serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("the body is not JSON: {e}"))),
        protobuf::MEDIA_TYPE => protobuf::decode(body),
        other => Err(ApiError::unsupported_media_type(other)),
    }
}

/// Performs `call`; gives the status code and body.
///
/// # Errors
/// The registry's [`ApiError`]s; 400 for a body that does not parse; 405 for another verb.
pub fn handle(
    store: &mut Store,
    call: &Call<'_>,
    ctx: &registry::Ctx,
) -> Result<(u16, Value), ApiError> {
    let Call {
        method,
        target: t,
        list,
        media_type,
        body,
        manager,
        force,
        strict,
    } = *call;
    if strict
        && let Some(schema) = &t.resource.schema
        && matches!(method, "POST" | "PUT" | "PATCH")
        && !media_type.starts_with("application/json-patch")
    {
        let object = serde_json_or_yaml(body)?;
        let unknown = super::schema::unknown_fields(schema, &object);
        if !unknown.is_empty() {
            let fields: Vec<String> = unknown
                .iter()
                .map(|f| format!("unknown field \"{f}\""))
                .collect();
            return Err(ApiError::bad_request(format!(
                "{kind} in version \"{version}\" cannot be handled as a {kind}: strict decoding error: {}",
                fields.join(", "),
                kind = t.resource.kind,
                version = t.resource.version,
            )));
        }
    }
    let ns = t.namespace.as_deref().unwrap_or("");
    let r = &t.resource;
    let parse = || decode_body(media_type, body);
    let sub = match t.subresource.as_deref() {
        Some("status") => registry::Sub::Status,
        _ => registry::Sub::Main,
    };
    match (method, &t.name) {
        ("GET", None) => registry::list(store, r, t.namespace.as_deref(), list).map(|l| (200, l)),
        ("GET", Some(name)) => registry::get(store, r, ns, name).map(|o| (200, o)),
        ("POST", None) => {
            let object = managed::on_create(r, parse()?, manager, ctx.now);
            registry::create(store, r, ns, object, ctx).map(|o| (201, o))
        }
        ("PUT", Some(name)) if t.subresource.as_deref() == Some("finalize") => {
            registry::finalize_namespace(store, r, name, &parse()?).map(|o| (200, o))
        }
        ("PUT", Some(name)) => {
            let current = registry::get(store, r, ns, name)?;
            let object = managed::on_update(r, &current, parse()?, manager, sub, ctx.now);
            registry::update(store, r, ns, name, object, sub).map(|o| (200, o))
        }
        ("PATCH", Some(name)) => {
            let body = serde_json_or_yaml(body)?;
            let kind = match media_type.split(';').next().unwrap_or("").trim() {
                "application/merge-patch+json" => registry::PatchKind::Merge,
                "application/json-patch+json" => registry::PatchKind::Json,
                "application/strategic-merge-patch+json" => registry::PatchKind::Strategic,
                "application/apply-patch+yaml" | "application/apply-patch+cbor" => {
                    return managed::apply(store, r, ns, name, &body, manager, force, sub, ctx);
                }
                other => return Err(ApiError::unsupported_media_type(other)),
            };
            let current = registry::get(store, r, ns, name)?;
            let mut patched = registry::patched(r, name, &current, kind, &body)?;
            patched = managed::on_update(r, &current, patched, manager, sub, ctx.now);
            registry::store_patched(store, r, ns, name, &current, patched, &body, sub)
                .map(|o| (200, o))
        }
        ("DELETE", Some(name)) => {
            let options = if body.is_empty() {
                Value::Null
            } else {
                parse()?
            };
            match registry::delete(store, r, ns, name, &options, ctx.now)? {
                registry::Deleted::Gone(v) | registry::Deleted::Pending(v) => Ok((200, v)),
            }
        }
        ("DELETE", None) => {
            // deletecollection: every selected object, each as a delete would.
            let options = if body.is_empty() {
                Value::Null
            } else {
                parse()?
            };
            let all = registry::list(store, r, t.namespace.as_deref(), list)?;
            let mut items = Vec::new();
            for item in all["items"].as_array().into_iter().flatten() {
                let name = item["metadata"]["name"].as_str().unwrap_or("");
                let item_ns = item["metadata"]["namespace"].as_str().unwrap_or("");
                if let Ok(registry::Deleted::Pending(v) | registry::Deleted::Gone(v)) =
                    registry::delete(store, r, item_ns, name, &options, ctx.now)
                {
                    items.push(if v["kind"] == "Status" {
                        item.clone()
                    } else {
                        v
                    });
                }
            }
            Ok((
                200,
                json!({
                    "kind": format!("{}List", r.kind),
                    "apiVersion": r.api_version(),
                    "metadata": {"resourceVersion": store.version().to_string()},
                    "items": items,
                }),
            ))
        }
        (m, _) => Err(ApiError::method_not_allowed(m)),
    }
}

/// A PATCH body: JSON, or YAML for server-side apply (which kubectl sends as YAML or JSON).
fn serde_json_or_yaml(body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(body).or_else(|_| {
        serde_yaml_ng::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("the patch body does not parse: {e}")))
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn paths_name_what_the_real_server_names() {
        let store = Store::default();
        let target = |p: &str| super::target(&store, p);
        let t = target("/api/v1/namespaces/team-a/secrets/db").unwrap();
        assert_eq!(
            (
                t.resource.plural.as_str(),
                t.namespace.as_deref(),
                t.name.as_deref()
            ),
            ("secrets", Some("team-a"), Some("db"))
        );
        let t = target("/api/v1/secrets").unwrap();
        assert_eq!((t.namespace, t.name), (None, None));
        let t = target("/api/v1/namespaces/team-a").unwrap();
        assert_eq!(
            (t.resource.plural.as_str(), t.name.as_deref()),
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
