//! The outputs Secret (`spec.writeOutputsToSecret`) and ConfigMap
//! (`spec.writeOutputsToConfigMap`): the selected outputs under their keys, a string as its
//! text and anything else as JSON, with the spec's labels and annotations and an owner
//! reference to the `Terraform` object. A Secret or ConfigMap of that name that tfops did not
//! write for this object is never taken over, nor removed.

use std::collections::BTreeMap;

use async_trait::async_trait;
use k8s_openapi::ByteString;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, Patch, Preconditions};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tfops_core::api::{ObjectKey, WriteOutputsToConfigMap, WriteOutputsToSecret};
use tfops_core::ports::{
    ConfigMapData, OutputValue, OutputsSink, PortError, output_text, select_outputs,
};

use crate::error::{is_not_found, port_error};
use crate::meta::{LABEL_OBJECT, MANAGED_BY, Owner, apply_params, base_labels};

/// Marks a Secret or ConfigMap as an outputs one (as opposed to a plan object or the run
/// history of the same object).
pub const LABEL_OUTPUTS: &str = "infra.argocd.io/outputs";

/// Outputs Secrets in the object's namespace.
#[derive(Clone)]
pub struct KubeOutputsSink {
    client: kube::Client,
    owner: Owner,
    /// Outputs Secrets are never deleted by this sink (see
    /// [`KubeOutputsSink::leaving_deletes_to_garbage_collection`]); ConfigMaps still are.
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
    output_text(value).into_bytes()
}

/// Whether `meta` is the outputs Secret or ConfigMap tfops wrote for `object`.
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
    /// when the target changes. Outputs ConfigMaps are still removed (the controller may
    /// delete ConfigMaps, as it does readable plans).
    #[must_use]
    pub fn leaving_deletes_to_garbage_collection(mut self) -> Self {
        self.keep = true;
        self
    }

    fn api<K>(&self, object: &ObjectKey) -> Api<K>
    where
        K: kube::Resource<Scope = NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &object.namespace)
    }

    /// Metadata of an outputs object `name` for `object`, after checking that whatever holds
    /// that name now is ours (`field` says which spec field to change if it is not).
    async fn meta_to_write<K>(
        &self,
        object: &ObjectKey,
        name: &str,
        (labels, annotations): (&BTreeMap<String, String>, &BTreeMap<String, String>),
        field: &str,
    ) -> Result<ObjectMeta, PortError>
    where
        K: kube::Resource<Scope = NamespaceResourceScope> + Clone + DeserializeOwned,
        K: std::fmt::Debug,
        <K as kube::Resource>::DynamicType: Default,
    {
        let kind = K::kind(&Default::default()).to_string();
        let doing = format!("writing outputs {kind} {}/{name}", object.namespace);
        match self.api::<K>(object).get(name).await {
            Ok(existing) if !ours(existing.meta(), object) => {
                return Err(PortError::Invalid(format!(
                    "{kind} {}/{name} exists and is not the outputs {kind} tfops writes for {object}; choose another {field}.name or delete it",
                    object.namespace
                )));
            }
            Ok(_) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(port_error(&doing, e)),
        }
        let mut all_labels = labels.clone();
        all_labels.extend(base_labels(object));
        all_labels.insert(LABEL_OUTPUTS.into(), "true".into());
        let owners = self.owner.references(object).await?;
        Ok(ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(object.namespace.clone()),
            labels: Some(all_labels),
            annotations: (!annotations.is_empty()).then(|| annotations.clone()),
            owner_references: (!owners.is_empty()).then_some(owners),
            ..ObjectMeta::default()
        })
    }

    /// Applies `body` as tfops' field manager.
    async fn apply<K>(&self, object: &ObjectKey, name: &str, body: &K) -> Result<(), PortError>
    where
        K: kube::Resource<Scope = NamespaceResourceScope> + Clone + DeserializeOwned,
        K: Serialize + std::fmt::Debug,
        <K as kube::Resource>::DynamicType: Default,
    {
        let kind = K::kind(&Default::default()).to_string();
        let doing = format!("writing outputs {kind} {}/{name}", object.namespace);
        self.api::<K>(object)
            .patch(name, &apply_params(), &Patch::Apply(body))
            .await
            .map(drop)
            .map_err(|e| port_error(&doing, e))
    }

    /// Removes the outputs object `name` written for `object`, if it is there and ours.
    async fn remove<K>(&self, object: &ObjectKey, name: &str) -> Result<(), PortError>
    where
        K: kube::Resource<Scope = NamespaceResourceScope> + Clone + DeserializeOwned,
        K: std::fmt::Debug,
        <K as kube::Resource>::DynamicType: Default,
    {
        let api = self.api::<K>(object);
        let kind = K::kind(&Default::default()).to_string();
        let doing = format!("deleting outputs {kind} {}/{name}", object.namespace);
        let existing = match api.get(name).await {
            Ok(s) => s,
            Err(e) if is_not_found(&e) => return Ok(()),
            Err(e) => return Err(port_error(&doing, e)),
        };
        if !ours(existing.meta(), object) {
            // Someone else's object under that name now: not ours to remove.
            return Ok(());
        }
        // Only the object just looked at, not one created under its name since.
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: existing.meta().uid.clone(),
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

#[async_trait]
impl OutputsSink for KubeOutputsSink {
    async fn write(
        &self,
        object: &ObjectKey,
        target: &WriteOutputsToSecret,
        outputs: &BTreeMap<String, OutputValue>,
    ) -> Result<(), PortError> {
        let parts = (&target.labels, &target.annotations);
        let metadata = self
            .meta_to_write::<Secret>(object, &target.name, parts, "writeOutputsToSecret")
            .await?;
        let data = select_outputs(target, outputs)
            .into_iter()
            .map(|(k, v)| (k, ByteString(encode_output(&v))))
            .collect();
        let secret = Secret {
            metadata,
            type_: Some("Opaque".into()),
            data: Some(data),
            ..Secret::default()
        };
        self.apply(object, &target.name, &secret).await
    }

    async fn delete(&self, object: &ObjectKey, name: &str) -> Result<(), PortError> {
        if self.keep {
            return Ok(());
        }
        self.remove::<Secret>(object, name).await
    }

    async fn write_config_map(
        &self,
        object: &ObjectKey,
        target: &WriteOutputsToConfigMap,
        data: &ConfigMapData,
    ) -> Result<(), PortError> {
        let parts = (&target.labels, &target.annotations);
        let metadata = self
            .meta_to_write::<ConfigMap>(object, &target.name, parts, "writeOutputsToConfigMap")
            .await?;
        let map = ConfigMap {
            metadata,
            data: Some(data.entries().clone()),
            ..ConfigMap::default()
        };
        self.apply(object, &target.name, &map).await
    }

    async fn delete_config_map(&self, object: &ObjectKey, name: &str) -> Result<(), PortError> {
        self.remove::<ConfigMap>(object, name).await
    }
}
