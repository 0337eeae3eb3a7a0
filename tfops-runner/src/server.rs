//! The gRPC runner service. The edge validates requests once and maps errors to
//! `tonic::Status` only here.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, watch};
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};

use crate::exec::Stream as LineStream;
use crate::proto::{self, run_request::Command, runner_server::Runner};
use crate::stores::{ObjectRef, Stores};
use crate::terraform::{Io, PlanKind, Terraform, TfError};
use crate::workdir::{self, Layout, MappedFile};
use tfops_core::api::WriteOutputsToSecret;
use tfops_core::ports::{OutputValue, PortError, ShownPlan, StoredPlan};

/// How the runner runs.
#[derive(Debug, Clone)]
pub struct RunnerConfig {
    /// The `terraform` or `tofu` binary.
    pub program: PathBuf,
    /// `terraform` or `tofu`, as reported.
    pub binary: String,
    /// Root of working directories (`/tmp` in a Pod).
    pub workdir_root: PathBuf,
    /// The home directory for file mappings.
    pub home: PathBuf,
    /// Time Terraform gets after SIGINT before SIGKILL.
    pub grace: Duration,
    /// Log lines kept per run for re-attaching clients.
    pub max_log_lines: usize,
    /// A kubeconfig the kubernetes backend reads instead of the in-cluster configuration,
    /// when a request asks for in-cluster configuration (`TFOPS_KUBECONFIG`: the test
    /// cluster's node agent sets it when it cannot bind-mount `/var/run/secrets` for a process).
    pub kubeconfig: Option<PathBuf>,
    /// This runner's own host name, when it has one (see [`own_host`]): Terraform names a
    /// lock's holder `user@host`, and since a runner runs one command at a time, a lock held
    /// by this host when a command finds it is a dead process's (an earlier command killed
    /// with its Pod, or an earlier Pod of this name, which the API server lets exist only
    /// after that Pod ended).
    pub pod_name: Option<String>,
}

/// `TFOPS_RUNNER_HOST` (the Pod's `spec.hostname`, unique in the cluster) when the kernel's
/// host name is it; else `None`: a process that shares its host name with others can prove
/// nothing about a lock held by that host.
pub fn own_host() -> Option<String> {
    let own = std::env::var("TFOPS_RUNNER_HOST")
        .ok()
        .filter(|p| !p.is_empty())?;
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    (host.trim() == own).then_some(own)
}

/// Whether a lock held by `holder` (`user@host`) is held by the host `pod`, the runner's own
/// ([`own_host`]).
pub fn held_by_own_host(holder: &str, pod: Option<&str>) -> bool {
    let host = holder.rsplit_once('@').map(|(_, h)| h.trim());
    pod.is_some_and(|p| host == Some(p))
}

/// Chooses the binary for `binary: auto | terraform | tofu` from the process environment
/// (`PATH`, `TFOPS_TERRAFORM`, `TFOPS_TOFU`): see [`find_binary_in`].
pub fn find_binary(choice: &str) -> Option<(String, PathBuf)> {
    find_binary_in(
        choice,
        std::env::var_os("PATH"),
        &Overrides {
            terraform: std::env::var_os("TFOPS_TERRAFORM"),
            tofu: std::env::var_os("TFOPS_TOFU"),
        },
    )
}

/// Paths that name a binary outright instead of searching `PATH` (`TFOPS_TERRAFORM`,
/// `TFOPS_TOFU`): tests and images that keep several builds side by side.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// The `terraform` to run.
    pub terraform: Option<std::ffi::OsString>,
    /// The `tofu` to run.
    pub tofu: Option<std::ffi::OsString>,
}

/// Chooses the binary for `binary: auto | terraform | tofu`: `auto` prefers `tofu`, then
/// `terraform`; each is its override when set, else the first on `path`. Returns the name
/// reported in status and the path, or `None` when the choice is not installed.
pub fn find_binary_in(
    choice: &str,
    path: Option<std::ffi::OsString>,
    overrides: &Overrides,
) -> Option<(String, PathBuf)> {
    let find = |name: &str, over: &Option<std::ffi::OsString>| {
        over.clone()
            .map(PathBuf::from)
            .or_else(|| {
                path.as_ref().and_then(|paths| {
                    std::env::split_paths(paths)
                        .map(|d| d.join(name))
                        .find(|p| p.is_file())
                })
            })
            .map(|p| (name.to_string(), p))
    };
    let terraform = || find("terraform", &overrides.terraform);
    let tofu = || find("tofu", &overrides.tofu);
    match choice {
        "tofu" => tofu(),
        "terraform" => terraform(),
        _ => tofu().or_else(terraform),
    }
}

