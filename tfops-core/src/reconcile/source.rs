//! Source: the revision to run, and its tree.
//!
//! > Source. The controller resolves the revision (git ls-remote, or the OCI manifest digest).
//! > If it changed since the last run, the tree is fetched, filtered by ignore, and archived.
//!
//! A new revision that changed nothing under the object's `spec.path` or its
//! `spec.sourceRef.watchPaths` is no change for the object (monorepos: one commit touches one
//! object of hundreds). It is recorded as seen (`status.lastAttemptedRevision`); with no plan
//! pending it counts as applied, since the object's files are those applied, so the run goes
//! on as for an unchanged revision (a drift check); with a plan pending, the plan keeps its
//! revision and id, so an approval given for it still counts (it is applied only if the plan
//! made again does the same).
//!
//! A run started only because the caller's source poller saw a new revision
//! ([`super::Trigger::NewRevision`]) ends here when the revision changed nothing of the
//! object's: no runner Pod starts, and the drift check waits for `spec.interval`. With hundreds
//! of objects on one repository, a commit then starts runner Pods only for the objects it
//! touched.

use super::dependencies::dependencies;
use super::model::{Outcome, Step, StepKind};
use super::queue::Slot;
use super::run::{End, Run, Stop, unexpected};
use super::trigger::{mark_started, replan_requested, source_only};
use crate::api::ValidSpec;
use crate::ports::Revision;

/// Resolves the revision (recorded as the last attempted one), tells whether it changed
/// anything of the object's, waits for dependencies of the same source to have applied it,
/// then fetches and archives its tree. Gives the revision the run plans as: the resolved one,
/// or the pending plan's when nothing of the object's changed since. A run started by the
/// poller alone ends when nothing of the object's changed ([`End::SourceSeen`]).
pub(super) fn source(run: &mut Run<'_>, valid: &ValidSpec) -> Result<Revision, Stop> {
    let resolved = resolved(run)?;
    let (revision, changed) = since_last(run, &resolved)?;
    // Recorded once the comparison is made: a look at a revision that changed nothing of the
    // object's then writes its status once (a commit to a monorepo is a write per object).
    run.st.last_attempted_revision = Some(resolved.to_string());
    if source_only(run, valid) {
        if !changed {
            return Err(Stop::End(End::SourceSeen(next_due(run, valid))));
        }
        mark_started(run);
        dependencies(run, None)?;
        // It needs a runner Pod now: it takes its turn in the queue like any other run.
        if let Slot::Full { why } = &run.s.queue.slot {
            return Err(Stop::End(End::Queued(why.clone())));
        }
    }
    dependencies(run, Some(&resolved))?;
    fetch(run)?;
    Ok(revision)
}

/// When the object is due again after a look at a revision that changed nothing of its own:
/// at its interval, or when an apply window it waits for opens (`None`: only on a change).
fn next_due(run: &Run<'_>, valid: &ValidSpec) -> Option<std::time::Duration> {
    let s = run.s;
    match super::timing::due(&s.object, valid, &s.queue, None, s.started_at) {
        Err(next) => next,
        Ok(_) => Some(std::time::Duration::from_secs(1)),
    }
}

/// The tree at the resolved revision, archived.
pub(super) fn fetch(run: &mut Run<'_>) -> Result<(), Stop> {
    run.need(Step::FetchSource).map(drop)
}

/// The source revision (recorded as the last attempted one): what every run that executes
/// Terraform needs first.
pub(super) fn resolve(run: &mut Run<'_>) -> Result<Revision, Stop> {
    let revision = resolved(run)?;
    run.st.last_attempted_revision = Some(revision.to_string());
    Ok(revision)
}

/// The source revision, once resolved.
fn resolved(run: &Run<'_>) -> Result<Revision, Stop> {
    match run.need(Step::ResolveSource)? {
        (Outcome::Resolved(r), _) => Ok(r.clone()),
        _ => Err(unexpected(StepKind::ResolveSource)),
    }
}

/// The revision the run plans as, once the source said whether `resolved` changed anything
/// of the object's since the revision it last planned (a plan is pending) or applied; and
/// whether it did (`false` also when `resolved` is that revision).
fn since_last(run: &mut Run<'_>, resolved: &Revision) -> Result<(Revision, bool), Stop> {
    if known(run) == Some(resolved.to_string().as_str()) {
        return Ok((resolved.clone(), false));
    }
    let Some(last) = last_revision(run, resolved).filter(|last| last != resolved) else {
        return Ok((resolved.clone(), true));
    };
    let step = Step::CompareSource {
        from: last.clone(),
        to: resolved.clone(),
    };
    let touched = match run.need(step)? {
        (Outcome::SourceCompared { touched }, _) => touched.is_some(),
        _ => return Err(unexpected(StepKind::CompareSource)),
    };
    if touched {
        return Ok((resolved.clone(), true));
    }
    if run.start().plan.pending.is_empty() {
        // What was applied is what this revision holds for the object.
        run.st.last_applied_revision = Some(resolved.to_string());
        Ok((resolved.clone(), false))
    } else {
        Ok((last, false))
    }
}

/// The revision the object last planned (a plan is pending) or applied, as status has it.
fn known<'a>(run: &Run<'a>) -> Option<&'a str> {
    let start = run.start();
    if start.plan.pending.is_empty() {
        start.last_applied_revision.as_deref()
    } else {
        start.last_planned_revision.as_deref()
    }
}

/// The revision to compare with, when comparing may spare a plan: the pending plan's, else
/// the last applied one, of the same reference. `None` (plan as the resolved revision) when
/// the spec changed or a re-plan or destroy is asked for (each plans anyway), or when every
/// file concerns the object (`spec.path` at the root, with nothing to compare).
fn last_revision(run: &Run<'_>, resolved: &Revision) -> Option<Revision> {
    let start = run.start();
    let spec = &run.s.object.spec;
    if spec.destroy
        || crate::source::watch::is_root(&spec.path)
        || start.observed_generation != run.generation()
        || replan_requested(run)
    {
        return None;
    }
    let last = Revision::parse(known(run)?)?;
    (last.reference == resolved.reference).then_some(last)
}
