//! Terraform state in the cluster, as the kubernetes backend keeps it: Secret
//! `tfstate-<workspace>-<suffix>` (and `-part-<i>` when Terraform split it), Lease
//! `lock-tfstate-<workspace>-<suffix>` with the lock's JSON in `app.terraform.io/lock-info`.
//! tfops never writes state; it deletes it (only after a destroy, with `deleteOnDestroy`),
//! reads who holds the lock and how large the state is, and reads the state itself to hand
//! it to a pull request's plan.

use async_trait::async_trait;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde::Deserialize;
use tfops_core::api::ObjectKey;
use tfops_core::naming::{state_lease_name, state_secret_name};
use tfops_core::ports::{PortError, StateAdmin};

use crate::error::{is_not_found, port_error};

/// The Lease annotation holding the lock's JSON.
pub const LOCK_INFO_ANNOTATION: &str = "app.terraform.io/lock-info";
/// OpenTofu's kubernetes backend cannot split state: one Secret, refused above this size.
pub const SECRET_LIMIT: usize = 1_048_576;

/// Who holds a state lock, from the Lease.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LockHolder {
    /// The lock id (`spec.holderIdentity`; what `force-unlock` takes).
    pub id: String,
    /// `Who` of the lock info (`user@host`).
    pub who: String,
    /// `Operation` (`OperationTypeApply`, ...).
    pub operation: String,
    /// `Created`, as Terraform wrote it.
    pub created: String,
}

impl std::fmt::Display for LockHolder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let who = if self.who.is_empty() {
            "an unknown holder"
        } else {
            &self.who
        };
        write!(f, "{who}")?;
        if !self.operation.is_empty() {
            write!(f, " ({})", self.operation)?;
        }
        if !self.created.is_empty() {
            write!(f, " since {}", self.created)?;
        }
        write!(f, ", lock id {}", self.id)
    }
}

/// What Terraform's lock info JSON carries (the fields tfops shows).
#[derive(Debug, Default, Deserialize)]
struct LockInfo {
    #[serde(rename = "Who", default)]
    who: String,
    #[serde(rename = "Operation", default)]
    operation: String,
    #[serde(rename = "Created", default)]
    created: String,
}

/// The state of one workspace as stored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StateInfo {
    /// Whether the state Secret exists.
    pub exists: bool,
    /// Stored (gzip) bytes, all parts together.
    pub stored_bytes: usize,
    /// How many Secrets hold it (more than one once Terraform split it).
    pub secrets: usize,
    /// Who holds the lock, when it is held.
    pub lock: Option<LockHolder>,
}

/// State administration through the API.
#[derive(Clone)]
pub struct KubeStateAdmin {
    client: kube::Client,
}

impl std::fmt::Debug for KubeStateAdmin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeStateAdmin").finish_non_exhaustive()
    }
}

/// The state Secrets' label selector, as the backend lists them.
fn selector(workspace: &str, suffix: &str) -> ListParams {
    ListParams::default().labels(&format!(
        "tfstate=true,tfstateSecretSuffix={suffix},tfstateWorkspace={workspace}"
    ))
}

/// The holder a Lease names, if it is held (an empty holder counts as held, as the backend
/// treats it).
pub fn lock_holder(lease: &Lease) -> Option<LockHolder> {
    let id = lease.spec.as_ref()?.holder_identity.clone()?;
    let info = lease
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(LOCK_INFO_ANNOTATION))
        .and_then(|j| serde_json::from_str::<LockInfo>(j).ok())
        .unwrap_or_default();
    Some(LockHolder {
        id,
        who: info.who,
        operation: info.operation,
        created: info.created,
    })
}

