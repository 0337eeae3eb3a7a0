//! [`Session`]: one run's connection, implementing the core's runner-session port.

use std::collections::BTreeMap;

use async_trait::async_trait;
use tfops_core::api::InventoryEntry;
use tfops_core::ports::{
    self, OutputValue, OutputsRequest, PlanRequest, PlanResult, PlanSummary, PlanToStore,
    PortError, RunnerSession, SetupRequest, ShownPlan,
};

use super::setup::{command_timeout, hand_over, setup_request};
use super::stop::{StopSignal, stoppable};
use super::{ClientError, RunnerClient};
use crate::proto::{self, run_request::Command};

/// Whether `e` is a stream or connection that broke (the runner may still be running the
/// command), not an answer of the runner. A TLS refusal is no break: re-attaching with the
/// same certificate is refused the same way.
fn broken(e: &ClientError) -> bool {
    match e {
        ClientError::NoResult(_) => true,
        ClientError::Call { status, .. } => {
            matches!(
                status.code(),
                tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Internal
            ) && crate::refusal::tls_refusal(status).is_none()
        }
        ClientError::Connect { .. } => false,
    }
}

fn port_error(e: ClientError) -> PortError {
    if let ClientError::Call { status, .. } = &e
        && let Some(refusal) = crate::refusal::tls_refusal(status)
    {
        return PortError::TlsRefused(refusal);
    }
    match e {
        ClientError::Call { status, .. } if status.code() == tonic::Code::NotFound => {
            PortError::NotFound(status.message().to_string())
        }
        ClientError::Call { status, .. } if status.code() == tonic::Code::InvalidArgument => {
            PortError::Invalid(status.message().to_string())
        }
        ClientError::Call { status, .. } if status.code() == tonic::Code::Cancelled => {
            PortError::Cancelled
        }
        other => PortError::Unavailable(other.to_string()),
    }
}

/// A write target as the runner takes it: JSON, or empty for none.
fn json_or_empty<T: serde::Serialize>(target: Option<&T>) -> Result<String, PortError> {
    target.map_or(Ok(String::new()), |t| {
        serde_json::to_string(t).map_err(|e| PortError::Invalid(e.to_string()))
    })
}

fn result_error(r: &proto::RunResult) -> Option<PortError> {
    match proto::run_result::Status::try_from(r.status).unwrap_or(proto::run_result::Status::Failed)
    {
        proto::run_result::Status::Succeeded => None,
        proto::run_result::Status::Cancelled => Some(PortError::Cancelled),
        proto::run_result::Status::StateLocked => Some(PortError::StateLocked {
            lock_id: r.lock_id.clone(),
            holder: r.lock_holder.clone(),
            holder_gone: r.lock_holder_gone,
        }),
        proto::run_result::Status::Failed => Some(PortError::Terraform(r.diagnostic.clone())),
        proto::run_result::Status::TimedOut => Some(PortError::TimedOut(r.diagnostic.clone())),
    }
}

/// One run's connection, implementing the core's [`RunnerSession`] port. Run ids are
/// `<prefix>-<n>`: a controller that derives the prefix from the object and attempt can
/// re-attach to them after a restart.
pub struct Session {
    client: RunnerClient,
    binary: String,
    runner: String,
    prefix: String,
    next: u64,
    /// The runner stores plans and writes outputs itself (learnt from `Info` after `init`).
    writes: bool,
    /// Receives every log line of every command.
    pub on_line: Box<dyn FnMut(&proto::LogLine) + Send>,
    /// The last lines of every command (bounded), for the run history.
    tail: String,
    /// The state to hand the runner at the next setup instead of tfops' kubernetes backend
    /// ([`Session::hand_state`]).
    handed: Option<Vec<u8>>,
    /// The setup's command timeout, once set up.
    timeout: Option<std::time::Duration>,
    /// A command outlived its timeout and the margin: the runner answers nothing.
    gave_up: bool,
    /// Says who stops the run ([`Session::stop_on`]).
    stop: Option<StopSignal>,
}

