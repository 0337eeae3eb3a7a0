//! Drift detection: when nothing changed since the last apply, does the infrastructure still
//! match the state?
//!
//! > Drift detection. When nothing changed since the last apply, a refresh-only plan checks
//! > the real infrastructure against the state. No drift → done (Ready/NoDrift). Drift →
//! > DriftDetected; in auto mode the run continues to re-plan and apply, otherwise it stops
//! > and reports.

use super::model::{Outcome, Step, StepKind};
use super::run::{End, Run, Stop, unexpected};
use super::trigger::replan_requested;
use crate::api::{ApprovePlan, DriftAction, ValidSpec};
use crate::conditions::{ConditionStatus, ConditionType, Reason};
use crate::ports::Revision;

/// When nothing changed since the last apply (spec, revision, resolved inputs), a
/// refresh-only plan checks the infrastructure. Gives whether the run goes on to plan because
/// of drift (`false`: it plans because something changed); stops the run otherwise.
pub(super) fn drift(
    run: &mut Run<'_>,
    valid: &ValidSpec,
    revision: &Revision,
    inputs: &str,
) -> Result<bool, Stop> {
    let spec = &run.s.object.spec;
    if !unchanged(run, revision, inputs) || spec.disable_drift_detection {
        return Ok(false);
    }
    let (outcome, at) = run.need(Step::DetectDrift)?;
    let Outcome::DriftChecked { drifted } = outcome else {
        return Err(unexpected(StepKind::DetectDrift));
    };
    run.plan_made();
    if drifted.is_empty() {
        run.set(
            ConditionType::Ready,
            ConditionStatus::True,
            Reason::NoDrift,
            format!("no drift at {revision}"),
        );
        return Err(Stop::End(End::Success));
    }
    run.st.last_drift_detected_at = Some(at);
    let list = drifted.join(", ");
    let remediate =
        valid.approve == ApprovePlan::Auto && spec.drift_action == DriftAction::Remediate;
    let message = if remediate {
        format!("drift detected in {list}; re-planning to correct it")
    } else if spec.drift_action == DriftAction::Report {
        format!("drift detected in {list} (driftAction is Report)")
    } else {
        format!(
            "drift detected in {list} (approvePlan is not auto; request a re-plan to correct it)"
        )
    };
    run.set(
        ConditionType::Ready,
        ConditionStatus::False,
        Reason::DriftDetected,
        message,
    );
    if remediate {
        Ok(true)
    } else {
        Err(Stop::End(End::Success))
    }
}

/// Nothing changed since the last apply: the spec's generation, the revision (or nothing of
/// the object's in a new one: [`super::source`] then counts it as applied), the resolved
/// inputs; no plan pending, no failure since, no re-plan asked for, no destroy.
fn unchanged(run: &Run<'_>, revision: &Revision, inputs: &str) -> bool {
    let start = run.start();
    !run.s.object.spec.destroy
        && !replan_requested(run)
        && start.observed_generation == run.generation()
        && run.st.last_applied_revision.as_deref() == Some(revision.to_string().as_str())
        && start.last_applied_inputs_digest.as_deref() == Some(inputs)
        && start.plan.pending.is_empty()
        && start.reconciliation_failures == 0
}
