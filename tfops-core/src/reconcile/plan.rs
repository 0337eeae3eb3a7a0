//! Plan: what Terraform would change, stored for approval, checked by the plan policies.
//!
//! > Plan. plan -out produces a binary plan stored in Secret `tfplan-<workspace>-<name>` and a
//! > human-readable copy in ConfigMap `tfplan-<workspace>-<name>-readable`. The plan ID
//! > (`plan-<ref>-<sha>`) goes to status.plan.pending. Without approval the run stops here.

use super::model::{Outcome, PlanStep, Step, StepFailure};
use super::run::{Done, End, Run, Stop, unexpected};
use crate::api::{PolicyViolation, annotations};
use crate::conditions::{ConditionStatus, ConditionType, Reason};
use crate::ports::{PlanKind, PlanSummary, Revision};

/// A plan with changes, as the run sees it after the `Plan` step.
pub(super) struct Planned<'a> {
    pub(super) summary: PlanSummary,
    pub(super) digest: &'a str,
    pub(super) violations: &'a [PolicyViolation],
    /// `plan <id> (<summary>) at <revision>`, for messages.
    pub(super) label: String,
}

/// Makes the plan (stored under `plan_id` when it has changes, and pending). Gives `None` for
/// a plan without changes, which [`no_changes`] records. A plan a `Deny` rule of a plan
/// policy forbids ends the run: it is never applied.
pub(super) fn plan<'a>(
    run: &mut Run<'a>,
    revision: &Revision,
    plan_id: &str,
    drift: bool,
) -> Result<Option<Planned<'a>>, Stop> {
    let step = Step::Plan(plan_step(run, plan_kind(run), plan_id, drift));
    let Made {
        has_changes,
        summary,
        digest,
        violations,
        at,
    } = made(run, step, ConditionType::Plan)?;
    run.plan_made();
    run.st.last_planned_revision = Some(revision.to_string());
    run.st.last_plan_at = Some(at);
    run.st.stored_plan_workspace = has_changes.then(|| run.s.object.spec.workspace.clone());
    if !has_changes {
        return Ok(None);
    }
    let label = format!("plan {plan_id} ({summary}) at {revision}");
    record_pending(run, plan_id, digest, drift);
    run.set(
        ConditionType::Plan,
        ConditionStatus::True,
        Reason::TerraformPlannedWithChanges,
        label.clone(),
    );
    run.st.policy_violations = violations.to_vec();
    if let Some(failure) = denied(violations, |list| {
        format!("plan {plan_id} is denied by policy: {list}")
    }) {
        return Err(run.fail(ConditionType::Plan, failure));
    }
    Ok(Some(Planned {
        summary,
        digest,
        violations,
        label,
    }))
}

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

/// What a `Plan` or `VerifyPlan` step made.
pub(super) struct Made<'a> {
    pub(super) has_changes: bool,
    pub(super) summary: PlanSummary,
    /// What the plan would do, digested (empty without changes).
    pub(super) digest: &'a str,
    pub(super) violations: &'a [PolicyViolation],
    /// When the step ended.
    pub(super) at: jiff::Timestamp,
}

/// The plan `step` (a `Plan` or `VerifyPlan`) made, once performed; a failure is the `phase`
/// condition's. Anything but a plan recorded for it is a driver's bug, never "no changes".
pub(super) fn made<'a>(
    run: &mut Run<'a>,
    step: Step,
    phase: ConditionType,
) -> Result<Made<'a>, Stop> {
    let kind = step.kind();
    match run.need_phase(step, phase)? {
        (
            Outcome::Planned {
                has_changes,
                summary,
                digest,
                violations,
            },
            at,
        ) => Ok(Made {
            has_changes: *has_changes,
            summary: *summary,
            digest,
            violations,
            at,
        }),
        _ => Err(unexpected(kind)),
    }
}

/// The plan step of `kind` in the session open now: who stores it, and the earlier
/// workspace's plan it replaces.
pub(super) fn plan_step(run: &Run<'_>, kind: PlanKind, plan_id: &str, drift: bool) -> PlanStep {
    let workspace = &run.s.object.spec.workspace;
    PlanStep {
        kind,
        plan_id: plan_id.to_string(),
        drift,
        writer: run.writer(),
        replaces: run
            .start()
            .stored_plan_workspace
            .clone()
            .filter(|old| old != workspace),
    }
}

/// A normal plan, or a destroy plan for `spec.destroy`.
pub(super) fn plan_kind(run: &Run<'_>) -> PlanKind {
    if run.s.object.spec.destroy {
        PlanKind::Destroy
    } else {
        PlanKind::Normal
    }
}

/// A plan without changes: nothing pending, and the revision counts as applied (or, for
/// `spec.destroy`, everything is gone and the run ends). `inputs`: the digest of the inputs
/// it was made from, which count as applied too (`None` when the apply runner's plan found
/// nothing left to do).
pub(super) fn no_changes(
    run: &mut Run<'_>,
    revision: &Revision,
    inputs: Option<&str>,
) -> Result<Done, Stop> {
    run.st.policy_violations.clear();
    run.clear_pending();
    run.set(
        ConditionType::Plan,
        ConditionStatus::True,
        Reason::TerraformPlannedNoChanges,
        format!("no changes at {revision}"),
    );
    if run.s.object.spec.destroy {
        run.resources_gone();
        run.set(
            ConditionType::Ready,
            ConditionStatus::True,
            Reason::TerraformDestroySucceed,
            "nothing left to destroy",
        );
        return Err(Stop::End(End::Success));
    }
    // The infrastructure matches this revision: it counts as applied, so the next interval
    // checks drift instead of planning again.
    run.st.last_applied_revision = Some(revision.to_string());
    if let Some(inputs) = inputs {
        run.st.last_applied_inputs_digest = Some(inputs.to_string());
    }
    Ok(Done {
        reason: Reason::TerraformPlannedNoChanges,
        message: format!("no changes at {revision}"),
    })
}

/// The failure for a plan with `Deny` violations (`policy/rule: message (addresses)`, joined
/// by `; ` into `message`), or `None` when nothing denies it.
pub(super) fn denied(
    violations: &[PolicyViolation],
    message: impl FnOnce(&str) -> String,
) -> Option<StepFailure> {
    let list = crate::policy::denials(violations)?;
    Some(StepFailure {
        reason: Reason::ValidationFailed,
        message: super::failure::trim_message(&message(&list)),
        lock: None,
        lock_holder_gone: false,
    })
}
