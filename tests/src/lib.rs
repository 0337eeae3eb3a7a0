//! End-to-end tests of tfops and their harness.
//!
//! [`cluster`]: a Kubernetes API server on loopback (in progress, issue 12). This crate will start
//! the operator and runner processes against it, and the local mode against real `terraform`. The reconciler's
//! property tests live with the reconciler, in `tfops-core/tests/`.

pub mod argocd_lua;
pub mod cluster;
pub mod git;
