//! The gRPC methods: each validates its request once and maps errors to `tonic::Status`.

use std::collections::BTreeMap;
use std::pin::Pin;

use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};

use super::context::{KubernetesState, Shown, lock};
use super::results::source_chain;
use super::service::{RunnerService, running};
use crate::proto::{self, runner_server::Runner};
use crate::stores::ObjectRef;
use crate::terraform::Terraform;
use crate::workdir::{self, Layout, MappedFile};

type EventStream = Pin<Box<dyn Stream<Item = Result<proto::RunEvent, Status>> + Send>>;

#[tonic::async_trait]
impl Runner for RunnerService {
    async fn info(
        &self,
        _: Request<proto::InfoRequest>,
    ) -> Result<Response<proto::InfoReply>, Status> {
        let (binary, version) = self
            .current_binary()
            .await
            .map_err(|e| Status::unavailable(e.to_string()))?;
        Ok(Response::new(proto::InfoReply {
            binary,
            version,
            writes_for_object: self.stores.is_some(),
            running_run_id: running(&lock(&self.runs)).unwrap_or_default(),
        }))
    }

    async fn has_archive(
        &self,
        req: Request<proto::ArchiveRef>,
    ) -> Result<Response<proto::HasArchiveReply>, Status> {
        let sha = req.into_inner().sha256;
        let present = lock(&self.state)
            .archive
            .as_ref()
            .is_some_and(|(s, p)| *s == sha && p.is_file());
        Ok(Response::new(proto::HasArchiveReply { present }))
    }

