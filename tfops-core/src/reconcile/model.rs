//! The data the decision function reads and returns.

use std::time::Duration;

use crate::api::{InventoryEntry, ObjectKey, TerraformObject, TerraformStatus};
use crate::conditions::{self, ConditionStatus, ConditionType, Reason};
use crate::ports::{PlanKind, PlanSummary, Revision};

/// What the decision function sees.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// The object as it was when this run started (status included). Status writes made during
    /// the run do not feed back: the status to write is always derived from this one plus
    /// [`Snapshot::progress`], so deciding twice gives the same answer.
    pub object: TerraformObject,
    /// The objects named by `spec.dependsOn`, in order.
    pub dependencies: Vec<DependencyState>,
    /// The objects whose `dependsOn` names this one and that still exist.
    pub dependants: Vec<ObjectKey>,
    /// The steps performed so far in this run, with their outcomes.
    pub progress: Progress,
    /// The current time.
    pub now: jiff::Timestamp,
    /// When this run (this reconcile) started: the transition time of conditions it changes,
    /// so that deciding again later in the run gives the same status and writes nothing new.
    pub started_at: jiff::Timestamp,
    /// Where the object stands in its namespace's queue for runner Pods, as the driver's
    /// caller sees it (the default knows nothing).
    pub queue: super::queue::RunnerQueue,
    /// The newest revision of the object's source as the caller's source poller last resolved
    /// it (the text of a [`crate::ports::Revision`]), when the caller polls sources. One that
    /// differs from `status.lastAttemptedRevision` makes a run due at once
    /// ([`super::Trigger::NewRevision`]), which ends before starting a runner when the
    /// revision changed nothing of the object's.
    pub source_revision: Option<String>,
    /// The approvals recorded on the object's merged pull requests
    /// ([`crate::ports::PlanStore::pull_request_approvals`]): a plan whose content one of them
    /// approved, and that was not applied with it before, is applied without another approval.
    pub pull_approvals: Vec<crate::ports::PullApproval>,
}

/// A dependency as found.
#[derive(Debug, Clone, PartialEq)]
pub struct DependencyState {
    /// Its key.
    pub key: ObjectKey,
    /// What was found, or `None` when it does not exist.
    pub found: Option<DependencyView>,
}

/// The parts of a dependency the decision needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DependencyView {
    /// `metadata.generation`.
    pub generation: i64,
    /// `status.observedGeneration`.
    pub observed_generation: i64,
    /// Its `Ready` condition status, if any.
    pub ready: Option<ConditionStatus>,
    /// Its `Ready` condition reason, if any.
    pub ready_reason: String,
    /// Its source URL and path, to compare revisions of a shared source.
    pub source_url: String,
    /// Its last applied revision.
    pub last_applied_revision: Option<String>,
}

impl DependencyView {
    /// The view of a `Terraform` object.
    pub fn of(object: &TerraformObject) -> Self {
        let ready = conditions::find(&object.status.conditions, ConditionType::Ready);
        Self {
            generation: object.metadata.generation,
            observed_generation: object.status.observed_generation,
            ready: ready.map(|c| c.status),
            ready_reason: ready.map(|c| c.reason.clone()).unwrap_or_default(),
            source_url: object.spec.source_ref.url.clone(),
            last_applied_revision: object.status.last_applied_revision.clone(),
        }
    }

    /// Ready at its current generation.
    pub fn is_ready(&self) -> bool {
        self.ready == Some(ConditionStatus::True) && self.observed_generation >= self.generation
    }
}

