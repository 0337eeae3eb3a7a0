//! The source port over Git and OCI, wherever credentials come from: local mode reads them
//! from its manifests, the controller from the cluster (`tfops-kube`), each through a
//! [`CredentialSource`]. Credentials stay here; the runner receives only the archive.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tfops_core::api::{ObjectKey, SourceKind, SourceRef};
use tfops_core::ports::{Artifact, PortError, Revision, SourcePort};
use tfops_core::source::SourceChanges;
use tfops_core::source::refs::ResolvedRef;

use super::archives::{ArchiveKey, Archives};
use super::git::{GitCredentials, GitError, GitSource};
use super::oci::{self, OciCredentials, OciError, OciSource};

/// Where the data of credential Secrets comes from.
#[async_trait]
pub trait CredentialSource: Send + Sync {
    /// The data of Secret `namespace/name`; `None` when there is none.
    async fn secret(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<BTreeMap<String, Vec<u8>>>, PortError>;

    /// Credentials configured elsewhere for `url` (Argo CD's repository Secrets), used when
    /// the source names no Secret of its own. None by default.
    async fn for_url(&self, url: &str) -> Result<Option<BTreeMap<String, Vec<u8>>>, PortError> {
        let _ = url;
        Ok(None)
    }
}

/// Git and OCI sources with credentials from a [`CredentialSource`].
pub struct RemoteSources {
    git: Arc<GitSource>,
    credentials: Arc<dyn CredentialSource>,
    /// Refs resolved in this process, by (URL, sha), for the fetch that follows.
    resolved: Mutex<BTreeMap<(String, String), ResolvedRef>>,
    /// The archives made lately: objects on one commit share one.
    archives: Archives,
}

impl std::fmt::Debug for RemoteSources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteSources").finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Only a cache: a panic elsewhere leaves it usable.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The port error of a Git failure.
pub fn git_error(e: GitError) -> PortError {
    match e {
        GitError::AccessDenied { .. } => PortError::AccessDenied(e.to_string()),
        GitError::Ref { .. }
        | GitError::NoSuchCommit { .. }
        | GitError::NoSuchRepository { .. } => PortError::NotFound(e.to_string()),
        GitError::Unreachable { .. } | GitError::HostKey { .. } | GitError::Local(_) => {
            PortError::Unavailable(e.to_string())
        }
    }
}

/// The port error of an OCI failure.
pub fn oci_error(e: OciError) -> PortError {
    match e {
        OciError::AccessDenied { .. } => PortError::AccessDenied(e.to_string()),
        OciError::NotFound { .. } => PortError::NotFound(e.to_string()),
        OciError::BadUrl(_)
        | OciError::NotASource { .. }
        | OciError::DigestMismatch { .. }
        | OciError::Extract { .. } => PortError::Invalid(e.to_string()),
        OciError::Registry { .. } => PortError::Unavailable(e.to_string()),
    }
}

/// The tree in `dir`, filtered by `ignore`, as the archive the runner receives; `what` names
/// the source in an error.
pub fn archive(dir: &Path, ignore: Option<&str>, what: &str) -> Result<Artifact, PortError> {
    let mut data = Vec::new();
    let summary = tfops_core::source::build_archive(dir, ignore, &mut data)
        .map_err(|e| PortError::Invalid(format!("archiving {what}: {e}")))?;
    Ok(Artifact {
        sha256: summary.sha256,
        data: Arc::new(data),
    })
}

/// Whether `source` is fetched with Git (a `file://` Git URL is a local directory).
pub fn is_git(source: &SourceRef) -> bool {
    source.kind == SourceKind::GitRepository && !source.url.starts_with("file://")
}

/// Git credentials from a Secret's data: Argo CD's key names, then Flux's.
pub fn git_credentials(data: Option<&BTreeMap<String, Vec<u8>>>) -> GitCredentials {
    // Credentials are text; a key that is not UTF-8 counts as absent.
    let get = |k: &str| {
        data.and_then(|d| d.get(k))
            .and_then(|v| String::from_utf8(v.clone()).ok())
    };
    GitCredentials {
        username: get("username"),
        password: get("password").or_else(|| get("token")),
        ssh_private_key: get("sshPrivateKey").or_else(|| get("identity")),
        ssh_passphrase: get("passphrase"),
        known_hosts: get("known_hosts"),
        allow_unknown_host_key: get("allowUnknownHostKey").is_some_and(|v| v == "true"),
        ca_bundle: get("ca.crt").or_else(|| get("caFile")),
    }
}

/// OCI credentials for `url` from a Secret's data: its `.dockerconfigjson`, else Argo CD's
/// `username`/`password`.
pub fn oci_credentials(data: Option<&BTreeMap<String, Vec<u8>>>, url: &str) -> OciCredentials {
    let registry = oci::registry_of(url).unwrap_or_default();
    let text = |k: &str| {
        data.and_then(|d| d.get(k))
            .and_then(|v| String::from_utf8(v.clone()).ok())
    };
    if let Some(c) =
        text(".dockerconfigjson").and_then(|j| oci::credentials_from_dockerconfigjson(&j, registry))
    {
        return c;
    }
    match (text("username"), text("password")) {
        (Some(username), Some(password)) => OciCredentials {
            username: Some(username),
            password: Some(password),
        },
        _ => OciCredentials::default(),
    }
}

impl RemoteSources {
    /// Sources caching Git repositories under `cache`.
    pub fn new(cache: &Path, credentials: Arc<dyn CredentialSource>) -> Self {
        Self {
            git: Arc::new(GitSource::new(cache)),
            credentials,
            resolved: Mutex::new(BTreeMap::new()),
            archives: Archives::default(),
        }
    }

