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

use serde_json::{Value, json};

use super::errors::{ApiError, FieldError};
use super::resources::Resource;
use super::schema;
use super::selectors::{FieldSelector, LabelSelector};
use super::store::{Key, Store};

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

fn timestamp(t: jiff::Timestamp) -> Value {
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
        let sa = Key {
            resource: "serviceaccounts".into(),
            namespace: name.clone(),
            name: "default".into(),
        };
        let account = json!({
            "apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "default", "namespace": name,
                         "uid": format!("{}-sa", ctx.uid), "creationTimestamp": timestamp(ctx.now)},
        });
        store.put(sa, account);
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

/// What a list selects and how much of it to give.
#[derive(Debug, Clone, Default)]
pub struct ListOptions {
    /// `labelSelector`.
    pub labels: LabelSelector,
    /// `fieldSelector`.
    pub fields: FieldSelector,
    /// `limit` (0: everything).
    pub limit: usize,
    /// `continue`: the token of the previous page.
    pub continue_token: Option<String>,
}

/// Every object of the resource (in `namespace` when given) that the selectors select, as a
/// `<Kind>List`, a page at a time when `limit` is set: the `continue` token names the
/// `resourceVersion` of the first page and the last key given, so every page is read at the
/// first page's version, as the real server reads pages from one etcd revision (an expired
/// one answers 410 `Expired`).
///
/// # Errors
/// 400 for a malformed `continue` token; 410 `Expired` for one whose version was compacted.
pub fn list(
    store: &Store,
    r: &Resource,
    namespace: Option<&str>,
    options: &ListOptions,
) -> Result<Value, ApiError> {
    let (at, after) = match &options.continue_token {
        Some(token) => {
            let (v, key) = decode_continue(token)?;
            if v < store.compacted() {
                return Err(ApiError::expired(
                    "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.",
                ));
            }
            (v, Some(key))
        }
        None => (store.version(), None),
    };
    let (items, more) = store.page(
        &r.store_name(),
        namespace,
        at,
        after
            .as_ref()
            .map(|(ns, name)| (ns.as_str(), name.as_str())),
        |o| options.labels.matches_object(o) && options.fields.matches_object(o),
        options.limit,
    );
    let next = if more {
        items.last().map(|o| encode_continue(at, o))
    } else {
        None
    };
    let mut metadata = json!({"resourceVersion": at.to_string()});
    if let Some(token) = next {
        metadata["continue"] = json!(token);
    }
    let mut list = json!({
        "kind": format!("{}List", r.kind),
        "apiVersion": r.api_version(),
        "metadata": metadata,
    });
    // Moved in, not through `json!`, which would copy every item once more.
    list["items"] = Value::Array(items);
    Ok(list)
}

fn encode_continue(at: u64, last: &Value) -> String {
    use base64::Engine;
    let token = json!({
        "v": "meta.k8s.io/v1",
        "rv": at,
        "start": format!(
            "{}/{}",
            last["metadata"]["namespace"].as_str().unwrap_or(""),
            last["metadata"]["name"].as_str().unwrap_or("")
        ),
    });
    base64::engine::general_purpose::URL_SAFE.encode(token.to_string())
}

fn decode_continue(token: &str) -> Result<(u64, (String, String)), ApiError> {
    use base64::Engine;
    let bad = || ApiError::bad_request("continue key is not valid: the token does not decode");
    let bytes = base64::engine::general_purpose::URL_SAFE
        .decode(token)
        .map_err(|_| bad())?;
    let v: Value = serde_json::from_slice(&bytes).map_err(|_| bad())?;
    let at = v["rv"].as_u64().ok_or_else(bad)?;
    let (ns, name) = v["start"]
        .as_str()
        .and_then(|s| s.split_once('/'))
        .ok_or_else(bad)?;
    Ok((at, (ns.to_string(), name.to_string())))
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
        .and_then(|object| store_update(store, r, namespace, name, object))
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
fn store_update(
    store: &mut Store,
    r: &Resource,
    namespace: &str,
    name: &str,
    object: Value,
) -> Result<Value, ApiError> {
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
    Ok(stored)
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
            super::strategic::apply(&mut object, body, &r.kind).map_err(ApiError::bad_request)?;
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
    store_update(store, r, namespace, name, object)
}

/// `PUT /api/v1/namespaces/<name>/finalize`: sets the Namespace's `spec.finalizers` (what the
/// namespace controller calls once the namespace is empty).
///
/// # Errors
/// 404 `NotFound`.
pub fn finalize_namespace(
    store: &mut Store,
    r: &Resource,
    name: &str,
    body: &Value,
) -> Result<Value, ApiError> {
    let mut current = get(store, r, "", name)?;
    current["spec"]["finalizers"] = body["spec"]["finalizers"].clone();
    if current["spec"]["finalizers"].is_null() {
        current["spec"]["finalizers"] = json!([]);
    }
    store_update(store, r, "", name, current)
}

/// The deletion propagation a delete asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    /// Dependents are deleted after the owner (the default).
    Background,
    /// Dependents are deleted first; the owner waits with the `foregroundDeletion` finalizer.
    Foreground,
    /// Dependents are kept, their owner references removed (`orphan` finalizer).
    Orphan,
}

