//! Following a run as it goes: Terraform's output read from the runner Pod's log
//! (`pods/log?follow=true`), where the runner writes each line of a command as an event of
//! target [`tfops_runner::OUTPUT_TARGET`]. The caller's own client reads it, so what it may
//! see is what RBAC grants it (`pods` get/watch and `pods/log` get in the object's namespace).

use futures::{AsyncBufReadExt, StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, LogParams};
use kube::runtime::wait::await_condition;
use tfops_core::api::ObjectKey;
use tfops_core::naming;

use crate::actions::{ActionError, Actions};
use crate::runner::pod::CONTAINER;

/// One line of Terraform's output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputLine {
    /// The run it belongs to.
    pub run_id: String,
    /// The command (`init`, `plan`, `apply`, …).
    pub command: String,
    /// `stdout` or `stderr`.
    pub stream: String,
    /// The line as Terraform printed it.
    pub line: String,
}

/// The output line in one line of the runner's JSON log, if it is one (the runner's own
/// messages are not).
pub fn output_line(log_line: &str) -> Option<OutputLine> {
    let event: serde_json::Value = serde_json::from_str(log_line).ok()?;
    if event["target"] != tfops_runner::OUTPUT_TARGET {
        return None;
    }
    let text = |field: &str| event[field].as_str().unwrap_or_default().to_string();
    Some(OutputLine {
        run_id: text("run_id"),
        command: text("command"),
        stream: text("stream"),
        line: event["message"].as_str()?.to_string(),
    })
}

/// Whether a run of the object is under way (`Reconciling` is `True`).
fn reconciling(t: &crate::resource::Terraform) -> bool {
    t.status.as_ref().is_some_and(|s| {
        s.conditions.iter().any(|c| {
            c.type_ == "Reconciling" && c.status == tfops_core::conditions::ConditionStatus::True
        })
    })
}

/// Whether the Pod's runner container has started (its log can be read).
fn started(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .is_some_and(|c| {
            c.iter().any(|c| {
                c.name == CONTAINER
                    && c.state
                        .as_ref()
                        .is_some_and(|s| s.running.is_some() || s.terminated.is_some())
            })
        })
}

impl Actions {
    fn pods(&self, key: &ObjectKey) -> (Api<Pod>, String) {
        (
            Api::namespaced(self.client().clone(), &key.namespace),
            naming::runner_pod_name(&key.name),
        )
    }

    /// Whether a run of the object is under way: its runner Pod exists and has started.
    ///
    /// # Errors
    /// Those of [`Actions::get`]; RBAC on Pods.
    pub async fn run_in_progress(&self, key: &ObjectKey) -> Result<bool, ActionError> {
        self.get(key).await?;
        Ok(self.started_runner(key).await?.is_some())
    }

    /// The runner Pod of the object that has started: the plan runner's, else the apply
    /// runner's.
    async fn started_runner(&self, key: &ObjectKey) -> Result<Option<String>, ActionError> {
        let (pods, name) = self.pods(key);
        for name in [name, naming::apply_runner_pod_name(&key.name)] {
            match pods.get_opt(&name).await {
                Ok(pod) if pod.as_ref().is_some_and(started) => return Ok(Some(name)),
                Ok(_) => {}
                Err(e) => return Err(self.failed(format!("reading the runner Pod {name}"), e)),
            }
        }
        Ok(None)
    }

    /// Waits until a run of the object is under way (its runner Pod has started).
    ///
    /// # Errors
    /// RBAC on Pods; the watch's.
    pub async fn wait_for_run(&self, key: &ObjectKey) -> Result<(), ActionError> {
        let (pods, name) = self.pods(key);
        await_condition(pods, &name, |p: Option<&Pod>| p.is_some_and(started))
            .await
            .map_err(|e| ActionError::Watch(e.to_string()))?;
        Ok(())
    }

    /// After the plan runner's Pod ended: the apply runner's Pod (`spec.runner.apply`) once
    /// it has started, or `None` when the run ends without one (nothing to apply, or waiting
    /// for approval) or the object does not apply as a separate identity.
    ///
    /// # Errors
    /// Those of [`Actions::get`]; RBAC on Pods; the watches'.
    pub async fn wait_for_apply_runner(
        &self,
        key: &ObjectKey,
    ) -> Result<Option<String>, ActionError> {
        let object = self.get(key).await?;
        if !object.spec.runner.splits_apply() {
            return Ok(None);
        }
        let (pods, _) = self.pods(key);
        let name = naming::apply_runner_pod_name(&key.name);
        let objects: Api<crate::resource::Terraform> =
            Api::namespaced(self.client().clone(), &key.namespace);
        let started = await_condition(pods, &name, |p: Option<&Pod>| p.is_some_and(started));
        let over = await_condition(
            objects,
            &key.name,
            |t: Option<&crate::resource::Terraform>| t.is_none_or(|t| !reconciling(t)),
        );
        tokio::select! {
            r = started => r.map(|_| Some(name)).map_err(|e| ActionError::Watch(e.to_string())),
            r = over => r.map(|_| None).map_err(|e| ActionError::Watch(e.to_string())),
        }
    }

    /// Streams the output of the run under way to `on_line` until its runner Pod ends (the
    /// plan runner's, then the apply runner's when the run goes on there).
    ///
    /// # Errors
    /// RBAC on `pods/log`; the stream's.
    pub async fn follow_output(
        &self,
        key: &ObjectKey,
        mut on_line: impl FnMut(OutputLine) + Send,
    ) -> Result<(), ActionError> {
        let (_, plan) = self.pods(key);
        let first = self.started_runner(key).await?.unwrap_or(plan.clone());
        self.follow_pod(key, &first, &mut on_line).await?;
        if first == plan
            && let Some(apply) = self.wait_for_apply_runner(key).await?
        {
            self.follow_pod(key, &apply, &mut on_line).await?;
        }
        Ok(())
    }

    async fn follow_pod(
        &self,
        key: &ObjectKey,
        name: &str,
        on_line: &mut (impl FnMut(OutputLine) + Send),
    ) -> Result<(), ActionError> {
        let (pods, _) = self.pods(key);
        let params = LogParams {
            container: Some(CONTAINER.to_string()),
            follow: true,
            ..LogParams::default()
        };
        let doing = || format!("following the log of the runner Pod {name}");
        let log = pods
            .log_stream(name, &params)
            .await
            .map_err(|e| self.failed(doing(), e))?;
        let mut lines = log.lines().boxed();
        while let Some(line) = lines
            .try_next()
            .await
            .map_err(|e| ActionError::Watch(format!("{}: {e}", doing())))?
        {
            if let Some(output) = output_line(&line) {
                on_line(output);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn output_lines_are_told_from_the_runners_own_messages() {
        let out = output_line(
            r#"{"timestamp":"t","level":"INFO","message":"Plan: 1 to add, 0 to change, 0 to destroy.","run_id":"r1","command":"plan","stream":"stdout","target":"terraform"}"#,
        )
        .unwrap();
        assert_eq!(
            out,
            OutputLine {
                run_id: "r1".into(),
                command: "plan".into(),
                stream: "stdout".into(),
                line: "Plan: 1 to add, 0 to change, 0 to destroy.".into(),
            }
        );
        assert_eq!(
            output_line(
                r#"{"level":"INFO","message":"runner serving","target":"tfops_runner::process"}"#
            ),
            None
        );
        assert_eq!(output_line("not json"), None);
    }
}
