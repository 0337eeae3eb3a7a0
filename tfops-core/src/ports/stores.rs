//! What a run stores for its object: plans, outputs, and the state administered outside
//! Terraform.

use std::collections::BTreeMap;

use async_trait::async_trait;

use crate::api::{ObjectKey, WriteOutputsToConfigMap, WriteOutputsToSecret};

use super::PortError;
use super::runner::{OutputValue, OutputsRequest, ShownPlan};

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
    /// The approvals recorded on the object's merged pull requests (none where pull requests
    /// are not planned: the default).
    async fn pull_request_approvals(
        &self,
        object: &ObjectKey,
    ) -> Result<Vec<super::PullApproval>, PortError> {
        let _ = object;
        Ok(Vec::new())
    }
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

/// An output's value as text: a string as it is (what a consumer reading the key wants),
/// anything else as compact JSON.
pub fn output_text(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Selected outputs that Terraform marks sensitive, which a ConfigMap may not hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", describe(config_map, names))]
pub struct SensitiveOutputs {
    /// The ConfigMap asked for.
    pub config_map: String,
    /// The sensitive outputs it selects, by their Terraform names.
    pub names: Vec<String>,
}

fn describe(config_map: &str, names: &[String]) -> String {
    let list: Vec<String> = names.iter().map(|n| format!("{n:?}")).collect();
    let (outputs, are, them) = if names.len() == 1 {
        ("output", "is", "it")
    } else {
        ("outputs", "are", "them")
    };
    format!(
        "{outputs} {} {are} marked sensitive by Terraform, and ConfigMap {config_map} would show {them} to anyone who may read ConfigMaps: write {them} with writeOutputsToSecret and remove {them} from writeOutputsToConfigMap.outputs",
        list.join(", ")
    )
}

/// What an outputs ConfigMap holds: key → text, never a sensitive output's value (the only
/// way to make one is [`ConfigMapData::select`], which refuses them).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConfigMapData(BTreeMap<String, String>);

impl ConfigMapData {
    /// The outputs `target` selects under their keys, as text ([`output_text`]). With no
    /// selection: every output not marked sensitive, under its own name. A selected output
    /// that does not exist is left out, as for the Secret.
    ///
    /// # Errors
    /// [`SensitiveOutputs`] naming every selected output Terraform marks sensitive.
    pub fn select(
        target: &WriteOutputsToConfigMap,
        outputs: &BTreeMap<String, OutputValue>,
    ) -> Result<Self, SensitiveOutputs> {
        let Some(pairs) = target.selection() else {
            let data = outputs
                .iter()
                .filter(|(_, v)| !v.sensitive)
                .map(|(k, v)| (k.clone(), output_text(&v.value)))
                .collect();
            return Ok(Self(data));
        };
        let sensitive: Vec<String> = pairs
            .iter()
            .filter(|(tf, _)| outputs.get(tf).is_some_and(|v| v.sensitive))
            .map(|(tf, _)| tf.clone())
            .collect();
        if !sensitive.is_empty() {
            return Err(SensitiveOutputs {
                config_map: target.name.clone(),
                names: sensitive,
            });
        }
        let data = pairs
            .into_iter()
            .filter_map(|(tf, key)| outputs.get(&tf).map(|v| (key, output_text(&v.value))))
            .collect();
        Ok(Self(data))
    }

    /// Key → text.
    pub fn entries(&self) -> &BTreeMap<String, String> {
        &self.0
    }
}

/// Writes outputs (`spec.writeOutputsToSecret`, `spec.writeOutputsToConfigMap`).
#[async_trait]
pub trait OutputsSink: Send + Sync {
    /// Writes the selected outputs to the outputs Secret.
    async fn write(
        &self,
        object: &ObjectKey,
        target: &WriteOutputsToSecret,
        outputs: &BTreeMap<String, OutputValue>,
    ) -> Result<(), PortError>;
    /// Removes the outputs Secret; succeeds when there is none.
    async fn delete(&self, object: &ObjectKey, name: &str) -> Result<(), PortError>;
    /// Writes the outputs ConfigMap `target` names, holding `data`.
    async fn write_config_map(
        &self,
        object: &ObjectKey,
        target: &WriteOutputsToConfigMap,
        data: &ConfigMapData,
    ) -> Result<(), PortError>;
    /// Removes the outputs ConfigMap `name`; succeeds when there is none.
    async fn delete_config_map(&self, object: &ObjectKey, name: &str) -> Result<(), PortError>;
}

/// Writes `outputs` through `sink` as `request` says: the Secret, then the ConfigMap, each
/// followed by the removal of the one it replaces. The ConfigMap's selection is checked
/// first, so that a refused sensitive output leaves everything as it was.
///
/// # Errors
/// [`PortError::Invalid`] with [`SensitiveOutputs`]' text; the sink's errors.
pub async fn write_outputs(
    sink: &dyn OutputsSink,
    object: &ObjectKey,
    request: &OutputsRequest,
    outputs: &BTreeMap<String, OutputValue>,
) -> Result<(), PortError> {
    let config_map = match &request.config_map {
        Some(target) => Some((
            target,
            ConfigMapData::select(target, outputs)
                .map_err(|e| PortError::Invalid(e.to_string()))?,
        )),
        None => None,
    };
    if let Some(target) = &request.target {
        sink.write(object, target, outputs).await?;
    }
    if let Some(old) = &request.remove {
        sink.delete(object, old).await?;
    }
    if let Some((target, data)) = &config_map {
        sink.write_config_map(object, target, data).await?;
    }
    if let Some(old) = &request.remove_config_map {
        sink.delete_config_map(object, old).await?;
    }
    Ok(())
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

    /// Releases the lock `lock_id` of `workspace`'s state outside Terraform, as its
    /// `force-unlock` does (the kubernetes backend: the Lease freed of that holder), and only
    /// while that exact lock holds it. For a lock Terraform cannot release itself: one taken
    /// while creating a workspace's first state (`init`), whose `force-unlock` first tries to
    /// take the same lock. Whether it released it (`false`: no such lock is held).
    async fn release_lock(
        &self,
        object: &ObjectKey,
        workspace: &str,
        suffix: &str,
        lock_id: &str,
    ) -> Result<bool, PortError>;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn outputs() -> BTreeMap<String, OutputValue> {
        let value = |v: serde_json::Value, sensitive| OutputValue {
            value: v,
            sensitive,
        };
        BTreeMap::from([
            (
                "host".into(),
                value(serde_json::json!("db.internal"), false),
            ),
            (
                "ports".into(),
                value(serde_json::json!([5432, 5433]), false),
            ),
            ("password".into(), value(serde_json::json!("hunter2"), true)),
            ("key".into(), value(serde_json::json!({"k": 1}), true)),
        ])
    }

    fn target(outputs: &[&str]) -> WriteOutputsToConfigMap {
        WriteOutputsToConfigMap {
            name: "db-values".into(),
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            outputs: outputs.iter().map(ToString::to_string).collect(),
        }
    }

    #[test]
    fn a_config_map_holds_text_and_no_sensitive_output() {
        let all = ConfigMapData::select(&target(&[]), &outputs()).unwrap();
        let expected = BTreeMap::from([
            ("host".to_string(), "db.internal".to_string()),
            ("ports".to_string(), "[5432,5433]".to_string()),
        ]);
        assert_eq!(all.entries(), &expected);
        let some = ConfigMapData::select(&target(&["host:db.host", "absent"]), &outputs());
        let expected = BTreeMap::from([("db.host".to_string(), "db.internal".to_string())]);
        assert_eq!(some.unwrap().entries(), &expected);
    }

    #[test]
    fn selected_sensitive_outputs_are_named() {
        let refused =
            ConfigMapData::select(&target(&["host", "password", "key:k"]), &outputs()).unwrap_err();
        assert_eq!(refused.names, ["password", "key"]);
        assert_eq!(
            refused.to_string(),
            r#"outputs "password", "key" are marked sensitive by Terraform, and ConfigMap db-values would show them to anyone who may read ConfigMaps: write them with writeOutputsToSecret and remove them from writeOutputsToConfigMap.outputs"#
        );
        assert!(!format!("{refused:?}").contains("hunter2"));
    }
}
