//! Conditions, their reasons, and how they map to Argo CD health.
//!
//! `Ready` is the condition Argo CD reads. `Plan`, `Apply`, `Output` and `HealthCheck` record
//! the last result of each phase. `StateLocked`, `Reconciling` and `Stalled` are "abnormal when
//! true" (kstatus style): present while the situation lasts, removed afterwards.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A standard `metav1.Condition`. Type and reason are strings on the wire so that a status
/// written by another version of tfops always reads back; [`Condition::kind`] and
/// [`Condition::reason_code`] give them typed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// The condition type (`Ready`, `Plan`, ...).
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: ConditionStatus,
    /// A CamelCase reason, one of [`Reason`].
    pub reason: String,
    /// A message for humans.
    #[serde(default)]
    pub message: String,
    /// When `status` last changed; for `Ready` with the reason `RunnerQuotaExhausted`, when
    /// the object began waiting for a runner Pod (kept while it waits).
    pub last_transition_time: jiff::Timestamp,
    /// The generation the condition was computed for.
    #[serde(default)]
    pub observed_generation: i64,
}

impl Condition {
    /// The typed condition type, if known to this version.
    pub fn kind(&self) -> Option<ConditionType> {
        ConditionType::ALL
            .iter()
            .copied()
            .find(|t| t.as_str() == self.type_)
    }

    /// The typed reason, if known to this version.
    pub fn reason_code(&self) -> Option<Reason> {
        Reason::ALL
            .iter()
            .copied()
            .find(|r| r.as_str() == self.reason)
    }
}

/// A condition's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ConditionStatus {
    /// The condition holds.
    True,
    /// It does not.
    False,
    /// Not known yet (work in progress, or waiting for a human).
    Unknown,
}

macro_rules! string_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident,)* }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)*
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)*];

            /// The wire name.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => stringify!($variant),)*
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

string_enum!(
    /// The condition types tfops writes.
    ConditionType {
        /// The overall result; what Argo CD's health reads.
        Ready,
        /// The last plan.
        Plan,
        /// The last apply.
        Apply,
        /// The last output read and write.
        Output,
        /// The last health checks.
        HealthCheck,
        /// A state lock stops runs (present only while it does).
        StateLocked,
        /// A run is in progress (present only while it is).
        Reconciling,
        /// No progress is possible without a change by a human (present only while so).
        Stalled,
    }
);

