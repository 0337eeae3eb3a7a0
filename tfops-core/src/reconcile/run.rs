//! The apply path: trigger, dependencies, source, runner, setup, drift, plan, approval, apply,
//! outputs, health checks, cleanup (seed 000, "A reconciliation, step by step").

use super::flow::{End, Flow, Run, Stop, go};
use super::model::{Decision, Outcome, Snapshot, Step, StepFailure, StepKind};
use super::timing;
use crate::api::{
    ActiveRun, ApprovePlan, DriftAction, ValidSpec, ValidationErrors, annotations, validate,
};
use crate::conditions::{ConditionStatus, ConditionType, Reason};
use crate::naming;
use crate::ports::{PlanKind, Revision};

pub(super) fn decide(s: &Snapshot) -> Decision {
    let valid = match validate(&s.object) {
        Ok(v) => v,
        Err(e) => return invalid(s, &e),
    };
    let mut run = Run::new(s, valid.retry_interval, valid.interval);
    if s.object.spec.suspend {
        run.set(
            ConditionType::Ready,
            ConditionStatus::Unknown,
            Reason::Suspended,
            "reconciliation is suspended (spec.suspend is true)",
        );
        run.remove(ConditionType::Reconciling);
        return run.next(Step::Done {
            requeue_after: None,
        });
    }
    let started = s
        .progress
        .records
        .iter()
        .any(|r| r.step != StepKind::AddFinalizer);
    // A run an earlier driver left under way is taken up at once, whatever else is due.
    let resuming = s.object.status.active_run.is_some();
    if !started && !resuming {
        if let Err(next) = timing::due(&s.object, &valid, s.now) {
            return run.next(Step::Done {
                requeue_after: next,
            });
        }
        if let Some(message) = dependencies_not_ready(s) {
            return run.wait_for_dependencies(message);
        }
    }
    mark_started(&mut run);
    if let Some(active) = go!(run, run.resume()) {
        go!(run, resumed_apply(&mut run, active));
        return run.end(End::Success);
    }
    let revision = go!(run, run.resolve());
    if let Some(message) = dependencies_behind(s, &revision) {
        return run.wait_for_dependencies(message);
    }
    let inputs = go!(run, run.prepare());
    let drift = go!(run, detect_drift(&mut run, &valid, &revision, inputs));
    go!(
        run,
        plan_and_apply(&mut run, &valid, &revision, inputs, drift)
    );
    run.end(End::Success)
}

fn invalid(s: &Snapshot, errors: &ValidationErrors) -> Decision {
    Run::new(s, std::time::Duration::ZERO, std::time::Duration::ZERO)
        .invalid_spec(errors.to_string())
}

fn mark_started(run: &mut Run<'_>) {
    let object = &run.s.object;
    let replan = replan_requested(run);
    let (reason, message) = if replan {
        (Reason::ReplanRequested, "re-plan requested")
    } else {
        (Reason::Progressing, "reconciliation in progress")
    };
    run.set(
        ConditionType::Reconciling,
        ConditionStatus::True,
        reason,
        message,
    );
    if crate::conditions::find(&run.st.conditions, ConditionType::Ready).is_none() {
        run.set(
            ConditionType::Ready,
            ConditionStatus::Unknown,
            Reason::Progressing,
            message,
        );
    }
    if let Some(v) = object.annotation(annotations::RECONCILE) {
        run.st.last_handled_reconcile_at = Some(v.to_string());
    }
    if let Some(v) = object.annotation(annotations::REPLAN) {
        run.st.last_handled_replan_at = Some(v.to_string());
    }
}

fn replan_requested(run: &Run<'_>) -> bool {
    run.s
        .object
        .annotation(annotations::REPLAN)
        .is_some_and(|v| run.start().last_handled_replan_at.as_deref() != Some(v))
}

