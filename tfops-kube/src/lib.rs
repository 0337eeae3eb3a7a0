//! The ports of `tfops-core` implemented on the Kubernetes API (issue 13, **in progress**).
//!
//! Written so far: [`resource`], the `Terraform` custom resource wrapping `tfops_core::api`
//! and its CRD generated from those types; [`plans`], the plan store in Secrets and
//! ConfigMaps. To come: the outputs Secret, state administration, runner Pod management
//! (hardened defaults, `podTemplate` merge, labels), the per-namespace runner TLS Secret,
//! events, status written by server-side apply, the finalizer, watches and indexes for
//! `dependsOn`, Argo CD repository-credential lookup, and the `Controller` built with
//! `kube::runtime`.

pub mod controller;
pub mod credentials;
pub mod error;
pub mod events;
pub mod inputs;
pub mod meta;
pub mod objects;
pub mod outputs;
pub mod plans;
pub mod policies;
pub mod resource;
pub mod runner;
pub mod runner_stores;
pub mod state;

pub use credentials::KubeCredentials;
pub use events::KubeEventSink;
pub use inputs::KubeInputs;
pub use objects::KubeObjectWriter;
pub use outputs::KubeOutputsSink;
pub use plans::KubePlanStore;
pub use policies::{KubePolicySource, policy_crd, policy_crd_yaml};
pub use resource::{Terraform, crd, crd_yaml};
pub use runner::{KubeRunnerPort, RunnerSettings};
pub use runner_stores::KubeRunnerStores;
pub use state::KubeStateAdmin;
