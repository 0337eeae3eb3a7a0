//! How the driver performs each step: one function per step of seed 000's "reconciliation,
//! step by step", named after it.
//!
//! This module only performs IO; every choice is made by [`super::decide`].

use std::collections::BTreeMap;
use std::time::Duration;

use super::driver::{Driver, RunState};
use super::failure::{SubStep, failure};
use super::model::{Outcome, Step, StepFailure, StepKind};
use crate::api::{RunnerRole, TerraformObject, render_template, template_references, validate};
use crate::naming;
use crate::ports::{
    Event, EventType, OutputsRequest, PlanKind, PlanRequest, PlanToStore, PortError,
    ResolvedHealthCheck, RunnerSession, SetupRequest, StoredPlan,
};

type StepResult = Result<Outcome, StepFailure>;

/// The failure of `sub` of a step of `kind` with a port's error.
fn fail(kind: StepKind, sub: SubStep) -> impl Fn(PortError) -> StepFailure {
    move |e| failure(kind, sub, &e)
}

/// Something an earlier step of this run should have produced is not there.
fn missing(what: &str) -> PortError {
    PortError::Unavailable(format!("{what} is not available in this run"))
}

/// The runner session of this run: every Terraform step needs it.
fn session(
    state: &mut RunState,
    kind: StepKind,
    sub: SubStep,
) -> Result<&mut Box<dyn RunnerSession>, StepFailure> {
    state
        .session
        .as_mut()
        .ok_or_else(|| failure(kind, sub, &missing("the runner")))
}

/// The outputs the object's health checks read.
fn health_check_references(object: &TerraformObject) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for check in &object.spec.health_checks {
        let template = check.address.as_deref().or(check.url.as_deref());
        for name in template_references(template.unwrap_or_default()) {
            if !names.contains(&name) {
                names.push(name);
            }
        }
    }
    names
}

impl Driver {
    /// Performs one step.
    pub(super) async fn perform(
        &self,
        object: &TerraformObject,
        step: Step,
        state: &mut RunState,
    ) -> StepResult {
        let kind = step.kind();
        let key = object.key();
        let p = &self.ports;
        match step {
            Step::AddFinalizer => p
                .objects
                .add_finalizer(&key)
                .await
                .map(|()| Outcome::FinalizerAdded)
                .map_err(fail(kind, SubStep::Whole)),
            Step::ResolveSource => self.resolve_source(object, state).await,
            Step::FetchSource => self.fetch_source(object, state).await,
            Step::StartRunner => self.start_runner(object, RunnerRole::Plan, state).await,
            Step::StartApplyRunner => self.start_runner(object, RunnerRole::Apply, state).await,
            Step::Attach { runner, run_id } => self.attach(object, &runner, &run_id, state).await,
            Step::Setup | Step::ApplySetup => self.setup(object, kind, state).await,
            Step::ForceUnlock { lock_id } => session(state, kind, SubStep::Unlock)?
                .force_unlock(&lock_id)
                .await
                .map(|()| Outcome::Unlocked)
                .map_err(fail(kind, SubStep::Unlock)),
            Step::DetectDrift => self.detect_drift(object, state).await,
            Step::Plan {
                kind: plan_kind,
                plan_id,
                drift,
            }
            | Step::VerifyPlan {
                kind: plan_kind,
                plan_id,
                drift,
            } => {
                self.plan(object, kind, plan_kind, plan_id, drift, state)
                    .await
            }
            Step::Apply { run_id } => session(state, kind, SubStep::Apply)?
                .apply(&run_id)
                .await
                .map(|()| Outcome::Applied)
                .map_err(fail(kind, SubStep::Apply)),
            Step::Outputs => self.outputs(object, state).await,
            Step::HealthChecks => self.health_checks(object, state).await,
            Step::Cleanup => {
                if let Some(mut session) = state.session.take() {
                    state.keep_tail(session.as_ref());
                    session
                        .cleanup()
                        .await
                        .map_err(fail(kind, SubStep::Cleanup))?;
                }
                Ok(Outcome::CleanedUp)
            }
            Step::DeletePlansAndOutputs => self.delete_plans_and_outputs(object, state).await,
            Step::DeleteState => {
                let (workspace, suffix) =
                    (&object.spec.workspace, &naming::state_secret_suffix(object));
                // The runner's identity writes the state, so it removes it where one is open
                // (the controller's may not touch state Secrets).
                match state.session.as_mut().filter(|s| s.writes_for_object()) {
                    Some(session) => session.delete_state(workspace, suffix).await,
                    None => p.state.delete_state(&key, workspace, suffix).await,
                }
                .map(|()| Outcome::StateDeleted)
                .map_err(fail(kind, SubStep::Delete))
            }
            Step::RemoveFinalizer => p
                .objects
                .remove_finalizer(&key)
                .await
                .map(|()| Outcome::FinalizerRemoved)
                .map_err(fail(kind, SubStep::Delete)),
            Step::Done { .. } => Err(failure(kind, SubStep::Whole, &missing("a step"))),
        }
    }

