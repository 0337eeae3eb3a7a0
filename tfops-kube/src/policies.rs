//! `TerraformPolicy` objects (`infra.argocd.io/v1alpha1`, namespaced) as the driver's
//! [`PolicySource`], and their CRD generated from the core's types. A cluster without the CRD
//! has no policies (the list answers 404); any other failure to list is an error, so that a
//! plan is never let through unchecked because policies could not be read.

use async_trait::async_trait;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use serde_json::json;
use tfops_core::api::{GROUP, TerraformObject, VERSION};
use tfops_core::policy::{PolicyMeta, TerraformPolicy, TerraformPolicySpec};
use tfops_core::ports::{PolicySource, PortError};

use crate::error::{is_not_found, port_error};

/// The kind.
pub const POLICY_KIND: &str = "TerraformPolicy";
/// The plural resource name.
pub const POLICY_PLURAL: &str = "terraformpolicies";

fn api_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(GROUP, VERSION, POLICY_KIND),
        POLICY_PLURAL,
    )
}

/// Reads the policies of an object's namespace.
#[derive(Clone)]
pub struct KubePolicySource {
    client: kube::Client,
}

impl std::fmt::Debug for KubePolicySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubePolicySource").finish_non_exhaustive()
    }
}

impl KubePolicySource {
    /// Policies read with `client`.
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }
}

#[async_trait]
impl PolicySource for KubePolicySource {
    async fn policies(&self, object: &TerraformObject) -> Result<Vec<TerraformPolicy>, PortError> {
        let namespace = &object.metadata.namespace;
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), namespace, &api_resource());
        let listed = match api.list(&ListParams::default()).await {
            Ok(l) => l,
            Err(e) if is_not_found(&e) => return Ok(Vec::new()),
            Err(e) => {
                return Err(port_error(
                    &format!("listing the TerraformPolicy objects of {namespace}"),
                    e,
                ));
            }
        };
        listed
            .items
            .into_iter()
            .map(|o| {
                let name = o.metadata.name.clone().unwrap_or_default();
                let spec: TerraformPolicySpec =
                    serde_json::from_value(o.data.get("spec").cloned().unwrap_or(json!({})))
                        .map_err(|e| {
                            PortError::Invalid(format!("TerraformPolicy {namespace}/{name}: {e}"))
                        })?;
                Ok(TerraformPolicy {
                    metadata: PolicyMeta {
                        name,
                        namespace: namespace.clone(),
                        labels: o.metadata.labels.unwrap_or_default(),
                    },
                    spec,
                })
            })
            .collect()
    }
}

/// The CustomResourceDefinition of `TerraformPolicy`, generated from the core's types.
///
/// # Errors
/// When the generated definition does not parse as a CRD (a bug in the types' schema).
pub fn policy_crd() -> Result<CustomResourceDefinition, serde_json::Error> {
    let mut spec = crate::resource::structural::<TerraformPolicySpec>();
    if let Some(o) = spec.as_object_mut() {
        o.remove("additionalProperties");
    }
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{POLICY_PLURAL}.{GROUP}")},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "plural": POLICY_PLURAL,
                "singular": "terraformpolicy",
                "kind": POLICY_KIND,
                "listKind": format!("{POLICY_KIND}List"),
                "shortNames": ["tfpolicy"],
                "categories": ["tfops"],
            },
            "versions": [{
                "name": VERSION,
                "served": true,
                "storage": true,
                "additionalPrinterColumns": [
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                ],
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "description": "Plan policies: CEL rules over terraform show -json, for the Terraform objects they select.",
                    "required": ["spec"],
                    "properties": {"spec": spec},
                }},
            }],
        },
    }))
}

/// The policy CRD as the YAML checked in at `config/crd/infra.argocd.io_terraformpolicies.yaml`.
///
/// # Errors
/// As [`policy_crd`], or when it cannot be written as YAML.
pub fn policy_crd_yaml() -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
    let yaml = crate::yaml::for_yaml11(&serde_yaml_ng::to_string(&policy_crd()?)?);
    Ok(format!(
        "# Generated from tfops_core::policy by tfops_kube::policies::policy_crd(); do not edit.\n# Regenerate: TFOPS_UPDATE_CRD=1 cargo test -p tfops-kube --test crd\n{yaml}"
    ))
}
