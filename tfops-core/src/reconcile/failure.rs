//! How a port's error becomes what the user sees: a condition reason and a message.

use super::model::{StepFailure, StepKind};
use crate::conditions::Reason;
use crate::ports::PortError;

/// The longest message put on a condition; Terraform diagnostics can be long, and the end of
/// one usually says least.
pub const MAX_MESSAGE: usize = 2000;

/// The failure of `step` with `error`. The variant of the error decides the reason where it
/// is specific (refused credentials, quota, a held lock); otherwise the step does.
pub fn failure(step: StepKind, sub: SubStep, error: &PortError) -> StepFailure {
    let reason = match (error, step) {
        (PortError::StateLocked { .. }, _) => Reason::LockHeld,
        (PortError::TimedOut(_), _) => Reason::TerraformTimedOut,
        (PortError::Stopped(_), _) => Reason::RunCancelled,
        (PortError::AccessDenied(_), _) => Reason::AccessDenied,
        (PortError::TlsRefused(_), _) => Reason::RunnerConnectionFailed,
        (PortError::QuotaExhausted(_), StepKind::StartRunner | StepKind::StartApplyRunner) => {
            Reason::RunnerQuotaExhausted
        }
        (PortError::NotFound(_), StepKind::ResolveSource | StepKind::FetchSource) => {
            Reason::SourceNotFound
        }
        (_, StepKind::ResolveSource) => Reason::SourceFetchFailed,
        (_, StepKind::FetchSource | StepKind::CompareSource) => Reason::SourceFetchFailed,
        (_, StepKind::StartRunner | StepKind::StartApplyRunner) => Reason::RunnerConnectionFailed,
        (_, StepKind::Setup | StepKind::ApplySetup) => match sub {
            SubStep::Inputs => Reason::VarsGenerationFailed,
            SubStep::Upload => Reason::ArtifactFailed,
            SubStep::Init => Reason::TFExecInitFailed,
            SubStep::Workspace => Reason::SelectWorkspaceFailed,
            _ => Reason::TFExecInitFailed,
        },
        // A probe never fails (it finds the runner, or it cannot tell); counted as the lock.
        (_, StepKind::ForceUnlock | StepKind::ProbeRunner) => Reason::ForceUnlockFailed,
        (_, StepKind::ReleaseRunners) => Reason::RunnerConnectionFailed,
        (_, StepKind::DetectDrift) => Reason::DriftDetectionFailed,
        (_, StepKind::Plan | StepKind::VerifyPlan) => match sub {
            SubStep::Show => Reason::TFExecShowFailed,
            SubStep::Store => Reason::PlanStorageFailed,
            SubStep::Policy => Reason::ValidationFailed,
            _ => Reason::TFExecPlanFailed,
        },
        (_, StepKind::Apply) => Reason::TFExecApplyFailed,
        (PortError::Unavailable(_), StepKind::Attach) => Reason::RunnerConnectionFailed,
        (_, StepKind::Attach) => Reason::TFExecApplyFailed,
        (_, StepKind::Outputs) => match sub {
            SubStep::WriteOutputs => Reason::OutputsWritingFailed,
            _ => Reason::TFExecOutputFailed,
        },
        (_, StepKind::HealthChecks) => Reason::HealthChecksFailed,
        (
            _,
            StepKind::Cleanup
            | StepKind::DeletePlansAndOutputs
            | StepKind::DeleteState
            | StepKind::RemoveFinalizer
            | StepKind::AddFinalizer
            | StepKind::Done,
        ) => Reason::DeletionFailed,
    };
    let (lock, lock_holder_gone) = match error {
        PortError::StateLocked {
            lock_id,
            holder,
            holder_gone,
        } => (Some((lock_id.clone(), holder.clone())), *holder_gone),
        _ => (None, false),
    };
    let message = match error {
        // Said as the queue says it: "waiting for a runner Pod: <this>".
        PortError::QuotaExhausted(why) if reason == Reason::RunnerQuotaExhausted => {
            trim_message(why)
        }
        _ => trim_message(&format!("{}: {error}", sub.label())),
    };
    StepFailure {
        reason,
        message,
        lock,
        lock_holder_gone,
    }
}