struct RunEntry {
    /// The command it runs: asking for the same run id with another command is refused.
    command: Command,
    lines: Mutex<Vec<proto::LogLine>>,
    version: watch::Sender<u64>,
    result: watch::Sender<Option<proto::RunResult>>,
    cancel: watch::Sender<bool>,
}

#[derive(Default)]
struct State {
    archive: Option<(String, PathBuf)>,
    terraform: Option<Terraform>,
    layout: Option<Layout>,
    /// The file mappings written into the home directory, removed at cleanup.
    home_files: Vec<PathBuf>,
    /// The binary the setup chose (`terraform`, `tofu`); empty before a setup.
    binary: String,
    /// The object of the setup, owner of what the runner writes for it.
    object: Option<ObjectRef>,
}

/// The last plan's rendered forms (see [`execute`]).
#[derive(Default)]
struct Shown {
    json: Option<String>,
    readable: Option<String>,
}

/// What a command needs besides Terraform.
struct Context {
    shown: Arc<Mutex<Shown>>,
    /// The stores and the object they write for, when the runner has stores.
    stores: Option<(Arc<dyn Stores>, ObjectRef)>,
    /// [`RunnerConfig::pod_name`].
    pod: Option<String>,
}

/// The runner service.
#[derive(Clone)]
pub struct RunnerService {
    config: Arc<RunnerConfig>,
    state: Arc<Mutex<State>>,
    runs: Arc<Mutex<HashMap<String, Arc<RunEntry>>>>,
    /// The last plan's `show -json` and `show` (see [`execute`]).
    shown: Arc<Mutex<Shown>>,
    /// What the runner writes plans and outputs with, if anything.
    stores: Option<Arc<dyn Stores>>,
    /// The default binary's version, asked once: it does not change while the runner lives.
    version: Arc<tokio::sync::OnceCell<String>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic in another request cannot leave these maps half-updated in a way that matters;
    // keep serving.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl RunnerService {
    /// A service with this configuration.
    pub fn new(config: RunnerConfig) -> Self {
        Self {
            config: Arc::new(config),
            state: Arc::new(Mutex::new(State::default())),
            runs: Arc::new(Mutex::new(HashMap::new())),
            shown: Arc::new(Mutex::new(Shown::default())),
            stores: None,
            version: Arc::new(tokio::sync::OnceCell::new()),
        }
    }

    /// The same service writing plans and outputs with `stores` (a runner Pod's, on the
    /// Kubernetes API with the Pod's identity).
    pub fn with_stores(mut self, stores: Arc<dyn Stores>) -> Self {
        self.stores = Some(stores);
        self
    }

    /// Starts asking the binary for its version in the background (call once at startup,
    /// inside the runtime): `terraform version` costs a process start, which then overlaps
    /// with the upload and `init` instead of delaying them.
    pub fn prefetch_version(&self) {
        let service = self.clone();
        tokio::spawn(async move {
            let _ = service.binary_version().await;
        });
    }

    /// The binary a setup asks for (`""`: the runner's own), or FAILED_PRECONDITION when this
    /// runner does not have it.
    fn program_for(&self, choice: &str) -> Result<(String, PathBuf), Status> {
        if choice.is_empty() || choice == self.config.binary {
            return Ok((self.config.binary.clone(), self.config.program.clone()));
        }
        find_binary(choice).ok_or_else(|| {
            Status::failed_precondition(format!(
                "spec.runner.binary is {choice}, which this runner does not have (it runs {})",
                self.config.binary
            ))
        })
    }

    /// The binary and version of the current setup (the runner's own before one).
    async fn current_binary(&self) -> Result<(String, String), TfError> {
        let chosen = {
            let state = lock(&self.state);
            state
                .terraform
                .as_ref()
                .filter(|tf| tf.program != self.config.program)
                .map(|tf| (state.binary.clone(), tf.clone()))
        };
        match chosen {
            Some((binary, tf)) => {
                let (log, _) = mpsc::unbounded_channel();
                let (_cancel_tx, cancel) = watch::channel(false);
                Ok((binary, tf.version(&Io { log, cancel }).await?))
            }
            None => Ok((self.config.binary.clone(), self.binary_version().await?)),
        }
    }

