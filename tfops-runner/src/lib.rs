//! The runner: the only place `terraform` or `tofu` runs.
//!
//! Not written yet. This crate will hold `proto/runner.proto` (the contract between the
//! controller and a runner Pod), the gRPC server that writes backend, variables, file mappings
//! and CLI config and spawns `terraform`/`tofu`, its client (which implements
//! `tfops_core::ports::RunnerSession`), and the mutual-TLS certificate authority made with rcgen.
