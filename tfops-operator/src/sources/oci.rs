//! OCI sources with oci-client: a tag (or a semver range over tags) resolves to a manifest
//! digest; the artifact's single tar+gzip layer is pulled, its digest checked, and extracted
//! with the core's safe extraction. [`OciSource::push`] publishes a directory the same way, so
//! users can produce what tfops consumes.

use std::path::Path;

use oci_client::client::{ClientConfig, ClientProtocol, Config, ImageLayer};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use tfops_core::api::SourceRevisionRef;
use tfops_core::source::refs::{semver_range, tag_version};
use tfops_core::source::{ExtractLimits, build_archive, extract};

/// Flux's layer media type for a tar+gzip of a tree.
pub const FLUX_LAYER: &str = "application/vnd.cncf.flux.content.v1.tar+gzip";
/// The generic OCI tar+gzip layer media type.
pub const OCI_LAYER: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
/// Flux's config media type.
pub const FLUX_CONFIG: &str = "application/vnd.cncf.flux.config.v1+json";

/// Registry credentials (from a `kubernetes.io/dockerconfigjson` Secret).
#[derive(Clone, Default)]
pub struct OciCredentials {
    /// Username.
    pub username: Option<String>,
    /// Password or token.
    pub password: Option<String>,
}

impl std::fmt::Debug for OciCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OciCredentials")
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl OciCredentials {
    fn auth(&self) -> RegistryAuth {
        match (&self.username, &self.password) {
            (Some(u), Some(p)) => RegistryAuth::Basic(u.clone(), p.clone()),
            _ => RegistryAuth::Anonymous,
        }
    }
}

/// Why an OCI operation failed; messages name the reference, never a credential.
#[derive(Debug, thiserror::Error)]
pub enum OciError {
    /// The URL is not `oci://registry/repository`.
    #[error("{0:?} is not an oci://registry/repository reference")]
    BadUrl(String),
    /// The registry refused the credentials.
    #[error("access to {reference} was denied: {message}")]
    AccessDenied {
        /// The reference.
        reference: String,
        /// The registry's answer.
        message: String,
    },
    /// No tag matches, or the tag does not exist.
    #[error("{reference}: {message}")]
    NotFound {
        /// The reference.
        reference: String,
        /// What is missing.
        message: String,
    },
    /// A layer's content does not match its digest.
    #[error("{reference}: layer digest mismatch (expected {expected}, got {actual})")]
    DigestMismatch {
        /// The reference.
        reference: String,
        /// The manifest's digest.
        expected: String,
        /// The content's digest.
        actual: String,
    },
    /// The artifact is not a single tar+gzip layer.
    #[error(
        "{reference}: expected one tar+gzip layer ({FLUX_LAYER} or {OCI_LAYER}), found {found}"
    )]
    NotASource {
        /// The reference.
        reference: String,
        /// What was found.
        found: String,
    },
    /// The layer failed safe extraction.
    #[error("{reference}: the layer was refused")]
    Extract {
        /// The reference.
        reference: String,
        /// Why.
        #[source]
        source: tfops_core::source::ExtractError,
    },
    /// Talking to the registry failed otherwise.
    #[error("{reference}: {message}")]
    Registry {
        /// The reference.
        reference: String,
        /// The error.
        message: String,
    },
}

/// An OCI client for one source (plain HTTP only when the source is marked insecure).
pub struct OciSource {
    client: Client,
}

fn repository(url: &str) -> Result<&str, OciError> {
    url.strip_prefix("oci://")
        .filter(|r| r.contains('/'))
        .ok_or_else(|| OciError::BadUrl(url.to_string()))
}

fn reference(repo: &str, suffix: &str) -> Result<Reference, OciError> {
    format!("{repo}{suffix}")
        .parse()
        .map_err(|e: oci_client::ParseError| OciError::BadUrl(format!("{repo}{suffix}: {e}")))
}

/// The [`OciError`] for a registry failure, from the error's structure: its text holds the
/// registry's URL, whose port can read like a status code (`127.0.0.1:40101` holds "401").
fn registry_error(reference: &str, e: &oci_client::errors::OciDistributionError) -> OciError {
    use oci_client::errors::{OciDistributionError as E, OciErrorCode as C};
    enum Kind {
        Denied,
        NotFound,
        Digest,
        Other,
    }
    let by_status = |status: Option<u16>| match status {
        Some(401 | 403) => Kind::Denied,
        Some(404) => Kind::NotFound,
        _ => Kind::Other,
    };
    let kind = match e {
        E::AuthenticationFailure(_) | E::UnauthorizedError { .. } => Kind::Denied,
        E::ImageManifestNotFoundError(_) => Kind::NotFound,
        E::DigestError(_) => Kind::Digest,
        E::ServerError { code, .. } => by_status(Some(*code)),
        E::RequestError(r) => by_status(r.status().map(|s| s.as_u16())),
        E::RegistryError { envelope, .. } => {
            let has = |codes: &[C]| envelope.errors.iter().any(|x| codes.contains(&x.code));
            if has(&[C::Unauthorized, C::Denied]) {
                Kind::Denied
            } else if has(&[
                C::ManifestUnknown,
                C::BlobUnknown,
                C::NameUnknown,
                C::NotFound,
                C::ManifestBlobUnknown,
            ]) {
                Kind::NotFound
            } else if has(&[C::DigestInvalid]) {
                Kind::Digest
            } else {
                Kind::Other
            }
        }
        _ => Kind::Other,
    };
    let (reference, message) = (reference.to_string(), e.to_string());
    match kind {
        Kind::Denied => OciError::AccessDenied { reference, message },
        Kind::NotFound => OciError::NotFound { reference, message },
        Kind::Digest => OciError::DigestMismatch {
            reference,
            expected: "the manifest's".into(),
            actual: message,
        },
        Kind::Other => OciError::Registry { reference, message },
    }
}

