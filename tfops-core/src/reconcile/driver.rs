//! The driver: performs the decided steps through the ports until the decision is `Done`.
//!
//! This module only performs IO; every choice is made by [`super::decide`].

use std::collections::BTreeMap;
use std::time::Duration;

use super::decide;
use super::failure::{SubStep, failure};
use super::model::{
    DependencyState, Outcome, Progress, Record, Snapshot, Step, StepFailure, StepKind,
};
use crate::api::{ObjectKey, TerraformObject, TerraformStatus, render_template, validate};
use crate::conditions::{ConditionStatus, ConditionType, Reason};
use crate::naming;
use crate::ports::{
    Artifact, Event, EventType, OutputValue, PlanKind, PlanRequest, PortError, Ports,
    ResolvedHealthCheck, Revision, RunnerSession, SetupRequest, StoredPlan,
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
}

/// Performs reconciles through a set of ports.
#[derive(Clone)]
pub struct Driver {
    ports: Ports,
    max_steps: usize,
}

/// What a run holds between steps.
#[derive(Default)]
struct RunState {
    revision: Option<Revision>,
    artifact: Option<Artifact>,
    session: Option<Box<dyn RunnerSession>>,
    outputs: BTreeMap<String, OutputValue>,
}

fn missing(what: &str) -> PortError {
    PortError::Unavailable(format!("{what} is not available in this run"))
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
        let now = self.ports.clock.now();
        let snapshot = Snapshot {
            object,
            dependencies,
            dependants,
            progress: Progress::default(),
            now,
            started_at: now,
        };
        let mut state = RunState::default();
        let result = self.run_steps(snapshot, &mut state).await;
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
                });
            }
            let kind = decision.step.kind();
            let result = self.perform(&snapshot.object, decision.step, state).await;
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

    /// Evaluates the policies that select `object` on the plan's JSON; Warn violations become
    /// Warning events here (Deny ones stop the apply in the decision).
    async fn check_policies(
        &self,
        object: &TerraformObject,
        plan_json: &str,
    ) -> Result<Vec<crate::api::PolicyViolation>, PortError> {
        use crate::policy::{Action, Outcome as Found};
        let mut policies = self.ports.policies.policies(object).await?;
        // Only the policies that select this object: another's broken rule does not block it.
        policies.retain(|p| p.selects(object));
        if policies.is_empty() {
            return Ok(Vec::new());
        }
        let compiled = policies
            .iter()
            .map(crate::policy::compile)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| PortError::Invalid(e.to_string()))?;
        let plan: serde_json::Value = serde_json::from_str(plan_json)
            .map_err(|e| PortError::Invalid(format!("plan JSON: {e}")))?;
        let verdict = crate::policy::evaluate(&compiled, &plan, object)
            .map_err(|e| PortError::Invalid(e.to_string()))?;
        let mut out = Vec::new();
        for r in verdict.violations() {
            let (message, addresses) = match &r.outcome {
                Found::Violation { message, addresses } => (message.clone(), addresses.clone()),
                Found::Error { message } => {
                    (format!("could not be evaluated: {message}"), Vec::new())
                }
                Found::Pass | Found::NotApplicable => continue,
            };
            let action = match r.action {
                Action::Deny => "Deny",
                Action::Warn => "Warn",
            };
            if r.action == Action::Warn {
                let event = Event {
                    event_type: EventType::Warning,
                    reason: crate::conditions::Reason::ValidationFailed,
                    message: format!("policy {} rule {}: {message}", r.policy, r.rule),
                };
                self.ports.events.emit(&object.key(), event).await;
            }
            out.push(crate::api::PolicyViolation {
                policy: r.policy.clone(),
                rule: r.rule.clone(),
                action: action.to_string(),
                message,
                addresses,
            });
        }
        Ok(out)
    }

    async fn perform(
        &self,
        object: &TerraformObject,
        step: Step,
        state: &mut RunState,
    ) -> Result<Outcome, StepFailure> {
        let kind = step.kind();
        let fail = |sub: SubStep| move |e: PortError| failure(kind, sub, &e);
        let key = object.key();
        let spec = &object.spec;
        let p = &self.ports;
        match step {
            Step::AddFinalizer => p
                .objects
                .add_finalizer(&key)
                .await
                .map(|()| Outcome::FinalizerAdded)
                .map_err(fail(SubStep::Whole)),
            Step::ResolveSource => {
                let revision = p
                    .source
                    .resolve(&key, &spec.source_ref)
                    .await
                    .map_err(fail(SubStep::Resolve))?;
                state.revision = Some(revision.clone());
                Ok(Outcome::Resolved(revision))
            }
            Step::FetchSource => {
                let revision = state
                    .revision
                    .as_ref()
                    .ok_or_else(|| fail(SubStep::Fetch)(missing("the resolved revision")))?;
                let artifact = p
                    .source
                    .fetch(&key, &spec.source_ref, revision, spec.ignore.as_deref())
                    .await
                    .map_err(fail(SubStep::Fetch))?;
                let sha256 = artifact.sha256.clone();
                state.artifact = Some(artifact);
                Ok(Outcome::Fetched { sha256 })
            }
            Step::StartRunner => {
                if let Some(mut attached) = state.session.take() {
                    // A session attached to an earlier run is done with; this run starts afresh.
                    let _ = attached.cleanup().await;
                }
                let session = p.runner.start(object).await.map_err(fail(SubStep::Start))?;
                let binary = session.binary();
                let runner = session.runner();
                state.session = Some(session);
                Ok(Outcome::RunnerStarted { binary, runner })
            }
            Step::Attach { runner, run_id } => {
                let attached = match p.runner.attach(object, &runner).await {
                    Ok(session) => session,
                    Err(PortError::NotFound(why)) => return Ok(Outcome::RunGone { why }),
                    Err(e) => return Err(fail(SubStep::Start)(e)),
                };
                let session = state.session.insert(attached);
                match session.attach(&run_id).await {
                    Ok(()) => Ok(Outcome::Applied),
                    Err(PortError::NotFound(why)) => Ok(Outcome::RunGone { why }),
                    Err(e) => Err(fail(SubStep::Apply)(e)),
                }
            }
            Step::Setup => {
                let inputs = p
                    .inputs
                    .resolve(object)
                    .await
                    .map_err(fail(SubStep::Inputs))?;
                let artifact = state
                    .artifact
                    .clone()
                    .ok_or_else(|| fail(SubStep::Upload)(missing("the source archive")))?;
                let session = state
                    .session
                    .as_mut()
                    .ok_or_else(|| fail(SubStep::Upload)(missing("the runner")))?;
                let inputs_digest = inputs.digest();
                let request = SetupRequest {
                    object: object.clone(),
                    artifact,
                    inputs,
                };
                session
                    .setup(&request)
                    .await
                    .map_err(fail(SubStep::Upload))?;
                session.init().await.map_err(fail(SubStep::Init))?;
                session
                    .select_workspace(&spec.workspace)
                    .await
                    .map_err(fail(SubStep::Workspace))?;
                let binary = session.binary();
                Ok(Outcome::SetUp {
                    inputs_digest,
                    binary,
                })
            }
            Step::ForceUnlock { lock_id } => {
                let session = state
                    .session
                    .as_mut()
                    .ok_or_else(|| fail(SubStep::Unlock)(missing("the runner")))?;
                session
                    .force_unlock(&lock_id)
                    .await
                    .map_err(fail(SubStep::Unlock))?;
                Ok(Outcome::Unlocked)
            }
            Step::DetectDrift => {
                let session = state
                    .session
                    .as_mut()
                    .ok_or_else(|| fail(SubStep::RefreshPlan)(missing("the runner")))?;
                let request = PlanRequest {
                    kind: PlanKind::RefreshOnly,
                    targets: spec.targets.clone(),
                    parallelism: spec.parallelism,
                };
                let plan = session
                    .plan(&request)
                    .await
                    .map_err(fail(SubStep::RefreshPlan))?;
                Ok(Outcome::DriftChecked {
                    drifted: plan.drifted,
                })
            }
            Step::Plan {
                kind: plan_kind,
                plan_id,
                drift,
            } => {
                let session = state
                    .session
                    .as_mut()
                    .ok_or_else(|| fail(SubStep::Plan)(missing("the runner")))?;
                let request = PlanRequest {
                    kind: plan_kind,
                    targets: spec.targets.clone(),
                    parallelism: spec.parallelism,
                };
                let plan = session.plan(&request).await.map_err(fail(SubStep::Plan))?;
                let mut violations = Vec::new();
                let mut digest = String::new();
                if plan.has_changes {
                    let shown = session.show().await.map_err(fail(SubStep::Show))?;
                    digest = crate::plan::content_digest(&shown.json)
                        .map_err(|e| fail(SubStep::Show)(PortError::Invalid(e.to_string())))?;
                    violations = self
                        .check_policies(object, &shown.json)
                        .await
                        .map_err(fail(SubStep::Policy))?;
                    let stored = StoredPlan {
                        id: plan_id,
                        binary: plan.plan_file,
                        shown,
                        is_destroy: plan_kind == PlanKind::Destroy,
                        is_drift: drift,
                    };
                    p.plans
                        .save(&key, &spec.workspace, &stored)
                        .await
                        .map_err(fail(SubStep::Store))?;
                } else {
                    p.plans
                        .delete(&key, &spec.workspace)
                        .await
                        .map_err(fail(SubStep::Store))?;
                }
                Ok(Outcome::Planned {
                    has_changes: plan.has_changes,
                    summary: plan.summary,
                    digest,
                    violations,
                })
            }
            Step::Apply { run_id } => {
                let session = state
                    .session
                    .as_mut()
                    .ok_or_else(|| fail(SubStep::Apply)(missing("the runner")))?;
                session.apply(&run_id).await.map_err(fail(SubStep::Apply))?;
                Ok(Outcome::Applied)
            }
            Step::Outputs => {
                let session = state
                    .session
                    .as_mut()
                    .ok_or_else(|| fail(SubStep::Output)(missing("the runner")))?;
                let outputs = session.outputs().await.map_err(fail(SubStep::Output))?;
                let inventory = session
                    .inventory()
                    .await
                    .map_err(fail(SubStep::Inventory))?;
                let written = match &spec.write_outputs_to_secret {
                    Some(target) => {
                        p.outputs
                            .write(&key, target, &outputs)
                            .await
                            .map_err(fail(SubStep::WriteOutputs))?;
                        true
                    }
                    None => false,
                };
                let names = outputs.keys().cloned().collect();
                state.outputs = outputs;
                Ok(Outcome::OutputsRead {
                    names,
                    inventory,
                    written,
                })
            }
            Step::HealthChecks => {
                let values: BTreeMap<String, serde_json::Value> = state
                    .outputs
                    .iter()
                    .map(|(k, v)| (k.clone(), v.value.clone()))
                    .collect();
                let timeouts = validate(object)
                    .map(|v| v.health_check_timeouts)
                    .unwrap_or_default();
                for (i, check) in spec.health_checks.iter().enumerate() {
                    let template = check
                        .address
                        .as_deref()
                        .or(check.url.as_deref())
                        .unwrap_or_default();
                    let target = render_template(template, &values).map_err(|e| {
                        fail(SubStep::Health)(PortError::Invalid(format!("{}: {e}", check.name)))
                    })?;
                    let resolved = ResolvedHealthCheck {
                        name: check.name.clone(),
                        check_type: check.check_type,
                        target,
                        timeout: timeouts.get(i).copied().unwrap_or(Duration::from_secs(20)),
                    };
                    p.health.check(&resolved).await.map_err(|e| {
                        fail(SubStep::Health)(PortError::Unavailable(format!(
                            "{} ({}): {e}",
                            check.name, resolved.target
                        )))
                    })?;
                }
                Ok(Outcome::HealthChecked)
            }
            Step::Cleanup => {
                if let Some(mut session) = state.session.take() {
                    session.cleanup().await.map_err(fail(SubStep::Cleanup))?;
                }
                Ok(Outcome::CleanedUp)
            }
            Step::DeletePlansAndOutputs => {
                p.plans
                    .delete(&key, &spec.workspace)
                    .await
                    .map_err(fail(SubStep::Delete))?;
                if let Some(target) = &spec.write_outputs_to_secret {
                    p.outputs
                        .delete(&key, &target.name)
                        .await
                        .map_err(fail(SubStep::Delete))?;
                }
                Ok(Outcome::PlansAndOutputsDeleted)
            }
            Step::DeleteState => {
                let suffix = naming::state_secret_suffix(object);
                p.state
                    .delete_state(&key, &spec.workspace, &suffix)
                    .await
                    .map_err(fail(SubStep::Delete))?;
                Ok(Outcome::StateDeleted)
            }
            Step::RemoveFinalizer => {
                p.objects
                    .remove_finalizer(&key)
                    .await
                    .map_err(fail(SubStep::Delete))?;
                Ok(Outcome::FinalizerRemoved)
            }
            Step::Done { .. } => Err(failure(kind, SubStep::Whole, &missing("a step"))),
        }
    }
}