    /// The credential data for `source` of `object`: its own Secret (which must exist), else
    /// what is configured for its URL.
    async fn data(
        &self,
        object: &ObjectKey,
        source: &SourceRef,
    ) -> Result<Option<BTreeMap<String, Vec<u8>>>, PortError> {
        match &source.secret_ref {
            Some(r) => match self.credentials.secret(&object.namespace, &r.name).await? {
                Some(d) => Ok(Some(d)),
                None => Err(PortError::NotFound(format!(
                    "Secret {}/{} (sourceRef.secretRef) does not exist",
                    object.namespace, r.name
                ))),
            },
            None => self.credentials.for_url(&source.url).await,
        }
    }

    fn oci_client(source: &SourceRef, data: Option<&BTreeMap<String, Vec<u8>>>) -> OciSource {
        let ca = data
            .and_then(|d| d.get("ca.crt"))
            .and_then(|v| String::from_utf8(v.clone()).ok());
        OciSource::with_ca(source.insecure, ca.as_deref())
    }
}

fn not_remote(source: &SourceRef) -> PortError {
    PortError::Invalid(format!(
        "sourceRef {} of kind {:?} is not a Git or OCI source (Local sources exist only in local mode)",
        source.url, source.kind
    ))
}

#[async_trait]
impl SourcePort for RemoteSources {
    async fn resolve(&self, object: &ObjectKey, source: &SourceRef) -> Result<Revision, PortError> {
        let data = self.data(object, source).await?;
        if source.kind == SourceKind::OciRepository {
            let client = Self::oci_client(source, data.as_ref());
            let (tag, digest) = client
                .resolve(
                    &source.url,
                    &source.reference,
                    &oci_credentials(data.as_ref(), &source.url),
                )
                .await
                .map_err(oci_error)?;
            return Ok(Revision {
                reference: tag,
                digest,
            });
        }
        if !is_git(source) {
            return Err(not_remote(source));
        }
        let (git, url, reference, creds) = (
            self.git.clone(),
            source.url.clone(),
            source.reference.clone(),
            git_credentials(data.as_ref()),
        );
        let resolved = tokio::task::spawn_blocking(move || git.resolve(&url, &reference, &creds))
            .await
            .map_err(|e| PortError::Unavailable(e.to_string()))?
            .map_err(git_error)?;
        let revision = Revision {
            reference: resolved.name.clone(),
            digest: format!("sha1:{}", resolved.sha),
        };
        lock(&self.resolved).insert((source.url.clone(), resolved.sha.clone()), resolved);
        Ok(revision)
    }

