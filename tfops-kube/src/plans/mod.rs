//! The plan store on Kubernetes: a plan's chunks (the core's codec) as Secrets
//! `tfplan-<workspace>-<name>` and `tfplan-<workspace>-<name>-<i>`, its readable form as
//! ConfigMaps `tfplan-<workspace>-<name>-readable` (and `-readable-<i>`).
//!
//! What each object holds:
//!
//! | object | keys |
//! | --- | --- |
//! | the first Secret (the *head*) | `index.json` (the codec's index), `meta.json` (plan id, destroy/drift, the readable upload), `header.json` + `chunk` (chunk 0) |
//! | every other Secret | `header.json` + `chunk` |
//! | the first ConfigMap | `index.json`, `header.json` + `plan.txt` (text chunk 0) |
//! | every other ConfigMap | `header.json` + `plan.txt` |
//!
//! What is chunked is a *bundle*: the binary plan and its `terraform show -json` (which holds
//! values and so belongs in a Secret too), framed by [`bundle`].
//!
//! **Switching plans atomically.** A save writes every other object first and the head
//! Secret last: the head's index names the upload, and every chunk names the upload it
//! belongs to. A reader that finds a chunk of another upload (a save replaced it between two
//! reads) starts again from the head, so it returns one whole plan, never pieces of two. The
//! previous plan's leftover objects (it had more chunks) are removed once the head is written.

mod data;
mod read;
mod write;

use std::collections::BTreeMap;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, DeleteParams, ListParams};
use serde::{Deserialize, Serialize};
use tfops_core::api::ObjectKey;
use tfops_core::naming::{MAX_NAME, plan_secret_name, shorten};
use tfops_core::plan::{ChunkHeader, CodecConfig, PlanIndex};
use tfops_core::ports::{PlanStore, PortError, StoredPlan};

use crate::error::port_error;
use crate::meta::{Owner, base_labels};
use data::{delete_ignoring_absent, label_value};

/// The workspace a plan object was stored under.
pub const LABEL_WORKSPACE: &str = "infra.argocd.io/workspace";
/// `binary` (the plan's Secrets) or `readable` (its ConfigMaps).
pub const LABEL_PLAN_PART: &str = "infra.argocd.io/plan-part";
/// The plan id, on every plan object.
pub const ANNOTATION_PLAN_ID: &str = "infra.argocd.io/plan-id";
/// The content digest approval compares (`tfops_core::plan::content_digest`), on the head.
pub const ANNOTATION_PLAN_DIGEST: &str = "infra.argocd.io/plan-digest";
/// The upload a plan object belongs to.
pub const ANNOTATION_UPLOAD: &str = "infra.argocd.io/upload-id";
/// The chunk's position, from 0.
pub const ANNOTATION_CHUNK: &str = "infra.argocd.io/chunk-index";

const KEY_INDEX: &str = "index.json";
const KEY_META: &str = "meta.json";
const KEY_HEADER: &str = "header.json";
const KEY_CHUNK: &str = "chunk";
const KEY_TEXT: &str = "plan.txt";
const BUNDLE_MAGIC: &[u8] = b"tfops-plan-bundle/1\n";
/// How often a load starts again when a save replaced the plan while it read.
const READ_ATTEMPTS: usize = 5;

/// What the head Secret says of the plan beyond the codec's index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Meta {
    id: String,
    is_destroy: bool,
    is_drift: bool,
    /// The upload of the readable ConfigMaps saved with this plan.
    readable_upload: String,
}

/// The binary plan and its JSON as one byte string: magic, the plan's length (8 bytes, big
/// endian), the plan, the JSON.
pub fn bundle(binary: &[u8], json: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(BUNDLE_MAGIC.len() + 8 + binary.len() + json.len());
    out.extend_from_slice(BUNDLE_MAGIC);
    out.extend_from_slice(&(binary.len() as u64).to_be_bytes());
    out.extend_from_slice(binary);
    out.extend_from_slice(json.as_bytes());
    out
}

