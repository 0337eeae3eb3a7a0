//! Source credentials in the cluster, read with the controller's identity (they never reach the
//! runner): the Secret a `sourceRef.secretRef` names, and, when enabled
//! (`--enable-argocd-credentials`), Argo CD's repository Secrets in Argo CD's namespace,
//! matched to the URL as Argo CD matches them (a `repository` Secret with that URL, else the
//! `repo-creds` template with the longest matching prefix).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams};
use tfops_core::ports::PortError;
use tfops_core::source::refs::{RepoSecret, matching_credentials};

use crate::error::port_error;

/// The label Argo CD marks its repository Secrets with.
pub const ARGOCD_SECRET_TYPE: &str = "argocd.argoproj.io/secret-type";

/// Reads source credentials.
#[derive(Clone)]
pub struct KubeCredentials {
    client: kube::Client,
    /// Argo CD's namespace, when its credentials may be used.
    argocd_namespace: Option<String>,
}

impl std::fmt::Debug for KubeCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeCredentials")
            .field("argocd_namespace", &self.argocd_namespace)
            .finish_non_exhaustive()
    }
}

fn data(secret: Secret) -> BTreeMap<String, Vec<u8>> {
    secret
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect()
}

impl KubeCredentials {
    /// Credentials read with `client`; Argo CD's from `argocd_namespace` when given.
    pub fn new(client: kube::Client, argocd_namespace: Option<String>) -> Self {
        Self {
            client,
            argocd_namespace,
        }
    }

    /// The data of Secret `namespace/name`, `None` when it does not exist.
    ///
    /// # Errors
    /// The API's error (a refused read is [`PortError::AccessDenied`]).
    pub async fn secret(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<BTreeMap<String, Vec<u8>>>, PortError> {
        Api::<Secret>::namespaced(self.client.clone(), namespace)
            .get_opt(name)
            .await
            .map(|s| s.map(data))
            .map_err(|e| port_error(&format!("reading Secret {namespace}/{name}"), e))
    }

    /// Argo CD's credentials for `url`, when enabled and some match.
    ///
    /// # Errors
    /// The API's error.
    pub async fn argocd(&self, url: &str) -> Result<Option<BTreeMap<String, Vec<u8>>>, PortError> {
        let Some(namespace) = &self.argocd_namespace else {
            return Ok(None);
        };
        let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        let selector = format!("{ARGOCD_SECRET_TYPE} in (repository,repo-creds)");
        let found = api
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(|e| {
                port_error(
                    &format!("listing Argo CD's repository Secrets in {namespace}"),
                    e,
                )
            })?;
        let mut candidates = Vec::new();
        let mut by_name = BTreeMap::new();
        for s in found.items {
            let template = s
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(ARGOCD_SECRET_TYPE))
                .is_some_and(|t| t == "repo-creds");
            let name = s.metadata.name.clone().unwrap_or_default();
            let d = data(s);
            let Some(secret_url) = d.get("url").and_then(|u| String::from_utf8(u.clone()).ok())
            else {
                continue;
            };
            candidates.push(RepoSecret {
                template,
                url: secret_url,
                name: name.clone(),
            });
            by_name.insert(name, d);
        }
        Ok(matching_credentials(url, &candidates).and_then(|m| by_name.remove(&m.name)))
    }
}
