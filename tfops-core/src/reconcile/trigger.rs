//! Trigger: whether a run starts now.
//!
//! > Trigger. The object was created or changed (a new metadata.generation), spec.interval
//! > elapsed, the infra.argocd.io/reconcile annotation was set, or a previous run asked for a
//! > retry. Status-only updates do not trigger runs.
//!
//! A suspended object never runs; a run an earlier driver left under way (`status.activeRun`)
//! is taken up at once, whatever else is due ([`super::restart`]). When and why a run is due
//! is [`super::timing::due`]. A run due while no runner Pod may start for it
//! ([`super::queue::Slot::Full`]) waits in the queue instead, unless a person asked for it.

use super::model::{Snapshot, Step, StepKind};
use super::queue::Slot;
use super::run::{End, Run, Stop};
use super::timing;
use crate::api::{ValidSpec, annotations};
use crate::conditions::{ConditionStatus, ConditionType, Reason};

/// Stops the run when the object is suspended or nothing is due; otherwise marks the run
/// started (`Reconciling`, and the request annotations handled).
pub(super) fn trigger(run: &mut Run<'_>, valid: &ValidSpec) -> Result<(), Stop> {
    let s = run.s;
    if let Some(why) = s.object.suspension() {
        run.set(
            ConditionType::Ready,
            ConditionStatus::Unknown,
            Reason::Suspended,
            format!("reconciliation is suspended ({why})"),
        );
        run.remove(ConditionType::Reconciling);
        return Err(Stop::next(release_runners(run)));
    }
    // Only the first decision of a run asks whether it is due: later ones continue it.
    let started = s
        .progress
        .records
        .iter()
        .any(|r| r.step != StepKind::AddFinalizer);
    let mut takes_turn = false;
    if !started && let Some(due) = due_at_start(s, valid) {
        match due {
            Err(next) => {
                return Err(Stop::next(Step::Done {
                    requeue_after: next,
                }));
            }
            Ok(why) => takes_turn = why.takes_its_turn(),
        }
    }
    // A run only the poller started says it is reconciling once the revision turns out to
    // concern the object ([`super::source`]): one that did not writes its status once.
    if !source_only(run, valid) {
        mark_started(run);
        super::approval::taken_up(run, valid);
    }
    // No runner Pod may start for it now: it waits in the queue without fetching anything.
    if let (true, Slot::Full { why }) = (takes_turn, &s.queue.slot) {
        return Err(Stop::End(End::Queued(why.clone())));
    }
    Ok(())
}

/// What a suspended object does: its runner Pods still up (left by a run whose manager was
/// killed or fenced mid-run, or kept by `alwaysCleanup: false`) are ended
/// ([`Step::ReleaseRunners`], at each reconcile of it, which the port makes cheap when none
/// is left), then nothing until it is resumed; after a failed release, it is asked again
/// after the retry interval. Never while an apply is recorded as under way
/// (`status.activeRun`, written before any apply starts): its runner may still be applying,
/// and when the object is resumed the run takes that apply up ([`super::restart`]).
fn release_runners(run: &Run<'_>) -> Step {
    let s = run.s;
    let applying = s.object.status.active_run.is_some();
    match s.progress.latest(StepKind::ReleaseRunners) {
        None if !applying => Step::ReleaseRunners,
        Some(r) if r.result.is_err() => Step::Done {
            requeue_after: Some(run.retry_interval),
        },
        _ => Step::Done {
            requeue_after: None,
        },
    }
}

/// Whether the run is due and why, asked at its start (so every decision of the run agrees);
/// `None` when it is due whatever the time: a run an earlier driver left under way (an apply
/// recorded, or an approval taken up: `Ready` still says `TerraformApplying`, which every end
/// of a run replaces), or one resumed from suspension (`spec.suspend` cleared, or the suspend
/// annotation removed, which moves no generation), so that Ready stops saying Suspended.
fn due_at_start(
    s: &Snapshot,
    valid: &ValidSpec,
) -> Option<Result<timing::Trigger, Option<std::time::Duration>>> {
    let ready = crate::conditions::find(&s.object.status.conditions, ConditionType::Ready);
    let resumed = ready.is_some_and(|c| c.reason == Reason::Suspended.as_str());
    let left_applying = ready.is_some_and(|c| c.reason == Reason::TerraformApplying.as_str());
    if s.object.status.active_run.is_some() || resumed || left_applying {
        return None;
    }
    // An approval on a merged pull request of what is pending: as a person's approval here.
    if s.object.status.reconciliation_failures == 0 && super::approval::pull_approved_pending(s) {
        return Some(Ok(timing::Trigger::ApprovedInPullRequest));
    }
    let polled = s.source_revision.as_deref();
    Some(timing::due(
        &s.object,
        valid,
        &s.queue,
        polled,
        s.started_at,
    ))
}

/// Whether this run was started only by a revision the caller's poller saw
/// ([`timing::Trigger::NewRevision`]): it ends once the source says the revision changed
/// nothing of the object's.
pub(super) fn source_only(run: &Run<'_>, valid: &ValidSpec) -> bool {
    due_at_start(run.s, valid) == Some(Ok(timing::Trigger::NewRevision))
}

/// `Reconciling=True` (why), `Ready=Unknown` when it has no value yet, and the request
/// annotations recorded as handled.
pub(super) fn mark_started(run: &mut Run<'_>) {
    let object = &run.s.object;
    let (reason, message) = if replan_requested(run) {
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

/// Whether the replan annotation has a value this object has not handled before this run.
pub(super) fn replan_requested(run: &Run<'_>) -> bool {
    run.s
        .object
        .annotation(annotations::REPLAN)
        .is_some_and(|v| run.start().last_handled_replan_at.as_deref() != Some(v))
}
