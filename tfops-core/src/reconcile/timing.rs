//! When a run is due: triggers, intervals and retry backoff. Time is always a parameter.

use std::time::Duration;

use super::queue::{self, RunnerQueue, Slot};
use crate::api::{TerraformObject, ValidSpec, annotations};
use crate::conditions::{ConditionType, Reason};
use crate::windows::Gate;

/// Why a run starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// `metadata.generation` differs from `status.observedGeneration` (a spec change, or the
    /// first run).
    NewGeneration,
    /// The `infra.argocd.io/reconcile` annotation has a value not yet handled.
    ReconcileRequested,
    /// The `infra.argocd.io/replan` annotation has a value not yet handled.
    ReplanRequested,
    /// The last run failed and its backoff elapsed.
    Retry,
    /// An earlier driver stopped while a run was under way (`status.activeRun`).
    Resume,
    /// `spec.interval` elapsed since the last run.
    Interval,
    /// A plan that may be applied waited for an apply window (`ApplyWindowClosed`), and one is
    /// open now.
    ApplyWindowOpened,
    /// The object waits for a runner Pod, and its turn came ([`Slot::Free`]) or its jittered
    /// wait elapsed.
    Queued,
    /// The caller's source poller saw a revision the object has not attempted
    /// ([`crate::reconcile::Snapshot::source_revision`]), before its interval elapsed. The run
    /// only looks at the source, and ends there when the revision changed nothing of the
    /// object's (no runner Pod, and the interval's clock is not reset).
    NewRevision,
    /// An approval recorded on a merged pull request approves the content of the pending
    /// plan, and no run has looked at it yet.
    ApprovedInPullRequest,
}

impl Trigger {
    /// Whether a run of this trigger waits for its turn in the queue for runner Pods: all but
    /// a person's request (reconcile, replan) and a run taken up again, which try at once.
    pub fn takes_its_turn(self) -> bool {
        // A new revision may change nothing of the object's: it needs a runner Pod only when
        // it does, and then the runner's start says whether there is room for it.
        !matches!(
            self,
            Trigger::ReconcileRequested
                | Trigger::ReplanRequested
                | Trigger::Resume
                | Trigger::NewRevision
                | Trigger::ApprovedInPullRequest
        )
    }
}

/// How long after a failed run the next one starts: `spec.interval` when what the source
/// names does not exist ([`Reason::SourceNotFound`]: only a person can create it) or a user
/// stopped the run ([`Reason::RunCancelled`]: not to be started again at once), else
/// [`backoff`].
pub fn retry_wait(
    reason: Reason,
    retry_interval: Duration,
    interval: Duration,
    failures: i64,
) -> Duration {
    if matches!(reason, Reason::SourceNotFound | Reason::RunCancelled) {
        interval
    } else {
        backoff(retry_interval, interval, failures)
    }
}

/// The delay before the retry after `failures` consecutive failures: `retry_interval` doubled
/// per further failure, capped at the larger of `interval` and `retry_interval`.
pub fn backoff(retry_interval: Duration, interval: Duration, failures: i64) -> Duration {
    let cap = interval.max(retry_interval);
    let doublings = (failures - 1).clamp(0, 31) as u32;
    retry_interval
        .checked_mul(1u32 << doublings)
        .unwrap_or(cap)
        .min(cap)
}

/// Whether `failures` consecutive failures exhaust `spec.remediation.retries`.
pub fn retries_exhausted(object: &TerraformObject, failures: i64) -> bool {
    let retries = object.spec.remediation.retries;
    retries >= 0 && failures > retries
}

pub(super) use crate::duration::elapsed;

