use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{TerraformSpec, TerraformStatus};

/// Namespace and name of an object.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ObjectKey {
    /// The namespace.
    pub namespace: String,
    /// The name.
    pub name: String,
}

impl ObjectKey {
    /// A key from namespace and name.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl std::fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// The parts of Kubernetes object metadata the reconciler reads.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    /// The object's name.
    pub name: String,
    /// The object's namespace.
    pub namespace: String,
    /// `metadata.uid`: tells this object from an earlier one of the same name (owner
    /// references, events). Empty where there is no API server (local mode, fakes).
    #[serde(default)]
    pub uid: String,
    /// `metadata.resourceVersion` as read: the precondition of writes that must not overwrite
    /// a newer object (removing the finalizer, status). Empty where there is no API server.
    #[serde(default)]
    pub resource_version: String,
    /// `metadata.generation`: bumped by the API server on every spec change, never on status
    /// updates.
    pub generation: i64,
    /// Labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Annotations (see [`super::annotations`]).
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// Set when deletion was requested.
    #[serde(default)]
    pub deletion_timestamp: Option<jiff::Timestamp>,
    /// Finalizers.
    #[serde(default)]
    pub finalizers: Vec<String>,
}

/// A `Terraform` object as the reconciler sees it: metadata, spec and status.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TerraformObject {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// The desired state.
    pub spec: TerraformSpec,
    /// The observed state, as last written by tfops.
    #[serde(default)]
    pub status: TerraformStatus,
}

impl TerraformObject {
    /// Namespace and name.
    pub fn key(&self) -> ObjectKey {
        ObjectKey::new(&self.metadata.namespace, &self.metadata.name)
    }

    /// The value of an annotation, if set and not empty.
    pub fn annotation(&self, name: &str) -> Option<&str> {
        self.metadata
            .annotations
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    /// Why the object is suspended, when it is: `spec.suspend`, or the
    /// [`super::annotations::SUSPEND`] annotation (present, whatever its value) with its reason.
    pub fn suspension(&self) -> Option<String> {
        if self.spec.suspend {
            return Some("spec.suspend is true".into());
        }
        let reason = self.metadata.annotations.get(super::annotations::SUSPEND)?;
        // (Not trimmed: Argo CD's health script, which says the same, has no string functions.)
        Some(match reason.as_str() {
            "" => format!("{} is set", super::annotations::SUSPEND),
            why => format!("{}: {why}", super::annotations::SUSPEND),
        })
    }

    /// Whether tfops' finalizer is present.
    pub fn has_finalizer(&self) -> bool {
        self.metadata
            .finalizers
            .iter()
            .any(|f| f == super::FINALIZER)
    }

    /// The Kubernetes backend's `secret_suffix`: `spec.backendConfig.secretSuffix`, else the
    /// object's name (the state Secret is [`crate::naming::state_secret_name`] of it).
    pub fn state_secret_suffix(&self) -> String {
        self.spec
            .backend_config
            .as_ref()
            .and_then(|b| b.secret_suffix.clone())
            .unwrap_or_else(|| self.metadata.name.clone())
    }

    /// The runner Pod of `role`: [`crate::naming::runner_pod_name`], or
    /// [`crate::naming::apply_runner_pod_name`] when the object applies as a separate
    /// identity.
    pub fn runner_pod_name(&self, role: super::RunnerRole) -> String {
        let name = &self.metadata.name;
        match role {
            super::RunnerRole::Apply if self.spec.runner.splits_apply() => {
                crate::naming::apply_runner_pod_name(name)
            }
            super::RunnerRole::PullRequest => crate::naming::pull_request_runner_pod_name(name),
            _ => crate::naming::runner_pod_name(name),
        }
    }
}
