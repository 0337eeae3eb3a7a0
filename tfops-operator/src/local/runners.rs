//! The runner port of local mode: one runner process per environment, started on first use
//! and kept for the rest of the command. An object's runner gets `spec.runner.podTemplate.spec.env`
//! (its literal values) on top of the user's environment; with `spec.runner.apply`, the apply
//! runner is a second process with the apply part's environment merged over it, so the split
//! between plan and apply identities can be tried without a cluster.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use tfops_core::api::{RunnerRole, TerraformObject};
use tfops_core::ports::{PortError, RunnerPort, RunnerSession};

use super::output::Printer;
use super::runner::{LocalRunner, check_binary};

/// A runner's environment: the literal `env` entries of its part, in order.
type Env = Vec<(String, String)>;

/// The runner processes of one local command.
pub struct LocalRunners {
    work: PathBuf,
    binary: String,
    printer: Printer,
    started: tokio::sync::Mutex<BTreeMap<(RunnerRole, Env), Arc<LocalRunner>>>,
}

impl LocalRunners {
    /// Runners of `binary` working under `work`; none runs until a session needs it.
    ///
    /// # Errors
    /// When no such binary can be run (said before anything starts).
    pub fn new(
        work: PathBuf,
        binary: &str,
        printer: Printer,
    ) -> Result<Self, super::runner::RunnerStartError> {
        check_binary(binary)?;
        Ok(Self {
            work,
            binary: binary.to_string(),
            printer,
            started: tokio::sync::Mutex::new(BTreeMap::new()),
        })
    }

    /// Stops every runner started: running Terraform commands are cancelled (SIGTERM) and
    /// release their state locks before the runners exit.
    pub async fn stop(&self) {
        let all: Vec<Arc<LocalRunner>> = std::mem::take(&mut *self.started.lock().await)
            .into_values()
            .collect();
        for runner in all {
            runner.stop().await;
        }
    }

    async fn runner(&self, role: RunnerRole, env: Env) -> Result<Arc<LocalRunner>, PortError> {
        let mut started = self.started.lock().await;
        let key = (role, env);
        if let Some(r) = started.get(&key) {
            return Ok(r.clone());
        }
        let work = self
            .work
            .join(format!("{}-{}", role.as_str(), started.len()));
        let identity = format!("local:{}", role.as_str());
        let runner =
            LocalRunner::start(&work, &self.binary, self.printer.clone(), &key.1, identity)
                .await
                .map_err(|e| PortError::Unavailable(e.to_string()))?;
        let runner = Arc::new(runner);
        started.insert(key, runner.clone());
        Ok(runner)
    }
}

/// The literal environment of the runner of `role` (`valueFrom` entries need a cluster and
/// are left out).
fn environment(object: &TerraformObject, role: RunnerRole) -> Env {
    object
        .spec
        .runner
        .for_role(role)
        .pod_template
        .spec
        .env
        .into_iter()
        .filter_map(|e| e.value.map(|v| (e.name, v)))
        .collect()
}

#[async_trait]
impl RunnerPort for LocalRunners {
    async fn start(
        &self,
        object: &TerraformObject,
        role: RunnerRole,
    ) -> Result<Box<dyn RunnerSession>, PortError> {
        let role = if object.spec.runner.splits_apply() {
            role
        } else {
            RunnerRole::Plan
        };
        let runner = self.runner(role, environment(object, role)).await?;
        runner.session(object).await
    }

    /// Only this command's own runners can be attached to: a runner of an earlier `tfops`
    /// process stopped with it (and its commands with it).
    async fn attach(
        &self,
        object: &TerraformObject,
        runner: &str,
    ) -> Result<Box<dyn RunnerSession>, PortError> {
        let found = self
            .started
            .lock()
            .await
            .values()
            .find(|r| r.endpoint() == runner)
            .cloned();
        match found {
            Some(r) => r.session(object).await,
            None => Err(PortError::NotFound(format!(
                "runner {runner} belonged to an earlier tfops command and stopped with it"
            ))),
        }
    }
}