/// Whether a run is due now, and why; otherwise when it will be (`None`: only after a change
/// by a human, when retries are exhausted).
///
/// Only spec generation, tfops' own annotations, time, the queue's turn and a revision the
/// caller's source poller saw (`source_revision`) start runs: a status-only update never does,
/// because every status field read here is written by tfops at the end of a run (and a
/// waiter's turn is the caller's [`RunnerQueue`], not its status).
pub fn due(
    object: &TerraformObject,
    spec: &ValidSpec,
    queue: &RunnerQueue,
    source_revision: Option<&str>,
    now: jiff::Timestamp,
) -> Result<Trigger, Option<Duration>> {
    let status = &object.status;
    if status.active_run.is_some() && status.reconciliation_failures == 0 {
        return Ok(Trigger::Resume);
    }
    if object.metadata.generation != status.observed_generation {
        return Ok(Trigger::NewGeneration);
    }
    if let Some(v) = object.annotation(annotations::RECONCILE)
        && status.last_handled_reconcile_at.as_deref() != Some(v)
    {
        return Ok(Trigger::ReconcileRequested);
    }
    if let Some(v) = object.annotation(annotations::REPLAN)
        && status.last_handled_replan_at.as_deref() != Some(v)
    {
        return Ok(Trigger::ReplanRequested);
    }
    if queue::waiting_since(status).is_some() {
        return turn(object, spec, queue, now);
    }
    let Some(last) = status.last_run_at else {
        return Ok(Trigger::Interval);
    };
    let (wait, trigger) = if status.reconciliation_failures > 0 {
        if retries_exhausted(object, status.reconciliation_failures) {
            return Err(None);
        }
        // The last failure's reason, as the Ready condition keeps it.
        let last = crate::conditions::find(&status.conditions, ConditionType::Ready)
            .and_then(|c| c.reason_code())
            .filter(|r| matches!(r, Reason::SourceNotFound | Reason::RunCancelled));
        let wait = retry_wait(
            last.unwrap_or(Reason::Progressing),
            spec.retry_interval,
            spec.interval,
            status.reconciliation_failures,
        );
        (wait, Trigger::Retry)
    } else {
        (spec.interval, Trigger::Interval)
    };
    // A plan waiting for an apply window is taken up as soon as one opens.
    let mut opens_in = None;
    let waits_for_window = crate::conditions::find(&status.conditions, ConditionType::Ready)
        .is_some_and(|c| c.reason == Reason::ApplyWindowClosed.as_str());
    if waits_for_window && status.reconciliation_failures == 0 {
        match spec.windows.gate(now) {
            Gate::Open => return Ok(Trigger::ApplyWindowOpened),
            Gate::Closed { opens, .. } => opens_in = opens.map(|t| elapsed(now, t)),
        }
    }
    let since = elapsed(last, now);
    if since >= wait {
        Ok(trigger)
    } else if trigger == Trigger::Interval && polled_new(object, source_revision) {
        // A failing object keeps its backoff: a commit elsewhere would not mend it, and its
        // retry resolves the source anyway.
        Ok(Trigger::NewRevision)
    } else {
        let wait = wait - since;
        Err(Some(
            opens_in.map_or(wait, |o| o.max(Duration::from_secs(1)).min(wait)),
        ))
    }
}

/// Whether the poller saw a revision the object has not attempted yet.
fn polled_new(object: &TerraformObject, source_revision: Option<&str>) -> bool {
    source_revision
        .is_some_and(|seen| object.status.last_attempted_revision.as_deref() != Some(seen))
}

/// When an object waiting for a runner Pod runs: at its turn ([`Slot::Free`]), else once its
/// jittered wait since its last attempt (or look) elapsed.
fn turn(
    object: &TerraformObject,
    spec: &ValidSpec,
    queue: &RunnerQueue,
    now: jiff::Timestamp,
) -> Result<Trigger, Option<Duration>> {
    if queue.slot == Slot::Free {
        return Ok(Trigger::Queued);
    }
    match (
        object.status.last_run_at,
        queue::retry_wait(object, spec.retry_interval, spec.interval),
    ) {
        (Some(last), Some(wait)) if elapsed(last, now) < wait => {
            Err(Some(wait - elapsed(last, now)))
        }
        _ => Ok(Trigger::Queued),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_interval() {
        let (r, i) = (Duration::from_secs(15), Duration::from_secs(600));
        let got: Vec<u64> = (1..=8).map(|f| backoff(r, i, f).as_secs()).collect();
        assert_eq!(got, vec![15, 30, 60, 120, 240, 480, 600, 600]);
        assert_eq!(backoff(r, i, i64::MAX), i);
        // A retry interval above the interval is used as is.
        assert_eq!(backoff(Duration::from_secs(900), i, 3).as_secs(), 900);
    }
}
