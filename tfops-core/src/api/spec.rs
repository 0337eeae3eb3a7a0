use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{
    BackendConfig, FileMapping, HealthCheck, RunnerSpec, SecretKeyRef, SourceRef, TfstateSpec,
    Variable, VarsFrom, WriteOutputsToConfigMap, WriteOutputsToSecret,
};

/// The desired state of a `Terraform` object: which configuration to run, with what inputs,
/// and how changes are approved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TerraformSpec {
    /// How often the object is reconciled (drift detection, new revisions), as a Go duration
    /// (`30s`, `5m`, `1h`). Default `10m`.
    #[serde(default = "default_interval")]
    pub interval: String,
    /// The first delay before retrying a failed run; doubled on each further failure up to
    /// `interval` (or this value, if larger). Go duration. Default `15s`. A runner Pod refused
    /// by a ResourceQuota is no failure: the object waits its turn in its namespace's queue,
    /// retrying on its own after a random wait of at most as long as it has waited (at least
    /// this, at most `interval`).
    #[serde(default = "default_retry_interval")]
    pub retry_interval: String,
    /// How long each Terraform command of a run (`init`, `plan`, `apply`, a destroy, a pull
    /// request's plan) may take, as a Go duration. At the deadline the runner interrupts
    /// Terraform as Ctrl-C does (SIGINT: it stops its providers, writes the state, releases
    /// the lock), then kills it after the runner Pod's grace period; the run fails with reason
    /// `TerraformTimedOut` and is retried with the backoff. Default: the manager's
    /// `--default-timeout` (2h).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// Stop reconciling: no runs start until this is false again. Default false. The annotation
    /// `infra.argocd.io/suspend: "<reason>"` does the same without editing the spec (what the
    /// Argo CD suspend action and `tfops suspend` set); removing it resumes. Its plan and apply
    /// runner Pods still up (kept, or left by a manager stopped mid-run) are ended meanwhile,
    /// but never one that runs a command, nor while an apply is recorded as under way: that
    /// one is taken up on resuming.
    #[serde(default)]
    pub suspend: bool,
    /// Where the Terraform configuration comes from.
    pub source_ref: SourceRef,
    /// The directory of the configuration inside the source, relative to its root. Default: the
    /// root.
    #[serde(default)]
    pub path: String,
    /// Extra gitignore-style lines excluding files of the source from the archive sent to the
    /// runner (in addition to a `.sourceignore` file; `.git/` is always excluded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore: Option<String>,
    /// The Terraform workspace. Default `default`.
    #[serde(default = "default_workspace")]
    pub workspace: String,
    /// `auto` applies every plan; empty (the default) stops after planning until a human sets this
    /// to the plan id shown in `status.plan.pending`.
    #[serde(default)]
    pub approve_plan: String,
    /// Apply without approval, even when `approvePlan` is empty. Default false.
    #[serde(default)]
    pub force: bool,
    /// Plan and apply the destruction of every resource instead of the configuration.
    /// Default false.
    #[serde(default)]
    pub destroy: bool,
    /// When the object is deleted, destroy its resources first. Default false: deleting the
    /// object leaves the infrastructure (and its state) in place.
    #[serde(default)]
    pub destroy_resources_on_deletion: bool,
    /// Skip the refresh-only plan that checks the infrastructure when nothing changed; every
    /// interval then plans normally instead. Default false.
    #[serde(default)]
    pub disable_drift_detection: bool,
    /// What detected drift leads to: `Remediate` (the default) re-plans and applies when
    /// `approvePlan` is `auto`, and only reports otherwise; `Report` only ever reports.
    #[serde(default)]
    pub drift_action: DriftAction,
    /// Input variables, each with a JSON value or a reference to a Secret or ConfigMap key.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vars: Vec<Variable>,
    /// Input variables read from every key (or the listed keys) of Secrets and ConfigMaps.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vars_from: Vec<VarsFrom>,
    /// A free-form JSON object passed to the configuration as the variable `values`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
    pub values: Option<serde_json::Map<String, serde_json::Value>>,
    /// Files written from Secret keys into the workspace or the runner's home directory.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub file_mappings: Vec<FileMapping>,
    /// A Secret key holding a Terraform CLI configuration (`.tfrc`): registry credentials,
    /// provider mirrors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cli_config_secret_ref: Option<SecretKeyRef>,
    /// Where state lives. Default: the Kubernetes backend in the object's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_config: Option<BackendConfig>,
    /// State lock and deletion behaviour.
    #[serde(default)]
    pub tfstate: TfstateSpec,
    /// Write outputs to a Secret in the object's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_outputs_to_secret: Option<WriteOutputsToSecret>,
    /// Write the outputs Terraform does not mark sensitive to a ConfigMap in the object's
    /// namespace (sensitive ones belong in `writeOutputsToSecret`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_outputs_to_config_map: Option<WriteOutputsToConfigMap>,
    /// Other `Terraform` objects that must be Ready (at their current generation) before this
    /// one runs, and that cannot be deleted while this one exists.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<DependsOn>,
    /// Checks run against the infrastructure after apply, with addresses templated from outputs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub health_checks: Vec<HealthCheck>,
    /// The runner Pod.
    #[serde(default)]
    pub runner: RunnerSpec,
    /// Retries of failed runs.
    #[serde(default)]
    pub remediation: Remediation,
    /// Resource addresses to limit plan and apply to (`-target`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<String>,
    /// Terraform's `-parallelism`; 0 (the default) keeps Terraform's own default of 10.
    #[serde(default)]
    pub parallelism: i32,
    /// Plan only: never apply, whatever `approvePlan` says. Default false.
    #[serde(default)]
    pub plan_only: bool,
    /// When applies may start: recurring `allow` and `deny` windows. Empty (the default): at
    /// any time. An approved or automatic plan outside a window waits (`Ready=Unknown`, reason
    /// `ApplyWindowClosed`, naming the next opening) and is applied when one opens;
    /// `spec.force` ignores windows.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub apply_windows: Vec<super::ApplyWindow>,
}