fn dependencies_not_ready(s: &Snapshot) -> Option<String> {
    let waiting: Vec<String> = s
        .dependencies
        .iter()
        .filter_map(|d| match &d.found {
            None => Some(format!("{} does not exist", d.key)),
            Some(v) if !v.is_ready() => Some(format!(
                "{} is not Ready at its current generation ({})",
                d.key,
                if v.ready_reason.is_empty() {
                    "no Ready condition"
                } else {
                    &v.ready_reason
                }
            )),
            Some(_) => None,
        })
        .collect();
    (!waiting.is_empty()).then(|| format!("waiting for dependencies: {}", waiting.join("; ")))
}

/// A dependency built from the same source must have applied the same revision first.
fn dependencies_behind(s: &Snapshot, revision: &Revision) -> Option<String> {
    let mine = &s.object.spec.source_ref.url;
    let revision = revision.to_string();
    let behind: Vec<String> = s
        .dependencies
        .iter()
        .filter_map(|d| {
            let v = d.found.as_ref()?;
            (v.source_url == *mine && v.last_applied_revision.as_deref() != Some(revision.as_str()))
                .then(|| format!("{} has not applied {revision} yet", d.key))
        })
        .collect();
    (!behind.is_empty()).then(|| format!("waiting for dependencies: {}", behind.join("; ")))
}

/// When nothing changed since the last apply (spec, revision, resolved inputs), a refresh-only
/// plan checks the infrastructure. Gives whether the run goes on to plan because of drift;
/// stops the run otherwise.
fn detect_drift(
    run: &mut Run<'_>,
    valid: &ValidSpec,
    revision: &Revision,
    inputs: &str,
) -> Flow<bool> {
    let start = run.start();
    let spec = &run.s.object.spec;
    let unchanged = !spec.destroy
        && !replan_requested(run)
        && start.observed_generation == run.generation()
        && start.last_applied_revision.as_deref() == Some(revision.to_string().as_str())
        && start.last_applied_inputs_digest.as_deref() == Some(inputs)
        && start.plan.pending.is_empty()
        && start.reconciliation_failures == 0;
    if !unchanged || spec.disable_drift_detection {
        return Flow::Go(false);
    }
    let (outcome, at) = match run.need(Step::DetectDrift) {
        Flow::Go(v) => v,
        Flow::Stop(s) => return Flow::Stop(s),
    };
    let Outcome::DriftChecked { drifted } = outcome else {
        return Flow::Go(false);
    };
    run.lock_released();
    if drifted.is_empty() {
        run.set(
            ConditionType::Ready,
            ConditionStatus::True,
            Reason::NoDrift,
            format!("no drift at {revision}"),
        );
        return Flow::Stop(Stop::End(End::Success));
    }
    run.st.last_drift_detected_at = Some(at);
    let list = drifted.join(", ");
    let remediate =
        valid.approve == ApprovePlan::Auto && spec.drift_action == DriftAction::Remediate;
    if !remediate {
        let hint = if spec.drift_action == DriftAction::Report {
            "driftAction is Report"
        } else {
            "approvePlan is not auto; request a re-plan to correct it"
        };
        run.set(
            ConditionType::Ready,
            ConditionStatus::False,
            Reason::DriftDetected,
            format!("drift detected in {list} ({hint})"),
        );
        return Flow::Stop(Stop::End(End::Success));
    }
    run.set(
        ConditionType::Ready,
        ConditionStatus::False,
        Reason::DriftDetected,
        format!("drift detected in {list}; re-planning to correct it"),
    );
    Flow::Go(true)
}

