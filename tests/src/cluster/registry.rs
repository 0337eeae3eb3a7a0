//! The generic registry: what create, get, list, update and delete do to an object's metadata,
//! the way the real server's generic registry does (`uid` and `creationTimestamp` set on
//! create; `resourceVersion` from the store; a stale `resourceVersion` refused; `generation`
//! only for kinds whose strategy keeps one, starting at 1 and bumped when anything but
//! metadata and status changes — the real Secret, ConfigMap and Namespace strategies keep
//! none, so those objects carry no `generation`).

use serde_json::{Value, json};

use super::errors::ApiError;
use super::selectors::LabelSelector;
use super::store::{Key, Store};

/// A kind the server serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource {
    /// The API group (empty for the core group).
    pub group: &'static str,
    /// The version.
    pub version: &'static str,
    /// The plural resource name in paths.
    pub plural: &'static str,
    /// The kind.
    pub kind: &'static str,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Whether its strategy keeps `metadata.generation` (kinds with a status subresource).
    pub generation: bool,
    /// Whether a delete answers with the deleted object (the real store's
    /// `ReturnDeletedObject`, set for Namespaces) rather than a `Success` `Status`.
    pub returns_deleted: bool,
}

impl Resource {
    /// `v1` or `group/version`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The name the store files it under.
    pub fn store_name(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    fn key(&self, namespace: &str, name: &str) -> Key {
        Key {
            resource: self.store_name(),
            namespace: if self.namespaced {
                namespace.to_string()
            } else {
                String::new()
            },
            name: name.to_string(),
        }
    }
}

/// The built-in kinds served so far.
pub const BUILT_IN: &[Resource] = &[
    Resource {
        group: "",
        version: "v1",
        plural: "namespaces",
        kind: "Namespace",
        namespaced: false,
        generation: false,
        returns_deleted: true,
    },
    Resource {
        group: "",
        version: "v1",
        plural: "secrets",
        kind: "Secret",
        namespaced: true,
        generation: false,
        returns_deleted: false,
    },
    Resource {
        group: "",
        version: "v1",
        plural: "configmaps",
        kind: "ConfigMap",
        namespaced: true,
        generation: false,
        returns_deleted: false,
    },
];

fn name_of(object: &Value) -> Result<String, ApiError> {
    object["metadata"]["name"]
        .as_str()
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .ok_or_else(|| ApiError::bad_request("metadata.name is required"))
}

/// Creates `object` in `namespace`.
///
/// # Errors
/// 409 `AlreadyExists`; 400 for a body without a name or of another kind.
pub fn create(
    store: &mut Store,
    r: &Resource,
    namespace: &str,
    mut object: Value,
    uid: String,
    now: jiff::Timestamp,
) -> Result<Value, ApiError> {
    check_kind(r, &object)?;
    let name = name_of(&object)?;
    // The NamespaceLifecycle admission step of the real server: nothing is created in a
    // namespace that does not exist.
    if r.namespaced
        && store
            .get(&Key {
                resource: "namespaces".into(),
                namespace: String::new(),
                name: namespace.to_string(),
            })
            .is_none()
    {
        return Err(ApiError::not_found("namespaces", "", namespace));
    }
    let key = r.key(namespace, &name);
    if store.get(&key).is_some() {
        return Err(ApiError::already_exists(r.plural, r.group, &name));
    }
    let metadata = object["metadata"]
        .as_object_mut()
        .ok_or_else(|| ApiError::bad_request("metadata must be an object"))?;
    if r.namespaced {
        metadata.insert("namespace".into(), json!(namespace));
    }
    metadata.insert("uid".into(), json!(uid));
    metadata.insert("creationTimestamp".into(), json!(now.to_string()));
    if r.generation {
        metadata.insert("generation".into(), json!(1));
    } else {
        metadata.remove("generation");
    }
    metadata.remove("resourceVersion");
    metadata.remove("deletionTimestamp");
    object["apiVersion"] = json!(r.api_version());
    object["kind"] = json!(r.kind);
    Ok(store.put(key, object))
}

/// The object `name`.
///
/// # Errors
/// 404 `NotFound`.
pub fn get(store: &Store, r: &Resource, namespace: &str, name: &str) -> Result<Value, ApiError> {
    store
        .get(&r.key(namespace, name))
        .cloned()
        .ok_or_else(|| ApiError::not_found(r.plural, r.group, name))
}

/// Every object of the resource (in `namespace` when given) that `selector` selects, as a
/// `<Kind>List`.
pub fn list(
    store: &Store,
    r: &Resource,
    namespace: Option<&str>,
    selector: &LabelSelector,
) -> Value {
    let items: Vec<&Value> = store
        .list(&r.store_name(), namespace)
        .into_iter()
        .filter(|o| selector.matches_object(o))
        .collect();
    json!({
        "kind": format!("{}List", r.kind),
        "apiVersion": r.api_version(),
        "metadata": {"resourceVersion": store.version().to_string()},
        "items": items,
    })
}

/// The watch events of the resource (in `namespace` when given) after `since`, as
/// `{"type", "object"}` values, and the `resourceVersion` they reach. `since` = `None` (no
/// `resourceVersion`, or `"0"`) starts with an `ADDED` event for every current object, as the
/// real server does.
pub fn watch_events(
    store: &Store,
    r: &Resource,
    namespace: Option<&str>,
    selector: &LabelSelector,
    since: Option<u64>,
) -> (Vec<Value>, u64) {
    let resource = r.store_name();
    let events = match since {
        None => store
            .list(&resource, namespace)
            .into_iter()
            .filter(|o| selector.matches_object(o))
            .map(|o| json!({"type": "ADDED", "object": o}))
            .collect(),
        Some(v) => store
            .changes_since(v)
            .iter()
            .filter(|c| {
                c.key.resource == resource
                    && namespace.is_none_or(|ns| c.key.namespace == ns)
                    && selector.matches_object(&c.object)
            })
            .map(|c| json!({"type": c.kind, "object": c.object}))
            .collect(),
    };
    (events, store.version())
}

/// Replaces the object `name` with `object` (a PUT). A `resourceVersion` in the body must be
/// the current one; none means an unconditional update, as the real server allows for these
/// kinds. What the server owns (`uid`, `creationTimestamp`, `generation`) is kept.
///
/// # Errors
/// 404 `NotFound`; 409 `Conflict` for a stale `resourceVersion`; 400 for a body naming
/// another object.
pub fn update(
    store: &mut Store,
    r: &Resource,
    namespace: &str,
    name: &str,
    mut object: Value,
) -> Result<Value, ApiError> {
    check_kind(r, &object)?;
    if name_of(&object)? != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({}) does not match the name on the URL ({name})",
            name_of(&object)?
        )));
    }
    let key = r.key(namespace, name);
    let current = store
        .get(&key)
        .cloned()
        .ok_or_else(|| ApiError::not_found(r.plural, r.group, name))?;
    if let Some(v) = object["metadata"]["resourceVersion"].as_str()
        && !v.is_empty()
        && Some(v) != current["metadata"]["resourceVersion"].as_str()
    {
        return Err(ApiError::conflict(r.plural, r.group, name));
    }
    for owned in ["uid", "creationTimestamp", "namespace", "deletionTimestamp"] {
        match current["metadata"].get(owned) {
            Some(v) => object["metadata"][owned] = v.clone(),
            None => {
                if let Some(m) = object["metadata"].as_object_mut() {
                    m.remove(owned);
                }
            }
        }
    }
    if r.generation {
        let generation = current["metadata"]["generation"].as_i64().unwrap_or(1);
        let changed = without_metadata(&current) != without_metadata(&object);
        object["metadata"]["generation"] = json!(if changed { generation + 1 } else { generation });
    } else if let Some(m) = object["metadata"].as_object_mut() {
        m.remove("generation");
    }
    object["apiVersion"] = json!(r.api_version());
    object["kind"] = json!(r.kind);
    Ok(store.put(key, object))
}