    async fn binary_version(&self) -> Result<String, TfError> {
        self.version
            .get_or_try_init(|| async {
                let tf = Terraform {
                    program: self.config.program.clone(),
                    dir: self.config.workdir_root.clone(),
                    env: BTreeMap::new(),
                    grace: self.config.grace,
                };
                let (log, _) = mpsc::unbounded_channel();
                let (_cancel_tx, cancel) = watch::channel(false);
                tf.version(&Io { log, cancel }).await
            })
            .await
            .cloned()
    }

    /// Cancels every running command (shutdown): each gets SIGINT, then SIGKILL.
    pub fn cancel_all(&self) {
        for entry in lock(&self.runs).values() {
            let _ = entry.cancel.send(true);
        }
    }

    /// Waits until no command is running (after [`RunnerService::cancel_all`]), at most
    /// `limit`: Terraform gets to finish its interrupt handling and release its lock before the
    /// process exits.
    pub async fn wait_idle(&self, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let running = lock(&self.runs)
                .values()
                .any(|e| e.result.borrow().is_none());
            if !running || tokio::time::Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Refuses `what` while a command runs: one thing at a time in one working directory.
    fn idle(&self, what: &str) -> Result<(), Status> {
        busy(&lock(&self.runs), what)
    }

    fn archive_dir(&self) -> PathBuf {
        self.config.workdir_root.join(".tfops-archives")
    }

    /// Starts `command` as `run_id`, unless another command is running (checked under the
    /// same lock that registers the run, so two requests cannot both start).
    fn start(&self, run_id: String, command: Command) -> Result<Arc<RunEntry>, Status> {
        let mut runs = lock(&self.runs);
        if let Some(existing) = runs.get(&run_id) {
            return Ok(existing.clone());
        }
        busy(&runs, "a new command")?;
        let (version, _) = watch::channel(0u64);
        let (result, _) = watch::channel(None);
        let (cancel, cancel_rx) = watch::channel(false);
        let entry = Arc::new(RunEntry {
            command: command.clone(),
            lines: Mutex::new(Vec::new()),
            version,
            result,
            cancel,
        });
        runs.insert(run_id.clone(), entry.clone());
        let (terraform, object) = {
            let state = lock(&self.state);
            (state.terraform.clone(), state.object.clone())
        };
        let context = Context {
            shown: self.shown.clone(),
            stores: self.stores.clone().zip(object),
            pod: self.config.pod_name.clone(),
        };
        let max_lines = self.config.max_log_lines;
        let task_entry = entry.clone();
        let (logged_id, name) = (run_id, command_name(&command));
        tokio::spawn(async move {
            let (log_tx, mut log_rx) = mpsc::unbounded_channel::<(LineStream, String)>();
            let lines_entry = task_entry.clone();
            let forward = tokio::spawn(async move {
                while let Some((stream, line)) = log_rx.recv().await {
                    // Also in the Pod's log, for `kubectl logs` and `tfops logs -f`.
                    let from = match stream {
                        LineStream::Stdout => "stdout",
                        LineStream::Stderr => "stderr",
                    };
                    tracing::info!(
                        target: crate::OUTPUT_TARGET,
                        run_id = %logged_id,
                        command = name,
                        stream = from,
                        message = %line
                    );
                    let mut lines = lock(&lines_entry.lines);
                    if lines.len() < max_lines {
                        lines.push(proto::LogLine {
                            stream: match stream {
                                LineStream::Stdout => proto::log_line::Stream::Stdout as i32,
                                LineStream::Stderr => proto::log_line::Stream::Stderr as i32,
                            },
                            line,
                        });
                    }
                    let n = lines.len() as u64;
                    drop(lines);
                    lines_entry.version.send_replace(n);
                }
            });
            let io = Io {
                log: log_tx,
                cancel: cancel_rx,
            };
            let result = match terraform {
                Some(tf) => execute(&tf, command, &io, &context).await,
                None => failed("the runner is not set up: call Setup first".into()),
            };
            drop(io);
            let _ = forward.await;
            task_entry.result.send_replace(Some(result));
        });
        Ok(entry)
    }
}

/// The id of the command running now.
fn running(runs: &HashMap<String, Arc<RunEntry>>) -> Option<String> {
    runs.iter()
        .find(|(_, e)| e.result.borrow().is_none())
        .map(|(id, _)| id.clone())
}

fn busy(runs: &HashMap<String, Arc<RunEntry>>, what: &str) -> Result<(), Status> {
    match running(runs) {
        Some(id) => Err(Status::failed_precondition(format!(
            "{what} refused: run {id} is still running"
        ))),
        None => Ok(()),
    }
}

fn failed(diagnostic: String) -> proto::RunResult {
    proto::RunResult {
        status: proto::run_result::Status::Failed as i32,
        exit_code: 1,
        diagnostic,
        ..Default::default()
    }
}

fn from_error(e: TfError, pod: Option<&str>) -> proto::RunResult {
    match e {
        TfError::Locked { lock_id, holder } => proto::RunResult {
            status: proto::run_result::Status::StateLocked as i32,
            exit_code: 1,
            diagnostic: format!("state locked by {holder} (lock id {lock_id})"),
            lock_holder_gone: held_by_own_host(&holder, pod),
            lock_id,
            lock_holder: holder,
            payload: None,
        },
        TfError::Cancelled => proto::RunResult {
            status: proto::run_result::Status::Cancelled as i32,
            exit_code: -1,
            diagnostic: "cancelled".into(),
            ..Default::default()
        },
        TfError::Failed { code, diagnostic } => proto::RunResult {
            status: proto::run_result::Status::Failed as i32,
            exit_code: code,
            diagnostic,
            ..Default::default()
        },
        other => failed(other.to_string()),
    }
}

fn succeeded(payload: Option<proto::run_result::Payload>) -> proto::RunResult {
    proto::RunResult {
        status: proto::run_result::Status::Succeeded as i32,
        payload,
        ..Default::default()
    }
}

/// The stores of `context`, or the failure a store command gets without them.
fn stores_of(context: &Context) -> Result<(&Arc<dyn Stores>, &ObjectRef), TfError> {
    context
        .stores
        .as_ref()
        .map(|(s, o)| (s, o))
        .ok_or_else(|| TfError::Failed {
            code: 1,
            diagnostic: "this runner has no stores for plans and outputs (it runs outside a cluster, or Setup did not run)".into(),
        })
}

fn store_failure(e: PortError) -> TfError {
    TfError::Failed {
        code: 1,
        diagnostic: e.to_string(),
    }
}

/// Runs one command. `context.shown` keeps the last plan's `show -json` and `show`, so that
/// showing or storing that plan does not run them a second time.
async fn execute(tf: &Terraform, command: Command, io: &Io, context: &Context) -> proto::RunResult {
    use proto::run_result::Payload;
    let shown = &*context.shown;
    let outcome: Result<Option<Payload>, TfError> = async {
        Ok(match command {
            Command::Init(_) => tf.init(io).await.map(|()| None)?,
            Command::SelectWorkspace(w) => {
                tf.select_workspace(&w.workspace, io).await.map(|()| None)?
            }
            Command::Plan(p) => {
                let kind = match proto::plan::Kind::try_from(p.kind)
                    .unwrap_or(proto::plan::Kind::Normal)
                {
                    proto::plan::Kind::Normal => PlanKind::Normal,
                    proto::plan::Kind::Destroy => PlanKind::Destroy,
                    proto::plan::Kind::RefreshOnly => PlanKind::RefreshOnly,
                };
                *lock(shown) = Shown::default();
                let o = tf.plan(kind, &p.targets, p.parallelism, io).await?;
                // A plan that cannot be read back is a failure, never an empty plan.
                let path = tf.dir.join(crate::terraform::PLAN_FILE);
                let plan_file = tokio::fs::read(&path).await.map_err(|e| TfError::Failed {
                    code: 1,
                    diagnostic: format!("reading the saved plan {}: {e}", path.display()),
                })?;
                if !o.json.is_empty() {
                    lock(shown).json = Some(o.json.clone());
                }
                Some(Payload::Plan(proto::PlanOutcome {
                    has_changes: o.has_changes,
                    add: o.add,
                    change: o.change,
                    destroy: o.destroy,
                    drifted: o.drifted,
                    plan_file,
                }))
            }
            Command::Show(_) => {
                let (readable, json) = show(tf, io, shown).await?;
                Some(Payload::Show(proto::ShowOutcome { readable, json }))
            }
            Command::SavePlan(p) => {
                let (stores, object) = stores_of(context)?;
                let path = tf.dir.join(crate::terraform::PLAN_FILE);
                let binary = tokio::fs::read(&path).await.map_err(|e| TfError::Failed {
                    code: 1,
                    diagnostic: format!("reading the saved plan {}: {e}", path.display()),
                })?;
                let (readable, json) = show(tf, io, shown).await?;
                let plan = StoredPlan {
                    id: p.plan_id,
                    binary,
                    shown: ShownPlan { readable, json },
                    is_destroy: p.is_destroy,
                    is_drift: p.is_drift,
                };
                stores
                    .plans(object)
                    .save(&object.key, &p.workspace, &plan)
                    .await
                    .map_err(store_failure)?;
                None
            }
            Command::DeletePlan(p) => {
                let (stores, object) = stores_of(context)?;
                stores
                    .plans(object)
                    .delete(&object.key, &p.workspace)
                    .await
                    .map_err(store_failure)?;
                None
            }
            Command::DeleteOutputs(d) => {
                let (stores, object) = stores_of(context)?;
                stores
                    .outputs(object)
                    .delete(&object.key, &d.name)
                    .await
                    .map_err(store_failure)?;
                None
            }
            Command::DeleteState(d) => {
                let (stores, object) = stores_of(context)?;
                stores
                    .state(object)
                    .delete_state(&object.key, &d.workspace, &d.suffix)
                    .await
                    .map_err(store_failure)?;
                None
            }
            Command::WriteOutputs(w) => {
                let (stores, object) = stores_of(context)?;
                let outputs: BTreeMap<String, OutputValue> = tf
                    .outputs(io)
                    .await?
                    .into_iter()
                    .map(|(k, (value, sensitive))| (k, OutputValue { value, sensitive }))
                    .collect();
                let sink = stores.outputs(object);
                if !w.target_json.is_empty() {
                    let target: WriteOutputsToSecret = serde_json::from_str(&w.target_json)
                        .map_err(|e| TfError::Failed {
                            code: 1,
                            diagnostic: format!("writeOutputsToSecret: {e}"),
                        })?;
                    sink.write(&object.key, &target, &outputs)
                        .await
                        .map_err(store_failure)?;
                }
                if !w.remove.is_empty() {
                    sink.delete(&object.key, &w.remove)
                        .await
                        .map_err(store_failure)?;
                }
                // Only what the controller asked for leaves the runner.
                Some(Payload::Output(proto::OutputOutcome {
                    outputs: outputs
                        .into_iter()
                        .map(|(k, v)| {
                            let json = if w.reveal.contains(&k) {
                                v.value.to_string()
                            } else {
                                "null".to_string()
                            };
                            let sensitive = v.sensitive;
                            (k, proto::OutputValue { json, sensitive })
                        })
                        .collect(),
                }))
            }
            Command::Apply(_) => tf.apply(io).await.map(|()| None)?,
            Command::Output(_) => {
                let outputs = tf.outputs(io).await?;
                Some(Payload::Output(proto::OutputOutcome {
                    outputs: outputs
                        .into_iter()
                        .map(|(k, (v, sensitive))| {
                            (
                                k,
                                proto::OutputValue {
                                    json: v.to_string(),
                                    sensitive,
                                },
                            )
                        })
                        .collect(),
                }))
            }
            Command::Inventory(_) => Some(Payload::Inventory(proto::InventoryOutcome {
                resources: tf
                    .inventory(io)
                    .await?
                    .into_iter()
                    .map(|(address, r#type, id)| proto::Resource {
                        address,
                        r#type,
                        id,
                    })
                    .collect(),
            })),
            Command::Destroy(d) => tf
                .destroy(&d.targets, d.parallelism, io)
                .await
                .map(|()| None)?,
            Command::ForceUnlock(f) => tf.force_unlock(&f.lock_id, io).await.map(|()| None)?,
        })
    }
    .await;
    match outcome {
        Ok(payload) => succeeded(payload),
        Err(e) => from_error(e, context.pod.as_deref()),
    }
}

/// The last plan's `show` text and `show -json`, each run once per plan.
async fn show(tf: &Terraform, io: &Io, shown: &Mutex<Shown>) -> Result<(String, String), TfError> {
    let cached = {
        let s = lock(shown);
        (s.readable.clone(), s.json.clone())
    };
    let json = match cached.1 {
        Some(json) => json,
        None => tf.show_json(io).await?,
    };
    let readable = match cached.0 {
        Some(text) => text,
        None => tf.show_text(io).await?,
    };
    let mut s = lock(shown);
    s.json = Some(json.clone());
    s.readable = Some(readable.clone());
    Ok((readable, json))
}

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
        let backend = match r.backend.and_then(|b| b.kind) {
            Some(proto::backend::Kind::Kubernetes(k)) => Some(workdir::kubernetes_backend(
                &k.secret_suffix,
                &k.namespace,
                k.in_cluster_config,
                self.config.kubeconfig.as_deref(),
                &k.labels.into_iter().collect(),
            )),
            Some(proto::backend::Kind::Custom(block)) => Some(block),
            Some(proto::backend::Kind::None(_)) | None => None,
        };
        let files: Vec<MappedFile<'_>> = r
            .files
            .iter()
            .map(|f| MappedFile {
                home: f.location == proto::file_mapping::Location::Home as i32,
                path: &f.path,
                content: &f.content,
            })
            .collect();
        let prepared = {
            let layout = layout.clone();
            let backend = backend.clone();
            let vars = r.vars_json.clone();
            let files: Vec<(bool, String, Vec<u8>)> = files
                .iter()
                .map(|f| (f.home, f.path.to_string(), f.content.to_vec()))
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
            .map_err(|e| Status::internal(e.to_string()))?
        };
        prepared.map_err(|e| Status::invalid_argument(format!("{e}: {}", source_chain(&e))))?;
        let mut env: BTreeMap<String, String> = r.env.into_iter().collect();
        let cache = self.config.workdir_root.join("plugin-cache");
        let _ = std::fs::create_dir_all(&cache);
        env.insert("TF_PLUGIN_CACHE_DIR".into(), cache.display().to_string());
        if !r.cli_config.is_empty() {
            env.insert(
                "TF_CLI_CONFIG_FILE".into(),
                layout.cli_config.display().to_string(),
            );
        }
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
        let mut state = lock(&self.state);
        state.object = Some(object);
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
            (state.layout.take(), std::mem::take(&mut state.home_files))
        };
        for file in home_files {
            let _ = tokio::fs::remove_file(&file).await;
        }
        if let Some(layout) = layout {
            let _ = tokio::fs::remove_dir_all(&layout.source_dir).await;
            let _ = tokio::fs::remove_file(&layout.cli_config).await;
        }
        Ok(Response::new(proto::CleanupReply {}))
    }
}

