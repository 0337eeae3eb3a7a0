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

use std::collections::BTreeMap;

use async_trait::async_trait;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, DeleteParams, ListParams, Patch};
use serde::{Deserialize, Serialize};
use tfops_core::api::ObjectKey;
use tfops_core::naming::{MAX_NAME, plan_secret_name, readable_plan_name, shorten};
use tfops_core::plan::{Chunk, ChunkHeader, CodecConfig, OrderedChunks, PlanIndex};
use tfops_core::ports::{PlanStore, PortError, ShownPlan, StoredPlan};

use crate::error::{is_not_found, port_error};
use crate::meta::{Owner, apply_params, base_labels};

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

    async fn write_secret(&self, object: &ObjectKey, secret: Secret) -> Result<(), PortError> {
        let name = secret.metadata.name.clone().unwrap_or_default();
        self.secrets(object)
            .patch(&name, &apply_params(), &Patch::Apply(&secret))
            .await
            .map_err(|e| {
                port_error(
                    &format!("writing plan Secret {}/{name}", object.namespace),
                    e,
                )
            })?;
        Ok(())
    }

    async fn write_config_map(&self, object: &ObjectKey, map: ConfigMap) -> Result<(), PortError> {
        let name = map.metadata.name.clone().unwrap_or_default();
        self.config_maps(object)
            .patch(&name, &apply_params(), &Patch::Apply(&map))
            .await
            .map_err(|e| {
                port_error(
                    &format!("writing plan ConfigMap {}/{name}", object.namespace),
                    e,
                )
            })?;
        Ok(())
    }

    /// One attempt at reading the whole plan; `Ok(Err(()))` when a save replaced it midway.
    async fn read_once(
        &self,
        object: &ObjectKey,
        workspace: &str,
    ) -> Result<Result<Option<StoredPlan>, ()>, PortError> {
        let head_name = plan_secret_name(workspace, &object.name);
        let secrets = self.secrets(object);
        let reading = |name: &str| format!("reading plan Secret {}/{name}", object.namespace);
        let head = match secrets.get(&head_name).await {
            Ok(s) => s,
            Err(e) if is_not_found(&e) => return Ok(Ok(None)),
            Err(e) => return Err(port_error(&reading(&head_name), e)),
        };
        let data = secret_data(&head);
        let index: PlanIndex = json_key(&data, KEY_INDEX).map_err(|e| damaged(object, &e))?;
        let meta: Meta = json_key(&data, KEY_META).map_err(|e| damaged(object, &e))?;
        let mut chunks = Vec::new();
        for i in 0..index.chunk_count() {
            let chunk_data = if i == 0 {
                data.clone()
            } else {
                let name = chunk_name(&head_name, i);
                match secrets.get(&name).await {
                    Ok(s) => secret_data(&s),
                    // Removed by a save of a smaller plan after this head was read.
                    Err(e) if is_not_found(&e) => return Ok(Err(())),
                    Err(e) => return Err(port_error(&reading(&name), e)),
                }
            };
            let chunk = chunk_of(&chunk_data, KEY_CHUNK).map_err(|e| damaged(object, &e))?;
            if chunk.header.upload_id != index.upload_id {
                return Ok(Err(()));
            }
            chunks.push(chunk);
        }
        let ordered = OrderedChunks::new(&index, chunks)
            .map_err(|e| damaged(object, &format!("its chunks: {e}")))?;
        let bytes = tfops_core::plan::decode_to_vec(index, ordered, &self.binary)
            .map_err(|e| damaged(object, &format!("the plan: {e}")))?;
        let (binary, json) = unbundle(&bytes).map_err(|e| damaged(object, &e))?;
        let Some((_, readable)) = self
            .read_readable(object, workspace, Some(&meta.readable_upload))
            .await?
        else {
            return Ok(Err(()));
        };
        Ok(Ok(Some(StoredPlan {
            id: meta.id,
            binary,
            shown: ShownPlan { readable, json },
            is_destroy: meta.is_destroy,
            is_drift: meta.is_drift,
        })))
    }

    /// The readable plan in the ConfigMaps alone, for people who may read those and not the
    /// plan's Secrets (approvers, `tfops plan show`): its plan id and text; `None` when there
    /// is none.
    ///
    /// # Errors
    /// The API's error; a plan that keeps changing while it is read; damaged objects.
    pub async fn readable(
        &self,
        object: &ObjectKey,
        workspace: &str,
    ) -> Result<Option<(String, String)>, PortError> {
        let head_name = readable_plan_name(workspace, &object.name);
        for _ in 0..READ_ATTEMPTS {
            if let Some(found) = self.read_readable(object, workspace, None).await? {
                return Ok(Some(found));
            }
            // No plan at all, or one replaced while it was read (then read it again).
            match self.config_maps(object).get_opt(&head_name).await {
                Ok(None) => return Ok(None),
                Ok(Some(_)) => {}
                Err(e) => {
                    let doing = format!("reading plan ConfigMap {}/{head_name}", object.namespace);
                    return Err(port_error(&doing, e));
                }
            }
        }
        Err(PortError::Unavailable(format!(
            "the plan of {object} kept changing while it was read ({READ_ATTEMPTS} attempts)"
        )))
    }

    /// The plan id and readable plan of upload `expected` (any when `None`); `None` when
    /// another upload replaced it.
    async fn read_readable(
        &self,
        object: &ObjectKey,
        workspace: &str,
        expected: Option<&str>,
    ) -> Result<Option<(String, String)>, PortError> {
        let head_name = readable_plan_name(workspace, &object.name);
        let maps = self.config_maps(object);
        let reading = |name: &str| format!("reading plan ConfigMap {}/{name}", object.namespace);
        let (head, plan_id) = match maps.get(&head_name).await {
            Ok(m) => {
                let id = m
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(ANNOTATION_PLAN_ID));
                (map_data(&m), id.cloned().unwrap_or_default())
            }
            Err(e) if is_not_found(&e) => return Ok(None),
            Err(e) => return Err(port_error(&reading(&head_name), e)),
        };
        let index: PlanIndex = json_key(&head, KEY_INDEX).map_err(|e| damaged(object, &e))?;
        if expected.is_some_and(|u| u != index.upload_id) {
            return Ok(None);
        }
        let mut chunks = Vec::new();
        for i in 0..index.chunk_count() {
            let data = if i == 0 {
                head.clone()
            } else {
                let name = chunk_name(&head_name, i);
                match maps.get(&name).await {
                    Ok(m) => map_data(&m),
                    Err(e) if is_not_found(&e) => return Ok(None),
                    Err(e) => return Err(port_error(&reading(&name), e)),
                }
            };
            let chunk = chunk_of(&data, KEY_TEXT).map_err(|e| damaged(object, &e))?;
            if chunk.header.upload_id != index.upload_id {
                return Ok(None);
            }
            chunks.push(chunk);
        }
        let ordered = OrderedChunks::new(&index, chunks)
            .map_err(|e| damaged(object, &format!("its readable chunks: {e}")))?;
        let bytes = tfops_core::plan::decode_to_vec(index, ordered, &self.readable)
            .map_err(|e| damaged(object, &format!("the readable plan: {e}")))?;
        String::from_utf8(bytes)
            .map(|text| Some((plan_id, text)))
            .map_err(|_| damaged(object, "the readable plan is not UTF-8"))
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
        if self.keep_secrets {
            // Replacing a plan removes the previous one's Secrets, which this store never does:
            // saving here would leave an old plan readable beside the new one.
            return Err(PortError::Invalid(
                "this plan store deletes no Secrets and so cannot replace a plan; plans are stored by the runner that makes them".into(),
            ));
        }
        let owners = self.owner.references(object).await?;
        let now = jiff::Timestamp::now().as_nanosecond();
        let sha = tfops_core::digest::sha256_hex(&plan.binary);
        let upload = format!("{now:x}-{}", &sha[..12]);
        let readable_upload = format!("{upload}-r");
        let digest = tfops_core::plan::content_digest(&plan.shown.json).ok();
        let bundled = bundle(&plan.binary, &plan.shown.json);
        let head_name = plan_secret_name(workspace, &object.name);
        let (index, mut parts) =
            Self::parts(&self.binary, &bundled, &plan.id, &upload, &head_name)?;
        let readable_head = readable_plan_name(workspace, &object.name);
        let (rindex, mut rparts) = Self::parts(
            &self.readable,
            plan.shown.readable.as_bytes(),
            &plan.id,
            &readable_upload,
            &readable_head,
        )?;
        let meta = Meta {
            id: plan.id.clone(),
            is_destroy: plan.is_destroy,
            is_drift: plan.is_drift,
            readable_upload: readable_upload.clone(),
        };
        parts[0].extra.insert(KEY_INDEX.into(), to_json(&index)?);
        parts[0].extra.insert(KEY_META.into(), to_json(&meta)?);
        rparts[0].extra.insert(KEY_INDEX.into(), to_json(&rindex)?);
        // Readable first, head Secret last: the head is what makes the plan visible.
        rparts.rotate_left(1);
        for part in rparts {
            let metadata = Self::metadata(
                object,
                workspace,
                "readable",
                &part.name,
                &plan.id,
                &part.header,
                &owners,
                None,
            );
            let mut data = BTreeMap::new();
            data.insert(KEY_HEADER.to_string(), text(to_json(&part.header)?)?);
            data.insert(KEY_TEXT.to_string(), text(part.data)?);
            for (k, v) in part.extra {
                data.insert(k, text(v)?);
            }
            let map = ConfigMap {
                metadata,
                data: Some(data),
                ..ConfigMap::default()
            };
            self.write_config_map(object, map).await?;
        }
        parts.rotate_left(1);
        for part in parts {
            let head = part.header.index == 0;
            let metadata = Self::metadata(
                object,
                workspace,
                "binary",
                &part.name,
                &plan.id,
                &part.header,
                &owners,
                digest.as_deref().filter(|_| head),
            );
            let mut data = BTreeMap::new();
            data.insert(KEY_HEADER.to_string(), ByteString(to_json(&part.header)?));
            data.insert(KEY_CHUNK.to_string(), ByteString(part.data));
            for (k, v) in part.extra {
                data.insert(k, ByteString(v));
            }
            let secret = Secret {
                metadata,
                type_: Some("Opaque".into()),
                data: Some(data),
                ..Secret::default()
            };
            self.write_secret(object, secret).await?;
        }
        // The new plan is whole and visible; what is left of the previous one goes.
        self.remove_stale(object, workspace, Some((&upload, &readable_upload)))
            .await
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
}

