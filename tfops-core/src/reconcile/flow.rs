//! The parts of a run shared by the apply path and the deletion path: reading the progress,
//! preparing the runner, and ending a run (success, failure, cleanup, requeue).

use std::time::Duration;

use super::model::{Decision, Outcome, Snapshot, Step, StepFailure, StepKind};
use super::timing::{backoff, retries_exhausted};
use crate::api::{ActiveRun, ForceUnlock, LockStatus, TerraformStatus, annotations};
use crate::conditions::{self, ConditionStatus, ConditionType, Reason};
use crate::ports::Revision;

/// What the progress says about one step.
pub(super) enum Got<'a> {
    /// Not done yet in this run.
    Todo,
    /// Succeeded, at this time.
    Ok(&'a Outcome, jiff::Timestamp),
    /// Failed.
    Failed(&'a StepFailure),
}

/// How a run goes on after a phase.
pub(super) enum Flow<T> {
    /// The phase is complete; here is what it produced.
    Go(T),
    /// The run stops here (for now).
    Stop(Stop),
}

/// Why a run stops.
pub(super) enum Stop {
    /// This step is next.
    Next(Step),
    /// The run is over.
    End(End),
}

/// How a run ended.
pub(super) enum End {
    /// Everything asked for was done (including waiting for approval, and reported drift).
    Success,
    /// A step failed.
    Failed(StepFailure),
    /// Blocked before any work, without counting as a failure (dependencies, dependants):
    /// nothing is marked handled, and the check repeats after `retryInterval`.
    Waiting,
    /// The object can make no progress until a human changes it (invalid spec).
    Stalled,
}

/// A run being decided: the snapshot, the status built so far, and the durations in force.
pub(super) struct Run<'a> {
    pub s: &'a Snapshot,
    pub st: TerraformStatus,
    pub retry_interval: Duration,
    pub interval: Duration,
}

/// Unwraps a [`Flow`], or returns the decision for its stop.
macro_rules! go {
    ($run:ident, $flow:expr) => {
        match $flow {
            $crate::reconcile::flow::Flow::Go(v) => v,
            $crate::reconcile::flow::Flow::Stop(stop) => return $run.finish(stop),
        }
    };
}
pub(super) use go;

impl<'a> Run<'a> {
    pub fn new(s: &'a Snapshot, retry_interval: Duration, interval: Duration) -> Self {
        Self {
            s,
            st: s.object.status.clone(),
            retry_interval,
            interval,
        }
    }

    pub fn generation(&self) -> i64 {
        self.s.object.metadata.generation
    }

