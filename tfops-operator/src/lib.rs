//! The composition root of tfops.
//!
//! Not written yet. This crate will hold the operator binary (flags, leader election, metrics,
//! health endpoints) wiring `tfops-kube` and `tfops-runner` into `tfops-core`'s reconciler, and
//! the `tfops` CLI with its local mode (the same reconciler on local adapters).
