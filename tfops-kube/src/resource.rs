//! The `Terraform` custom resource (`infra.argocd.io/v1alpha1`): the core's spec and status
//! types with Kubernetes metadata, and its CustomResourceDefinition generated from them.

use std::borrow::Cow;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tfops_core::api::{GROUP, KIND, TerraformObject, TerraformSpec, TerraformStatus, VERSION};

/// The plural resource name.
pub const PLURAL: &str = "terraforms";

/// A `Terraform` object as the API server stores it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Terraform {
    /// `apiVersion`, always `infra.argocd.io/v1alpha1` when written.
    #[serde(default = "api_version")]
    pub api_version: String,
    /// `kind`, always `Terraform` when written.
    #[serde(default = "kind")]
    pub kind: String,
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// What the user asks for.
    pub spec: TerraformSpec,
    /// What tfops observed; written through the status subresource only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<TerraformStatus>,
}

fn api_version() -> String {
    format!("{GROUP}/{VERSION}")
}

fn kind() -> String {
    KIND.to_string()
}

impl Terraform {
    /// A new object named `name` with `spec`.
    pub fn new(name: &str, spec: TerraformSpec) -> Self {
        Self {
            api_version: api_version(),
            kind: kind(),
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                ..Default::default()
            },
            spec,
            status: None,
        }
    }
}

impl Terraform {
    /// The object as the reconciler sees it (metadata it reads, spec, status).
    pub fn to_object(&self) -> TerraformObject {
        let m = &self.metadata;
        TerraformObject {
            metadata: tfops_core::api::ObjectMeta {
                name: m.name.clone().unwrap_or_default(),
                namespace: m.namespace.clone().unwrap_or_default(),
                uid: m.uid.clone().unwrap_or_default(),
                resource_version: m.resource_version.clone().unwrap_or_default(),
                generation: m.generation.unwrap_or_default(),
                labels: m.labels.clone().unwrap_or_default(),
                annotations: m.annotations.clone().unwrap_or_default(),
                deletion_timestamp: m.deletion_timestamp.as_ref().map(|t| t.0),
                finalizers: m.finalizers.clone().unwrap_or_default(),
            },
            spec: self.spec.clone(),
            status: self.status.clone().unwrap_or_default(),
        }
    }
}

impl kube_core::Resource for Terraform {
    type DynamicType = ();
    type Scope = kube_core::NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        KIND.into()
    }

    fn group(_: &()) -> Cow<'_, str> {
        GROUP.into()
    }

    fn version(_: &()) -> Cow<'_, str> {
        VERSION.into()
    }

    fn plural(_: &()) -> Cow<'_, str> {
        PLURAL.into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// The structural OpenAPI v3 schema of `T`, as Kubernetes wants it in a CRD: subschemas
/// inlined, enums and flattened maps rewritten by kube's [`StructuralSchemaRewriter`], no
/// meta-schema.
///
/// [`StructuralSchemaRewriter`]: kube_core::schema::StructuralSchemaRewriter
pub(crate) fn structural<T: schemars::JsonSchema>() -> Value {
    let generator = schemars::generate::SchemaSettings::openapi3()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .with_transform(schemars::transform::AddNullable::default())
        .with_transform(kube_core::schema::StructuralSchemaRewriter)
        .with_transform(kube_core::schema::OptionalEnum)
        .into_generator();
    let mut schema = generator.into_root_schema_for::<T>().to_value();
    if let Some(o) = schema.as_object_mut() {
        o.remove("title");
        o.remove("$schema");
    }
    schema
}

/// The printer columns: Ready (status and reason), the pending plan, age.
fn printer_columns() -> Value {
    json!([
        {"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"},
        {"name": "Reason", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].reason"},
        {"name": "Plan", "type": "string", "jsonPath": ".status.plan.pending"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ])
}

/// The CustomResourceDefinition of `Terraform`, generated from the core's types: their rustdoc
/// becomes the field descriptions.
///
/// # Errors
/// When the generated definition does not parse as a CRD (a bug in the types' schema).
pub fn crd() -> Result<CustomResourceDefinition, serde_json::Error> {
    let mut spec = structural::<TerraformSpec>();
    let status = structural::<TerraformStatus>();
    if let Some(o) = spec.as_object_mut() {
        o.remove("additionalProperties");
    }
    crate::validation::add_to_spec(&mut spec);
    let schema = json!({
        "type": "object",
        "description": "A Terraform or OpenTofu configuration reconciled by tfops.",
        "required": ["spec"],
        "properties": {
            "spec": spec,
            "status": status,
        },
    });
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{PLURAL}.{GROUP}")},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "plural": PLURAL,
                "singular": "terraform",
                "kind": KIND,
                "listKind": format!("{KIND}List"),
                "shortNames": ["tf"],
                "categories": ["tfops"],
            },
            "versions": [{
                "name": VERSION,
                "served": true,
                "storage": true,
                "subresources": {"status": {}},
                "additionalPrinterColumns": printer_columns(),
                "schema": {"openAPIV3Schema": schema},
            }],
        },
    }))
}

/// The CRD as the YAML checked in at `config/crd/infra.argocd.io_terraforms.yaml`.
///
/// # Errors
/// As [`crd`], or when it cannot be written as YAML.
pub fn crd_yaml() -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
    let crd = crd()?;
    let yaml = crate::yaml::for_yaml11(&serde_yaml_ng::to_string(&crd)?);
    Ok(format!(
        "# Generated from tfops_core::api by tfops_kube::resource::crd(); do not edit.\n# Regenerate: TFOPS_UPDATE_CRD=1 cargo test -p tfops-kube --test crd\n{yaml}"
    ))
}
