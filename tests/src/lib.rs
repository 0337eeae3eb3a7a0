//! End-to-end tests of tfops and their harness.
//!
//! Nothing here yet. This crate will start the operator and runner processes against a Kubernetes
//! API server on loopback, and the local mode against real `terraform`. The reconciler's
//! property tests live with the reconciler, in `tfops-core/tests/`.
