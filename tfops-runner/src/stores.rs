//! What a runner writes for the object it runs for, with its own identity: the stored plan
//! and the outputs Secret (and, when a deleted object asks, the removal of its state). The runner stays free of Kubernetes; the composition root (the
//! `tfops-runner` binary in a runner Pod) hands the server stores built on the API
//! (`tfops-kube`), and without them the runner answers the store commands with an error.

use std::sync::Arc;

use tfops_core::api::ObjectKey;
use tfops_core::ports::{OutputsSink, PlanStore, StateAdmin};

/// The object of the current setup: namespace, name and `metadata.uid` (the owner of what the
/// runner writes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectRef {
    /// Namespace and name.
    pub key: ObjectKey,
    /// `metadata.uid` (empty when the controller did not send one).
    pub uid: String,
}

/// Stores for an object, made per setup (they carry its owner reference).
pub trait Stores: Send + Sync {
    /// The plan store writing for `object`.
    fn plans(&self, object: &ObjectRef) -> Arc<dyn PlanStore>;
    /// The outputs sink writing for `object`.
    fn outputs(&self, object: &ObjectRef) -> Arc<dyn OutputsSink>;
    /// What deletes `object`'s state when it asks for that on deletion.
    fn state(&self, object: &ObjectRef) -> Arc<dyn StateAdmin>;
}
