//! Field ownership (`metadata.managedFields`) and server-side apply, as the real server's
//! field manager does them:
//! - every write records, per `(manager, operation, subresource)`, the fields it set, encoded as
//!   `FieldsV1` (`f:<field>`, `k:<key fields>` for items of keyed lists, `v:<value>` for set
//!   items, `.` for an item itself);
//! - an `Update` (create, PUT, non-apply PATCH) takes the fields whose values it changed away
//!   from the other managers;
//! - an `Apply` (`application/apply-patch+yaml`) merges its configuration into the object
//!   (keyed lists by key, sets by value, atomic lists and scalars replaced), fails with 409
//!   `Conflict` naming each field another manager owns with a different value unless `force`
//!   (which takes them over), and removes the fields it applied before and no longer applies
//!   when nobody else owns them.
//!
//! List semantics come from the CRD schema (`x-kubernetes-list-type`, `-list-map-keys`) for
//! custom resources and from the strategic-merge keys of the built-in types otherwise.
//! structured-merge-diff exists only in Go; this is the subset our clients exercise.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use super::errors::ApiError;
use super::registry::{self, Ctx, Sub};
use super::resources::Resource;
use super::store::Store;
use super::strategic::{ListMerge, list_merge};

/// A field: the path of `FieldsV1` elements from the root.
type Path = Vec<String>;

/// Fields no manager owns: the server's bookkeeping.
fn excluded(path: &[String]) -> bool {
    match path {
        [one] => one == "f:apiVersion" || one == "f:kind",
        [m, field, ..] if m == "f:metadata" => matches!(
            field.as_str(),
            "f:name"
                | "f:namespace"
                | "f:uid"
                | "f:resourceVersion"
                | "f:generation"
                | "f:creationTimestamp"
                | "f:managedFields"
                | "f:selfLink"
                | "f:deletionTimestamp"
                | "f:deletionGracePeriodSeconds"
        ),
        _ => false,
    }
}

/// How the list at `path` (of `FieldsV1` elements) merges, for resource `r`.
fn list_kind(r: &Resource, path: &[String]) -> ListMerge {
    let Some(schema) = &r.schema else {
        let field = path
            .iter()
            .rev()
            .find_map(|e| e.strip_prefix("f:"))
            .unwrap_or("");
        return list_merge(field);
    };
    let mut node = schema;
    for element in path {
        node = if let Some(field) = element.strip_prefix("f:") {
            let p = &node["properties"][field];
            if p.is_null() {
                &node["additionalProperties"]
            } else {
                p
            }
        } else {
            &node["items"]
        };
    }
    match node["x-kubernetes-list-type"].as_str() {
        // The first key names the item (our schemas key their map lists by one field).
        Some("map") => ListMerge::ByKey(
            node["x-kubernetes-list-map-keys"][0]
                .as_str()
                .unwrap_or("name")
                .to_string(),
        ),
        Some("set") => ListMerge::Union,
        _ => ListMerge::Replace,
    }
}

fn item_key(merge_key: &str, item: &Value) -> String {
    let mut m = Map::new();
    m.insert(merge_key.to_string(), item[merge_key].clone());
    format!("k:{}", Value::Object(m))
}

/// The leaf fields `value` sets, under `prefix`.
fn fields_of(r: &Resource, value: &Value, prefix: &mut Path, out: &mut BTreeSet<Path>) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (k, v) in map {
                prefix.push(format!("f:{k}"));
                if !excluded(prefix) {
                    fields_of(r, v, prefix, out);
                }
                prefix.pop();
            }
        }
        Value::Array(items) if !items.is_empty() => match list_kind(r, prefix) {
            ListMerge::ByKey(key) => {
                for item in items {
                    prefix.push(item_key(&key, item));
                    prefix.push(".".into());
                    out.insert(prefix.clone());
                    prefix.pop();
                    fields_of(r, item, prefix, out);
                    prefix.pop();
                }
            }
            ListMerge::Union => {
                for item in items {
                    prefix.push(format!("v:{item}"));
                    out.insert(prefix.clone());
                    prefix.pop();
                }
            }
            ListMerge::Replace => {
                out.insert(prefix.clone());
            }
        },
        _ => {
            out.insert(prefix.clone());
        }
    }
}

