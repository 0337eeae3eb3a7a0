//! Small conversions between plan objects and their data.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use serde::Serialize;
use tfops_core::naming::shorten;
use tfops_core::plan::{Chunk, ChunkHeader};
use tfops_core::ports::PortError;

use crate::error::is_not_found;

use super::KEY_HEADER;

/// A label value for `value` (shortened with a hash when longer than a label allows).
pub(super) fn label_value(value: &str) -> String {
    shorten(value, tfops_core::naming::MAX_LABEL)
}

pub(super) fn to_json<T: Serialize>(value: &T) -> Result<Vec<u8>, PortError> {
    serde_json::to_vec(value)
        .map_err(|e| PortError::Invalid(format!("encoding plan metadata: {e}")))
}

/// ConfigMap data must be text; readable chunks are cut on UTF-8 boundaries.
pub(super) fn text(bytes: Vec<u8>) -> Result<String, PortError> {
    String::from_utf8(bytes)
        .map_err(|_| PortError::Invalid("a readable plan chunk is not UTF-8 text".into()))
}

pub(super) fn secret_data(secret: &Secret) -> BTreeMap<String, Vec<u8>> {
    secret
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect()
}

pub(super) fn map_data(map: &ConfigMap) -> BTreeMap<String, Vec<u8>> {
    map.data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone().into_bytes()))
        .collect()
}

pub(super) fn json_key<T: serde::de::DeserializeOwned>(
    data: &BTreeMap<String, Vec<u8>>,
    key: &str,
) -> Result<T, String> {
    let bytes = data.get(key).ok_or_else(|| format!("no {key}"))?;
    serde_json::from_slice(bytes).map_err(|e| format!("{key}: {e}"))
}

pub(super) fn chunk_of(data: &BTreeMap<String, Vec<u8>>, key: &str) -> Result<Chunk, String> {
    let header: ChunkHeader = json_key(data, KEY_HEADER)?;
    let bytes = data.get(key).ok_or_else(|| format!("no {key}"))?;
    Ok(Chunk {
        header,
        data: bytes.clone(),
    })
}

/// A delete's result with "it was not there" as success.
pub(super) fn delete_ignoring_absent<T>(result: Result<T, kube::Error>) -> Result<(), kube::Error> {
    match result {
        Err(e) if !is_not_found(&e) => Err(e),
        _ => Ok(()),
    }
}