impl Session {
    /// A session on `client`, naming runs `<prefix>-<n>`. The binary and its version are
    /// asked after `init` (the runner finds them out meanwhile); [`RunnerSession::binary`] is
    /// empty before.
    ///
    /// # Errors
    /// None yet; kept fallible for the connection checks a session may make.
    pub async fn start(client: RunnerClient, prefix: &str) -> Result<Self, ClientError> {
        Ok(Self {
            client,
            binary: String::new(),
            runner: String::new(),
            prefix: prefix.to_string(),
            next: 0,
            writes: false,
            on_line: Box::new(|_| {}),
            tail: String::new(),
            handed: None,
            timeout: None,
            gave_up: false,
            stop: None,
        })
    }

    /// Stops the command under way (and every later one) once `stop` says who stops the run:
    /// the runner interrupts it as Ctrl-C does, and it fails with [`PortError::Stopped`].
    pub fn stop_on(&mut self, stop: StopSignal) {
        self.stop = Some(stop);
    }

    /// Whether a command outlived its timeout plus the controller's margin, unanswered: the
    /// runner is frozen or unreachable, and its Pod should go.
    pub fn gave_up(&self) -> bool {
        self.gave_up
    }

    /// Hands `state` (the workspace's state as stored, gzip; empty for none) to the runner at the
    /// next setup in place of tfops' kubernetes backend: Terraform reads it from a local
    /// backend and the runner needs no Kubernetes identity, and refuses every command that
    /// would change infrastructure or write for the object. A setup whose object names a
    /// backend of its own (`spec.backendConfig`) keeps it.
    pub fn hand_state(&mut self, state: Vec<u8>) {
        self.handed = Some(state);
    }

    /// Names the runner this session talks to ([`RunnerSession::runner`]), so that a later
    /// session can attach to its runs.
    pub fn named(mut self, runner: &str) -> Self {
        self.runner = runner.to_string();
        self
    }

    /// Asks the runner what it runs and whether it writes plans and outputs itself, as
    /// [`RunnerSession::init`] does: a session that attaches to an earlier run (and runs no
    /// `init`) needs it before it reads outputs.
    ///
    /// # Errors
    /// The `Info` call's.
    pub async fn learn(&mut self) -> Result<(), PortError> {
        let info = self.client.info_reply().await.map_err(port_error)?;
        self.binary = format!("{} {}", info.binary, info.version);
        self.writes = info.writes_for_object;
        Ok(())
    }

    /// The id the next command will run under.
    pub fn next_run_id(&self) -> String {
        format!("{}-{}", self.prefix, self.next)
    }

    async fn command(&mut self, command: Command) -> Result<proto::RunResult, PortError> {
        let id = self.next_run_id();
        self.next += 1;
        self.run_as(&id, Some(command)).await
    }

    /// Runs `command` as `id` (or, without a command, attaches to the run `id`). A stream
    /// that breaks is followed by re-attaching to `id` (the command goes on in the runner)
    /// before a failure is declared; a command past its deadline is cancelled.
    async fn run_as(
        &mut self,
        id: &str,
        command: Option<Command>,
    ) -> Result<proto::RunResult, PortError> {
        let config = self.client.config.clone();
        // Stopped before it began (the run was stopped at an earlier command): not started.
        if let Some(who) = self.stop.as_ref().and_then(|s| s.borrow().clone()) {
            return Err(PortError::Stopped(format!(
                "stopped by {who}: not started, the run had been stopped"
            )));
        }
        let (mut canceller, mut stop) = (self.client.clone(), self.stop.clone());
        let attempt = async {
            let original = command.clone();
            let mut command = command;
            let mut wait = config.reattach_backoff;
            let mut left = config.reattach_attempts;
            loop {
                let (on_line, tail) = (&mut self.on_line, &mut self.tail);
                let reattaching = command.is_none() && original.is_some();
                let each = |l: &proto::LogLine| {
                    tfops_core::tail::append_tail(tail, &l.line);
                    if !l.line.ends_with('\n') {
                        tfops_core::tail::append_tail(tail, "\n");
                    }
                    on_line(l);
                };
                match self.client.run(id, command.take(), each).await {
                    Err(e) if broken(&e) && left > 0 => {
                        left -= 1;
                        tokio::time::sleep(wait).await;
                        wait = wait.saturating_mul(2);
                    }
                    // The runner never registered the run (the stream broke before): it did
                    // not start, so starting it now runs it once.
                    Err(ClientError::Call { status, .. })
                        if reattaching && status.code() == tonic::Code::NotFound && left > 0 =>
                    {
                        left -= 1;
                        command = original.clone();
                    }
                    other => return other,
                }
            }
        };
        let deadline = self
            .timeout
            .map_or(config.command_deadline, |t| t + config.deadline_margin);
        let watched = stoppable(attempt, &mut stop, &mut canceller, id);
        let (result, stopped_by) = match tokio::time::timeout(deadline, watched).await {
            Ok((r, by)) => (r.map_err(port_error)?, by),
            Err(_) => {
                self.gave_up = true;
                let _ = tokio::time::timeout(config.connect_timeout, self.client.cancel(id)).await;
                return Err(PortError::TimedOut(format!(
                    "the runner did not end run {id} within {} (its timeout and the controller's margin): given up, its Pod removed",
                    tfops_core::duration::format(deadline)
                )));
            }
        };
        match (result_error(&result), stopped_by) {
            (Some(PortError::Cancelled), Some(who)) => Err(PortError::Stopped(format!(
                "stopped by {who}: the command was interrupted as Ctrl-C does"
            ))),
            (Some(e), _) => Err(e),
            (None, _) => Ok(result),
        }
    }
}

