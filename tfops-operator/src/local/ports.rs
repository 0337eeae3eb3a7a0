//! The core's ports on the local machine: sources from directories, inputs from Secret and
//! ConfigMap manifests, plans, outputs, status and state in the state directory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tfops_core::api::{
    FINALIZER, ObjectKey, SourceKind, SourceRef, TerraformObject, TerraformStatus, VarsFromKind,
    WriteOutputsToSecret,
};
use tfops_core::ports::{
    Artifact, Event, EventSink, EventType, HealthChecker, InputsPort, ObjectWriter, OutputValue,
    OutputsSink, PlanStore, PortError, ResolvedHealthCheck, ResolvedInputs, Revision, SourcePort,
    StateAdmin, StoredPlan,
};

use tfops_core::source::refs::ResolvedRef;

use super::output::Printer;
use super::store::{Persisted, StateDir, remove, write_atomic};
use crate::sources::git::{GitCredentials, GitError, GitSource};
use crate::sources::oci::{self, OciError, OciSource};

/// Local mode's world: the state directory, the manifests' data, and what is in flight.
pub struct LocalWorld {
    /// The state directory.
    pub dir: StateDir,
    /// Secrets and ConfigMaps from the manifests.
    pub data: BTreeMap<(String, String), BTreeMap<String, Vec<u8>>>,
    /// The directory each object's manifest came from.
    pub bases: BTreeMap<ObjectKey, PathBuf>,
    /// `TerraformPolicy` objects from the manifests.
    pub policies: Vec<tfops_core::policy::TerraformPolicy>,
    /// What is kept of each object.
    pub objects: Mutex<BTreeMap<ObjectKey, Persisted>>,
    artifacts: Mutex<BTreeMap<String, Artifact>>,
    git: Arc<GitSource>,
    resolved: Mutex<BTreeMap<(String, String), ResolvedRef>>,
    printer: Printer,
}

