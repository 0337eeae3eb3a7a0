//! Cleanup: the end of a run. The result is recorded (success, a failure counted with its
//! retry, waiting for dependencies or for a runner Pod, stalled), the runner session ends, and the object is requeued: after
//! `spec.interval` on success, after the backoff from `retryInterval` on failure.
//!
//! > Cleanup. The working directory is removed, the runner Pod is deleted
//! > (spec.runner.alwaysCleanup, default) and the object is requeued after spec.interval.

use std::time::Duration;

use super::model::{Decision, Outcome, Step, StepFailure, StepKind};
use super::run::{End, Run, Stop};
use super::timing::{retries_exhausted, retry_wait};
use super::waiting;
use crate::api::{ForceUnlock, LockStatus, annotations};
use crate::conditions::{self, ConditionStatus, ConditionType, Reason};

/// The decision at the end of a run's steps: the next step when one `Stop`ped it there,
/// else the end of the run ([`End::Success`] when every step went through).
pub(super) fn cleanup(run: Run<'_>, result: Result<(), Stop>) -> Decision {
    match result {
        Ok(()) => end(run, End::Success),
        Err(Stop::Next(step)) => run.next(*step),
        Err(Stop::End(ended)) => end(run, ended),
    }
}

/// Ends the run as stalled by an invalid spec: nothing happens until the spec changes.
pub(super) fn stalled(mut run: Run<'_>, message: String) -> Decision {
    run.set_stalled(Reason::InvalidSpec, message);
    end(run, End::Stalled)
}

/// Records the result, cleans the runner up, and says when to come back.
fn end(mut run: Run<'_>, ended: End) -> Decision {
    run.at_end();
    let requeue = match ended {
        End::Success => {
            succeeded(&mut run);
            Some(run.interval)
        }
        // A quota that refused the runner Pod: the object waits in the queue, no failure.
        End::Failed(failure) if failure.reason == Reason::RunnerQuotaExhausted => {
            let at = run.ended_at();
            Some(waiting::wait(&mut run, &failure.message, true, at))
        }
        End::Queued(why) => {
            let at = run.ended_at();
            Some(waiting::wait(&mut run, &why, false, at))
        }
        // Back when the window opens, or at the interval if that comes first (a new revision
        // may make another plan meanwhile).
        End::WindowClosed(opens_in) => {
            succeeded(&mut run);
            let opens_in = opens_in.map_or(run.interval, |d| d.max(Duration::from_secs(1)));
            Some(opens_in.min(run.interval))
        }
        End::Failed(failure) => {
            if let Some(decision) = auto_unlock(&mut run, &failure) {
                return decision;
            }
            record_failure(&mut run, failure)
        }
        End::Waiting => return waiting(run),
        End::Stalled => None,
        End::SourceSeen(next) => return source_seen(run, next),
    };
    // A spec written while an apply taken up here was under way is not observed yet: the
    // next run, at once, plans it.
    let observed = run.observed.unwrap_or(run.generation());
    let requeue = if observed < run.generation() {
        Some(Duration::ZERO)
    } else {
        requeue
    };
    run.st.observed_generation = observed;
    run.st.last_run_at = Some(run.ended_at());
    run.remove(ConditionType::Reconciling);
    let runner_up = run.s.progress.succeeded(StepKind::StartRunner);
    if runner_up && !run.s.progress.attempted(StepKind::Cleanup) {
        return run.next(Step::Cleanup);
    }
    run.next(Step::Done {
        requeue_after: requeue,
    })
}

/// A run that did what it could: no failures in a row, and no longer stalled by one.
fn succeeded(run: &mut Run<'_>) {
    run.st.reconciliation_failures = 0;
    if is_stalled_by(run, Reason::RetryLimitReached) || is_stalled_by(run, Reason::InvalidSpec) {
        run.remove(ConditionType::Stalled);
    }
}

