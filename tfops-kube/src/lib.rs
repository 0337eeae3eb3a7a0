//! The ports of `tfops-core` implemented on the Kubernetes API, and the controller that
//! drives them.
//!
//! - [`resource`], [`policies`]: the `Terraform` and `TerraformPolicy` custom resources and
//!   their CRDs, generated from the core's types.
//! - [`plans`], [`outputs`], [`state`], [`inputs`], [`objects`], [`events`],
//!   [`credentials`]: the ports on Secrets, ConfigMaps, Leases, the status subresource and
//!   `events.k8s.io`, each written with the identity its client has (see [`meta::Owner`]).
//! - [`runner`]: runner Pods (hardened: docs/security.md), their TLS, and sessions that notice a dying Pod;
//!   [`runner_stores`]: what a runner Pod writes plans and outputs with.
//! - [`controller`]: the `kube::runtime` controller around the core's driver.
//! - [`actions`]: what people do to objects (approve, replan, …, as Argo CD's actions do);
//!   [`follow`]: a run's output as it goes; [`history`]: the last runs.

pub mod actions;
pub mod approval_key;
pub mod controller;
pub mod credentials;
pub mod error;
pub mod events;
pub mod follow;
pub mod history;
pub mod inputs;
pub mod meta;
pub mod objects;
pub mod outputs;
pub mod plans;
pub mod policies;
pub mod pull_plans;
pub mod quota;
pub mod reference;
pub mod resource;
pub mod runner;
pub mod runner_stores;
pub mod state;
pub mod stops;
pub mod validation;
pub mod watch_backoff;
pub mod yaml;

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
