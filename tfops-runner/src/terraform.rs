//! Terraform (or OpenTofu) commands: arguments in, typed results out.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use tokio::sync::{mpsc, watch};

use crate::exec::{self, Exit, Invocation, Stream};

/// The saved plan's file name in the configuration directory.
pub const PLAN_FILE: &str = "tfplan";

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum TfError {
    /// Terraform exited with an error; the text is its diagnostic.
    #[error("{diagnostic}")]
    Failed {
        /// Exit code.
        code: i32,
        /// Terraform's diagnostic, trimmed.
        diagnostic: String,
    },
    /// The state is locked by someone else.
    #[error("state locked by {holder} (lock id {lock_id})")]
    Locked {
        /// The lock id.
        lock_id: String,
        /// Who holds it.
        holder: String,
    },
    /// The command was cancelled.
    #[error("cancelled")]
    Cancelled,
    /// The process could not run.
    #[error(transparent)]
    Exec(#[from] exec::ExecError),
    /// Terraform's JSON could not be read.
    #[error("reading terraform's JSON output: {0}")]
    Json(String),
}

/// A plan's result.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlanOutcome {
    /// Whether applying would change anything.
    pub has_changes: bool,
    /// Resources to add.
    pub add: u32,
    /// Resources to change.
    pub change: u32,
    /// Resources to destroy.
    pub destroy: u32,
    /// Refresh-only plans: resources and outputs that drifted.
    pub drifted: Vec<String>,
    /// `show -json` of the saved plan (read once, for the summary and for whoever shows it).
    pub json: String,
}

/// The kinds of plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanKind {
    /// Normal.
    Normal,
    /// `-destroy`.
    Destroy,
    /// `-refresh-only`, for drift.
    RefreshOnly,
    /// `-lock=false`: a pull request's plan, read-only on the state.
    Speculative,
}

/// Runs commands of one binary in one directory.
#[derive(Debug, Clone)]
pub struct Terraform {
    /// `terraform` or `tofu`.
    pub program: PathBuf,
    /// The configuration directory.
    pub dir: PathBuf,
    /// Environment for every command.
    pub env: BTreeMap<String, String>,
    /// Time Terraform gets after SIGINT.
    pub grace: Duration,
}

/// Where a command's lines go and what cancels it.
pub struct Io {
    /// Log lines.
    pub log: mpsc::UnboundedSender<(Stream, String)>,
    /// Turns true to cancel.
    pub cancel: watch::Receiver<bool>,
}

impl Terraform {
    pub(crate) async fn exec(
        &self,
        args: &[String],
        io: &Io,
        capture: bool,
    ) -> Result<Exit, TfError> {
        let inv = Invocation {
            program: self.program.clone(),
            args: args.to_vec(),
            dir: self.dir.clone(),
            env: self.env.clone(),
            capture_stdout: capture,
            log_stdout: !capture,
        };
        let exit = exec::run(&inv, io.log.clone(), io.cancel.clone(), self.grace).await?;
        if exit.cancelled {
            return Err(TfError::Cancelled);
        }
        Ok(exit)
    }

    async fn checked(&self, args: &[String], io: &Io, capture: bool) -> Result<Exit, TfError> {
        let exit = self.exec(args, io, capture).await?;
        if exit.code != 0 {
            return Err(failure(&exit));
        }
        Ok(exit)
    }

    /// `init -input=false -upgrade -force-copy`.
    ///
    /// # Errors
    /// [`TfError`].
    pub async fn init(&self, io: &Io) -> Result<(), TfError> {
        self.checked(
            &args(&[
                "init",
                "-input=false",
                "-upgrade",
                "-force-copy",
                "-no-color",
            ]),
            io,
            false,
        )
        .await
        .map(drop)
    }

    /// Selects `workspace`, creating it when missing.
    ///
    /// # Errors
    /// [`TfError`].
    pub async fn select_workspace(&self, workspace: &str, io: &Io) -> Result<(), TfError> {
        let selected = std::fs::read_to_string(self.dir.join(".terraform/environment"))
            .unwrap_or_else(|_| "default".into());
        if selected.trim() == workspace {
            // Already the one (a fresh working directory is on `default`): two commands saved
            // on every run, the common case.
            return Ok(());
        }
        let list = self
            .checked(&args(&["workspace", "list", "-no-color"]), io, true)
            .await?;
        let exists = list
            .stdout
            .lines()
            .any(|l| l.trim_start_matches('*').trim() == workspace);
        let verb = if exists { "select" } else { "new" };
        self.checked(
            &args(&["workspace", verb, "-no-color", workspace]),
            io,
            false,
        )
        .await
        .map(drop)
    }

