//! The generic registry: what create, get, list, update, patch and delete do to an object, the
//! way the real server's generic registry and the kinds' strategies do:
//! - create sets `uid`, `creationTimestamp`, a name from `generateName`, `generation` 1 (kinds
//!   whose strategy keeps one); refuses an existing name and a missing or terminating namespace;
//! - update refuses a stale `resourceVersion` (and a missing one for custom resources, which
//!   allow no unconditional update), keeps what the server owns, bumps `generation` when
//!   anything outside metadata (and status, with a status subresource) changes;
//! - with a status subresource the main endpoint keeps the stored status and `/status` changes
//!   only status;
//! - delete honours preconditions and finalizers (`deletionTimestamp` set, the object kept until
//!   the last finalizer goes, no finalizer added after that) and propagation policies (the
//!   `foregroundDeletion` and `orphan` finalizers the garbage collector acts on).
//!
//! Lists and watches are in [`super::lists`], deletion in [`super::deletion`]; both are
//! re-exported here.

use serde_json::{Value, json};

use super::errors::{ApiError, FieldError};
use super::resources::Resource;
use super::schema;
use super::store::{Key, Store};

pub use super::deletion::{Deleted, Propagation, delete, finalize_namespace};
pub use super::lists::{ListOptions, WatchStart, list, watch_events};

/// Which endpoint of an object a write goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sub {
    /// The object itself.
    Main,
    /// Its `/status` subresource.
    Status,
}

/// What a write knows besides the body: the time and, for a create, the new object's `uid`.
#[derive(Debug, Clone)]
pub struct Ctx {
    /// Now.
    pub now: jiff::Timestamp,
    /// The `uid` a created object gets.
    pub uid: String,
}

fn name_of(object: &Value) -> Option<String> {
    object["metadata"]["name"]
        .as_str()
        .filter(|n| !n.is_empty())
        .map(str::to_string)
}

pub(super) fn timestamp(t: jiff::Timestamp) -> Value {
    json!(t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
}

fn namespace_key(name: &str) -> Key {
    Key {
        resource: "namespaces".into(),
        namespace: String::new(),
        name: name.to_string(),
    }
}

/// A name from `generateName`: the prefix and five characters of the real server's alphabet,
/// derived from the new `uid` (unique per server).
fn generated_name(prefix: &str, uid: &str) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut n = uid.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let mut suffix = String::new();
    for _ in 0..5 {
        suffix.push(char::from(ALPHABET[(n % 27) as usize]));
        n /= 27;
    }
    format!("{prefix}{suffix}")
}