    /// Source: the current revision of the source.
    async fn resolve_source(&self, object: &TerraformObject, state: &mut RunState) -> StepResult {
        let revision = self
            .ports
            .source
            .resolve(&object.key(), &object.spec.source_ref)
            .await
            .map_err(fail(StepKind::ResolveSource, SubStep::Resolve))?;
        state.revision = Some(revision.clone());
        Ok(Outcome::Resolved(revision))
    }

    /// Source: the tree at the resolved revision, archived.
    async fn fetch_source(&self, object: &TerraformObject, state: &mut RunState) -> StepResult {
        let fail = fail(StepKind::FetchSource, SubStep::Fetch);
        let revision = state
            .revision
            .as_ref()
            .ok_or_else(|| fail(missing("the resolved revision")))?;
        let spec = &object.spec;
        let artifact = self
            .ports
            .source
            .fetch(
                &object.key(),
                &spec.source_ref,
                revision,
                spec.ignore.as_deref(),
            )
            .await
            .map_err(&fail)?;
        let sha256 = artifact.sha256.clone();
        state.artifact = Some(artifact);
        Ok(Outcome::Fetched { sha256 })
    }

    /// Runner: start (or reuse) the runner of `role` and connect. A session still open (one
    /// attached to an earlier run, or the plan runner's when the apply runner starts) ends
    /// first: one runner per object at a time, and the plan runner's identity is not left
    /// running while the apply runner's works.
    async fn start_runner(
        &self,
        object: &TerraformObject,
        role: RunnerRole,
        state: &mut RunState,
    ) -> StepResult {
        let kind = match role {
            RunnerRole::Plan => StepKind::StartRunner,
            RunnerRole::Apply => StepKind::StartApplyRunner,
        };
        if let Some(mut earlier) = state.session.take() {
            state.keep_tail(earlier.as_ref());
            if let Err(e) = earlier.cleanup().await {
                let f = failure(kind, SubStep::Cleanup, &e);
                self.ports
                    .events
                    .emit(
                        &object.key(),
                        Event {
                            event_type: EventType::Warning,
                            reason: f.reason,
                            message: f.message,
                        },
                    )
                    .await;
            }
        }
        let session = self
            .ports
            .runner
            .start(object, role)
            .await
            .map_err(fail(kind, SubStep::Start))?;
        let binary = session.binary();
        let runner = session.runner();
        let identity = session.identity();
        state.session = Some(session);
        Ok(Outcome::RunnerStarted {
            binary,
            runner,
            identity,
        })
    }

