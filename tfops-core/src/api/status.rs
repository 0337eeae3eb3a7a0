use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::conditions::{Condition, ConditionType, Reason};

/// What tfops observed and did, written only by tfops.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TerraformStatus {
    /// The `metadata.generation` the last completed run acted on.
    #[serde(default)]
    pub observed_generation: i64,
    /// Standard conditions: `Ready`, `Plan`, `Apply`, `Output`, `HealthCheck`, `StateLocked`,
    /// `Reconciling`, `Stalled`. A map list keyed by `type`, so that server-side apply merges
    /// conditions by type.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// The source revision last resolved (`<ref>@sha1:<sha>` or `<tag>@sha256:<digest>`): by
    /// the last run, or by a look at a new revision the source poller saw that changed nothing
    /// of the object's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_attempted_revision: Option<String>,
    /// The source revision of the last plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_planned_revision: Option<String>,
    /// The source revision of the last successful apply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_applied_revision: Option<String>,
    /// A SHA-256 of the resolved inputs (variables, `varsFrom`, file mappings, CLI config) of
    /// the last successful apply (or plan without changes). Values are never kept; a different
    /// digest means the next run plans instead of only checking drift.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_applied_inputs_digest: Option<String>,
    /// When the last apply started. Written before it starts, so that a crash during the first
    /// apply still counts as "something may exist" and deletion destroys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_apply_started_at: Option<jiff::Timestamp>,
    /// When the last plan was made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_plan_at: Option<jiff::Timestamp>,
    /// When drift was last detected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_drift_detected_at: Option<jiff::Timestamp>,
    /// When the last run ended; the next interval (or retry) counts from here. A look at a new
    /// revision that changed nothing of the object's does not move it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run_at: Option<jiff::Timestamp>,
    /// The value of the `infra.argocd.io/reconcile` annotation last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_reconcile_at: Option<String>,
    /// The value of the `infra.argocd.io/replan` annotation last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_replan_at: Option<String>,
    /// The plan waiting for approval, and the last applied one.
    #[serde(default)]
    pub plan: PlanStatus,
    /// A long step under way, recorded before it starts: after a restart of whoever drives
    /// the run, the next driver attaches to it and records its result instead of starting it
    /// again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_run: Option<ActiveRun>,
    /// The resources in the state after the last apply.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inventory: Vec<InventoryEntry>,
    /// The workspace under which a plan is stored (`tfplan-<workspace>-<name>`), so that a
    /// changed `spec.workspace` leaves no plan behind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stored_plan_workspace: Option<String>,
    /// The outputs Secret last written, so that renaming or removing
    /// `spec.writeOutputsToSecret` (and deletion) removes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outputs_secret: Option<String>,
    /// The outputs ConfigMap last written, so that renaming or removing
    /// `spec.writeOutputsToConfigMap` (and deletion) removes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outputs_config_map: Option<String>,
    /// The names of the outputs after the last apply (values are never put in status).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub available_outputs: Vec<String>,
    /// Who made the last plan or drift check: the runner's identity
    /// (`system:serviceaccount:<namespace>:<name>` in a cluster).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_planned_by: Option<String>,
    /// Who made the last apply (or destroy): the apply runner's identity with
    /// `spec.runner.apply`, else the runner's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_applied_by: Option<String>,
    /// The binary and version that ran (`tofu 1.10.6`, `terraform 1.15.5`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binary: Option<String>,
    /// A state lock that stopped a run.
    #[serde(default)]
    pub lock: LockStatus,
    /// Consecutive failed runs; reset by a successful one.
    #[serde(default)]
    pub reconciliation_failures: i64,
    /// What the plan policies found in the last plan with changes (`Deny` ones block the
    /// apply; `Warn` ones are reported).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub policy_violations: Vec<PolicyViolation>,
}

/// A rule a plan violated (or that could not be evaluated on it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyViolation {
    /// The `TerraformPolicy`.
    pub policy: String,
    /// The rule.
    pub rule: String,
    /// `Deny` or `Warn`.
    pub action: String,
    /// The rule's message (or the evaluation error).
    pub message: String,
    /// The resources involved.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<String>,
}

