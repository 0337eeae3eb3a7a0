//! The `Terraform` object's own writes: status by server-side apply of the status
//! subresource under one field manager, and tfops' finalizer by JSON patches whose `test`
//! operations make them preconditions (the finalizer is removed only from the object with the
//! `uid` that was reconciled, and only at the index it was read at).

use async_trait::async_trait;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use tfops_core::api::{FINALIZER, GROUP, KIND, ObjectKey, TerraformStatus, VERSION};
use tfops_core::ports::{ObjectWriter, PortError};

use crate::Terraform;
use crate::error::{is_conflict, is_not_found, port_error};
use crate::meta::apply_params;

/// How often a finalizer patch is retried when the object changed in between.
const PATCH_ATTEMPTS: usize = 5;

/// Writes `Terraform` objects' status and finalizer.
#[derive(Clone)]
pub struct KubeObjectWriter {
    client: kube::Client,
}

impl std::fmt::Debug for KubeObjectWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeObjectWriter").finish_non_exhaustive()
    }
}

/// The server-side apply body of a status write.
pub fn status_patch(status: &TerraformStatus) -> serde_json::Value {
    json!({
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "kind": KIND,
        "status": status,
    })
}

/// A JSON patch failed because the object is not as read (a `test` failed, or it changed):
/// the real API server answers 422 for a failed `test`, 409 for a stale resourceVersion.
fn changed_under_us(e: &kube::Error) -> bool {
    is_conflict(e) || matches!(e, kube::Error::Api(s) if s.code == 422)
}

impl KubeObjectWriter {
    /// A writer with `client`.
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }

    fn api(&self, object: &ObjectKey) -> Api<Terraform> {
        Api::namespaced(self.client.clone(), &object.namespace)
    }
}

#[async_trait]
impl ObjectWriter for KubeObjectWriter {
    async fn write_status(
        &self,
        object: &ObjectKey,
        status: &TerraformStatus,
    ) -> Result<(), PortError> {
        self.api(object)
            .patch_status(
                &object.name,
                &apply_params(),
                &Patch::Apply(status_patch(status)),
            )
            .await
            .map_err(|e| port_error(&format!("writing the status of {object}"), e))?;
        Ok(())
    }

    async fn add_finalizer(&self, object: &ObjectKey) -> Result<(), PortError> {
        let api = self.api(object);
        let doing = format!("adding the finalizer to {object}");
        for _ in 0..PATCH_ATTEMPTS {
            let current = api
                .get(&object.name)
                .await
                .map_err(|e| port_error(&doing, e))?;
            let meta = &current.metadata;
            let finalizers = meta.finalizers.clone().unwrap_or_default();
            if finalizers.iter().any(|f| f == FINALIZER) {
                return Ok(());
            }
            if meta.deletion_timestamp.is_some() {
                // The API server refuses new finalizers on an object being deleted.
                return Err(PortError::NotFound(format!("{object} is being deleted")));
            }
            let rv = meta.resource_version.clone().unwrap_or_default();
            let patch = if meta.finalizers.is_none() {
                json!([
                    {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
                    {"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]},
                ])
            } else {
                json!([
                    {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
                    {"op": "add", "path": "/metadata/finalizers/-", "value": FINALIZER},
                ])
            };
            match api
                .patch(
                    &object.name,
                    &PatchParams::default(),
                    &Patch::Json::<()>(json_patch(patch)?),
                )
                .await
            {
                Ok(_) => return Ok(()),
                Err(e) if changed_under_us(&e) => continue,
                Err(e) => return Err(port_error(&doing, e)),
            }
        }
        Err(PortError::Unavailable(format!(
            "{doing}: the object kept changing ({PATCH_ATTEMPTS} attempts)"
        )))
    }

    async fn remove_finalizer(&self, object: &ObjectKey) -> Result<(), PortError> {
        let api = self.api(object);
        let doing = format!("removing the finalizer of {object}");
        for _ in 0..PATCH_ATTEMPTS {
            let current = match api.get(&object.name).await {
                Ok(o) => o,
                Err(e) if is_not_found(&e) => return Ok(()),
                Err(e) => return Err(port_error(&doing, e)),
            };
            let meta = &current.metadata;
            let finalizers = meta.finalizers.clone().unwrap_or_default();
            let Some(i) = finalizers.iter().position(|f| f == FINALIZER) else {
                return Ok(());
            };
            let uid = meta.uid.clone().unwrap_or_default();
            let path = format!("/metadata/finalizers/{i}");
            let patch = json!([
                {"op": "test", "path": "/metadata/uid", "value": uid},
                {"op": "test", "path": path, "value": FINALIZER},
                {"op": "remove", "path": path},
            ]);
            match api
                .patch(
                    &object.name,
                    &PatchParams::default(),
                    &Patch::Json::<()>(json_patch(patch)?),
                )
                .await
            {
                Ok(_) => return Ok(()),
                Err(e) if is_not_found(&e) => return Ok(()),
                Err(e) if changed_under_us(&e) => continue,
                Err(e) => return Err(port_error(&doing, e)),
            }
        }
        Err(PortError::Unavailable(format!(
            "{doing}: the object kept changing ({PATCH_ATTEMPTS} attempts)"
        )))
    }
}

/// A JSON patch from its JSON form (built above from literals: a failure is a bug, reported
/// rather than panicking).
fn json_patch(value: serde_json::Value) -> Result<json_patch::Patch, PortError> {
    serde_json::from_value(value).map_err(|e| PortError::Invalid(format!("a finalizer patch: {e}")))
}
