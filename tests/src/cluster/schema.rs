//! What the real apiextensions server does to a custom resource with its version's structural
//! schema (`openAPIV3Schema`), in the real order: unknown fields are pruned (unless
//! `x-kubernetes-preserve-unknown-fields`), `default`s are filled in, then the object is
//! validated, every error with its field path and the real wording, so a client sees the same
//! 422 `Invalid` it would see from a cluster. Also the few checks of a CRD itself that our
//! manifests could get wrong.
//!
//! Not done: `x-kubernetes-validations` (CEL rules) and `format` checks other than
//! `int32`/`int64` ranges; the README lists them.

use serde_json::{Map, Value, json};

use super::errors::FieldError;

/// Prunes, defaults and validates `object` against `schema`.
///
/// # Errors
/// The field errors, when there are any.
pub fn admit(schema: &Value, mut object: Value) -> Result<Value, Vec<FieldError>> {
    prune(schema, &mut object, true);
    default(schema, &mut object);
    let mut errors = Vec::new();
    validate(schema, &object, "", &mut errors, true);
    if errors.is_empty() {
        Ok(object)
    } else {
        Err(errors)
    }
}

/// The fields of `object` that pruning would drop, as dotted paths (`spec.typo`): what
/// `fieldValidation=Strict` refuses.
pub fn unknown_fields(schema: &Value, object: &Value) -> Vec<String> {
    let mut pruned = object.clone();
    prune(schema, &mut pruned, true);
    let mut out = Vec::new();
    diff_keys(object, &pruned, "", &mut out);
    out
}

