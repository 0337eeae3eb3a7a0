//! The ports: what the reconciler's driver needs from the world, as small async traits.
//!
//! `tfops-kube` implements them on the Kubernetes API, `tfops-runner` implements the runner
//! session over gRPC, local mode implements them on files; [`crate::testing`] has an in-memory
//! fake of each. Every method reports failure as a [`PortError`], whose variant (not its text)
//! decides the condition reason a user sees.

mod approvals;
mod effects;
mod inputs;
mod runner;
mod source;
mod stores;

pub use approvals::PullApproval;
pub use effects::{
    Clock, Event, EventSink, EventType, HealthChecker, ObjectWriter, PolicySource,
    ResolvedHealthCheck, SystemClock,
};
pub use inputs::{InputsPort, ResolvedFile, ResolvedInputs};
pub use runner::{
    OutputValue, OutputsRequest, PlanKind, PlanRequest, PlanResult, PlanSummary, PlanToStore,
    RunnerPort, RunnerSession, SetupRequest, ShownPlan,
};
pub use source::{Artifact, Revision, SourcePort};
pub use stores::{
    ConfigMapData, OutputsSink, PlanStore, SensitiveOutputs, StateAdmin, StoredPlan, output_text,
    select_outputs, write_outputs,
};

use std::sync::Arc;

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
    /// A Terraform command ran past its timeout (`spec.timeout`) and was stopped; the text
    /// names the command, the timeout and how it was stopped.
    #[error("{0}")]
    TimedOut(String),
    /// A user stopped the run ([`crate::api::annotations::CANCEL`]); the text says who and
    /// what was stopped.
    #[error("{0}")]
    Stopped(String),
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
