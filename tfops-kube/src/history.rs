//! The run history of an object in a cluster: the ConfigMap `tfhistory-<name>` next to the
//! object, owned by it (so it goes with it), holding the last runs as JSON under `runs.json`
//! (newest first; [`tfops_core::history`] makes the entries). The controller writes it after
//! each run (it already writes the object's status and events; the readable history holds
//! nothing a Secret must keep: no inputs, and Terraform redacts sensitive values in what it
//! prints). People read it with `tfops history` and `tfops logs`, with the same ConfigMap
//! read access as the readable plans.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, Patch};
use tfops_core::api::ObjectKey;
use tfops_core::history::{RunEntry, record};
use tfops_core::naming::{MAX_NAME, shorten};
use tfops_core::ports::PortError;

use crate::error::{is_not_found, port_error};
use crate::meta::{apply_params, base_labels, owner_reference};

/// The label marking history ConfigMaps.
pub const LABEL_HISTORY: &str = "infra.argocd.io/history";
/// The key holding the runs.
pub const KEY_RUNS: &str = "runs.json";
/// The most bytes the runs take in the ConfigMap (a ConfigMap holds 1 MiB); past it the
/// oldest runs lose their output first.
pub const MAX_BYTES: usize = 256 * 1024;

/// The history ConfigMap's name for an object.
pub fn history_name(object: &str) -> String {
    shorten(&format!("tfhistory-{object}"), MAX_NAME)
}

/// Reads and writes run histories.
#[derive(Clone)]
pub struct KubeRunHistory {
    client: kube::Client,
}

impl std::fmt::Debug for KubeRunHistory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeRunHistory").finish_non_exhaustive()
    }
}

/// The runs as stored, cut to [`MAX_BYTES`]: the oldest runs' output goes first, then the
/// oldest runs.
fn encode(runs: &mut Vec<RunEntry>) -> Result<String, PortError> {
    let json = |runs: &Vec<RunEntry>| {
        serde_json::to_string(runs)
            .map_err(|e| PortError::Invalid(format!("encoding the run history: {e}")))
    };
    let mut text = json(runs)?;
    let mut oldest = runs.len();
    while text.len() > MAX_BYTES && oldest > 0 {
        oldest -= 1;
        runs[oldest].output_tail.clear();
        text = json(runs)?;
    }
    while text.len() > MAX_BYTES && runs.len() > 1 {
        runs.pop();
        text = json(runs)?;
    }
    Ok(text)
}

impl KubeRunHistory {
    /// Histories read and written with `client`.
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }

    fn maps(&self, object: &ObjectKey) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), &object.namespace)
    }

    /// The runs of `object`, newest first (none when it has no history yet).
    ///
    /// # Errors
    /// The API's error; a history that is not valid JSON.
    pub async fn read(&self, object: &ObjectKey) -> Result<Vec<RunEntry>, PortError> {
        let name = history_name(&object.name);
        let map = match self.maps(object).get(&name).await {
            Ok(m) => m,
            Err(e) if is_not_found(&e) => return Ok(Vec::new()),
            Err(e) => {
                let doing = format!("reading the run history {}/{name}", object.namespace);
                return Err(port_error(&doing, e));
            }
        };
        let text = map
            .data
            .and_then(|mut d| d.remove(KEY_RUNS))
            .unwrap_or_default();
        if text.is_empty() {
            return Ok(Vec::new());
        }
        serde_json::from_str(&text).map_err(|e| {
            PortError::Invalid(format!(
                "the run history {}/{name} is damaged: {e}",
                object.namespace
            ))
        })
    }

    /// Adds `entry` to the history of `object` (whose `metadata.uid` is `uid`), keeping the
    /// last runs within [`MAX_BYTES`].
    ///
    /// # Errors
    /// The API's error.
    pub async fn record(
        &self,
        object: &ObjectKey,
        uid: &str,
        entry: RunEntry,
    ) -> Result<(), PortError> {
        // A damaged history is replaced rather than kept failing every run.
        let mut runs = self.read(object).await.unwrap_or_default();
        record(&mut runs, entry);
        let text = encode(&mut runs)?;
        let name = history_name(&object.name);
        let mut labels = base_labels(object);
        labels.insert(LABEL_HISTORY.into(), "true".into());
        let map = ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(object.namespace.clone()),
                labels: Some(labels),
                owner_references: (!uid.is_empty())
                    .then(|| vec![owner_reference(&object.name, uid)]),
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([(KEY_RUNS.to_string(), text)])),
            ..ConfigMap::default()
        };
        self.maps(object)
            .patch(&name, &apply_params(), &Patch::Apply(&map))
            .await
            .map_err(|e| {
                port_error(
                    &format!("writing the run history {}/{name}", object.namespace),
                    e,
                )
            })?;
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn run(tail: usize) -> RunEntry {
        RunEntry {
            started_at: jiff::Timestamp::UNIX_EPOCH,
            finished_at: jiff::Timestamp::UNIX_EPOCH,
            trigger: "interval".into(),
            revision: String::new(),
            plan_id: String::new(),
            summary: None,
            applied: false,
            drifted: vec![],
            steps: vec![],
            result: "Succeeded".into(),
            reason: String::new(),
            message: String::new(),
            output_tail: "x".repeat(tail),
            binary: String::new(),
            planned_by: String::new(),
            applied_by: String::new(),
            unlocked: String::new(),
        }
    }

    #[test]
    fn the_oldest_runs_lose_their_output_first() {
        let mut runs: Vec<RunEntry> = (0..40).map(|_| run(8 * 1024)).collect();
        let text = encode(&mut runs).unwrap();
        assert!(text.len() <= MAX_BYTES);
        assert_eq!(runs.len(), 40, "runs kept, outputs dropped");
        assert_eq!(
            runs[0].output_tail.len(),
            8 * 1024,
            "the newest keeps its output"
        );
        assert!(runs[39].output_tail.is_empty());
    }
}
