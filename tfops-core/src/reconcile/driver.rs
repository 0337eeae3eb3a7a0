//! The driver: performs the decided steps through the ports until the decision is `Done`
//! (each step is performed in `perform/`).
//!
//! This module only performs IO; every choice is made by [`super::decide`].

use std::collections::BTreeMap;
use std::time::Duration;

use super::decide;
use super::model::{DependencyState, Progress, Record, Snapshot, Step, StepFailure, StepKind};
use super::queue::RunnerQueue;
use crate::api::{ObjectKey, TerraformObject, TerraformStatus};
use crate::conditions::{ConditionStatus, ConditionType, Reason};
use crate::ports::{
    Artifact, Event, EventType, OutputValue, PortError, Ports, Revision, RunnerSession,
};

/// Why the driver could not finish a reconcile. Step failures are not driver errors: they are
/// recorded in status and retried.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// The status could not be written.
    #[error("writing the status of {object}")]
    WriteStatus {
        /// The object.
        object: ObjectKey,
        /// The cause.
        #[source]
        source: PortError,
    },
    /// The decisions did not reach `Done` within the step limit (a bug in the decision
    /// function; the property tests check it never happens).
    #[error("reconcile of {object} took more than {limit} steps")]
    StepLimit {
        /// The object.
        object: ObjectKey,
        /// The limit.
        limit: usize,
    },
}

/// What one reconcile did.
#[derive(Debug, Clone, PartialEq)]
pub struct RunReport {
    /// Every step performed, in order.
    pub records: Vec<Record>,
    /// When to reconcile again without an event (`None`: only on a change).
    pub requeue_after: Option<Duration>,
    /// The status as last written.
    pub status: TerraformStatus,
    /// The last lines Terraform wrote during this reconcile (bounded), for the run history.
    pub output_tail: String,
}

/// Performs reconciles through a set of ports.
#[derive(Clone)]
pub struct Driver {
    pub(super) ports: Ports,
    max_steps: usize,
}

/// What a run holds between steps.
#[derive(Default)]
pub(super) struct RunState {
    pub(super) revision: Option<Revision>,
    pub(super) artifact: Option<Artifact>,
    pub(super) session: Option<Box<dyn RunnerSession>>,
    pub(super) outputs: BTreeMap<String, OutputValue>,
    /// What the sessions of this run said before they ended.
    pub(super) output_tail: String,
}

impl RunState {
    /// Keeps what `session` said before it ends.
    pub(super) fn keep_tail(&mut self, session: &dyn RunnerSession) {
        crate::tail::append_tail(&mut self.output_tail, &session.output_tail());
    }
}

impl Driver {
    /// A driver over these ports.
    pub fn new(ports: Ports) -> Self {
        Self {
            ports,
            max_steps: 64,
        }
    }

    /// Reconciles `object` once: runs steps until the decision is `Done`.
    ///
    /// # Errors
    /// [`DriverError::WriteStatus`] when status cannot be written (the caller retries the
    /// reconcile), [`DriverError::StepLimit`] if decisions never reach `Done`.
    pub async fn reconcile(
        &self,
        object: TerraformObject,
        dependencies: Vec<DependencyState>,
        dependants: Vec<ObjectKey>,
    ) -> Result<RunReport, DriverError> {
        self.reconcile_queued(object, dependencies, dependants, RunnerQueue::default())
            .await
    }

    /// [`Driver::reconcile_queued`], knowing the newest revision of the object's source the
    /// caller's source poller resolved ([`Snapshot::source_revision`]).
    ///
    /// # Errors
    /// As [`Driver::reconcile`].
    pub async fn reconcile_polled(
        &self,
        object: TerraformObject,
        dependencies: Vec<DependencyState>,
        dependants: Vec<ObjectKey>,
        queue: RunnerQueue,
        source_revision: Option<String>,
    ) -> Result<RunReport, DriverError> {
        let now = self.ports.clock.now();
        let pull_approvals = self.pull_approvals(&object).await;
        let snapshot = Snapshot {
            object,
            dependencies,
            dependants,
            progress: Progress::default(),
            now,
            started_at: now,
            queue,
            source_revision,
            pull_approvals,
        };
        self.run(snapshot).await
    }

    /// [`Driver::reconcile`], knowing where the object stands in its namespace's queue for
    /// runner Pods (what a caller that sees the namespace's objects and quotas knows).
    ///
    /// # Errors
    /// As [`Driver::reconcile`].
    pub async fn reconcile_queued(
        &self,
        object: TerraformObject,
        dependencies: Vec<DependencyState>,
        dependants: Vec<ObjectKey>,
        queue: RunnerQueue,
    ) -> Result<RunReport, DriverError> {
        self.reconcile_polled(object, dependencies, dependants, queue, None)
            .await
    }

