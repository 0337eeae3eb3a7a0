//! A fake runner session: Terraform semantics on [`super::Infra`].

use std::collections::BTreeMap;

use async_trait::async_trait;

use super::{Call, FakeOp, FakeWorld};
use crate::api::{InventoryEntry, ObjectKey, RunnerRole};
use crate::ports::{
    OutputValue, OutputsRequest, OutputsSink, PlanKind, PlanRequest, PlanResult, PlanStore,
    PlanSummary, PlanToStore, PortError, RunnerSession, SetupRequest, ShownPlan, StateAdmin,
    StoredPlan,
};

/// A runner session over a [`FakeWorld`]. The configuration is the set of resources of the
/// uploaded revision plus one `terraform_data.var_<name>` per variable, so that new revisions
/// and variable edits both change the plan.
#[derive(Debug)]
pub struct FakeSession {
    world: FakeWorld,
    object: ObjectKey,
    session: usize,
    role: RunnerRole,
    desired: Option<BTreeMap<String, String>>,
    planned: Option<BTreeMap<String, String>>,
    /// What the last plan would make of the infrastructure (a speculative one included), for
    /// `show`.
    shown_target: Option<BTreeMap<String, String>>,
    /// The last plan's file and rendered forms, for [`RunnerSession::save_plan`].
    last_plan: Option<(Vec<u8>, ShownPlan)>,
}

impl FakeSession {
    pub(super) fn new(
        world: FakeWorld,
        object: ObjectKey,
        session: usize,
        role: RunnerRole,
    ) -> Self {
        Self {
            world,
            object,
            session,
            role,
            desired: None,
            planned: None,
            shown_target: None,
            last_plan: None,
        }
    }

    /// Records the command, then fails if a fault is set for it.
    fn call(&self, op: FakeOp) -> Result<(), PortError> {
        self.record(op);
        self.world.check(op)
    }

    fn record(&self, op: FakeOp) {
        let mut w = self.world.lock();
        let status = w
            .objects
            .get(&self.object)
            .map(|o| o.status.clone())
            .unwrap_or_default();
        w.calls.push(Call {
            object: self.object.clone(),
            op,
            session: self.session,
            role: self.role,
            status,
        });
    }

    /// Applies the last plan (what `terraform apply` of the saved plan does).
    async fn apply_now(&mut self) -> Result<(), PortError> {
        self.call(FakeOp::Apply)?;
        self.locked()?;
        let planned = self
            .planned
            .take()
            .ok_or_else(|| PortError::Terraform("Error: no saved plan to apply".into()))?;
        let mut w = self.world.lock();
        if let Some(interrupted) = w.interrupt_apply.take() {
            w.interrupted_applies += 1;
            let infra = w.infra.entry(self.object.clone()).or_default();
            let first = planned
                .keys()
                .chain(infra.state.keys())
                .filter(|k| planned.get(*k) != infra.state.get(*k))
                .min()
                .cloned();
            if let Some(k) = first {
                match planned.get(&k) {
                    Some(v) => {
                        infra.real.insert(k.clone(), v.clone());
                        infra.state.insert(k, v.clone());
                    }
                    None => {
                        infra.real.remove(&k);
                        infra.state.remove(&k);
                    }
                }
            }
            return Err(interrupted);
        }
        let infra = w.infra.entry(self.object.clone()).or_default();
        infra.real = planned.clone();
        infra.state = planned;
        if w.crash == super::Crash::Armed {
            w.crash = super::Crash::Applied;
        }
        Ok(())
    }

    fn locked(&self) -> Result<(), PortError> {
        let w = self.world.lock();
        let gone = w
            .infra
            .get(&self.object)
            .is_some_and(|i| i.lock_holder_gone);
        match w.infra.get(&self.object).and_then(|i| i.lock.clone()) {
            Some((lock_id, holder)) => Err(PortError::StateLocked {
                lock_id,
                holder,
                holder_gone: gone,
            }),
            None => Ok(()),
        }
    }
}

fn summary(from: &BTreeMap<String, String>, to: &BTreeMap<String, String>) -> PlanSummary {
    let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    PlanSummary {
        add: count(to.keys().filter(|k| !from.contains_key(*k)).count()),
        change: count(
            to.iter()
                .filter(|(k, v)| from.get(*k).is_some_and(|f| f != *v))
                .count(),
        ),
        destroy: count(from.keys().filter(|k| !to.contains_key(*k)).count()),
    }
}

#[async_trait]
impl RunnerSession for FakeSession {
    fn binary(&self) -> String {
        "fake-terraform 1.0.0".into()
    }

    fn runner(&self) -> String {
        super::runner_ref(self.session)
    }