/// A new revision that changed nothing of the object's, in a run only it started: recorded
/// (`lastAttemptedRevision`, and `lastAppliedRevision` when it counts as applied), without
/// moving `lastRunAt`. Back when it is due again (`next`: its interval, counted from the last
/// run, or an apply window's opening).
fn source_seen(mut run: Run<'_>, next: Option<Duration>) -> Decision {
    run.remove(ConditionType::Reconciling);
    run.next(Step::Done {
        requeue_after: next.map(|d| d.max(Duration::from_secs(1))),
    })
}

/// Nothing was attempted: the start's bookkeeping is kept so the trigger stays due, with the
/// `Ready` condition saying what the run waits for.
fn waiting(run: Run<'_>) -> Decision {
    let ready = conditions::find(&run.st.conditions, ConditionType::Ready).cloned();
    let mut st = run.start().clone();
    st.conditions
        .retain(|c| c.type_ != ConditionType::Ready.as_str());
    st.conditions.extend(ready);
    // A recorded run taken up and found lost is over: keep what that says (no record, the
    // `Apply` condition), and nothing is in progress any more.
    if run.s.progress.attempted(StepKind::Attach) {
        st.active_run = run.st.active_run.clone();
        let apply = conditions::find(&run.st.conditions, ConditionType::Apply).cloned();
        st.conditions.retain(|c| {
            c.type_ != ConditionType::Apply.as_str()
                && c.type_ != ConditionType::Reconciling.as_str()
        });
        st.conditions.extend(apply);
    }
    Decision {
        step: Step::Done {
            requeue_after: Some(run.retry_interval),
        },
        status: st,
    }
}

fn is_stalled_by(run: &Run<'_>, reason: Reason) -> bool {
    conditions::find(&run.st.conditions, ConditionType::Stalled)
        .is_some_and(|c| c.reason == reason.as_str())
}

/// With `forceUnlock: auto`, a lock that stops a step is released once per run and the step
/// runs again, unless this object's own runner holds it (Terraform's lock says
/// `Who: <user>@<host>`, and a runner's host is [`crate::naming::runner_host`]): that run may
/// still be live (a driver that restarted, a Pod being replaced), and breaking its lock would
/// let two applies write one state.
///
/// Such a lock is released, whatever `forceUnlock` says, only when its holder is proved gone;
/// the `StateLocked` condition (and so an event) says so. Otherwise a human releases it. Two
/// proofs:
/// - the runner that found it names its own Pod as host (`lock_holder_gone`): a runner runs
///   one command at a time, so the process that took it ended with an earlier command or an
///   earlier Pod of that name;
/// - it names the host of the object's apply runner (`spec.runner.apply`), found by the plan
///   runner, and that runner's Pod is gone or ended for good ([`Step::ProbeRunner`], asked
///   once per run): no process of that host is left to hold it. (Otherwise every later run
///   plans in the plan runner, finds the lock and stops: the apply runner never starts again
///   to prove it.)
fn auto_unlock(run: &mut Run<'_>, failure: &StepFailure) -> Option<Decision> {
    let (lock_id, holder) = failure.lock.as_ref()?;
    let meta = &run.s.object.metadata;
    let can = (run.s.progress.succeeded(StepKind::Setup) || stopped_at_setup(run))
        && !run.s.progress.attempted(StepKind::ForceUnlock);
    if !can {
        return None;
    }
    // At setup, the release a user asked for is made here: setup, where it is made otherwise
    // (`setup::setup`), never succeeds while the lock stops its `init`.
    if stopped_at_setup(run) && super::setup::unlock_requested(run).as_deref() == Some(lock_id) {
        return Some(force_unlock(run, lock_id));
    }
    if !crate::naming::held_by_own_runner(&meta.namespace, &meta.name, holder) {
        let auto = run.s.object.spec.tfstate.force_unlock == ForceUnlock::Auto;
        return auto.then(|| force_unlock(run, lock_id));
    }
    let whose = if failure.lock_holder_gone {
        "this object's runner, which is gone (nothing runs on that host any more)".to_string()
    } else {
        let runner = apply_runner_holding(run, holder)?;
        match probed(run) {
            None => {
                return Some(Decision {
                    step: Step::ProbeRunner { runner },
                    status: run.st.clone(),
                });
            }
            Some((true, why)) => format!("this object's apply runner, whose Pod is gone ({why})"),
            // There, or it cannot be told: the lock may still be held.
            Some((false, _)) => return None,
        }
    };
    let message = format!(
        "the state lock {lock_id} is held by {holder}, {whose}: released, and the run goes on"
    );
    run.set(
        ConditionType::StateLocked,
        ConditionStatus::True,
        Reason::LockHolderGone,
        message,
    );
    Some(force_unlock(run, lock_id))
}

