//! Approval: a plan is applied only when `approvePlan: auto`, `spec.force`, or a human
//! approved exactly this plan after seeing it pending (see [`crate::api::annotations`];
//! [`super::plan::record_pending`] records what a human has seen).
//!
//! > Without approval the run stops here; Argo CD shows Suspended. With approvePlan: auto,
//! > spec.force, or a matching plan ID the controller re-plans once more (to make sure the
//! > approved plan is still current) and applies.
//!
//! From the moment a run takes up an approval until its apply ends, `Ready` says the plan is
//! being applied (reason `TerraformApplying`), not that it awaits approval.

use super::plan::Planned;
use super::run::{End, Run, Stop};
use crate::api::{ApprovePlan, ValidSpec, annotations};
use crate::conditions::{ConditionStatus, ConditionType, Reason};

/// Goes on only when the plan may be applied, giving how it was approved (for the status
/// while it is applied); otherwise ends the run waiting for a human.
pub(super) fn approval(
    run: &mut Run<'_>,
    valid: &ValidSpec,
    plan_id: &str,
    planned: &Planned<'_>,
) -> Result<String, Stop> {
    let (status, message) = match judge(run, valid, plan_id, planned) {
        Approval::Approved(how) => return Ok(how),
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

/// At the start of a run: when a human approved the pending plan since it became pending,
/// `Ready` says so at once (the run makes the plan again and applies it if it still does
/// the same), instead of "awaits approval" while that plan is made.
pub(super) fn taken_up(run: &mut Run<'_>, valid: &ValidSpec) {
    let start = run.start();
    let pending = start.plan.pending.as_str();
    // Not when no apply could start anyway: the run ends waiting for the window (Ready says
    // so), and saying "applying" first would flip Argo CD's health at every run.
    if pending.is_empty()
        || start.plan.pending_digest.is_empty()
        || run.s.object.spec.plan_only
        || !super::window::open_now(run)
    {
        return;
    }
    if let Some(how) = given(run, valid, pending) {
        run.set(
            ConditionType::Ready,
            ConditionStatus::Unknown,
            Reason::TerraformApplying,
            format!(
                "plan {pending} was {how}: making it again to check it still does the same, then applying it"
            ),
        );
    }
}

/// `Ready` and `Reconciling` while `planned`, which may be applied (`how`: by whom), is
/// applied: no longer awaiting approval.
pub(super) fn applying(run: &mut Run<'_>, planned: &Planned<'_>, how: &str) {
    run.set(
        ConditionType::Ready,
        ConditionStatus::Unknown,
        Reason::TerraformApplying,
        format!("applying {}, {how}", planned.label),
    );
    run.set(
        ConditionType::Reconciling,
        ConditionStatus::True,
        Reason::TerraformApplying,
        format!("applying {}", planned.label),
    );
}

enum Approval {
    /// How: "approved with …", for the status while it is applied.
    Approved(String),
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
fn judge(run: &Run<'_>, valid: &ValidSpec, plan_id: &str, planned: &Planned<'_>) -> Approval {
    let object = &run.s.object;
    let spec = &object.spec;
    if spec.plan_only {
        return Approval::PlanOnly;
    }
    if spec.force {
        return Approval::Approved("applied because spec.force is set".into());
    }
    if valid.approve == ApprovePlan::Auto {
        return Approval::Approved("approved by approvePlan: auto".into());
    }
    let start = run.start();
    let how = format!(
        "review it (tfops plan show, or the Terraform tab in Argo CD), then approve it: Argo CD's approve action, tfops approve, the {} annotation set to {plan_id}@<a new token> with a new {} value, or spec.approvePlan: {plan_id}",
        annotations::APPROVE,
        annotations::RECONCILE
    );
    let was_pending = start.plan.pending == plan_id && !start.plan.pending_digest.is_empty();
    if was_pending && let Some(given) = given(run, valid, plan_id) {
        if start.plan.pending_digest == planned.digest {
            return Approval::Approved(given);
        }
        return Approval::Waiting(format!(
            "plan {plan_id} changed since it was approved (it would now do {}): nothing was applied; {how}",
            planned.summary
        ));
    }
    let annotation = object.annotation(annotations::APPROVE);
    let names_it = annotation.is_some_and(|v| annotations::approved_plan_id(v) == plan_id)
        || matches!(&valid.approve, ApprovePlan::Plan(id) if id == plan_id);
    if names_it {
        let what = if was_pending {
            "was given before this plan was made, or was used already"
        } else {
            "was given before this plan was made"
        };
        return Approval::Waiting(format!(
            "{} awaits approval: the approval present {what}, so it does not count; {how}",
            planned.label
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
        None => Approval::Waiting(format!("{} awaits approval: {how}", planned.label)),
    }
}

/// How a human approved `plan_id` since it became pending, when they did: `spec.approvePlan`
/// changed to its id, or the approve annotation changed to a value naming it (see
/// [`crate::api::annotations`]). Whether it was pending is the caller's question.
fn given(run: &Run<'_>, valid: &ValidSpec, plan_id: &str) -> Option<String> {
    let object = &run.s.object;
    let start = run.start();
    let by_spec = matches!(&valid.approve, ApprovePlan::Plan(id) if id == plan_id)
        && object.spec.approve_plan != start.plan.seen_approve_plan;
    if let Some(value) = object.annotation(annotations::APPROVE)
        && annotations::approved_plan_id(value) == plan_id
        && value != start.plan.seen_approval
    {
        // The approve action and `tfops approve` write the time as the token.
        let when = value
            .split_once('@')
            .and_then(|(_, token)| token.trim().parse::<jiff::Timestamp>().ok())
            .map_or_else(|| format!(" ({value})"), |t| format!(" at {t}"));
        return Some(format!(
            "approved with the {} annotation{when}",
            annotations::APPROVE
        ));
    }
    by_spec.then(|| "approved in spec.approvePlan".to_string())
}