    /// Restart: attach to the run an earlier driver recorded and take its result.
    async fn attach(
        &self,
        object: &TerraformObject,
        runner: &str,
        run_id: &str,
        state: &mut RunState,
    ) -> StepResult {
        let kind = StepKind::Attach;
        let attached = match self.ports.runner.attach(object, runner).await {
            Ok(session) => session,
            Err(PortError::NotFound(why)) => return Ok(Outcome::RunGone { why }),
            Err(e) => return Err(failure(kind, SubStep::Start, &e)),
        };
        match state.session.insert(attached).attach(run_id).await {
            Ok(()) => Ok(Outcome::Applied),
            Err(PortError::NotFound(why)) => Ok(Outcome::RunGone { why }),
            Err(e) => Err(failure(kind, SubStep::Apply, &e)),
        }
    }

    /// Setup: inputs, upload, files, `init`, workspace.
    async fn setup(
        &self,
        object: &TerraformObject,
        kind: StepKind,
        state: &mut RunState,
    ) -> StepResult {
        let inputs = self
            .ports
            .inputs
            .resolve(object)
            .await
            .map_err(fail(kind, SubStep::Inputs))?;
        let artifact = state
            .artifact
            .clone()
            .ok_or_else(|| failure(kind, SubStep::Upload, &missing("the source archive")))?;
        let session = session(state, kind, SubStep::Upload)?;
        let inputs_digest = inputs.digest();
        let request = SetupRequest {
            object: object.clone(),
            artifact,
            inputs,
        };
        session
            .setup(&request)
            .await
            .map_err(fail(kind, SubStep::Upload))?;
        session.init().await.map_err(fail(kind, SubStep::Init))?;
        session
            .select_workspace(&object.spec.workspace)
            .await
            .map_err(fail(kind, SubStep::Workspace))?;
        Ok(Outcome::SetUp {
            inputs_digest,
            binary: session.binary(),
        })
    }

    /// Drift detection: a refresh-only plan.
    async fn detect_drift(&self, object: &TerraformObject, state: &mut RunState) -> StepResult {
        let kind = StepKind::DetectDrift;
        let request = PlanRequest {
            kind: PlanKind::RefreshOnly,
            targets: object.spec.targets.clone(),
            parallelism: object.spec.parallelism,
        };
        let plan = session(state, kind, SubStep::RefreshPlan)?
            .plan(&request)
            .await
            .map_err(fail(kind, SubStep::RefreshPlan))?;
        Ok(Outcome::DriftChecked {
            drifted: plan.drifted,
        })
    }

    /// Plan: plan, and with changes show it, digest what it does, check the policies and
    /// store it; without changes remove what is stored (under the current workspace and the
    /// one it was stored under).
    async fn plan(
        &self,
        object: &TerraformObject,
        kind: StepKind,
        plan_kind: PlanKind,
        plan_id: String,
        drift: bool,
        state: &mut RunState,
    ) -> StepResult {
        let spec = &object.spec;
        let key = object.key();
        let request = PlanRequest {
            kind: plan_kind,
            targets: spec.targets.clone(),
            parallelism: spec.parallelism,
        };
        let session = session(state, kind, SubStep::Plan)?;
        let plan = session
            .plan(&request)
            .await
            .map_err(fail(kind, SubStep::Plan))?;
        let store = fail(kind, SubStep::Store);
        // A runner that writes for the object stores (and removes) its plans itself.
        let by_runner = session.writes_for_object();
        // A plan stored under an earlier workspace is replaced, not left behind.
        if let Some(old) = &object.status.stored_plan_workspace
            && *old != spec.workspace
        {
            if by_runner {
                session.delete_plan(old).await.map_err(&store)?;
            } else {
                self.ports.plans.delete(&key, old).await.map_err(&store)?;
            }
        }
        if !plan.has_changes {
            if by_runner {
                session.delete_plan(&spec.workspace).await.map_err(&store)?;
            } else {
                self.ports
                    .plans
                    .delete(&key, &spec.workspace)
                    .await
                    .map_err(&store)?;
            }
            return Ok(Outcome::Planned {
                has_changes: false,
                summary: plan.summary,
                digest: String::new(),
                violations: Vec::new(),
            });
        }
        let shown = session.show().await.map_err(fail(kind, SubStep::Show))?;
        let digest = crate::plan::content_digest(&shown.json)
            .map_err(|e| failure(kind, SubStep::Show, &PortError::Invalid(e.to_string())))?;
        let violations = self
            .check_policies(object, &shown.json)
            .await
            .map_err(fail(kind, SubStep::Policy))?;
        if by_runner {
            let to_store = PlanToStore {
                workspace: spec.workspace.clone(),
                id: plan_id,
                is_destroy: plan_kind == PlanKind::Destroy,
                is_drift: drift,
            };
            session.save_plan(&to_store).await.map_err(&store)?;
        } else {
            let stored = StoredPlan {
                id: plan_id,
                binary: plan.plan_file,
                shown,
                is_destroy: plan_kind == PlanKind::Destroy,
                is_drift: drift,
            };
            self.ports
                .plans
                .save(&key, &spec.workspace, &stored)
                .await
                .map_err(&store)?;
        }
        Ok(Outcome::Planned {
            has_changes: true,
            summary: plan.summary,
            digest,
            violations,
        })
    }