fn store_err(e: super::store::StoreError) -> PortError {
    PortError::Unavailable(e.to_string())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Only this process writes these maps; a panic elsewhere leaves them usable.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl LocalWorld {
    /// A world over `dir`.
    pub fn new(
        dir: StateDir,
        data: BTreeMap<(String, String), BTreeMap<String, Vec<u8>>>,
        printer: Printer,
    ) -> Self {
        Self {
            data,
            bases: BTreeMap::new(),
            policies: Vec::new(),
            objects: Mutex::new(BTreeMap::new()),
            artifacts: Mutex::new(BTreeMap::new()),
            git: Arc::new(GitSource::new(&dir.root().join("cache/git"))),
            resolved: Mutex::new(BTreeMap::new()),
            printer,
            dir,
        }
    }

    fn source_dir(&self, key: &ObjectKey, source: &SourceRef) -> Result<PathBuf, PortError> {
        let raw = source.url.strip_prefix("file://").unwrap_or(&source.url);
        let base = self
            .bases
            .get(key)
            .cloned()
            .unwrap_or_else(|| PathBuf::from("."));
        let dir = base.join(raw);
        if !dir.is_dir() {
            return Err(PortError::NotFound(format!(
                "source directory {} does not exist",
                dir.display()
            )));
        }
        Ok(dir)
    }

    fn update(&self, key: &ObjectKey, f: impl FnOnce(&mut Persisted)) -> Result<(), PortError> {
        let mut objects = lock(&self.objects);
        let p = objects.entry(key.clone()).or_default();
        f(p);
        self.dir.save(key, p).map_err(store_err)
    }
}

fn git_error(e: GitError) -> PortError {
    match e {
        GitError::AccessDenied { .. } => PortError::AccessDenied(e.to_string()),
        GitError::Ref { .. } | GitError::NoSuchCommit { .. } => PortError::NotFound(e.to_string()),
        GitError::Unreachable { .. } | GitError::HostKey { .. } | GitError::Local(_) => {
            PortError::Unavailable(e.to_string())
        }
    }
}

fn oci_error(e: OciError) -> PortError {
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
fn archive(dir: &Path, ignore: Option<&str>, what: &str) -> Result<Artifact, PortError> {
    let mut data = Vec::new();
    let summary = tfops_core::source::build_archive(dir, ignore, &mut data)
        .map_err(|e| PortError::Invalid(format!("archiving {what}: {e}")))?;
    Ok(Artifact {
        sha256: summary.sha256,
        data: Arc::new(data),
    })
}

fn is_git(source: &SourceRef) -> bool {
    source.kind == SourceKind::GitRepository && !source.url.starts_with("file://")
}

impl LocalWorld {
    fn git_credentials(&self, key: &ObjectKey, source: &SourceRef) -> GitCredentials {
        let data = source
            .secret_ref
            .as_ref()
            .and_then(|r| self.data.get(&(key.namespace.clone(), r.name.clone())));
        // Credentials are text; a key that is not UTF-8 counts as absent.
        let get = |k: &str| {
            data.and_then(|d| d.get(k))
                .and_then(|v| String::from_utf8(v.clone()).ok())
        };
        GitCredentials {
            username: get("username"),
            password: get("password").or_else(|| get("token")),
            // Argo CD's key name, then Flux's.
            ssh_private_key: get("sshPrivateKey").or_else(|| get("identity")),
            ssh_passphrase: get("passphrase"),
            known_hosts: get("known_hosts"),
            allow_unknown_host_key: get("allowUnknownHostKey").is_some_and(|v| v == "true"),
            ca_bundle: get("ca.crt").or_else(|| get("caFile")),
        }
    }

    fn oci_credentials(&self, key: &ObjectKey, source: &SourceRef) -> oci::OciCredentials {
        let data = source
            .secret_ref
            .as_ref()
            .and_then(|r| self.data.get(&(key.namespace.clone(), r.name.clone())));
        let registry = oci::registry_of(&source.url).unwrap_or_default();
        data.and_then(|d| d.get(".dockerconfigjson"))
            .and_then(|j| std::str::from_utf8(j).ok())
            .and_then(|j| oci::credentials_from_dockerconfigjson(j, registry))
            .unwrap_or_default()
    }

    /// A CA bundle for the registry: the `ca.crt` key of the source's Secret.
    fn oci_ca(&self, key: &ObjectKey, source: &SourceRef) -> Option<String> {
        let r = source.secret_ref.as_ref()?;
        self.data
            .get(&(key.namespace.clone(), r.name.clone()))?
            .get("ca.crt")
            .and_then(|v| String::from_utf8(v.clone()).ok())
    }

    async fn oci_resolve(
        &self,
        object: &ObjectKey,
        source: &SourceRef,
    ) -> Result<Revision, PortError> {
        let client = OciSource::with_ca(source.insecure, self.oci_ca(object, source).as_deref());
        let (tag, digest) = client
            .resolve(
                &source.url,
                &source.reference,
                &self.oci_credentials(object, source),
            )
            .await
            .map_err(oci_error)?;
        Ok(Revision {
            reference: tag,
            digest,
        })
    }

    async fn oci_fetch(
        &self,
        object: &ObjectKey,
        source: &SourceRef,
        revision: &Revision,
        ignore: Option<&str>,
    ) -> Result<Artifact, PortError> {
        let client = OciSource::with_ca(source.insecure, self.oci_ca(object, source).as_deref());
        let tree = tempfile::tempdir().map_err(|e| PortError::Unavailable(e.to_string()))?;
        let dest = tree.path().join("src");
        client
            .pull(
                &source.url,
                &revision.digest,
                &self.oci_credentials(object, source),
                &dest,
            )
            .await
            .map_err(oci_error)?;
        archive(&dest, ignore, &source.url)
    }

    async fn git_resolve(
        &self,
        object: &ObjectKey,
        source: &SourceRef,
    ) -> Result<Revision, PortError> {
        let (git, url, reference, creds) = (
            self.git.clone(),
            source.url.clone(),
            source.reference.clone(),
            self.git_credentials(object, source),
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

    async fn git_fetch(
        &self,
        object: &ObjectKey,
        source: &SourceRef,
        revision: &Revision,
        ignore: Option<&str>,
    ) -> Result<Artifact, PortError> {
        let resolved = lock(&self.resolved)
            .get(&(source.url.clone(), revision.sha().to_string()))
            .cloned()
            .ok_or_else(|| {
                PortError::Unavailable(format!("revision {revision} was not resolved in this run"))
            })?;
        let (git, url, creds) = (
            self.git.clone(),
            source.url.clone(),
            self.git_credentials(object, source),
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

#[async_trait]
impl SourcePort for LocalWorld {
    async fn resolve(&self, object: &ObjectKey, source: &SourceRef) -> Result<Revision, PortError> {
        if is_git(source) {
            return self.git_resolve(object, source).await;
        }
        if source.kind == SourceKind::OciRepository {
            return self.oci_resolve(object, source).await;
        }
        let dir = self.source_dir(object, source)?;
        let artifact = archive(&dir, None, &dir.display().to_string())?;
        let revision = Revision {
            reference: "local".into(),
            digest: format!("sha256:{}", artifact.sha256),
        };
        lock(&self.artifacts).insert(artifact.sha256.clone(), artifact);
        Ok(revision)
    }

    async fn fetch(
        &self,
        object: &ObjectKey,
        source: &SourceRef,
        revision: &Revision,
        ignore: Option<&str>,
    ) -> Result<Artifact, PortError> {
        if is_git(source) {
            return self.git_fetch(object, source, revision, ignore).await;
        }
        if source.kind == SourceKind::OciRepository {
            return self.oci_fetch(object, source, revision, ignore).await;
        }
        if ignore.is_none()
            && let Some(a) = lock(&self.artifacts).get(revision.sha()).cloned()
        {
            return Ok(a);
        }
        let dir = self.source_dir(object, source)?;
        archive(&dir, ignore, &dir.display().to_string())
    }
}

impl tfops_core::inputs::DataSource for LocalWorld {
    fn data(
        &self,
        _: VarsFromKind,
        namespace: &str,
        name: &str,
    ) -> Option<BTreeMap<String, Vec<u8>>> {
        self.data
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }
}

#[async_trait]
impl InputsPort for LocalWorld {
    async fn resolve(&self, object: &TerraformObject) -> Result<ResolvedInputs, PortError> {
        tfops_core::inputs::resolve(object, self)
    }
}

#[async_trait]
impl PlanStore for LocalWorld {
    async fn save(&self, object: &ObjectKey, _: &str, plan: &StoredPlan) -> Result<(), PortError> {
        let dir = self.dir.plan_dir(object);
        remove(&dir).map_err(store_err)?;
        let config = tfops_core::plan::CodecConfig::default();
        // Each save is its own upload: chunks of an earlier save are refused as stale.
        let upload_id = format!(
            "{}-{}",
            tfops_core::Timestamp::now().as_nanosecond(),
            &tfops_core::digest::sha256_hex(&plan.binary)[..12]
        );
        let (index, chunks) = tfops_core::plan::encode_reader(
            &plan.binary[..],
            config,
            &plan.id,
            &upload_id,
            Vec::new(),
        )
        .map_err(|e| PortError::Invalid(e.to_string()))?;
        for c in &chunks {
            let i = c.header.index;
            write_atomic(&dir.join(format!("chunk-{i}.bin")), &c.data, true).map_err(store_err)?;
            let header =
                serde_json::to_vec(&c.header).map_err(|e| PortError::Invalid(e.to_string()))?;
            write_atomic(&dir.join(format!("chunk-{i}.json")), &header, true).map_err(store_err)?;
        }
        write_atomic(
            &dir.join("readable.txt"),
            plan.shown.readable.as_bytes(),
            true,
        )
        .map_err(store_err)?;
        write_atomic(&dir.join("plan.json"), plan.shown.json.as_bytes(), true)
            .map_err(store_err)?;
        let kind = serde_json::json!({"id": plan.id, "isDestroy": plan.is_destroy, "isDrift": plan.is_drift});
        write_atomic(
            &dir.join("plan-kind.json"),
            kind.to_string().as_bytes(),
            true,
        )
        .map_err(store_err)?;
        // Written last: a reader that finds the index finds every chunk it names.
        let index =
            serde_json::to_vec_pretty(&index).map_err(|e| PortError::Invalid(e.to_string()))?;
        write_atomic(&dir.join("index.json"), &index, true).map_err(store_err)
    }

    async fn load(&self, object: &ObjectKey, _: &str) -> Result<Option<StoredPlan>, PortError> {
        let dir = self.dir.plan_dir(object);
        let read = |name: &str| std::fs::read(dir.join(name));
        let index = match read("index.json") {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(PortError::Unavailable(format!("reading the plan: {e}"))),
        };
        let damaged = |what: &str, e: &dyn std::fmt::Display| {
            PortError::Invalid(format!(
                "the stored plan of {object} is damaged: {what}: {e}"
            ))
        };
        let index: tfops_core::plan::PlanIndex =
            serde_json::from_slice(&index).map_err(|e| damaged("index.json", &e))?;
        let mut chunks = Vec::new();
        for i in 0..index.chunk_count() {
            let header = read(&format!("chunk-{i}.json")).map_err(|e| damaged("a chunk", &e))?;
            let header = serde_json::from_slice(&header).map_err(|e| damaged("a chunk", &e))?;
            let data = read(&format!("chunk-{i}.bin")).map_err(|e| damaged("a chunk", &e))?;
            chunks.push(tfops_core::plan::Chunk { header, data });
        }
        let config = tfops_core::plan::CodecConfig::default();
        let ordered = tfops_core::plan::OrderedChunks::new(&index, chunks)
            .map_err(|e| damaged("the chunks", &e))?;
        let binary = tfops_core::plan::decode_to_vec(index, ordered, &config)
            .map_err(|e| damaged("the plan", &e))?;
        let text = |name: &str| {
            read(name)
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .map_err(|e| damaged(name, &e))
        };
        let kind: serde_json::Value = serde_json::from_str(&text("plan-kind.json")?)
            .map_err(|e| damaged("plan-kind.json", &e))?;
        Ok(Some(StoredPlan {
            id: kind["id"].as_str().unwrap_or_default().to_string(),
            binary,
            shown: tfops_core::ports::ShownPlan {
                readable: text("readable.txt")?,
                json: text("plan.json")?,
            },
            is_destroy: kind["isDestroy"].as_bool().unwrap_or(false),
            is_drift: kind["isDrift"].as_bool().unwrap_or(false),
        }))
    }

    async fn delete(&self, object: &ObjectKey, _: &str) -> Result<(), PortError> {
        remove(&self.dir.plan_dir(object)).map_err(store_err)
    }
}

#[async_trait]
impl OutputsSink for LocalWorld {
    async fn write(
        &self,
        object: &ObjectKey,
        target: &WriteOutputsToSecret,
        outputs: &BTreeMap<String, OutputValue>,
    ) -> Result<(), PortError> {
        let selected = tfops_core::ports::select_outputs(target, outputs);
        let doc = serde_json::json!({"name": target.name, "labels": target.labels, "annotations": target.annotations, "data": selected});
        let bytes =
            serde_json::to_vec_pretty(&doc).map_err(|e| PortError::Invalid(e.to_string()))?;
        write_atomic(&self.dir.outputs_file(object), &bytes, true).map_err(store_err)
    }

    async fn delete(&self, object: &ObjectKey, _: &str) -> Result<(), PortError> {
        remove(&self.dir.outputs_file(object)).map_err(store_err)
    }
}

#[async_trait]
impl StateAdmin for LocalWorld {
    async fn delete_state(&self, object: &ObjectKey, _: &str, _: &str) -> Result<(), PortError> {
        let state = self.dir.state_file(object);
        for path in [state.clone(), state.with_extension("tfstate.backup")] {
            remove(&path).map_err(store_err)?;
        }
        Ok(())
    }
}

#[async_trait]
impl HealthChecker for LocalWorld {
    async fn check(&self, check: &ResolvedHealthCheck) -> Result<(), PortError> {
        super::health::check(check).await
    }
}

#[async_trait]
impl EventSink for LocalWorld {
    async fn emit(&self, _: &ObjectKey, event: Event) {
        if event.event_type == EventType::Warning {
            self.printer
                .warn(&format!("{}: {}", event.reason, event.message));
        }
    }
}

#[async_trait]
impl ObjectWriter for LocalWorld {
    async fn write_status(
        &self,
        object: &ObjectKey,
        status: &TerraformStatus,
    ) -> Result<(), PortError> {
        self.update(object, |p| p.status = status.clone())
    }

    async fn add_finalizer(&self, object: &ObjectKey) -> Result<(), PortError> {
        self.update(object, |p| {
            if !p.finalizers.iter().any(|f| f == FINALIZER) {
                p.finalizers.push(FINALIZER.to_string());
            }
        })
    }

    async fn remove_finalizer(&self, object: &ObjectKey) -> Result<(), PortError> {
        let gone = {
            let mut objects = lock(&self.objects);
            let p = objects.entry(object.clone()).or_default();
            p.finalizers.retain(|f| f != FINALIZER);
            p.finalizers.is_empty() && p.deletion_requested_at.is_some()
        };
        if gone {
            lock(&self.objects).remove(object);
            self.dir.forget(object).map_err(store_err)
        } else {
            let p = lock(&self.objects).get(object).cloned().unwrap_or_default();
            self.dir.save(object, &p).map_err(store_err)
        }
    }
}

#[async_trait]
impl tfops_core::ports::PolicySource for LocalWorld {
    async fn policies(
        &self,
        object: &TerraformObject,
    ) -> Result<Vec<tfops_core::policy::TerraformPolicy>, PortError> {
        Ok(self
            .policies
            .iter()
            .filter(|p| p.metadata.namespace == object.metadata.namespace)
            .cloned()
            .collect())
    }
}
