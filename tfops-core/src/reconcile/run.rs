//! A run being decided: the snapshot, the status built so far, and the bookkeeping every step
//! shares. A step's function gives what it produced, or [`Stop`]s the run: the next step to
//! perform, or the end of the run (which [`super::cleanup`] turns into the decision).

use std::cell::Cell;
use std::time::Duration;

use super::model::{Decision, Outcome, Snapshot, Step, StepFailure, StepKind, Writer};
use crate::api::{LockStatus, PlanStatus, TerraformStatus};
use crate::conditions::{self, ConditionStatus, ConditionType, Reason};
use crate::windows::Windows;

/// What the progress says about one step.
pub(super) enum Got<'a> {
    /// Not done yet in this run.
    Todo,
    /// Succeeded, at this time.
    Ok(&'a Outcome, jiff::Timestamp),
    /// Failed.
    Failed(&'a StepFailure),
}

/// Why a run stops.
#[derive(Debug)]
pub(super) enum Stop {
    /// This step is next (boxed: a step is large, and every step function returns a `Stop`).
    Next(Box<Step>),
    /// The run is over.
    End(End),
}

impl Stop {
    /// Stops at `step`, the next one to perform.
    pub fn next(step: Step) -> Self {
        Self::Next(Box::new(step))
    }
}

/// How a run ended.
#[derive(Debug)]
pub(super) enum End {
    /// Everything asked for was done (including waiting for approval, and reported drift).
    Success,
    /// A step failed.
    Failed(StepFailure),
    /// Blocked before any work, without counting as a failure (dependencies, dependants):
    /// nothing is marked handled, and the check repeats after `retryInterval`.
    Waiting,
    /// No runner Pod may start for it now (the queue's [`super::queue::Slot::Full`], with
    /// what stops it): it waits in the queue without an attempt, counting no failure.
    Queued(String),
    /// A plan that may be applied waits for an apply window, which opens after the duration
    /// given (`None`: none opens soon). Like [`End::Success`] otherwise: the plan is recorded.
    WindowClosed(Option<Duration>),
    /// The object can make no progress until a human changes it (invalid spec).
    Stalled,
    /// A run started only by a revision the caller's poller saw, which changed nothing of the
    /// object's: the revision is recorded as seen, and the interval's clock runs on (no
    /// `lastRunAt`), so the drift check comes when it would have: after the duration given
    /// (`None`: only on a change).
    SourceSeen(Option<Duration>),
}

/// What `Ready` says when a run's work is done (set after outputs and health checks).
pub(super) struct Done {
    pub reason: Reason,
    pub message: String,
}

/// A run being decided: the snapshot, the status built so far, and the durations in force.
pub(super) struct Run<'a> {
    pub s: &'a Snapshot,
    pub st: TerraformStatus,
    pub retry_interval: Duration,
    pub interval: Duration,
    /// `spec.applyWindows` (none unless the spec is valid).
    pub windows: Windows,
    /// The generation this run's work answers to, when not the snapshot's: an apply an
    /// earlier driver left, taken up, answers to the generation it was planned at.
    pub observed: Option<i64>,
    /// When the latest outcome the decision has read so far was recorded (the run's start
    /// before any): a condition that changes status now changed then. Read from the records,
    /// never from a clock, so every decision of the run stamps a condition with the same time
    /// and a replayed decision gives the same status. (A `Cell`: reading an outcome advances it,
    /// and outcomes are read through `&self`.)
    at: Cell<jiff::Timestamp>,
}

impl<'a> Run<'a> {
    pub fn new(s: &'a Snapshot, retry_interval: Duration, interval: Duration) -> Self {
        Self {
            s,
            st: s.object.status.clone(),
            retry_interval,
            interval,
            windows: Windows::default(),
            observed: None,
            at: Cell::new(s.started_at),
        }
    }

    pub fn generation(&self) -> i64 {
        self.s.object.metadata.generation
    }