    /// `plan -out`, with `-detailed-exitcode`; a refresh-only plan also reports what drifted.
    ///
    /// # Errors
    /// [`TfError`].
    pub async fn plan(
        &self,
        kind: PlanKind,
        targets: &[String],
        parallelism: i32,
        io: &Io,
    ) -> Result<PlanOutcome, TfError> {
        let mut a = args(&["plan", "-input=false", "-no-color", "-detailed-exitcode"]);
        a.push(format!("-out={PLAN_FILE}"));
        match kind {
            PlanKind::Normal => {}
            PlanKind::Destroy => a.push("-destroy".into()),
            PlanKind::RefreshOnly => a.push("-refresh-only".into()),
            PlanKind::Speculative => a.push("-lock=false".into()),
        }
        a.extend(targets.iter().map(|t| format!("-target={t}")));
        if parallelism > 0 {
            a.push(format!("-parallelism={parallelism}"));
        }
        let exit = self.exec(&a, io, false).await?;
        if exit.code != 0 && exit.code != 2 {
            return Err(failure(&exit));
        }
        if kind == PlanKind::RefreshOnly && exit.code == 0 {
            // Nothing changed at all, so nothing drifted: the steady state needs no `show`.
            // (Exit 2 can still mean no drift; the JSON below decides then.)
            return Ok(PlanOutcome::default());
        }
        let json = self.show_json(io).await?;
        let mut outcome = summarize(&json, kind)?;
        outcome.json = json;
        outcome.has_changes = if kind == PlanKind::RefreshOnly {
            !outcome.drifted.is_empty()
        } else {
            exit.code == 2
        };
        Ok(outcome)
    }

    /// `show -json` of the saved plan.
    ///
    /// # Errors
    /// [`TfError`].
    pub async fn show_json(&self, io: &Io) -> Result<String, TfError> {
        Ok(self
            .checked(&args(&["show", "-json", "-no-color", PLAN_FILE]), io, true)
            .await?
            .stdout)
    }

    /// `show` of the saved plan, for humans.
    ///
    /// # Errors
    /// [`TfError`].
    pub async fn show_text(&self, io: &Io) -> Result<String, TfError> {
        Ok(self
            .checked(&args(&["show", "-no-color", PLAN_FILE]), io, true)
            .await?
            .stdout)
    }

    /// Applies the saved plan.
    ///
    /// # Errors
    /// [`TfError`].
    pub async fn apply(&self, io: &Io) -> Result<(), TfError> {
        self.changing(
            &args(&["apply", "-input=false", "-no-color", PLAN_FILE]),
            io,
        )
        .await
    }

    /// `output -json`: name → (JSON value, sensitive).
    ///
    /// # Errors
    /// [`TfError`].
    pub async fn outputs(
        &self,
        io: &Io,
    ) -> Result<BTreeMap<String, (serde_json::Value, bool)>, TfError> {
        #[derive(Deserialize)]
        struct Out {
            #[serde(default)]
            sensitive: bool,
            value: serde_json::Value,
        }
        let exit = self
            .checked(&args(&["output", "-json", "-no-color"]), io, true)
            .await?;
        let map: BTreeMap<String, Out> =
            serde_json::from_str(exit.stdout.trim()).map_err(|e| TfError::Json(e.to_string()))?;
        Ok(map
            .into_iter()
            .map(|(k, v)| (k, (v.value, v.sensitive)))
            .collect())
    }

    /// The resources in the state: (address, type, id).
    ///
    /// # Errors
    /// [`TfError`].
    pub async fn inventory(&self, io: &Io) -> Result<Vec<(String, String, String)>, TfError> {
        let exit = self
            .checked(&args(&["show", "-json", "-no-color"]), io, true)
            .await?;
        let v: serde_json::Value =
            serde_json::from_str(exit.stdout.trim()).map_err(|e| TfError::Json(e.to_string()))?;
        let mut out = Vec::new();
        collect_resources(&v["values"]["root_module"], &mut out);
        Ok(out)
    }

    /// `destroy -auto-approve`.
    ///
    /// # Errors
    /// [`TfError`].
    pub async fn destroy(
        &self,
        targets: &[String],
        parallelism: i32,
        io: &Io,
    ) -> Result<(), TfError> {
        let mut a = args(&["destroy", "-input=false", "-no-color", "-auto-approve"]);
        a.extend(targets.iter().map(|t| format!("-target={t}")));
        if parallelism > 0 {
            a.push(format!("-parallelism={parallelism}"));
        }
        self.changing(&a, io).await
    }

    /// `force-unlock -force <lock_id>`.
    ///
    /// # Errors
    /// [`TfError`].
    pub async fn force_unlock(&self, lock_id: &str, io: &Io) -> Result<(), TfError> {
        self.checked(&args(&["force-unlock", "-force", lock_id]), io, false)
            .await
            .map(drop)
    }

