//! The apply path: trigger, dependencies, source, runner, setup, drift, plan, approval, apply,
//! outputs, health checks, cleanup (seed 000, "A reconciliation, step by step").

use super::apply::{apply, resumed_apply};
use super::apply_runner::{Verified, changed_message, current_identity, hand_over, identity_of};
use super::approval::{approve, record_pending};
use super::flow::{End, Flow, Run, Stop, go, unexpected};
use super::model::{Decision, Outcome, Snapshot, Step, StepFailure, StepKind};
use super::timing;
use crate::api::{ApprovePlan, DriftAction, ValidSpec, ValidationErrors, annotations, validate};
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
    // A run taken up only to find its apply lost plans again: not while a dependency is not
    // Ready (the check above was skipped to take the run up).
    if resuming && let Some(message) = dependencies_not_ready(s) {
        return run.wait_for_dependencies(message);
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
        return unexpected(StepKind::DetectDrift);
    };
    run.lock_released();
    run.st.last_planned_by =
        identity_of(run, StepKind::StartRunner).or(run.st.last_planned_by.take());
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
fn plan_and_apply<'a>(
    run: &mut Run<'a>,
    valid: &ValidSpec,
    revision: &Revision,
    inputs: &'a str,
    drift: bool,
) -> Flow<()> {
    let plan_id = naming::plan_id(&revision.reference, revision.sha());
    let planned = match plan(run, revision, &plan_id, drift) {
        Flow::Go(p) => p,
        Flow::Stop(s) => return Flow::Stop(s),
    };
    let applied = match planned {
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
            if let Flow::Stop(s) = approve(run, valid, &plan_id, &p) {
                return Flow::Stop(s);
            }
            let kind = plan_kind(run);
            match hand_over(run, kind, &plan_id, p, inputs, drift) {
                Flow::Go(Verified::Same { planned, inputs }) => {
                    if let Flow::Stop(s) = apply(run, revision, inputs, &plan_id, &planned) {
                        return Flow::Stop(s);
                    }
                    Some(planned.summary)
                }
                Flow::Go(Verified::Nothing) => {
                    if let Flow::Stop(s) = no_changes(run, revision) {
                        return Flow::Stop(s);
                    }
                    None
                }
                Flow::Go(Verified::Changed {
                    summary,
                    digest,
                    violations,
                }) => {
                    return pending_again(
                        run, revision, &plan_id, summary, digest, violations, drift,
                    );
                }
                Flow::Stop(s) => return Flow::Stop(s),
            }
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

fn plan_kind(run: &Run<'_>) -> PlanKind {
    if run.s.object.spec.destroy {
        PlanKind::Destroy
    } else {
        PlanKind::Normal
    }
}

/// The apply runner's plan does something else than the plan that may be applied: it is the
/// pending plan now (stored by the apply runner's `VerifyPlan`), and approvals given so far
/// do not count for it ([`record_pending`]); nothing was applied.
fn pending_again(
    run: &mut Run<'_>,
    revision: &Revision,
    plan_id: &str,
    summary: crate::ports::PlanSummary,
    digest: &str,
    violations: &[crate::api::PolicyViolation],
    drift: bool,
) -> Flow<()> {
    record_pending(run, plan_id, digest, drift);
    run.st.policy_violations = violations.to_vec();
    let identity = current_identity(run);
    let message = changed_message(plan_id, summary, identity.as_deref());
    run.set(
        ConditionType::Plan,
        ConditionStatus::True,
        Reason::TerraformPlannedWithChanges,
        format!("plan {plan_id} ({summary}) at {revision}"),
    );
    let next = if approval_is_automatic(run) {
        format!(
            "the next run plans and applies it (after interval {}, or when a run is requested)",
            run.s.object.spec.interval
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
    Flow::Stop(Stop::End(End::Success))
}

fn approval_is_automatic(run: &Run<'_>) -> bool {
    let spec = &run.s.object.spec;
    spec.force || ApprovePlan::parse(&spec.approve_plan) == ApprovePlan::Auto
}

/// A plan with changes, as the run sees it after the `Plan` step.
pub(super) struct Planned<'a> {
    pub(super) summary: crate::ports::PlanSummary,
    pub(super) digest: &'a str,
    pub(super) violations: &'a [crate::api::PolicyViolation],
    /// `plan <id> (<summary>) at <revision>`, for messages.
    pub(super) label: String,
}

/// Makes the plan (stored under `plan_id` when it has changes). Gives `None` for a plan without
/// changes.
fn plan<'a>(
    run: &mut Run<'a>,
    revision: &Revision,
    plan_id: &str,
    drift: bool,
) -> Flow<Option<Planned<'a>>> {
    let step = Step::Plan {
        kind: plan_kind(run),
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
        return unexpected(StepKind::Plan);
    };
    run.lock_released();
    run.st.last_planned_by =
        identity_of(run, StepKind::StartRunner).or(run.st.last_planned_by.take());
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
    run.fail(ConditionType::Plan, failure)
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
        lock_holder_gone: false,
    })
}

/// Outputs (and the outputs Secret), inventory, then health checks.
pub(super) fn outputs_and_health(run: &mut Run<'_>) -> Flow<()> {
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

pub(super) fn clear_pending(plan: crate::api::PlanStatus) -> crate::api::PlanStatus {
    crate::api::PlanStatus {
        last_applied: plan.last_applied,
        last_applied_digest: plan.last_applied_digest,
        ..Default::default()
    }
}