/// Splits a [`bundle`] into the binary plan and its JSON.
///
/// # Errors
/// A description of what is wrong with the bytes.
pub fn unbundle(bytes: &[u8]) -> Result<(Vec<u8>, String), String> {
    let rest = bytes
        .strip_prefix(BUNDLE_MAGIC)
        .ok_or("not a tfops plan bundle")?;
    let (len, rest) = rest.split_at_checked(8).ok_or("truncated bundle")?;
    let mut be = [0u8; 8];
    be.copy_from_slice(len);
    let len = usize::try_from(u64::from_be_bytes(be)).map_err(|_| "plan length overflows")?;
    let (binary, json) = rest
        .split_at_checked(len)
        .ok_or("the bundle is shorter than its plan")?;
    let json = String::from_utf8(json.to_vec()).map_err(|_| "the plan's JSON is not UTF-8")?;
    Ok((binary.to_vec(), json))
}

/// Plans in Secrets and ConfigMaps of the object's namespace.
#[derive(Clone)]
pub struct KubePlanStore {
    client: kube::Client,
    owner: Owner,
    binary: CodecConfig,
    readable: CodecConfig,
    /// Plan Secrets are never deleted by this store (see
    /// [`KubePlanStore::leaving_secrets_to_garbage_collection`]).
    keep_secrets: bool,
    /// Checks the approvals merged pull requests carry; without it none counts.
    approval_key: Option<crate::approval_key::ApprovalKey>,
}

impl std::fmt::Debug for KubePlanStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubePlanStore")
            .field("owner", &self.owner)
            .finish_non_exhaustive()
    }
}

/// Why what is stored cannot be used.
fn damaged(object: &ObjectKey, what: &str) -> PortError {
    PortError::Invalid(format!("the stored plan of {object} is damaged: {what}"))
}

/// The name of chunk `i` of the plan objects starting at `head`.
fn chunk_name(head: &str, i: u32) -> String {
    if i == 0 {
        head.to_string()
    } else {
        shorten(&format!("{head}-{i}"), MAX_NAME)
    }
}

/// One plan object to write: its chunk and what it carries besides.
struct Part {
    name: String,
    header: ChunkHeader,
    data: Vec<u8>,
    extra: BTreeMap<String, Vec<u8>>,
}

impl KubePlanStore {
    /// A store writing with `client`; owner references from `owner`.
    pub fn new(client: kube::Client, owner: Owner) -> Self {
        Self {
            client,
            owner,
            binary: CodecConfig::default(),
            readable: CodecConfig::readable(),
            keep_secrets: false,
            approval_key: None,
        }
    }

    /// A store that deletes no plan Secret: the controller's, whose identity may not delete
    /// Secrets. Plan Secrets carry their object's owner reference, so Kubernetes' garbage
    /// collector removes them with it; a runner, which writes them, replaces and removes
    /// them during runs. Readable plans (ConfigMaps) are still deleted. Such a store refuses
    /// to save (a save must remove what it replaces), so it only reads and cleans up after a
    /// deleted object.
    #[must_use]
    pub fn leaving_secrets_to_garbage_collection(mut self) -> Self {
        self.keep_secrets = true;
        self
    }

    /// The same store, reading the approvals of merged pull requests signed with `key`
    /// ([`crate::approval_key`]).
    #[must_use]
    pub fn with_approval_key(mut self, key: crate::approval_key::ApprovalKey) -> Self {
        self.approval_key = Some(key);
        self
    }

    /// The same store with other codec settings (smaller chunks in tests and benchmarks).
    pub fn with_codec(mut self, binary: CodecConfig, readable: CodecConfig) -> Self {
        self.binary = binary;
        self.readable = readable;
        self
    }

    fn secrets(&self, object: &ObjectKey) -> Api<Secret> {
        Api::namespaced(self.client.clone(), &object.namespace)
    }