impl KubeStateAdmin {
    /// State administration with `client`.
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }

    /// The state Secrets of `workspace` (the Secret and any `-part-<i>`).
    async fn state_secrets(
        &self,
        object: &ObjectKey,
        workspace: &str,
        suffix: &str,
    ) -> Result<Vec<Secret>, PortError> {
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), &object.namespace);
        let name = state_secret_name(workspace, suffix);
        let found = secrets
            .list(&selector(workspace, suffix))
            .await
            .map_err(|e| port_error(&format!("listing the state Secrets of {object}"), e))?;
        Ok(found
            .items
            .into_iter()
            .filter(|s| is_state_part(s.metadata.name.as_deref().unwrap_or_default(), &name))
            .collect())
    }

    /// `workspace`'s state as the backend stores it (gzip, the `tfstate` key of
    /// `tfstate-<workspace>-<suffix>`), empty when there is none yet: what a pull request's
    /// plan is handed instead of a way to the API. Reads Secrets only.
    ///
    /// # Errors
    /// The API's error; [`PortError::Invalid`] for a state split into several Secrets (not
    /// handed yet).
    pub async fn stored_state(
        &self,
        object: &ObjectKey,
        workspace: &str,
        suffix: &str,
    ) -> Result<Vec<u8>, PortError> {
        let name = state_secret_name(workspace, suffix);
        let ours = self.state_secrets(object, workspace, suffix).await?;
        if ours.len() > 1 {
            return Err(PortError::Invalid(format!(
                "the state {}/{name} is split into {} Secrets; tfops hands a pull request's plan only a state held in one Secret",
                object.namespace,
                ours.len()
            )));
        }
        Ok(ours
            .into_iter()
            .find(|s| s.metadata.name.as_deref() == Some(name.as_str()))
            .and_then(|s| s.data?.remove("tfstate"))
            .map(|b| b.0)
            .unwrap_or_default())
    }

    /// The bytes of (gzipped) state the Secrets of `workspace` hold. Reads Secrets only: the
    /// controller may list state Secrets but not read state locks (Leases are the runner's).
    ///
    /// # Errors
    /// The API's error.
    pub async fn stored_bytes(
        &self,
        object: &ObjectKey,
        workspace: &str,
        suffix: &str,
    ) -> Result<usize, PortError> {
        Ok(total_bytes(
            &self.state_secrets(object, workspace, suffix).await?,
        ))
    }

    /// The state's size and lock holder.
    ///
    /// # Errors
    /// The API's error.
    pub async fn inspect(
        &self,
        object: &ObjectKey,
        workspace: &str,
        suffix: &str,
    ) -> Result<StateInfo, PortError> {
        let name = state_secret_name(workspace, suffix);
        let ours = self.state_secrets(object, workspace, suffix).await?;
        let stored_bytes = total_bytes(&ours);
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), &object.namespace);
        let lease_name = state_lease_name(workspace, suffix);
        let lock = match leases.get(&lease_name).await {
            Ok(lease) => lock_holder(&lease),
            Err(e) if is_not_found(&e) => None,
            Err(e) => {
                return Err(port_error(
                    &format!("reading Lease {}/{lease_name}", object.namespace),
                    e,
                ));
            }
        };
        Ok(StateInfo {
            exists: ours
                .iter()
                .any(|s| s.metadata.name.as_deref() == Some(name.as_str())),
            stored_bytes,
            secrets: ours.len(),
            lock,
        })
    }
}

/// The bytes of state the `tfstate` keys of `secrets` hold.
fn total_bytes(secrets: &[Secret]) -> usize {
    secrets
        .iter()
        .filter_map(|s| s.data.as_ref()?.get("tfstate"))
        .map(|b| b.0.len())
        .sum()
}

/// Whether `secret` is the state Secret `name` or one of its `-part-<i>`.
fn is_state_part(secret: &str, name: &str) -> bool {
    secret == name
        || secret
            .strip_prefix(name)
            .and_then(|rest| rest.strip_prefix("-part-"))
            .is_some_and(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()))
}

#[async_trait]
impl StateAdmin for KubeStateAdmin {
    async fn delete_state(
        &self,
        object: &ObjectKey,
        workspace: &str,
        suffix: &str,
    ) -> Result<(), PortError> {
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), &object.namespace);
        let name = state_secret_name(workspace, suffix);
        let found = secrets
            .list(&selector(workspace, suffix))
            .await
            .map_err(|e| port_error(&format!("listing the state Secrets of {object}"), e))?;
        let mut names: Vec<String> = found
            .items
            .iter()
            .filter_map(|s| s.metadata.name.clone())
            .filter(|n| is_state_part(n, &name))
            .collect();
        if !names.contains(&name) {
            names.push(name);
        }
        for n in names {
            match secrets.delete(&n, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) => {
                    return Err(port_error(
                        &format!("deleting state Secret {}/{n}", object.namespace),
                        e,
                    ));
                }
            }
        }
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), &object.namespace);
        let lease = state_lease_name(workspace, suffix);
        match leases.delete(&lease, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(port_error(
                &format!("deleting Lease {}/{lease}", object.namespace),
                e,
            )),
        }
    }

    async fn release_lock(
        &self,
        object: &ObjectKey,
        workspace: &str,
        suffix: &str,
        lock_id: &str,
    ) -> Result<bool, PortError> {
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), &object.namespace);
        let name = state_lease_name(workspace, suffix);
        let what = format!("Lease {}/{name}", object.namespace);
        let Some(mut lease) = leases
            .get_opt(&name)
            .await
            .map_err(|e| port_error(&format!("reading {what}"), e))?
        else {
            return Ok(false);
        };
        let holder = lease
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.as_deref());
        if holder != Some(lock_id) {
            return Ok(false);
        }
        // What the backend's own unlock writes: no holder, no lock info.
        if let Some(spec) = lease.spec.as_mut() {
            spec.holder_identity = None;
        }
        if let Some(annotations) = lease.metadata.annotations.as_mut() {
            annotations.remove(LOCK_INFO_ANNOTATION);
        }
        // The resourceVersion read is kept: a lock taken since is never freed (409 instead).
        leases
            .replace(&name, &PostParams::default(), &lease)
            .await
            .map_err(|e| port_error(&format!("releasing {what}"), e))?;
        Ok(true)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn parts_of_a_state_are_recognised_and_nothing_else() {
        let name = "tfstate-default-web";
        assert!(is_state_part(name, name));
        assert!(is_state_part("tfstate-default-web-part-1", name));
        assert!(!is_state_part("tfstate-default-web-part-", name));
        assert!(!is_state_part("tfstate-default-web-2", name));
        assert!(!is_state_part("tfstate-default-webapp", name));
    }
}