/// One thing to do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Add tfops' finalizer to the object.
    AddFinalizer,
    /// Resolve the source revision.
    ResolveSource,
    /// Fetch and archive the resolved revision.
    FetchSource,
    /// What changed in the source between `from`, the revision the object last planned or
    /// applied, and `to`, the one resolved now: whether it concerns the object.
    CompareSource {
        /// The revision of the last plan or apply.
        from: Revision,
        /// The revision resolved in this run.
        to: Revision,
    },
    /// Start (or reuse) the runner and connect.
    StartRunner,
    /// Resolve inputs, upload the archive, write files, `init`, select the workspace.
    Setup,
    /// Release the state lock with this id.
    ForceUnlock {
        /// The lock id.
        lock_id: String,
    },
    /// Whether the object's runner named `runner` still exists, asked when a state lock names
    /// that runner's host but another runner found it (only a runner can prove a lock of its
    /// own host stale): its Pod gone, or ended for good, proves the lock's holder gone.
    ProbeRunner {
        /// The runner's name ([`crate::ports::RunnerPort::attach`]).
        runner: String,
    },
    /// End the object's runner Pods still up (left by a run whose manager was killed or
    /// fenced mid-run, or kept), asked at each reconcile of a suspended object that records
    /// no apply under way: nothing runs for it until it is resumed, so nothing of it stays up.
    ReleaseRunners,
    /// A refresh-only plan to detect drift.
    DetectDrift,
    /// Plan (and show, and store the plan under its id when it has changes).
    Plan(PlanStep),
    /// With `spec.runner.apply`, for a plan that may be applied: end the plan runner's
    /// session and start the apply runner (the only step that starts it).
    StartApplyRunner,
    /// [`Step::Setup`] in the apply runner.
    ApplySetup,
    /// Plan again in the apply runner (and store that plan when it has changes): it is applied
    /// only when it does what the plan that was approved (or accepted) does.
    VerifyPlan(PlanStep),
    /// Apply the plan just made, as this run id of the runner.
    Apply {
        /// The run id ([`crate::api::ActiveRun::run_id`]).
        run_id: String,
    },
    /// Attach to a run that an earlier driver recorded in status and wait for its result.
    Attach {
        /// The runner it runs in.
        runner: String,
        /// Its run id.
        run_id: String,
    },
    /// Read outputs and inventory; write the outputs Secret and ConfigMap if asked.
    Outputs(OutputsStep),
    /// Run the health checks (`spec.healthChecks`, targets rendered from the outputs).
    HealthChecks {
        /// Each check's timeout, in order.
        timeouts: Vec<Duration>,
    },
    /// End the runner session (delete the Pod unless it is kept).
    Cleanup,
    /// Delete the stored plans and the outputs Secrets and ConfigMaps.
    DeletePlansAndOutputs {
        /// Who removes them.
        writer: Writer,
        /// The workspaces plans may be stored under.
        workspaces: Vec<String>,
        /// The outputs Secrets' names.
        secrets: Vec<String>,
        /// The outputs ConfigMaps' names.
        config_maps: Vec<String>,
    },
    /// Delete the state (only with `tfstate.deleteOnDestroy`, after a successful destroy).
    DeleteState {
        /// Who removes it.
        writer: Writer,
        /// The workspace.
        workspace: String,
        /// The state Secret's suffix ([`crate::api::TerraformObject::state_secret_suffix`]).
        suffix: String,
    },
    /// Remove tfops' finalizer: the object may go.
    RemoveFinalizer,
    /// Nothing more now; come back after this long (`None`: only on a change).
    Done {
        /// When to reconcile again without an event.
        requeue_after: Option<Duration>,
    },
}

/// Who writes what a run stores for its object (plans, outputs) and removes it (and the
/// state): the runner, with its own identity, when its session says it does
/// ([`crate::ports::RunnerSession::writes_for_object`]), else the driver through its ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writer {
    /// The runner session of the run.
    Runner,
    /// The driver's ports.
    Driver,
}

/// A plan to make ([`Step::Plan`], [`Step::VerifyPlan`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanStep {
    /// Normal or destroy.
    pub kind: PlanKind,
    /// The id the plan is stored and approved under.
    pub plan_id: String,
    /// Made to correct drift.
    pub drift: bool,
    /// Who stores the plan (and removes what is stored when it changes nothing).
    pub writer: Writer,
    /// A workspace an earlier plan was stored under (the spec's changed since): that plan is
    /// removed, not left behind.
    pub replaces: Option<String>,
}