fn field_set(r: &Resource, value: &Value, sub: Sub) -> BTreeSet<Path> {
    let mut out = BTreeSet::new();
    fields_of(r, value, &mut Vec::new(), &mut out);
    // Status belongs to /status when the kind has that subresource; the rest to the main
    // endpoint (the real field manager's "reset fields").
    out.retain(|p| {
        let is_status = p.first().is_some_and(|f| f == "f:status");
        match sub {
            Sub::Status => is_status,
            Sub::Main => !(r.status_subresource && is_status),
        }
    });
    out
}

/// The value at `path` (`None` when absent).
fn value_at<'a>(value: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut node = value;
    for element in path {
        node = if let Some(field) = element.strip_prefix("f:") {
            node.get(field)?
        } else if let Some(key) = element.strip_prefix("k:") {
            let want: Map<String, Value> = serde_json::from_str(key).ok()?;
            node.as_array()?
                .iter()
                .find(|item| want.iter().all(|(k, v)| &item[k] == v))?
        } else if let Some(v) = element.strip_prefix("v:") {
            let want: Value = serde_json::from_str(v).ok()?;
            node.as_array()?.iter().find(|item| **item == want)?
        } else {
            // "." : the item itself.
            node
        };
    }
    Some(node)
}

/// Removes the field at `path`, and maps it leaves empty.
fn remove_at(value: &mut Value, path: &[String]) {
    let Some((last, parent_path)) = path.split_last() else {
        return;
    };
    if last == "." {
        remove_at(value, parent_path);
        return;
    }
    let mut node = &mut *value;
    for element in parent_path {
        let next = if let Some(field) = element.strip_prefix("f:") {
            node.get_mut(field)
        } else if let Some(key) = element.strip_prefix("k:") {
            let Ok(want) = serde_json::from_str::<Map<String, Value>>(key) else {
                return;
            };
            node.as_array_mut().and_then(|a| {
                a.iter_mut()
                    .find(|item| want.iter().all(|(k, v)| &item[k] == v))
            })
        } else {
            None
        };
        match next {
            Some(n) => node = n,
            None => return,
        }
    }
    if let Some(field) = last.strip_prefix("f:") {
        if let Some(m) = node.as_object_mut() {
            m.remove(field);
        }
    } else if let Some(key) = last.strip_prefix("k:") {
        if let (Ok(want), Some(a)) = (
            serde_json::from_str::<Map<String, Value>>(key),
            node.as_array_mut(),
        ) {
            a.retain(|item| !want.iter().all(|(k, v)| &item[k] == v));
        }
    } else if let Some(v) = last.strip_prefix("v:")
        && let (Ok(want), Some(a)) = (serde_json::from_str::<Value>(v), node.as_array_mut())
    {
        a.retain(|item| *item != want);
    }
    // A map the removal emptied goes too, as structured-merge-diff leaves none behind.
    if node.as_object().is_some_and(Map::is_empty) && !parent_path.is_empty() {
        remove_at(value, parent_path);
    }
}

/// `FieldsV1` of a set of leaf paths.
fn encode(set: &BTreeSet<Path>) -> Value {
    let mut root = Map::new();
    for path in set {
        let mut node = &mut root;
        for element in path {
            let entry = node
                .entry(element.clone())
                .or_insert_with(|| Value::Object(Map::new()));
            let Value::Object(next) = entry else { break };
            node = next;
        }
    }
    Value::Object(root)
}

