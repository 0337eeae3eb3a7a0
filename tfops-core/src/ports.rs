//! The ports: what the reconciler's driver needs from the world, as small async traits.
//!
//! `tfops-kube` implements them on the Kubernetes API, `tfops-runner` implements the runner
//! session over gRPC, local mode implements them on files; [`crate::testing`] has an in-memory
//! fake of each. Every method reports failure as a [`PortError`], whose variant (not its text)
//! decides the condition reason a user sees.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::api::{
    FileLocation, HealthCheckType, InventoryEntry, ObjectKey, RunnerRole, SourceRef,
    TerraformObject, TerraformStatus, WriteOutputsToSecret,
};
use crate::conditions::Reason;

/// Why a port operation failed. The variant decides the reason users see; the text carries the
/// detail (for Terraform, its own diagnostic).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PortError {
    /// Something the operation needs does not exist (a Secret, a ref, a ServiceAccount).
    #[error("not found: {0}")]
    NotFound(String),
    /// Credentials were refused.
    #[error("access denied: {0}")]
    AccessDenied(String),
    /// A quota refused to create something (the runner Pod).
    #[error("quota exhausted: {0}")]
    QuotaExhausted(String),
    /// A service could not be reached or did not become ready in time.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// TLS between the controller and a runner refused a certificate; the text says whose and
    /// why ("the runner refused the controller's certificate: expired or not yet valid").
    /// Not transient for this certificate: retrying with it is refused the same way.
    #[error("{0}")]
    TlsRefused(String),
    /// The Terraform state is locked by someone else.
    #[error("state locked by {holder} (lock id {lock_id})")]
    StateLocked {
        /// The lock id (what `force-unlock` takes).
        lock_id: String,
        /// Who holds it.
        holder: String,
        /// The runner proved the holder gone: the lock names its own Pod as host, and nothing
        /// else runs there (`tfops_runner::server::RunnerConfig::pod_name`).
        holder_gone: bool,
    },
    /// Terraform failed; the text is its diagnostic.
    #[error("{0}")]
    Terraform(String),
    /// The input was unusable (bad JSON in a variable, a path escaping its root).
    #[error("invalid input: {0}")]
    Invalid(String),
    /// The operation was cancelled (shutdown).
    #[error("cancelled")]
    Cancelled,
}

/// A resolved source revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revision {
    /// The ref it was resolved from (`main`, `v1.2.0`, `latest`).
    pub reference: String,
    /// `sha1:<hex>` for Git, `sha256:<hex>` for OCI.
    pub digest: String,
}

impl Revision {
    /// The hex part of the digest.
    pub fn sha(&self) -> &str {
        self.digest
            .split_once(':')
            .map_or(self.digest.as_str(), |(_, h)| h)
    }
}

impl std::fmt::Display for Revision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{}", self.reference, self.digest)
    }
}

/// A source tree archived for the runner (tar + gzip, filtered by `ignore`).
#[derive(Clone, PartialEq, Eq)]
pub struct Artifact {
    /// SHA-256 of `data`, hex.
    pub sha256: String,
    /// The archive.
    pub data: Arc<Vec<u8>>,
}

impl std::fmt::Debug for Artifact {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Artifact")
            .field("sha256", &self.sha256)
            .field("len", &self.data.len())
            .finish()
    }
}

/// Resolves and fetches sources. Credentials stay behind this port, never reaching the runner.
#[async_trait]
pub trait SourcePort: Send + Sync {
    /// The current revision of the source (like `git ls-remote`, or an OCI manifest digest).
    async fn resolve(&self, object: &ObjectKey, source: &SourceRef) -> Result<Revision, PortError>;
    /// The tree at `revision`, filtered by `ignore` and archived.
    async fn fetch(
        &self,
        object: &ObjectKey,
        source: &SourceRef,
        revision: &Revision,
        ignore: Option<&str>,
    ) -> Result<Artifact, PortError>;
}

/// Inputs resolved from Secrets and ConfigMaps. Its `Debug` never shows values.
#[derive(Clone, Default, PartialEq)]
pub struct ResolvedInputs {
    /// Variables, by name, with JSON values (`vars`, `varsFrom`, and `values` as `values`).
    pub vars: BTreeMap<String, serde_json::Value>,
    /// Files to write.
    pub files: Vec<ResolvedFile>,
    /// The CLI configuration (`.tfrc`).
    pub cli_config: Option<Vec<u8>>,
}