impl KubePlanStore {
    /// Removes the plan objects under `workspace` but those of `keep` (the binary and the
    /// readable upload); all of them without.
    async fn remove_stale(
        &self,
        object: &ObjectKey,
        workspace: &str,
        keep: Option<(&str, &str)>,
    ) -> Result<(), PortError> {
        let (binary, readable) = keep.unwrap_or_default();
        let doing = |what: &str| format!("removing old plan objects of {object}: {what}");
        // Without `keep` nothing is kept; an object without an upload is never kept.
        let stale = |meta: &ObjectMeta, kept: &str| {
            let upload = meta
                .annotations
                .as_ref()
                .and_then(|a| a.get(ANNOTATION_UPLOAD));
            keep.is_none() || upload.is_none_or(|u| u != kept)
        };
        let secrets = self.secrets(object);
        let found = if self.keep_secrets {
            Vec::new()
        } else {
            secrets
                .list(&Self::selector(object, workspace, "binary"))
                .await
                .map_err(|e| port_error(&doing("listing Secrets"), e))?
                .items
        };
        for s in found.iter().filter(|s| stale(&s.metadata, binary)) {
            let name = s.metadata.name.clone().unwrap_or_default();
            delete_ignoring_absent(secrets.delete(&name, &DeleteParams::default()).await)
                .map_err(|e| port_error(&doing(&name), e))?;
        }
        let maps = self.config_maps(object);
        let found = maps
            .list(&Self::selector(object, workspace, "readable"))
            .await
            .map_err(|e| port_error(&doing("listing ConfigMaps"), e))?;
        for m in found.items.iter().filter(|m| stale(&m.metadata, readable)) {
            let name = m.metadata.name.clone().unwrap_or_default();
            delete_ignoring_absent(maps.delete(&name, &DeleteParams::default()).await)
                .map_err(|e| port_error(&doing(&name), e))?;
        }
        Ok(())
    }
}