/// The leaf paths of `FieldsV1`.
fn decode(fields: &Value) -> BTreeSet<Path> {
    fn walk(node: &Value, prefix: &mut Path, out: &mut BTreeSet<Path>) {
        match node.as_object() {
            Some(m) if !m.is_empty() => {
                for (k, v) in m {
                    prefix.push(k.clone());
                    walk(v, prefix, out);
                    prefix.pop();
                }
            }
            _ => {
                if !prefix.is_empty() {
                    out.insert(prefix.clone());
                }
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(fields, &mut Vec::new(), &mut out);
    out
}

/// One `managedFields` entry, decoded.
#[derive(Debug, Clone)]
struct Entry {
    manager: String,
    operation: String,
    subresource: String,
    api_version: String,
    time: Value,
    fields: BTreeSet<Path>,
}

fn entries(object: &Value) -> Vec<Entry> {
    object["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| Entry {
            manager: e["manager"].as_str().unwrap_or("").to_string(),
            operation: e["operation"].as_str().unwrap_or("Update").to_string(),
            subresource: e["subresource"].as_str().unwrap_or("").to_string(),
            api_version: e["apiVersion"].as_str().unwrap_or("").to_string(),
            time: e["time"].clone(),
            fields: decode(&e["fieldsV1"]),
        })
        .collect()
}

fn set_entries(object: &mut Value, list: Vec<Entry>) {
    let encoded: Vec<Value> = list
        .into_iter()
        .filter(|e| !e.fields.is_empty())
        .map(|e| {
            let mut v = json!({
                "manager": e.manager,
                "operation": e.operation,
                "apiVersion": e.api_version,
                "time": e.time,
                "fieldsType": "FieldsV1",
                "fieldsV1": encode(&e.fields),
            });
            if !e.subresource.is_empty() {
                v["subresource"] = json!(e.subresource);
            }
            v
        })
        .collect();
    if encoded.is_empty() {
        if let Some(m) = object["metadata"].as_object_mut() {
            m.remove("managedFields");
        }
    } else {
        object["metadata"]["managedFields"] = Value::Array(encoded);
    }
}

fn subresource_name(sub: Sub) -> &'static str {
    match sub {
        Sub::Main => "",
        Sub::Status => "status",
    }
}

fn time(now: jiff::Timestamp) -> Value {
    json!(now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
}

/// Records an `Update` by `manager` from `old` (`Value::Null` for a create) to `new`: it owns
/// the fields whose values it changed; the other managers lose them.
fn record_update(
    r: &Resource,
    old: &Value,
    mut new: Value,
    manager: &str,
    sub: Sub,
    now: jiff::Timestamp,
) -> Value {
    let before = field_set(r, old, sub);
    let after = field_set(r, &new, sub);
    let changed: BTreeSet<Path> = after
        .iter()
        .filter(|p| !before.contains(*p) || value_at(old, p) != value_at(&new, p))
        .cloned()
        .collect();
    let removed: BTreeSet<Path> = before.difference(&after).cloned().collect();
    let mut list = entries(old);
    for e in &mut list {
        e.fields.retain(|p| !removed.contains(p));
        if e.manager != manager || e.operation != "Update" {
            e.fields.retain(|p| !changed.contains(p));
        }
    }
    if !changed.is_empty() {
        let sub_name = subresource_name(sub);
        match list
            .iter_mut()
            .find(|e| e.manager == manager && e.operation == "Update" && e.subresource == sub_name)
        {
            Some(e) => {
                e.fields.extend(changed);
                e.time = time(now);
            }
            None => list.push(Entry {
                manager: manager.to_string(),
                operation: "Update".into(),
                subresource: sub_name.into(),
                api_version: r.api_version(),
                time: time(now),
                fields: changed,
            }),
        }
    }
    set_entries(&mut new, list);
    new
}

/// The managed fields of an object about to be created by `manager`.
pub fn on_create(r: &Resource, object: Value, manager: &str, now: jiff::Timestamp) -> Value {
    record_update(r, &Value::Null, object, manager, Sub::Main, now)
}

/// The managed fields of `new`, an update of `current` by `manager`.
pub fn on_update(
    r: &Resource,
    current: &Value,
    new: Value,
    manager: &str,
    sub: Sub,
    now: jiff::Timestamp,
) -> Value {
    record_update(r, current, new, manager, sub, now)
}

/// Merges an apply configuration into `target`: maps field by field, keyed lists by key, sets
/// by value, everything else replaced.
fn merge(r: &Resource, target: &mut Value, config: &Value, path: &mut Path) {
    match (target.as_object_mut(), config) {
        (Some(t), Value::Object(c)) => {
            for (k, v) in c {
                path.push(format!("f:{k}"));
                match t.get_mut(k) {
                    Some(existing) => merge(r, existing, v, path),
                    None => {
                        t.insert(k.clone(), v.clone());
                    }
                }
                path.pop();
            }
        }
        _ => match (target.as_array_mut(), config, list_kind(r, path)) {
            (Some(t), Value::Array(c), ListMerge::ByKey(key)) => {
                for item in c {
                    match t.iter_mut().find(|e| e[key.as_str()] == item[key.as_str()]) {
                        Some(existing) => {
                            path.push(item_key(&key, item));
                            merge(r, existing, item, path);
                            path.pop();
                        }
                        None => t.push(item.clone()),
                    }
                }
            }
            (Some(t), Value::Array(c), ListMerge::Union) => {
                for item in c {
                    if !t.contains(item) {
                        t.push(item.clone());
                    }
                }
            }
            _ => *target = config.clone(),
        },
    }
}

/// A server-side apply of `config` by `manager` to the object `name` (created when absent).
///
/// # Errors
/// 400 without a field manager or for a configuration of another object; 409 `Conflict`
/// naming the fields other managers own with other values (unless `force`); the registry's
/// errors.
#[allow(clippy::too_many_arguments)]
pub fn apply(
    store: &mut Store,
    r: &Resource,
    namespace: &str,
    name: &str,
    config: &Value,
    manager: &str,
    force: bool,
    sub: Sub,
    ctx: &Ctx,
) -> Result<(u16, Value), ApiError> {
    if manager.is_empty() {
        return Err(ApiError::invalid_fields(
            "PatchOptions",
            "meta.k8s.io",
            "",
            vec![super::errors::FieldError {
                reason: "FieldValueRequired",
                field: "fieldManager".into(),
                message: "Required value: is required for apply patch".into(),
            }],
        ));
    }
    if config["metadata"]["name"]
        .as_str()
        .is_some_and(|n| n != name)
    {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({}) does not match the name on the URL ({name})",
            config["metadata"]["name"].as_str().unwrap_or("")
        )));
    }
    for field in ["apiVersion", "kind"] {
        if config[field].as_str().is_none_or(str::is_empty) {
            return Err(ApiError::bad_request(format!(
                "{field} must be set in an apply configuration"
            )));
        }
    }
    let applied = field_set(r, config, sub);
    let sub_name = subresource_name(sub);
    let current = match registry::get(store, r, namespace, name) {
        Ok(c) => c,
        Err(e) if e.code == 404 && sub == Sub::Main => {
            let mut object = config.clone();
            object["metadata"]["name"] = json!(name);
            let mut object = Value::Object(object.as_object().cloned().unwrap_or_default());
            set_entries(
                &mut object,
                vec![Entry {
                    manager: manager.into(),
                    operation: "Apply".into(),
                    subresource: String::new(),
                    api_version: r.api_version(),
                    time: time(ctx.now),
                    fields: applied,
                }],
            );
            return registry::create(store, r, namespace, object, ctx).map(|o| (201, o));
        }
        Err(e) => return Err(e),
    };
    let mut list = entries(&current);
    let mine =
        |e: &Entry| e.manager == manager && e.operation == "Apply" && e.subresource == sub_name;
    // Conflicts: fields another manager owns whose value the configuration changes.
    let mut conflicts: Vec<(String, String, Path)> = Vec::new();
    for e in list.iter().filter(|e| !mine(e)) {
        for p in e.fields.intersection(&applied) {
            if p.last().is_some_and(|l| l == ".") {
                continue;
            }
            if value_at(config, p) != value_at(&current, p) {
                conflicts.push((e.manager.clone(), e.api_version.clone(), p.clone()));
            }
        }
    }
    if !conflicts.is_empty() && !force {
        return Err(conflict_error(r, name, &conflicts));
    }
    let taken: BTreeSet<Path> = conflicts.into_iter().map(|(_, _, p)| p).collect();
    let previous: BTreeSet<Path> = list
        .iter()
        .filter(|e| mine(e))
        .flat_map(|e| e.fields.iter().cloned())
        .collect();
    for e in &mut list {
        if !mine(e) {
            e.fields.retain(|p| !taken.contains(p));
        }
    }
    let mut object = current.clone();
    let mut body = config.clone();
    if let Some(m) = body.as_object_mut() {
        m.remove("apiVersion");
        m.remove("kind");
    }
    if let Some(m) = body["metadata"].as_object_mut() {
        m.retain(|k, _| {
            matches!(
                k.as_str(),
                "labels" | "annotations" | "finalizers" | "ownerReferences"
            )
        });
    }
    match sub {
        Sub::Status => {
            let status = body.get("status").cloned().unwrap_or(Value::Null);
            let mut only = json!({});
            if !status.is_null() {
                only["status"] = status;
            }
            merge(r, &mut object, &only, &mut Vec::new());
        }
        Sub::Main => {
            if r.status_subresource
                && let Some(m) = body.as_object_mut()
            {
                m.remove("status");
            }
            merge(r, &mut object, &body, &mut Vec::new());
        }
    }
    // What this manager applied before and applies no more goes, unless someone else owns it.
    let others: BTreeSet<Path> = list
        .iter()
        .filter(|e| !mine(e))
        .flat_map(|e| e.fields.iter().cloned())
        .collect();
    for p in previous.difference(&applied) {
        if !others.contains(p) {
            remove_at(&mut object, p);
        }
    }
    list.retain(|e| !mine(e));
    list.push(Entry {
        manager: manager.into(),
        operation: "Apply".into(),
        subresource: sub_name.into(),
        api_version: r.api_version(),
        time: time(ctx.now),
        fields: applied,
    });
    set_entries(&mut object, list);
    object["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"].clone();
    registry::update(store, r, namespace, name, object, sub).map(|o| (200, o))
}