impl std::fmt::Debug for ResolvedInputs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResolvedInputs")
            .field("vars", &self.vars.keys().collect::<Vec<_>>())
            .field(
                "files",
                &self.files.iter().map(|f| &f.path).collect::<Vec<_>>(),
            )
            .field(
                "cli_config",
                &self.cli_config.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

impl ResolvedInputs {
    /// A SHA-256 of every input (variables, files with their locations, CLI config). It says
    /// whether inputs changed between runs without keeping any value: a rotated password in a
    /// `varsFrom` Secret changes it, and then the run plans instead of only checking drift.
    pub fn digest(&self) -> String {
        let mut parts: Vec<Vec<u8>> = Vec::new();
        for (name, value) in &self.vars {
            parts.push(b"var".to_vec());
            parts.push(name.as_bytes().to_vec());
            parts.push(crate::digest::canonical_json(value).into_bytes());
        }
        for file in &self.files {
            parts.push(b"file".to_vec());
            parts.push(format!("{:?}", file.location).into_bytes());
            parts.push(file.path.as_bytes().to_vec());
            parts.push(file.content.clone());
        }
        if let Some(config) = &self.cli_config {
            parts.push(b"cli-config".to_vec());
            parts.push(config.clone());
        }
        crate::digest::sha256_of_parts(parts.iter().map(Vec::as_slice))
    }
}

/// A file mapping with its content.
#[derive(Clone, PartialEq, Eq)]
pub struct ResolvedFile {
    /// Workspace or home.
    pub location: FileLocation,
    /// Relative path.
    pub path: String,
    /// Content (secret: never logged).
    pub content: Vec<u8>,
}

/// Reads `vars`, `varsFrom`, `fileMappings` and `cliConfigSecretRef`.
#[async_trait]
pub trait InputsPort: Send + Sync {
    /// Resolves every input of the object.
    async fn resolve(&self, object: &TerraformObject) -> Result<ResolvedInputs, PortError>;
}

/// Starts runner sessions: in a cluster a runner Pod dialled over mTLS, locally a child process.
#[async_trait]
pub trait RunnerPort: Send + Sync {
    /// Starts (or reuses) the object's runner of `role` and connects to it. With
    /// `spec.runner.apply`, [`RunnerRole::Apply`] is a separate runner holding the apply
    /// identity ([`crate::api::RunnerSpec::for_role`]); without it, both roles are the one
    /// runner of `spec.runner`.
    async fn start(
        &self,
        object: &TerraformObject,
        role: RunnerRole,
    ) -> Result<Box<dyn RunnerSession>, PortError>;

    /// Connects to the runner named `runner` ([`RunnerSession::runner`] of an earlier session,
    /// perhaps of another process) without starting one, to attach to a run it holds.
    ///
    /// # Errors
    /// [`PortError::NotFound`] when that runner is gone (its result can never be known);
    /// [`PortError::Unavailable`] when it may exist but cannot be reached now.
    async fn attach(
        &self,
        object: &TerraformObject,
        runner: &str,
    ) -> Result<Box<dyn RunnerSession>, PortError> {
        let _ = object;
        Err(PortError::NotFound(format!(
            "runner {runner}: this runner port cannot attach to earlier runners"
        )))
    }
}

/// What a runner session sets up before `init`.
#[derive(Debug, Clone)]
pub struct SetupRequest {
    /// The object (for path, backend config, workspace, names).
    pub object: TerraformObject,
    /// The source archive.
    pub artifact: Artifact,
    /// Variables, files and CLI config.
    pub inputs: ResolvedInputs,
}

/// What kind of plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanKind {
    /// A normal plan.
    Normal,
    /// A destroy plan (`-destroy`).
    Destroy,
    /// A refresh-only plan, to detect drift.
    RefreshOnly,
}

/// A plan request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanRequest {
    /// The kind.
    pub kind: PlanKind,
    /// `-target` addresses.
    pub targets: Vec<String>,
    /// `-parallelism` (0 = Terraform's default).
    pub parallelism: i32,
}

/// Counts of a plan's resource changes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PlanSummary {
    /// Resources to add.
    pub add: u32,
    /// Resources to change.
    pub change: u32,
    /// Resources to destroy.
    pub destroy: u32,
}

impl std::fmt::Display for PlanSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "+{} ~{} -{}", self.add, self.change, self.destroy)
    }
}

/// The result of a plan. Its `Debug` shows the plan file's size, never its bytes (they hold
/// variable and resource values).
#[derive(Clone, PartialEq, Eq)]
pub struct PlanResult {
    /// Whether applying it would change anything.
    pub has_changes: bool,
    /// Change counts.
    pub summary: PlanSummary,
    /// For a refresh-only plan: the addresses of resources (and outputs) that drifted.
    pub drifted: Vec<String>,
    /// The binary plan (`plan -out`).
    pub plan_file: Vec<u8>,
}