    fn identity(&self) -> String {
        format!("fake:{}", self.role.as_str())
    }

    async fn setup(&mut self, request: &SetupRequest) -> Result<(), PortError> {
        self.call(FakeOp::Setup)?;
        let mut desired: BTreeMap<String, String> = serde_json::from_slice(&request.artifact.data)
            .map_err(|e| PortError::Invalid(format!("archive: {e}")))?;
        for (name, value) in &request.inputs.vars {
            desired.insert(format!("terraform_data.var_{name}"), value.to_string());
        }
        self.desired = Some(desired);
        Ok(())
    }

    async fn init(&mut self) -> Result<(), PortError> {
        self.call(FakeOp::Init)?;
        let at_init = {
            let w = self.world.lock();
            w.infra.get(&self.object).is_some_and(|i| i.lock_at_init)
        };
        if at_init { self.locked() } else { Ok(()) }
    }

    async fn select_workspace(&mut self, _: &str) -> Result<(), PortError> {
        self.call(FakeOp::Workspace)
    }

    async fn plan(&mut self, request: &PlanRequest) -> Result<PlanResult, PortError> {
        let op = if request.kind == PlanKind::RefreshOnly {
            FakeOp::RefreshPlan
        } else {
            FakeOp::Plan
        };
        self.call(op)?;
        // A speculative plan takes no lock (`-lock=false`), so a held lock does not stop it.
        if request.kind != PlanKind::Speculative {
            self.locked()?;
        }
        let desired = self.desired.clone().ok_or_else(|| {
            PortError::Terraform("Error: no configuration (setup did not run)".into())
        })?;
        let infra = self
            .world
            .lock()
            .infra
            .get(&self.object)
            .cloned()
            .unwrap_or_default();
        let (target, drifted) = match request.kind {
            PlanKind::Normal | PlanKind::Speculative => (desired, Vec::new()),
            PlanKind::Destroy => (BTreeMap::new(), Vec::new()),
            PlanKind::RefreshOnly => {
                let mut keys: Vec<String> = infra
                    .state
                    .keys()
                    .chain(infra.real.keys())
                    .cloned()
                    .collect();
                keys.sort();
                keys.dedup();
                let drifted = keys
                    .into_iter()
                    .filter(|k| infra.state.get(k) != infra.real.get(k))
                    .collect();
                (infra.real.clone(), drifted)
            }
        };
        let summary = summary(&infra.real, &target);
        let has_changes = match request.kind {
            PlanKind::RefreshOnly => !drifted.is_empty(),
            _ => target != infra.real,
        };
        let plan_file =
            serde_json::to_vec(&target).map_err(|e| PortError::Invalid(e.to_string()))?;
        // As the runner does: a speculative plan is never applied.
        self.shown_target = Some(target.clone());
        self.planned = (request.kind != PlanKind::Speculative).then_some(target);
        self.last_plan = Some((plan_file.clone(), ShownPlan::default()));
        Ok(PlanResult {
            has_changes,
            summary,
            drifted,
            plan_file,
        })
    }

    async fn show(&mut self) -> Result<ShownPlan, PortError> {
        self.call(FakeOp::Show)?;
        let planned = self.shown_target.clone().unwrap_or_default();
        let real = self
            .world
            .lock()
            .infra
            .get(&self.object)
            .map(|i| i.real.clone())
            .unwrap_or_default();
        // The shape of `terraform show -json`: what plan policies read.
        let mut addresses: Vec<&String> = planned.keys().chain(real.keys()).collect();
        addresses.sort();
        addresses.dedup();
        let changes: Vec<serde_json::Value> = addresses
            .into_iter()
            .filter_map(|a| {
                let (before, after) = (real.get(a), planned.get(a));
                let action = match (before, after) {
                    (None, Some(_)) => "create",
                    (Some(_), None) => "delete",
                    (Some(b), Some(n)) if b != n => "update",
                    _ => return None,
                };
                let (kind, name) = a.split_once('.').unwrap_or(("", a));
                Some(serde_json::json!({
                    "address": a, "type": kind, "name": name, "mode": "managed",
                    "change": {"actions": [action], "before": before, "after": after}
                }))
            })
            .collect();
        let doc = serde_json::json!({"format_version": "1.2", "resource_changes": changes});
        let shown = ShownPlan {
            readable: planned
                .iter()
                .map(|(k, v)| format!("{k} = {v}\n"))
                .collect(),
            json: doc.to_string(),
        };
        if let Some((_, last)) = &mut self.last_plan {
            *last = shown.clone();
        }
        self.world
            .lock()
            .shown
            .push((self.session, shown.json.clone()));
        Ok(shown)
    }

