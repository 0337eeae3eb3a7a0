//! The core's ports on the local machine: sources from directories, inputs from Secret and
//! ConfigMap manifests, plans, outputs, status and state in the state directory.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tfops_core::api::{
    FINALIZER, ObjectKey, SourceKind, SourceRef, TerraformObject, TerraformStatus, VarsFromKind,
    WriteOutputsToConfigMap, WriteOutputsToSecret,
};
use tfops_core::ports::{
    Artifact, ConfigMapData, Event, EventSink, EventType, HealthChecker, InputsPort, ObjectWriter,
    OutputValue, OutputsSink, PlanStore, PortError, ResolvedHealthCheck, ResolvedInputs, Revision,
    SourcePort, StateAdmin, StoredPlan,
};

use super::output::Printer;
use super::store::{Persisted, StateDir, remove, write_atomic};
use crate::sources::port::{archive, is_git};
use crate::sources::{CredentialSource, RemoteSources};

/// Secrets and ConfigMaps by (namespace, name): key → bytes.
type ManifestData = BTreeMap<(String, String), BTreeMap<String, Vec<u8>>>;

/// Credentials from the manifests' Secrets.
struct ManifestCredentials(Arc<ManifestData>);

#[async_trait]
impl CredentialSource for ManifestCredentials {
    async fn secret(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<BTreeMap<String, Vec<u8>>>, PortError> {
        Ok(self
            .0
            .get(&(namespace.to_string(), name.to_string()))
            .cloned())
    }
}

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
    remote: RemoteSources,
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
        let credentials = Arc::new(ManifestCredentials(Arc::new(data.clone())));
        Self {
            data,
            bases: BTreeMap::new(),
            policies: Vec::new(),
            objects: Mutex::new(BTreeMap::new()),
            artifacts: Mutex::new(BTreeMap::new()),
            remote: RemoteSources::new(&dir.root().join("cache/git"), credentials),
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

#[async_trait]
impl SourcePort for LocalWorld {
    async fn resolve(&self, object: &ObjectKey, source: &SourceRef) -> Result<Revision, PortError> {
        if is_git(source) || source.kind == SourceKind::OciRepository {
            return self.remote.resolve(object, source).await;
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
        if is_git(source) || source.kind == SourceKind::OciRepository {
            return self.remote.fetch(object, source, revision, ignore).await;
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

    async fn delete(&self, object: &ObjectKey, name: &str) -> Result<(), PortError> {
        remove_named(&self.dir.outputs_file(object), name)
    }

    async fn write_config_map(
        &self,
        object: &ObjectKey,
        target: &WriteOutputsToConfigMap,
        data: &ConfigMapData,
    ) -> Result<(), PortError> {
        let doc = serde_json::json!({"name": target.name, "labels": target.labels, "annotations": target.annotations, "data": data.entries()});
        let bytes =
            serde_json::to_vec_pretty(&doc).map_err(|e| PortError::Invalid(e.to_string()))?;
        let path = self.dir.outputs_config_map_file(object);
        write_atomic(&path, &bytes, false).map_err(store_err)
    }

    async fn delete_config_map(&self, object: &ObjectKey, name: &str) -> Result<(), PortError> {
        remove_named(&self.dir.outputs_config_map_file(object), name)
    }
}

/// Removes the outputs file at `path` when it holds what was written as `name` (one file
/// stands for the object's outputs Secret or ConfigMap, so the one just written under a new
/// name must stay when the old name is removed); a file that cannot be read goes too.
fn remove_named(path: &std::path::Path, name: &str) -> Result<(), PortError> {
    let written = std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|doc| doc["name"].as_str().map(str::to_string));
    if written.is_some_and(|n| n != name) {
        return Ok(());
    }
    remove(path).map_err(store_err)
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

    /// Local mode keeps state in a file, whose lock Terraform takes and releases itself (an
    /// advisory lock on the file, which ends with the process): no lock outlives its holder.
    async fn release_lock(
        &self,
        _: &ObjectKey,
        _: &str,
        _: &str,
        _: &str,
    ) -> Result<bool, PortError> {
        Ok(false)
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
