//! The port implementations of [`FakeWorld`].

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;

use super::{Crash, FakeOp, FakeSession, FakeWorld, add};
use crate::api::{
    FINALIZER, ObjectKey, RunnerRole, SourceRef, TerraformObject, TerraformStatus, VarsFromKind,
    WriteOutputsToConfigMap, WriteOutputsToSecret,
};
use crate::ports::{
    Artifact, Clock, ConfigMapData, Event, EventSink, HealthChecker, InputsPort, ObjectWriter,
    OutputValue, OutputsSink, PlanStore, PortError, ResolvedHealthCheck, ResolvedInputs, Revision,
    RunnerPort, RunnerSession, SourcePort, StateAdmin, StoredPlan,
};

#[async_trait]
impl SourcePort for FakeWorld {
    async fn resolve(&self, _: &ObjectKey, source: &SourceRef) -> Result<Revision, PortError> {
        self.check(FakeOp::Resolve)?;
        // A commit is taken as given, as Git sources do (the fetch finds it or not).
        if let Some(commit) = &source.reference.commit {
            return Ok(Revision {
                reference: commit.clone(),
                digest: format!("sha1:{commit}"),
            });
        }
        let w = self.lock();
        let (reference, sha) = w.sources.get(&source.url).ok_or_else(|| {
            PortError::NotFound(format!("repository {} does not exist", source.url))
        })?;
        Ok(Revision {
            reference: reference.clone(),
            digest: format!("sha1:{sha}"),
        })
    }

    async fn fetch(
        &self,
        _: &ObjectKey,
        _: &SourceRef,
        revision: &Revision,
        _: Option<&str>,
    ) -> Result<Artifact, PortError> {
        self.check(FakeOp::Fetch)?;
        let w = self.lock();
        let tree = w
            .trees
            .get(revision.sha())
            .ok_or_else(|| PortError::NotFound(format!("revision {revision} does not exist")))?;
        let data = serde_json::to_vec(tree).map_err(|e| PortError::Invalid(e.to_string()))?;
        let sha256 = crate::digest::sha256_hex(&data);
        Ok(Artifact {
            sha256,
            data: Arc::new(data),
        })
    }

    async fn changes(
        &self,
        _: &ObjectKey,
        _: &SourceRef,
        from: &Revision,
        to: &Revision,
    ) -> Result<crate::source::SourceChanges, PortError> {
        self.check(FakeOp::Compare)?;
        let mut w = self.lock();
        let pair = (from.sha().to_string(), to.sha().to_string());
        w.comparisons.push(pair.clone());
        Ok(w.changed_files
            .get(&pair)
            .cloned()
            .map_or(crate::source::SourceChanges::Unknown, |files| {
                crate::source::SourceChanges::Files(files)
            }))
    }
}

impl crate::inputs::DataSource for FakeWorld {
    fn data(
        &self,
        _: VarsFromKind,
        namespace: &str,
        name: &str,
    ) -> Option<BTreeMap<String, Vec<u8>>> {
        // Secrets and ConfigMaps share one map in the fake world.
        self.lock()
            .secrets
            .get(&(namespace.to_string(), name.to_string()))
            .map(|d| {
                d.iter()
                    .map(|(k, v)| (k.clone(), v.clone().into_bytes()))
                    .collect()
            })
    }
}

#[async_trait]
impl InputsPort for FakeWorld {
    async fn resolve(&self, object: &TerraformObject) -> Result<ResolvedInputs, PortError> {
        self.check(FakeOp::Inputs)?;
        crate::inputs::resolve(object, self)
    }
}

#[async_trait]
impl RunnerPort for FakeWorld {
    async fn start(
        &self,
        object: &TerraformObject,
        role: RunnerRole,
    ) -> Result<Box<dyn RunnerSession>, PortError> {
        self.check(FakeOp::Start)?;
        let session = {
            let mut w = self.lock();
            // A runner left over from an earlier run is replaced by the new one.
            w.leftover_runners.remove(&object.key());
            w.sessions += 1;
            w.session_roles.push(role);
            if role == RunnerRole::Apply && std::mem::take(&mut w.change_at_hand_over) {
                let infra = w.infra.entry(object.key()).or_default();
                for side in [&mut infra.state, &mut infra.real] {
                    side.insert("terraform_data.meanwhile".into(), "elsewhere".into());
                }
            }
            w.sessions - 1
        };
        Ok(Box::new(FakeSession::new(
            self.clone(),
            object.key(),
            session,
            role,
        )))
    }