    /// The approvals of the object's merged pull requests, when it plans pull requests. One
    /// that cannot be read is as none: the plan then waits for an approval given otherwise.
    async fn pull_approvals(&self, object: &TerraformObject) -> Vec<crate::ports::PullApproval> {
        if object.spec.source_ref.pull_requests.is_none() {
            return Vec::new();
        }
        let key = object.key();
        match self.ports.plans.pull_request_approvals(&key).await {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!(object = %key, error = %e, "reading the approvals given on pull requests");
                Vec::new()
            }
        }
    }

    /// Runs the steps from `snapshot` until the decision is `Done`.
    async fn run(&self, snapshot: Snapshot) -> Result<RunReport, DriverError> {
        let mut state = RunState::default();
        let mut result = self.run_steps(snapshot, &mut state).await;
        if let Some(session) = &state.session {
            crate::tail::append_tail(&mut state.output_tail, &session.output_tail());
        }
        if let Ok(report) = &mut result {
            report.output_tail = std::mem::take(&mut state.output_tail);
        }
        if let Some(mut session) = state.session.take() {
            // Reached only when the run stopped early (a status write failed): never leave a
            // runner behind; the next reconcile starts afresh.
            let _ = session.cleanup().await;
        }
        result
    }

    async fn run_steps(
        &self,
        mut snapshot: Snapshot,
        state: &mut RunState,
    ) -> Result<RunReport, DriverError> {
        let key = snapshot.object.key();
        let mut written = snapshot.object.status.clone();
        // Each decision is taken at the time the previous step finished (the first at the
        // start), so a run can be replayed exactly from its records.
        for _ in 0..self.max_steps {
            let decision = decide(&snapshot);
            // Once the finalizer is gone the object may be gone too: nothing left to write.
            let released = snapshot.progress.succeeded(StepKind::RemoveFinalizer);
            if decision.status != written && !released {
                self.ports
                    .objects
                    .write_status(&key, &decision.status)
                    .await
                    .map_err(|source| DriverError::WriteStatus {
                        object: key.clone(),
                        source,
                    })?;
                self.emit_changes(&key, &written, &decision.status).await;
                written = decision.status;
            }
            if let Step::Done { requeue_after } = decision.step {
                return Ok(RunReport {
                    records: snapshot.progress.records,
                    requeue_after,
                    status: written,
                    output_tail: String::new(),
                });
            }
            let kind = decision.step.kind();
            // The run id names the command in the runner (the apply; `-` before one exists).
            let run_id = match &decision.step {
                Step::Apply { run_id } | Step::Attach { run_id, .. } => run_id.clone(),
                _ => written
                    .active_run
                    .as_ref()
                    .map_or_else(|| "-".to_string(), |r| r.run_id.clone()),
            };
            // A span of its own for each step (a child of the embedder's span), so every
            // line logged during the step (kube's too) names this step and no other. (Recording
            // the step into one span per reconcile made text lines list every step so far:
            // tracing-subscriber appends a field recorded again.)
            let span = tracing::info_span!("step", object = %key, step = ?kind, run_id = %run_id);
            span.in_scope(
                || tracing::info!(object = %key, step = ?kind, run_id = %run_id, "step started"),
            );
            let result = tracing::Instrument::instrument(
                self.perform(&snapshot.object, decision.step, state),
                span.clone(),
            )
            .await;
            span.in_scope(|| match &result {
                Ok(_) => {
                    tracing::info!(object = %key, step = ?kind, run_id = %run_id, "step succeeded")
                }
                Err(f) => {
                    tracing::warn!(object = %key, step = ?kind, run_id = %run_id, reason = %f.reason, message = %f.message, "step failed")
                }
            });
            // Failures that do not end a run still deserve a Warning event.
            if let (StepKind::Cleanup | StepKind::ForceUnlock, Err(f)) = (kind, &result) {
                self.warn(&key, f).await;
            }
            let at = self.ports.clock.now();
            snapshot.progress.push(kind, at, result);
            snapshot.now = at;
        }
        Err(DriverError::StepLimit {
            object: key,
            limit: self.max_steps,
        })
    }

    async fn warn(&self, key: &ObjectKey, f: &StepFailure) {
        let event = Event {
            event_type: EventType::Warning,
            reason: f.reason,
            message: f.message.clone(),
        };
        self.ports.events.emit(key, event).await;
    }

    /// One event per condition whose status, reason or message changed (not `Reconciling`).
    async fn emit_changes(&self, key: &ObjectKey, old: &TerraformStatus, new: &TerraformStatus) {
        for c in &new.conditions {
            let Some(kind) = c.kind() else { continue };
            if kind == ConditionType::Reconciling {
                continue;
            }
            let before = old.conditions.iter().find(|o| o.type_ == c.type_);
            if before.is_some_and(|b| {
                b.status == c.status && b.reason == c.reason && b.message == c.message
            }) {
                continue;
            }
            let Some(reason) = c.reason_code() else {
                continue;
            };
            let abnormal = matches!(kind, ConditionType::StateLocked | ConditionType::Stalled);
            let bad = if abnormal {
                c.status == ConditionStatus::True
            } else {
                c.status == ConditionStatus::False || reason == Reason::ApplyInterrupted
            };
            let event = Event {
                event_type: if bad {
                    EventType::Warning
                } else {
                    EventType::Normal
                },
                reason,
                message: c.message.clone(),
            };
            self.ports.events.emit(key, event).await;
        }
    }
}
