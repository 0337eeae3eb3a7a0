//! What a plan would do, as one digest: the thing an approval is bound to.
//!
//! Plan ids (`plan-<ref>-<sha>`) only name a source revision: a changed variable, a rotated
//! Secret or a file read from outside the source gives a different plan under the same id. So
//! when a plan becomes pending, its [`content_digest`] is recorded, and the plan re-made before
//! applying is applied only when its digest is the same: the human approved exactly what will
//! happen.
//!
//! The digest covers every resource change and output change of `terraform show -json` whose
//! actions are not `["no-op"]`, with its address, actions, before and after values (and which
//! of them are unknown or sensitive). It leaves out what differs between two plans that would
//! do the same (the plan's timestamp, the prior state's serial, the configuration's source
//! positions), and is independent of key order in the JSON.

use serde_json::Value;

use crate::digest::{canonical_json, sha256_of_parts};

/// Why a plan's JSON could not be digested.
#[derive(Debug, thiserror::Error)]
pub enum PlanJsonError {
    /// It is not JSON.
    #[error("the plan's JSON (terraform show -json) does not parse")]
    Parse(#[source] serde_json::Error),
    /// It is JSON but not a plan (`resource_changes` or `output_changes` has the wrong shape).
    #[error("the plan's JSON has no usable {0}")]
    Shape(&'static str),
}

/// The change fields that say what applying would do.
const CHANGE_FIELDS: &[&str] = &[
    "actions",
    "before",
    "after",
    "after_unknown",
    "before_sensitive",
    "after_sensitive",
];

/// The actions of one resource change of `terraform show -json` (`["create"]`,
/// `["delete", "create"]` for a replacement, ...); none when it has no such field.
pub fn actions(resource_change: &Value) -> Vec<&str> {
    resource_change["change"]["actions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

/// The lowercase hex SHA-256 of what the plan in `show_json` would change.
///
/// # Errors
/// [`PlanJsonError`] when the text is not a plan's JSON.
pub fn content_digest(show_json: &str) -> Result<String, PlanJsonError> {
    let doc: Value = serde_json::from_str(show_json).map_err(PlanJsonError::Parse)?;
    let mut resources: Vec<(String, Value)> = Vec::new();
    match doc.get("resource_changes") {
        None | Some(Value::Null) => {}
        Some(Value::Array(list)) => {
            for rc in list {
                let address = rc
                    .get("address")
                    .and_then(Value::as_str)
                    .ok_or(PlanJsonError::Shape("resource_changes[].address"))?;
                let change = rc
                    .get("change")
                    .ok_or(PlanJsonError::Shape("resource_changes[].change"))?;
                if !is_no_op(change) {
                    resources.push((address.to_string(), pick(change)));
                }
            }
        }
        Some(_) => return Err(PlanJsonError::Shape("resource_changes")),
    }
    let mut outputs: Vec<(String, Value)> = Vec::new();
    match doc.get("output_changes") {
        None | Some(Value::Null) => {}
        Some(Value::Object(map)) => {
            for (name, change) in map {
                if !is_no_op(change) {
                    outputs.push((name.clone(), pick(change)));
                }
            }
        }
        Some(_) => return Err(PlanJsonError::Shape("output_changes")),
    }
    resources.sort_by(|a, b| a.0.cmp(&b.0));
    outputs.sort_by(|a, b| a.0.cmp(&b.0));
    let mut parts: Vec<Vec<u8>> = Vec::new();
    for (section, entries) in [("resource", &resources), ("output", &outputs)] {
        for (name, change) in entries {
            parts.push(section.as_bytes().to_vec());
            parts.push(name.as_bytes().to_vec());
            parts.push(canonical_json(change).into_bytes());
        }
    }
    Ok(sha256_of_parts(parts.iter().map(Vec::as_slice)))
}

fn is_no_op(change: &Value) -> bool {
    change
        .get("actions")
        .and_then(Value::as_array)
        .is_some_and(|a| a.len() == 1 && a[0] == "no-op")
}

fn pick(change: &Value) -> Value {
    let mut out = serde_json::Map::new();
    for field in CHANGE_FIELDS {
        if let Some(v) = change.get(*field) {
            out.insert((*field).to_string(), v.clone());
        }
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn plan(after: &str, timestamp: &str) -> String {
        format!(
            r#"{{"format_version":"1.2","timestamp":"{timestamp}",
               "resource_changes":[
                 {{"address":"terraform_data.keep","change":{{"actions":["no-op"],"before":{{"input":"1"}},"after":{{"input":"1"}}}}}},
                 {{"address":"terraform_data.x","type":"terraform_data","change":{{"actions":["update"],"before":{{"input":"1"}},"after":{{"input":"{after}"}},"after_unknown":{{}}}}}}],
               "output_changes":{{"v":{{"actions":["update"],"before":"1","after":"{after}"}}}}}}"#
        )
    }

    #[test]
    fn equal_for_the_same_changes_and_different_when_a_value_differs() {
        let a = content_digest(&plan("2", "2026-01-01T00:00:00Z")).unwrap();
        let b = content_digest(&plan("2", "2026-12-01T10:00:00Z")).unwrap();
        let c = content_digest(&plan("3", "2026-01-01T00:00:00Z")).unwrap();
        assert_eq!(a, b, "the timestamp is not what the plan does");
        assert_ne!(a, c);
        assert_eq!(a.len(), 64);
    }

    #[test]
    fn key_order_and_no_op_entries_do_not_count() {
        let one = r#"{"resource_changes":[{"address":"a","change":{"actions":["create"],"after":{"x":1,"y":2},"before":null}}]}"#;
        let two = r#"{"resource_changes":[{"change":{"before":null,"after":{"y":2,"x":1},"actions":["create"]},"address":"a"},
                      {"address":"b","change":{"actions":["no-op"],"before":{},"after":{}}}]}"#;
        assert_eq!(content_digest(one).unwrap(), content_digest(two).unwrap());
    }

    #[test]
    fn an_output_change_alone_changes_the_digest() {
        let none = r#"{"resource_changes":[]}"#;
        let out = r#"{"resource_changes":[],"output_changes":{"o":{"actions":["create"],"before":null,"after":"v"}}}"#;
        assert_ne!(content_digest(none).unwrap(), content_digest(out).unwrap());
    }

    #[test]
    fn refuses_what_is_not_a_plan() {
        assert!(matches!(
            content_digest("not json"),
            Err(PlanJsonError::Parse(_))
        ));
        assert!(matches!(
            content_digest(r#"{"resource_changes":{}}"#),
            Err(PlanJsonError::Shape("resource_changes"))
        ));
    }
}
