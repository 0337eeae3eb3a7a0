//! Deletion in the registry: preconditions, finalizers and `deletionTimestamp`, graceful Pod
//! termination, propagation policies (the finalizers the garbage collector acts on), and a
//! Namespace's `finalize` subresource.

use serde_json::{Value, json};

use super::errors::ApiError;
use super::registry::{finalizers, get, store_update, timestamp};
use super::resources::Resource;
use super::store::Store;

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
    Ok(store_update(store, r, "", name, current))
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
    // The object stays (marked for deletion) while finalizers or a grace period hold it; a
    // delete with grace period 0 of a terminating Pod (the kubelet's) falls through to removal.
    if !wanted.is_empty() || namespace_finalizers || grace > 0 {
        if deleting && wanted == finalizers(&current) {
            return Ok(Deleted::Pending(current));
        }
        if !deleting {
            let at = now + jiff::SignedDuration::from_secs(grace);
            object["metadata"]["deletionTimestamp"] = timestamp(at);
            object["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
        }
        object["metadata"]["finalizers"] = json!(wanted);
        if r.kind == "Namespace" && r.group.is_empty() {
            object["status"]["phase"] = json!("Terminating");
        }
        return Ok(Deleted::Pending(store.put(key, object)));
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
