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
    /// A separate identity for applying. With it, runs that do not apply (drift checks, plans
    /// awaiting approval, `planOnly`) run in the runner above, without these credentials; only
    /// a plan that is approved (or accepted by `auto` or `force`, after the plan policies
    /// passed) starts a second runner, `<name>-tf-runner-apply`, with these overrides, which
    /// plans again and applies only when that plan does what was approved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apply: Option<ApplyRunnerSpec>,
}

/// The overrides of the runner that applies (`spec.runner.apply`): what carries credentials.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApplyRunnerSpec {
    /// The apply runner Pod's ServiceAccount. Default: `spec.runner.serviceAccountName`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub service_account_name: String,
    /// Merged over `spec.runner.podTemplate` for the apply runner.
    #[serde(default)]
    pub pod_template: ApplyPodTemplate,
}

/// The parts of the runner Pod the apply runner overrides.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApplyPodTemplate {
    /// Labels and annotations, merged over the runner's (these win).
    #[serde(default)]
    pub metadata: PodMetadata,
    /// Environment, files and init containers.
    #[serde(default)]
    pub spec: ApplyPodTemplateSpec,
}

/// The credential-carrying fields of the runner Pod, for the apply runner.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApplyPodTemplateSpec {
    /// Environment variables; one named like a runner variable replaces it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    /// `envFrom` sources, after the runner's (so their keys win).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env_from: Vec<KubeValue>,
    /// Volumes; one named like a runner volume replaces it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<KubeValue>,
    /// Volume mounts; one at the mount path of a runner mount replaces it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volume_mounts: Vec<KubeValue>,
    /// Init containers; one named like a runner init container replaces it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub init_containers: Vec<KubeValue>,
}

/// Which runner a session runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RunnerRole {
    /// The runner of every run (`spec.runner`); it also applies when `spec.runner.apply` is
    /// not set.
    Plan,
    /// The runner that applies (`spec.runner` with `spec.runner.apply` merged over it); only
    /// started for a plan that may be applied.
    Apply,
    /// The runner of a pull request's speculative plan: the plan identity (`spec.runner`), a
    /// Pod of its own beside the object's runner, never kept, never applying.
    PullRequest,
}

impl RunnerRole {
    /// `plan`, `apply` or `pull-request`.
    pub fn as_str(self) -> &'static str {
        match self {
            RunnerRole::Plan => "plan",
            RunnerRole::Apply => "apply",
            RunnerRole::PullRequest => "pull-request",
        }
    }
}

impl RunnerSpec {
    /// Whether applying runs as a separate identity (`spec.runner.apply` is set).
    pub fn splits_apply(&self) -> bool {
        self.apply.is_some()
    }

    /// The runner of `role`: this spec for [`RunnerRole::Plan`] (and for both roles without
    /// `apply`); for [`RunnerRole::Apply`], this spec with `apply` merged over it. The result
    /// has no `apply` of its own.
    pub fn for_role(&self, role: RunnerRole) -> RunnerSpec {
        let mut out = RunnerSpec {
            apply: None,
            ..self.clone()
        };
        let (RunnerRole::Apply, Some(apply)) = (role, &self.apply) else {
            return out;
        };
        if !apply.service_account_name.is_empty() {
            out.service_account_name = apply.service_account_name.clone();
        }
        let (t, a) = (&mut out.pod_template, &apply.pod_template);
        t.metadata.labels.extend(a.metadata.labels.clone());
        t.metadata
            .annotations
            .extend(a.metadata.annotations.clone());
        let spec = &mut t.spec;
        spec.env
            .retain(|e| a.spec.env.iter().all(|o| o.name != e.name));
        spec.env.extend(a.spec.env.iter().cloned());
        spec.env_from.extend(a.spec.env_from.iter().cloned());
        replace_by(&mut spec.volumes, &a.spec.volumes, "name");
        replace_by(&mut spec.volume_mounts, &a.spec.volume_mounts, "mountPath");
        replace_by(&mut spec.init_containers, &a.spec.init_containers, "name");
        out
    }
}

