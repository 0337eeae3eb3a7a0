//! The apply path: trigger, dependencies, source, runner, setup, drift, plan, approval, apply,
//! outputs, health checks, cleanup (seed 000, "A reconciliation, step by step").

use super::flow::{End, Flow, Run, Stop, go};
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
    if !started {
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
    let revision = go!(run, run.resolve());
    if let Some(message) = dependencies_behind(s, &revision) {
        return run.wait_for_dependencies(message);
    }
    go!(run, run.prepare());
    let drift = go!(run, detect_drift(&mut run, &valid, &revision));
    go!(run, plan_and_apply(&mut run, &valid, &revision, drift));
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

/// When nothing changed since the last apply, a refresh-only plan checks the infrastructure.
/// Gives whether the run goes on to plan because of drift; stops the run otherwise.
fn detect_drift(run: &mut Run<'_>, valid: &ValidSpec, revision: &Revision) -> Flow<bool> {
    let start = run.start();
    let spec = &run.s.object.spec;
    let unchanged = !spec.destroy
        && !replan_requested(run)
        && start.observed_generation == run.generation()
        && start.last_applied_revision.as_deref() == Some(revision.to_string().as_str())
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

enum Approval {
    Approved,
    Waiting(String),
    PlanOnly,
}

/// A plan is applied with `approvePlan: auto` or `force`, or when it is approved by id after a
/// human saw it pending: the id (spec field, else the annotation) names this fresh plan, the
/// same plan (same id, same spec apart from `approvePlan`) was already pending before this run,
/// and the approval came after it — for the spec field, a later generation; for the
/// annotation, a new value of the reconcile annotation sent with it. Never with `planOnly`.
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
        "set spec.approvePlan to {plan_id}, or set the {} annotation to {plan_id} together with a new {} value",
        annotations::APPROVE,
        annotations::RECONCILE
    );
    let by_spec = match &valid.approve {
        ApprovePlan::Plan(id) => Some((
            id.as_str(),
            object.metadata.generation > start.plan.pending_generation,
        )),
        _ => None,
    };
    let requested = object
        .annotation(annotations::RECONCILE)
        .is_some_and(|v| start.last_handled_reconcile_at.as_deref() != Some(v));
    let by_annotation = object
        .annotation(annotations::APPROVE)
        .map(|id| (id, requested));
    let seen = start.plan.pending == plan_id && start.plan.pending_spec_digest == digest;
    let candidates = [by_spec, by_annotation];
    if candidates
        .iter()
        .flatten()
        .any(|(id, given_after)| *id == plan_id && seen && *given_after)
    {
        return Approval::Approved;
    }
    match candidates.iter().flatten().next() {
        Some((id, _)) if *id == plan_id => Approval::Waiting(format!(
            "plan {plan_id} awaits approval: it is new or changed since {id} was approved; review it, then {how}"
        )),
        Some((id, _)) => Approval::Waiting(format!(
            "approval {id} does not match the pending plan {plan_id}; review {plan_id}, then {how}"
        )),
        None => Approval::Waiting(format!("plan {plan_id} awaits approval: {how}")),
    }
}