#[async_trait]
impl RunnerSession for Session {
    fn binary(&self) -> String {
        self.binary.clone()
    }

    fn runner(&self) -> String {
        self.runner.clone()
    }

    fn output_tail(&self) -> String {
        self.tail.clone()
    }

    async fn setup(&mut self, request: &SetupRequest) -> Result<(), PortError> {
        self.client
            .upload(&request.artifact.data, &request.artifact.sha256)
            .await
            .map_err(port_error)?;
        let mut setup = setup_request(request)?;
        if let Some(state) = self.handed.take() {
            hand_over(&mut setup, state);
        }
        let timeout = command_timeout(request, self.client.config.default_timeout);
        setup.command_timeout_seconds = timeout.as_secs();
        self.timeout = Some(timeout);
        self.client.setup(setup).await.map_err(port_error)?;
        Ok(())
    }

    async fn init(&mut self) -> Result<(), PortError> {
        self.command(Command::Init(proto::Init {})).await?;
        self.learn().await
    }

    async fn select_workspace(&mut self, workspace: &str) -> Result<(), PortError> {
        self.command(Command::SelectWorkspace(proto::SelectWorkspace {
            workspace: workspace.into(),
        }))
        .await
        .map(drop)
    }

    async fn plan(&mut self, request: &PlanRequest) -> Result<PlanResult, PortError> {
        let kind = match request.kind {
            ports::PlanKind::Normal => proto::plan::Kind::Normal,
            ports::PlanKind::Destroy => proto::plan::Kind::Destroy,
            ports::PlanKind::RefreshOnly => proto::plan::Kind::RefreshOnly,
            ports::PlanKind::Speculative => proto::plan::Kind::Speculative,
        };
        let r = self
            .command(Command::Plan(proto::Plan {
                kind: kind as i32,
                targets: request.targets.clone(),
                parallelism: request.parallelism,
            }))
            .await?;
        match r.payload {
            Some(proto::run_result::Payload::Plan(p)) => Ok(PlanResult {
                has_changes: p.has_changes,
                summary: PlanSummary {
                    add: p.add,
                    change: p.change,
                    destroy: p.destroy,
                },
                drifted: p.drifted,
                plan_file: p.plan_file,
            }),
            _ => Err(PortError::Unavailable("plan returned no outcome".into())),
        }
    }

    async fn show(&mut self) -> Result<ShownPlan, PortError> {
        match self.command(Command::Show(proto::Show {})).await?.payload {
            Some(proto::run_result::Payload::Show(s)) => Ok(ShownPlan {
                readable: s.readable,
                json: s.json,
            }),
            _ => Err(PortError::Unavailable("show returned no outcome".into())),
        }
    }

    async fn apply(&mut self, run_id: &str) -> Result<(), PortError> {
        self.run_as(run_id, Some(Command::Apply(proto::Apply {})))
            .await
            .map(drop)
    }

