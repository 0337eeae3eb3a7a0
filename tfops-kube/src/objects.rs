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
        let doing = format!("adding the finalizer to {object}");
        let gone = |_: &ObjectKey| Err(PortError::NotFound(format!("{object} does not exist")));
        self.patch_until_settled(object, &doing, gone, |current| {
            let meta = &current.metadata;
            if meta.finalizers.iter().flatten().any(|f| f == FINALIZER) {
                return Ok(None);
            }
            if meta.deletion_timestamp.is_some() {
                // The API server refuses new finalizers on an object being deleted.
                return Err(PortError::NotFound(format!("{object} is being deleted")));
            }
            let rv = meta.resource_version.clone().unwrap_or_default();
            let add = if meta.finalizers.is_none() {
                json!({"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]})
            } else {
                json!({"op": "add", "path": "/metadata/finalizers/-", "value": FINALIZER})
            };
            Ok(Some(json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
                add,
            ])))
        })
        .await
    }

    async fn remove_finalizer(&self, object: &ObjectKey) -> Result<(), PortError> {
        let doing = format!("removing the finalizer of {object}");
        self.patch_until_settled(
            object,
            &doing,
            |_| Ok(()),
            |current| {
                let meta = &current.metadata;
                let Some(i) = meta
                    .finalizers
                    .iter()
                    .flatten()
                    .position(|f| f == FINALIZER)
                else {
                    return Ok(None);
                };
                let uid = meta.uid.clone().unwrap_or_default();
                let path = format!("/metadata/finalizers/{i}");
                Ok(Some(json!([
                    {"op": "test", "path": "/metadata/uid", "value": uid},
                    {"op": "test", "path": path, "value": FINALIZER},
                    {"op": "remove", "path": path},
                ])))
            },
        )
        .await
    }
}

impl KubeObjectWriter {
    /// Reads the object and applies the JSON patch `plan` makes of it (`None`: nothing to do),
    /// again from a fresh read when the object changed in between (the patch's `test`s
    /// failed), at most [`PATCH_ATTEMPTS`] times. `absent` answers for an object that is gone.
    async fn patch_until_settled(
        &self,
        object: &ObjectKey,
        doing: &str,
        absent: impl Fn(&ObjectKey) -> Result<(), PortError>,
        plan: impl Fn(&Terraform) -> Result<Option<serde_json::Value>, PortError>,
    ) -> Result<(), PortError> {
        let api = self.api(object);
        for _ in 0..PATCH_ATTEMPTS {
            let current = match api.get(&object.name).await {
                Ok(o) => o,
                Err(e) if is_not_found(&e) => return absent(object),
                Err(e) => return Err(port_error(doing, e)),
            };
            let Some(patch) = plan(&current)? else {
                return Ok(());
            };
            let params = PatchParams::default();
            match api
                .patch(
                    &object.name,
                    &params,
                    &Patch::Json::<()>(json_patch(patch)?),
                )
                .await
            {
                Ok(_) => return Ok(()),
                Err(e) if is_not_found(&e) => return absent(object),
                Err(e) if changed_under_us(&e) => continue,
                Err(e) => return Err(port_error(doing, e)),
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
