//! The outputs Secret (`spec.writeOutputsToSecret`): the selected outputs under their keys, a
//! string as its text and anything else as JSON, with the spec's labels and annotations and an
//! owner reference to the `Terraform` object. A Secret of that name that tfops did not write
//! for this object is never taken over.

use std::collections::BTreeMap;

use async_trait::async_trait;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, Patch, Preconditions};
use tfops_core::api::{ObjectKey, WriteOutputsToSecret};
use tfops_core::ports::{OutputValue, OutputsSink, PortError, select_outputs};

use crate::error::{is_not_found, port_error};
use crate::meta::{LABEL_OBJECT, MANAGED_BY, Owner, apply_params, base_labels};

/// Marks a Secret as an outputs Secret (as opposed to a plan object of the same object).
pub const LABEL_OUTPUTS: &str = "infra.argocd.io/outputs";

/// Outputs Secrets in the object's namespace.
#[derive(Clone)]
pub struct KubeOutputsSink {
    client: kube::Client,
    owner: Owner,
    /// Outputs Secrets are never deleted by this sink (see
    /// [`KubeOutputsSink::leaving_deletes_to_garbage_collection`]).
    keep: bool,
}

impl std::fmt::Debug for KubeOutputsSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeOutputsSink")
            .field("owner", &self.owner)
            .finish_non_exhaustive()
    }
}

/// An output's bytes in the Secret: a string as is (what a consumer mounting the key wants),
/// anything else as compact JSON.
pub fn encode_output(value: &serde_json::Value) -> Vec<u8> {
    match value {
        serde_json::Value::String(s) => s.clone().into_bytes(),
        other => other.to_string().into_bytes(),
    }
}

/// Whether `meta` is the outputs Secret tfops wrote for `object`.
fn ours(meta: &ObjectMeta, object: &ObjectKey) -> bool {
    let labels = meta.labels.clone().unwrap_or_default();
    let wanted = base_labels(object);
    labels.get(LABEL_OUTPUTS).map(String::as_str) == Some("true")
        && labels.get(MANAGED_BY) == wanted.get(MANAGED_BY)
        && labels.get(LABEL_OBJECT) == wanted.get(LABEL_OBJECT)
}

impl KubeOutputsSink {
    /// A sink writing with `client`; owner references from `owner`.
    pub fn new(client: kube::Client, owner: Owner) -> Self {
        Self {
            client,
            owner,
            keep: false,
        }
    }

    /// A sink that deletes no Secret: the controller's, whose identity may not delete
    /// Secrets. An outputs Secret carries its object's owner reference, so Kubernetes' garbage
    /// collector removes it with the object; a runner, which writes it, removes an old one
    /// when the target changes.
    #[must_use]
    pub fn leaving_deletes_to_garbage_collection(mut self) -> Self {
        self.keep = true;
        self
    }

    fn api(&self, object: &ObjectKey) -> Api<Secret> {
        Api::namespaced(self.client.clone(), &object.namespace)
    }
}

#[async_trait]
impl OutputsSink for KubeOutputsSink {
    async fn write(
        &self,
        object: &ObjectKey,
        target: &WriteOutputsToSecret,
        outputs: &BTreeMap<String, OutputValue>,
    ) -> Result<(), PortError> {
        let api = self.api(object);
        let name = &target.name;
        let doing = format!("writing outputs Secret {}/{name}", object.namespace);
        match api.get(name).await {
            Ok(existing) if !ours(&existing.metadata, object) => {
                return Err(PortError::Invalid(format!(
                    "Secret {}/{name} exists and is not the outputs Secret tfops writes for {object}; choose another writeOutputsToSecret.name or delete it",
                    object.namespace
                )));
            }
            Ok(_) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(port_error(&doing, e)),
        }
        let mut labels = target.labels.clone();
        labels.extend(base_labels(object));
        labels.insert(LABEL_OUTPUTS.into(), "true".into());
        let owners = self.owner.references(object).await?;
        let data = select_outputs(target, outputs)
            .into_iter()
            .map(|(k, v)| (k, ByteString(encode_output(&v))))
            .collect();
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(object.namespace.clone()),
                labels: Some(labels),
                annotations: (!target.annotations.is_empty()).then(|| target.annotations.clone()),
                owner_references: (!owners.is_empty()).then_some(owners),
                ..ObjectMeta::default()
            },
            type_: Some("Opaque".into()),
            data: Some(data),
            ..Secret::default()
        };
        api.patch(name, &apply_params(), &Patch::Apply(&secret))
            .await
            .map_err(|e| port_error(&doing, e))?;
        Ok(())
    }

    async fn delete(&self, object: &ObjectKey, name: &str) -> Result<(), PortError> {
        if self.keep {
            return Ok(());
        }
        let api = self.api(object);
        let doing = format!("deleting outputs Secret {}/{name}", object.namespace);
        let existing = match api.get(name).await {
            Ok(s) => s,
            Err(e) if is_not_found(&e) => return Ok(()),
            Err(e) => return Err(port_error(&doing, e)),
        };
        if !ours(&existing.metadata, object) {
            // Someone else's Secret under that name now: not ours to remove.
            return Ok(());
        }
        // Only the Secret just looked at, not one created under its name since.
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: existing.metadata.uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(name, &params).await {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(port_error(&doing, e)),
        }
    }
}
