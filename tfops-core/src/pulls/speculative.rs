//! A pull request's plan of one object: the object's configuration at the pull request's head,
//! planned in a runner of its own ([`RunnerRole::PullRequest`]) with the plan identity,
//! without the state lock ([`PlanKind::Speculative`]), never stored for approval, never
//! applied. The object's status, pending plan and state are not touched.

use super::{ObjectPlan, Outcome, PullRequest};
use crate::api::{RunnerRole, SourceRevisionRef, TerraformObject};
use crate::ports::{PlanKind, PlanRequest, Ports, RunnerSession, SetupRequest};
use crate::reconcile::{StepFailure, StepKind, SubStep, failure};

/// A pull request's plan of one object, and what identifies its content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpeculativePlan {
    /// What the comment and statuses show.
    pub plan: ObjectPlan,
    /// The content digest of the plan ([`crate::plan::content_digest`]); empty when the plan
    /// failed or changes nothing.
    pub digest: String,
    /// `terraform show -json` of the plan (it may hold sensitive values: stored as a Secret,
    /// never shown); empty when the plan failed.
    pub json: String,
}

/// `object` as it would be at commit `sha` of its repository: the same object (its name, state,
/// workspace and inputs), its source pinned to that commit.
pub fn at_commit(object: &TerraformObject, sha: &str) -> TerraformObject {
    let mut at = object.clone();
    at.spec.source_ref.reference = SourceRevisionRef {
        commit: Some(sha.to_string()),
        ..SourceRevisionRef::default()
    };
    at
}

/// Plans `object` at `pull`'s head in a pull request's runner, which is removed after.
/// Every failure is part of the result (a failure status on the pull request), never an error.
pub async fn plan_pull_request(
    ports: &Ports,
    object: &TerraformObject,
    pull: &PullRequest,
) -> SpeculativePlan {
    let at = at_commit(object, &pull.head_sha);
    let (outcome, digest, json) = match run(ports, &at).await {
        Ok(planned) => planned,
        Err(f) => (
            Outcome::Failed {
                reason: f.reason.as_str().to_string(),
                message: f.message,
            },
            String::new(),
            String::new(),
        ),
    };
    SpeculativePlan {
        plan: ObjectPlan {
            key: object.key(),
            path: object.spec.path.clone(),
            outcome,
        },
        digest,
        json,
    }
}

type Planned = (Outcome, String, String);

fn fail(kind: StepKind, sub: SubStep) -> impl Fn(crate::ports::PortError) -> StepFailure {
    move |e| failure(kind, sub, &e)
}

async fn run(ports: &Ports, object: &TerraformObject) -> Result<Planned, StepFailure> {
    let key = object.key();
    let spec = &object.spec;
    let revision = ports
        .source
        .resolve(&key, &spec.source_ref)
        .await
        .map_err(fail(StepKind::ResolveSource, SubStep::Resolve))?;
    let artifact = ports
        .source
        .fetch(&key, &spec.source_ref, &revision, spec.ignore.as_deref())
        .await
        .map_err(fail(StepKind::FetchSource, SubStep::Fetch))?;
    let inputs = ports
        .inputs
        .resolve(object)
        .await
        .map_err(fail(StepKind::Setup, SubStep::Inputs))?;
    let mut session = ports
        .runner
        .start(object, RunnerRole::PullRequest)
        .await
        .map_err(fail(StepKind::StartRunner, SubStep::Start))?;
    let request = SetupRequest {
        object: object.clone(),
        artifact,
        inputs,
    };
    let planned = in_session(ports, object, session.as_mut(), &request).await;
    // The runner ran code no one merged: it goes whatever came of the plan.
    if let Err(e) = session.cleanup().await {
        tracing::warn!(object = %key, error = %e, "removing a pull request's runner");
    }
    planned
}

async fn in_session(
    ports: &Ports,
    object: &TerraformObject,
    session: &mut dyn RunnerSession,
    request: &SetupRequest,
) -> Result<Planned, StepFailure> {
    let spec = &object.spec;
    let setup = StepKind::Setup;
    session
        .setup(request)
        .await
        .map_err(fail(setup, SubStep::Upload))?;
    session.init().await.map_err(fail(setup, SubStep::Init))?;
    session
        .select_workspace(&spec.workspace)
        .await
        .map_err(fail(setup, SubStep::Workspace))?;
    let kind = StepKind::Plan;
    let plan = session
        .plan(&PlanRequest {
            kind: PlanKind::Speculative,
            targets: spec.targets.clone(),
            parallelism: spec.parallelism,
        })
        .await
        .map_err(fail(kind, SubStep::Plan))?;
    let shown = session.show().await.map_err(fail(kind, SubStep::Show))?;
    let invalid = |e: String| failure(kind, SubStep::Show, &crate::ports::PortError::Invalid(e));
    let digest = if plan.has_changes {
        crate::plan::content_digest(&shown.json).map_err(|e| invalid(e.to_string()))?
    } else {
        String::new()
    };
    let policies = ports
        .policies
        .policies(object)
        .await
        .map_err(fail(kind, SubStep::Policy))?;
    let found = crate::policy::findings(&policies, &shown.json, object).map_err(|e| {
        failure(
            kind,
            SubStep::Policy,
            &crate::ports::PortError::Invalid(e.to_string()),
        )
    })?;
    let (denials, warnings) = found
        .violations
        .iter()
        .partition::<Vec<_>, _>(|v| v.action == "Deny");
    let said = |v: &crate::api::PolicyViolation| format!("{}/{}: {}", v.policy, v.rule, v.message);
    let outcome = Outcome::Planned {
        summary: plan.summary,
        replaced: replaced(&shown.json),
        warnings: warnings.into_iter().map(said).collect(),
        denials: denials.into_iter().map(said).collect(),
        text: shown.readable,
    };
    Ok((outcome, digest, shown.json))
}

/// The addresses of the resources a plan replaces (destroys and creates again), from its
/// `terraform show -json`; none when it does not parse.
pub fn replaced(plan_json: &str) -> Vec<String> {
    let Ok(plan) = serde_json::from_str::<serde_json::Value>(plan_json) else {
        return Vec::new();
    };
    plan["resource_changes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|rc| {
            matches!(
                crate::plan::actions(rc).as_slice(),
                ["delete", "create"] | ["create", "delete"]
            )
        })
        .filter_map(|rc| rc["address"].as_str().map(str::to_string))
        .collect()
}
