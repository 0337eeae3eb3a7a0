//! Approval: a plan is applied only when `approvePlan: auto`, `spec.force`, or a human
//! approved exactly this plan after seeing it pending (see [`crate::api::annotations`]).

use super::flow::{End, Flow, Run, Stop};
use super::run::Planned;
use crate::api::{ApprovePlan, ValidSpec, annotations};
use crate::conditions::{ConditionStatus, ConditionType, Reason};

/// Records the plan as pending. A plan that is new or would do something else than the one
/// pending before is a new pending plan: the approvals present now were given before it
/// existed, so their values are recorded as seen and never approve it.
pub(super) fn record_pending(run: &mut Run<'_>, plan_id: &str, digest: &str, drift: bool) {
    let start = run.start();
    let object = &run.s.object;
    let spec_value = object.spec.approve_plan.as_str();
    let annotation_value = object.annotation(annotations::APPROVE).unwrap_or_default();
    if start.plan.pending != plan_id || start.plan.pending_digest != digest {
        run.st.plan.pending_generation = run.generation();
        run.st.plan.pending_digest = digest.to_string();
        run.st.plan.seen_approve_plan = spec_value.to_string();
        run.st.plan.seen_approval = annotation_value.to_string();
    } else {
        // The same plan is still pending. A value seen now that does not name it (cleared, or
        // another id) is recorded, so that changing it to this plan's id later approves.
        if spec_value.trim() != plan_id {
            run.st.plan.seen_approve_plan = spec_value.to_string();
        }
        if annotations::approved_plan_id(annotation_value) != plan_id {
            run.st.plan.seen_approval = annotation_value.to_string();
        }
    }
    run.st.plan.pending = plan_id.to_string();
    run.st.plan.is_destroy_plan = object.spec.destroy;
    run.st.plan.is_drift_detection_plan = drift;
}

/// Goes on only when the plan may be applied; otherwise ends the run waiting for a human.
pub(super) fn approve(
    run: &mut Run<'_>,
    valid: &ValidSpec,
    plan_id: &str,
    planned: &Planned<'_>,
) -> Flow<()> {
    let (status, message) = match approval(run, valid, plan_id, planned.digest) {
        Approval::Approved => return Flow::Go(()),
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
    Flow::Stop(Stop::End(End::Success))
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
/// it becomes the new pending plan ([`record_pending`] has recorded the approvals as seen).
fn approval(run: &Run<'_>, valid: &ValidSpec, plan_id: &str, digest: &str) -> Approval {
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