    async fn upload_archive(
        &self,
        req: Request<Streaming<proto::ArchiveChunk>>,
    ) -> Result<Response<proto::UploadReply>, Status> {
        let mut stream = req.into_inner();
        let dir = self.archive_dir();
        tokio::fs::create_dir_all(&dir)
            .await
            .map_err(|e| Status::internal(e.to_string()))?;
        let tmp = dir.join("upload.partial");
        let mut file = tokio::fs::File::create(&tmp)
            .await
            .map_err(|e| Status::internal(e.to_string()))?;
        let mut hasher = Sha256::new();
        let mut declared = String::new();
        let mut size = 0u64;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk?;
            if declared.is_empty() {
                declared = chunk.sha256.clone();
            }
            hasher.update(&chunk.data);
            size += chunk.data.len() as u64;
            file.write_all(&chunk.data)
                .await
                .map_err(|e| Status::internal(e.to_string()))?;
        }
        file.flush()
            .await
            .map_err(|e| Status::internal(e.to_string()))?;
        let actual = tfops_core::digest::hex(&hasher.finalize());
        if actual != declared {
            let _ = tokio::fs::remove_file(&tmp).await;
            return Err(Status::invalid_argument(format!(
                "archive SHA-256 is {actual}, the upload declared {declared:?}"
            )));
        }
        let path = dir.join(format!("{actual}.tar.gz"));
        tokio::fs::rename(&tmp, &path)
            .await
            .map_err(|e| Status::internal(e.to_string()))?;
        let old = lock(&self.state)
            .archive
            .replace((actual.clone(), path.clone()));
        if let Some((_, old_path)) = old.filter(|(_, p)| *p != path) {
            let _ = tokio::fs::remove_file(old_path).await;
        }
        Ok(Response::new(proto::UploadReply {
            sha256: actual,
            size,
        }))
    }

    async fn setup(
        &self,
        req: Request<proto::SetupRequest>,
    ) -> Result<Response<proto::SetupReply>, Status> {
        self.idle("Setup")?;
        let r = req.into_inner();
        let archive = {
            let state = lock(&self.state);
            match &state.archive {
                Some((sha, path)) if *sha == r.archive_sha256 => path.clone(),
                _ => {
                    return Err(Status::failed_precondition(format!(
                        "archive {} was not uploaded",
                        r.archive_sha256
                    )));
                }
            }
        };
        let layout = Layout::new(
            &self.config.workdir_root,
            &self.config.home,
            &r.namespace,
            &r.name,
            &r.path,
        )
        .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let handed = match r.backend.as_ref().and_then(|b| b.kind.as_ref()) {
            Some(proto::backend::Kind::Handed(h)) => Some(h.state_gzip.clone()),
            _ => None,
        };
        let backend = match handed {
            Some(_) => Some(crate::handed::local_backend(&layout)),
            None => self.backend(r.backend.clone()),
        };
        let prepared = prepare(&layout, archive, backend, &r).await?;
        prepared.map_err(|e| Status::invalid_argument(format!("{e}: {}", source_chain(&e))))?;
        if let Some(state) = &handed {
            crate::handed::write_state(&layout, &r.workspace, state)
                .map_err(|e| Status::invalid_argument(format!("{e}: {}", source_chain(&e))))?;
        }
        let env = self.environment(&r, &layout);
        let (binary, program) = self.program_for(&r.binary)?;
        let tf = Terraform {
            program,
            dir: layout.config_dir.clone(),
            env,
            grace: self.config.grace,
        };
        let home_files = r
            .files
            .iter()
            .filter(|f| f.location == proto::file_mapping::Location::Home as i32)
            .map(|f| layout.home_dir.join(&f.path))
            .collect();
        *lock(&self.shown) = Shown::default();
        let object = ObjectRef {
            key: tfops_core::api::ObjectKey::new(&r.namespace, &r.name),
            uid: r.uid.clone(),
        };
        let kubernetes_state = kubernetes_state(r.backend.as_ref(), &r.workspace);
        let mut state = lock(&self.state);
        state.object = Some(object);
        state.kubernetes_state = kubernetes_state;
        state.handed = handed.is_some();
        state.command_timeout = (r.command_timeout_seconds > 0)
            .then(|| std::time::Duration::from_secs(r.command_timeout_seconds));
        state.terraform = Some(tf);
        state.binary = binary;
        state.layout = Some(layout.clone());
        state.home_files = home_files;
        Ok(Response::new(proto::SetupReply {
            working_dir: layout.config_dir.display().to_string(),
        }))
    }

    type RunStream = EventStream;

    async fn run(
        &self,
        req: Request<proto::RunRequest>,
    ) -> Result<Response<Self::RunStream>, Status> {
        let r = req.into_inner();
        if r.run_id.is_empty() {
            return Err(Status::invalid_argument("run_id is required"));
        }
        let existing = lock(&self.runs).get(&r.run_id).cloned();
        let entry = match existing {
            Some(e) => {
                if let Some(asked) = &r.command
                    && std::mem::discriminant(asked) != std::mem::discriminant(&e.command)
                {
                    return Err(Status::failed_precondition(format!(
                        "run {} is another command; a run id names one command",
                        r.run_id
                    )));
                }
                e
            }
            None => {
                // Without a command this is an attach: the run must be known.
                let command = r
                    .command
                    .ok_or_else(|| Status::not_found(format!("no run {}", r.run_id)))?;
                self.start(r.run_id, command)?
            }
        };
        let (tx, rx) = mpsc::channel(256);
        tokio::spawn(async move {
            let mut version = entry.version.subscribe();
            let mut result = entry.result.subscribe();
            let mut sent = 0usize;
            loop {
                let pending: Vec<proto::LogLine> = lock(&entry.lines)[sent..].to_vec();
                for line in pending {
                    sent += 1;
                    let event = proto::RunEvent {
                        event: Some(proto::run_event::Event::Log(line)),
                    };
                    if tx.send(Ok(event)).await.is_err() {
                        return; // the client left; the command goes on for a later re-attach
                    }
                }
                let done = result.borrow().clone();
                if let Some(done) = done {
                    if lock(&entry.lines).len() == sent {
                        let event = proto::RunEvent {
                            event: Some(proto::run_event::Event::Result(done)),
                        };
                        let _ = tx.send(Ok(event)).await;
                        return;
                    }
                    continue;
                }
                tokio::select! {
                    _ = version.changed() => {}
                    _ = result.changed() => {}
                }
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }

    async fn cancel(
        &self,
        req: Request<proto::CancelRequest>,
    ) -> Result<Response<proto::CancelReply>, Status> {
        let id = req.into_inner().run_id;
        let entry = lock(&self.runs).get(&id).cloned();
        let was_running = match entry {
            Some(e) => {
                let running = e.result.borrow().is_none();
                let _ = e.cancel.send(true);
                running
            }
            None => false,
        };
        Ok(Response::new(proto::CancelReply { was_running }))
    }

    async fn cleanup(
        &self,
        _: Request<proto::CleanupRequest>,
    ) -> Result<Response<proto::CleanupReply>, Status> {
        self.idle("Cleanup")?;
        // Finished runs are forgotten (a Pod kept between runs must not grow without bound);
        // running ones stay attachable.
        lock(&self.runs).retain(|_, e| e.result.borrow().is_none());
        let (layout, home_files) = {
            let mut state = lock(&self.state);
            state.terraform = None;
            state.kubernetes_state = None;
            state.handed = false;
            (state.layout.take(), std::mem::take(&mut state.home_files))
        };
        for file in home_files {
            let _ = tokio::fs::remove_file(&file).await;
        }
        if let Some(layout) = layout {
            let _ = tokio::fs::remove_dir_all(&layout.source_dir).await;
            let _ = tokio::fs::remove_dir_all(&layout.state_dir).await;
            let _ = tokio::fs::remove_file(&layout.cli_config).await;
        }
        Ok(Response::new(proto::CleanupReply {}))
    }
}

impl RunnerService {
    /// The backend block a setup asks for (none: the configuration's own).
    fn backend(&self, backend: Option<proto::Backend>) -> Option<String> {
        match backend.and_then(|b| b.kind) {
            Some(proto::backend::Kind::Kubernetes(k)) => Some(workdir::kubernetes_backend(
                &k.secret_suffix,
                &k.namespace,
                k.in_cluster_config,
                self.config.kubeconfig.as_deref(),
                &k.labels.into_iter().collect(),
            )),
            Some(proto::backend::Kind::Custom(block)) => Some(block),
            // Written by `setup` itself, which knows the layout.
            Some(proto::backend::Kind::Handed(_) | proto::backend::Kind::None(_)) | None => None,
        }
    }

    /// Terraform's environment: the request's, a plugin cache shared by the runs of this
    /// runner, and the CLI configuration when one was sent.
    fn environment(&self, r: &proto::SetupRequest, layout: &Layout) -> BTreeMap<String, String> {
        let mut env: BTreeMap<String, String> = r.env.clone().into_iter().collect();
        let cache = self.config.workdir_root.join("plugin-cache");
        let _ = std::fs::create_dir_all(&cache);
        env.insert("TF_PLUGIN_CACHE_DIR".into(), cache.display().to_string());
        if !r.cli_config.is_empty() {
            env.insert(
                "TF_CLI_CONFIG_FILE".into(),
                layout.cli_config.display().to_string(),
            );
        }
        env
    }
}

/// The state of a setup whose backend is tfops' kubernetes one (see [`KubernetesState`]).
fn kubernetes_state(backend: Option<&proto::Backend>, workspace: &str) -> Option<KubernetesState> {
    match backend.and_then(|b| b.kind.as_ref()) {
        Some(proto::backend::Kind::Kubernetes(k)) => {
            let mut workspaces = vec!["default".to_string()];
            if !workspace.is_empty() && workspace != "default" {
                workspaces.push(workspace.to_string());
            }
            Some(KubernetesState {
                namespace: k.namespace.clone(),
                suffix: k.secret_suffix.clone(),
                workspaces,
            })
        }
        _ => None,
    }
}

/// Unpacks the archive and writes the working directory (backend, variables, file mappings,
/// CLI configuration) off the async threads.
async fn prepare(
    layout: &Layout,
    archive: std::path::PathBuf,
    backend: Option<String>,
    r: &proto::SetupRequest,
) -> Result<Result<(), workdir::WorkdirError>, Status> {
    let layout = layout.clone();
    let vars = r.vars_json.clone();
    let files: Vec<(bool, String, Vec<u8>)> = r
        .files
        .iter()
        .map(|f| {
            let home = f.location == proto::file_mapping::Location::Home as i32;
            (home, f.path.clone(), f.content.clone())
        })
        .collect();
    let cli = r.cli_config.clone();
    tokio::task::spawn_blocking(move || {
        let files: Vec<MappedFile<'_>> = files
            .iter()
            .map(|(home, path, content)| MappedFile {
                home: *home,
                path,
                content,
            })
            .collect();
        workdir::prepare(&layout, &archive, backend.as_deref(), &vars, &files, &cli)
    })
    .await
    .map_err(|e| Status::internal(e.to_string()))
}
