//! What a run stores for its object: plans, outputs, and the state administered outside
//! Terraform.

use std::collections::BTreeMap;

use async_trait::async_trait;

use crate::api::{ObjectKey, WriteOutputsToSecret};

use super::PortError;
use super::runner::{OutputValue, ShownPlan};

/// A plan kept for approval. Its `Debug` shows sizes, never the plan.
#[derive(Clone, PartialEq, Eq)]
pub struct StoredPlan {
    /// The plan id.
    pub id: String,
    /// The binary plan.
    pub binary: Vec<u8>,
    /// Rendered forms.
    pub shown: ShownPlan,
    /// A destroy plan.
    pub is_destroy: bool,
    /// Made to correct drift.
    pub is_drift: bool,
}

impl std::fmt::Debug for StoredPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredPlan")
            .field("id", &self.id)
            .field("binary", &format_args!("<{} bytes>", self.binary.len()))
            .field("shown", &self.shown)
            .field("is_destroy", &self.is_destroy)
            .field("is_drift", &self.is_drift)
            .finish()
    }
}

/// Stores plans (`tfplan-<workspace>-<name>` Secret + `-readable` ConfigMap in a cluster).
#[async_trait]
pub trait PlanStore: Send + Sync {
    /// Replaces the object's stored plan.
    async fn save(
        &self,
        object: &ObjectKey,
        workspace: &str,
        plan: &StoredPlan,
    ) -> Result<(), PortError>;
    /// The object's stored plan, verified whole (`None` when there is none).
    ///
    /// # Errors
    /// [`PortError::Invalid`] when what is stored is damaged or incomplete; the store's error.
    async fn load(
        &self,
        object: &ObjectKey,
        workspace: &str,
    ) -> Result<Option<StoredPlan>, PortError>;
    /// Removes the object's stored plan; succeeds when there is none.
    async fn delete(&self, object: &ObjectKey, workspace: &str) -> Result<(), PortError>;
}

/// The outputs `target` selects, under their Secret keys (`tf_name:key` renames; no selection
/// means every output under its own name).
pub fn select_outputs(
    target: &WriteOutputsToSecret,
    outputs: &BTreeMap<String, OutputValue>,
) -> BTreeMap<String, serde_json::Value> {
    match target.selection() {
        None => outputs
            .iter()
            .map(|(k, v)| (k.clone(), v.value.clone()))
            .collect(),
        Some(pairs) => pairs
            .into_iter()
            .filter_map(|(tf, key)| outputs.get(&tf).map(|v| (key, v.value.clone())))
            .collect(),
    }
}

/// Writes outputs (`spec.writeOutputsToSecret`).
#[async_trait]
pub trait OutputsSink: Send + Sync {
    /// Writes the selected outputs.
    async fn write(
        &self,
        object: &ObjectKey,
        target: &WriteOutputsToSecret,
        outputs: &BTreeMap<String, OutputValue>,
    ) -> Result<(), PortError>;
    /// Removes the outputs Secret; succeeds when there is none.
    async fn delete(&self, object: &ObjectKey, name: &str) -> Result<(), PortError>;
}

/// Administers state outside Terraform.
#[async_trait]
pub trait StateAdmin: Send + Sync {
    /// Deletes the state (Secret and lock Lease); succeeds when there is none.
    async fn delete_state(
        &self,
        object: &ObjectKey,
        workspace: &str,
        suffix: &str,
    ) -> Result<(), PortError>;
}
