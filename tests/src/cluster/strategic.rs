//! Strategic merge patch (`application/strategic-merge-patch+json`) for the built-in kinds,
//! which kubectl sends for `patch` (its default type) and client-side `apply`: a JSON merge
//! patch except that the lists the Kubernetes types mark `patchStrategy: merge` merge by their
//! `patchMergeKey`, primitive lists so marked take the union, and the directives `$patch`
//! (`replace`, `delete`, `merge`), `$retainKeys`, `$deleteFromPrimitiveList/<field>` and
//! `$setElementOrder/<field>` are obeyed. No crate implements it outside Go; the merge keys are
//! those of the kinds served here (Pods, ServiceAccounts, metadata, conditions).

use serde_json::{Map, Value};

/// How a list field merges (also what server-side apply reads for built-in kinds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListMerge {
    /// By this key of its elements.
    ByKey(String),
    /// As a set of primitives.
    Union,
    /// Replaced whole (every list without a patch strategy).
    Replace,
}

/// How the list field `field` of a built-in kind merges (`patchStrategy`/`patchMergeKey` of
/// the Kubernetes types; the same lists are `listType: map` / `set` for server-side apply).
pub fn list_merge(field: &str) -> ListMerge {
    match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "env"
        | "volumes"
        | "imagePullSecrets"
        | "secrets"
        | "resourceClaims" => ListMerge::ByKey("name".into()),
        "readinessGates" => ListMerge::ByKey("conditionType".into()),
        "ports" => ListMerge::ByKey("containerPort".into()),
        "volumeMounts" => ListMerge::ByKey("mountPath".into()),
        "volumeDevices" => ListMerge::ByKey("devicePath".into()),
        "hostAliases" => ListMerge::ByKey("ip".into()),
        "conditions" => ListMerge::ByKey("type".into()),
        "ownerReferences" => ListMerge::ByKey("uid".into()),
        "finalizers" => ListMerge::Union,
        _ => ListMerge::Replace,
    }
}

/// Applies `patch` to `target`.
///
/// # Errors
/// A message for a patch of the wrong shape or an unknown directive.
pub fn apply(target: &mut Value, patch: &Value) -> Result<(), String> {
    merge_map(target, patch)
}

fn merge_map(target: &mut Value, patch: &Value) -> Result<(), String> {
    let Some(patch) = patch.as_object() else {
        *target = patch.clone();
        return Ok(());
    };
    match patch.get("$patch").and_then(Value::as_str) {
        Some("replace") => {
            let mut replaced = patch.clone();
            replaced.remove("$patch");
            *target = Value::Object(replaced);
            return Ok(());
        }
        Some("delete") => {
            *target = Value::Null;
            return Ok(());
        }
        Some("merge") | None => {}
        Some(other) => return Err(format!("Unknown patch type: {other}")),
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Some(map) = target.as_object_mut() else {
        return Ok(());
    };
    if let Some(keep) = patch.get("$retainKeys").and_then(Value::as_array) {
        let keep: Vec<&str> = keep.iter().filter_map(Value::as_str).collect();
        map.retain(|k, _| keep.contains(&k.as_str()));
    }
    for (key, value) in patch {
        if key == "$patch" || key == "$retainKeys" || key.starts_with("$setElementOrder/") {
            continue;
        }
        if let Some(field) = key.strip_prefix("$deleteFromPrimitiveList/") {
            let drop = value.as_array().cloned().unwrap_or_default();
            if let Some(Value::Array(list)) = map.get_mut(field) {
                list.retain(|v| !drop.contains(v));
            }
            continue;
        }
        if key.starts_with('$') {
            return Err(format!("unknown directive {key}"));
        }
        if value.is_null() {
            map.remove(key);
            continue;
        }
        match (value, list_merge(key)) {
            (Value::Array(items), ListMerge::ByKey(merge_key)) => {
                let current = map.entry(key.clone()).or_insert(Value::Array(Vec::new()));
                merge_keyed(current, items, &merge_key)?;
            }
            (Value::Array(items), ListMerge::Union) => {
                let current = map.entry(key.clone()).or_insert(Value::Array(Vec::new()));
                if let Value::Array(list) = current {
                    for item in items {
                        if !list.contains(item) {
                            list.push(item.clone());
                        }
                    }
                } else {
                    *current = value.clone();
                }
            }
            (Value::Object(_), _) => {
                let current = map.entry(key.clone()).or_insert(Value::Null);
                merge_map(current, value)?;
                if current.is_null() {
                    map.remove(key);
                }
            }
            _ => {
                map.insert(key.clone(), value.clone());
            }
        }
    }
    Ok(())
}

fn merge_keyed(current: &mut Value, items: &[Value], merge_key: &str) -> Result<(), String> {
    if items
        .iter()
        .any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"))
    {
        *current = Value::Array(
            items
                .iter()
                .filter(|i| i.get("$patch").is_none())
                .cloned()
                .collect(),
        );
        return Ok(());
    }
    if !current.is_array() {
        *current = Value::Array(Vec::new());
    }
    let Value::Array(list) = current else {
        return Ok(());
    };
    for item in items {
        let Some(id) = item.get(merge_key) else {
            return Err(format!(
                "map: {item} does not contain declared merge key: {merge_key}"
            ));
        };
        let position = list.iter().position(|e| e.get(merge_key) == Some(id));
        let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
        match (position, delete) {
            (Some(p), true) => {
                list.remove(p);
            }
            (None, true) => {}
            (Some(p), false) => merge_map(&mut list[p], item)?,
            (None, false) => {
                let mut fresh = Value::Object(Map::new());
                merge_map(&mut fresh, item)?;
                list.push(fresh);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn keyed_lists_merge_by_key_and_directives_are_obeyed() {
        let mut pod = json!({
            "metadata": {"finalizers": ["a"], "labels": {"x": "1", "y": "2"}},
            "spec": {"containers": [
                {"name": "runner", "image": "r:1", "env": [{"name": "A", "value": "1"}]},
                {"name": "side", "image": "s:1"},
            ], "tolerations": [{"key": "k"}]},
        });
        apply(
            &mut pod,
            &json!({
                "metadata": {"finalizers": ["b", "a"], "labels": {"x": null}},
                "spec": {"containers": [
                    {"name": "runner", "env": [{"name": "B", "value": "2"}]},
                    {"name": "side", "$patch": "delete"},
                ], "tolerations": [{"key": "other"}]},
            }),
        )
        .unwrap();
        assert_eq!(pod["metadata"]["finalizers"], json!(["a", "b"]));
        assert_eq!(pod["metadata"]["labels"], json!({"y": "2"}));
        let containers = pod["spec"]["containers"].as_array().unwrap();
        assert_eq!(containers.len(), 1);
        assert_eq!(containers[0]["image"], "r:1");
        assert_eq!(
            containers[0]["env"],
            json!([{"name": "A", "value": "1"}, {"name": "B", "value": "2"}])
        );
        assert_eq!(pod["spec"]["tolerations"], json!([{"key": "other"}]));
        let mut o = json!({"data": {"a": "1", "b": "2"}});
        apply(&mut o, &json!({"data": {"$patch": "replace", "c": "3"}})).unwrap();
        assert_eq!(o["data"], json!({"c": "3"}));
        let mut o = json!({"metadata": {"finalizers": ["a", "b"]}});
        apply(
            &mut o,
            &json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}),
        )
        .unwrap();
        assert_eq!(o["metadata"]["finalizers"], json!(["b"]));
    }
}