/// What a delete did.
#[derive(Debug, Clone, PartialEq)]
pub enum Deleted {
    /// The object is gone; the body the real store answers with (the object, or a `Success`
    /// `Status`).
    Gone(Value),
    /// The object waits for finalizers or a graceful termination; it is answered with.
    Pending(Value),
}

/// Deletes the object `name` with `options` (a `DeleteOptions`, or null): its
/// `preconditions` on `uid` and `resourceVersion` must hold; an object with finalizers, or a
/// Pod on a node with a grace period, gets a `deletionTimestamp` and stays.
///
/// # Errors
/// 404 `NotFound`; 409 `Conflict` for a precondition that does not hold; 400 for an unknown
/// propagation policy.
pub fn delete(
    store: &mut Store,
    r: &Resource,
    namespace: &str,
    name: &str,
    options: &Value,
    now: jiff::Timestamp,
) -> Result<Deleted, ApiError> {
    let current = get(store, r, namespace, name)?;
    for (field, what) in [("uid", "UID"), ("resourceVersion", "ResourceVersion")] {
        if let Some(want) = options["preconditions"][field].as_str() {
            let have = current["metadata"][field].as_str().unwrap_or("");
            if want != have {
                return Err(ApiError::precondition_failed(
                    &r.plural,
                    &r.group,
                    name,
                    &r.etcd_key(namespace, name),
                    format!("{what} in precondition: {want}, {what} in object meta: {have}"),
                ));
            }
        }
    }
    let propagation = match (
        options["propagationPolicy"].as_str(),
        options["orphanDependents"].as_bool(),
    ) {
        (Some("Foreground"), _) => Propagation::Foreground,
        (Some("Orphan"), _) | (None, Some(true)) => Propagation::Orphan,
        (Some("Background") | None, _) => Propagation::Background,
        (Some(other), _) => {
            return Err(ApiError::bad_request(format!(
                "DeletionPropagation {other:?} is not supported: it must be one of Orphan, Foreground, Background"
            )));
        }
    };
    let key = r.key(namespace, name);
    let mut object = current.clone();
    let mut wanted = finalizers(&current);
    match propagation {
        Propagation::Foreground if !wanted.iter().any(|f| f == "foregroundDeletion") => {
            wanted.push("foregroundDeletion".into());
        }
        Propagation::Orphan if !wanted.iter().any(|f| f == "orphan") => {
            wanted.push("orphan".into());
        }
        _ => {}
    }
    let namespace_finalizers = r.kind == "Namespace"
        && r.group.is_empty()
        && current["spec"]["finalizers"]
            .as_array()
            .is_some_and(|f| !f.is_empty());
    let grace = graceful_seconds(r, &current, options);
    let deleting = current["metadata"].get("deletionTimestamp").is_some();
    if !wanted.is_empty() || namespace_finalizers || grace > 0 {
        if deleting && wanted == finalizers(&current) {
            let shortened = grace == 0
                && current["metadata"]["deletionGracePeriodSeconds"]
                    .as_i64()
                    .unwrap_or(0)
                    > 0;
            if !shortened {
                return Ok(Deleted::Pending(current));
            }
        }
        if !deleting || grace == 0 {
            let at = now + jiff::SignedDuration::from_secs(grace);
            object["metadata"]["deletionTimestamp"] = timestamp(at);
            object["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
        }
        object["metadata"]["finalizers"] = json!(wanted);
        if r.kind == "Namespace" && r.group.is_empty() {
            object["status"]["phase"] = json!("Terminating");
        }
        if !wanted.is_empty() || namespace_finalizers || grace > 0 {
            return Ok(Deleted::Pending(store.put(key, object)));
        }
    }
    let deleted = store
        .remove(&key)
        .ok_or_else(|| ApiError::not_found(&r.plural, &r.group, name))?;
    if r.returns_deleted {
        return Ok(Deleted::Gone(deleted));
    }
    let mut details = json!({"name": name, "kind": r.plural, "uid": deleted["metadata"]["uid"]});
    if !r.group.is_empty() {
        details["group"] = json!(r.group);
    }
    Ok(Deleted::Gone(json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details,
    })))
}

