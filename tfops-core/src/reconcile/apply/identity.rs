//! The apply identity (`spec.runner.apply`, docs/apply-identity.md): a plan that may be
//! applied is handed to a second runner holding the apply credentials, which plans again and
//! applies only when that plan does what the plan that was approved (or accepted by `auto` or
//! `force`, after the plan policies passed) does. Runs that do not apply (drift checks, plans awaiting approval,
//! `planOnly`, denied plans) never start it: [`hand_over`] is only reached after approval.

use crate::conditions::ConditionType;
use crate::ports::{PlanKind, PlanSummary};
use crate::reconcile::model::{Outcome, Step, StepKind};
use crate::reconcile::plan::{Made, Planned, denied, made, plan_step};
use crate::reconcile::run::{Run, Stop, unexpected};

/// What the apply runner found when it planned again.
pub(in crate::reconcile) enum Verified<'a> {
    /// The same changes: apply them (made from these inputs, by the apply runner).
    Same {
        /// The plan to apply (the apply runner's, with the approved content).
        planned: Planned<'a>,
        /// The digest of the inputs the apply runner used.
        inputs: &'a str,
    },
    /// Nothing left to change: whatever the plan did is there already.
    Nothing,
    /// Something else than what was approved: nothing may be applied.
    Changed {
        /// Its change counts.
        summary: PlanSummary,
        /// What it would do, digested.
        digest: &'a str,
        /// What the plan policies found in it.
        violations: &'a [crate::api::PolicyViolation],
    },
}

/// Hands `planned`, which may be applied, to the runner that applies. Without
/// `spec.runner.apply` that is the plan runner itself: `planned` comes back unchanged. With
/// it, the plan runner's session ends, the apply runner starts, is set up and plans again;
/// its plan comes back with what it says. A failure of any of this is the `Apply` phase's.
pub(in crate::reconcile) fn hand_over<'a>(
    run: &mut Run<'a>,
    kind: PlanKind,
    plan_id: &str,
    planned: Planned<'a>,
    inputs: &'a str,
    drift: bool,
) -> Result<Verified<'a>, Stop> {
    if !run.s.object.spec.runner.splits_apply() {
        return Ok(Verified::Same { planned, inputs });
    }
    match run.need_phase(Step::StartApplyRunner, ConditionType::Apply)? {
        (Outcome::RunnerStarted { binary, .. }, _) => run.binary_reported(binary),
        _ => return Err(unexpected(StepKind::StartApplyRunner)),
    }
    let inputs = match run.need_phase(Step::ApplySetup, ConditionType::Apply)? {
        (Outcome::SetUp { inputs_digest, .. }, _) => inputs_digest.as_str(),
        _ => return Err(unexpected(StepKind::ApplySetup)),
    };
    let step = Step::VerifyPlan(plan_step(run, kind, plan_id, drift));
    let Made {
        has_changes,
        summary,
        digest,
        violations,
        ..
    } = made(run, step, ConditionType::Apply)?;
    run.lock_released();
    if !has_changes {
        return Ok(Verified::Nothing);
    }
    // The policies see the apply runner's plan too: what it applies is what they passed.
    if let Some(failure) = denied(violations, |list| {
        format!("plan {plan_id}, as the apply runner made it again, is denied by policy: {list}")
    }) {
        return Err(run.fail(ConditionType::Plan, failure));
    }
    if digest == planned.digest {
        let label = format!("{} (re-planned by the apply runner)", planned.label);
        return Ok(Verified::Same {
            planned: Planned {
                summary,
                digest,
                violations,
                label,
            },
            inputs,
        });
    }
    Ok(Verified::Changed {
        summary,
        digest,
        violations,
    })
}

/// The message of an apply that did not happen because the apply runner's plan changed.
pub(in crate::reconcile) fn changed_message(
    plan_id: &str,
    summary: PlanSummary,
    identity: Option<&str>,
) -> String {
    let by = identity.map_or_else(String::new, |i| format!(" as {i}"));
    format!(
        "plan {plan_id} changed before it was applied: the apply runner planned again{by} and would now do {summary}, something else than the plan that was approved or accepted (the state or the inputs changed meanwhile), so nothing was applied"
    )
}
