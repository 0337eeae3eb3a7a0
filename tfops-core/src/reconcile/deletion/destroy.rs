//! The destroy of a deletion: a destroy plan, stored and checked by the plan policies like
//! any other, then applied.

use crate::api::annotations;
use crate::conditions::{ConditionStatus, ConditionType, Reason};
use crate::naming;
use crate::ports::{PlanKind, PlanSummary, Revision};
use crate::reconcile::apply::{self, Verified, changed_message, hand_over};
use crate::reconcile::model::{Step, StepFailure};
use crate::reconcile::plan::{Made, Planned, denied, made, plan_step};
use crate::reconcile::run::{End, Run, Stop};

/// A destroy plan, then its apply. A plan a `Deny` rule forbids blocks the deletion until the
/// policy or the object changes.
pub(super) fn destroy(run: &mut Run<'_>, revision: &Revision) -> Result<(), Stop> {
    let plan_id = naming::plan_id(&revision.reference, revision.sha());
    let step = Step::Plan(plan_step(run, PlanKind::Destroy, &plan_id, false));
    // Anything but a plan is a driver's bug, never "nothing to destroy": that would release
    // the object with its resources still there ([`made`] says so).
    let Made {
        has_changes,
        summary,
        digest,
        violations,
        at,
    } = made(run, step, ConditionType::Plan)?;
    run.plan_made();
    run.st.last_plan_at = Some(at);
    if has_changes {
        run.st.stored_plan_workspace = Some(run.s.object.spec.workspace.clone());
        let planned = Planned {
            summary,
            digest,
            violations,
            label: format!("destroy plan {plan_id} ({summary})"),
        };
        apply_destroy(run, revision, &plan_id, planned)?;
    }
    run.resources_gone();
    Ok(())
}

/// Applies the destroy plan unless a policy denies it, through the runner that applies.
fn apply_destroy<'a>(
    run: &mut Run<'a>,
    revision: &Revision,
    plan_id: &str,
    planned: Planned<'a>,
) -> Result<(), Stop> {
    let how = format!(
        "change the policy, or remove destroyResourcesOnDeletion to delete the object and keep its resources (set a new {} value to try again now)",
        annotations::RECONCILE
    );
    if let Some(failure) = denied(planned.violations, |list| {
        format!(
            "deletion is blocked: the destroy plan {plan_id} is denied by policy: {list}; {how}"
        )
    }) {
        return Err(run.fail(ConditionType::Plan, failure));
    }
    let summary = planned.summary;
    crate::reconcile::window::window(run, &planned.label)?;
    let digest = match hand_over(run, PlanKind::Destroy, plan_id, planned, "", false)? {
        Verified::Same { planned, .. } => planned.digest,
        // Nothing left to destroy.
        Verified::Nothing => return Ok(()),
        Verified::Changed { summary, .. } => return Err(changed(run, plan_id, summary)),
    };
    let what = apply::destroying(plan_id, digest, revision);
    match apply::need_apply(run, what.clone()) {
        Ok(()) => {}
        // Terraform failing to apply a destroy plan is a failed destroy to the user.
        Err(Stop::End(End::Failed(mut f))) if f.reason == Reason::TFExecApplyFailed => {
            f.reason = Reason::TFExecDestroyFailed;
            return Err(run.fail(ConditionType::Apply, f));
        }
        Err(stop) => return Err(stop),
    }
    apply::applied_by(run, &what);
    run.set(
        ConditionType::Apply,
        ConditionStatus::True,
        Reason::TerraformDestroySucceed,
        format!("destroyed every resource before deletion (plan {plan_id}, {summary})"),
    );
    Ok(())
}

/// The apply runner's destroy plan does something else: nothing was destroyed, and the
/// deletion tries again.
fn changed(run: &mut Run<'_>, plan_id: &str, summary: PlanSummary) -> Stop {
    let identity = run.current_identity();
    let failure = StepFailure {
        reason: Reason::TFExecDestroyFailed,
        message: format!(
            "{}; trying again",
            changed_message(plan_id, summary, identity.as_deref())
        ),
        lock: None,
        lock_holder_gone: false,
    };
    run.fail(ConditionType::Apply, failure)
}