    /// `version -json`: the version number.
    ///
    /// # Errors
    /// [`TfError`].
    pub async fn version(&self, io: &Io) -> Result<String, TfError> {
        let exit = self.checked(&args(&["version", "-json"]), io, true).await?;
        let v: serde_json::Value =
            serde_json::from_str(exit.stdout.trim()).map_err(|e| TfError::Json(e.to_string()))?;
        Ok(v["terraform_version"]
            .as_str()
            .unwrap_or("unknown")
            .to_string())
    }
}

pub(crate) fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| (*s).to_string()).collect()
}

/// A failed command as an error: a held lock is recognised from Terraform's "Lock Info".
/// Besides the usual "Error acquiring the state lock", the kubernetes backend says "the state
/// is already locked by another terraform client" (OpenTofu: "tofu client") when `init`, or
/// any command creating a workspace's first state, finds the lock held.
pub(crate) fn failure(exit: &Exit) -> TfError {
    let err = &exit.stderr;
    let locked = err.contains("Error acquiring the state lock")
        || err.contains("Error locking state")
        || err.contains("state is already locked by another");
    if locked {
        let field = |name: &str| {
            err.lines()
                .find_map(|l| {
                    l.trim()
                        .trim_start_matches('│')
                        .trim()
                        .strip_prefix(name)
                        .map(|v| v.trim().to_string())
                })
                .unwrap_or_default()
        };
        return TfError::Locked {
            lock_id: field("ID:"),
            holder: field("Who:"),
        };
    }
    TfError::Failed {
        code: exit.code,
        diagnostic: exec::diagnostic(err),
    }
}

/// Change counts, and for a refresh-only plan what drifted, from a plan's JSON. Drift is what
/// Terraform found changed outside it: `resource_drift` entries, and outputs whose value a
/// refresh changes (a data source that reads something that moved).
pub fn summarize(json: &str, kind: PlanKind) -> Result<PlanOutcome, TfError> {
    let v: serde_json::Value =
        serde_json::from_str(json.trim()).map_err(|e| TfError::Json(e.to_string()))?;
    let mut out = PlanOutcome::default();
    for rc in v["resource_changes"].as_array().into_iter().flatten() {
        match tfops_core::plan::actions(rc).as_slice() {
            ["create"] => out.add += 1,
            ["update"] => out.change += 1,
            ["delete"] => out.destroy += 1,
            ["delete", "create"] | ["create", "delete"] => {
                out.add += 1;
                out.destroy += 1;
            }
            _ => {}
        }
    }
    if kind != PlanKind::RefreshOnly {
        return Ok(out);
    }
    for rd in v["resource_drift"].as_array().into_iter().flatten() {
        if let Some(address) = rd["address"].as_str() {
            out.drifted.push(address.to_string());
        }
    }
    if let Some(outputs) = v["output_changes"].as_object() {
        for (name, change) in outputs {
            let noop = change["actions"]
                .as_array()
                .is_some_and(|a| a.len() == 1 && a[0] == "no-op");
            if !noop {
                out.drifted.push(format!("output.{name}"));
            }
        }
    }
    Ok(out)
}

fn collect_resources(module: &serde_json::Value, out: &mut Vec<(String, String, String)>) {
    for r in module["resources"].as_array().into_iter().flatten() {
        let address = r["address"].as_str().unwrap_or_default().to_string();
        let kind = r["type"].as_str().unwrap_or_default().to_string();
        let id = r["values"]["id"].as_str().unwrap_or_default().to_string();
        if r["mode"] == "managed" {
            out.push((address, kind, id));
        }
    }
    for child in module["child_modules"].as_array().into_iter().flatten() {
        collect_resources(child, out);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn exit(stderr: &str) -> Exit {
        Exit {
            code: 1,
            cancelled: false,
            stdout: String::new(),
            stderr: stderr.into(),
        }
    }

    /// What `init` prints when the lock of the workspace's first state is held: Terraform's
    /// "Error loading state:" around the kubernetes backend's lock error and its Lock Info
    /// (the holder as the soak, seed 20261205, found it).
    #[test]
    fn a_lock_found_while_creating_a_workspaces_first_state_is_a_held_lock() {
        for client in ["terraform", "tofu"] {
            let stderr = format!(
                "│ Error: Error loading state: the state is already locked by another {client} client\n│ \n│ Lock Info:\n│   ID:        5f0c-init\n│   Path:      \n│   Operation: init\n│   Who:       65532@cache-tf-runner-4461a52e7b\n"
            );
            match failure(&exit(&stderr)) {
                TfError::Locked { lock_id, holder } => {
                    assert_eq!(lock_id, "5f0c-init");
                    assert_eq!(holder, "65532@cache-tf-runner-4461a52e7b");
                }
                other => panic!("{client}: {other:?}"),
            }
        }
        assert!(matches!(
            failure(&exit("│ Error: Unsupported argument")),
            TfError::Failed { .. }
        ));
    }
}