    /// The status at the start of the run.
    pub fn start(&self) -> &'a TerraformStatus {
        &self.s.object.status
    }

    /// What the progress says about `step`; reading an outcome makes its time the one a
    /// condition set after it changed at.
    pub fn got(&self, step: StepKind) -> Got<'a> {
        let Some(r) = self.s.progress.latest(step) else {
            return Got::Todo;
        };
        self.at.set(self.at.get().max(r.at));
        match &r.result {
            Ok(o) => Got::Ok(o, r.at),
            Err(f) => Got::Failed(f),
        }
    }

    /// Sets the condition of `kind`. When its status changes, `lastTransitionTime` is the
    /// time of the latest outcome read so far: the step whose result changed it (the run's
    /// start for what the start decides).
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
            self.at.get(),
        );
    }

    /// When the run's work ended: the end of its last step before cleanup (or its start), so
    /// that the status decided before cleanup and after it are the same, and written once.
    pub fn ended_at(&self) -> jiff::Timestamp {
        self.s
            .progress
            .records
            .iter()
            .rev()
            .find(|r| r.step != StepKind::Cleanup)
            .map_or(self.s.started_at, |r| r.at)
    }

    /// What is set from now on changed when the run's work ended ([`Run::ended_at`]): the
    /// result of the whole run (`Ready` at its end, a failure counted).
    pub fn at_end(&self) {
        self.at.set(self.ended_at().max(self.at.get()));
    }

    pub fn remove(&mut self, kind: ConditionType) {
        conditions::remove(&mut self.st.conditions, kind);
    }

    /// Ends the run with `failure`, shown on the `kind` condition as `False`.
    pub fn fail(&mut self, kind: ConditionType, failure: StepFailure) -> Stop {
        self.set(
            kind,
            ConditionStatus::False,
            failure.reason,
            failure.message.clone(),
        );
        Stop::End(End::Failed(failure))
    }

    /// Runs `step` unless it is done; on success gives its outcome and time.
    pub fn need(&self, step: Step) -> Result<(&'a Outcome, jiff::Timestamp), Stop> {
        match self.got(step.kind()) {
            Got::Todo => Err(Stop::next(step)),
            Got::Failed(f) => Err(Stop::End(End::Failed(f.clone()))),
            Got::Ok(o, at) => Ok((o, at)),
        }
    }

    /// Like [`Run::need`], and a failure also marks the phase's condition `False` with the
    /// failure's reason and message.
    pub fn need_phase(
        &mut self,
        step: Step,
        phase: ConditionType,
    ) -> Result<(&'a Outcome, jiff::Timestamp), Stop> {
        match self.need(step) {
            Err(Stop::End(End::Failed(f))) => Err(self.fail(phase, f)),
            other => other,
        }
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

    /// Who writes for the object in the session open now: the runner when the session set up
    /// (or attached to) last says it does, else the driver.
    pub fn writer(&self) -> Writer {
        let writes = self
            .s
            .progress
            .records
            .iter()
            .rev()
            .find_map(|r| match &r.result {
                Ok(Outcome::SetUp { writes, .. } | Outcome::Attached { writes }) => Some(*writes),
                _ => None,
            });
        if writes == Some(true) {
            Writer::Runner
        } else {
            Writer::Driver
        }
    }

    /// Who the session that ran the latest `step` (`StartRunner` or `StartApplyRunner`) acts
    /// as.
    pub fn identity_of(&self, step: StepKind) -> Option<String> {
        self.s
            .progress
            .records
            .iter()
            .rev()
            .filter(|r| r.step == step)
            .find_map(|r| match &r.result {
                Ok(Outcome::RunnerStarted { identity, .. }) => Some(identity.clone()),
                _ => None,
            })
            .filter(|i| !i.is_empty())
    }

    /// Who the session open now acts as: the apply runner's once it started, else the plan
    /// runner's.
    pub fn current_identity(&self) -> Option<String> {
        self.identity_of(StepKind::StartApplyRunner)
            .or_else(|| self.identity_of(StepKind::StartRunner))
    }

    /// A runner's binary, when its step reported one.
    pub fn binary_reported(&mut self, binary: &str) {
        if !binary.is_empty() {
            self.st.binary = Some(binary.to_string());
        }
    }

    /// Records that no lock stops Terraform (a release, or a command that took the lock).
    pub fn lock_released(&mut self) {
        self.st.lock = LockStatus::default();
        self.remove(ConditionType::StateLocked);
    }

    /// A plan (or a drift check) was made by the plan runner: it took the lock, so no lock
    /// stops Terraform now, and the plan runner's identity made it.
    pub fn plan_made(&mut self) {
        self.lock_released();
        self.st.last_planned_by = self
            .identity_of(StepKind::StartRunner)
            .or(self.st.last_planned_by.take());
    }

    /// Nothing is pending any more; what was applied last stays recorded.
    pub fn clear_pending(&mut self) {
        let plan = std::mem::take(&mut self.st.plan);
        self.st.plan = PlanStatus {
            last_applied: plan.last_applied,
            last_applied_digest: plan.last_applied_digest,
            // What approvals given on pull requests were used or looked at outlives any plan.
            used_pull_approvals: plan.used_pull_approvals,
            seen_pull_approvals: plan.seen_pull_approvals,
            ..Default::default()
        };
    }

    /// The resources are gone (destroyed, or nothing was left): no inventory, no outputs.
    pub fn resources_gone(&mut self) {
        self.st.inventory.clear();
        self.st.available_outputs.clear();
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

    /// The decision to perform `step` next.
    pub fn next(self, step: Step) -> Decision {
        Decision {
            step,
            status: self.st,
        }
    }
}

/// The end of a run whose driver recorded another outcome than `step` has.
pub(super) fn unexpected(step: StepKind) -> Stop {
    // The driver records exactly the outcome variant of each step; anything else is a bug in an
    // embedder's driver, reported as a failure rather than a panic.
    Stop::End(End::Failed(StepFailure {
        reason: Reason::Progressing,
        message: format!("internal error: unexpected outcome recorded for {step:?}"),
        lock: None,
        lock_holder_gone: false,
    }))
}
