use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Where Terraform keeps state. Default (no `backendConfig`): the Kubernetes backend, a Secret
/// `tfstate-<workspace>-<secretSuffix>` in the object's namespace, locked by a Lease.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BackendConfig {
    /// Write no backend override: the configuration's own `backend` block (or local state in
    /// the runner, lost with the Pod) is used. Default false.
    #[serde(default)]
    pub disable: bool,
    /// A complete `terraform { backend "..." { ... } }` block written as `backend_override.tf`
    /// instead of the Kubernetes backend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_configuration: Option<String>,
    /// The Kubernetes backend's `secret_suffix`. Default: the object's name. Terraform 1.10 and
    /// later reject a suffix ending in `-<number>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_suffix: Option<String>,
    /// Extra labels on the state Secret. Changing them on an existing state makes Terraform lose
    /// it, so set them once.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

/// State lock and deletion behaviour.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TfstateSpec {
    /// `no` (default): a held lock stops the run with `LockHeld`. `yes`: release the lock
    /// whose id is `lockIdentifier` (once it is reported in `status.lock.pending`). `auto`:
    /// release any lock that stops a run, once per run.
    #[serde(default)]
    pub force_unlock: ForceUnlock,
    /// The lock id to release with `forceUnlock: yes`.
    #[serde(default)]
    pub lock_identifier: String,
    /// Delete the state Secret when the object is deleted after its resources were destroyed
    /// (`destroyResourcesOnDeletion`). Default false: state is kept.
    #[serde(default)]
    pub delete_on_destroy: bool,
}

/// Whether tfops releases a held state lock.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ForceUnlock {
    /// Never.
    #[default]
    No,
    /// The lock named by `lockIdentifier`.
    Yes,
    /// Any lock that stops a run.
    Auto,
}
