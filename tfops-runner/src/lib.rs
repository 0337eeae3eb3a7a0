//! The runner: the only place `terraform` or `tofu` runs.
//!
//! - [`proto`]: the generated gRPC types of `proto/runner.proto`.
//! - [`tls`]: the certificate authority the controller owns, per-namespace server certificates
//!   and the controller's client certificate (rcgen), and rotation.
//! - [`exec`]: spawning Terraform with `tokio::process`, streaming its lines, cancellation.
//! - [`workdir`]: the working directory: backend override, variables, file mappings, CLI config.
//! - [`refusal`]: a TLS refusal between controller and runner, found in an error's causes and
//!   put in words.
//! - [`state_rescue`]: the state of an apply or destroy that Terraform could not write at its
//!   end (the API server away), pushed once the backend takes it.
//! - [`version_cache`]: the binary's version, remembered by runners sharing a working root.
//! - [`stores`]: what the runner writes for its object (plans, outputs), given by the
//!   composition root.

pub mod client;
pub mod exec;
pub mod handed;
pub mod process;
pub mod refusal;
pub mod server;
pub mod state_rescue;
pub mod stores;
pub mod terraform;
pub mod tls;
pub mod version_cache;
pub mod workdir;

/// The `tracing` target of Terraform's output lines in the runner's log: each line a command
/// prints is also an event of this target (fields `run_id`, `command`, `stream`), so the runner
/// Pod's log carries it for `kubectl logs` and `tfops logs -f`.
pub const OUTPUT_TARGET: &str = "terraform";

/// Generated from `proto/runner.proto`.
#[allow(
    missing_docs,
    clippy::all,
    clippy::pedantic,
    clippy::unwrap_used,
    clippy::expect_used
)]
pub mod proto {
    tonic::include_proto!("tfops.runner.v1");
}
