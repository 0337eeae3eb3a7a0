//! Performing drift detection and plans: Terraform in the runner, the plan shown, digested,
//! checked by the plan policies and stored by whoever the step says writes.

use super::{StepResult, fail, session};
use crate::api::{PolicyViolation, TerraformObject};
use crate::ports::{Event, EventType, PlanKind, PlanRequest, PlanToStore, PortError, StoredPlan};
use crate::reconcile::driver::{Driver, RunState};
use crate::reconcile::failure::{SubStep, failure};
use crate::reconcile::model::{Outcome, PlanStep, StepKind, Writer};

impl Driver {
    /// Drift detection: a refresh-only plan.
    pub(super) async fn detect_drift(
        &self,
        object: &TerraformObject,
        state: &mut RunState,
    ) -> StepResult {
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
    /// store it; without changes remove what is stored (under the current workspace, and the
    /// earlier one the step names).
    pub(super) async fn plan(
        &self,
        object: &TerraformObject,
        kind: StepKind,
        step: PlanStep,
        state: &mut RunState,
    ) -> StepResult {
        let spec = &object.spec;
        let request = PlanRequest {
            kind: step.kind,
            targets: spec.targets.clone(),
            parallelism: spec.parallelism,
        };
        let session = session(state, kind, SubStep::Plan)?;
        let plan = session
            .plan(&request)
            .await
            .map_err(fail(kind, SubStep::Plan))?;
        let store = fail(kind, SubStep::Store);
        if let Some(old) = &step.replaces {
            self.delete_plan(object, step.writer, session.as_mut(), old)
                .await
                .map_err(&store)?;
        }
        if !plan.has_changes {
            self.delete_plan(object, step.writer, session.as_mut(), &spec.workspace)
                .await
                .map_err(&store)?;
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
        let is_destroy = step.kind == PlanKind::Destroy;
        match step.writer {
            Writer::Runner => {
                let to_store = PlanToStore {
                    workspace: spec.workspace.clone(),
                    id: step.plan_id,
                    is_destroy,
                    is_drift: step.drift,
                };
                session.save_plan(&to_store).await.map_err(&store)?;
            }
            Writer::Driver => {
                let stored = StoredPlan {
                    id: step.plan_id,
                    binary: plan.plan_file,
                    shown,
                    is_destroy,
                    is_drift: step.drift,
                };
                let key = object.key();
                let plans = &self.ports.plans;
                plans
                    .save(&key, &spec.workspace, &stored)
                    .await
                    .map_err(&store)?;
            }
        }
        Ok(Outcome::Planned {
            has_changes: true,
            summary: plan.summary,
            digest,
            violations,
        })
    }

    /// Removes the plan stored under `workspace`, through `writer`.
    async fn delete_plan(
        &self,
        object: &TerraformObject,
        writer: Writer,
        session: &mut dyn crate::ports::RunnerSession,
        workspace: &str,
    ) -> Result<(), PortError> {
        match writer {
            Writer::Runner => session.delete_plan(workspace).await,
            Writer::Driver => self.ports.plans.delete(&object.key(), workspace).await,
        }
    }

    /// The policies' findings on the plan's JSON; Warn violations become Warning events here
    /// (Deny ones stop the apply in the decision).
    async fn check_policies(
        &self,
        object: &TerraformObject,
        plan_json: &str,
    ) -> Result<Vec<PolicyViolation>, PortError> {
        let policies = self.ports.policies.policies(object).await?;
        let found = crate::policy::findings(&policies, plan_json, object)
            .map_err(|e| PortError::Invalid(e.to_string()))?;
        for message in found.warnings {
            let event = Event {
                event_type: EventType::Warning,
                reason: crate::conditions::Reason::ValidationFailed,
                message,
            };
            self.ports.events.emit(&object.key(), event).await;
        }
        Ok(found.violations)
    }
}