string_enum!(
    /// Every reason tfops puts on a condition or event.
    Reason {
        /// Apply succeeded.
        TerraformAppliedSucceed,
        /// The refresh-only plan found no drift.
        NoDrift,
        /// Outputs were read (and written to the outputs Secret).
        TerraformOutputsWritten,
        /// Every health check passed.
        HealthChecksSucceeded,
        /// The plan has no changes.
        TerraformPlannedNoChanges,
        /// A run is in progress.
        Progressing,
        /// The plan has changes; waiting for approval unless auto-approved.
        TerraformPlannedWithChanges,
        /// A plan that may be applied (approved, `approvePlan: auto` or `spec.force`) is being
        /// applied: from the run that takes up the approval (which makes the plan again to
        /// check it still does the same) until the apply ends. Nothing to approve meanwhile.
        TerraformApplying,
        /// A dependency is not Ready at its current generation.
        DependencyNotReady,
        /// `terraform plan` failed.
        TFExecPlanFailed,
        /// `terraform apply` failed.
        TFExecApplyFailed,
        /// A Terraform command ran past `spec.timeout` (or the manager's
        /// `--default-timeout`) and was stopped: interrupted as Ctrl-C does, killed after the
        /// grace period if it did not end. The message names the command; what an
        /// interrupted apply created is in the state, and the run is retried with the backoff.
        TerraformTimedOut,
        /// A user stopped the run (`tfops cancel`, the Argo CD cancel action, the
        /// `infra.argocd.io/cancel` annotation); the message says who. The next run starts at
        /// `spec.interval`, not with the backoff.
        RunCancelled,
        /// The source could not be resolved or fetched.
        SourceFetchFailed,
        /// Something the source names does not exist (the repository, its ref or commit, a
        /// credentials Secret, a local directory): retried at `spec.interval`, not with the
        /// quick backoff, since only a person can create it.
        SourceNotFound,
        /// The state lock is held by someone else.
        LockHeld,
        /// The infrastructure no longer matches the state.
        DriftDetected,
        /// A health check failed.
        HealthChecksFailed,
        /// `spec.remediation.retries` failed runs in a row; waiting for a change.
        RetryLimitReached,
        /// Credentials were refused (source, Kubernetes API).
        AccessDenied,
        /// `spec.suspend` is true.
        Suspended,
        /// The runner Pod did not become ready or could not be reached.
        RunnerConnectionFailed,
        /// A ResourceQuota has no room for the runner Pod: the object waits in its
        /// namespace's queue (`Ready=Unknown`, no failure counted; the condition's
        /// `lastTransitionTime` is when the wait began). The name is what metrics count.
        RunnerQuotaExhausted,
        /// `terraform init` failed.
        TFExecInitFailed,
        /// The workspace could not be selected or created.
        SelectWorkspaceFailed,
        /// `terraform output` failed.
        TFExecOutputFailed,
        /// `terraform destroy` failed.
        TFExecDestroyFailed,
        /// Destroy succeeded.
        TerraformDestroySucceed,
        /// The outputs Secret could not be written.
        OutputsWritingFailed,
        /// Variables could not be generated (a missing Secret or key, bad JSON).
        VarsGenerationFailed,
        /// The source archive could not be built or uploaded.
        ArtifactFailed,
        /// A plan was refused by validation (policies).
        ValidationFailed,
        /// The refresh-only plan for drift detection failed.
        DriftDetectionFailed,
        /// A re-plan was requested with the `infra.argocd.io/replan` annotation.
        ReplanRequested,
        /// Deletion waits until the objects depending on this one are gone.
        DeletionBlockedByDependants,
        /// The spec is invalid; the message lists every problem.
        InvalidSpec,
        /// The plan could not be stored for approval.
        PlanStorageFailed,
        /// `terraform show` of the plan failed.
        TFExecShowFailed,
        /// Releasing the state lock failed.
        ForceUnlockFailed,
        /// The state lock is held by this object's own runner, which is proved gone (the lock
        /// names the runner Pod's host, where nothing else runs): it is released.
        LockHolderGone,
        /// Removing plans, outputs or state during deletion failed.
        DeletionFailed,
        /// The object is being deleted.
        Finalizing,
        /// An apply recorded as under way was interrupted and its runner is gone: its result
        /// is unknown, and the run plans again from the state.
        ApplyInterrupted,
        /// The state Secret nears the 1 MiB a Secret holds, and the backend (OpenTofu's)
        /// cannot split it: the next applies may fail to save state.
        StateNearSizeLimit,
        /// An approved or automatic plan waits: `spec.applyWindows` lets no apply start now
        /// (the message names the next opening).
        ApplyWindowClosed,
    }
);

impl Serialize for Reason {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// Sets (or replaces) the condition of `kind`. `lastTransitionTime` is kept when the status
/// does not change, so a re-written condition does not look like a new transition.
pub fn set(
    conditions: &mut Vec<Condition>,
    kind: ConditionType,
    status: ConditionStatus,
    reason: Reason,
    message: impl Into<String>,
    generation: i64,
    now: jiff::Timestamp,
) {
    let message = message.into();
    match conditions.iter_mut().find(|c| c.type_ == kind.as_str()) {
        Some(c) => {
            if c.status != status {
                c.last_transition_time = now;
            }
            c.status = status;
            c.reason = reason.as_str().to_string();
            c.message = message;
            c.observed_generation = generation;
        }
        None => conditions.push(Condition {
            type_: kind.as_str().to_string(),
            status,
            reason: reason.as_str().to_string(),
            message,
            last_transition_time: now,
            observed_generation: generation,
        }),
    }
}

/// Removes the condition of `kind`, if present.
pub fn remove(conditions: &mut Vec<Condition>, kind: ConditionType) {
    conditions.retain(|c| c.type_ != kind.as_str());
}

/// The condition of `kind`, if present.
pub fn find(conditions: &[Condition], kind: ConditionType) -> Option<&Condition> {
    conditions.iter().find(|c| c.type_ == kind.as_str())
}
