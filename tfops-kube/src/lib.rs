//! The ports of `tfops-core` implemented on the Kubernetes API (issue 13, **in progress**).
//!
//! Written so far: [`resource`], the `Terraform` custom resource wrapping `tfops_core::api`
//! and its CRD generated from those types. To come: Secret/ConfigMap/Lease stores for state,
//! plans and outputs, runner Pod management (hardened defaults, `podTemplate` merge, labels),
//! the per-namespace runner TLS Secret, events, status written by server-side apply, the
//! finalizer, watches and indexes for `dependsOn`, Argo CD repository-credential lookup, and
//! the `Controller` built with `kube::runtime`.

pub mod resource;

pub use resource::{Terraform, crd, crd_yaml};