/// Plan, then (when the plan changes something) policies, approval and apply; then outputs
/// and health checks. Seed 000: "Plan", "Apply", "Outputs, inventory, health checks".
fn plan_and_apply(
    run: &mut Run<'_>,
    valid: &ValidSpec,
    revision: &Revision,
    inputs: &str,
    drift: bool,
) -> Flow<()> {
    let plan_id = naming::plan_id(&revision.reference, revision.sha());
    let planned = match plan(run, revision, &plan_id, drift) {
        Flow::Go(p) => p,
        Flow::Stop(s) => return Flow::Stop(s),
    };
    let applied = match &planned {
        None => {
            if let Flow::Stop(s) = no_changes(run, revision) {
                return Flow::Stop(s);
            }
            run.st.last_applied_inputs_digest = Some(inputs.to_string());
            None
        }
        Some(p) => {
            if let Flow::Stop(s) = deny_by_policy(run, &plan_id, p.violations) {
                return Flow::Stop(s);
            }
            if let Flow::Stop(s) = approve(run, valid, &plan_id, p) {
                return Flow::Stop(s);
            }
            if let Flow::Stop(s) = apply(run, revision, inputs, &plan_id, p) {
                return Flow::Stop(s);
            }
            Some(p.summary)
        }
    };
    if let Flow::Stop(s) = outputs_and_health(run) {
        return Flow::Stop(s);
    }
    let (reason, message) = match applied {
        Some(summary) => (
            Reason::TerraformAppliedSucceed,
            format!("applied plan {plan_id} ({summary}) at {revision}"),
        ),
        None => (
            Reason::TerraformPlannedNoChanges,
            format!("no changes at {revision}"),
        ),
    };
    run.set(ConditionType::Ready, ConditionStatus::True, reason, message);
    Flow::Go(())
}

/// A plan with changes, as the run sees it after the `Plan` step.
struct Planned<'a> {
    summary: crate::ports::PlanSummary,
    digest: &'a str,
    violations: &'a [crate::api::PolicyViolation],
    /// `plan <id> (<summary>) at <revision>`, for messages.
    label: String,
}

/// Makes the plan (stored under `plan_id` when it has changes). Gives `None` for a plan without
/// changes.
fn plan<'a>(
    run: &mut Run<'a>,
    revision: &Revision,
    plan_id: &str,
    drift: bool,
) -> Flow<Option<Planned<'a>>> {
    let destroy = run.s.object.spec.destroy;
    let step = Step::Plan {
        kind: if destroy {
            PlanKind::Destroy
        } else {
            PlanKind::Normal
        },
        plan_id: plan_id.to_string(),
        drift,
    };
    let (outcome, at) = match run.need_phase(step, ConditionType::Plan) {
        Flow::Go(v) => v,
        Flow::Stop(s) => return Flow::Stop(s),
    };
    let Outcome::Planned {
        has_changes,
        summary,
        digest,
        violations,
    } = outcome
    else {
        return Flow::Go(None);
    };
    run.lock_released();
    run.st.last_planned_revision = Some(revision.to_string());
    run.st.last_plan_at = Some(at);
    run.st.stored_plan_workspace = has_changes.then(|| run.s.object.spec.workspace.clone());
    if !has_changes {
        return Flow::Go(None);
    }
    let label = format!("plan {plan_id} ({summary}) at {revision}");
    record_pending(run, plan_id, digest, drift);
    run.set(
        ConditionType::Plan,
        ConditionStatus::True,
        Reason::TerraformPlannedWithChanges,
        label.clone(),
    );
    run.st.policy_violations = violations.clone();
    Flow::Go(Some(Planned {
        summary: *summary,
        digest,
        violations,
        label,
    }))
}

