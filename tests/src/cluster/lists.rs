//! Lists and watches of the registry: selectors, pages read at one version (`continue`
//! tokens), and the watch events of the change log with the selector semantics of the real
//! watch cache.

use serde_json::{Value, json};

use super::errors::ApiError;
use super::resources::Resource;
use super::selectors::{FieldSelector, LabelSelector};
use super::store::Store;

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