    /// The status at the start of the run.
    pub fn start(&self) -> &'a TerraformStatus {
        &self.s.object.status
    }

    pub fn got(&self, step: StepKind) -> Got<'a> {
        match self.s.progress.latest(step) {
            None => Got::Todo,
            Some(r) => match &r.result {
                Ok(o) => Got::Ok(o, r.at),
                Err(f) => Got::Failed(f),
            },
        }
    }

    pub fn set(
        &mut self,
        kind: ConditionType,
        status: ConditionStatus,
        reason: Reason,
        message: impl Into<String>,
    ) {
        let generation = self.generation();
        conditions::set(
            &mut self.st.conditions,
            kind,
            status,
            reason,
            message,
            generation,
            self.s.started_at,
        );
    }

    /// Ends the run with `failure`, shown on the `kind` condition as `False`.
    pub fn fail<T>(&mut self, kind: ConditionType, failure: StepFailure) -> Flow<T> {
        self.set(
            kind,
            ConditionStatus::False,
            failure.reason,
            failure.message.clone(),
        );
        Flow::Stop(Stop::End(End::Failed(failure)))
    }

    pub fn remove(&mut self, kind: ConditionType) {
        conditions::remove(&mut self.st.conditions, kind);
    }

    /// Runs `step` unless it is done; on success gives its outcome and time.
    pub fn need(&self, step: Step) -> Flow<(&'a Outcome, jiff::Timestamp)> {
        match self.got(step.kind()) {
            Got::Todo => Flow::Stop(Stop::Next(step)),
            Got::Failed(f) => Flow::Stop(Stop::End(End::Failed(f.clone()))),
            Got::Ok(o, at) => Flow::Go((o, at)),
        }
    }

    /// Like [`Run::need`], and a failure also marks the phase's condition `False` with the
    /// failure's reason and message.
    pub fn need_phase(
        &mut self,
        step: Step,
        phase: ConditionType,
    ) -> Flow<(&'a Outcome, jiff::Timestamp)> {
        match self.need(step) {
            Flow::Stop(Stop::End(End::Failed(f))) => {
                self.set(phase, ConditionStatus::False, f.reason, f.message.clone());
                Flow::Stop(Stop::End(End::Failed(f)))
            }
            other => other,
        }
    }

    /// The source revision: what every run that executes Terraform needs first.
    pub fn resolve(&mut self) -> Flow<Revision> {
        let revision = match self.need(Step::ResolveSource) {
            Flow::Go((Outcome::Resolved(r), _)) => r.clone(),
            Flow::Go(_) => return unexpected(StepKind::ResolveSource),
            Flow::Stop(s) => return Flow::Stop(s),
        };
        self.st.last_attempted_revision = Some(revision.to_string());
        Flow::Go(revision)
    }

    /// Fetch, runner, setup, and a requested lock release (after [`Run::resolve`]). Gives the
    /// digest of the inputs setup used.
    pub fn prepare(&mut self) -> Flow<&'a str> {
        if let Flow::Stop(s) = self.need(Step::FetchSource) {
            return Flow::Stop(s);
        }
        match self.need(Step::StartRunner) {
            Flow::Go((Outcome::RunnerStarted { binary, .. }, _)) => {
                if !binary.is_empty() {
                    self.st.binary = Some(binary.clone());
                }
            }
            Flow::Go(_) => return unexpected(StepKind::StartRunner),
            Flow::Stop(s) => return Flow::Stop(s),
        }
        let inputs_digest = match self.need(Step::Setup) {
            Flow::Go((
                Outcome::SetUp {
                    inputs_digest,
                    binary,
                },
                _,
            )) => {
                if !binary.is_empty() {
                    self.st.binary = Some(binary.clone());
                }
                inputs_digest.as_str()
            }
            Flow::Go(_) => return unexpected(StepKind::Setup),
            Flow::Stop(s) => return Flow::Stop(s),
        };
        if self.s.progress.succeeded(StepKind::ForceUnlock) {
            self.lock_released();
        } else if let Some(lock_id) = self.unlock_requested()
            && !self.s.progress.attempted(StepKind::ForceUnlock)
        {
            return Flow::Stop(Stop::Next(Step::ForceUnlock { lock_id }));
        }
        // A requested unlock that failed does not end the run: the lock may have been released
        // by its holder meanwhile, and the next Terraform command says whether it still is.
        Flow::Go(inputs_digest)
    }

    /// The runner this run talks to: the one it started, or the one it attached to.
    pub fn runner_ref(&self) -> String {
        let started = self
            .s
            .progress
            .records
            .iter()
            .rev()
            .find_map(|r| match &r.result {
                Ok(Outcome::RunnerStarted { runner, .. }) => Some(runner.clone()),
                _ => None,
            });
        started
            .or_else(|| self.start().active_run.as_ref().map(|a| a.runner.clone()))
            .unwrap_or_default()
    }

    /// An earlier driver recorded a run under way in status and stopped (a restart, an
    /// eviction): attach to it and take its result before doing anything else, so that nothing
    /// runs twice. Gives the recorded run when it succeeded; `None` when there was none, or
    /// when its runner is gone (its result is unknown: the run goes on from the state, and
    /// the `Apply` condition says what happened). A runner that cannot be reached now fails
    /// the run and keeps the record, to attach again on the retry.
    pub fn resume(&mut self) -> Flow<Option<&'a ActiveRun>> {
        let Some(active) = self.start().active_run.as_ref() else {
            return Flow::Go(None);
        };
        match self.got(StepKind::Attach) {
            Got::Todo => Flow::Stop(Stop::Next(Step::Attach {
                runner: active.runner.clone(),
                run_id: active.run_id.clone(),
            })),
            Got::Failed(f) => {
                if f.reason != Reason::RunnerConnectionFailed {
                    // The recorded run ended, and it failed: that is its result.
                    self.st.active_run = None;
                }
                self.set(
                    ConditionType::Apply,
                    ConditionStatus::False,
                    f.reason,
                    format!(
                        "run {} (plan {}): {}",
                        active.run_id, active.plan_id, f.message
                    ),
                );
                Flow::Stop(Stop::End(End::Failed(f.clone())))
            }
            Got::Ok(Outcome::RunGone { why }, _) => {
                self.st.active_run = None;
                self.set(
                    ConditionType::Apply,
                    ConditionStatus::Unknown,
                    Reason::ApplyInterrupted,
                    format!(
                        "the apply of plan {} (run {}, started {}) was interrupted and cannot be found ({why}): its result is unknown, so this run plans again from the state",
                        active.plan_id, active.run_id, active.started_at
                    ),
                );
                Flow::Go(None)
            }
            Got::Ok(_, _) => {
                self.st.active_run = None;
                Flow::Go(Some(active))
            }
        }
    }

    /// Records that no lock stops Terraform (a release, or a command that took the lock).
    pub fn lock_released(&mut self) {
        self.st.lock = LockStatus::default();
        self.remove(ConditionType::StateLocked);
    }

    /// The lock id a user asked to release, if it is the lock that stopped the last run.
    fn unlock_requested(&self) -> Option<String> {
        let pending = &self.start().lock.pending;
        if pending.is_empty() {
            return None;
        }
        let object = &self.s.object;
        let by_annotation = object.annotation(annotations::FORCE_UNLOCK) == Some(pending.as_str());
        let by_spec = object.spec.tfstate.force_unlock == ForceUnlock::Yes
            && object.spec.tfstate.lock_identifier == *pending;
        (by_annotation || by_spec).then(|| pending.clone())
    }

    /// `Ready=False` and `Stalled=True` with the same reason and message.
    pub fn set_stalled(&mut self, reason: Reason, message: String) {
        self.set(
            ConditionType::Ready,
            ConditionStatus::False,
            reason,
            message.clone(),
        );
        self.set(
            ConditionType::Stalled,
            ConditionStatus::True,
            reason,
            message,
        );
    }

    /// Ends the run as stalled by an invalid spec: nothing happens until the spec changes.
    pub fn invalid_spec(mut self, message: String) -> Decision {
        self.set_stalled(Reason::InvalidSpec, message);
        self.end(End::Stalled)
    }

    /// Ends the run waiting for dependencies, without counting a failure.
    pub fn wait_for_dependencies(mut self, message: String) -> Decision {
        self.set(
            ConditionType::Ready,
            ConditionStatus::Unknown,
            Reason::DependencyNotReady,
            message,
        );
        self.end(End::Waiting)
    }

    /// Turns a stop into the decision: the next step, or the end of the run.
    pub fn finish(self, stop: Stop) -> Decision {
        match stop {
            Stop::Next(step) => self.next(step),
            Stop::End(end) => self.end(end),
        }
    }

    pub fn next(self, step: Step) -> Decision {
        Decision {
            step,
            status: self.st,
        }
    }

    /// Ends the run: records the result, cleans the runner up, and says when to come back.
    pub fn end(mut self, end: End) -> Decision {
        let requeue = match end {
            End::Success => {
                self.st.reconciliation_failures = 0;
                if self.is_stalled_by(Reason::RetryLimitReached)
                    || self.is_stalled_by(Reason::InvalidSpec)
                {
                    self.remove(ConditionType::Stalled);
                }
                Some(self.interval)
            }
            End::Failed(failure) => {
                if let Some(decision) = self.auto_unlock(&failure) {
                    return decision;
                }
                self.record_failure(failure)
            }
            End::Waiting => {
                // Nothing was attempted: keep the start's bookkeeping so the trigger stays due.
                let ready = conditions::find(&self.st.conditions, ConditionType::Ready).cloned();
                let mut st = self.start().clone();
                st.conditions
                    .retain(|c| c.type_ != ConditionType::Ready.as_str());
                st.conditions.extend(ready);
                // A recorded run taken up and found lost is over: keep what that says (no
                // record, the `Apply` condition), and nothing is in progress any more.
                if self.s.progress.attempted(StepKind::Attach) {
                    st.active_run = self.st.active_run.clone();
                    let apply =
                        conditions::find(&self.st.conditions, ConditionType::Apply).cloned();
                    st.conditions.retain(|c| {
                        c.type_ != ConditionType::Apply.as_str()
                            && c.type_ != ConditionType::Reconciling.as_str()
                    });
                    st.conditions.extend(apply);
                }
                return Decision {
                    step: Step::Done {
                        requeue_after: Some(self.retry_interval),
                    },
                    status: st,
                };
            }
            End::Stalled => None,
        };
        self.st.observed_generation = self.generation();
        self.st.last_run_at = Some(self.ended_at());
        self.remove(ConditionType::Reconciling);
        let runner_up = self.s.progress.succeeded(StepKind::StartRunner);
        if runner_up && !self.s.progress.attempted(StepKind::Cleanup) {
            return self.next(Step::Cleanup);
        }
        self.next(Step::Done {
            requeue_after: requeue,
        })
    }

    /// When the run's work ended: the end of its last step before cleanup (or its start), so
    /// the status decided before cleanup and after it are the same, and written once.
    fn ended_at(&self) -> jiff::Timestamp {
        self.s
            .progress
            .records
            .iter()
            .rev()
            .find(|r| r.step != StepKind::Cleanup)
            .map_or(self.s.started_at, |r| r.at)
    }

    fn is_stalled_by(&self, reason: Reason) -> bool {
        conditions::find(&self.st.conditions, ConditionType::Stalled)
            .is_some_and(|c| c.reason == reason.as_str())
    }

    /// With `forceUnlock: auto`, a lock that stops a step is released once per run and the
    /// step runs again, unless this object's own runner holds it (Terraform's lock says
    /// `Who: <user>@<host>`, and a runner's host is [`crate::naming::runner_host`]): that run may
    /// still be live (a driver that restarted, a Pod being replaced), and breaking its lock
    /// would let two applies write one state.
    ///
    /// Such a lock is released, whatever `forceUnlock` says, only when the runner that found
    /// it proved its holder gone (`lock_holder_gone`: the lock names that runner's own Pod as
    /// host, and a runner runs one command at a time, so the process that took it ended with
    /// an earlier command or an earlier Pod of that name); the `StateLocked` condition (and
    /// so an event) says so. Otherwise a human releases it.
    fn auto_unlock(&mut self, failure: &StepFailure) -> Option<Decision> {
        let (lock_id, holder) = failure.lock.as_ref()?;
        let meta = &self.s.object.metadata;
        let can = self.s.progress.succeeded(StepKind::Setup)
            && !self.s.progress.attempted(StepKind::ForceUnlock);
        if crate::naming::held_by_own_runner(&meta.namespace, &meta.name, holder) {
            if !(failure.lock_holder_gone && can) {
                return None;
            }
            let message = format!(
                "the state lock {lock_id} is held by {holder}, this object's runner, which is gone \
                 (nothing runs on that host any more): released, and the run goes on"
            );
            self.set(
                ConditionType::StateLocked,
                ConditionStatus::True,
                Reason::LockHolderGone,
                message,
            );
            return Some(Decision {
                step: Step::ForceUnlock {
                    lock_id: lock_id.clone(),
                },
                status: self.st.clone(),
            });
        }
        let auto = self.s.object.spec.tfstate.force_unlock == ForceUnlock::Auto;
        (auto && can).then(|| Decision {
            step: Step::ForceUnlock {
                lock_id: lock_id.clone(),
            },
            status: self.st.clone(),
        })
    }

    fn record_failure(&mut self, failure: StepFailure) -> Option<Duration> {
        let failures = self.start().reconciliation_failures.saturating_add(1);
        self.st.reconciliation_failures = failures;
        if let Some((lock_id, holder)) = &failure.lock {
            self.st.lock = LockStatus {
                pending: lock_id.clone(),
                holder: holder.clone(),
            };
            self.set(
                ConditionType::StateLocked,
                ConditionStatus::True,
                Reason::LockHeld,
                format!("state is locked by {holder} (lock id {lock_id}); release it with the force-unlock action if that holder is gone"),
            );
        }
        if retries_exhausted(&self.s.object, failures) {
            let message = format!(
                "gave up after {failures} failed runs (spec.remediation.retries = {}); last: {}: {}. Change the spec or set the {} annotation to try again",
                self.s.object.spec.remediation.retries,
                failure.reason,
                failure.message,
                annotations::RECONCILE
            );
            self.set_stalled(Reason::RetryLimitReached, message);
            None
        } else {
            let wait = backoff(self.retry_interval, self.interval, failures);
            self.set(
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
}

/// The end of a run whose driver recorded another outcome than `step` has.
pub(super) fn unexpected<T>(step: StepKind) -> Flow<T> {
    // The driver records exactly the outcome variant of each step; anything else is a bug in an
    // embedder's driver, reported as a failure rather than a panic.
    Flow::Stop(Stop::End(End::Failed(StepFailure {
        reason: Reason::Progressing,
        message: format!("internal error: unexpected outcome recorded for {step:?}"),
        lock: None,
        lock_holder_gone: false,
    })))
}