/// Creates `object` in `namespace`.
///
/// # Errors
/// 409 `AlreadyExists`; 404 for a namespace that does not exist, 403 for one being
/// terminated; 422 `Invalid` for a bad name or (custom resources) a body its schema refuses;
/// 400 for a body of another kind.
pub fn create(
    store: &mut Store,
    r: &Resource,
    namespace: &str,
    mut object: Value,
    ctx: &Ctx,
) -> Result<Value, ApiError> {
    check_kind(r, &object)?;
    if !object["metadata"].is_object() {
        object["metadata"] = json!({});
    }
    let name = match (
        name_of(&object),
        object["metadata"]["generateName"].as_str(),
    ) {
        (Some(name), _) => name,
        (None, Some(prefix)) if !prefix.is_empty() => generated_name(prefix, &ctx.uid),
        (None, _) => {
            return Err(ApiError::invalid_fields(
                &r.kind,
                &r.group,
                "",
                vec![FieldError::required("metadata.name")],
            ));
        }
    };
    object["metadata"]["name"] = json!(name);
    // NamespaceLifecycle admission: nothing is created in a namespace that does not exist or
    // is being terminated.
    if r.namespaced {
        match store.get(&namespace_key(namespace)) {
            None => return Err(ApiError::not_found("namespaces", "", namespace)),
            Some(ns) if ns["metadata"].get("deletionTimestamp").is_some() => {
                return Err(ApiError::forbidden(
                    &r.plural,
                    &r.group,
                    &name,
                    format!(
                        "unable to create new content in namespace {namespace} because it is being terminated"
                    ),
                ));
            }
            Some(_) => {}
        }
    }
    validate_name(r, &name)?;
    let key = r.key(namespace, &name);
    if store.get(&key).is_some() {
        return Err(ApiError::already_exists(&r.plural, &r.group, &name));
    }
    {
        let metadata = object["metadata"]
            .as_object_mut()
            .ok_or_else(|| ApiError::bad_request("metadata must be an object"))?;
        if r.namespaced {
            metadata.insert("namespace".into(), json!(namespace));
        } else {
            metadata.remove("namespace");
        }
        metadata.insert("uid".into(), json!(ctx.uid));
        metadata.insert("creationTimestamp".into(), timestamp(ctx.now));
        if r.generation {
            metadata.insert("generation".into(), json!(1));
        } else {
            metadata.remove("generation");
        }
        for owned in [
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
        ] {
            metadata.remove(owned);
        }
    }
    object["apiVersion"] = json!(r.api_version());
    object["kind"] = json!(r.kind);
    prepare_create(r, &mut object);
    let object = admit(r, &name, object)?;
    let mut object = object;
    if r.group.is_empty() && r.kind == "Pod" {
        admit_pod(store, namespace, &name, &mut object)?;
    }
    let stored = store.put(key, object);
    if r.group.is_empty() && r.kind == "Namespace" {
        // The ServiceAccount controller's `default` account, made at once here so that a Pod
        // created right after its namespace finds it (the real one takes milliseconds).
        super::garbage::default_service_account(store, &name, ctx.now);
    }
    Ok(stored)
}

/// The admission plugins of a Pod: ServiceAccount (the account must exist; `default` when
/// none is named) and ResourceQuota.
fn admit_pod(store: &Store, namespace: &str, name: &str, pod: &mut Value) -> Result<(), ApiError> {
    let account = pod["spec"]["serviceAccountName"]
        .as_str()
        .filter(|s| !s.is_empty())
        .unwrap_or("default")
        .to_string();
    pod["spec"]["serviceAccountName"] = json!(account);
    let key = Key {
        resource: "serviceaccounts".into(),
        namespace: namespace.into(),
        name: account.clone(),
    };
    if store.get(&key).is_none() {
        return Err(ApiError::forbidden(
            "pods",
            "",
            name,
            format!(
                "error looking up service account {namespace}/{account}: serviceaccount \"{account}\" not found"
            ),
        ));
    }
    super::quota::admit(store, namespace, name, pod)
}

