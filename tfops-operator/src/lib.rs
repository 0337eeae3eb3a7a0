//! The composition root of tfops.
//!
//! This crate holds the `tfops` CLI and its local mode ([`local`]): the same `tfops-core`
//! reconciler and the same `tfops-runner` gRPC/mTLS path as in a cluster, on local adapters
//! (files for state, status, plans and outputs; a runner child process on 127.0.0.1 with a
//! fresh CA); the controller's composition in a cluster ([`cluster`]); and the `tfops-runner`
//! binary of runner Pods. The manager binary (flags, leader election, metrics, health) is
//! still to come.

pub mod cluster;
pub mod local;
pub mod policy_test;
pub mod runner_process;
pub mod sources;
