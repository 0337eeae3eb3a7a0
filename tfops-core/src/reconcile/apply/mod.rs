//! Apply: an approved (or accepted) plan applied once, recorded in status before it starts so
//! that a restarted driver attaches to it instead of applying again.
//!
//! > Apply. With approvePlan: auto, spec.force, or a matching plan ID the controller re-plans
//! > once more (to make sure the approved plan is still current) and applies. Failures set
//! > Ready=False with a TFExec* reason and schedule a retry.
//!
//! With `spec.runner.apply` the plan is handed to a second runner first ([`identity`]).

mod identity;

pub(super) use identity::{Verified, changed_message, hand_over};

use super::approval::Given;
use super::model::{Outcome, Step, StepKind};
use super::plan::{Planned, no_changes, plan_kind, record_pending};
use super::run::{Done, End, Run, Stop};
use crate::api::{ActiveRun, ApprovePlan, PolicyViolation};
use crate::conditions::{ConditionStatus, ConditionType, Reason};
use crate::ports::{PlanSummary, Revision};

/// Applies `planned`, which may be applied (`given`: approved by whom, for the status while
/// it is applied, and the approval given on a pull request it uses), through the runner that applies: when that runner's plan does the same, it is
/// applied and recorded; when nothing is left to change, that is recorded as no changes; when
/// it does something else, nothing is applied and that plan is pending instead.
pub(super) fn apply<'a>(
    run: &mut Run<'a>,
    revision: &Revision,
    inputs: &'a str,
    plan_id: &str,
    planned: Planned<'a>,
    drift: bool,
    given: &Given,
) -> Result<Done, Stop> {
    let kind = plan_kind(run);
    super::window::window(run, &planned.label)?;
    super::approval::applying(run, &planned, &given.how);
    match hand_over(run, kind, plan_id, planned, inputs, drift)? {
        Verified::Same { planned, inputs } => {
            let destroy = run.s.object.spec.destroy;
            let what = applying(plan_id, planned.digest, revision, inputs, destroy);
            // Used in the status written before the apply starts: whatever comes of it, that
            // approval never applies anything again.
            if let Some(key) = &given.pull {
                super::approval::use_pull_approval(run, key);
            }
            need_apply(run, what.clone())?;
            // Who approved it, where that was not the object's own setting.
            let by = given
                .pull
                .as_ref()
                .map(|_| format!(", {}", given.how))
                .unwrap_or_default();
            record_applied(run, &what, format!("applied {}{by}", planned.label))?;
            let summary = planned.summary;
            Ok(Done {
                reason: Reason::TerraformAppliedSucceed,
                message: format!("applied plan {plan_id} ({summary}) at {revision}{by}"),
            })
        }
        Verified::Nothing => no_changes(run, revision, None),
        Verified::Changed {
            summary,
            digest,
            violations,
        } => Err(pending_again(
            run, revision, plan_id, summary, digest, violations, drift,
        )),
    }
}

/// The `Apply` step of the plan `what` describes. The status written before it starts
/// records it (`status.activeRun`: runner, run id, plan) and `status.lastApplyStartedAt`, so
/// that a driver that restarts mid-apply attaches to it instead of applying again, and nobody
/// concludes after a crash that nothing was ever applied.
pub(super) fn need_apply(run: &mut Run<'_>, what: ActiveRun) -> Result<(), Stop> {
    let records = &run.s.progress.records;
    let started = match records.iter().position(|r| r.step == StepKind::Apply) {
        None => run.s.now,
        Some(0) => run.s.started_at,
        Some(i) => records[i - 1].at,
    };
    run.st.last_apply_started_at = Some(started);
    let run_id = format!("apply-{}", started.as_millisecond());
    let attempted = run.s.progress.attempted(StepKind::Apply);
    let identity = run.current_identity().unwrap_or_default();
    run.st.active_run = (!attempted).then(|| ActiveRun {
        step: "Apply".into(),
        runner: run.runner_ref(),
        run_id: run_id.clone(),
        started_at: started,
        identity,
        generation: run.generation(),
        ..what
    });
    run.need_phase(Step::Apply { run_id }, ConditionType::Apply)
        .map(drop)
}

/// The plan an apply applies, for [`need_apply`].
fn applying(
    plan_id: &str,
    digest: &str,
    revision: &Revision,
    inputs: &str,
    destroy: bool,
) -> ActiveRun {
    ActiveRun {
        plan_id: plan_id.to_string(),
        plan_digest: digest.to_string(),
        revision: revision.to_string(),
        inputs_digest: inputs.to_string(),
        destroy,
        ..ActiveRun::default()
    }
}

