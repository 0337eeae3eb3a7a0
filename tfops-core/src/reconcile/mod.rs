//! The reconciler: a pure decision function and a driver that performs its steps.
//!
//! [`decide`] takes a [`Snapshot`] (the object as at the start of the run, its dependencies and
//! dependants, the steps performed so far in this run, and the time) and returns the next
//! [`Step`] with the status to write. It reads no clock and performs no IO, so the same snapshot
//! always gives the same decision. [`Driver`] loops: decide, write the status if it changed,
//! emit events for changed conditions, perform the step through the [`crate::ports`], record the
//! outcome, until the decision is [`Step::Done`].
//!
//! A run is a sequence of steps, one module each, read top to bottom in [`decide`]: trigger,
//! restart, dependencies, source, runner, setup, drift, plan, approval, apply, outputs,
//! cleanup; deletion behind the finalizer. Each step's function gives
//! what the step produced, or stops the run: at the next step to perform, or at its end. A
//! failed step ends the run with `Ready=False` and the step's reason, counts a failure, and
//! schedules a retry with exponential backoff from `retryInterval` (capped at `interval`) until
//! `remediation.retries` is exhausted (`RetryLimitReached`, `Stalled`). A runner Pod refused by
//! a ResourceQuota is no failure: the object waits in its namespace's queue ([`RunnerQueue`]).

mod apply;
mod approval;
mod cleanup;
mod deletion;
mod dependencies;
mod drift;
mod driver;
mod failure;
mod model;
mod outputs;
mod perform;
mod plan;
pub mod queue;
mod restart;
mod run;
mod runner;
mod setup;
mod source;
mod timing;
mod trigger;
mod waiting;
mod window;

pub use driver::{Driver, DriverError, RunReport};
pub use failure::{MAX_MESSAGE, SubStep, failure, trim_message};
pub use model::{
    Decision, DependencyState, DependencyView, Outcome, OutputsStep, PlanStep, Progress, Record,
    Snapshot, Step, StepFailure, StepKind, Writer,
};
pub use queue::{Place, RunnerQueue, Slot};
pub use timing::{Trigger, backoff, due, retries_exhausted};

use std::time::Duration;

use crate::api::{FINALIZER, ValidSpec, validate};
use crate::conditions::{ConditionStatus, ConditionType};
use run::{Run, Stop};

/// Decides the next step of a reconcile. Pure and total: no clock, no IO, no panics.
pub fn decide(s: &Snapshot) -> Decision {
    if s.object.metadata.deletion_timestamp.is_some() {
        return deletion::deletion(s);
    }
    if let Some(decision) = add_finalizer(s) {
        return decision;
    }
    let valid = match validate(&s.object) {
        Ok(valid) => valid,
        Err(e) => {
            return cleanup::stalled(Run::new(s, Duration::ZERO, Duration::ZERO), e.to_string());
        }
    };
    let mut run = Run::new(s, valid.retry_interval, valid.interval);
    run.windows = valid.windows.clone();
    let result = steps(&mut run, &valid);
    cleanup::cleanup(run, result)
}

/// The steps of a run, in order; `Ok` when all of them went through.
fn steps(run: &mut Run<'_>, valid: &ValidSpec) -> Result<(), Stop> {
    trigger::trigger(run, valid)?;
    let done = match restart::restart(run)? {
        Some(recorded) => apply::resumed(run, recorded)?,
        None => {
            // A run only the poller started waits for nothing before it knows the revision
            // concerns the object ([`source::source`] checks dependencies then).
            if !trigger::source_only(run, valid) {
                dependencies::dependencies(run, None)?;
            }
            let revision = source::source(run, valid)?;
            runner::runner(run)?;
            let inputs = setup::setup(run)?;
            let drift = drift::drift(run, valid, &revision, inputs)?;
            let plan_id = crate::naming::plan_id(&revision.reference, revision.sha());
            match plan::plan(run, &revision, &plan_id, drift)? {
                None => plan::no_changes(run, &revision, Some(inputs))?,
                Some(planned) => {
                    let given = approval::approval(run, valid, &plan_id, &planned)?;
                    apply::apply(run, &revision, inputs, &plan_id, planned, drift, &given)?
                }
            }
        }
    };
    outputs::outputs(run, valid)?;
    run.at_end();
    run.set(
        ConditionType::Ready,
        ConditionStatus::True,
        done.reason,
        done.message,
    );
    Ok(())
}

/// Adds tfops' finalizer first: deletion must go through it. `None` once it is there.
fn add_finalizer(s: &Snapshot) -> Option<Decision> {
    let object = &s.object;
    let has_finalizer = object.metadata.finalizers.iter().any(|f| f == FINALIZER)
        || s.progress.succeeded(StepKind::AddFinalizer);
    if has_finalizer {
        return None;
    }
    let step = if s.progress.attempted(StepKind::AddFinalizer) {
        // The API refused the update; try again soon without touching status.
        Step::Done {
            requeue_after: Some(Duration::from_secs(5)),
        }
    } else {
        Step::AddFinalizer
    };
    Some(Decision {
        step,
        status: object.status.clone(),
    })
}
