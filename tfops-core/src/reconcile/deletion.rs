//! Deletion, behind tfops' finalizer.
//!
//! > Deletion follows the same path through a finalizer: with spec.destroyResourcesOnDeletion
//! > a destroy plan is applied first; plan and output objects are removed; the state Secret is
//! > kept unless spec.tfstate.deleteOnDestroy is set.
//!
//! Deletion must always be able to finish: without `destroyResourcesOnDeletion` it needs no
//! runner, no source and no inputs (so a missing ServiceAccount or an already deleted
//! `varsFrom` Secret cannot block it); with it, resources are destroyed through a destroy plan
//! that is stored and checked by the plan policies like any other, then applied. A failing or
//! denied destroy is retried with backoff and reported, and unsetting the field lets the
//! object go. An object is only released once no other object depends on it.
//!
//! Whether there is anything to destroy is never guessed from the absence of a successful
//! apply: `status.lastApplyStartedAt` is written before any apply starts, so an object whose
//! first apply crashed half-way is still destroyed.

mod destroy;

use std::time::Duration;

use super::cleanup::{cleanup, stalled};
use super::model::{Decision, Snapshot, Step, StepKind, Writer};
use super::queue::{self, Slot};
use super::run::{End, Run, Stop};
use super::timing::{backoff, elapsed};
use super::{restart, runner, setup, source};
use crate::api::{annotations, validate};
use crate::conditions::{self, ConditionStatus, ConditionType, Reason};

/// Used when the spec is invalid and cannot tell.
const FALLBACK_RETRY: Duration = Duration::from_secs(15);
const FALLBACK_INTERVAL: Duration = Duration::from_secs(600);

/// The next step of deleting the object: wait for its dependants to go, destroy its resources
/// when asked (and when anything was ever applied), remove what it stored, release it.
pub(super) fn deletion(s: &Snapshot) -> Decision {
    let valid = validate(&s.object);
    let (retry, interval) = valid
        .as_ref()
        .map_or((FALLBACK_RETRY, FALLBACK_INTERVAL), |v| {
            (v.retry_interval, v.interval)
        });
    let mut run = Run::new(s, retry, interval);
    if let Ok(v) = &valid {
        run.windows = v.windows.clone();
    }
    if !s.object.has_finalizer() || s.progress.succeeded(StepKind::RemoveFinalizer) {
        return run.next(Step::Done {
            requeue_after: None,
        });
    }
    if let Err(stop) = dependants_gone(&mut run).and_then(|()| backed_off(&run)) {
        return cleanup(run, Err(stop));
    }
    started(&mut run);
    let destroy = s.object.spec.destroy_resources_on_deletion && !never_applied(&run);
    if destroy && let Err(e) = &valid {
        return stalled(
            run,
            format!(
                "cannot destroy resources with an invalid spec ({e}); fix the spec, or set destroyResourcesOnDeletion: false to delete the object without destroying"
            ),
        );
    }
    let result = steps(&mut run, destroy);
    cleanup(run, result)
}

