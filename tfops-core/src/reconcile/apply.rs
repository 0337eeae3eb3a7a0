//! Apply: the apply of a plan, recorded in status before it starts so that a restarted driver
//! attaches to it, and the record of what was applied.

use super::apply_runner::current_identity;
use super::flow::{End, Flow, Run, Stop};
use super::model::{Step, StepKind};
use super::run::{Planned, clear_pending, outputs_and_health};
use crate::api::ActiveRun;
use crate::conditions::{ConditionStatus, ConditionType, Reason};
use crate::ports::Revision;

/// The `Apply` step of the plan `what` describes. The status written before it starts
/// records it (`status.activeRun`: runner, run id, plan) and `status.lastApplyStartedAt`, so
/// that a driver that restarts mid-apply attaches to it instead of applying again, and nobody
/// concludes after a crash that nothing was ever applied.
pub(super) fn need_apply(run: &mut Run<'_>, what: ActiveRun) -> Flow<()> {
    let records = &run.s.progress.records;
    let started = match records.iter().position(|r| r.step == StepKind::Apply) {
        None => run.s.now,
        Some(0) => run.s.started_at,
        Some(i) => records[i - 1].at,
    };
    run.st.last_apply_started_at = Some(started);
    let run_id = format!("apply-{}", started.as_millisecond());
    let attempted = run.s.progress.attempted(StepKind::Apply);
    let identity = current_identity(run).unwrap_or_default();
    run.st.active_run = (!attempted).then(|| ActiveRun {
        step: "Apply".into(),
        runner: run.runner_ref(),
        run_id: run_id.clone(),
        started_at: started,
        identity,
        ..what
    });
    match run.need_phase(Step::Apply { run_id }, ConditionType::Apply) {
        Flow::Go(_) => Flow::Go(()),
        Flow::Stop(s) => Flow::Stop(s),
    }
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

/// The recorded apply an earlier driver left under way succeeded: record it as this run's
/// apply, then read outputs and run the health checks (the attached runner holds the working
/// directory).
pub(super) fn resumed_apply(run: &mut Run<'_>, active: &ActiveRun) -> Flow<()> {
    let message = format!(
        "applied plan {} at {} (attached to run {} after the driver restarted)",
        active.plan_id, active.revision, active.run_id
    );
    if let Flow::Stop(s) = record_applied(run, active, message.clone()) {
        return Flow::Stop(s);
    }
    if let Flow::Stop(s) = outputs_and_health(run) {
        return Flow::Stop(s);
    }
    run.set(
        ConditionType::Ready,
        ConditionStatus::True,
        Reason::TerraformAppliedSucceed,
        message,
    );
    Flow::Go(())
}

/// Records `what` as applied (by this run, or by the run attached to): the last applied
/// revision, plan, content and inputs, and the `Apply` condition. A destroy ends the run: there
/// are no outputs left to read.
fn record_applied(run: &mut Run<'_>, what: &ActiveRun, message: String) -> Flow<()> {
    applied_by(run, what);
    run.st.last_applied_revision = Some(what.revision.clone());
    if !what.inputs_digest.is_empty() {
        run.st.last_applied_inputs_digest = Some(what.inputs_digest.clone());
    }
    run.st.plan.last_applied = what.plan_id.clone();
    run.st.plan.last_applied_digest = what.plan_digest.clone();
    if run.st.plan.pending == what.plan_id && run.st.plan.pending_digest == what.plan_digest {
        run.st.plan = clear_pending(std::mem::take(&mut run.st.plan));
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
        run.st.inventory.clear();
        run.st.available_outputs.clear();
        run.set(
            ConditionType::Ready,
            ConditionStatus::True,
            reason,
            format!("destroyed everything: {message}"),
        );
        return Flow::Stop(Stop::End(End::Success));
    }
    Flow::Go(())
}

/// Records who applied `what`: the identity recorded with it (an apply attached to), else the
/// session that applied it in this run.
pub(super) fn applied_by(run: &mut Run<'_>, what: &ActiveRun) {
    let identity = Some(what.identity.clone())
        .filter(|i| !i.is_empty())
        .or_else(|| current_identity(run));
    if identity.is_some() {
        run.st.last_applied_by = identity;
    }
}

/// Applies the plan just made and records it (and the inputs it was made from) as the last
/// applied one.
pub(super) fn apply(
    run: &mut Run<'_>,
    revision: &Revision,
    inputs: &str,
    plan_id: &str,
    planned: &Planned<'_>,
) -> Flow<()> {
    let destroy = run.s.object.spec.destroy;
    let what = applying(plan_id, planned.digest, revision, inputs, destroy);
    if let Flow::Stop(s) = need_apply(run, what.clone()) {
        return Flow::Stop(s);
    }
    record_applied(run, &what, format!("applied {}", planned.label))
}
