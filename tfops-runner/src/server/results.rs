//! A command's result as the runner answers it, and the errors behind it in words.

use std::sync::Arc;

use super::config::held_by_own_host;
use super::context::Context;
use crate::proto::{self, run_request::Command};
use crate::stores::{ObjectRef, Stores};
use crate::terraform::TfError;
use tfops_core::ports::PortError;

pub(super) fn failed(diagnostic: String) -> proto::RunResult {
    proto::RunResult {
        status: proto::run_result::Status::Failed as i32,
        exit_code: 1,
        diagnostic,
        ..Default::default()
    }
}

pub(super) fn from_error(e: TfError, pod: Option<&str>) -> proto::RunResult {
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

pub(super) fn succeeded(payload: Option<proto::run_result::Payload>) -> proto::RunResult {
    proto::RunResult {
        status: proto::run_result::Status::Succeeded as i32,
        payload,
        ..Default::default()
    }
}

/// The stores of `context`, or the failure a store command gets without them.
pub(super) fn stores_of(context: &Context) -> Result<(&Arc<dyn Stores>, &ObjectRef), TfError> {
    context
        .stores
        .as_ref()
        .map(|(s, o)| (s, o))
        .ok_or_else(|| TfError::Failed {
            code: 1,
            diagnostic: "this runner has no stores for plans and outputs (it runs outside a cluster, or Setup did not run)".into(),
        })
}

pub(super) fn store_failure(e: PortError) -> TfError {
    TfError::Failed {
        code: 1,
        diagnostic: e.to_string(),
    }
}

pub(super) fn source_chain(e: &dyn std::error::Error) -> String {
    let mut parts = Vec::new();
    let mut cur = e.source();
    while let Some(s) = cur {
        parts.push(s.to_string());
        cur = s.source();
    }
    parts.join(": ")
}

/// The command's name in log lines.
pub(super) fn command_name(command: &Command) -> &'static str {
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