/// What each kind's strategy sets on create.
fn prepare_create(r: &Resource, object: &mut Value) {
    match (r.group.as_str(), r.kind.as_str()) {
        ("", "Namespace") => {
            if object["spec"]["finalizers"].as_array().is_none() {
                object["spec"]["finalizers"] = json!(["kubernetes"]);
            }
            object["status"] = json!({"phase": "Active"});
        }
        ("", "Pod") => {
            object["status"] = json!({"phase": "Pending", "qosClass": "BestEffort"});
        }
        ("apiextensions.k8s.io", "CustomResourceDefinition") => {
            // The real server's naming and establishing controllers accept the names and
            // establish the CRD within milliseconds; here it is done at once.
            object["status"] = json!({
                "acceptedNames": object["spec"]["names"].clone(),
                "storedVersions": object["spec"]["versions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|v| v["storage"].as_bool().unwrap_or(false))
                    .map(|v| v["name"].clone())
                    .collect::<Vec<_>>(),
                "conditions": [
                    {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
                     "message": "no conflicts found", "lastTransitionTime": object["metadata"]["creationTimestamp"]},
                    {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
                     "message": "the initial names have been accepted", "lastTransitionTime": object["metadata"]["creationTimestamp"]},
                ],
            });
        }
        _ if r.status_subresource && r.schema.is_some() => {
            // A custom resource with a status subresource cannot set status on create.
            if let Some(o) = object.as_object_mut() {
                o.remove("status");
            }
        }
        _ => {}
    }
}

/// The checks every write passes before it is stored: the kind's own normalisation and
/// validation and, for custom resources, pruning, defaulting and validation against the CRD's
/// schema.
fn admit(r: &Resource, name: &str, mut object: Value) -> Result<Value, ApiError> {
    if r.group.is_empty() && r.kind == "Secret" {
        // The API's conversion of a Secret: `stringData` is written into `data` (winning over
        // a key of the same name) and never stored.
        if let Some(Value::Object(strings)) =
            object.as_object_mut().and_then(|o| o.remove("stringData"))
        {
            use base64::Engine;
            let b64 = base64::engine::general_purpose::STANDARD;
            for (k, v) in strings {
                object["data"][k.as_str()] = json!(b64.encode(v.as_str().unwrap_or("")));
            }
        }
    }
    let object = match &r.schema {
        Some(s) => schema::admit(s, object)
            .map_err(|errors| ApiError::invalid_fields(&r.kind, &r.group, name, errors))?,
        None => object,
    };
    if r.group == "apiextensions.k8s.io" && r.kind == "CustomResourceDefinition" {
        let errors = schema::validate_crd(&object);
        if !errors.is_empty() {
            return Err(ApiError::invalid_fields(&r.kind, &r.group, name, errors));
        }
    }
    Ok(object)
}

fn is_dns_subdomain(name: &str) -> bool {
    name.len() <= 253 && name.split('.').all(is_dns_label)
}

fn is_dns_label(part: &str) -> bool {
    !part.is_empty()
        && part.len() <= 63
        && part
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !part.starts_with('-')
        && !part.ends_with('-')
}

/// The name rules of the kind: RFC 1123 labels for Namespaces, subdomains for the other
/// built-in kinds, path segments for custom resources; a CRD must be named
/// `<plural>.<group>`.
fn validate_name(r: &Resource, name: &str) -> Result<(), ApiError> {
    let error = if r.schema.is_some() {
        (name == "." || name == ".." || name.contains('/') || name.contains('%'))
            .then(|| format!("may not contain '/' or '%' and may not be '.' or '..' ({name})"))
    } else if r.kind == "Namespace" {
        (!is_dns_label(name)).then(|| {
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')".to_string()
        })
    } else {
        (!is_dns_subdomain(name)).then(|| {
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".to_string()
        })
    };
    match error {
        Some(detail) => Err(ApiError::invalid_fields(
            &r.kind,
            &r.group,
            name,
            vec![FieldError::invalid("metadata.name", &json!(name), detail)],
        )),
        None => Ok(()),
    }
}

/// The object `name`.
///
/// # Errors
/// 404 `NotFound`.
pub fn get(store: &Store, r: &Resource, namespace: &str, name: &str) -> Result<Value, ApiError> {
    store
        .get(&r.key(namespace, name))
        .cloned()
        .ok_or_else(|| ApiError::not_found(&r.plural, &r.group, name))
}

/// Replaces the object `name` with `object` (a PUT), on the main endpoint or `/status`.
///
/// # Errors
/// 404 `NotFound`; 409 `Conflict` for a stale `resourceVersion`; 422 `Invalid` for a missing
/// one where the kind requires it, for finalizers added to an object being deleted and for a
/// body the schema refuses; 400 for a body naming another object.
pub fn update(
    store: &mut Store,
    r: &Resource,
    namespace: &str,
    name: &str,
    object: Value,
    sub: Sub,
) -> Result<Value, ApiError> {
    check_kind(r, &object)?;
    let current = get(store, r, namespace, name)?;
    prepare_update(r, name, &current, object, sub)
        .map(|object| store_update(store, r, namespace, name, object))
}

/// The object as it is to be stored after an update of `current` to `object`.
fn prepare_update(
    r: &Resource,
    name: &str,
    current: &Value,
    mut object: Value,
    sub: Sub,
) -> Result<Value, ApiError> {
    match name_of(&object) {
        Some(n) if n == name => {}
        Some(n) => {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )));
        }
        None => object["metadata"]["name"] = json!(name),
    }
    match object["metadata"]["resourceVersion"].as_str() {
        Some(v) if !v.is_empty() && Some(v) != current["metadata"]["resourceVersion"].as_str() => {
            return Err(ApiError::conflict(&r.plural, &r.group, name));
        }
        Some(v) if !v.is_empty() => {}
        _ if !r.unconditional_update => {
            return Err(ApiError::invalid_fields(
                &r.kind,
                &r.group,
                name,
                vec![FieldError::invalid(
                    "metadata.resourceVersion",
                    &json!(0),
                    "must be specified for an update",
                )],
            ));
        }
        _ => {}
    }
    if sub == Sub::Status {
        // Only status changes (and the bookkeeping of managed fields).
        let mut next = current.clone();
        match object.get("status") {
            Some(s) => next["status"] = s.clone(),
            None => {
                if let Some(o) = next.as_object_mut() {
                    o.remove("status");
                }
            }
        }
        if let Some(m) = object["metadata"].get("managedFields") {
            next["metadata"]["managedFields"] = m.clone();
        }
        object = next;
    } else if r.status_subresource {
        match current.get("status") {
            Some(s) => object["status"] = s.clone(),
            None => {
                if let Some(o) = object.as_object_mut() {
                    o.remove("status");
                }
            }
        }
    }
    let deleting = current["metadata"].get("deletionTimestamp").is_some();
    if deleting {
        let old = finalizers(current);
        let added: Vec<String> = finalizers(&object)
            .into_iter()
            .filter(|f| !old.contains(f))
            .collect();
        if !added.is_empty() {
            return Err(ApiError::invalid_fields(
                &r.kind,
                &r.group,
                name,
                vec![FieldError::forbidden(
                    "metadata.finalizers",
                    format!(
                        "no new finalizers can be added if the object is being deleted, found new finalizers {added:?}"
                    ),
                )],
            ));
        }
    }
    for owned in [
        "uid",
        "creationTimestamp",
        "namespace",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generateName",
    ] {
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
        let changed = spec_part(r, current) != spec_part(r, &object);
        object["metadata"]["generation"] = json!(if changed { generation + 1 } else { generation });
    } else if let Some(m) = object["metadata"].as_object_mut() {
        m.remove("generation");
    }
    object["apiVersion"] = json!(r.api_version());
    object["kind"] = json!(r.kind);
    if r.kind == "Namespace" && r.group.is_empty() && sub == Sub::Main {
        // spec.finalizers of a Namespace change only through /finalize.
        object["spec"]["finalizers"] = current["spec"]["finalizers"].clone();
    }
    admit(r, name, object)
}

