//! The runner service's state: the setup, the runs (one at a time), and starting a command.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tonic::Status;

use super::commands::execute;
use super::config::{RunnerConfig, find_binary_in};
use super::context::{Context, KubernetesState, Shown, lock};
use super::deadline::Deadline;
use super::results::{command_name, failed};
use crate::exec::Stream as LineStream;
use crate::proto::{self, run_request::Command};
use crate::stores::{ObjectRef, Stores};
use crate::terraform::{Io, Terraform, TfError};
use crate::workdir::Layout;

pub(super) struct RunEntry {
    /// The command it runs: asking for the same run id with another command is refused.
    pub(super) command: Command,
    pub(super) lines: Mutex<Vec<proto::LogLine>>,
    pub(super) version: watch::Sender<u64>,
    pub(super) result: watch::Sender<Option<proto::RunResult>>,
    pub(super) cancel: watch::Sender<bool>,
}

#[derive(Default)]
pub(super) struct State {
    pub(super) archive: Option<(String, PathBuf)>,
    pub(super) terraform: Option<Terraform>,
    pub(super) layout: Option<Layout>,
    /// The file mappings written into the home directory, removed at cleanup.
    pub(super) home_files: Vec<PathBuf>,
    /// The binary the setup chose (`terraform`, `tofu`); empty before a setup.
    pub(super) binary: String,
    /// The object of the setup, owner of what the runner writes for it.
    pub(super) object: Option<ObjectRef>,
    /// Where the setup's kubernetes backend keeps the state, when it is the one tfops wrote.
    pub(super) kubernetes_state: Option<KubernetesState>,
    /// The setup's state was handed over read-only ([`crate::handed`]).
    pub(super) handed: bool,
    /// How long each command of the setup may run (`spec.timeout`); none: no limit.
    pub(super) command_timeout: Option<Duration>,
}

/// The runner service.
#[derive(Clone)]
pub struct RunnerService {
    pub(super) config: Arc<RunnerConfig>,
    pub(super) state: Arc<Mutex<State>>,
    pub(super) runs: Arc<Mutex<HashMap<String, Arc<RunEntry>>>>,
    /// The last plan's `show -json` and `show` (see [`super::commands::execute`]).
    pub(super) shown: Arc<Mutex<Shown>>,
    /// What the runner writes plans and outputs with, if anything.
    pub(super) stores: Option<Arc<dyn Stores>>,
    /// The default binary's version, asked once: it does not change while the runner lives.
    version: Arc<tokio::sync::OnceCell<String>>,
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

    /// The setup's Terraform, and what a command runs with besides it.
    fn context(&self) -> (Option<Terraform>, Context) {
        let state = lock(&self.state);
        let context = Context {
            shown: self.shown.clone(),
            stores: self.stores.clone().zip(state.object.clone()),
            pod: self.config.pod_name.clone(),
            kubernetes_state: state.kubernetes_state.clone(),
            handed: state.handed,
        };
        (state.terraform.clone(), context)
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
    pub(super) fn program_for(&self, choice: &str) -> Result<(String, PathBuf), Status> {
        if choice.is_empty() || choice == self.config.binary {
            return Ok((self.config.binary.clone(), self.config.program.clone()));
        }
        find_binary_in(choice, std::env::var_os("PATH"), &self.config.others).ok_or_else(|| {
            Status::failed_precondition(format!(
                "spec.runner.binary is {choice}, which this runner does not have (it runs {})",
                self.config.binary
            ))
        })
    }

    /// The binary and version of the current setup (the runner's own before one).
    pub(super) async fn current_binary(&self) -> Result<(String, String), TfError> {
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
                let (root, program) = (&self.config.workdir_root, &self.config.program);
                if let Some(known) = crate::version_cache::read(root, program) {
                    return Ok(known);
                }
                let tf = Terraform {
                    program: self.config.program.clone(),
                    dir: self.config.workdir_root.clone(),
                    env: BTreeMap::new(),
                    grace: self.config.grace,
                };
                let (log, _) = mpsc::unbounded_channel();
                let (_cancel_tx, cancel) = watch::channel(false);
                let version = tf.version(&Io { log, cancel }).await?;
                crate::version_cache::write(root, program, &version);
                Ok(version)
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
    pub(super) fn idle(&self, what: &str) -> Result<(), Status> {
        busy(&lock(&self.runs), what)
    }

    pub(super) fn archive_dir(&self) -> PathBuf {
        self.config.workdir_root.join(".tfops-archives")
    }

    /// Starts `command` as `run_id`, unless another command is running (checked under the
    /// same lock that registers the run, so two requests cannot both start).
    pub(super) fn start(&self, run_id: String, command: Command) -> Result<Arc<RunEntry>, Status> {
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
        let (terraform, context) = self.context();
        let (timeout, binary) = {
            let state = lock(&self.state);
            (state.command_timeout, state.binary.clone())
        };
        let grace = self.config.grace;
        let max_lines = self.config.max_log_lines;
        let task_entry = entry.clone();
        let (logged_id, name) = (run_id, command_name(&command));
        tokio::spawn(async move {
            let (log_tx, log_rx) = mpsc::unbounded_channel::<(LineStream, String)>();
            let forward = forward_lines(task_entry.clone(), log_rx, logged_id, name, max_lines);
            let io = Io {
                log: log_tx,
                cancel: cancel_rx,
            };
            let deadline = timeout.map(|after| {
                let stop = task_entry.clone();
                Deadline::start(after, move || {
                    let _ = stop.cancel.send(true);
                })
            });
            let result = match terraform {
                Some(tf) => execute(&tf, command, &io, &context).await,
                None => failed("the runner is not set up: call Setup first".into()),
            };
            let result = match deadline {
                Some(d) => d.judge(result, &format!("{binary} {name}"), grace),
                None => result,
            };
            drop(io);
            let _ = forward.await;
            task_entry.result.send_replace(Some(result));
        });
        Ok(entry)
    }
}

/// The id of the command running now.
pub(super) fn running(runs: &HashMap<String, Arc<RunEntry>>) -> Option<String> {
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

/// Forwards a command's lines to its entry (kept for re-attaching, at most `max_lines`) and
/// to the Pod's log, until the command's sender is gone.
fn forward_lines(
    lines_entry: Arc<RunEntry>,
    mut log_rx: mpsc::UnboundedReceiver<(LineStream, String)>,
    logged_id: String,
    name: &'static str,
    max_lines: usize,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
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
    })
}