impl std::fmt::Debug for PlanResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlanResult")
            .field("has_changes", &self.has_changes)
            .field("summary", &self.summary)
            .field("drifted", &self.drifted)
            .field(
                "plan_file",
                &format_args!("<{} bytes>", self.plan_file.len()),
            )
            .finish()
    }
}

/// A plan rendered for humans and machines. Its `Debug` shows sizes only.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ShownPlan {
    /// `terraform show` text.
    pub readable: String,
    /// `terraform show -json`.
    pub json: String,
}

impl std::fmt::Debug for ShownPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShownPlan")
            .field("readable", &format_args!("<{} bytes>", self.readable.len()))
            .field("json", &format_args!("<{} bytes>", self.json.len()))
            .finish()
    }
}

/// One output's value.
#[derive(Clone, PartialEq)]
pub struct OutputValue {
    /// The JSON value.
    pub value: serde_json::Value,
    /// Marked sensitive: never logged or put in status.
    pub sensitive: bool,
}

impl std::fmt::Debug for OutputValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.sensitive {
            f.write_str("OutputValue(<sensitive>)")
        } else {
            write!(f, "OutputValue({})", self.value)
        }
    }
}

/// The last plan of a session, as a runner that stores plans itself is asked to store it
/// (see [`RunnerSession::writes_for_object`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanToStore {
    /// The workspace it is stored under.
    pub workspace: String,
    /// The plan id.
    pub id: String,
    /// A destroy plan.
    pub is_destroy: bool,
    /// Made to correct drift.
    pub is_drift: bool,
}

/// What a runner that writes outputs itself is asked to do after an apply.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OutputsRequest {
    /// Where to write the outputs (`spec.writeOutputsToSecret`), if anywhere.
    pub target: Option<WriteOutputsToSecret>,
    /// An outputs Secret written under another name before, to remove.
    pub remove: Option<String>,
    /// The outputs whose values the caller needs (health check targets); every other value
    /// stays in the runner and comes back as `null`.
    pub reveal: Vec<String>,
}

/// A connection to one runner for one run. Commands run in order in one working directory;
/// `apply` applies the plan made by the last `plan` of this session.
#[async_trait]
pub trait RunnerSession: Send {
    /// The binary and version that runs (`tofu 1.10.6`); known after [`RunnerSession::init`]
    /// at the latest.
    fn binary(&self) -> String;
    /// Who this runner acts as towards the cloud and the cluster
    /// (`system:serviceaccount:<namespace>:<name>` for a runner Pod), for status and history;
    /// empty when not known.
    fn identity(&self) -> String {
        String::new()
    }
    /// How to reach this runner again (a Pod, an address) for [`RunnerPort::attach`]; empty
    /// when it cannot be reached from another session.
    fn runner(&self) -> String {
        String::new()
    }
    /// The last lines Terraform wrote in this session (bounded, at most
    /// [`crate::history::MAX_TAIL`] bytes), for the run history; empty when not kept.
    fn output_tail(&self) -> String {
        String::new()
    }
    /// Uploads the archive and writes backend override, variables, files and CLI config.
    async fn setup(&mut self, request: &SetupRequest) -> Result<(), PortError>;
    /// `init -upgrade -input=false -force-copy`.
    async fn init(&mut self) -> Result<(), PortError>;
    /// Selects the workspace, creating it if needed.
    async fn select_workspace(&mut self, workspace: &str) -> Result<(), PortError>;
    /// `plan -out`.
    async fn plan(&mut self, request: &PlanRequest) -> Result<PlanResult, PortError>;
    /// `show` (text and JSON) of the last plan.
    async fn show(&mut self) -> Result<ShownPlan, PortError>;
    /// Applies the last plan, as `run_id` (a run id the runner has seen is never started
    /// again: asking for it waits for its result).
    async fn apply(&mut self, run_id: &str) -> Result<(), PortError>;
    /// Waits for the result of the command run as `run_id` (by this or an earlier session).
    ///
    /// # Errors
    /// [`PortError::NotFound`] when the runner does not know the run; the command's own
    /// failure otherwise.
    async fn attach(&mut self, run_id: &str) -> Result<(), PortError>;
    /// `output -json`.
    async fn outputs(&mut self) -> Result<BTreeMap<String, OutputValue>, PortError>;
    /// The resources in the state.
    async fn inventory(&mut self) -> Result<Vec<InventoryEntry>, PortError>;
    /// `force-unlock -force <lock_id>`.
    async fn force_unlock(&mut self, lock_id: &str) -> Result<(), PortError>;
    /// Removes the working directory and, unless the object keeps it, the runner.
    async fn cleanup(&mut self) -> Result<(), PortError>;