/// Stores an update; an object being deleted whose last finalizer went is removed.
pub(super) fn store_update(
    store: &mut Store,
    r: &Resource,
    namespace: &str,
    name: &str,
    object: Value,
) -> Value {
    let key = r.key(namespace, name);
    let done = object["metadata"].get("deletionTimestamp").is_some()
        && finalizers(&object).is_empty()
        && object["spec"]["finalizers"]
            .as_array()
            .is_none_or(|f| f.is_empty() || r.kind != "Namespace");
    let stored = store.put(key.clone(), object);
    if done {
        store.remove(&key);
    }
    stored
}

/// How a PATCH body is to be read, by its content type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    /// `application/merge-patch+json` (RFC 7386).
    Merge,
    /// `application/json-patch+json` (RFC 6902).
    Json,
    /// `application/strategic-merge-patch+json` (built-in kinds only).
    Strategic,
}

/// The object `current` patched with `body` (not stored yet).
///
/// # Errors
/// 422 `Invalid` for a JSON patch that does not apply; 415 for a strategic merge patch of a
/// custom resource; 400 for a body of the wrong shape.
pub fn patched(
    r: &Resource,
    name: &str,
    current: &Value,
    kind: PatchKind,
    body: &Value,
) -> Result<Value, ApiError> {
    let mut object = current.clone();
    match kind {
        PatchKind::Merge => json_patch::merge(&mut object, body),
        PatchKind::Json => {
            let mut ops: json_patch::Patch = serde_json::from_value(body.clone()).map_err(|e| {
                ApiError::bad_request(format!("the JSON patch does not parse: {e}"))
            })?;
            // The real server's JSON patch (evanphx/json-patch) passes a `test` for null on a
            // missing member whose parent exists; kube-rs' finalizer helper relies on it.
            ops.0.retain(|op| match op {
                json_patch::PatchOperation::Test(t) if t.value.is_null() => {
                    let parent = t.path.parent().map(|p| p.resolve(&object).is_ok());
                    !(parent == Some(true) && t.path.resolve(&object).is_err())
                }
                _ => true,
            });
            json_patch::patch(&mut object, &ops).map_err(|e| {
                ApiError::invalid(
                    &r.plural,
                    &r.group,
                    name,
                    format!("the JSON patch does not apply: {e}"),
                )
            })?;
        }
        PatchKind::Strategic => {
            if r.schema.is_some() {
                return Err(ApiError::unsupported_media_type(
                    "application/strategic-merge-patch+json",
                ));
            }
            super::strategic::apply(&mut object, body).map_err(ApiError::bad_request)?;
        }
    }
    Ok(object)
}

