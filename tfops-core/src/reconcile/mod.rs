//! The reconciler: a pure decision function and a driver that performs its steps.
//!
//! [`decide`] takes a [`Snapshot`] (the object as at the start of the run, its dependencies and
//! dependants, the steps performed so far in this run, and the time) and returns the next
//! [`Step`] with the status to write. It reads no clock and performs no IO, so the same snapshot
//! always gives the same decision. [`Driver`] loops: decide, write the status if it changed,
//! emit events for changed conditions, perform the step through the [`crate::ports`], record the
//! outcome, until the decision is [`Step::Done`].
//!
//! A run follows seed 000: trigger (new generation, the `infra.argocd.io/reconcile` or
//! `infra.argocd.io/replan` annotation, a due retry, the interval), dependencies, source,
//! runner, setup, drift detection when nothing changed, plan, approval, apply, outputs and
//! inventory, health checks, cleanup. A failed step ends the run with `Ready=False` and the
//! step's reason, counts a failure, and schedules a retry with exponential backoff from
//! `retryInterval` (capped at `interval`) until `remediation.retries` is exhausted
//! (`RetryLimitReached`, `Stalled`). Deletion goes through the finalizer; see the
//! `deletion` module's documentation for its guarantees.

mod apply;
mod apply_runner;
mod approval;
mod deletion;
mod driver;
mod failure;
mod flow;
mod model;
mod run;
mod steps;
mod timing;

pub use driver::{Driver, DriverError, RunReport};
pub use failure::{MAX_MESSAGE, SubStep, failure, trim_message};
pub use model::{
    Decision, DependencyState, DependencyView, Outcome, Progress, Record, Snapshot, Step,
    StepFailure, StepKind,
};
pub use timing::{Trigger, backoff, due, retries_exhausted};

use crate::api::FINALIZER;

/// Decides the next step of a reconcile. Pure and total: no clock, no IO, no panics.
pub fn decide(snapshot: &Snapshot) -> Decision {
    let object = &snapshot.object;
    if object.metadata.deletion_timestamp.is_some() {
        return deletion::decide(snapshot);
    }
    let has_finalizer = object.metadata.finalizers.iter().any(|f| f == FINALIZER)
        || snapshot.progress.succeeded(StepKind::AddFinalizer);
    if !has_finalizer {
        let step = if snapshot.progress.attempted(StepKind::AddFinalizer) {
            // The API refused the update; try again soon without touching status.
            Step::Done {
                requeue_after: Some(std::time::Duration::from_secs(5)),
            }
        } else {
            Step::AddFinalizer
        };
        return Decision {
            step,
            status: object.status.clone(),
        };
    }
    run::decide(snapshot)
}
