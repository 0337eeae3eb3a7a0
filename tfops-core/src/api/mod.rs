//! The `Terraform` API, group `infra.argocd.io`, version `v1alpha1`.
//!
//! These plain serde + schemars types *are* the CRD schema: `tfops-kube` wraps them as a
//! Kubernetes resource, and their rustdoc becomes the CRD's field descriptions. Everything is
//! camelCase on the wire. A spec is checked once by [`validate`], which yields a [`ValidSpec`]
//! that the reconciler uses and never re-derives.

mod meta;
mod outputs;
mod runner;
mod source;
mod spec;
mod state;
mod status;
mod validate;
mod vars;

pub use meta::{ObjectKey, ObjectMeta, TerraformObject};
pub use outputs::{
    HealthCheck, HealthCheckType, TemplateError, WriteOutputsToSecret, render_template,
};
pub use runner::{
    Binary, EnvVar, KubeValue, PodMetadata, PodTemplate, PodTemplateSpec, RunnerSpec,
};
pub use source::{SourceKind, SourceRef, SourceRevisionRef};
pub use spec::{ApprovePlan, DependsOn, DriftAction, Remediation, TerraformSpec};
pub use state::{BackendConfig, ForceUnlock, TfstateSpec};
pub use status::{InventoryEntry, LockStatus, PlanStatus, PolicyViolation, TerraformStatus};
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
    //! | approve | `spec.approvePlan: <status.plan.pending>`, or the [`APPROVE`] annotation with that id plus a new [`RECONCILE`] value |
    //! | re-plan | [`REPLAN`] set to a new value (a timestamp): a fresh plan even when nothing changed |
    //! | suspend / resume | `spec.suspend: true` / `false` |
    //! | force-unlock | [`FORCE_UNLOCK`] set to `status.lock.pending` plus a new [`RECONCILE`] value (or `spec.tfstate.forceUnlock: yes` with `lockIdentifier`) |
    //! | reconcile now | [`RECONCILE`] set to a new value (a timestamp) |
    //!
    //! An approval counts only for a plan that was pending before it was given, made from the same
    //! spec (apart from `approvePlan`): plan ids name a source revision, so this is what keeps an
    //! old approval from applying a newer plan of the same revision that nobody reviewed.

    /// Any new value requests a run now; the handled value is kept in
    /// `status.lastHandledReconcileAt`.
    pub const RECONCILE: &str = "infra.argocd.io/reconcile";
    /// Any new value requests a run that plans even when nothing changed (skipping the drift
    /// shortcut) and replaces a pending plan; the handled value is kept in
    /// `status.lastHandledReplanAt`.
    pub const REPLAN: &str = "infra.argocd.io/replan";
    /// A plan id: approves that pending plan without editing the spec that Git (and Argo CD's
    /// self-heal) owns. It counts on the run started by a new [`RECONCILE`] value set with it.
    pub const APPROVE: &str = "infra.argocd.io/approve";
    /// A lock id: releases the state lock with that id once (`terraform force-unlock`) when it
    /// equals `status.lock.pending`, on the next run (set a new [`RECONCILE`] value to run now).
    pub const FORCE_UNLOCK: &str = "infra.argocd.io/force-unlock";
}

/// The finalizer tfops puts on every `Terraform` object it manages. While it is present the
/// object cannot disappear before its resources are destroyed (when asked), its plans and
/// outputs are removed, and no other object still depends on it.
pub const FINALIZER: &str = "infra.argocd.io/finalizer";