/// `base` with each of `overrides` replacing the entry with the same `key` field, or added.
fn replace_by(base: &mut Vec<KubeValue>, overrides: &[KubeValue], key: &str) {
    for o in overrides {
        let k = o.0.get(key);
        match base.iter_mut().find(|b| k.is_some() && b.0.get(key) == k) {
            Some(b) => *b = o.clone(),
            None => base.push(o.clone()),
        }
    }
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
            apply: None,
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

impl Binary {
    /// The name as written in the spec (`auto`, `terraform`, `tofu`).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Binary::Auto => "auto",
            Binary::Terraform => "terraform",
            Binary::Tofu => "tofu",
        }
    }
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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn spec(value: serde_json::Value) -> RunnerSpec {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn the_apply_runner_is_the_runner_with_the_apply_overrides() {
        let runner = spec(serde_json::json!({
            "serviceAccountName": "tf-plan",
            "podTemplate": {
                "metadata": {"labels": {"team": "a", "role": "reader"}},
                "spec": {
                    "env": [{"name": "AWS_ROLE_ARN", "value": "reader"}, {"name": "TF_LOG", "value": "info"}],
                    "envFrom": [{"secretRef": {"name": "read-keys"}}],
                    "volumes": [{"name": "creds", "secret": {"secretName": "read"}}, {"name": "cache", "emptyDir": {}}],
                    "volumeMounts": [{"name": "creds", "mountPath": "/creds"}],
                    "nodeSelector": {"pool": "tf"}
                }
            },
            "apply": {
                "serviceAccountName": "tf-apply",
                "podTemplate": {
                    "metadata": {"labels": {"role": "writer"}},
                    "spec": {
                        "env": [{"name": "AWS_ROLE_ARN", "value": "writer"}],
                        "envFrom": [{"secretRef": {"name": "write-keys"}}],
                        "volumes": [{"name": "creds", "secret": {"secretName": "write"}}],
                        "volumeMounts": [{"name": "creds", "mountPath": "/creds", "readOnly": true}]
                    }
                }
            }
        }));
        assert!(runner.splits_apply());
        let plan = runner.for_role(RunnerRole::Plan);
        assert_eq!(plan.service_account_name, "tf-plan");
        assert!(plan.apply.is_none());
        assert_eq!(plan.pod_template, runner.pod_template);

        let apply = runner.for_role(RunnerRole::Apply);
        assert!(apply.apply.is_none());
        assert_eq!(apply.service_account_name, "tf-apply");
        let t = &apply.pod_template;
        assert_eq!(t.metadata.labels["role"], "writer");
        assert_eq!(t.metadata.labels["team"], "a");
        let env: Vec<(&str, Option<&str>)> = t
            .spec
            .env
            .iter()
            .map(|e| (e.name.as_str(), e.value.as_deref()))
            .collect();
        assert_eq!(
            env,
            [("TF_LOG", Some("info")), ("AWS_ROLE_ARN", Some("writer"))]
        );
        assert_eq!(t.spec.env_from.len(), 2);
        assert_eq!(t.spec.env_from[1].0["secretRef"]["name"], "write-keys");
        assert_eq!(t.spec.volumes.len(), 2);
        assert_eq!(t.spec.volumes[0].0["secret"]["secretName"], "write");
        assert_eq!(t.spec.volume_mounts.len(), 1);
        assert_eq!(t.spec.volume_mounts[0].0["readOnly"], true);
        assert_eq!(t.spec.node_selector["pool"], "tf");
    }

    #[test]
    fn without_apply_both_roles_are_the_same_runner() {
        let runner = spec(serde_json::json!({"serviceAccountName": "tf-runner"}));
        assert!(!runner.splits_apply());
        assert_eq!(runner.for_role(RunnerRole::Apply), runner);
        assert_eq!(runner.for_role(RunnerRole::Plan), runner);
        // An apply runner without a ServiceAccount of its own keeps the runner's.
        let runner = spec(serde_json::json!({"serviceAccountName": "tf-x", "apply": {}}));
        assert_eq!(
            runner.for_role(RunnerRole::Apply).service_account_name,
            "tf-x"
        );
    }

    #[test]
    fn unknown_apply_fields_are_refused() {
        let e = serde_json::from_value::<RunnerSpec>(
            serde_json::json!({"apply": {"podTemplate": {"spec": {"nodeSelector": {}}}}}),
        )
        .unwrap_err();
        assert!(e.to_string().contains("nodeSelector"), "{e}");
    }
}
