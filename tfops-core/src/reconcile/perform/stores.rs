//! Performing what reads and writes around Terraform: outputs and inventory, health checks,
//! and the removal of what a deleted object stored, each through whoever the step says writes.

use std::collections::BTreeMap;

use super::{StepResult, fail, missing, session};
use crate::api::{TerraformObject, render_template};
use crate::ports::{PortError, ResolvedHealthCheck, RunnerSession, write_outputs};
use crate::reconcile::driver::{Driver, RunState};
use crate::reconcile::failure::{SubStep, failure};
use crate::reconcile::model::{Outcome, OutputsStep, StepKind, Writer};

impl Driver {
    /// Outputs and inventory; the outputs Secret and ConfigMap written, and those the step
    /// names as replaced removed.
    pub(super) async fn outputs(
        &self,
        object: &TerraformObject,
        step: OutputsStep,
        state: &mut RunState,
    ) -> StepResult {
        let kind = StepKind::Outputs;
        let key = object.key();
        let session = session(state, kind, SubStep::Output)?;
        let (written, config_map_written) = (step.secret.is_some(), step.config_map.is_some());
        let request = step.request();
        let inventory_failed = fail(kind, SubStep::Inventory);
        let (outputs, inventory) = match step.writer {
            // The runner writes them; only what health checks need comes back.
            Writer::Runner => {
                let outputs = session
                    .write_outputs(&request)
                    .await
                    .map_err(fail(kind, SubStep::WriteOutputs))?;
                let inventory = session.inventory().await.map_err(inventory_failed)?;
                (outputs, inventory)
            }
            Writer::Driver => {
                let outputs = session
                    .outputs()
                    .await
                    .map_err(fail(kind, SubStep::Output))?;
                let inventory = session.inventory().await.map_err(inventory_failed)?;
                write_outputs(self.ports.outputs.as_ref(), &key, &request, &outputs)
                    .await
                    .map_err(fail(kind, SubStep::WriteOutputs))?;
                (outputs, inventory)
            }
        };
        let names = outputs.keys().cloned().collect();
        state.outputs = outputs;
        Ok(Outcome::OutputsRead {
            names,
            inventory,
            written,
            config_map_written,
        })
    }

    /// Health checks, with targets rendered from the outputs.
    pub(super) async fn health_checks(
        &self,
        object: &TerraformObject,
        timeouts: &[std::time::Duration],
        state: &mut RunState,
    ) -> StepResult {
        let fail = fail(StepKind::HealthChecks, SubStep::Health);
        let values: BTreeMap<String, serde_json::Value> = state
            .outputs
            .iter()
            .map(|(k, v)| (k.clone(), v.value.clone()))
            .collect();
        for (check, timeout) in object.spec.health_checks.iter().zip(timeouts) {
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
                timeout: *timeout,
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

    /// Cleanup on deletion: the plans stored under `workspaces` and the outputs Secrets and
    /// ConfigMaps named in `outputs`, through `writer`.
    pub(super) async fn delete_plans_and_outputs(
        &self,
        object: &TerraformObject,
        writer: Writer,
        workspaces: &[String],
        (secrets, config_maps): (&[String], &[String]),
        state: &mut RunState,
    ) -> StepResult {
        let kind = StepKind::DeletePlansAndOutputs;
        let fail = fail(kind, SubStep::Delete);
        let key = object.key();
        let mut runner = match writer {
            Writer::Runner => Some(writing_session(state, kind)?),
            Writer::Driver => None,
        };
        for workspace in workspaces {
            match runner.as_mut() {
                Some(session) => session.delete_plan(workspace).await,
                None => self.ports.plans.delete(&key, workspace).await,
            }
            .map_err(&fail)?;
        }
        for name in secrets {
            match runner.as_mut() {
                Some(session) => session.delete_outputs(name).await,
                None => self.ports.outputs.delete(&key, name).await,
            }
            .map_err(&fail)?;
        }
        for name in config_maps {
            match runner.as_mut() {
                Some(session) => session.delete_outputs_config_map(name).await,
                None => self.ports.outputs.delete_config_map(&key, name).await,
            }
            .map_err(&fail)?;
        }
        Ok(Outcome::PlansAndOutputsDeleted)
    }

    /// The state of `workspace`, through `writer`: the runner's identity writes the state, so
    /// it removes it where one is open (the controller's may not touch state Secrets).
    pub(super) async fn delete_state(
        &self,
        object: &TerraformObject,
        writer: Writer,
        workspace: &str,
        suffix: &str,
        state: &mut RunState,
    ) -> StepResult {
        let kind = StepKind::DeleteState;
        match writer {
            Writer::Runner => {
                let session = writing_session(state, kind)?;
                session.delete_state(workspace, suffix).await
            }
            Writer::Driver => {
                let key = object.key();
                self.ports.state.delete_state(&key, workspace, suffix).await
            }
        }
        .map(|()| Outcome::StateDeleted)
        .map_err(fail(kind, SubStep::Delete))
    }
}

/// The session that writes for the object, which the step says is open.
fn writing_session(
    state: &mut RunState,
    kind: StepKind,
) -> Result<&mut Box<dyn RunnerSession>, crate::reconcile::model::StepFailure> {
    state
        .session
        .as_mut()
        .ok_or_else(|| failure(kind, SubStep::Delete, &missing("the runner")))
}