    /// Outputs and inventory; the outputs Secret written, and one written under another name
    /// before (a renamed or removed `writeOutputsToSecret`) removed.
    async fn outputs(&self, object: &TerraformObject, state: &mut RunState) -> StepResult {
        let kind = StepKind::Outputs;
        let key = object.key();
        let session = session(state, kind, SubStep::Output)?;
        let target = object.spec.write_outputs_to_secret.as_ref();
        let renamed = object
            .status
            .outputs_secret
            .as_ref()
            .filter(|old| target.is_none_or(|t| t.name != **old));
        if session.writes_for_object() {
            // The runner writes the Secret; only what health checks need comes back.
            let request = OutputsRequest {
                target: target.cloned(),
                remove: renamed.cloned(),
                reveal: health_check_references(object),
            };
            let outputs = session
                .write_outputs(&request)
                .await
                .map_err(fail(kind, SubStep::WriteOutputs))?;
            let inventory = session
                .inventory()
                .await
                .map_err(fail(kind, SubStep::Inventory))?;
            let names = outputs.keys().cloned().collect();
            state.outputs = outputs;
            return Ok(Outcome::OutputsRead {
                names,
                inventory,
                written: target.is_some(),
            });
        }
        let outputs = session
            .outputs()
            .await
            .map_err(fail(kind, SubStep::Output))?;
        let inventory = session
            .inventory()
            .await
            .map_err(fail(kind, SubStep::Inventory))?;
        if let Some(target) = target {
            self.ports
                .outputs
                .write(&key, target, &outputs)
                .await
                .map_err(fail(kind, SubStep::WriteOutputs))?;
        }
        if let Some(old) = renamed {
            self.ports
                .outputs
                .delete(&key, old)
                .await
                .map_err(fail(kind, SubStep::WriteOutputs))?;
        }
        let names = outputs.keys().cloned().collect();
        state.outputs = outputs;
        Ok(Outcome::OutputsRead {
            names,
            inventory,
            written: target.is_some(),
        })
    }

    /// Health checks, with targets rendered from the outputs.
    async fn health_checks(&self, object: &TerraformObject, state: &mut RunState) -> StepResult {
        let fail = fail(StepKind::HealthChecks, SubStep::Health);
        let values: BTreeMap<String, serde_json::Value> = state
            .outputs
            .iter()
            .map(|(k, v)| (k.clone(), v.value.clone()))
            .collect();
        let timeouts = validate(object)
            .map(|v| v.health_check_timeouts)
            .unwrap_or_default();
        for (i, check) in object.spec.health_checks.iter().enumerate() {
            let template = check
                .address
                .as_deref()
                .or(check.url.as_deref())
                .unwrap_or_default();
            let target = render_template(template, &values)
                .map_err(|e| fail(PortError::Invalid(format!("{}: {e}", check.name))))?;
            let resolved = ResolvedHealthCheck {
                name: check.name.clone(),
                check_type: check.check_type,
                target,
                timeout: timeouts.get(i).copied().unwrap_or(Duration::from_secs(20)),
            };
            self.ports.health.check(&resolved).await.map_err(|e| {
                fail(PortError::Unavailable(format!(
                    "{} ({}): {e}",
                    check.name, resolved.target
                )))
            })?;
        }
        Ok(Outcome::HealthChecked)
    }