/// How a PATCH body is to be read, by its content type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    /// `application/merge-patch+json` (RFC 7386).
    Merge,
    /// `application/json-patch+json` (RFC 6902).
    Json,
}

/// Patches the object `name`, then stores it as an update does (a `resourceVersion` the patch
/// sets is a precondition; `generation` moves when the spec changes).
///
/// # Errors
/// 404 `NotFound`; 409 `Conflict`; 422 `Invalid` for a JSON patch that does not apply; 400
/// for a body of the wrong shape.
pub fn patch(
    store: &mut Store,
    r: &Resource,
    namespace: &str,
    name: &str,
    kind: PatchKind,
    body: &Value,
) -> Result<Value, ApiError> {
    let mut object = get(store, r, namespace, name)?;
    match kind {
        PatchKind::Merge => json_patch::merge(&mut object, body),
        PatchKind::Json => {
            let ops: json_patch::Patch = serde_json::from_value(body.clone()).map_err(|e| {
                ApiError::bad_request(format!("the JSON patch does not parse: {e}"))
            })?;
            json_patch::patch(&mut object, &ops).map_err(|e| {
                ApiError::invalid(
                    r.plural,
                    r.group,
                    name,
                    format!("the JSON patch does not apply: {e}"),
                )
            })?;
        }
    }
    update(store, r, namespace, name, object)
}

/// Deletes the object `name` (finalizers come with the next step of the server); answers as
/// the real store does: the deleted object, or a `Success` `Status` naming it.
///
/// # Errors
/// 404 `NotFound`.
pub fn delete(
    store: &mut Store,
    r: &Resource,
    namespace: &str,
    name: &str,
) -> Result<Value, ApiError> {
    let deleted = store
        .remove(&r.key(namespace, name))
        .ok_or_else(|| ApiError::not_found(r.plural, r.group, name))?;
    if r.returns_deleted {
        return Ok(deleted);
    }
    let mut details = json!({"name": name, "kind": r.plural, "uid": deleted["metadata"]["uid"]});
    if !r.group.is_empty() {
        details["group"] = json!(r.group);
    }
    Ok(json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details,
    }))
}

fn check_kind(r: &Resource, object: &Value) -> Result<(), ApiError> {
    match object["kind"].as_str() {
        None | Some("") => Ok(()),
        Some(k) if k == r.kind => Ok(()),
        Some(k) => Err(ApiError::bad_request(format!(
            "the body is a {k}, not a {}",
            r.kind
        ))),
    }
}

/// The object without `metadata` and `status`: what bumps `generation` when it changes.
fn without_metadata(object: &Value) -> Value {
    let mut o = object.clone();
    if let Some(m) = o.as_object_mut() {
        m.remove("metadata");
        m.remove("status");
        m.remove("apiVersion");
        m.remove("kind");
    }
    o
}
