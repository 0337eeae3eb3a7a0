//! What a finished run ended as, for `tfops_runs_total`: a result of a few values and the
//! `Ready` reason, both bounded (the reasons are tfops' own).

use tfops_core::conditions::{self, ConditionStatus, ConditionType, Reason};
use tfops_core::reconcile::{Outcome, RunReport, StepKind};

/// `Ready=False` reasons that say a run waits for something else, not that it failed.
const WAITING: &[Reason] = &[
    Reason::DependencyNotReady,
    Reason::DeletionBlockedByDependants,
    Reason::Suspended,
];

/// A reconcile is a run when it performed a step beyond the finalizer (as the run history
/// counts runs: a pass that found nothing due, or a suspended object's release of its
/// runners, is none).
fn is_run(kind: StepKind) -> bool {
    !matches!(
        kind,
        StepKind::AddFinalizer
            | StepKind::RemoveFinalizer
            | StepKind::ReleaseRunners
            | StepKind::Done
    )
}

/// The result of the run `report` records, with `Ready`'s reason; `None` when the reconcile
/// ran nothing.
///
/// `failed`: `Ready=False` for a failure; `drift_detected`: drift found and reported, not
/// corrected; `applied`: an apply (or destroy) succeeded, or one recorded before a restart was
/// attached to; `awaiting_approval`: a plan with changes waits; `planned`: a plan with changes
/// under `planOnly`; `no_changes`: nothing to do (no changes, no drift); `deleted`: the
/// object was released for deletion without applying; `waiting`: blocked by something else
/// (a dependency, dependants, suspension, a runner Pod its quota has no room for:
/// `Ready=Unknown`, `RunnerQuotaExhausted`).
pub(super) fn result(report: &RunReport) -> Option<(&'static str, &'static str)> {
    // A look at a new revision that changed nothing of the object's is no run.
    if !report.records.iter().any(|r| is_run(r.step)) || tfops_core::history::looked_only(report) {
        return None;
    }
    let status = &report.status;
    let ready = conditions::find(&status.conditions, ConditionType::Ready);
    let reason = ready.and_then(|c| c.reason_code());
    let applied = report
        .records
        .iter()
        .any(|r| matches!(r.result, Ok(Outcome::Applied | Outcome::Attached { .. })));
    let released = super::objects::released(report);
    let result = match (ready.map(|c| c.status), reason) {
        (Some(ConditionStatus::False), Some(Reason::DriftDetected)) => "drift_detected",
        (Some(ConditionStatus::False), Some(r)) if WAITING.contains(&r) => "waiting",
        (Some(ConditionStatus::False), _) => "failed",
        _ if applied => "applied",
        _ if released => "deleted",
        (Some(ConditionStatus::Unknown), Some(Reason::TerraformPlannedWithChanges))
            if !status.plan.pending.is_empty() =>
        {
            "awaiting_approval"
        }
        (Some(ConditionStatus::True), Some(Reason::TerraformPlannedWithChanges)) => "planned",
        (Some(ConditionStatus::True), _) => "no_changes",
        _ => "waiting",
    };
    Some((result, reason.map_or("", Reason::as_str)))
}
