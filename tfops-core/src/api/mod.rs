//! The `Terraform` API, group `infra.argocd.io`, version `v1alpha1`.
//!
//! These plain serde + schemars types *are* the CRD schema: `tfops-kube` wraps them as a
//! Kubernetes resource, and their rustdoc becomes the CRD's field descriptions. Everything is
//! camelCase on the wire. A spec is checked once by [`validate`], which yields a [`ValidSpec`]
//! that the reconciler uses and never re-derives.

mod meta;
mod outputs;
mod pulls;
mod runner;
mod source;
mod spec;
mod state;
mod status;
mod validate;
mod vars;

pub use crate::windows::{ApplyWindow, WindowKind};
pub use meta::{ObjectKey, ObjectMeta, TerraformObject};
pub use outputs::{
    HealthCheck, HealthCheckType, TemplateError, WriteOutputsToConfigMap, WriteOutputsToSecret,
    render_template, template_references,
};
pub use pulls::{
    Approvers, FORGE_TOKEN_NAMESPACES, ForgeKind, ForgeRepository, PullRequests, TokenSecretRef,
    token_granted,
};
pub use runner::{
    ApplyPodTemplate, ApplyPodTemplateSpec, ApplyRunnerSpec, Binary, EnvVar, KubeValue,
    PodMetadata, PodTemplate, PodTemplateSpec, RunnerRole, RunnerSpec,
};
pub use source::{SourceKind, SourceRef, SourceRevisionRef};
pub use spec::{ApprovePlan, DependsOn, DriftAction, Remediation, TerraformSpec};
pub use state::{BackendConfig, ForceUnlock, TfstateSpec};
pub use status::{
    ActiveRun, InventoryEntry, LockStatus, PlanStatus, PolicyViolation, TerraformStatus,
};
pub use validate::{SpecProblem, ValidSpec, ValidationErrors, validate};
pub use vars::{
    FileLocation, FileMapping, KeyRef, SecretKeyRef, ValueFrom, Variable, VarsFrom, VarsFromKind,
};

/// The API group of the `Terraform` kind.
pub const GROUP: &str = "infra.argocd.io";
/// The API version of the `Terraform` kind.
pub const VERSION: &str = "v1alpha1";
/// The kind.
pub const KIND: &str = "Terraform";

pub mod annotations {
    //! Annotations a user (or an Argo CD resource action) sets to ask something of tfops.
    //!
    //! Each Argo CD action is a plain edit of the object:
    //!
    //! | action | edit |
    //! | --- | --- |
    //! | approve | the [`APPROVE`] annotation set to `<status.plan.pending>@<a new token>` (a timestamp) plus a new [`RECONCILE`] value, or `spec.approvePlan` changed to `<status.plan.pending>` |
    //! | re-plan | [`REPLAN`] set to a new value (a timestamp): a fresh plan even when nothing changed |
    //! | suspend / resume | `spec.suspend: true` / `false` |
    //! | force-unlock | [`FORCE_UNLOCK`] set to `status.lock.pending` plus a new [`RECONCILE`] value (or `spec.tfstate.forceUnlock: yes` with `lockIdentifier`) |
    //! | reconcile now | [`RECONCILE`] set to a new value (a timestamp) |
    //! | cancel | [`CANCEL`] set to `argocd@<a timestamp>`: the run under way stops |
    //!
    //! An approval counts once, and only for the plan that was pending when it was given: the
    //! value of `spec.approvePlan` and of the [`APPROVE`] annotation are recorded when a plan
    //! becomes pending (`status.plan.seenApprovePlan`, `status.plan.seenApproval`), and only a
    //! value changed after that approves. It approves what the plan would do
    //! (`status.plan.pendingDigest`): the plan re-made before applying is applied only when it
    //! would do exactly that, and otherwise becomes the new pending plan. Plan ids name a source
    //! revision, so without this an old approval could apply a newer plan of the same revision
    //! that nobody reviewed.

    /// Any new value requests a run now; the handled value is kept in
    /// `status.lastHandledReconcileAt`.
    pub const RECONCILE: &str = "infra.argocd.io/reconcile";
    /// Any new value requests a run that plans even when nothing changed (skipping the drift
    /// shortcut) and replaces a pending plan; the handled value is kept in
    /// `status.lastHandledReplanAt`.
    pub const REPLAN: &str = "infra.argocd.io/replan";
    /// `<plan id>` or `<plan id>@<token>`: approves that pending plan without editing the spec
    /// that Git (and Argo CD's self-heal) owns. A value counts once: to approve a plan again
    /// (its content changed under the same id), give a new token. It is acted on by the run
    /// that a new [`RECONCILE`] value set with it starts (or the next scheduled one).
    pub const APPROVE: &str = "infra.argocd.io/approve";
    /// `<reason>`: suspends the object as `spec.suspend: true` does (no run starts; a step
    /// under way finishes), without editing the spec that Git (and Argo CD's self-heal) owns.
    /// Removing it resumes. The Argo CD suspend and resume actions set and remove it.
    pub const SUSPEND: &str = "infra.argocd.io/suspend";
    /// A lock id: releases the state lock with that id once (`terraform force-unlock`) when it
    /// equals `status.lock.pending`, on the next run (set a new [`RECONCILE`] value to run now).
    pub const FORCE_UNLOCK: &str = "infra.argocd.io/force-unlock";
    /// `<who>@<token>` (any new value): stops the run under way now. A plan or drift check
    /// ends; an apply is interrupted as Ctrl-C does (Terraform writes the state and releases
    /// its lock; killed only after the runner Pod's grace period). The run ends with reason
    /// `RunCancelled`, saying who (the part before `@`), and the next starts at `spec.interval`.
    /// A value set while no run is under way stops nothing. `tfops cancel` and the Argo CD
    /// cancel action set it.
    pub const CANCEL: &str = "infra.argocd.io/cancel";

    /// Who a [`CANCEL`] value names: the part before the last `@`, or the whole value.
    pub fn cancelled_by(value: &str) -> &str {
        value.rsplit_once('@').map_or(value, |(who, _)| who).trim()
    }

    /// The plan id an [`APPROVE`] value names: the part before the first `@`.
    pub fn approved_plan_id(value: &str) -> &str {
        value.split_once('@').map_or(value, |(id, _)| id).trim()
    }
}

/// The label naming the shard of managers an object belongs to (see docs/scaling.md):
/// a manager started with `--shard NAME` reconciles only objects labelled `NAME`; one started
/// without reconciles only objects without the label (the default shard).
pub const SHARD_LABEL: &str = "infra.argocd.io/shard";

/// The finalizer tfops puts on every `Terraform` object it manages. While it is present the
/// object cannot disappear before its resources are destroyed (when asked), its plans and
/// outputs are removed, and no other object still depends on it.
pub const FINALIZER: &str = "infra.argocd.io/finalizer";
