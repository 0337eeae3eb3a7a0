//! What a command runs with besides Terraform.

use std::sync::{Arc, Mutex};

use crate::stores::{ObjectRef, Stores};

/// The last plan's rendered forms (see [`super::commands::execute`]).
#[derive(Default)]
pub(super) struct Shown {
    pub(super) json: Option<String>,
    pub(super) readable: Option<String>,
    /// The last plan was speculative (`-lock=false`, a pull request's): never applied or
    /// stored for approval.
    pub(super) speculative: bool,
}

/// What a command needs besides Terraform.
pub(super) struct Context {
    pub(super) shown: Arc<Mutex<Shown>>,
    /// The stores and the object they write for, when the runner has stores.
    pub(super) stores: Option<(Arc<dyn Stores>, ObjectRef)>,
    /// [`super::RunnerConfig::pod_name`].
    pub(super) pod: Option<String>,
    /// Where the setup's state is, when its backend is tfops' kubernetes one.
    pub(super) kubernetes_state: Option<KubernetesState>,
    /// The setup's state was handed over read-only: only what reads it runs.
    pub(super) handed: bool,
}

/// The state of a setup whose backend is the kubernetes one tfops writes: its Secret suffix,
/// and the workspaces whose lock a command of the setup may take (`init` writes the first
/// state of `default`, where it starts; the others, that of the object's workspace).
#[derive(Debug, Clone)]
pub(super) struct KubernetesState {
    /// The namespace the backend keeps the state in.
    pub(super) namespace: String,
    pub(super) suffix: String,
    pub(super) workspaces: Vec<String>,
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic in another request cannot leave these maps half-updated in a way that matters;
    // keep serving.
    m.lock().unwrap_or_else(|e| e.into_inner())
}