/// Reading outputs and inventory ([`Step::Outputs`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputsStep {
    /// Who writes the outputs Secret and ConfigMap.
    pub writer: Writer,
    /// The outputs Secret to write (`spec.writeOutputsToSecret`).
    pub secret: Option<crate::api::WriteOutputsToSecret>,
    /// An outputs Secret written before under another name (renamed or no longer asked
    /// for): removed.
    pub remove: Option<String>,
    /// The outputs ConfigMap to write (`spec.writeOutputsToConfigMap`).
    pub config_map: Option<crate::api::WriteOutputsToConfigMap>,
    /// An outputs ConfigMap written before under another name: removed.
    pub remove_config_map: Option<String>,
    /// The outputs whose values the driver needs back from a runner that writes (those the
    /// health checks read); a runner keeps the others.
    pub reveal: Vec<String>,
}

impl OutputsStep {
    /// What to write and remove, as the outputs port and a writing runner take it.
    pub fn request(&self) -> crate::ports::OutputsRequest {
        crate::ports::OutputsRequest {
            target: self.secret.clone(),
            remove: self.remove.clone(),
            config_map: self.config_map.clone(),
            remove_config_map: self.remove_config_map.clone(),
            reveal: self.reveal.clone(),
        }
    }
}

impl Step {
    /// The kind of step, without its data.
    pub fn kind(&self) -> StepKind {
        match self {
            Step::AddFinalizer => StepKind::AddFinalizer,
            Step::ResolveSource => StepKind::ResolveSource,
            Step::FetchSource => StepKind::FetchSource,
            Step::CompareSource { .. } => StepKind::CompareSource,
            Step::StartRunner => StepKind::StartRunner,
            Step::Setup => StepKind::Setup,
            Step::ForceUnlock { .. } => StepKind::ForceUnlock,
            Step::ProbeRunner { .. } => StepKind::ProbeRunner,
            Step::ReleaseRunners => StepKind::ReleaseRunners,
            Step::DetectDrift => StepKind::DetectDrift,
            Step::Plan(_) => StepKind::Plan,
            Step::StartApplyRunner => StepKind::StartApplyRunner,
            Step::ApplySetup => StepKind::ApplySetup,
            Step::VerifyPlan(_) => StepKind::VerifyPlan,
            Step::Apply { .. } => StepKind::Apply,
            Step::Attach { .. } => StepKind::Attach,
            Step::Outputs(_) => StepKind::Outputs,
            Step::HealthChecks { .. } => StepKind::HealthChecks,
            Step::Cleanup => StepKind::Cleanup,
            Step::DeletePlansAndOutputs { .. } => StepKind::DeletePlansAndOutputs,
            Step::DeleteState { .. } => StepKind::DeleteState,
            Step::RemoveFinalizer => StepKind::RemoveFinalizer,
            Step::Done { .. } => StepKind::Done,
        }
    }
}

/// The kinds of [`Step`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[allow(missing_docs)] // one-to-one with `Step`'s documented variants
pub enum StepKind {
    AddFinalizer,
    ResolveSource,
    FetchSource,
    CompareSource,
    StartRunner,
    Setup,
    ForceUnlock,
    ProbeRunner,
    ReleaseRunners,
    DetectDrift,
    Plan,
    StartApplyRunner,
    ApplySetup,
    VerifyPlan,
    Apply,
    Attach,
    Outputs,
    HealthChecks,
    Cleanup,
    DeletePlansAndOutputs,
    DeleteState,
    RemoveFinalizer,
    Done,
}

/// A failed step as the user will see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepFailure {
    /// The condition reason.
    pub reason: Reason,
    /// The message (Terraform's diagnostic, trimmed, where it comes from Terraform).
    pub message: String,
    /// The lock that stopped it, as (lock id, holder).
    pub lock: Option<(String, String)>,
    /// The runner proved the lock's holder gone ([`crate::ports::PortError::StateLocked`]).
    pub lock_holder_gone: bool,
}

