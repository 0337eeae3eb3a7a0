//! **A benchmark tool, not a runner**: a [`RunnerPort`] that answers every command at once,
//! so that what the scale benchmark measures is the manager's own cost (watches, cache,
//! status writes, events, history) and not Terraform's or a Pod's.
//!
//! Each object's configuration is one `terraform_data` resource. The first plan of an object
//! creates it (so its first run plans, passes policies, applies and reads outputs, as a new
//! object's does); later plans and drift checks find nothing to do. Plans and outputs are
//! "stored by the runner" ([`RunnerSession::writes_for_object`]), as real runner Pods do with
//! their own identity: the manager makes none of those writes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tfops_core::api::{InventoryEntry, ObjectKey, RunnerRole, TerraformObject};
use tfops_core::ports::{
    OutputValue, OutputsRequest, PlanKind, PlanRequest, PlanResult, PlanSummary, PlanToStore,
    PortError, RunnerPort, RunnerSession, SetupRequest, ShownPlan,
};

/// The runner double. Cheap to clone (the applied objects are shared).
#[derive(Debug, Clone, Default)]
pub struct InstantRunner {
    applied: Arc<Mutex<BTreeSet<ObjectKey>>>,
}

impl InstantRunner {
    /// A double that has applied nothing yet.
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl RunnerPort for InstantRunner {
    async fn start(
        &self,
        object: &TerraformObject,
        _role: RunnerRole,
    ) -> Result<Box<dyn RunnerSession>, PortError> {
        Ok(Box::new(InstantSession {
            applied: self.applied.clone(),
            object: object.key(),
            planned: false,
        }))
    }

    async fn attach(
        &self,
        object: &TerraformObject,
        _runner: &str,
    ) -> Result<Box<dyn RunnerSession>, PortError> {
        self.start(object, RunnerRole::Plan).await
    }
}

/// One session of [`InstantRunner`].
struct InstantSession {
    applied: Arc<Mutex<BTreeSet<ObjectKey>>>,
    object: ObjectKey,
    /// The last plan creates the resource.
    planned: bool,
}

impl InstantSession {
    fn is_applied(&self) -> bool {
        self.applied
            .lock()
            .map(|a| a.contains(&self.object))
            .unwrap_or(false)
    }
}

fn plan_json(creates: bool) -> String {
    let changes = if creates {
        serde_json::json!([{
            "address": "terraform_data.x",
            "mode": "managed",
            "type": "terraform_data",
            "name": "x",
            "change": {"actions": ["create"], "before": null, "after": {"input": "hello"},
                       "after_unknown": {"id": true, "output": true}},
        }])
    } else {
        serde_json::json!([])
    };
    serde_json::json!({"format_version": "1.2", "resource_changes": changes}).to_string()
}

#[async_trait]
impl RunnerSession for InstantSession {
    fn binary(&self) -> String {
        "terraform 1.11.4 (instant runner double)".into()
    }

    fn runner(&self) -> String {
        "instant".into()
    }

    async fn setup(&mut self, _: &SetupRequest) -> Result<(), PortError> {
        Ok(())
    }

    async fn init(&mut self) -> Result<(), PortError> {
        Ok(())
    }

    async fn select_workspace(&mut self, _: &str) -> Result<(), PortError> {
        Ok(())
    }

    async fn plan(&mut self, request: &PlanRequest) -> Result<PlanResult, PortError> {
        let creates = request.kind == PlanKind::Normal && !self.is_applied();
        self.planned = creates;
        Ok(PlanResult {
            has_changes: creates,
            summary: PlanSummary {
                add: u32::from(creates),
                change: 0,
                destroy: 0,
            },
            drifted: Vec::new(),
            plan_file: if creates { vec![b'p'; 512] } else { Vec::new() },
        })
    }

    async fn show(&mut self) -> Result<ShownPlan, PortError> {
        Ok(ShownPlan {
            readable: if self.planned {
                "+ terraform_data.x\nPlan: 1 to add, 0 to change, 0 to destroy.\n".into()
            } else {
                "No changes.\n".into()
            },
            json: plan_json(self.planned),
        })
    }

    async fn apply(&mut self, _run_id: &str) -> Result<(), PortError> {
        if self.planned
            && let Ok(mut applied) = self.applied.lock()
        {
            applied.insert(self.object.clone());
        }
        self.planned = false;
        Ok(())
    }

    async fn attach(&mut self, _run_id: &str) -> Result<(), PortError> {
        Ok(())
    }

    async fn outputs(&mut self) -> Result<BTreeMap<String, OutputValue>, PortError> {
        Ok(BTreeMap::from([(
            "greeting".to_string(),
            OutputValue {
                value: serde_json::json!("hello"),
                sensitive: false,
            },
        )]))
    }

    async fn inventory(&mut self) -> Result<Vec<InventoryEntry>, PortError> {
        Ok(Vec::new())
    }

    async fn force_unlock(&mut self, _: &str) -> Result<(), PortError> {
        Ok(())
    }

    async fn cleanup(&mut self) -> Result<(), PortError> {
        Ok(())
    }

    fn writes_for_object(&self) -> bool {
        true
    }

    async fn save_plan(&mut self, _: &PlanToStore) -> Result<(), PortError> {
        Ok(())
    }

    async fn delete_plan(&mut self, _: &str) -> Result<(), PortError> {
        Ok(())
    }

    async fn write_outputs(
        &mut self,
        _: &OutputsRequest,
    ) -> Result<BTreeMap<String, OutputValue>, PortError> {
        self.outputs().await
    }
}
