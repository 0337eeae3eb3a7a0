//! What every object tfops writes carries: the field manager, labels, and the owner reference
//! to its `Terraform` object (so Kubernetes' garbage collector removes what a deleted object
//! leaves behind).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, PatchParams};
use tfops_core::api::{GROUP, KIND, ObjectKey, VERSION};
use tfops_core::ports::PortError;

use crate::Terraform;
use crate::error::port_error;

/// The field manager of every server-side apply tfops makes.
pub const FIELD_MANAGER: &str = "tfops";

/// `app.kubernetes.io/managed-by` on everything tfops writes.
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// The `Terraform` object (by name, in the same namespace) a plan or outputs object belongs to.
pub const LABEL_OBJECT: &str = "infra.argocd.io/object";

/// Server-side apply under [`FIELD_MANAGER`], taking over fields another manager set (tfops
/// owns the objects it names).
pub fn apply_params() -> PatchParams {
    PatchParams::apply(FIELD_MANAGER).force()
}

/// The labels every object written for `object` carries.
pub fn base_labels(object: &ObjectKey) -> BTreeMap<String, String> {
    BTreeMap::from([
        (MANAGED_BY.to_string(), "tfops".to_string()),
        (
            LABEL_OBJECT.to_string(),
            tfops_core::naming::shorten(&object.name, tfops_core::naming::MAX_LABEL),
        ),
    ])
}

/// The owner reference to the `Terraform` object named `name` with `uid`. Not
/// `blockOwnerDeletion`: setting that needs the right to update the owner's finalizers, which
/// the runner's identity does not have.
pub fn owner_reference(name: &str, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: format!("{GROUP}/{VERSION}"),
        kind: KIND.to_string(),
        name: name.to_string(),
        uid: uid.to_string(),
        controller: Some(true),
        block_owner_deletion: None,
    }
}

/// Where a store learns the owner reference of what it writes.
#[derive(Clone)]
pub enum Owner {
    /// Read the `Terraform` object (the controller's identity may).
    Lookup(kube::Client),
    /// Given by whoever knows it (the runner learns the object's uid at setup, and its
    /// identity cannot read `Terraform` objects).
    Fixed(OwnerReference),
    /// No owner reference (objects outlive their `Terraform` object).
    None,
}

impl std::fmt::Debug for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Owner::Lookup(_) => f.write_str("Owner::Lookup"),
            Owner::Fixed(r) => write!(f, "Owner::Fixed({}/{})", r.name, r.uid),
            Owner::None => f.write_str("Owner::None"),
        }
    }
}

impl Owner {
    /// The owner references for an object written for `object`.
    ///
    /// # Errors
    /// [`PortError::NotFound`] when the `Terraform` object is gone; the API's error.
    pub async fn references(&self, object: &ObjectKey) -> Result<Vec<OwnerReference>, PortError> {
        match self {
            Owner::None => Ok(Vec::new()),
            Owner::Fixed(r) => Ok(vec![r.clone()]),
            Owner::Lookup(client) => {
                let api: Api<Terraform> = Api::namespaced(client.clone(), &object.namespace);
                let found = api
                    .get(&object.name)
                    .await
                    .map_err(|e| port_error(&format!("reading Terraform {object}"), e))?;
                let uid = found.metadata.uid.unwrap_or_default();
                Ok(vec![owner_reference(&object.name, &uid)])
            }
        }
    }
}
