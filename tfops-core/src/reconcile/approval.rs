//! Approval: a plan is applied only when `approvePlan: auto`, `spec.force`, or a human
//! approved exactly this plan after seeing it pending (see [`crate::api::annotations`];
//! [`super::plan::record_pending`] records what a human has seen).
//!
//! > Without approval the run stops here; Argo CD shows Suspended. With approvePlan: auto,
//! > spec.force, or a matching plan ID the controller re-plans once more (to make sure the
//! > approved plan is still current) and applies.

use super::plan::Planned;
use super::run::{End, Run, Stop};
use crate::api::{ApprovePlan, ValidSpec, annotations};
use crate::conditions::{ConditionStatus, ConditionType, Reason};

/// Goes on only when the plan may be applied; otherwise ends the run waiting for a human.
pub(super) fn approval(
    run: &mut Run<'_>,
    valid: &ValidSpec,
    plan_id: &str,
    planned: &Planned<'_>,
) -> Result<(), Stop> {
    let (status, message) = match judge(run, valid, plan_id, planned.digest) {
        Approval::Approved => return Ok(()),
        // Planning is all that was asked: done, not waiting.
        Approval::PlanOnly => (
            ConditionStatus::True,
            format!("{}; planOnly: never applied", planned.label),
        ),
        Approval::Waiting(message) => (ConditionStatus::Unknown, message),
    };
    run.set(
        ConditionType::Ready,
        status,
        Reason::TerraformPlannedWithChanges,
        message,
    );
    Err(Stop::End(End::Success))
}

enum Approval {
    Approved,
    Waiting(String),
    PlanOnly,
}

/// Whether this fresh plan may be applied. With `approvePlan: auto` or `spec.force`, yes; with
/// `planOnly`, never. Otherwise only when a human approved it after seeing it pending: the
/// plan with this id and content was pending before this run, and `spec.approvePlan` or the
/// approve annotation was changed to its id since it became pending (see
/// [`crate::api::annotations`]). An approved plan whose re-made content differs is not applied:
/// it becomes the new pending plan ([`super::plan::record_pending`] has recorded the approvals
/// as seen).
fn judge(run: &Run<'_>, valid: &ValidSpec, plan_id: &str, digest: &str) -> Approval {
    let object = &run.s.object;
    let spec = &object.spec;
    if spec.plan_only {
        return Approval::PlanOnly;
    }
    if spec.force || valid.approve == ApprovePlan::Auto {
        return Approval::Approved;
    }
    let start = run.start();
    let how = format!(
        "review it, then set the {} annotation to {plan_id}@<a new token> with a new {} value, or change spec.approvePlan to {plan_id}",
        annotations::APPROVE,
        annotations::RECONCILE
    );
    let was_pending = start.plan.pending == plan_id && !start.plan.pending_digest.is_empty();
    let by_spec = matches!(&valid.approve, ApprovePlan::Plan(id) if id == plan_id)
        .then_some(spec.approve_plan != start.plan.seen_approve_plan);
    let annotation = object.annotation(annotations::APPROVE);
    let by_annotation = annotation
        .filter(|v| annotations::approved_plan_id(v) == plan_id)
        .map(|v| v != start.plan.seen_approval);
    let given = by_spec == Some(true) || by_annotation == Some(true);
    if was_pending && given {
        if start.plan.pending_digest == digest {
            return Approval::Approved;
        }
        return Approval::Waiting(format!(
            "plan {plan_id} changed since it was approved (it would now do something else): nothing was applied; {how}"
        ));
    }
    if given || by_spec.is_some() || by_annotation.is_some() {
        let what = if was_pending {
            "was given before this plan was made, or was used already"
        } else {
            "was given before this plan was made"
        };
        return Approval::Waiting(format!(
            "plan {plan_id} awaits approval: the approval present {what}, so it does not count; {how}"
        ));
    }
    let other = match (&valid.approve, annotation) {
        (_, Some(v)) => Some(v),
        (ApprovePlan::Plan(id), None) => Some(id.as_str()),
        _ => None,
    };
    match other {
        Some(v) => Approval::Waiting(format!(
            "approval {v} does not match the pending plan {plan_id}; {how}"
        )),
        None => Approval::Waiting(format!("plan {plan_id} awaits approval: {how}")),
    }
}
