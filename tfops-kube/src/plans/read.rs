//! Reading a plan: from the head Secret, starting again when a save replaced it midway; the
//! readable plan alone from the ConfigMaps.

use tfops_core::api::ObjectKey;
use tfops_core::naming::{plan_secret_name, readable_plan_name};
use tfops_core::plan::{OrderedChunks, PlanIndex};
use tfops_core::ports::{PortError, ShownPlan, StoredPlan};

use crate::error::{is_not_found, port_error};

use super::data::{chunk_of, json_key, map_data, secret_data};
use super::{
    ANNOTATION_PLAN_ID, KEY_CHUNK, KEY_INDEX, KEY_META, KEY_TEXT, KubePlanStore, Meta,
    READ_ATTEMPTS, chunk_name, damaged, unbundle,
};

impl KubePlanStore {
    /// One attempt at reading the whole plan; `Ok(Err(()))` when a save replaced it midway.
    pub(super) async fn read_once(
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
