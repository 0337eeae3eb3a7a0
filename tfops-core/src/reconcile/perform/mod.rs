//! How the driver performs each step: one function per step, named after it.
//!
//! This module only performs IO; every choice (who writes, which Secret, which timeout) is
//! made by [`super::decide`] and carried in the [`Step`].

mod plan;
mod stores;

use super::driver::{Driver, RunState};
use super::failure::{SubStep, failure};
use super::model::{Outcome, Step, StepFailure, StepKind};
use crate::api::{RunnerRole, TerraformObject};
use crate::ports::{Event, EventType, PortError, RunnerSession, SetupRequest};

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
            Step::CompareSource { from, to } => Ok(self.compare_source(object, &from, &to).await),
            Step::StartRunner => self.start_runner(object, RunnerRole::Plan, state).await,
            Step::StartApplyRunner => self.start_runner(object, RunnerRole::Apply, state).await,
            Step::Attach { runner, run_id } => self.attach(object, &runner, &run_id, state).await,
            Step::Setup | Step::ApplySetup => self.setup(object, kind, state).await,
            Step::ForceUnlock { lock_id } => session(state, kind, SubStep::Unlock)?
                .force_unlock(&lock_id)
                .await
                .map(|()| Outcome::Unlocked)
                .map_err(fail(kind, SubStep::Unlock)),
            Step::ProbeRunner { runner } => Ok(self.probe_runner(object, &runner).await),
            Step::ReleaseRunners => self.release_runners(object).await,
            Step::DetectDrift => self.detect_drift(object, state).await,
            Step::Plan(plan) | Step::VerifyPlan(plan) => self.plan(object, kind, plan, state).await,
            Step::Apply { run_id } => session(state, kind, SubStep::Apply)?
                .apply(&run_id)
                .await
                .map(|()| Outcome::Applied)
                .map_err(fail(kind, SubStep::Apply)),
            Step::Outputs(outputs) => self.outputs(object, outputs, state).await,
            Step::HealthChecks { timeouts } => self.health_checks(object, &timeouts, state).await,
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
            Step::DeletePlansAndOutputs {
                writer,
                workspaces,
                secrets,
                config_maps,
            } => {
                let outputs = (secrets.as_slice(), config_maps.as_slice());
                self.delete_plans_and_outputs(object, writer, &workspaces, outputs, state)
                    .await
            }
            Step::DeleteState {
                writer,
                workspace,
                suffix,
            } => {
                self.delete_state(object, writer, &workspace, &suffix, state)
                    .await
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

    /// Source: whether anything that concerns the object changed between `from` and `to`.
    /// Never fails the run: a comparison the source cannot make counts as a change, and the
    /// run plans as it would without one.
    async fn compare_source(
        &self,
        object: &TerraformObject,
        from: &crate::ports::Revision,
        to: &crate::ports::Revision,
    ) -> Outcome {
        let spec = &object.spec;
        let watched = match crate::source::Watched::new(&spec.path, &spec.source_ref.watch_paths) {
            Ok(w) => w,
            // Validation refuses such a spec before any run; counted as a change all the same.
            Err(e) => {
                return Outcome::SourceCompared {
                    touched: Some(e.to_string()),
                };
            }
        };
        let touched = match self
            .ports
            .source
            .changes(&object.key(), &spec.source_ref, from, to)
            .await
        {
            Ok(changes) => watched.touched(&changes),
            Err(e) => {
                tracing::warn!(object = %object.key(), %from, %to, error = %e,
                    "cannot compare the source's revisions; planning as for any new revision");
                Some(format!("cannot compare {from} with {to}: {e}"))
            }
        };
        Outcome::SourceCompared { touched }
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
            // The driver never starts a pull request's runner (`crate::pulls::speculative`).
            RunnerRole::Plan | RunnerRole::PullRequest => StepKind::StartRunner,
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
        let session = state.session.insert(attached);
        match session.attach(run_id).await {
            Ok(()) => Ok(Outcome::Attached {
                writes: session.writes_for_object(),
            }),
            Err(PortError::NotFound(why)) => Ok(Outcome::RunGone { why }),
            Err(e) => Err(failure(kind, SubStep::Apply, &e)),
        }
    }

    /// Whether the runner `runner` is gone. Only the port's `NotFound` says so; a runner that
    /// answers, or that cannot be reached now, may still hold what it held (its session, if
    /// one was made, is dropped unused: the runner is left as it was).
    async fn probe_runner(&self, object: &TerraformObject, runner: &str) -> Outcome {
        match self.ports.runner.attach(object, runner).await {
            Ok(_) => Outcome::RunnerProbed {
                gone: false,
                why: format!("runner {runner} is up"),
            },
            Err(PortError::NotFound(why)) => Outcome::RunnerProbed { gone: true, why },
            Err(e) => Outcome::RunnerProbed {
                gone: false,
                why: e.to_string(),
            },
        }
    }

    /// Ends the object's runners still up ([`Step::ReleaseRunners`]).
    async fn release_runners(&self, object: &TerraformObject) -> StepResult {
        self.ports
            .runner
            .release(object)
            .await
            .map(|()| Outcome::RunnersReleased)
            .map_err(fail(StepKind::ReleaseRunners, SubStep::Cleanup))
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
            writes: session.writes_for_object(),
        })
    }
}