/// The steps of a deletion, in order.
fn steps(run: &mut Run<'_>, destroy: bool) -> Result<(), Stop> {
    let message = if destroy {
        "destroying resources before deletion"
    } else if never_applied(run) {
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
    if destroy {
        // An apply (or destroy) an earlier driver left under way is awaited first: whatever
        // its result, the destroy below plans from the state again. (Without a destroy the
        // deletion needs no runner, so it does not wait for one.)
        restart::restart(run)?;
        // No runner Pod may start now: the destroy waits in the queue, fetching nothing.
        if let Slot::Full { why } = &run.s.queue.slot
            && !run.s.progress.attempted(StepKind::StartRunner)
        {
            return Err(Stop::End(End::Queued(why.clone())));
        }
        let revision = source::resolve(run)?;
        source::fetch(run)?;
        runner::runner(run)?;
        setup::setup(run)?;
        destroy::destroy(run, &revision)?;
    }
    // The runner that destroyed removes what it wrote, and the state when asked: the
    // controller's identity needs no right to delete them.
    let writer = if destroy {
        run.writer()
    } else {
        Writer::Driver
    };
    run.need(delete_plans_and_outputs(run, writer))?;
    if destroy && run.s.object.spec.tfstate.delete_on_destroy {
        let spec = &run.s.object.spec;
        let step = Step::DeleteState {
            writer,
            workspace: spec.workspace.clone(),
            suffix: run.s.object.state_secret_suffix(),
        };
        run.need(step)?;
    }
    if destroy && !run.s.progress.attempted(StepKind::Cleanup) {
        return Err(Stop::next(Step::Cleanup));
    }
    run.need(Step::RemoveFinalizer)?;
    Err(Stop::next(Step::Done {
        requeue_after: None,
    }))
}

/// Waits while objects that depend on this one exist.
fn dependants_gone(run: &mut Run<'_>) -> Result<(), Stop> {
    let s = run.s;
    if s.dependants.is_empty() {
        return Ok(());
    }
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
    Err(Stop::End(End::Waiting))
}

/// A failed deletion waits out its backoff, unless a spec edit or a reconcile request asks
/// to try again now.
fn backed_off(run: &Run<'_>) -> Result<(), Stop> {
    let (s, start) = (run.s, run.start());
    let reconcile_value = s.object.annotation(annotations::RECONCILE);
    let requested = s.object.metadata.generation != start.observed_generation
        || reconcile_value.is_some_and(|v| start.last_handled_reconcile_at.as_deref() != Some(v));
    // Waiting for a runner Pod: until its turn, or its own jittered wait.
    let queued = queue::retry_wait(&s.object, run.retry_interval, run.interval)
        .map(|wait| (s.queue.slot != Slot::Free).then_some(wait));
    if s.progress.is_empty()
        && !requested
        && (start.reconciliation_failures > 0 || queued.is_some())
        && let Some(last) = start.last_run_at
    {
        let wait = queued.unwrap_or_else(|| {
            Some(backoff(
                run.retry_interval,
                run.interval,
                start.reconciliation_failures,
            ))
        });
        let Some(wait) = wait else {
            return Ok(());
        };
        let since = elapsed(last, s.now);
        if since < wait {
            return Err(Stop::next(Step::Done {
                requeue_after: Some(wait - since),
            }));
        }
    }
    Ok(())
}

/// An object that never started an apply has nothing to destroy: skipping the runner then
/// keeps a missing Secret or an unreachable source from holding the deletion.
fn never_applied(run: &Run<'_>) -> bool {
    let start = run.start();
    start.last_apply_started_at.is_none()
        && start.last_applied_revision.is_none()
        && conditions::find(&start.conditions, ConditionType::Apply).is_none()
}

/// The reconcile request handled, and `Reconciling=True` (`Finalizing`).
fn started(run: &mut Run<'_>) {
    if let Some(v) = run.s.object.annotation(annotations::RECONCILE) {
        run.st.last_handled_reconcile_at = Some(v.to_string());
    }
    run.set(
        ConditionType::Reconciling,
        ConditionStatus::True,
        Reason::Finalizing,
        "deleting",
    );
}

/// Every plan and outputs Secret and ConfigMap this object has, by the names in its spec and
/// the names it was written under.
fn delete_plans_and_outputs(run: &Run<'_>, writer: Writer) -> Step {
    let (spec, status) = (&run.s.object.spec, run.start());
    let mut workspaces = vec![spec.workspace.clone()];
    workspaces.extend(status.stored_plan_workspace.clone());
    workspaces.dedup();
    let mut secrets: Vec<String> = spec
        .write_outputs_to_secret
        .iter()
        .map(|t| t.name.clone())
        .collect();
    secrets.extend(status.outputs_secret.clone());
    secrets.dedup();
    let mut config_maps: Vec<String> = spec
        .write_outputs_to_config_map
        .iter()
        .map(|t| t.name.clone())
        .collect();
    config_maps.extend(status.outputs_config_map.clone());
    config_maps.dedup();
    Step::DeletePlansAndOutputs {
        writer,
        workspaces,
        secrets,
        config_maps,
    }
}