/// Whether the lock stopped the run's setup itself: `init` takes the lock to write a
/// workspace's first state, so a runner killed there leaves it held with no state written,
/// and every later `init` stops on it. The runner is up and its working directory names the
/// backend (Terraform records it before it writes that state), so the lock can be released
/// there as after any other command.
fn stopped_at_setup(run: &Run<'_>) -> bool {
    // (The look for an apply runner that may hold it comes after the failure it answers.)
    let mut records = run.s.progress.records.iter().rev();
    records
        .find(|r| r.step != StepKind::ProbeRunner)
        .is_some_and(|r| {
            matches!(r.step, StepKind::Setup | StepKind::ApplySetup)
                && matches!(&r.result, Err(f) if f.lock.is_some())
        })
}

/// The step that releases `lock_id`.
fn force_unlock(run: &Run<'_>, lock_id: &str) -> Decision {
    Decision {
        step: Step::ForceUnlock {
            lock_id: lock_id.to_string(),
        },
        status: run.st.clone(),
    }
}

/// The name of the object's apply runner when `holder` names its host and that runner is a
/// runner of its own (`spec.runner.apply`), not the one this run talks to.
fn apply_runner_holding(run: &Run<'_>, holder: &str) -> Option<String> {
    let meta = &run.s.object.metadata;
    run.s.object.spec.runner.apply.as_ref()?;
    let pod = crate::naming::apply_runner_pod_name(&meta.name);
    let names_it = crate::naming::held_by_pod(&meta.namespace, &pod, holder);
    (names_it && !run.s.progress.succeeded(StepKind::StartApplyRunner)).then_some(pod)
}

/// What this run's [`Step::ProbeRunner`] found: whether the runner is gone, and what was
/// found; `None` when it was not asked.
fn probed(run: &Run<'_>) -> Option<(bool, String)> {
    run.s
        .progress
        .records
        .iter()
        .rev()
        .find_map(|r| match &r.result {
            Ok(Outcome::RunnerProbed { gone, why }) => Some((*gone, why.clone())),
            _ => None,
        })
}

/// Counts the failure and says when to retry: after the backoff, or never once
/// `spec.remediation.retries` is exhausted (`Stalled`, `RetryLimitReached`).
fn record_failure(run: &mut Run<'_>, failure: StepFailure) -> Option<Duration> {
    let failures = run.start().reconciliation_failures.saturating_add(1);
    run.st.reconciliation_failures = failures;
    if let Some((lock_id, holder)) = &failure.lock {
        run.st.lock = LockStatus {
            pending: lock_id.clone(),
            holder: holder.clone(),
        };
        run.set(
            ConditionType::StateLocked,
            ConditionStatus::True,
            Reason::LockHeld,
            format!("state is locked by {holder} (lock id {lock_id}); release it with the force-unlock action if that holder is gone"),
        );
    }
    if retries_exhausted(&run.s.object, failures) {
        let message = format!(
            "gave up after {failures} failed runs (spec.remediation.retries = {}); last: {}: {}. Change the spec or set the {} annotation to try again",
            run.s.object.spec.remediation.retries,
            failure.reason,
            failure.message,
            annotations::RECONCILE
        );
        run.set_stalled(Reason::RetryLimitReached, message);
        None
    } else {
        let wait = retry_wait(failure.reason, run.retry_interval, run.interval, failures);
        run.set(
            ConditionType::Ready,
            ConditionStatus::False,
            failure.reason,
            format!(
                "{} (retry {failures} in {})",
                failure.message,
                crate::duration::format(wait)
            ),
        );
        Some(wait)
    }
}
