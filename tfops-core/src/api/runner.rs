use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The runner Pod `<name>-tf-runner` that executes Terraform for this object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunnerSpec {
    /// `auto` (prefers `tofu` when the image has it), `terraform` or `tofu`.
    #[serde(default)]
    pub binary: Binary,
    /// Overrides the controller's default runner image. It must keep the runner entrypoint,
    /// UID 65532 and writable `/home/runner` and `/tmp`.
    #[serde(default)]
    pub image: String,
    /// The Pod's ServiceAccount in the object's namespace. Default `tf-runner`.
    #[serde(default = "default_service_account")]
    pub service_account_name: String,
    /// Delete the Pod when a run ends. Default true; false keeps it for the next run.
    #[serde(default = "default_true")]
    pub always_cleanup: bool,
    /// Seconds Terraform gets to stop (and release its lock) when the Pod is deleted.
    /// Default 30.
    #[serde(default = "default_grace")]
    pub termination_grace_period_seconds: i64,
    /// Additions to the Pod.
    #[serde(default)]
    pub pod_template: PodTemplate,
}

fn default_service_account() -> String {
    "tf-runner".into()
}
fn default_true() -> bool {
    true
}
fn default_grace() -> i64 {
    30
}

impl Default for RunnerSpec {
    fn default() -> Self {
        Self {
            binary: Binary::default(),
            image: String::new(),
            service_account_name: default_service_account(),
            always_cleanup: true,
            termination_grace_period_seconds: default_grace(),
            pod_template: PodTemplate::default(),
        }
    }
}

/// Which Terraform implementation runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Binary {
    /// `tofu` when present, else `terraform`.
    #[default]
    Auto,
    /// HashiCorp Terraform.
    Terraform,
    /// OpenTofu.
    Tofu,
}

/// Metadata and spec additions merged into the runner Pod.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodTemplate {
    /// Labels and annotations added to the Pod.
    #[serde(default)]
    pub metadata: PodMetadata,
    /// Pod spec additions.
    #[serde(default)]
    pub spec: PodTemplateSpec,
}

/// Labels and annotations added to the runner Pod.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodMetadata {
    /// Labels (tfops' own labels cannot be overridden).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// The runner Pod fields a user may set. Kubernetes types (volumes, affinity, ...) are kept as
/// their JSON here and checked against the Kubernetes schema where the Pod is built.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodTemplateSpec {
    /// Environment variables of the runner container: provider credentials, `TF_LOG`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    /// `envFrom` sources (Secrets, ConfigMaps) of the runner container.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env_from: Vec<KubeValue>,
    /// Pod volumes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<KubeValue>,
    /// Volume mounts of the runner container.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volume_mounts: Vec<KubeValue>,
    /// Init containers (set `runAsUser: 65532` on them to keep projected tokens readable).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub init_containers: Vec<KubeValue>,
    /// Node selector.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Affinity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<KubeValue>,
    /// Tolerations.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<KubeValue>,
    /// Host aliases.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_aliases: Vec<KubeValue>,
    /// Priority class name.
    #[serde(default)]
    pub priority_class_name: String,
    /// The runner container's security context. Replaces the hardened default as a whole
    /// (UID 65532, non-root, read-only root filesystem, no capabilities, no privilege escalation,
    /// RuntimeDefault seccomp), so restate the restrictive fields.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<KubeValue>,
    /// Resource requests and limits of the runner container. Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<KubeValue>,
}

/// An environment variable of the runner container.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EnvVar {
    /// The name.
    pub name: String,
    /// A literal value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// A Kubernetes `valueFrom` (secretKeyRef, configMapKeyRef, fieldRef, resourceFieldRef).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_from: Option<KubeValue>,
}

/// A Kubernetes object kept as JSON (its schema preserves unknown fields).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct KubeValue(pub serde_json::Value);

impl JsonSchema for KubeValue {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "KubeValue".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": true
        })
    }
}