/// Records the plan as pending. A plan that is new or would do something else than the one
/// pending before is a new pending plan: the approvals present now were given before it
/// existed, so their values are recorded as seen and never approve it.
fn record_pending(run: &mut Run<'_>, plan_id: &str, digest: &str, drift: bool) {
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

/// A plan without changes: nothing pending, and the revision counts as applied (or, for
/// `spec.destroy`, everything is gone and the run ends).
fn no_changes(run: &mut Run<'_>, revision: &Revision) -> Flow<()> {
    run.st.policy_violations.clear();
    run.st.plan = clear_pending(std::mem::take(&mut run.st.plan));
    run.set(
        ConditionType::Plan,
        ConditionStatus::True,
        Reason::TerraformPlannedNoChanges,
        format!("no changes at {revision}"),
    );
    if run.s.object.spec.destroy {
        run.st.inventory.clear();
        run.st.available_outputs.clear();
        run.set(
            ConditionType::Ready,
            ConditionStatus::True,
            Reason::TerraformDestroySucceed,
            "nothing left to destroy",
        );
        return Flow::Stop(Stop::End(End::Success));
    }
    // The infrastructure matches this revision: it counts as applied, so the next interval
    // checks drift instead of planning again.
    run.st.last_applied_revision = Some(revision.to_string());
    Flow::Go(())
}

/// A plan that a `Deny` rule of a plan policy forbids is never applied.
fn deny_by_policy(
    run: &mut Run<'_>,
    plan_id: &str,
    violations: &[crate::api::PolicyViolation],
) -> Flow<()> {
    let Some(failure) = denied(violations, |list| {
        format!("plan {plan_id} is denied by policy: {list}")
    }) else {
        return Flow::Go(());
    };
    run.set(
        ConditionType::Plan,
        ConditionStatus::False,
        failure.reason,
        failure.message.clone(),
    );
    Flow::Stop(Stop::End(End::Failed(failure)))
}

/// The failure for a plan with `Deny` violations (`policy/rule: message (addresses)`, joined
/// by `; ` into `message`), or `None` when nothing denies it.
pub(super) fn denied(
    violations: &[crate::api::PolicyViolation],
    message: impl FnOnce(&str) -> String,
) -> Option<StepFailure> {
    let list: Vec<String> = violations
        .iter()
        .filter(|v| v.action == "Deny")
        .map(|v| {
            let at = if v.addresses.is_empty() {
                String::new()
            } else {
                format!(" ({})", v.addresses.join(", "))
            };
            format!("{}/{}: {}{at}", v.policy, v.rule, v.message)
        })
        .collect();
    (!list.is_empty()).then(|| StepFailure {
        reason: Reason::ValidationFailed,
        message: crate::reconcile::trim_message(&message(&list.join("; "))),
        lock: None,
    })
}

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
    run.st.active_run = (!attempted).then(|| ActiveRun {
        step: "Apply".into(),
        runner: run.runner_ref(),
        run_id: run_id.clone(),
        started_at: started,
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
fn resumed_apply(run: &mut Run<'_>, active: &ActiveRun) -> Flow<()> {
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

/// Goes on only when the plan may be applied; otherwise ends the run waiting for a human.
fn approve(run: &mut Run<'_>, valid: &ValidSpec, plan_id: &str, planned: &Planned<'_>) -> Flow<()> {
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

/// Applies the plan just made and records it (and the inputs it was made from) as the last
/// applied one.
fn apply(
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

/// Outputs (and the outputs Secret), inventory, then health checks.
fn outputs_and_health(run: &mut Run<'_>) -> Flow<()> {
    match run.need_phase(Step::Outputs, ConditionType::Output) {
        Flow::Go((
            Outcome::OutputsRead {
                names,
                inventory,
                written,
            },
            _,
        )) => {
            run.st.available_outputs = names.clone();
            run.st.inventory = inventory.clone();
            run.st.outputs_secret = match (&run.s.object.spec.write_outputs_to_secret, written) {
                (Some(w), true) => Some(w.name.clone()),
                _ => None,
            };
            let message = match (&run.s.object.spec.write_outputs_to_secret, written) {
                (Some(w), true) => format!("{} outputs, written to Secret {}", names.len(), w.name),
                _ => format!("{} outputs available", names.len()),
            };
            run.set(
                ConditionType::Output,
                ConditionStatus::True,
                Reason::TerraformOutputsWritten,
                message,
            );
        }
        Flow::Go(_) => {}
        Flow::Stop(s) => return Flow::Stop(s),
    }
    if run.s.object.spec.health_checks.is_empty() {
        run.remove(ConditionType::HealthCheck);
        return Flow::Go(());
    }
    match run.need_phase(Step::HealthChecks, ConditionType::HealthCheck) {
        Flow::Go(_) => {
            let n = run.s.object.spec.health_checks.len();
            run.set(
                ConditionType::HealthCheck,
                ConditionStatus::True,
                Reason::HealthChecksSucceeded,
                format!("{n} health checks passed"),
            );
            Flow::Go(())
        }
        Flow::Stop(s) => Flow::Stop(s),
    }
}

fn clear_pending(plan: crate::api::PlanStatus) -> crate::api::PlanStatus {
    crate::api::PlanStatus {
        last_applied: plan.last_applied,
        last_applied_digest: plan.last_applied_digest,
        ..Default::default()
    }
}