fn plan_and_apply(
    run: &mut Run<'_>,
    valid: &ValidSpec,
    revision: &Revision,
    drift: bool,
) -> Flow<()> {
    let destroy = run.s.object.spec.destroy;
    let plan_id = naming::plan_id(&revision.reference, revision.sha());
    let step = Step::Plan {
        kind: if destroy {
            PlanKind::Destroy
        } else {
            PlanKind::Normal
        },
        plan_id: plan_id.clone(),
        drift,
    };
    let (outcome, at) = match run.need_phase(step, ConditionType::Plan) {
        Flow::Go(v) => v,
        Flow::Stop(s) => return Flow::Stop(s),
    };
    let Outcome::Planned {
        has_changes,
        summary,
        violations,
    } = outcome
    else {
        return Flow::Go(());
    };
    run.lock_released();
    run.st.last_planned_revision = Some(revision.to_string());
    run.st.last_plan_at = Some(at);
    let mut applied = false;
    if !has_changes {
        run.st.policy_violations.clear();
        run.st.plan = clear_pending(std::mem::take(&mut run.st.plan));
        run.set(
            ConditionType::Plan,
            ConditionStatus::True,
            Reason::TerraformPlannedNoChanges,
            format!("no changes at {revision}"),
        );
        if !destroy {
            // The infrastructure matches this revision: it counts as applied, so the next
            // interval checks drift instead of planning again.
            run.st.last_applied_revision = Some(revision.to_string());
        }
        if destroy {
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
    } else {
        let digest = run.s.object.spec.digest_without_approval();
        let start = run.start();
        if start.plan.pending != plan_id || start.plan.pending_spec_digest != digest {
            run.st.plan.pending_generation = run.generation();
            run.st.plan.pending_spec_digest = digest.clone();
        }
        run.st.plan.pending = plan_id.clone();
        run.st.plan.is_destroy_plan = destroy;
        run.st.plan.is_drift_detection_plan = drift;
        let planned = format!("plan {plan_id} ({summary}) at {revision}");
        run.set(
            ConditionType::Plan,
            ConditionStatus::True,
            Reason::TerraformPlannedWithChanges,
            planned.clone(),
        );
        run.st.policy_violations = violations.clone();
        let denied: Vec<&crate::api::PolicyViolation> =
            violations.iter().filter(|v| v.action == "Deny").collect();
        if !denied.is_empty() {
            let list: Vec<String> = denied
                .iter()
                .map(|v| {
                    let at = if v.addresses.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", v.addresses.join(", "))
                    };
                    format!("{}/{}: {}{at}", v.policy, v.rule, v.message)
                })
                .collect();
            let failure = StepFailure {
                reason: Reason::ValidationFailed,
                message: crate::reconcile::trim_message(&format!(
                    "plan {plan_id} is denied by policy: {}",
                    list.join("; ")
                )),
                lock: None,
            };
            run.set(
                ConditionType::Plan,
                ConditionStatus::False,
                failure.reason,
                failure.message.clone(),
            );
            return Flow::Stop(Stop::End(End::Failed(failure)));
        }
        match approval(run, valid, &plan_id, &digest) {
            Approval::Approved => {}
            Approval::PlanOnly => {
                run.set(
                    ConditionType::Ready,
                    ConditionStatus::True,
                    Reason::TerraformPlannedWithChanges,
                    format!("{planned}; planOnly: never applied"),
                );
                return Flow::Stop(Stop::End(End::Success));
            }
            Approval::Waiting(message) => {
                run.set(
                    ConditionType::Ready,
                    ConditionStatus::Unknown,
                    Reason::TerraformPlannedWithChanges,
                    message,
                );
                return Flow::Stop(Stop::End(End::Success));
            }
        }
        match run.need_phase(Step::Apply, ConditionType::Apply) {
            Flow::Go(_) => {}
            Flow::Stop(s) => return Flow::Stop(s),
        }
        applied = true;
        run.st.last_applied_revision = Some(revision.to_string());
        run.st.plan.last_applied = plan_id.clone();
        run.st.plan = clear_pending(std::mem::take(&mut run.st.plan));
        let reason = if destroy {
            Reason::TerraformDestroySucceed
        } else {
            Reason::TerraformAppliedSucceed
        };
        run.set(
            ConditionType::Apply,
            ConditionStatus::True,
            reason,
            format!("applied {planned}"),
        );
        if destroy {
            run.st.inventory.clear();
            run.st.available_outputs.clear();
            run.set(
                ConditionType::Ready,
                ConditionStatus::True,
                reason,
                format!("destroyed everything ({summary})"),
            );
            return Flow::Stop(Stop::End(End::Success));
        }
    }
    if let Flow::Stop(s) = outputs_and_health(run) {
        return Flow::Stop(s);
    }
    let message = if applied {
        format!("applied plan {plan_id} ({summary}) at {revision}")
    } else {
        format!("no changes at {revision}")
    };
    let reason = if applied {
        Reason::TerraformAppliedSucceed
    } else {
        Reason::TerraformPlannedNoChanges
    };
    run.set(ConditionType::Ready, ConditionStatus::True, reason, message);
    Flow::Go(())
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
        ..Default::default()
    }
}
