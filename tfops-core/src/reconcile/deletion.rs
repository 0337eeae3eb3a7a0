//! The deletion path, behind tfops' finalizer.
//!
//! Deletion must always be able to finish: without `destroyResourcesOnDeletion` it needs no
//! runner, no source and no inputs (so a missing ServiceAccount or an already deleted
//! `varsFrom` Secret cannot block it); with it, a failing destroy is retried with backoff and
//! reported, and unsetting the field lets the object go. An object is only released once no
//! other object depends on it.

use std::time::Duration;

use super::flow::{End, Run, go};
use super::model::{Decision, Snapshot, Step, StepKind};
use super::timing::{backoff, elapsed};
use crate::api::validate;
use crate::conditions::{self, ConditionStatus, ConditionType, Reason};

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
    if s.progress.is_empty()
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
    run.set(
        ConditionType::Reconciling,
        ConditionStatus::True,
        Reason::Finalizing,
        "deleting",
    );
    // An object that never attempted an apply has nothing to destroy: skipping the runner then
    // keeps a missing Secret or an unreachable source from holding the deletion.
    let never_applied = start.last_applied_revision.is_none()
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
        go!(run, run.resolve());
        go!(run, run.prepare());
        go!(run, run.need_phase(Step::Destroy, ConditionType::Apply));
        run.lock_released();
        run.st.inventory.clear();
        run.st.available_outputs.clear();
        run.set(
            ConditionType::Apply,
            ConditionStatus::True,
            Reason::TerraformDestroySucceed,
            "destroyed every resource before deletion",
        );
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