/// The destroy plan of a deletion, for [`need_apply`].
pub(super) fn destroying(plan_id: &str, digest: &str, revision: &Revision) -> ActiveRun {
    ActiveRun {
        plan_id: plan_id.to_string(),
        plan_digest: digest.to_string(),
        revision: revision.to_string(),
        destroy: true,
        ..ActiveRun::default()
    }
}

/// The recorded apply an earlier driver left under way succeeded ([`super::restart`]):
/// records it as this run's apply (the attached runner holds the working directory, so the
/// outputs are read from it next).
pub(super) fn resumed(run: &mut Run<'_>, active: &ActiveRun) -> Result<Done, Stop> {
    let message = format!(
        "applied plan {} at {} (attached to run {} after the driver restarted)",
        active.plan_id, active.revision, active.run_id
    );
    // Before recording: a destroy ends the run there.
    if active.generation > 0 {
        run.observed = Some(active.generation);
    }
    record_applied(run, active, message.clone())?;
    Ok(Done {
        reason: Reason::TerraformAppliedSucceed,
        message,
    })
}

/// The revision `what` counts as applied at: its own, or the one this run resolved when the
/// comparison found nothing of the object's changed since the plan's (the plan kept its
/// revision so that an approval given for it still counted, and the object's files at the
/// resolved revision are those applied). Without this, a dependant of the same source would
/// wait for the resolved revision to be applied, which no run would ever record.
fn applied_as(run: &Run<'_>, what: &ActiveRun) -> String {
    let untouched = run
        .s
        .progress
        .latest(StepKind::CompareSource)
        .is_some_and(|r| matches!(&r.result, Ok(Outcome::SourceCompared { touched: None })));
    match &run.st.last_attempted_revision {
        Some(resolved) if untouched && *resolved != what.revision => resolved.clone(),
        _ => what.revision.clone(),
    }
}

/// Records `what` as applied (by this run, or by the run attached to): the last applied
/// revision, plan, content and inputs, and the `Apply` condition. A destroy ends the run: there
/// are no outputs left to read.
fn record_applied(run: &mut Run<'_>, what: &ActiveRun, message: String) -> Result<(), Stop> {
    applied_by(run, what);
    run.st.last_applied_revision = Some(applied_as(run, what));
    if !what.inputs_digest.is_empty() {
        run.st.last_applied_inputs_digest = Some(what.inputs_digest.clone());
    }
    run.st.plan.last_applied = what.plan_id.clone();
    run.st.plan.last_applied_digest = what.plan_digest.clone();
    if run.st.plan.pending == what.plan_id && run.st.plan.pending_digest == what.plan_digest {
        run.clear_pending();
    }
    let reason = if what.destroy {
        Reason::TerraformDestroySucceed
    } else {
        Reason::TerraformAppliedSucceed
    };
    run.set(
        ConditionType::Apply,
        ConditionStatus::True,
        reason,
        message.clone(),
    );
    if what.destroy {
        run.resources_gone();
        run.set(
            ConditionType::Ready,
            ConditionStatus::True,
            reason,
            format!("destroyed everything: {message}"),
        );
        return Err(Stop::End(End::Success));
    }
    Ok(())
}

/// Records who applied `what`: the identity recorded with it (an apply attached to), else the
/// session that applied it in this run.
pub(super) fn applied_by(run: &mut Run<'_>, what: &ActiveRun) {
    let identity = Some(what.identity.clone())
        .filter(|i| !i.is_empty())
        .or_else(|| run.current_identity());
    if identity.is_some() {
        run.st.last_applied_by = identity;
    }
}

/// The apply runner's plan does something else than the plan that may be applied: it is the
/// pending plan now (stored by the apply runner's `VerifyPlan`), and approvals given so far
/// do not count for it ([`record_pending`]); nothing was applied.
fn pending_again(
    run: &mut Run<'_>,
    revision: &Revision,
    plan_id: &str,
    summary: PlanSummary,
    digest: &str,
    violations: &[PolicyViolation],
    drift: bool,
) -> Stop {
    record_pending(run, plan_id, digest, drift);
    run.st.policy_violations = violations.to_vec();
    let identity = run.current_identity();
    let message = changed_message(plan_id, summary, identity.as_deref());
    run.set(
        ConditionType::Plan,
        ConditionStatus::True,
        Reason::TerraformPlannedWithChanges,
        format!("plan {plan_id} ({summary}) at {revision}"),
    );
    let spec = &run.s.object.spec;
    let automatic = spec.force || ApprovePlan::parse(&spec.approve_plan) == ApprovePlan::Auto;
    let next = if automatic {
        format!(
            "the next run plans and applies it (after interval {}, or when a run is requested)",
            spec.interval
        )
    } else {
        "it awaits approval again".to_string()
    };
    run.set(
        ConditionType::Ready,
        ConditionStatus::Unknown,
        Reason::TerraformPlannedWithChanges,
        format!("{message}; {next}"),
    );
    Stop::End(End::Success)
}
