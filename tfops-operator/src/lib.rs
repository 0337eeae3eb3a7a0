//! The composition root of tfops.
//!
//! Today this crate holds the `tfops` CLI and its local mode ([`local`]): the same
//! `tfops-core` reconciler and the same `tfops-runner` gRPC/mTLS path as in a cluster, on
//! local adapters (files for state, status, plans and outputs; a runner child process on
//! 127.0.0.1 with a fresh CA). The operator binary (flags, leader election, metrics, health)
//! wiring `tfops-kube` comes with the Kubernetes issue.

pub mod local;
pub mod policy_test;
pub mod sources;