/// The part of a step that failed, for steps made of several commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)] // each names the command in its label
pub enum SubStep {
    Whole,
    Resolve,
    Fetch,
    Start,
    Inputs,
    Upload,
    Init,
    Workspace,
    Unlock,
    RefreshPlan,
    Plan,
    Show,
    Store,
    Policy,
    Apply,
    Output,
    Inventory,
    WriteOutputs,
    Health,
    Cleanup,
    Delete,
}

impl SubStep {
    /// The start of a failure's message; the binary's commands are named without the binary
    /// (`plan: Error: …`), which may be terraform or tofu.
    fn label(self) -> &'static str {
        match self {
            SubStep::Whole => "failed",
            SubStep::Resolve => "resolving the source revision",
            SubStep::Fetch => "fetching the source",
            SubStep::Start => "starting the runner",
            SubStep::Inputs => "resolving variables and files",
            SubStep::Upload => "uploading the source to the runner",
            SubStep::Init => "init",
            SubStep::Workspace => "selecting the workspace",
            SubStep::Unlock => "force-unlock",
            SubStep::RefreshPlan => "refresh-only plan",
            SubStep::Plan => "plan",
            SubStep::Show => "show",
            SubStep::Store => "storing the plan",
            SubStep::Policy => "evaluating plan policies",
            SubStep::Apply => "apply",
            SubStep::Output => "output",
            SubStep::Inventory => "reading the state inventory",
            SubStep::WriteOutputs => "writing outputs",
            SubStep::Health => "health check",
            SubStep::Cleanup => "cleaning up the runner",
            SubStep::Delete => "deleting",
        }
    }
}

/// Trims a message to [`MAX_MESSAGE`] bytes on a char boundary, keeping its beginning (where
/// Terraform puts the error summary).
pub fn trim_message(message: &str) -> String {
    let message = message.trim();
    if message.len() <= MAX_MESSAGE {
        return message.to_string();
    }
    let mut cut = MAX_MESSAGE;
    while !message.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}… (truncated)", &message[..cut])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_map_to_the_reasons_users_know() {
        let tf = PortError::Terraform("Error: Invalid block".into());
        assert_eq!(
            failure(StepKind::Plan, SubStep::Plan, &tf).reason,
            Reason::TFExecPlanFailed
        );
        assert_eq!(
            failure(StepKind::Setup, SubStep::Init, &tf).reason,
            Reason::TFExecInitFailed
        );
        assert_eq!(
            failure(
                StepKind::Setup,
                SubStep::Inputs,
                &PortError::NotFound("secret x".into())
            )
            .reason,
            Reason::VarsGenerationFailed
        );
        assert_eq!(
            failure(
                StepKind::ResolveSource,
                SubStep::Resolve,
                &PortError::AccessDenied("401".into())
            )
            .reason,
            Reason::AccessDenied
        );
        assert_eq!(
            failure(
                StepKind::StartRunner,
                SubStep::Start,
                &PortError::QuotaExhausted("pods".into())
            )
            .reason,
            Reason::RunnerQuotaExhausted
        );
        // A refused certificate is the runner connection's failure at whichever call it shows.
        let refused = PortError::TlsRefused(
            "the runner refused the controller's certificate: expired or not yet valid".into(),
        );
        let f = failure(StepKind::Setup, SubStep::Upload, &refused);
        assert_eq!(f.reason, Reason::RunnerConnectionFailed);
        assert!(
            f.message
                .contains("refused the controller's certificate: expired")
        );
        let locked = PortError::StateLocked {
            lock_id: "abc".into(),
            holder: "ci".into(),
            holder_gone: false,
        };
        let f = failure(StepKind::Plan, SubStep::Plan, &locked);
        assert_eq!(
            (f.reason, f.lock),
            (Reason::LockHeld, Some(("abc".into(), "ci".into())))
        );
        assert!(
            failure(StepKind::Apply, SubStep::Apply, &tf)
                .message
                .contains("Invalid block")
        );
    }

    #[test]
    fn long_messages_are_trimmed_not_lost() {
        let long = "é".repeat(3000);
        let t = trim_message(&long);
        assert!(t.len() < long.len() && t.ends_with("(truncated)"));
    }
}