    fn config_maps(&self, object: &ObjectKey) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), &object.namespace)
    }

    fn selector(object: &ObjectKey, workspace: &str, part: &str) -> ListParams {
        let labels = base_labels(object);
        let mut selector: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        selector.push(format!("{LABEL_WORKSPACE}={}", label_value(workspace)));
        selector.push(format!("{LABEL_PLAN_PART}={part}"));
        ListParams::default().labels(&selector.join(","))
    }

    #[allow(clippy::too_many_arguments)]
    fn metadata(
        object: &ObjectKey,
        workspace: &str,
        part: &str,
        name: &str,
        plan_id: &str,
        header: &ChunkHeader,
        owners: &[OwnerReference],
        digest: Option<&str>,
    ) -> ObjectMeta {
        let mut labels = base_labels(object);
        labels.insert(LABEL_WORKSPACE.into(), label_value(workspace));
        labels.insert(LABEL_PLAN_PART.into(), part.into());
        let mut annotations = BTreeMap::from([
            (ANNOTATION_PLAN_ID.to_string(), plan_id.to_string()),
            (ANNOTATION_UPLOAD.to_string(), header.upload_id.clone()),
            (ANNOTATION_CHUNK.to_string(), header.index.to_string()),
        ]);
        if let Some(d) = digest {
            annotations.insert(ANNOTATION_PLAN_DIGEST.into(), d.to_string());
        }
        ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(object.namespace.clone()),
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references: (!owners.is_empty()).then(|| owners.to_vec()),
            ..ObjectMeta::default()
        }
    }

    /// Encodes `bytes` into parts named from `head`; chunk 0 always exists (an empty plan
    /// gets an empty chunk 0, so the head carries a header like every other part).
    fn parts(
        config: &CodecConfig,
        bytes: &[u8],
        plan_id: &str,
        upload: &str,
        head: &str,
    ) -> Result<(PlanIndex, Vec<Part>), PortError> {
        let (index, chunks) =
            tfops_core::plan::encode_reader(bytes, config.clone(), plan_id, upload, Vec::new())
                .map_err(|e| PortError::Invalid(format!("encoding the plan: {e}")))?;
        let mut parts: Vec<Part> = chunks
            .into_iter()
            .map(|c| Part {
                name: chunk_name(head, c.header.index),
                header: c.header,
                data: c.data,
                extra: BTreeMap::new(),
            })
            .collect();
        if parts.is_empty() {
            parts.push(Part {
                name: head.to_string(),
                header: ChunkHeader {
                    format: index.format,
                    plan_id: plan_id.to_string(),
                    upload_id: upload.to_string(),
                    index: 0,
                    size: 0,
                    crc32: 0,
                },
                data: Vec::new(),
                extra: BTreeMap::new(),
            });
        }
        Ok((index, parts))
    }
}

#[async_trait]
impl PlanStore for KubePlanStore {
    async fn save(
        &self,
        object: &ObjectKey,
        workspace: &str,
        plan: &StoredPlan,
    ) -> Result<(), PortError> {
        self.save_plan(object, workspace, plan).await
    }

    async fn load(
        &self,
        object: &ObjectKey,
        workspace: &str,
    ) -> Result<Option<StoredPlan>, PortError> {
        for _ in 0..READ_ATTEMPTS {
            if let Ok(found) = self.read_once(object, workspace).await? {
                return Ok(found);
            }
        }
        Err(PortError::Unavailable(format!(
            "the plan of {object} kept changing while it was read ({READ_ATTEMPTS} attempts)"
        )))
    }

    async fn delete(&self, object: &ObjectKey, workspace: &str) -> Result<(), PortError> {
        if self.keep_secrets {
            // The readable plan only: the Secrets go with their owner.
            return self.remove_stale(object, workspace, None).await;
        }
        // The head first: from then on readers see no plan, whatever is left.
        let head = plan_secret_name(workspace, &object.name);
        delete_ignoring_absent(
            self.secrets(object)
                .delete(&head, &DeleteParams::default())
                .await,
        )
        .map_err(|e| {
            port_error(
                &format!("deleting plan Secret {}/{head}", object.namespace),
                e,
            )
        })?;
        self.remove_stale(object, workspace, None).await
    }

    async fn pull_request_approvals(
        &self,
        object: &ObjectKey,
    ) -> Result<Vec<tfops_core::ports::PullApproval>, PortError> {
        match &self.approval_key {
            Some(key) => {
                crate::pull_plans::PullPlans::new(self.client.clone())
                    .with_key(key.clone())
                    .merged_approvals(object)
                    .await
            }
            None => Ok(Vec::new()),
        }
    }
}