/// What a successful step produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The finalizer was added.
    FinalizerAdded,
    /// The source resolved to this revision.
    Resolved(Revision),
    /// The source was compared with an earlier revision.
    SourceCompared {
        /// The first changed file that concerns the object (or why every change does);
        /// `None`: nothing that concerns it changed.
        touched: Option<String>,
    },
    /// The archive was built; its SHA-256.
    Fetched {
        /// Hex SHA-256 of the archive.
        sha256: String,
    },
    /// A runner was looked for ([`Step::ProbeRunner`]).
    RunnerProbed {
        /// It is gone: its Pod deleted, or ended for good.
        gone: bool,
        /// What was found.
        why: String,
    },
    /// The object's leftover runners were ended ([`Step::ReleaseRunners`]).
    RunnersReleased,
    /// The runner is up.
    RunnerStarted {
        /// Binary and version, if known yet (else [`Outcome::SetUp`] has them).
        binary: String,
        /// How to reach this runner again ([`crate::ports::RunnerSession::runner`]).
        runner: String,
        /// Who it acts as ([`crate::ports::RunnerSession::identity`]).
        identity: String,
    },
    /// Setup, init and workspace selection succeeded.
    SetUp {
        /// [`crate::ports::ResolvedInputs::digest`] of the inputs it used.
        inputs_digest: String,
        /// Binary and version that ran `init`.
        binary: String,
        /// The runner writes for the object itself ([`Writer::Runner`]).
        writes: bool,
    },
    /// The lock was released.
    Unlocked,
    /// The refresh-only plan ran.
    DriftChecked {
        /// What drifted (empty: no drift).
        drifted: Vec<String>,
    },
    /// A plan was made.
    Planned {
        /// Whether it changes anything.
        has_changes: bool,
        /// Change counts.
        summary: PlanSummary,
        /// What the plan would do, digested (`crate::plan::content_digest`; empty without
        /// changes).
        digest: String,
        /// What the policies found (plans with changes only).
        violations: Vec<crate::api::PolicyViolation>,
    },
    /// The plan was applied by this run.
    Applied,
    /// The recorded run attached to succeeded: its plan was applied.
    Attached {
        /// The attached runner writes for the object itself ([`Writer::Runner`]).
        writes: bool,
    },
    /// The recorded run cannot be found: its runner is gone, so its result is unknown.
    RunGone {
        /// What was found instead.
        why: String,
    },
    /// Outputs and inventory were read (and written).
    OutputsRead {
        /// Output names.
        names: Vec<String>,
        /// Resources in the state.
        inventory: Vec<InventoryEntry>,
        /// Whether the outputs Secret was written.
        written: bool,
        /// Whether the outputs ConfigMap was written.
        config_map_written: bool,
    },
    /// Every health check passed.
    HealthChecked,
    /// The runner session ended.
    CleanedUp,
    /// Plans and outputs were deleted.
    PlansAndOutputsDeleted,
    /// The state was deleted.
    StateDeleted,
    /// The finalizer was removed.
    FinalizerRemoved,
}

/// One performed step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Which step.
    pub step: StepKind,
    /// When it finished.
    pub at: jiff::Timestamp,
    /// What it gave.
    pub result: Result<Outcome, StepFailure>,
}

/// The steps performed so far in a run, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Progress {
    /// The records, oldest first.
    pub records: Vec<Record>,
}

impl Progress {
    /// Appends a record.
    pub fn push(
        &mut self,
        step: StepKind,
        at: jiff::Timestamp,
        result: Result<Outcome, StepFailure>,
    ) {
        self.records.push(Record { step, at, result });
    }

    /// Nothing was done yet in this run.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The latest record of `step` that still counts. A failure caused by a state lock no
    /// longer counts once the lock was released later in the run: the step is due again.
    pub fn latest(&self, step: StepKind) -> Option<&Record> {
        let (index, record) = self
            .records
            .iter()
            .enumerate()
            .rev()
            .find(|(_, r)| r.step == step)?;
        let locked = matches!(&record.result, Err(f) if f.lock.is_some());
        let unlocked_after = self.records[index + 1..]
            .iter()
            .any(|r| r.step == StepKind::ForceUnlock && r.result.is_ok());
        if locked && unlocked_after {
            None
        } else {
            Some(record)
        }
    }

    /// Whether `step` was attempted at all in this run (successfully or not).
    pub fn attempted(&self, step: StepKind) -> bool {
        self.records.iter().any(|r| r.step == step)
    }

    /// Whether `step` succeeded in this run.
    pub fn succeeded(&self, step: StepKind) -> bool {
        self.records
            .iter()
            .any(|r| r.step == step && r.result.is_ok())
    }
}

/// The next step and the status to write before taking it.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// What to do next.
    pub step: Step,
    /// The status as it should be now.
    pub status: TerraformStatus,
}