impl OciSource {
    /// A client; `insecure` allows plain HTTP (and only then).
    pub fn new(insecure: bool) -> Self {
        Self::with_ca(insecure, None)
    }

    /// A client that also trusts the CA certificates of `ca_pem` (a private registry's CA).
    pub fn with_ca(insecure: bool, ca_pem: Option<&str>) -> Self {
        // reqwest is built without a default TLS provider: use ring, like the rest of tfops.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let extra_root_certificates = ca_pem
            .map(|pem| {
                vec![oci_client::client::Certificate {
                    encoding: oci_client::client::CertificateEncoding::Pem,
                    data: pem.as_bytes().to_vec(),
                }]
            })
            .unwrap_or_default();
        let config = ClientConfig {
            protocol: if insecure {
                ClientProtocol::Http
            } else {
                ClientProtocol::Https
            },
            extra_root_certificates,
            ..ClientConfig::default()
        };
        Self {
            client: Client::new(config),
        }
    }

    /// Resolves a digest, tag (default `latest`) or semver range to `(name, digest)`.
    ///
    /// # Errors
    /// An [`OciError`].
    pub async fn resolve(
        &self,
        url: &str,
        r: &SourceRevisionRef,
        creds: &OciCredentials,
    ) -> Result<(String, String), OciError> {
        let repo = repository(url)?;
        if let Some(digest) = &r.digest {
            return Ok((digest.clone(), digest.clone()));
        }
        let auth = creds.auth();
        let tag = match &r.semver {
            Some(range) => {
                let req = semver_range(range).map_err(|e| OciError::NotFound {
                    reference: url.into(),
                    message: e.to_string(),
                })?;
                let tags = self
                    .client
                    .list_tags(&reference(repo, ":latest")?, &auth, None, None)
                    .await
                    .map_err(|e| registry_error(url, &e))?
                    .tags;
                tags.iter()
                    .filter_map(|t| {
                        tag_version(t)
                            .filter(|v| req.matches(v))
                            .map(|v| (v, t.clone()))
                    })
                    .max_by(|a, b| a.0.cmp(&b.0))
                    .map(|(_, t)| t)
                    .ok_or_else(|| OciError::NotFound {
                        reference: url.into(),
                        message: format!(
                            "no tag matches the semver range {range:?} (among {} tags)",
                            tags.len()
                        ),
                    })?
            }
            None => r.tag.clone().unwrap_or_else(|| "latest".into()),
        };
        let at = format!("{url}:{tag}");
        let digest = self
            .client
            .fetch_manifest_digest(&reference(repo, &format!(":{tag}"))?, &auth)
            .await
            .map_err(|e| registry_error(&at, &e))?;
        Ok((tag, digest))
    }

    /// The digest of the layer holding the tree of the artifact at `digest` (its first).
    ///
    /// # Errors
    /// An [`OciError`].
    pub async fn layer_digest(
        &self,
        url: &str,
        digest: &str,
        creds: &OciCredentials,
    ) -> Result<String, OciError> {
        let repo = repository(url)?;
        let at = format!("{url}@{digest}");
        let (manifest, _) = self
            .client
            .pull_image_manifest(&reference(repo, &format!("@{digest}"))?, &creds.auth())
            .await
            .map_err(|e| registry_error(&at, &e))?;
        manifest
            .layers
            .first()
            .map(|l| l.digest.clone())
            .ok_or_else(|| OciError::NotASource {
                reference: at,
                found: "no layer".into(),
            })
    }