    async fn apply(&mut self, run_id: &str) -> Result<(), PortError> {
        // A run id the runner knows is never run again: its result is returned.
        if let Some(done) = self.world.lock().runs.get(run_id).cloned() {
            return done;
        }
        let result = self.apply_now().await;
        self.world
            .lock()
            .runs
            .insert(run_id.to_string(), result.clone());
        result
    }

    async fn attach(&mut self, run_id: &str) -> Result<(), PortError> {
        self.call(FakeOp::Attach)?;
        match self.world.lock().runs.get(run_id).cloned() {
            Some(done) => done,
            None => Err(PortError::NotFound(format!("no run {run_id}"))),
        }
    }

    async fn outputs(&mut self) -> Result<BTreeMap<String, OutputValue>, PortError> {
        self.call(FakeOp::Output)?;
        let w = self.world.lock();
        let state = w
            .infra
            .get(&self.object)
            .map(|i| i.state.clone())
            .unwrap_or_default();
        Ok(BTreeMap::from([
            (
                "resource_count".to_string(),
                OutputValue {
                    value: state.len().into(),
                    sensitive: false,
                },
            ),
            (
                "token".to_string(),
                OutputValue {
                    value: "s3cr3t".into(),
                    sensitive: true,
                },
            ),
        ]))
    }

    async fn inventory(&mut self) -> Result<Vec<InventoryEntry>, PortError> {
        self.call(FakeOp::Inventory)?;
        let w = self.world.lock();
        let state = w
            .infra
            .get(&self.object)
            .map(|i| i.state.clone())
            .unwrap_or_default();
        Ok(state
            .keys()
            .map(|address| InventoryEntry {
                address: address.clone(),
                resource_type: address.split('.').next().unwrap_or_default().to_string(),
                identifier: None,
            })
            .collect())
    }

    async fn force_unlock(&mut self, lock_id: &str) -> Result<(), PortError> {
        self.call(FakeOp::Unlock)?;
        let mut w = self.world.lock();
        let infra = w.infra.entry(self.object.clone()).or_default();
        match &infra.lock {
            Some((id, _)) if id == lock_id => {
                infra.lock = None;
                Ok(())
            }
            Some((id, _)) => Err(PortError::Terraform(format!(
                "Error: lock id {lock_id:?} does not match existing lock {id:?}"
            ))),
            None => Err(PortError::Terraform(
                "Error: failed to unlock state: no lock held".into(),
            )),
        }
    }

    fn writes_for_object(&self) -> bool {
        self.world.lock().runner_writes
    }

    async fn save_plan(&mut self, plan: &PlanToStore) -> Result<(), PortError> {
        let (binary, shown) = self
            .last_plan
            .clone()
            .ok_or_else(|| PortError::Terraform("Error: no saved plan to store".into()))?;
        let stored = StoredPlan {
            id: plan.id.clone(),
            binary,
            shown,
            is_destroy: plan.is_destroy,
            is_drift: plan.is_drift,
        };
        PlanStore::save(&self.world, &self.object, &plan.workspace, &stored).await
    }

    async fn delete_plan(&mut self, workspace: &str) -> Result<(), PortError> {
        PlanStore::delete(&self.world, &self.object, workspace).await
    }

    // Recorded as runner commands (the runner's identity removes them); the world's port
    // applies the fault injected for the operation.
    async fn delete_outputs(&mut self, name: &str) -> Result<(), PortError> {
        self.record(FakeOp::DeleteOutputs);
        OutputsSink::delete(&self.world, &self.object, name).await
    }

    async fn delete_outputs_config_map(&mut self, name: &str) -> Result<(), PortError> {
        self.record(FakeOp::DeleteConfigMap);
        OutputsSink::delete_config_map(&self.world, &self.object, name).await
    }

    async fn delete_state(&mut self, workspace: &str, suffix: &str) -> Result<(), PortError> {
        self.record(FakeOp::DeleteState);
        StateAdmin::delete_state(&self.world, &self.object, workspace, suffix).await
    }

    async fn write_outputs(
        &mut self,
        request: &OutputsRequest,
    ) -> Result<BTreeMap<String, OutputValue>, PortError> {
        let mut outputs = self.outputs().await?;
        crate::ports::write_outputs(&self.world, &self.object, request, &outputs).await?;
        for (name, value) in &mut outputs {
            if !request.reveal.contains(name) {
                value.value = serde_json::Value::Null;
            }
        }
        Ok(outputs)
    }

    async fn cleanup(&mut self) -> Result<(), PortError> {
        self.call(FakeOp::Cleanup)
    }
}