fn conflict_error(r: &Resource, name: &str, conflicts: &[(String, String, Path)]) -> ApiError {
    let dotted = |p: &Path| -> String {
        p.iter()
            .map(|e| {
                if let Some(f) = e.strip_prefix("f:") {
                    format!(".{f}")
                } else if let Some(k) = e.strip_prefix("k:") {
                    // `[type="Ready"]`, as structured-merge-diff prints a key.
                    let keys: Map<String, Value> = serde_json::from_str(k).unwrap_or_default();
                    let parts: Vec<String> = keys.iter().map(|(k, v)| format!("{k}={v}")).collect();
                    format!("[{}]", parts.join(","))
                } else if let Some(v) = e.strip_prefix("v:") {
                    format!("[={v}]")
                } else {
                    String::new()
                }
            })
            .collect()
    };
    let message = if conflicts.len() == 1 {
        let (m, v, p) = &conflicts[0];
        format!(
            "Apply failed with 1 conflict: conflict with \"{m}\" using {v}: {}",
            dotted(p)
        )
    } else {
        let mut text = format!("Apply failed with {} conflicts:", conflicts.len());
        for (m, v, p) in conflicts {
            text.push_str(&format!(" conflict with \"{m}\" using {v}: {}", dotted(p)));
        }
        text
    };
    let mut e = ApiError::invalid(&r.plural, &r.group, name, message);
    e.code = 409;
    e.reason = "Conflict";
    e.causes = conflicts
        .iter()
        .map(|(m, v, p)| super::errors::FieldError {
            reason: "FieldManagerConflict",
            field: dotted(p),
            message: format!("conflict with \"{m}\" using {v}"),
        })
        .collect();
    e
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn fields_encode_as_fields_v1_and_back() {
        let r = super::super::resources::find(&Store::default(), "", "v1", "pods").unwrap();
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"a": "1"}, "finalizers": ["x"]},
            "spec": {"containers": [{"name": "runner", "image": "i"}], "tolerations": [{"key": "k"}]},
        });
        let set = field_set(&r, &pod, Sub::Main);
        let encoded = encode(&set);
        assert_eq!(
            encoded,
            json!({
                "f:metadata": {"f:labels": {"f:a": {}}, "f:finalizers": {"v:\"x\"": {}}},
                "f:spec": {
                    "f:containers": {"k:{\"name\":\"runner\"}": {".": {}, "f:image": {}, "f:name": {}}},
                    "f:tolerations": {},
                },
            })
        );
        assert_eq!(decode(&encoded), set);
    }
}