    async fn attach(&mut self, run_id: &str) -> Result<(), PortError> {
        self.run_as(run_id, None).await.map(drop)
    }

    async fn outputs(&mut self) -> Result<BTreeMap<String, OutputValue>, PortError> {
        match self
            .command(Command::Output(proto::Output {}))
            .await?
            .payload
        {
            Some(proto::run_result::Payload::Output(o)) => output_values(o),
            _ => Err(PortError::Unavailable("output returned no outcome".into())),
        }
    }

    async fn inventory(&mut self) -> Result<Vec<InventoryEntry>, PortError> {
        match self
            .command(Command::Inventory(proto::Inventory {}))
            .await?
            .payload
        {
            Some(proto::run_result::Payload::Inventory(i)) => Ok(i
                .resources
                .into_iter()
                .map(|r| InventoryEntry {
                    address: r.address,
                    resource_type: r.r#type,
                    identifier: (!r.id.is_empty()).then_some(r.id),
                })
                .collect()),
            _ => Err(PortError::Unavailable(
                "inventory returned no outcome".into(),
            )),
        }
    }

    async fn force_unlock(&mut self, lock_id: &str) -> Result<(), PortError> {
        self.command(Command::ForceUnlock(proto::ForceUnlock {
            lock_id: lock_id.into(),
        }))
        .await
        .map(drop)
    }

    async fn cleanup(&mut self) -> Result<(), PortError> {
        self.client.cleanup().await.map_err(port_error)
    }

    fn writes_for_object(&self) -> bool {
        self.writes
    }

    async fn save_plan(&mut self, plan: &PlanToStore) -> Result<(), PortError> {
        self.command(Command::SavePlan(proto::SavePlan {
            workspace: plan.workspace.clone(),
            plan_id: plan.id.clone(),
            is_destroy: plan.is_destroy,
            is_drift: plan.is_drift,
        }))
        .await
        .map(drop)
    }

    async fn delete_plan(&mut self, workspace: &str) -> Result<(), PortError> {
        self.command(Command::DeletePlan(proto::DeletePlan {
            workspace: workspace.to_string(),
        }))
        .await
        .map(drop)
    }

    async fn delete_outputs(&mut self, name: &str) -> Result<(), PortError> {
        self.command(Command::DeleteOutputs(proto::DeleteOutputs {
            name: name.to_string(),
            config_map: false,
        }))
        .await
        .map(drop)
    }

    async fn delete_outputs_config_map(&mut self, name: &str) -> Result<(), PortError> {
        self.command(Command::DeleteOutputs(proto::DeleteOutputs {
            name: name.to_string(),
            config_map: true,
        }))
        .await
        .map(drop)
    }

    async fn delete_state(&mut self, workspace: &str, suffix: &str) -> Result<(), PortError> {
        self.command(Command::DeleteState(proto::DeleteState {
            workspace: workspace.to_string(),
            suffix: suffix.to_string(),
        }))
        .await
        .map(drop)
    }

    async fn write_outputs(
        &mut self,
        request: &OutputsRequest,
    ) -> Result<BTreeMap<String, OutputValue>, PortError> {
        let result = self
            .command(Command::WriteOutputs(proto::WriteOutputs {
                target_json: json_or_empty(request.target.as_ref())?,
                remove: request.remove.clone().unwrap_or_default(),
                reveal: request.reveal.clone(),
                config_map_json: json_or_empty(request.config_map.as_ref())?,
                remove_config_map: request.remove_config_map.clone().unwrap_or_default(),
            }))
            .await?;
        match result.payload {
            Some(proto::run_result::Payload::Output(o)) => output_values(o),
            _ => Err(PortError::Unavailable(
                "write-outputs returned no outcome".into(),
            )),
        }
    }
}

/// Output values as the core wants them.
fn output_values(o: proto::OutputOutcome) -> Result<BTreeMap<String, OutputValue>, PortError> {
    o.outputs
        .into_iter()
        .map(|(k, v)| {
            let value =
                serde_json::from_str(&v.json).map_err(|e| PortError::Invalid(e.to_string()))?;
            Ok((
                k,
                OutputValue {
                    value,
                    sensitive: v.sensitive,
                },
            ))
        })
        .collect()
}