/// The grace period of a delete: Pods bound to a node terminate gracefully (the request's
/// `gracePeriodSeconds`, else the Pod's `terminationGracePeriodSeconds`, else 30); unbound Pods
/// and other kinds go at once.
fn graceful_seconds(r: &Resource, current: &Value, options: &Value) -> i64 {
    let bound = current["spec"]["nodeName"]
        .as_str()
        .is_some_and(|n| !n.is_empty());
    if r.kind != "Pod" || !r.group.is_empty() || !bound {
        return 0;
    }
    let terminal = matches!(
        current["status"]["phase"].as_str(),
        Some("Succeeded" | "Failed")
    );
    if terminal {
        return 0;
    }
    options["gracePeriodSeconds"]
        .as_i64()
        .or_else(|| current["spec"]["terminationGracePeriodSeconds"].as_i64())
        .unwrap_or(30)
        .max(0)
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

/// Stores `object` as a controller's update of `current` (no preconditions, no admission):
/// used by the garbage collector and the namespace controller.
pub fn controller_update(store: &mut Store, r: &Resource, object: Value) -> Value {
    let namespace = object["metadata"]["namespace"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let mut object = object;
    if let Some(m) = object["metadata"].as_object_mut() {
        m.remove("resourceVersion");
    }
    match store_update(store, r, &namespace, &name, object.clone()) {
        Ok(v) => v,
        Err(_) => object,
    }
}

/// Where a watch starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchStart {
    /// With an `ADDED` event for every current object (no `resourceVersion`, `"0"`, or
    /// `sendInitialEvents=true`).
    Current,
    /// With the changes after this `resourceVersion`.
    After(u64),
}

/// The watch events of the resource (in `namespace` when given) from `start`, as
/// `{"type", "object"}` values, and the `resourceVersion` they reach. An object that stops
/// matching the selectors is sent as `DELETED`, one that starts matching as `ADDED`, as the
/// real watch cache does.
///
/// # Errors
/// 410 `Expired` ("too old resource version") when `start` is older than the history kept.
pub fn watch_events(
    store: &Store,
    r: &Resource,
    namespace: Option<&str>,
    options: &ListOptions,
    start: WatchStart,
) -> Result<(Vec<Value>, u64), ApiError> {
    let resource = r.store_name();
    let selected = |o: &Value| options.labels.matches_object(o) && options.fields.matches_object(o);
    let events = match start {
        WatchStart::Current => store
            .list(&resource, namespace)
            .into_iter()
            .filter(|o| selected(o))
            .map(|o| json!({"type": "ADDED", "object": o}))
            .collect(),
        WatchStart::After(v) => {
            let changes = store.changes_since(v).ok_or_else(|| {
                ApiError::expired(format!(
                    "too old resource version: {v} ({})",
                    store.compacted()
                ))
            })?;
            changes
                .filter(|c| {
                    c.key.resource == resource && namespace.is_none_or(|ns| c.key.namespace == ns)
                })
                .filter_map(|c| {
                    let now = selected(&c.object);
                    let before = c.previous.as_ref().is_some_and(&selected);
                    let kind = match (c.kind, before, now) {
                        ("DELETED", true, _) => "DELETED",
                        ("DELETED", false, _) => return None,
                        (_, true, true) => "MODIFIED",
                        (_, false, true) => "ADDED",
                        (_, true, false) => "DELETED",
                        (_, false, false) => return None,
                    };
                    Some(json!({"type": kind, "object": c.object}))
                })
                .collect()
        }
    };
    Ok((events, store.version()))
}
