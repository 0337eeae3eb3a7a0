//! The gRPC runner service. The edge validates requests once and maps errors to
//! `tonic::Status` only there (`rpc`).
//!
//! - `config`: how a runner runs and which binary it runs.
//! - `context`: what a command runs with besides Terraform.
//! - `service`: the service's state, one run at a time, starting a command.
//! - `commands`: running one command (Terraform's, and the store commands).
//! - `deadline`: a command's timeout.
//! - `results`: a command's result as the runner answers it.
//! - `rpc`: the gRPC methods.

mod commands;
mod config;
mod context;
mod deadline;
mod results;
mod rpc;
mod service;

pub use config::{
    Overrides, RunnerConfig, find_binary, find_binary_in, held_by_own_host, own_host,
};
pub use service::RunnerService;