    /// Pulls the artifact at `digest`, checks its layer's digest, and extracts it into `dest`.
    ///
    /// # Errors
    /// An [`OciError`].
    pub async fn pull(
        &self,
        url: &str,
        digest: &str,
        creds: &OciCredentials,
        dest: &Path,
    ) -> Result<(), OciError> {
        let repo = repository(url)?;
        let at = format!("{url}@{digest}");
        let image = self
            .client
            .pull(
                &reference(repo, &format!("@{digest}"))?,
                &creds.auth(),
                vec![FLUX_LAYER, OCI_LAYER],
            )
            .await
            .map_err(|e| registry_error(&at, &e))?;
        let expected = image
            .manifest
            .as_ref()
            .and_then(|m| m.layers.first())
            .map(|l| l.digest.clone())
            .unwrap_or_default();
        let [layer] = image.layers.as_slice() else {
            return Err(OciError::NotASource {
                reference: at,
                found: format!("{} layers", image.layers.len()),
            });
        };
        let actual = format!("sha256:{}", tfops_core::digest::sha256_hex(&layer.data));
        if actual != expected {
            return Err(OciError::DigestMismatch {
                reference: at,
                expected,
                actual,
            });
        }
        extract(&layer.data[..], dest, ExtractLimits::default()).map_err(|source| {
            OciError::Extract {
                reference: at,
                source,
            }
        })?;
        Ok(())
    }

    /// Publishes the tree at `dir` (filtered by `ignore`) as `url:tag`; returns the digest.
    ///
    /// # Errors
    /// An [`OciError`].
    pub async fn push(
        &self,
        dir: &Path,
        url: &str,
        tag: &str,
        ignore: Option<&str>,
        creds: &OciCredentials,
    ) -> Result<String, OciError> {
        let mut data = Vec::new();
        build_archive(dir, ignore, &mut data).map_err(|e| OciError::Registry {
            reference: format!("{url}:{tag}"),
            message: format!("archiving {}: {e}", dir.display()),
        })?;
        self.push_archive(data, url, tag, creds).await
    }

    /// Pushes `data`, a gzipped tar archive made by any packer, as a Flux-style artifact
    /// tagged `tag`; returns its manifest digest.
    ///
    /// # Errors
    /// [`OciError`] from the registry.
    pub async fn push_archive(
        &self,
        data: Vec<u8>,
        url: &str,
        tag: &str,
        creds: &OciCredentials,
    ) -> Result<String, OciError> {
        let repo = repository(url)?;
        let at = format!("{url}:{tag}");
        let layer = ImageLayer::new(data, FLUX_LAYER.to_string(), None);
        let config = Config::new(b"{}".to_vec(), FLUX_CONFIG.to_string(), None);
        let image = reference(repo, &format!(":{tag}"))?;
        let auth = creds.auth();
        self.client
            .push(&image, &[layer], config, &auth, None)
            .await
            .map_err(|e| registry_error(&at, &e))?;
        self.client
            .fetch_manifest_digest(&image, &auth)
            .await
            .map_err(|e| registry_error(&at, &e))
    }
}

/// The credentials a `kubernetes.io/dockerconfigjson` Secret's `.dockerconfigjson` holds for
/// `registry` (`host[:port]`): `auths.<registry>.auth` (base64 `user:password`), or its
/// `username` and `password`.
pub fn credentials_from_dockerconfigjson(json: &str, registry: &str) -> Option<OciCredentials> {
    use base64::Engine;
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    let auths = v.get("auths")?.as_object()?;
    let entry = auths.iter().find_map(|(k, e)| {
        let host = k
            .trim_start_matches("https://")
            .trim_start_matches("http://")
            .trim_end_matches('/');
        (host == registry || host.split('/').next() == Some(registry)).then_some(e)
    })?;
    if let Some(auth) = entry.get("auth").and_then(|a| a.as_str()) {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(auth)
            .ok()?;
        let text = String::from_utf8(decoded).ok()?;
        let (user, password) = text.split_once(':')?;
        return Some(OciCredentials {
            username: Some(user.to_string()),
            password: Some(password.to_string()),
        });
    }
    Some(OciCredentials {
        username: entry.get("username")?.as_str().map(str::to_string),
        password: entry.get("password")?.as_str().map(str::to_string),
    })
}

/// The `host[:port]` of an `oci://` URL.
pub fn registry_of(url: &str) -> Option<&str> {
    repository(url).ok()?.split('/').next()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_config_credentials_by_registry() {
        let json = r#"{"auths":{"https://registry.example:5000":{"auth":"YWxpY2U6d29uZGVybGFuZA=="},"other.example":{"username":"bob","password":"pw"}}}"#;
        let c =
            credentials_from_dockerconfigjson(json, "registry.example:5000").unwrap_or_default();
        assert_eq!(
            (c.username.as_deref(), c.password.as_deref()),
            (Some("alice"), Some("wonderland"))
        );
        let c = credentials_from_dockerconfigjson(json, "other.example").unwrap_or_default();
        assert_eq!(c.username.as_deref(), Some("bob"));
        assert!(credentials_from_dockerconfigjson(json, "nowhere.example").is_none());
        assert_eq!(
            registry_of("oci://registry.example:5000/team/infra"),
            Some("registry.example:5000")
        );
    }
}
