//! Inputs from the object's namespace: the Secrets and ConfigMaps that `varsFrom`, `vars[].valueFrom`,
//! `fileMappings` and `cliConfigSecretRef` name are read once each, then the core resolves the
//! spec against them (so the rules, `optional` included, are the same as in local mode).
//! Values are only returned, never logged.

use std::collections::{BTreeMap, BTreeSet};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::Api;
use tfops_core::api::{TerraformObject, VarsFromKind};
use tfops_core::inputs::DataSource;
use tfops_core::ports::{InputsPort, PortError, ResolvedInputs};

use crate::error::{is_not_found, port_error};

/// Reads inputs with the controller's identity.
#[derive(Clone)]
pub struct KubeInputs {
    client: kube::Client,
}

impl std::fmt::Debug for KubeInputs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeInputs").finish_non_exhaustive()
    }
}

/// Every (kind, name) the spec reads.
pub fn referenced(object: &TerraformObject) -> BTreeSet<(VarsFromKind, String)> {
    let spec = &object.spec;
    let mut refs = BTreeSet::new();
    for from in &spec.vars_from {
        refs.insert((from.kind, from.name.clone()));
    }
    for var in &spec.vars {
        if let Some(from) = &var.value_from {
            if let Some(r) = &from.secret_key_ref {
                refs.insert((VarsFromKind::Secret, r.name.clone()));
            }
            if let Some(r) = &from.config_map_key_ref {
                refs.insert((VarsFromKind::ConfigMap, r.name.clone()));
            }
        }
    }
    for m in &spec.file_mappings {
        refs.insert((VarsFromKind::Secret, m.secret_key_ref.name.clone()));
    }
    if let Some(r) = &spec.cli_config_secret_ref {
        refs.insert((VarsFromKind::Secret, r.name.clone()));
    }
    refs
}

/// What was read, for the core's resolver.
struct Fetched(BTreeMap<(VarsFromKind, String), BTreeMap<String, Vec<u8>>>);

impl DataSource for Fetched {
    fn data(&self, kind: VarsFromKind, _: &str, name: &str) -> Option<BTreeMap<String, Vec<u8>>> {
        self.0.get(&(kind, name.to_string())).cloned()
    }
}

impl KubeInputs {
    /// Inputs read with `client`.
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }

    async fn read(
        &self,
        namespace: &str,
        kind: VarsFromKind,
        name: &str,
    ) -> Result<Option<BTreeMap<String, Vec<u8>>>, PortError> {
        let absent = |e: &kube::Error| is_not_found(e);
        match kind {
            VarsFromKind::Secret => {
                let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
                match api.get(name).await {
                    Ok(s) => {
                        let mut data: BTreeMap<String, Vec<u8>> = s
                            .data
                            .unwrap_or_default()
                            .into_iter()
                            .map(|(k, v)| (k, v.0))
                            .collect();
                        // stringData is write-only, but a server that returns it means it.
                        for (k, v) in s.string_data.unwrap_or_default() {
                            data.entry(k).or_insert_with(|| v.into_bytes());
                        }
                        Ok(Some(data))
                    }
                    Err(e) if absent(&e) => Ok(None),
                    Err(e) => Err(port_error(&format!("reading Secret {namespace}/{name}"), e)),
                }
            }
            VarsFromKind::ConfigMap => {
                let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), namespace);
                match api.get(name).await {
                    Ok(m) => {
                        let mut data: BTreeMap<String, Vec<u8>> = m
                            .data
                            .unwrap_or_default()
                            .into_iter()
                            .map(|(k, v)| (k, v.into_bytes()))
                            .collect();
                        for (k, v) in m.binary_data.unwrap_or_default() {
                            data.insert(k, v.0);
                        }
                        Ok(Some(data))
                    }
                    Err(e) if absent(&e) => Ok(None),
                    Err(e) => Err(port_error(
                        &format!("reading ConfigMap {namespace}/{name}"),
                        e,
                    )),
                }
            }
        }
    }
}

#[async_trait]
impl InputsPort for KubeInputs {
    async fn resolve(&self, object: &TerraformObject) -> Result<ResolvedInputs, PortError> {
        let namespace = &object.metadata.namespace;
        let mut fetched = BTreeMap::new();
        for (kind, name) in referenced(object) {
            if let Some(data) = self.read(namespace, kind, &name).await? {
                fetched.insert((kind, name), data);
            }
        }
        tfops_core::inputs::resolve(object, &Fetched(fetched))
    }
}