    async fn attach(
        &self,
        object: &TerraformObject,
        runner: &str,
    ) -> Result<Box<dyn RunnerSession>, PortError> {
        self.check(FakeOp::Attach)?;
        // The apply runner looked for by its Pod's name (a probe of a lock's holder): there
        // while the world says so, and then busy (it cannot be attached to).
        if runner == crate::naming::apply_runner_pod_name(&object.metadata.name) {
            return if self.lock().live_apply_runners.contains(&object.key()) {
                Err(PortError::Unavailable(format!("runner {runner} is busy")))
            } else {
                Err(PortError::NotFound(format!("runner Pod {runner} is gone")))
            };
        }
        let known = {
            let w = self.lock();
            (0..w.sessions)
                .find(|n| super::runner_ref(*n) == runner && !w.gone_runners.contains(runner))
        };
        match known {
            Some(n) => {
                let role = self
                    .lock()
                    .session_roles
                    .get(n)
                    .copied()
                    .unwrap_or(RunnerRole::Plan);
                Ok(Box::new(FakeSession::new(
                    self.clone(),
                    object.key(),
                    n,
                    role,
                )))
            }
            None => Err(PortError::NotFound(format!("runner {runner} is gone"))),
        }
    }

    async fn release(&self, object: &TerraformObject) -> Result<(), PortError> {
        self.check(FakeOp::Release)?;
        let key = object.key();
        let mut w = self.lock();
        // An apply runner whose Pod is there may be applying: never ended.
        if w.live_apply_runners.contains(&key) {
            return Err(PortError::Unavailable(format!(
                "runner {} is busy",
                crate::naming::apply_runner_pod_name(&key.name)
            )));
        }
        w.released.push(key.clone());
        w.leftover_runners.remove(&key);
        Ok(())
    }
}

#[async_trait]
impl PlanStore for FakeWorld {
    async fn save(
        &self,
        object: &ObjectKey,
        workspace: &str,
        plan: &StoredPlan,
    ) -> Result<(), PortError> {
        self.check(FakeOp::SavePlan)?;
        self.lock()
            .plans
            .insert((object.clone(), workspace.to_string()), plan.clone());
        Ok(())
    }

    async fn load(
        &self,
        object: &ObjectKey,
        workspace: &str,
    ) -> Result<Option<StoredPlan>, PortError> {
        Ok(self
            .lock()
            .plans
            .get(&(object.clone(), workspace.to_string()))
            .cloned())
    }

    async fn delete(&self, object: &ObjectKey, workspace: &str) -> Result<(), PortError> {
        self.check(FakeOp::DeletePlan)?;
        self.lock()
            .plans
            .remove(&(object.clone(), workspace.to_string()));
        Ok(())
    }

    async fn pull_request_approvals(
        &self,
        object: &ObjectKey,
    ) -> Result<Vec<crate::ports::PullApproval>, PortError> {
        Ok(self
            .lock()
            .pull_approvals
            .get(object)
            .cloned()
            .unwrap_or_default())
    }
}

#[async_trait]
impl OutputsSink for FakeWorld {
    async fn write(
        &self,
        object: &ObjectKey,
        target: &WriteOutputsToSecret,
        outputs: &BTreeMap<String, OutputValue>,
    ) -> Result<(), PortError> {
        self.check(FakeOp::WriteOutputs)?;
        let selected = crate::ports::select_outputs(target, outputs);
        self.lock()
            .output_secrets
            .insert((object.namespace.clone(), target.name.clone()), selected);
        Ok(())
    }

    async fn delete(&self, object: &ObjectKey, name: &str) -> Result<(), PortError> {
        self.check(FakeOp::DeleteOutputs)?;
        self.lock()
            .output_secrets
            .remove(&(object.namespace.clone(), name.to_string()));
        Ok(())
    }

    async fn write_config_map(
        &self,
        object: &ObjectKey,
        target: &WriteOutputsToConfigMap,
        data: &ConfigMapData,
    ) -> Result<(), PortError> {
        self.check(FakeOp::WriteConfigMap)?;
        self.lock().output_config_maps.insert(
            (object.namespace.clone(), target.name.clone()),
            data.entries().clone(),
        );
        Ok(())
    }

