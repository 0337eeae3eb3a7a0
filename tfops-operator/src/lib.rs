//! The composition root of tfops.
//!
//! This crate holds the `tfops` CLI and its local mode ([`local`]): the same `tfops-core`
//! reconciler and the same `tfops-runner` gRPC/mTLS path as in a cluster, on local adapters
//! (files for state, status, plans and outputs; a runner child process on 127.0.0.1 with a
//! fresh CA); the controller's composition in a cluster ([`cluster`]); and the `tfops-runner`
//! binary of runner Pods; and the manager process ([`manager`]: flags, logs, metrics and
//! health endpoints, leader election).

pub mod cli;
pub mod cluster;
pub mod forge;
pub mod local;
pub mod logs;
pub mod manager;
pub mod policy_test;
pub mod pulls;
pub mod runner_process;
pub mod sources;