/// Stores `object`, a patch of `current`, as an update does: a `resourceVersion` the patch
/// body names is a precondition; without one the patch is unconditional.
///
/// # Errors
/// As [`update`].
#[allow(clippy::too_many_arguments)]
pub fn store_patched(
    store: &mut Store,
    r: &Resource,
    namespace: &str,
    name: &str,
    current: &Value,
    mut object: Value,
    body: &Value,
    sub: Sub,
) -> Result<Value, ApiError> {
    if body["metadata"].get("resourceVersion").is_none() {
        object["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"].clone();
    }
    let object = prepare_update(r, name, current, object, sub)?;
    Ok(store_update(store, r, namespace, name, object))
}

/// The object's `metadata.finalizers`.
pub fn finalizers(object: &Value) -> Vec<String> {
    super::resources::strings(&object["metadata"]["finalizers"])
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

/// What bumps `generation` when it changes: the object without metadata (and without status
/// when status has its own endpoint).
fn spec_part(r: &Resource, object: &Value) -> Value {
    let mut o = object.clone();
    if let Some(m) = o.as_object_mut() {
        m.remove("metadata");
        m.remove("apiVersion");
        m.remove("kind");
        if r.status_subresource {
            m.remove("status");
        }
    }
    o
}

/// The object with `metadata.finalizers` set to `list` (what the garbage collector and the
/// namespace controller write).
pub fn with_finalizers(object: &Value, list: &[String]) -> Value {
    let mut o = object.clone();
    if list.is_empty() {
        if let Some(m) = o["metadata"].as_object_mut() {
            m.remove("finalizers");
        }
    } else {
        o["metadata"]["finalizers"] = json!(list);
    }
    o
}

/// Stores `object` as a controller's update (no preconditions, no admission): used by the
/// garbage collector, the namespace and quota controllers and the kubelet.
pub fn controller_update(store: &mut Store, r: &Resource, object: Value) -> Value {
    let namespace = object["metadata"]["namespace"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or("")
        .to_string();
    store_update(store, r, &namespace, &name, object)
}
