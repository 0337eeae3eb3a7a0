//! The deletion path, behind tfops' finalizer.
//!
//! Deletion must always be able to finish: without `destroyResourcesOnDeletion` it needs no
//! runner, no source and no inputs (so a missing ServiceAccount or an already deleted
//! `varsFrom` Secret cannot block it); with it, resources are destroyed through a destroy plan
//! that is stored and checked by the plan policies like any other, then applied (seed 000). A
//! failing or denied destroy is retried with backoff and reported, and unsetting the field lets
//! the object go. An object is only released once no other object depends on it.
//!
//! Whether there is anything to destroy is never guessed from the absence of a successful
//! apply: `status.lastApplyStartedAt` is written before any apply starts, so an object whose
//! first apply crashed half-way is still destroyed.

use std::time::Duration;

use super::apply_runner::{Verified, changed_message, current_identity, hand_over, identity_of};
use super::flow::{End, Flow, Run, Stop, go, unexpected};
use super::model::{Decision, Outcome, Snapshot, Step, StepFailure, StepKind};
use super::run::Planned;
use super::timing::{backoff, elapsed};
use crate::api::{annotations, validate};
use crate::conditions::{self, ConditionStatus, ConditionType, Reason};
use crate::naming;
use crate::ports::{PlanKind, Revision};

/// Used when the spec is invalid and cannot tell.
const FALLBACK_RETRY: Duration = Duration::from_secs(15);
const FALLBACK_INTERVAL: Duration = Duration::from_secs(600);

pub(super) fn decide(s: &Snapshot) -> Decision {
    let valid = validate(&s.object);
    let (retry, interval) = valid
        .as_ref()
        .map_or((FALLBACK_RETRY, FALLBACK_INTERVAL), |v| {
            (v.retry_interval, v.interval)
        });
    let mut run = Run::new(s, retry, interval);
    if !s.object.has_finalizer() || s.progress.succeeded(StepKind::RemoveFinalizer) {
        return run.next(Step::Done {
            requeue_after: None,
        });
    }
    if !s.dependants.is_empty() {
        let names: Vec<String> = s.dependants.iter().map(ToString::to_string).collect();
        run.set(
            ConditionType::Ready,
            ConditionStatus::False,
            Reason::DeletionBlockedByDependants,
            format!(
                "deletion waits until these objects, which depend on this one, are gone: {}",
                names.join(", ")
            ),
        );
        return run.end(End::Waiting);
    }
    let start = run.start();
    // A spec edit or a reconcile request tries again now; otherwise a failed deletion waits
    // out its backoff.
    let reconcile_value = s.object.annotation(annotations::RECONCILE);
    let requested = s.object.metadata.generation != start.observed_generation
        || reconcile_value.is_some_and(|v| start.last_handled_reconcile_at.as_deref() != Some(v));
    if s.progress.is_empty()
        && !requested
        && start.reconciliation_failures > 0
        && let Some(last) = start.last_run_at
    {
        let wait = backoff(retry, interval, start.reconciliation_failures);
        let since = elapsed(last, s.now);
        if since < wait {
            return run.next(Step::Done {
                requeue_after: Some(wait - since),
            });
        }
    }
    if let Some(v) = reconcile_value {
        run.st.last_handled_reconcile_at = Some(v.to_string());
    }
    run.set(
        ConditionType::Reconciling,
        ConditionStatus::True,
        Reason::Finalizing,
        "deleting",
    );
    // An object that never started an apply has nothing to destroy: skipping the runner then
    // keeps a missing Secret or an unreachable source from holding the deletion.
    let never_applied = start.last_apply_started_at.is_none()
        && start.last_applied_revision.is_none()
        && conditions::find(&start.conditions, ConditionType::Apply).is_none();
    let destroy = s.object.spec.destroy_resources_on_deletion && !never_applied;
    if destroy {
        if let Err(e) = &valid {
            return run.invalid_spec(format!(
                "cannot destroy resources with an invalid spec ({e}); fix the spec, or set destroyResourcesOnDeletion: false to delete the object without destroying"
            ));
        }
        run.set(
            ConditionType::Ready,
            ConditionStatus::Unknown,
            Reason::Finalizing,
            "destroying resources before deletion",
        );
        // An apply (or destroy) an earlier driver left under way is awaited first: whatever its
        // result, the destroy below plans from the state again. (Without a destroy the
        // deletion needs no runner, so it does not wait for one.)
        go!(run, run.resume());
        let revision = go!(run, run.resolve());
        go!(run, run.prepare());
        go!(run, destroy_through_plan(&mut run, &revision));
        // The runner that destroyed removes what it wrote, and the state when asked: the
        // controller's identity needs no right to delete them.
        go!(run, run.need(Step::DeletePlansAndOutputs));
        if s.object.spec.tfstate.delete_on_destroy {
            go!(run, run.need(Step::DeleteState));
        }
        if !s.progress.attempted(StepKind::Cleanup) {
            return run.next(Step::Cleanup);
        }
    } else {
        let message = if never_applied {
            "deleting (nothing to destroy: no apply was ever attempted)"
        } else {
            "deleting (resources are kept: destroyResourcesOnDeletion is false)"
        };
        run.set(
            ConditionType::Ready,
            ConditionStatus::Unknown,
            Reason::Finalizing,
            message,
        );
    }
    go!(run, run.need(Step::DeletePlansAndOutputs));
    if destroy && s.object.spec.tfstate.delete_on_destroy {
        go!(run, run.need(Step::DeleteState));
    }
    go!(run, run.need(Step::RemoveFinalizer));
    run.next(Step::Done {
        requeue_after: None,
    })
}