/// The plan waiting for approval, and the last applied one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlanStatus {
    /// The id of the plan waiting for approval (`plan-<ref>-<sha>`); set `spec.approvePlan` to
    /// it to apply.
    #[serde(default)]
    pub pending: String,
    /// The id of the last applied plan.
    #[serde(default)]
    pub last_applied: String,
    /// The pending plan destroys everything (`spec.destroy`).
    #[serde(default)]
    pub is_destroy_plan: bool,
    /// The pending plan was made to correct drift.
    #[serde(default)]
    pub is_drift_detection_plan: bool,
    /// The generation at which the pending plan (with this content) was made.
    #[serde(default)]
    pub pending_generation: i64,
    /// The SHA-256 of what the pending plan would do (its resource and output changes, as in
    /// `terraform show -json`). An approval approves this content: the plan re-made before
    /// applying is applied only when its digest is the same, and otherwise becomes the new
    /// pending plan.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pending_digest: String,
    /// `spec.approvePlan` as it was when the pending plan was made. An approval in the spec
    /// counts only when the field is changed to the pending id afterwards, so a value written
    /// before the plan existed (or left from an earlier plan of the same revision) never applies
    /// a plan nobody saw.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub seen_approve_plan: String,
    /// The `infra.argocd.io/approve` annotation as it was when the pending plan was made, or as
    /// last handled. An annotation approval counts only with a value different from this one.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub seen_approval: String,
    /// The SHA-256 of what the last applied plan did.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_applied_digest: String,
    /// The approvals given on pull requests that were taken up to apply a plan
    /// (`<number>@<digest>`, newest last): an approved content is applied at most once.
    /// Recorded before the apply starts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub used_pull_approvals: Vec<String>,
    /// The approvals given on pull requests that a run has looked at (`<number>@<digest>`):
    /// one not looked at yet that approves the pending plan's content starts a run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub seen_pull_approvals: Vec<String>,
}

impl TerraformStatus {
    /// The plan being applied, when one is: `Ready` says `TerraformApplying` (from the run
    /// that takes up an approval until its apply ends), or an apply is recorded under way.
    /// Nothing waits for approval meanwhile: approving again is refused by tfops' actions.
    pub fn applying(&self) -> Option<&str> {
        let ready = crate::conditions::find(&self.conditions, ConditionType::Ready);
        let by_ready = ready.is_some_and(|c| c.reason == Reason::TerraformApplying.as_str());
        match &self.active_run {
            Some(run) if !run.plan_id.is_empty() => Some(run.plan_id.as_str()),
            _ if by_ready && !self.plan.pending.is_empty() => Some(self.plan.pending.as_str()),
            _ => None,
        }
    }
}

/// An apply under way in a runner (see [`TerraformStatus::active_run`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ActiveRun {
    /// The step (`Apply`).
    pub step: String,
    /// Which runner runs it (what the runner port needs to reach it again).
    pub runner: String,
    /// The runner's run id of the command.
    pub run_id: String,
    /// When it started.
    pub started_at: jiff::Timestamp,
    /// The plan it applies.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub plan_id: String,
    /// What that plan does ([`PlanStatus::pending_digest`]).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub plan_digest: String,
    /// The source revision it was planned from.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub revision: String,
    /// The digest of the inputs it was planned with.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub inputs_digest: String,
    /// It destroys everything (`spec.destroy`, or deletion).
    #[serde(default)]
    pub destroy: bool,
    /// The identity it runs as ([`TerraformStatus::last_applied_by`] once it succeeded).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub identity: String,
    /// The object's `metadata.generation` it was planned at: a driver that takes it up
    /// records that generation as observed, so a spec changed meanwhile is planned next
    /// (0: not recorded, by an older version).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub generation: i64,
}

/// For `skip_serializing_if`.
fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// A state lock that stopped a run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LockStatus {
    /// The lock id; release it with the force-unlock action.
    #[serde(default)]
    pub pending: String,
    /// Who holds it, as Terraform's lock info says.
    #[serde(default)]
    pub holder: String,
}

/// A resource in the state.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InventoryEntry {
    /// The resource address (`module.net.aws_vpc.main`).
    pub address: String,
    /// The resource type (`aws_vpc`).
    #[serde(rename = "type")]
    pub resource_type: String,
    /// The provider's id of the object, when the state records one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identifier: Option<String>,
}