fn default_interval() -> String {
    "10m".into()
}
fn default_retry_interval() -> String {
    "15s".into()
}
fn default_workspace() -> String {
    "default".into()
}

/// What detected drift leads to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum DriftAction {
    /// Re-plan and apply when `approvePlan` is `auto`; report otherwise.
    #[default]
    Remediate,
    /// Only report drift (`Ready=False`, reason `DriftDetected`), never act on it.
    Report,
}

/// A dependency on another `Terraform` object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DependsOn {
    /// The other object's name.
    pub name: String,
    /// The other object's namespace. Default: this object's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// Retries of failed runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Remediation {
    /// How many times a failed run is retried (with exponential backoff from `retryInterval`)
    /// before the object reports `RetryLimitReached` and waits for a spec change or a
    /// reconcile request. Negative (the default, -1) retries without limit. Waiting for a
    /// runner Pod under a ResourceQuota counts no failure.
    #[serde(default = "default_retries")]
    pub retries: i64,
}

fn default_retries() -> i64 {
    -1
}

impl Default for Remediation {
    fn default() -> Self {
        Self {
            retries: default_retries(),
        }
    }
}

impl TerraformSpec {
    /// A short digest of the whole spec: where there is no API server (local mode), a
    /// changed digest is what bumps `metadata.generation`.
    pub fn digest(&self) -> String {
        use sha2::{Digest, Sha256};
        // Serializing plain data (maps are BTreeMaps) cannot fail and is deterministic.
        let bytes = serde_json::to_vec(self).unwrap_or_default();
        crate::digest::hex(&Sha256::digest(&bytes)[..8])
    }
}

/// What `spec.approvePlan` means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApprovePlan {
    /// Empty: plans wait for a human.
    Manual,
    /// `auto`: every plan is applied.
    Auto,
    /// A plan id: the pending plan with this id is applied.
    Plan(String),
}

impl ApprovePlan {
    /// Reads the field's text (already validated).
    pub fn parse(text: &str) -> Self {
        match text.trim() {
            "" => Self::Manual,
            "auto" => Self::Auto,
            id => Self::Plan(id.to_string()),
        }
    }
}
