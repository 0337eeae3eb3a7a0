//! Runners: starting a session, and the Terraform commands of a run in it.

use std::collections::BTreeMap;

use async_trait::async_trait;

use crate::api::{
    InventoryEntry, RunnerRole, TerraformObject, WriteOutputsToConfigMap, WriteOutputsToSecret,
};

use super::PortError;
use super::inputs::ResolvedInputs;
use super::source::Artifact;

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

    /// Ends the object's runners that outlived the runs that started them (a manager killed
    /// or fenced mid-run leaves its runner Pod up), but never one still running a command:
    /// that one fails the call ([`PortError::Unavailable`]) and is asked again later. Runners
    /// that end with their session (local child processes) have nothing to release.
    ///
    /// # Errors
    /// [`PortError::Unavailable`] when a runner is busy or cannot be told apart now.
    async fn release(&self, object: &TerraformObject) -> Result<(), PortError> {
        let _ = object;
        Ok(())
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
    /// A normal plan that takes no state lock (`-lock=false`): a pull request's, made while
    /// the object may be applying, read-only on the state. A runner refuses to apply it.
    Speculative,
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
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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

/// Where the outputs go after an apply ([`super::write_outputs`]), as a runner that writes
/// outputs itself is asked to write them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OutputsRequest {
    /// Where to write the outputs (`spec.writeOutputsToSecret`), if anywhere.
    pub target: Option<WriteOutputsToSecret>,
    /// An outputs Secret written under another name before, to remove.
    pub remove: Option<String>,
    /// The ConfigMap of the outputs not marked sensitive (`spec.writeOutputsToConfigMap`), if
    /// any.
    pub config_map: Option<WriteOutputsToConfigMap>,
    /// An outputs ConfigMap written under another name before, to remove.
    pub remove_config_map: Option<String>,
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
    /// [`crate::tail::MAX_TAIL`] bytes), for the run history; empty when not kept.
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
    /// [`RunnerSession::write_outputs`]) instead of [`super::Ports::plans`] and [`super::Ports::outputs`].
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

    /// Removes the outputs ConfigMap `name` written for the object; succeeds when there is
    /// none.
    async fn delete_outputs_config_map(&mut self, name: &str) -> Result<(), PortError> {
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
