//! What a local command reports: each object's `Ready`, its history, its pending plan.

use serde::Serialize;
use tfops_core::api::{ObjectKey, TerraformStatus};
use tfops_core::conditions::{self, ConditionStatus, ConditionType};

use super::{Local, LocalError};

/// One object's outcome.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectReport {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `Ready` status (`True`, `False`, `Unknown`, or empty when absent).
    pub ready: String,
    /// `Ready` reason.
    pub reason: String,
    /// `Ready` message.
    pub message: String,
    /// The whole status.
    pub status: TerraformStatus,
}

impl ObjectReport {
    pub(super) fn of(key: &ObjectKey, status: &TerraformStatus) -> Self {
        let ready = conditions::find(&status.conditions, ConditionType::Ready);
        Self {
            namespace: key.namespace.clone(),
            name: key.name.clone(),
            ready: ready.map(|c| format!("{:?}", c.status)).unwrap_or_default(),
            reason: ready.map(|c| c.reason.clone()).unwrap_or_default(),
            message: ready.map(|c| c.message.clone()).unwrap_or_default(),
            status: status.clone(),
        }
    }

    /// Whether `Ready` is `True`.
    pub fn is_ready(&self) -> bool {
        self.ready == "True"
    }
}

impl Local {
    /// The kept status of the objects (all when `name` is `None`).
    ///
    /// # Errors
    /// [`LocalError`].
    pub fn status(&self, name: Option<&str>) -> Result<Vec<ObjectReport>, LocalError> {
        let keys: Vec<ObjectKey> = match name {
            Some(n) => vec![self.find(n).map(|m| m.key.clone()).or_else(|_| {
                self.world
                    .dir
                    .keys()
                    .into_iter()
                    .find(|k| k.name == n)
                    .ok_or_else(|| LocalError::NoSuchObject(n.into()))
            })?],
            None => self.world.dir.keys(),
        };
        let mut out = Vec::new();
        for k in keys {
            if let Some(p) = self.world.dir.load(&k)? {
                out.push(ObjectReport::of(&k, &p.status));
            }
        }
        Ok(out)
    }

    /// The last runs of an object, newest first.
    ///
    /// # Errors
    /// [`LocalError`].
    pub fn history(&self, name: &str) -> Result<Vec<tfops_core::history::RunEntry>, LocalError> {
        let key = self.find(name).map(|m| m.key.clone())?;
        Ok(self.world.dir.history(&key)?)
    }

    /// The readable form of the pending plan.
    ///
    /// # Errors
    /// [`LocalError::NoPendingPlan`].
    pub fn plan_text(&self, name: &str) -> Result<String, LocalError> {
        let key = self.find(name).map(|m| m.key.clone())?;
        if self.persisted(&key).status.plan.pending.is_empty() {
            return Err(LocalError::NoPendingPlan(key.to_string()));
        }
        std::fs::read_to_string(self.world.dir.plan_dir(&key).join("readable.txt"))
            .map_err(|_| LocalError::NoPendingPlan(key.to_string()))
    }

    /// Prints reports as a table (or JSON), returns whether every object is Ready.
    pub fn print(&self, reports: &[ObjectReport]) -> bool {
        if self.opts.json {
            println!(
                "{}",
                serde_json::to_string_pretty(reports).unwrap_or_else(|_| "[]".into())
            );
        } else {
            let mut rows = vec![vec![
                "OBJECT".to_string(),
                "READY".into(),
                "REASON".into(),
                "MESSAGE".into(),
            ]];
            for r in reports {
                let ready = match r.ready.as_str() {
                    "True" => self.printer.paint("32", "True"),
                    "False" => self.printer.paint("31", "False"),
                    other => self
                        .printer
                        .paint("33", if other.is_empty() { "-" } else { other }),
                };
                rows.push(vec![
                    format!("{}/{}", r.namespace, r.name),
                    ready,
                    r.reason.clone(),
                    r.message.clone(),
                ]);
            }
            println!();
            self.printer.table(&rows);
        }
        reports.iter().all(ObjectReport::is_ready)
    }
}

/// Whether the status says a run is waiting for approval (for messages).
pub fn pending_plan(status: &TerraformStatus) -> Option<&str> {
    let ready = conditions::find(&status.conditions, ConditionType::Ready)?;
    (ready.status == ConditionStatus::Unknown && !status.plan.pending.is_empty())
        .then_some(status.plan.pending.as_str())
}