fn source_chain(e: &dyn std::error::Error) -> String {
    let mut parts = Vec::new();
    let mut cur = e.source();
    while let Some(s) = cur {
        parts.push(s.to_string());
        cur = s.source();
    }
    parts.join(": ")
}

/// The command's name in log lines.
fn command_name(command: &Command) -> &'static str {
    match command {
        Command::Init(_) => "init",
        Command::SelectWorkspace(_) => "workspace",
        Command::Plan(_) => "plan",
        Command::Show(_) => "show",
        Command::SavePlan(_) => "save-plan",
        Command::DeletePlan(_) => "delete-plan",
        Command::DeleteOutputs(_) => "delete-outputs",
        Command::DeleteState(_) => "delete-state",
        Command::WriteOutputs(_) => "write-outputs",
        Command::Apply(_) => "apply",
        Command::Output(_) => "output",
        Command::Inventory(_) => "inventory",
        Command::Destroy(_) => "destroy",
        Command::ForceUnlock(_) => "force-unlock",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_prefers_tofu_and_explicit_choices_are_honoured() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(bin.join("terraform"), "").unwrap_or_else(|e| panic!("{e}"));
        let path = Some(bin.clone().into_os_string());
        let none = Overrides::default();
        assert_eq!(
            find_binary_in("auto", path.clone(), &none).map(|b| b.0),
            Some("terraform".into())
        );
        assert_eq!(find_binary_in("tofu", path.clone(), &none), None);
        std::fs::write(bin.join("tofu"), "").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            find_binary_in("auto", path.clone(), &none),
            Some(("tofu".into(), bin.join("tofu")))
        );
        assert_eq!(
            find_binary_in("terraform", path.clone(), &none).map(|b| b.0),
            Some("terraform".into())
        );
        let custom = Overrides {
            terraform: Some("/opt/tf/terraform".into()),
            tofu: Some("/opt/tofu/1.12.6/tofu".into()),
        };
        assert_eq!(
            find_binary_in("terraform", path.clone(), &custom).map(|b| b.1),
            Some(PathBuf::from("/opt/tf/terraform"))
        );
        assert_eq!(
            find_binary_in("auto", path, &custom),
            Some(("tofu".into(), PathBuf::from("/opt/tofu/1.12.6/tofu")))
        );
    }
}