/// A destroy plan (stored, checked by the plan policies), then its apply. A plan a `Deny` rule
/// forbids blocks the deletion until the policy or the object changes.
fn destroy_through_plan(run: &mut Run<'_>, revision: &Revision) -> Flow<()> {
    let plan_id = naming::plan_id(&revision.reference, revision.sha());
    let step = Step::Plan {
        kind: PlanKind::Destroy,
        plan_id: plan_id.clone(),
        drift: false,
    };
    let (outcome, at) = match run.need_phase(step, ConditionType::Plan) {
        Flow::Go(v) => v,
        Flow::Stop(s) => return Flow::Stop(s),
    };
    // Anything but a plan is a driver's bug, never "nothing to destroy": that would release
    // the object with its resources still there.
    if !matches!(outcome, Outcome::Planned { .. }) {
        return unexpected(StepKind::Plan);
    }
    run.lock_released();
    run.st.last_plan_at = Some(at);
    run.st.last_planned_by =
        identity_of(run, StepKind::StartRunner).or(run.st.last_planned_by.take());
    if matches!(
        outcome,
        Outcome::Planned {
            has_changes: true,
            ..
        }
    ) {
        run.st.stored_plan_workspace = Some(run.s.object.spec.workspace.clone());
    }
    if let Outcome::Planned {
        has_changes: true,
        summary,
        digest,
        violations,
    } = outcome
    {
        let how = format!(
            "change the policy, or remove destroyResourcesOnDeletion to delete the object and keep its resources (set a new {} value to try again now)",
            annotations::RECONCILE
        );
        if let Some(failure) = super::run::denied(violations, |list| {
            format!(
                "deletion is blocked: the destroy plan {plan_id} is denied by policy: {list}; {how}"
            )
        }) {
            return run.fail(ConditionType::Plan, failure);
        }
        let planned = Planned {
            summary: *summary,
            digest,
            violations,
            label: format!("destroy plan {plan_id} ({summary})"),
        };
        let digest = match hand_over(run, PlanKind::Destroy, &plan_id, planned, "", false) {
            Flow::Go(Verified::Same { planned, .. }) => planned.digest,
            Flow::Go(Verified::Nothing) => {
                run.st.inventory.clear();
                run.st.available_outputs.clear();
                return Flow::Go(());
            }
            Flow::Go(Verified::Changed { summary, .. }) => {
                let identity = current_identity(run);
                let f = StepFailure {
                    reason: Reason::TFExecDestroyFailed,
                    message: format!(
                        "{}; trying again",
                        changed_message(&plan_id, summary, identity.as_deref())
                    ),
                    lock: None,
                    lock_holder_gone: false,
                };
                return run.fail(ConditionType::Apply, f);
            }
            Flow::Stop(s) => return Flow::Stop(s),
        };
        let what = super::apply::destroying(&plan_id, digest, revision);
        match super::apply::need_apply(run, what.clone()) {
            Flow::Go(()) => {}
            // Terraform failing to apply a destroy plan is a failed destroy to the user.
            Flow::Stop(Stop::End(End::Failed(mut f))) if f.reason == Reason::TFExecApplyFailed => {
                f.reason = Reason::TFExecDestroyFailed;
                return run.fail(ConditionType::Apply, f);
            }
            Flow::Stop(s) => return Flow::Stop(s),
        }
        super::apply::applied_by(run, &what);
        run.set(
            ConditionType::Apply,
            ConditionStatus::True,
            Reason::TerraformDestroySucceed,
            format!("destroyed every resource before deletion (plan {plan_id}, {summary})"),
        );
    }
    run.st.inventory.clear();
    run.st.available_outputs.clear();
    Flow::Go(())
}
