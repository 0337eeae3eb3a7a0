use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Write Terraform outputs to a Secret in the object's namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WriteOutputsToSecret {
    /// The Secret's name.
    pub name: String,
    /// Labels on the Secret.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations on the Secret.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// The outputs to write, each `tf_name` or `tf_name:secret_key` to rename it. Default: all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outputs: Vec<String>,
}

impl WriteOutputsToSecret {
    /// The selected outputs as (Terraform output name, Secret key), or `None` for "all, under
    /// their own names".
    pub fn selection(&self) -> Option<Vec<(String, String)>> {
        selection(&self.outputs)
    }
}

/// Write the outputs Terraform does not mark sensitive to a ConfigMap in the object's
/// namespace, for what reads ConfigMaps (Helm values, Kustomize replacements, Argo CD
/// ApplicationSets). Each value is text: a string output as it is, any other value as compact
/// JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WriteOutputsToConfigMap {
    /// The ConfigMap's name.
    pub name: String,
    /// Labels on the ConfigMap.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations on the ConfigMap.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// The outputs to write, each `tf_name` or `tf_name:key` to rename it (a key is made of
    /// `-._a-zA-Z0-9`). Default: every output Terraform does not mark sensitive; naming a
    /// sensitive output here fails the run (`OutputsWritingFailed`, naming it): write it with
    /// `writeOutputsToSecret`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outputs: Vec<String>,
}

impl WriteOutputsToConfigMap {
    /// The selected outputs as (Terraform output name, ConfigMap key), or `None` for "all
    /// that are not sensitive, under their own names".
    pub fn selection(&self) -> Option<Vec<(String, String)>> {
        selection(&self.outputs)
    }
}

/// `outputs` entries (`tf_name` or `tf_name:key`) as (Terraform output name, key); `None` when
/// there are none (all outputs).
fn selection(outputs: &[String]) -> Option<Vec<(String, String)>> {
    if outputs.is_empty() {
        return None;
    }
    Some(
        outputs
            .iter()
            .map(|o| match o.split_once(':') {
                Some((tf, key)) => (tf.to_string(), key.to_string()),
                None => (o.clone(), o.clone()),
            })
            .collect(),
    )
}

/// A check run after apply. `address` and `url` may use `{{.output_name}}` to refer to
/// outputs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HealthCheck {
    /// A name for messages.
    pub name: String,
    /// `tcp` (connect to `address`) or `http` (GET `url`, expect a 2xx answer).
    #[serde(rename = "type")]
    pub check_type: HealthCheckType,
    /// `host:port`, for `tcp`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// The URL, for `http`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// How long the check may take, as a Go duration. Default `20s`.
    #[serde(default = "default_timeout")]
    pub timeout: String,
}

fn default_timeout() -> String {
    "20s".into()
}

/// The kinds of health check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum HealthCheckType {
    /// A TCP connection.
    Tcp,
    /// An HTTP GET.
    Http,
}

/// Why a template could not be rendered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// `{{` without a matching `}}`.
    #[error("unclosed '{{{{' at offset {0}")]
    Unclosed(usize),
    /// `{{ x }}` where `x` is not `.name`.
    #[error("'{0}' is not an output reference (write {{{{.output_name}}}})")]
    NotAReference(String),
    /// The output does not exist.
    #[error("no output named '{0}'")]
    UnknownOutput(String),
}

/// The outputs `template` refers to (`{{.name}}`), in order, without repeats; a malformed
/// reference is left for [`render_template`] to report.
pub fn template_references(template: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else { break };
        if let Some(name) = after[..end].trim().strip_prefix('.')
            && !name.is_empty()
            && !names.iter().any(|n| n == name)
        {
            names.push(name.to_string());
        }
        rest = &after[end + 2..];
    }
    names
}

/// Replaces every `{{.name}}` in `template` with the output `name`; strings are inserted as
/// they are, other JSON values as JSON.
///
/// # Errors
/// A [`TemplateError`] for a malformed template or an output that does not exist.
pub fn render_template(
    template: &str,
    outputs: &BTreeMap<String, serde_json::Value>,
) -> Result<String, TemplateError> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    let mut offset = 0;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find("}}")
            .ok_or(TemplateError::Unclosed(offset + start))?;
        let inner = after[..end].trim();
        let name = inner
            .strip_prefix('.')
            .filter(|n| !n.is_empty())
            .ok_or_else(|| TemplateError::NotAReference(inner.to_string()))?;
        match outputs.get(name) {
            Some(serde_json::Value::String(s)) => out.push_str(s),
            Some(other) => out.push_str(&other.to_string()),
            None => return Err(TemplateError::UnknownOutput(name.to_string())),
        }
        let consumed = start + 2 + end + 2;
        offset += consumed;
        rest = &rest[consumed..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outputs() -> BTreeMap<String, serde_json::Value> {
        BTreeMap::from([
            ("host".to_string(), serde_json::json!("db.internal")),
            ("port".to_string(), serde_json::json!(5432)),
        ])
    }

    #[test]
    fn references_are_listed_once_in_order() {
        assert_eq!(
            template_references("{{.host}}:{{ .port }}/{{.host}}{{x}}{{."),
            ["host", "port"]
        );
        assert!(template_references("plain").is_empty());
    }

    #[test]
    fn renders_outputs_into_addresses() {
        assert_eq!(
            render_template("{{.host}}:{{ .port }}", &outputs()),
            Ok("db.internal:5432".to_string())
        );
        assert_eq!(render_template("plain", &outputs()), Ok("plain".into()));
    }

    #[test]
    fn names_what_is_wrong() {
        assert_eq!(
            render_template("{{.nope}}", &outputs()),
            Err(TemplateError::UnknownOutput("nope".into()))
        );
        assert_eq!(
            render_template("x{{.host", &outputs()),
            Err(TemplateError::Unclosed(1))
        );
        assert_eq!(
            render_template("{{host}}", &outputs()),
            Err(TemplateError::NotAReference("host".into()))
        );
    }

    #[test]
    fn selection_renames() {
        let w = WriteOutputsToSecret {
            name: "out".into(),
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            outputs: vec!["db_host:host".into(), "port".into()],
        };
        assert_eq!(
            w.selection(),
            Some(vec![
                ("db_host".into(), "host".into()),
                ("port".into(), "port".into())
            ])
        );
    }
}
