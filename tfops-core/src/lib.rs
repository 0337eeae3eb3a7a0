//! The pure core of tfops.
//!
//! Everything that decides what tfops does lives here, free of Kubernetes clients, gRPC, process
//! spawning, sockets and clock reads, so that it can be tested exhaustively and embedded in other
//! controllers:
//!
//! - [`api`]: the `Terraform` spec and status (`infra.argocd.io/v1alpha1`), which are the CRD
//!   schema, and [`api::validate`], which turns a spec into a [`api::ValidSpec`] or lists every
//!   problem.
//! - [`conditions`]: condition types and reasons; [`health`]: the mapping to Argo CD health.
//! - [`naming`]: every name tfops derives (runner Pod, state Secret and Lease, plan objects, plan
//!   ids), within Kubernetes' length limits.
//! - [`reconcile`]: the decision function (`decide`) and the driver that performs its steps
//!   through the [`ports`].
//! - [`pulls`]: plans of pull requests, decided purely: which objects a pull request plans,
//!   which plans a push supersedes, the comment and the commit statuses it shows.
//! - [`ports`]: the traits the driver needs; in-memory fakes live in [`testing`] behind the
//!   `testing` feature.

pub mod api;
pub mod conditions;
pub mod digest;
pub mod duration;
pub mod health;
pub mod history;
pub mod inputs;
pub mod naming;
pub mod plan;
pub mod policy;
pub mod ports;
pub mod pulls;
pub mod reconcile;
pub mod source;
pub mod tail;
#[cfg(feature = "testing")]
pub mod testing;
pub mod windows;

pub use jiff::Timestamp;