    /// Cleanup on deletion: every plan and outputs Secret this object has, by the names in
    /// its spec and the names it was written under; through the runner that wrote them when
    /// a session is open (a deletion that destroys), else through the ports.
    async fn delete_plans_and_outputs(
        &self,
        object: &TerraformObject,
        state: &mut RunState,
    ) -> StepResult {
        let fail = fail(StepKind::DeletePlansAndOutputs, SubStep::Delete);
        let key = object.key();
        let (spec, status) = (&object.spec, &object.status);
        let mut workspaces = vec![spec.workspace.clone()];
        workspaces.extend(status.stored_plan_workspace.clone());
        workspaces.dedup();
        let mut by_runner = state.session.as_mut().filter(|s| s.writes_for_object());
        for workspace in &workspaces {
            match by_runner.as_mut() {
                Some(session) => session.delete_plan(workspace).await,
                None => self.ports.plans.delete(&key, workspace).await,
            }
            .map_err(&fail)?;
        }
        let mut secrets: Vec<String> = spec
            .write_outputs_to_secret
            .iter()
            .map(|t| t.name.clone())
            .collect();
        secrets.extend(status.outputs_secret.clone());
        secrets.dedup();
        for name in &secrets {
            match by_runner.as_mut() {
                Some(session) => session.delete_outputs(name).await,
                None => self.ports.outputs.delete(&key, name).await,
            }
            .map_err(&fail)?;
        }
        Ok(Outcome::PlansAndOutputsDeleted)
    }

    /// Evaluates the policies that select `object` on the plan's JSON; Warn violations become
    /// Warning events here (Deny ones stop the apply in the decision).
    async fn check_policies(
        &self,
        object: &TerraformObject,
        plan_json: &str,
    ) -> Result<Vec<crate::api::PolicyViolation>, PortError> {
        let mut policies = self.ports.policies.policies(object).await?;
        // Only the policies that select this object: another's broken rule does not block it.
        policies.retain(|p| p.selects(object));
        if policies.is_empty() {
            return Ok(Vec::new());
        }
        // Compiled policies hold values that must not live across an await (they are not
        // `Send`): everything is evaluated first, the Warning events emitted after.
        let (out, warnings) = Self::evaluate_policies(&policies, plan_json, object)?;
        for event in warnings {
            self.ports.events.emit(&object.key(), event).await;
        }
        Ok(out)
    }

    /// The violations of `policies` on the plan, and the Warning events of `Warn` ones.
    fn evaluate_policies(
        policies: &[crate::policy::TerraformPolicy],
        plan_json: &str,
        object: &TerraformObject,
    ) -> Result<(Vec<crate::api::PolicyViolation>, Vec<Event>), PortError> {
        use crate::policy::{Action, Outcome as Found};
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
        let mut warnings = Vec::new();
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
                warnings.push(Event {
                    event_type: EventType::Warning,
                    reason: crate::conditions::Reason::ValidationFailed,
                    message: format!("policy {} rule {}: {message}", r.policy, r.rule),
                });
            }
            out.push(crate::api::PolicyViolation {
                policy: r.policy.clone(),
                rule: r.rule.clone(),
                action: action.to_string(),
                message,
                addresses,
            });
        }
        Ok((out, warnings))
    }
}