    async fn fetch(
        &self,
        object: &ObjectKey,
        source: &SourceRef,
        revision: &Revision,
        ignore: Option<&str>,
    ) -> Result<Artifact, PortError> {
        let data = self.data(object, source).await?;
        let key = ArchiveKey {
            url: source.url.clone(),
            revision: revision.digest.clone(),
            ignore: ignore.map(str::to_string),
            submodules: source.recurse_submodules,
            credentials: source
                .secret_ref
                .as_ref()
                .map(|s| format!("{}/{}", object.namespace, s.name))
                .unwrap_or_default(),
        };
        if let Some(artifact) = self.archives.get(&key) {
            return Ok(artifact);
        }
        let artifact = self.archive_anew(source, revision, ignore, data).await?;
        self.archives.put(key, artifact.clone());
        Ok(artifact)
    }

    /// Git: the files the two commits' trees differ in. OCI: the layers' digests (an artifact
    /// holds one archive, so a different layer is a change of everything, the same layer no
    /// change at all).
    async fn changes(
        &self,
        object: &ObjectKey,
        source: &SourceRef,
        from: &Revision,
        to: &Revision,
    ) -> Result<SourceChanges, PortError> {
        let data = self.data(object, source).await?;
        if source.kind == SourceKind::OciRepository {
            let client = Self::oci_client(source, data.as_ref());
            let creds = oci_credentials(data.as_ref(), &source.url);
            let old = client.layer_digest(&source.url, &from.digest, &creds).await;
            let new = client.layer_digest(&source.url, &to.digest, &creds).await;
            return Ok(match (old, new) {
                (Ok(a), Ok(b)) if a == b => SourceChanges::Identical,
                (_, Err(e)) => return Err(oci_error(e)),
                // The earlier artifact may be gone from the registry: a change.
                _ => SourceChanges::Unknown,
            });
        }
        if !is_git(source) {
            return Ok(SourceChanges::Unknown);
        }
        let to_ref = lock(&self.resolved)
            .get(&(source.url.clone(), to.sha().to_string()))
            .cloned()
            .unwrap_or_else(|| ResolvedRef {
                name: to.reference.clone(),
                fetch: to.sha().to_string(),
                sha: to.sha().to_string(),
            });
        let (git, url, from, creds) = (
            self.git.clone(),
            source.url.clone(),
            from.sha().to_string(),
            git_credentials(data.as_ref()),
        );
        let files =
            tokio::task::spawn_blocking(move || git.changed_files(&url, &from, &to_ref, &creds))
                .await
                .map_err(|e| PortError::Unavailable(e.to_string()))?
                .map_err(git_error)?;
        Ok(SourceChanges::Files(files))
    }
}

impl RemoteSources {
    /// The tree at `revision` fetched and archived, with the credentials in `data`.
    async fn archive_anew(
        &self,
        source: &SourceRef,
        revision: &Revision,
        ignore: Option<&str>,
        data: Option<BTreeMap<String, Vec<u8>>>,
    ) -> Result<Artifact, PortError> {
        if source.kind == SourceKind::OciRepository {
            let client = Self::oci_client(source, data.as_ref());
            let tree = tempfile::tempdir().map_err(|e| PortError::Unavailable(e.to_string()))?;
            let dest = tree.path().join("src");
            client
                .pull(
                    &source.url,
                    &revision.digest,
                    &oci_credentials(data.as_ref(), &source.url),
                    &dest,
                )
                .await
                .map_err(oci_error)?;
            return archive(&dest, ignore, &source.url);
        }
        if !is_git(source) {
            return Err(not_remote(source));
        }
        let resolved = lock(&self.resolved)
            .get(&(source.url.clone(), revision.sha().to_string()))
            .cloned()
            .ok_or_else(|| {
                PortError::Unavailable(format!("revision {revision} was not resolved in this run"))
            })?;
        let (git, url, creds) = (
            self.git.clone(),
            source.url.clone(),
            git_credentials(data.as_ref()),
        );
        let submodules = source.recurse_submodules;
        let ignore = ignore.map(str::to_string);
        tokio::task::spawn_blocking(move || {
            let tree = tempfile::tempdir().map_err(|e| PortError::Unavailable(e.to_string()))?;
            let dest = tree.path().join("src");
            git.checkout_with(&url, &resolved, &creds, &dest, submodules)
                .map_err(git_error)?;
            archive(&dest, ignore.as_deref(), &url)
        })
        .await
        .map_err(|e| PortError::Unavailable(e.to_string()))?
    }
}