    async fn delete_config_map(&self, object: &ObjectKey, name: &str) -> Result<(), PortError> {
        self.check(FakeOp::DeleteConfigMap)?;
        self.lock()
            .output_config_maps
            .remove(&(object.namespace.clone(), name.to_string()));
        Ok(())
    }
}

#[async_trait]
impl StateAdmin for FakeWorld {
    async fn delete_state(
        &self,
        object: &ObjectKey,
        workspace: &str,
        suffix: &str,
    ) -> Result<(), PortError> {
        self.check(FakeOp::DeleteState)?;
        let mut w = self.lock();
        if let Some(infra) = w.infra.get_mut(object) {
            infra.state.clear();
            infra.lock = None;
        }
        w.deleted_states
            .push((object.clone(), workspace.to_string(), suffix.to_string()));
        Ok(())
    }

    async fn release_lock(
        &self,
        object: &ObjectKey,
        _: &str,
        _: &str,
        lock_id: &str,
    ) -> Result<bool, PortError> {
        self.check(FakeOp::Unlock)?;
        let mut w = self.lock();
        let Some(infra) = w.infra.get_mut(object) else {
            return Ok(false);
        };
        let held = infra.lock.as_ref().is_some_and(|(id, _)| id == lock_id);
        if held {
            infra.lock = None;
        }
        Ok(held)
    }
}

#[async_trait]
impl HealthChecker for FakeWorld {
    async fn check(&self, _: &ResolvedHealthCheck) -> Result<(), PortError> {
        FakeWorld::check(self, FakeOp::Health)
    }
}

#[async_trait]
impl EventSink for FakeWorld {
    async fn emit(&self, object: &ObjectKey, event: Event) {
        self.lock().events.push((object.clone(), event));
    }
}

#[async_trait]
impl ObjectWriter for FakeWorld {
    async fn write_status(
        &self,
        object: &ObjectKey,
        status: &TerraformStatus,
    ) -> Result<(), PortError> {
        self.check(FakeOp::WriteStatus)?;
        let mut w = self.lock();
        if w.crash == Crash::Applied {
            // The driver dies right after its apply: nothing more of its run is written.
            w.crash = Crash::No;
            return Err(PortError::Unavailable("the driver was killed".into()));
        }
        let o = w
            .objects
            .get_mut(object)
            .ok_or_else(|| PortError::NotFound(format!("{object}")))?;
        o.status = status.clone();
        w.status_writes += 1;
        Ok(())
    }

    async fn add_finalizer(&self, object: &ObjectKey) -> Result<(), PortError> {
        self.check(FakeOp::AddFinalizer)?;
        let mut w = self.lock();
        let o = w
            .objects
            .get_mut(object)
            .ok_or_else(|| PortError::NotFound(format!("{object}")))?;
        if !o.metadata.finalizers.iter().any(|f| f == FINALIZER) {
            o.metadata.finalizers.push(FINALIZER.to_string());
        }
        Ok(())
    }

    async fn remove_finalizer(&self, object: &ObjectKey) -> Result<(), PortError> {
        self.check(FakeOp::RemoveFinalizer)?;
        let mut w = self.lock();
        let gone = match w.objects.get_mut(object) {
            Some(o) => {
                o.metadata.finalizers.retain(|f| f != FINALIZER);
                o.metadata.finalizers.is_empty() && o.metadata.deletion_timestamp.is_some()
            }
            // Already gone: removing the finalizer has nothing left to do.
            None => false,
        };
        if gone {
            w.objects.remove(object);
        }
        Ok(())
    }
}

impl Clock for FakeWorld {
    fn now(&self) -> jiff::Timestamp {
        let mut w = self.lock();
        let now = w.now;
        w.now = add(now, w.tick);
        now
    }
}

#[async_trait]
impl crate::ports::PolicySource for FakeWorld {
    async fn policies(
        &self,
        object: &TerraformObject,
    ) -> Result<Vec<crate::policy::TerraformPolicy>, PortError> {
        Ok(self
            .lock()
            .policies
            .iter()
            .filter(|p| p.metadata.namespace == object.metadata.namespace)
            .cloned()
            .collect())
    }
}