/// A label value for `value` (shortened with a hash when longer than a label allows).
fn label_value(value: &str) -> String {
    shorten(value, tfops_core::naming::MAX_LABEL)
}

fn to_json<T: Serialize>(value: &T) -> Result<Vec<u8>, PortError> {
    serde_json::to_vec(value)
        .map_err(|e| PortError::Invalid(format!("encoding plan metadata: {e}")))
}

/// ConfigMap data must be text; readable chunks are cut on UTF-8 boundaries.
fn text(bytes: Vec<u8>) -> Result<String, PortError> {
    String::from_utf8(bytes)
        .map_err(|_| PortError::Invalid("a readable plan chunk is not UTF-8 text".into()))
}

fn secret_data(secret: &Secret) -> BTreeMap<String, Vec<u8>> {
    secret
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect()
}

fn map_data(map: &ConfigMap) -> BTreeMap<String, Vec<u8>> {
    map.data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone().into_bytes()))
        .collect()
}

fn json_key<T: serde::de::DeserializeOwned>(
    data: &BTreeMap<String, Vec<u8>>,
    key: &str,
) -> Result<T, String> {
    let bytes = data.get(key).ok_or_else(|| format!("no {key}"))?;
    serde_json::from_slice(bytes).map_err(|e| format!("{key}: {e}"))
}

fn chunk_of(data: &BTreeMap<String, Vec<u8>>, key: &str) -> Result<Chunk, String> {
    let header: ChunkHeader = json_key(data, KEY_HEADER)?;
    let bytes = data.get(key).ok_or_else(|| format!("no {key}"))?;
    Ok(Chunk {
        header,
        data: bytes.clone(),
    })
}

/// A delete's result with "it was not there" as success.
fn delete_ignoring_absent<T>(result: Result<T, kube::Error>) -> Result<(), kube::Error> {
    match result {
        Err(e) if !is_not_found(&e) => Err(e),
        _ => Ok(()),
    }
}
