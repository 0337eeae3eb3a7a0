//! The controller's certificate authority, kept in a Secret of the controller's own namespace
//! (the CA key goes nowhere else), and the per-namespace runner TLS Secret
//! (`terraform-runner.tls`: server certificate, its key, the CAs to trust; no CA key).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, Patch, PostParams};
use tfops_core::naming::RUNNER_TLS_SECRET;
use tfops_core::ports::PortError;
use tfops_runner::client::ClientTls;
use tfops_runner::tls::{Pki, SavedPki, needs_renewal, runner_server_name};
use tokio::sync::Mutex;

use crate::error::{is_conflict, is_not_found, port_error};
use crate::meta::{MANAGED_BY, apply_params};

/// The key of the CA Secret holding the saved PKI (JSON).
const PKI_KEY: &str = "pki.json";
/// When the runner Secret's server certificate expires (Unix seconds).
pub const ANNOTATION_NOT_AFTER: &str = "infra.argocd.io/tls-not-after";

/// How long certificates live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Validity {
    /// A CA (`--ca-validity-duration`).
    pub ca: Duration,
    /// Server and client certificates.
    pub leaf: Duration,
    /// How long before expiry they are renewed.
    pub look_ahead: Duration,
}

impl Default for Validity {
    fn default() -> Self {
        const DAY: Duration = Duration::from_secs(86_400);
        Self {
            ca: 90 * DAY,
            leaf: 30 * DAY,
            look_ahead: 7 * DAY,
        }
    }
}

struct Inner {
    pki: Pki,
    /// The controller's client certificate and when it must be renewed.
    client: Option<(tfops_runner::tls::Pem, SystemTime)>,
}

/// The CA, persisted in `namespace/name`, issuing runner and controller certificates.
pub struct ControllerPki {
    client: kube::Client,
    namespace: String,
    name: String,
    validity: Validity,
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for ControllerPki {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControllerPki")
            .field("secret", &format_args!("{}/{}", self.namespace, self.name))
            .finish_non_exhaustive()
    }
}