fn diff_keys(before: &Value, after: &Value, path: &str, out: &mut Vec<String>) {
    match (before, after) {
        (Value::Object(b), Value::Object(a)) => {
            for (k, v) in b {
                let p = join(path, k);
                match a.get(k) {
                    Some(w) => diff_keys(v, w, &p, out),
                    None => out.push(p),
                }
            }
        }
        (Value::Array(b), Value::Array(a)) => {
            for (i, (v, w)) in b.iter().zip(a).enumerate() {
                diff_keys(v, w, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

fn preserves(schema: &Value) -> bool {
    schema["x-kubernetes-preserve-unknown-fields"].as_bool() == Some(true)
}

/// Drops what the schema does not name. At the root (and in embedded resources)
/// `apiVersion`, `kind` and `metadata` are kept; metadata itself is the server's.
fn prune(schema: &Value, value: &mut Value, root: bool) {
    let embedded = root || schema["x-kubernetes-embedded-resource"].as_bool() == Some(true);
    match value {
        Value::Object(map) => {
            let properties = schema["properties"].as_object();
            let additional = &schema["additionalProperties"];
            let keep_unknown = preserves(schema) || additional.as_bool() == Some(true);
            let keys: Vec<String> = map.keys().cloned().collect();
            for key in keys {
                if embedded && matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
                    if key == "metadata" && !root {
                        // An embedded object's metadata keeps only what ObjectMeta has.
                        if let Some(Value::Object(m)) = map.get_mut("metadata") {
                            m.retain(|k, _| {
                                matches!(
                                    k.as_str(),
                                    "name"
                                        | "namespace"
                                        | "labels"
                                        | "annotations"
                                        | "generateName"
                                        | "finalizers"
                                )
                            });
                        }
                    }
                    continue;
                }
                let sub = properties
                    .and_then(|p| p.get(&key))
                    .or_else(|| additional.is_object().then_some(additional));
                match sub {
                    Some(sub) => {
                        if let Some(v) = map.get_mut(&key) {
                            prune(sub, v, false);
                        }
                    }
                    None if keep_unknown => {}
                    None => {
                        map.remove(&key);
                    }
                }
            }
        }
        Value::Array(items) if schema["items"].is_object() => {
            for item in items {
                prune(&schema["items"], item, false);
            }
        }
        _ => {}
    }
}

/// Fills in `default`s of absent properties, depth first.
fn default(schema: &Value, value: &mut Value) {
    match value {
        Value::Object(map) => {
            if let Some(properties) = schema["properties"].as_object() {
                for (key, sub) in properties {
                    if !map.contains_key(key)
                        && let Some(d) = sub.get("default")
                    {
                        map.insert(key.clone(), d.clone());
                    }
                    if let Some(v) = map.get_mut(key) {
                        default(sub, v);
                    }
                }
            }
            if schema["additionalProperties"].is_object() {
                let sub = &schema["additionalProperties"];
                for (key, v) in map.iter_mut() {
                    if schema["properties"].get(key).is_none() {
                        default(sub, v);
                    }
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                default(&schema["items"], item);
            }
        }
        _ => {}
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_matches(want: &str, value: &Value) -> bool {
    match (want, value) {
        ("number", Value::Number(_)) => true,
        (w, v) => w == type_name(v),
    }
}

/// Validates `value` at `path`, appending to `errors`.
fn validate(schema: &Value, value: &Value, path: &str, errors: &mut Vec<FieldError>, root: bool) {
    let shown_path = if path.is_empty() { "<root>" } else { path };
    if value.is_null() && schema["nullable"].as_bool() == Some(true) {
        return;
    }
    let int_or_string = schema["x-kubernetes-int-or-string"].as_bool() == Some(true);
    if int_or_string {
        if !matches!(value, Value::String(_)) && !matches!(type_name(value), "integer") {
            errors.push(FieldError::type_invalid(
                path,
                &json!(type_name(value)),
                format!(
                    "{shown_path} in body must be of type integer,string: {:?}",
                    type_name(value)
                ),
            ));
            return;
        }
    } else if let Some(want) = schema["type"].as_str()
        && !type_matches(want, value)
    {
        errors.push(FieldError::type_invalid(
            path,
            &json!(type_name(value)),
            format!(
                "{shown_path} in body must be of type {want}: {:?}",
                type_name(value)
            ),
        ));
        return;
    }
    if let Some(allowed) = schema["enum"].as_array()
        && !allowed.contains(value)
    {
        errors.push(FieldError::not_supported(path, value, allowed));
    }
    match value {
        Value::Object(map) => validate_object(schema, map, path, errors, root),
        Value::Array(items) => validate_array(schema, items, path, errors),
        Value::String(s) => validate_string(schema, s, path, errors),
        Value::Number(n) => validate_number(schema, n, value, path, errors),
        _ => {}
    }
}

fn validate_object(
    schema: &Value,
    map: &Map<String, Value>,
    path: &str,
    errors: &mut Vec<FieldError>,
    root: bool,
) {
    for required in schema["required"].as_array().into_iter().flatten() {
        if let Some(key) = required.as_str()
            && !map.contains_key(key)
        {
            errors.push(FieldError::required(join(path, key)));
        }
    }
    if let Some(min) = schema["minProperties"].as_u64()
        && (map.len() as u64) < min
    {
        errors.push(FieldError::invalid(
            path,
            &Value::Object(map.clone()),
            format!("{path} in body should have at least {min} properties"),
        ));
    }
    let properties = schema["properties"].as_object();
    for (key, v) in map {
        if root && matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
            continue;
        }
        let sub = properties.and_then(|p| p.get(key)).or_else(|| {
            schema["additionalProperties"]
                .is_object()
                .then(|| &schema["additionalProperties"])
        });
        if let Some(sub) = sub {
            validate(sub, v, &join(path, key), errors, false);
        }
    }
}

fn validate_array(schema: &Value, items: &[Value], path: &str, errors: &mut Vec<FieldError>) {
    if let Some(max) = schema["maxItems"].as_u64()
        && items.len() as u64 > max
    {
        errors.push(FieldError {
            reason: "FieldValueTooMany",
            field: path.to_string(),
            message: format!("Too many: {}: must have at most {max} items", items.len()),
        });
    }
    if let Some(min) = schema["minItems"].as_u64()
        && (items.len() as u64) < min
    {
        errors.push(FieldError::invalid(
            path,
            &json!(items.len()),
            format!("{path} in body should have at least {min} items"),
        ));
    }
    for (i, item) in items.iter().enumerate() {
        validate(
            &schema["items"],
            item,
            &format!("{path}[{i}]"),
            errors,
            false,
        );
    }
    // Keyed lists and sets may not repeat an entry.
    match schema["x-kubernetes-list-type"].as_str() {
        Some("map") => {
            let keys: Vec<&str> = schema["x-kubernetes-list-map-keys"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let mut seen = Vec::new();
            for (i, item) in items.iter().enumerate() {
                let id: Vec<&Value> = keys.iter().map(|k| &item[*k]).collect();
                if seen.contains(&id) {
                    let shown: Map<String, Value> = keys
                        .iter()
                        .map(|k| (k.to_string(), item[*k].clone()))
                        .collect();
                    errors.push(FieldError::duplicate(
                        format!("{path}[{i}]"),
                        &Value::Object(shown),
                    ));
                }
                seen.push(id);
            }
        }
        Some("set") => {
            for (i, item) in items.iter().enumerate() {
                if items[..i].contains(item) {
                    errors.push(FieldError::duplicate(format!("{path}[{i}]"), item));
                }
            }
        }
        _ => {}
    }
}

fn validate_string(schema: &Value, s: &str, path: &str, errors: &mut Vec<FieldError>) {
    let value = json!(s);
    if let Some(max) = schema["maxLength"].as_u64()
        && s.chars().count() as u64 > max
    {
        errors.push(FieldError {
            reason: "FieldValueTooLong",
            field: path.to_string(),
            message: format!("Too long: may not be more than {max} bytes"),
        });
    }
    if let Some(min) = schema["minLength"].as_u64()
        && (s.chars().count() as u64) < min
    {
        errors.push(FieldError::invalid(
            path,
            &value,
            format!("{path} in body should be at least {min} chars long"),
        ));
    }
    if let Some(pattern) = schema["pattern"].as_str() {
        match regex::Regex::new(pattern) {
            Ok(re) if !re.is_match(s) => errors.push(FieldError::invalid(
                path,
                &value,
                format!("{path} in body should match '{pattern}'"),
            )),
            _ => {}
        }
    }
}

fn validate_number(
    schema: &Value,
    n: &serde_json::Number,
    value: &Value,
    path: &str,
    errors: &mut Vec<FieldError>,
) {
    let x = n.as_f64().unwrap_or(0.0);
    let exclusive_min = schema["exclusiveMinimum"].as_bool() == Some(true);
    let exclusive_max = schema["exclusiveMaximum"].as_bool() == Some(true);
    if let Some(min) = schema["minimum"].as_f64() {
        let bad = if exclusive_min { x <= min } else { x < min };
        if bad {
            let how = if exclusive_min {
                "greater than"
            } else {
                "greater than or equal to"
            };
            errors.push(FieldError::invalid(
                path,
                value,
                format!(
                    "{path} in body should be {how} {}",
                    number(&schema["minimum"])
                ),
            ));
        }
    }
    if let Some(max) = schema["maximum"].as_f64() {
        let bad = if exclusive_max { x >= max } else { x > max };
        if bad {
            let how = if exclusive_max {
                "less than"
            } else {
                "less than or equal to"
            };
            errors.push(FieldError::invalid(
                path,
                value,
                format!(
                    "{path} in body should be {how} {}",
                    number(&schema["maximum"])
                ),
            ));
        }
    }
    let range = match schema["format"].as_str() {
        Some("int32") => Some((f64::from(i32::MIN), f64::from(i32::MAX))),
        _ => None,
    };
    if let Some((lo, hi)) = range
        && (x < lo || x > hi)
    {
        errors.push(FieldError::invalid(
            path,
            value,
            format!("{path} in body must be of type int32: {x}"),
        ));
    }
}

/// A bound as Go prints a float64 with `%v`: `1`, not `1.0`.
fn number(v: &Value) -> String {
    match v.as_f64() {
        Some(f) if f.fract() == 0.0 && f.abs() < 1e15 => format!("{}", f as i64),
        _ => v.to_string(),
    }
}

/// The checks of a CRD that a manifest can get wrong: its name, scope, versions (one storage
/// version, a schema each) and names.
pub fn validate_crd(crd: &Value) -> Vec<FieldError> {
    let spec = &crd["spec"];
    let mut errors = Vec::new();
    let group = spec["group"].as_str().unwrap_or("");
    let plural = spec["names"]["plural"].as_str().unwrap_or("");
    if group.is_empty() {
        errors.push(FieldError::required("spec.group"));
    }
    if plural.is_empty() {
        errors.push(FieldError::required("spec.names.plural"));
    }
    if spec["names"]["kind"].as_str().unwrap_or("").is_empty() {
        errors.push(FieldError::required("spec.names.kind"));
    }
    let name = crd["metadata"]["name"].as_str().unwrap_or("");
    if !group.is_empty() && !plural.is_empty() && name != format!("{plural}.{group}") {
        errors.push(FieldError::invalid(
            "metadata.name",
            &json!(name),
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    match spec["scope"].as_str() {
        Some("Namespaced" | "Cluster") => {}
        Some(other) => errors.push(FieldError::not_supported(
            "spec.scope",
            &json!(other),
            &[json!("Cluster"), json!("Namespaced")],
        )),
        None => errors.push(FieldError::required("spec.scope")),
    }
    let versions = spec["versions"].as_array().cloned().unwrap_or_default();
    if versions.is_empty() {
        errors.push(FieldError::invalid(
            "spec.versions",
            &json!(versions),
            "must have exactly one version marked as storage version",
        ));
    }
    let storage = versions
        .iter()
        .filter(|v| v["storage"].as_bool() == Some(true))
        .count();
    if !versions.is_empty() && storage != 1 {
        errors.push(FieldError::invalid(
            "spec.versions",
            &json!(versions),
            "must have exactly one version marked as storage version",
        ));
    }
    for (i, v) in versions.iter().enumerate() {
        let schema = &v["schema"]["openAPIV3Schema"];
        let path = format!("spec.versions[{i}].schema.openAPIV3Schema");
        if schema.is_null() {
            errors.push(FieldError::required(path));
        } else {
            structural(schema, &path, Level::Root, &mut errors);
        }
    }
    errors
}

/// Where a schema node sits, for the "type must not be empty" messages.
#[derive(Clone, Copy, PartialEq)]
enum Level {
    Root,
    Field,
    Item,
}

/// The structural-schema rules the real server enforces on a CRD: every node typed (unless it
/// preserves unknown fields or is int-or-string), arrays with `items`, no `$ref`, no
/// `additionalProperties` beside `properties`, no `uniqueItems: true`, and nothing but value
/// validations inside `anyOf`/`allOf`/`oneOf`/`not`.
fn structural(node: &Value, path: &str, level: Level, errors: &mut Vec<FieldError>) {
    let flag = |k: &str| node[k].as_bool() == Some(true);
    if node.get("$ref").is_some() {
        errors.push(FieldError::forbidden(
            format!("{path}.$ref"),
            "$ref is not supported",
        ));
    }
    if node["type"].as_str().is_none_or(str::is_empty)
        && !flag("x-kubernetes-int-or-string")
        && !flag("x-kubernetes-preserve-unknown-fields")
    {
        let what = match level {
            Level::Root => "must not be empty at the root",
            Level::Field => "must not be empty for specified object fields",
            Level::Item => "must not be empty for specified array items",
        };
        errors.push(FieldError {
            reason: "FieldValueRequired",
            field: format!("{path}.type"),
            message: format!("Required value: {what}"),
        });
    }
    if level == Level::Root && node["type"].as_str().is_some_and(|t| t != "object") {
        errors.push(FieldError::invalid(
            format!("{path}.type"),
            &node["type"],
            "must be object at the root",
        ));
    }
    if node.get("properties").is_some() && node.get("additionalProperties").is_some() {
        errors.push(FieldError::forbidden(
            format!("{path}.additionalProperties"),
            "additionalProperties and properties are mutual exclusive",
        ));
    }
    if flag("uniqueItems") {
        errors.push(FieldError::forbidden(
            format!("{path}.uniqueItems"),
            "uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
        ));
    }
    if node["type"] == "array" && node.get("items").is_none() {
        errors.push(FieldError {
            reason: "FieldValueRequired",
            field: format!("{path}.items"),
            message: "Required value: must be specified".into(),
        });
    }
    for (name, sub) in node["properties"].as_object().into_iter().flatten() {
        structural(
            sub,
            &format!("{path}.properties[{name}]"),
            Level::Field,
            errors,
        );
    }
    if node["items"].is_object() {
        structural(
            &node["items"],
            &format!("{path}.items"),
            Level::Item,
            errors,
        );
    }
    if node["additionalProperties"].is_object() {
        structural(
            &node["additionalProperties"],
            &format!("{path}.additionalProperties"),
            Level::Field,
            errors,
        );
    }
    for junctor in ["anyOf", "allOf", "oneOf"] {
        for (i, branch) in node[junctor].as_array().into_iter().flatten().enumerate() {
            value_validation_only(branch, &format!("{path}.{junctor}[{i}]"), errors);
        }
    }
    if node["not"].is_object() {
        value_validation_only(&node["not"], &format!("{path}.not"), errors);
    }
}

/// Inside a junctor only value validations may appear.
fn value_validation_only(node: &Value, path: &str, errors: &mut Vec<FieldError>) {
    for key in [
        "type",
        "description",
        "default",
        "additionalProperties",
        "title",
    ] {
        if node.get(key).is_some() {
            errors.push(FieldError::forbidden(
                format!("{path}.{key}"),
                "must be empty to be structural",
            ));
        }
    }
    if node["nullable"].as_bool() == Some(true) {
        errors.push(FieldError::forbidden(
            format!("{path}.nullable"),
            "must be false to be structural",
        ));
    }
    for (name, sub) in node["properties"].as_object().into_iter().flatten() {
        value_validation_only(sub, &format!("{path}.properties[{name}]"), errors);
    }
    if node["items"].is_object() {
        value_validation_only(&node["items"], &format!("{path}.items"), errors);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_crd_schema_must_be_structural() {
        let crd = json!({
            "metadata": {"name": "xs.g.io"},
            "spec": {"group": "g.io", "scope": "Namespaced",
                "names": {"plural": "xs", "kind": "X"},
                "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "a": {"type": "array"},
                        "c": {"description": "no type"},
                        "e": {"type": "string", "anyOf": [{"type": "string", "description": "d"}]},
                        "f": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    },
                }}}]},
        });
        let p = "spec.versions[0].schema.openAPIV3Schema";
        let texts: Vec<String> = validate_crd(&crd)
            .iter()
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect();
        assert_eq!(
            texts,
            [
                format!("{p}.properties[a].items: Required value: must be specified"),
                format!(
                    "{p}.properties[c].type: Required value: must not be empty for specified object fields"
                ),
                format!(
                    "{p}.properties[e].anyOf[0].type: Forbidden: must be empty to be structural"
                ),
                format!(
                    "{p}.properties[e].anyOf[0].description: Forbidden: must be empty to be structural"
                ),
            ]
        );
    }

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "required": ["path"],
                    "properties": {
                        "path": {"type": "string", "minLength": 1},
                        "interval": {"type": "string", "default": "10m"},
                        "replicas": {"type": "integer", "minimum": 1},
                        "mode": {"type": "string", "enum": ["auto", "manual"]},
                        "vars": {
                            "type": "array",
                            "x-kubernetes-list-type": "map",
                            "x-kubernetes-list-map-keys": ["name"],
                            "items": {"type": "object", "properties": {"name": {"type": "string"}}},
                        },
                        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    },
                },
                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            },
        })
    }

    #[test]
    fn unknown_fields_go_defaults_come_and_preserved_fields_stay() {
        let out = admit(
            &schema(),
            json!({
                "apiVersion": "x/v1", "kind": "T", "metadata": {"name": "a"},
                "spec": {"path": "p", "typo": 1, "free": {"anything": [1]}},
                "extra": true,
            }),
        )
        .unwrap();
        assert_eq!(out["spec"]["interval"], "10m");
        assert!(out["spec"].get("typo").is_none());
        assert!(out.get("extra").is_none());
        assert_eq!(out["spec"]["free"]["anything"], json!([1]));
        assert_eq!(out["metadata"]["name"], "a");
    }

    #[test]
    fn errors_name_their_field_as_the_real_server_does() {
        let errors = admit(
            &schema(),
            json!({"spec": {"replicas": "two", "mode": "sometimes",
                            "vars": [{"name": "a"}, {"name": "a"}]}}),
        )
        .unwrap_err();
        let texts: Vec<String> = errors
            .iter()
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect();
        assert_eq!(
            texts,
            [
                "spec.path: Required value",
                "spec.mode: Unsupported value: \"sometimes\": supported values: \"auto\", \"manual\"",
                "spec.replicas: Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\"",
                "spec.vars[1]: Duplicate value: \"object\"",
            ]
        );
        let errors = admit(&schema(), json!({"spec": {"path": "", "replicas": 0}})).unwrap_err();
        assert_eq!(
            errors[0].message,
            "Invalid value: \"\": spec.path in body should be at least 1 chars long"
        );
        assert_eq!(
            errors[1].message,
            "Invalid value: 0: spec.replicas in body should be greater than or equal to 1"
        );
    }
}
