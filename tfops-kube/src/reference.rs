//! The field reference of the `Terraform` object (`docs/reference.md`), rendered from the
//! CRD's schema: the descriptions users read there are the ones the API server serves
//! (`kubectl explain`), so the page cannot drift from the code (a test compares them).

use std::fmt::Write as _;

use serde_json::Value;

/// `docs/reference.md`: every field of `spec` and `status`, with its type, default and
/// description, in schema order (alphabetical, as the CRD lists them).
///
/// # Errors
/// As [`crate::resource::crd`].
pub fn markdown() -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
    let crd = serde_json::to_value(crate::resource::crd()?)?;
    let root = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    let mut out = String::from(
        "<!-- Generated from the CRD by tfops_kube::reference::markdown(); do not edit.\n     \
         Regenerate: TFOPS_UPDATE_CRD=1 cargo test -p tfops-kube --test crd -->\n\
         # `Terraform` fields\n\n",
    );
    let _ = writeln!(out, "{}\n", one_line(&root["description"]));
    out.push_str(
        "Every field of `infra.argocd.io/v1alpha1` `Terraform`, as the API server serves it \
         (`kubectl explain terraform.spec`). A field's path is written from `spec` or `status`; \
         `[]` marks the items of a list, `{}` the values of a map.\n",
    );
    for part in ["spec", "status"] {
        let _ = write!(out, "\n## `{part}`\n\n");
        let _ = writeln!(
            out,
            "{}\n",
            one_line(&root["properties"][part]["description"])
        );
        out.push_str("| field | type | default | description |\n| --- | --- | --- | --- |\n");
        rows(&mut out, part, &root["properties"][part]);
    }
    Ok(out)
}

/// A row per property of `schema` (recursively), named from `path`.
fn rows(out: &mut String, path: &str, schema: &Value) {
    let Some(properties) = schema["properties"].as_object() else {
        return;
    };
    for (name, field) in properties {
        let here = format!("{path}.{name}");
        let _ = writeln!(
            out,
            "| `{here}` | {} | {} | {} |",
            type_of(field),
            default_of(field),
            cell(&one_line(&field["description"]))
        );
        match field["type"].as_str() {
            Some("array") => rows(out, &format!("{here}[]"), &field["items"]),
            Some("object") if field["additionalProperties"].is_object() => {
                rows(out, &format!("{here}{{}}"), &field["additionalProperties"]);
            }
            _ => rows(out, &here, field),
        }
    }
}

/// `string`, `[]object`, `map[string]string`, `integer (int64)`, or `any` for a
/// schema-less value.
fn type_of(field: &Value) -> String {
    match field["type"].as_str() {
        Some("array") => format!("[]{}", type_of(&field["items"])),
        Some("object") if field["additionalProperties"].is_object() => {
            format!("map[string]{}", type_of(&field["additionalProperties"]))
        }
        Some(t) => match field["format"].as_str() {
            Some(format) => format!("{t} ({format})"),
            None => t.to_string(),
        },
        None if field["x-kubernetes-int-or-string"] == Value::Bool(true) => {
            "integer or string".into()
        }
        None => "any".into(),
    }
}

fn default_of(field: &Value) -> String {
    match &field["default"] {
        Value::Null => String::new(),
        v => cell(&format!("`{v}`")),
    }
}

/// A description on one line (its line breaks are the source's wrapping, not paragraphs).
fn one_line(description: &Value) -> String {
    description
        .as_str()
        .unwrap_or_default()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// Text safe in a Markdown table cell.
fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_lists_and_maps_get_their_own_rows_and_types() {
        let schema = serde_json::json!({"properties": {
            "vars": {"type": "array", "description": "Inputs.", "items": {
                "type": "object", "properties": {"name": {"type": "string", "description": "A | name."}}}},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "retries": {"type": "integer", "format": "int64", "default": -1},
        }});
        let mut out = String::new();
        rows(&mut out, "spec", &schema);
        assert!(
            out.contains("| `spec.vars` | []object |  | Inputs. |"),
            "{out}"
        );
        assert!(
            out.contains("| `spec.vars[].name` | string |  | A \\| name. |"),
            "{out}"
        );
        assert!(
            out.contains("| `spec.labels` | map[string]string |"),
            "{out}"
        );
        assert!(
            out.contains("| `spec.retries` | integer (int64) | `-1` |"),
            "{out}"
        );
    }
}