fn unix(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn tls_error(e: tfops_runner::tls::TlsError) -> PortError {
    PortError::Invalid(format!("certificates: {e}"))
}

/// A short digest of a certificate: what Pods started with it are annotated with.
pub fn tls_version(tls_crt: &[u8]) -> String {
    tfops_core::digest::sha256_hex(tls_crt)[..16].to_string()
}

impl ControllerPki {
    /// Loads the CA from `namespace/name`, creating the Secret with a new CA when there is
    /// none (two controllers racing: the loser reads the winner's).
    ///
    /// # Errors
    /// The API's error, or a damaged saved CA.
    pub async fn load_or_create(
        client: kube::Client,
        namespace: &str,
        name: &str,
        validity: Validity,
    ) -> Result<Self, PortError> {
        let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
        let doing = format!("reading the CA Secret {namespace}/{name}");
        let pki = loop {
            match api.get(name).await {
                Ok(secret) => {
                    let saved: SavedPki = secret
                        .data
                        .as_ref()
                        .and_then(|d| d.get(PKI_KEY))
                        .and_then(|b| serde_json::from_slice(&b.0).ok())
                        .ok_or_else(|| {
                            PortError::Invalid(format!(
                                "the CA Secret {namespace}/{name} has no valid {PKI_KEY}"
                            ))
                        })?;
                    break Pki::load(&saved, validity.ca, validity.leaf, validity.look_ahead)
                        .map_err(tls_error)?;
                }
                Err(e) if is_not_found(&e) => {
                    let pki = Pki::new(
                        SystemTime::now(),
                        validity.ca,
                        validity.leaf,
                        validity.look_ahead,
                    )
                    .map_err(tls_error)?;
                    match api
                        .create(&PostParams::default(), &ca_secret(namespace, name, &pki)?)
                        .await
                    {
                        Ok(_) => break pki,
                        Err(e) if is_conflict(&e) => continue,
                        Err(e) => return Err(port_error(&doing, e)),
                    }
                }
                Err(e) => return Err(port_error(&doing, e)),
            }
        };
        Ok(Self {
            client,
            namespace: namespace.to_string(),
            name: name.to_string(),
            validity,
            inner: Mutex::new(Inner { pki, client: None }),
        })
    }

    /// Rotates the CA when it is due and saves it. Returns whether it rotated.
    ///
    /// # Errors
    /// The API's error; certificate generation.
    pub async fn rotate_if_due(&self) -> Result<bool, PortError> {
        let mut inner = self.inner.lock().await;
        if !inner
            .pki
            .rotate_if_due(SystemTime::now())
            .map_err(tls_error)?
        {
            return Ok(false);
        }
        inner.client = None;
        let secret = ca_secret(&self.namespace, &self.name, &inner.pki)?;
        Api::<Secret>::namespaced(self.client.clone(), &self.namespace)
            .replace(&self.name, &PostParams::default(), &secret)
            .await
            .map_err(|e| port_error("saving the rotated CA", e))?;
        Ok(true)
    }

    /// The client TLS settings for dialling the runners of `namespace`.
    ///
    /// # Errors
    /// Certificate generation.
    pub async fn client_tls(&self, namespace: &str) -> Result<ClientTls, PortError> {
        let mut inner = self.inner.lock().await;
        let now = SystemTime::now();
        let fresh = inner
            .client
            .as_ref()
            .is_some_and(|(_, renew_at)| now < *renew_at);
        if !fresh {
            let pem = inner.pki.client(now).map_err(tls_error)?;
            let renew_at = now + self.validity.leaf.saturating_sub(self.validity.look_ahead);
            inner.client = Some((pem, renew_at));
        }
        let bundle = inner.pki.trust_bundle();
        let (pem, _) = inner
            .client
            .as_ref()
            .ok_or_else(|| PortError::Invalid("no client certificate".into()))?;
        Ok(ClientTls {
            ca_bundle: bundle,
            cert: pem.cert.clone(),
            key: pem.key.clone(),
            server_name: runner_server_name(namespace),
        })
    }

    /// Makes sure `namespace` has a current `terraform-runner.tls` Secret (issuing one when it
    /// is missing, near expiry or trusts other CAs than the controller's) and returns its
    /// version ([`tls_version`]).
    ///
    /// # Errors
    /// The API's error; certificate generation.
    pub async fn ensure_runner_secret(&self, namespace: &str) -> Result<String, PortError> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        let doing = format!("keeping the runner TLS Secret {namespace}/{RUNNER_TLS_SECRET}");
        let inner = self.inner.lock().await;
        let now = SystemTime::now();
        let bundle = inner.pki.trust_bundle();
        match api.get_opt(RUNNER_TLS_SECRET).await {
            Ok(Some(existing)) => {
                let data = existing.data.clone().unwrap_or_default();
                let not_after = existing
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(ANNOTATION_NOT_AFTER))
                    .and_then(|v| v.parse::<u64>().ok())
                    .map(|s| UNIX_EPOCH + Duration::from_secs(s));
                let trusts = data.get("ca.crt").map(|b| b.0.as_slice()) == Some(bundle.as_bytes());
                if let (true, Some(not_after), Some(crt)) = (trusts, not_after, data.get("tls.crt"))
                    && !needs_renewal(not_after, now, self.validity.look_ahead)
                {
                    return Ok(tls_version(&crt.0));
                }
            }
            Ok(None) => {}
            Err(e) => return Err(port_error(&doing, e)),
        }
        let issued = inner.pki.runner_secret(namespace, now).map_err(tls_error)?;
        let not_after = unix(now + self.validity.leaf);
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(RUNNER_TLS_SECRET.into()),
                namespace: Some(namespace.into()),
                labels: Some(BTreeMap::from([(MANAGED_BY.into(), "tfops".into())])),
                annotations: Some(BTreeMap::from([(
                    ANNOTATION_NOT_AFTER.into(),
                    not_after.to_string(),
                )])),
                ..ObjectMeta::default()
            },
            type_: Some("kubernetes.io/tls".into()),
            data: Some(BTreeMap::from([
                ("ca.crt".into(), ByteString(issued.ca_crt.into_bytes())),
                (
                    "tls.crt".into(),
                    ByteString(issued.tls_crt.clone().into_bytes()),
                ),
                ("tls.key".into(), ByteString(issued.tls_key.into_bytes())),
            ])),
            ..Secret::default()
        };
        api.patch(RUNNER_TLS_SECRET, &apply_params(), &Patch::Apply(&secret))
            .await
            .map_err(|e| port_error(&doing, e))?;
        Ok(tls_version(issued.tls_crt.as_bytes()))
    }
}

fn ca_secret(namespace: &str, name: &str, pki: &Pki) -> Result<Secret, PortError> {
    let saved = serde_json::to_vec(&pki.save())
        .map_err(|e| PortError::Invalid(format!("saving the CA: {e}")))?;
    Ok(Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            labels: Some(BTreeMap::from([(MANAGED_BY.into(), "tfops".into())])),
            ..ObjectMeta::default()
        },
        type_: Some("Opaque".into()),
        data: Some(BTreeMap::from([(PKI_KEY.into(), ByteString(saved))])),
        ..Secret::default()
    })
}