    /// Whether this runner stores plans and writes outputs itself, with its own identity (a
    /// runner Pod writes them into the object's namespace as its ServiceAccount, so that
    /// output values never pass through the controller). The driver then asks it
    /// ([`RunnerSession::save_plan`], [`RunnerSession::delete_plan`],
    /// [`RunnerSession::write_outputs`]) instead of [`Ports::plans`] and [`Ports::outputs`].
    fn writes_for_object(&self) -> bool {
        false
    }

    /// Stores the last plan of this session (binary, readable and JSON forms).
    async fn save_plan(&mut self, plan: &PlanToStore) -> Result<(), PortError> {
        let _ = plan;
        Err(PortError::Invalid(
            "this runner does not store plans".into(),
        ))
    }

    /// Removes the object's stored plan under `workspace`; succeeds when there is none.
    async fn delete_plan(&mut self, workspace: &str) -> Result<(), PortError> {
        let _ = workspace;
        Err(PortError::Invalid(
            "this runner does not store plans".into(),
        ))
    }

    /// Removes the outputs Secret `name` written for the object; succeeds when there is none.
    async fn delete_outputs(&mut self, name: &str) -> Result<(), PortError> {
        let _ = name;
        Err(PortError::Invalid(
            "this runner does not write outputs".into(),
        ))
    }

    /// Removes the object's state under `workspace` and the backend's `suffix` (Secret and
    /// lock); succeeds when there is none.
    async fn delete_state(&mut self, workspace: &str, suffix: &str) -> Result<(), PortError> {
        let _ = (workspace, suffix);
        Err(PortError::Invalid(
            "this runner does not administer state".into(),
        ))
    }

    /// Reads the outputs, writes them as `request` says, and returns every output with the
    /// values of `request.reveal` only (the others `null`).
    async fn write_outputs(
        &mut self,
        request: &OutputsRequest,
    ) -> Result<BTreeMap<String, OutputValue>, PortError> {
        let _ = request;
        Err(PortError::Invalid(
            "this runner does not write outputs".into(),
        ))
    }
}

/// A plan kept for approval. Its `Debug` shows sizes, never the plan.
#[derive(Clone, PartialEq, Eq)]
pub struct StoredPlan {
    /// The plan id.
    pub id: String,
    /// The binary plan.
    pub binary: Vec<u8>,
    /// Rendered forms.
    pub shown: ShownPlan,
    /// A destroy plan.
    pub is_destroy: bool,
    /// Made to correct drift.
    pub is_drift: bool,
}

impl std::fmt::Debug for StoredPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredPlan")
            .field("id", &self.id)
            .field("binary", &format_args!("<{} bytes>", self.binary.len()))
            .field("shown", &self.shown)
            .field("is_destroy", &self.is_destroy)
            .field("is_drift", &self.is_drift)
            .finish()
    }
}

/// Stores plans (`tfplan-<workspace>-<name>` Secret + `-readable` ConfigMap in a cluster).
#[async_trait]
pub trait PlanStore: Send + Sync {
    /// Replaces the object's stored plan.
    async fn save(
        &self,
        object: &ObjectKey,
        workspace: &str,
        plan: &StoredPlan,
    ) -> Result<(), PortError>;
    /// The object's stored plan, verified whole (`None` when there is none).
    ///
    /// # Errors
    /// [`PortError::Invalid`] when what is stored is damaged or incomplete; the store's error.
    async fn load(
        &self,
        object: &ObjectKey,
        workspace: &str,
    ) -> Result<Option<StoredPlan>, PortError>;
    /// Removes the object's stored plan; succeeds when there is none.
    async fn delete(&self, object: &ObjectKey, workspace: &str) -> Result<(), PortError>;
}

/// The outputs `target` selects, under their Secret keys (`tf_name:key` renames; no selection
/// means every output under its own name).
pub fn select_outputs(
    target: &WriteOutputsToSecret,
    outputs: &BTreeMap<String, OutputValue>,
) -> BTreeMap<String, serde_json::Value> {
    match target.selection() {
        None => outputs
            .iter()
            .map(|(k, v)| (k.clone(), v.value.clone()))
            .collect(),
        Some(pairs) => pairs
            .into_iter()
            .filter_map(|(tf, key)| outputs.get(&tf).map(|v| (key, v.value.clone())))
            .collect(),
    }
}

/// Writes outputs (`spec.writeOutputsToSecret`).
#[async_trait]
pub trait OutputsSink: Send + Sync {
    /// Writes the selected outputs.
    async fn write(
        &self,
        object: &ObjectKey,
        target: &WriteOutputsToSecret,
        outputs: &BTreeMap<String, OutputValue>,
    ) -> Result<(), PortError>;
    /// Removes the outputs Secret; succeeds when there is none.
    async fn delete(&self, object: &ObjectKey, name: &str) -> Result<(), PortError>;
}

/// Administers state outside Terraform.
#[async_trait]
pub trait StateAdmin: Send + Sync {
    /// Deletes the state (Secret and lock Lease); succeeds when there is none.
    async fn delete_state(
        &self,
        object: &ObjectKey,
        workspace: &str,
        suffix: &str,
    ) -> Result<(), PortError>;
}

/// A health check with its target rendered from outputs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedHealthCheck {
    /// Its name.
    pub name: String,
    /// TCP or HTTP.
    pub check_type: HealthCheckType,
    /// `host:port` or URL.
    pub target: String,
    /// How long it may take.
    pub timeout: Duration,
}

/// Runs health checks.
#[async_trait]
pub trait HealthChecker: Send + Sync {
    /// Runs one check.
    async fn check(&self, check: &ResolvedHealthCheck) -> Result<(), PortError>;
}

/// Normal or Warning, as Kubernetes events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Progress.
    Normal,
    /// A problem.
    Warning,
}

/// An event on the object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Normal or Warning.
    pub event_type: EventType,
    /// The reason (same set as conditions).
    pub reason: Reason,
    /// The message.
    pub message: String,
}

/// Emits events. Best effort: a failure to emit must not fail a run.
#[async_trait]
pub trait EventSink: Send + Sync {
    /// Emits one event.
    async fn emit(&self, object: &ObjectKey, event: Event);
}

/// Writes the object: status and finalizer.
#[async_trait]
pub trait ObjectWriter: Send + Sync {
    /// Writes the status.
    async fn write_status(
        &self,
        object: &ObjectKey,
        status: &TerraformStatus,
    ) -> Result<(), PortError>;
    /// Adds tfops' finalizer.
    async fn add_finalizer(&self, object: &ObjectKey) -> Result<(), PortError>;
    /// Removes tfops' finalizer.
    async fn remove_finalizer(&self, object: &ObjectKey) -> Result<(), PortError>;
}

/// The time. The decision function never reads a clock; the driver reads this one.
pub trait Clock: Send + Sync {
    /// Now.
    fn now(&self) -> jiff::Timestamp;
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> jiff::Timestamp {
        jiff::Timestamp::now()
    }
}

/// Gives the `TerraformPolicy` objects that may apply to an object (the driver compiles them
/// and keeps those that select it).
#[async_trait]
pub trait PolicySource: Send + Sync {
    /// The policies of the object's namespace.
    async fn policies(
        &self,
        object: &TerraformObject,
    ) -> Result<Vec<crate::policy::TerraformPolicy>, PortError>;
}

/// Every port the driver uses.
#[derive(Clone)]
pub struct Ports {
    /// Sources.
    pub source: Arc<dyn SourcePort>,
    /// Inputs.
    pub inputs: Arc<dyn InputsPort>,
    /// Runners.
    pub runner: Arc<dyn RunnerPort>,
    /// Plans.
    pub plans: Arc<dyn PlanStore>,
    /// Outputs.
    pub outputs: Arc<dyn OutputsSink>,
    /// State administration.
    pub state: Arc<dyn StateAdmin>,
    /// Health checks.
    pub health: Arc<dyn HealthChecker>,
    /// Events.
    pub events: Arc<dyn EventSink>,
    /// Status and finalizers.
    pub objects: Arc<dyn ObjectWriter>,
    /// Time.
    pub clock: Arc<dyn Clock>,
    /// Plan policies.
    pub policies: Arc<dyn PolicySource>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_of_plans_shows_sizes_never_content() {
        let shown = ShownPlan {
            readable: "password = hunter2".into(),
            json: r#"{"password":"hunter2"}"#.into(),
        };
        let stored = StoredPlan {
            id: "plan-main-1".into(),
            binary: b"PK hunter2".to_vec(),
            shown: shown.clone(),
            is_destroy: false,
            is_drift: false,
        };
        let result = PlanResult {
            has_changes: true,
            summary: PlanSummary::default(),
            drifted: vec![],
            plan_file: b"PK hunter2".to_vec(),
        };
        for text in [
            format!("{shown:?}"),
            format!("{stored:?}"),
            format!("{result:?}"),
        ] {
            assert!(!text.contains("hunter2"), "{text}");
            assert!(text.contains("bytes>"), "{text}");
        }
    }
}
