//! Running one command of a run: Terraform's, and the store commands.

use std::collections::BTreeMap;
use std::sync::Mutex;

use super::context::{Context, Shown, lock};
use super::results::{from_error, store_failure, stores_of, succeeded};
use crate::proto::{self, run_request::Command, run_result::Payload};
use crate::terraform::{Io, PlanKind, Terraform, TfError};
use tfops_core::ports::{OutputValue, OutputsRequest, ShownPlan, StoredPlan};

/// Runs one command. `context.shown` keeps the last plan's `show -json` and `show`, so that
/// showing or storing that plan does not run them a second time.
pub(super) async fn execute(
    tf: &Terraform,
    command: Command,
    io: &Io,
    context: &Context,
) -> proto::RunResult {
    if context.handed && !crate::handed::allows(&command) {
        return from_error(
            TfError::Failed {
                code: 1,
                diagnostic: "this runner was handed its object's state read-only (a pull \
                             request's plan): it only plans speculatively and reads"
                    .into(),
            },
            context.pod.as_deref(),
        );
    }
    let outcome = match command {
        Command::Init(_) => tf.init(io).await.map(|()| None),
        Command::SelectWorkspace(w) => tf.select_workspace(&w.workspace, io).await.map(|()| None),
        Command::Plan(p) => plan(tf, &p, io, &context.shown).await.map(Some),
        Command::Show(_) => show(tf, io, &context.shown)
            .await
            .map(|(readable, json)| Some(Payload::Show(proto::ShowOutcome { readable, json }))),
        Command::SavePlan(_) | Command::Apply(_) if lock(&context.shown).speculative => {
            Err(TfError::Failed {
                code: 1,
                diagnostic: "the last plan was speculative (made without the state lock, for a \
                             pull request): it is never applied or stored for approval"
                    .into(),
            })
        }
        Command::SavePlan(p) => save_plan(tf, p, io, context).await.map(|()| None),
        Command::DeletePlan(p) => delete_plan(&p, context).await.map(|()| None),
        Command::DeleteOutputs(d) => delete_outputs(&d, context).await.map(|()| None),
        Command::DeleteState(d) => delete_state(&d, context).await.map(|()| None),
        Command::WriteOutputs(w) => write_outputs(tf, &w, io, context).await.map(Some),
        Command::Apply(_) => tf.apply(io).await.map(|()| None),
        Command::Output(_) => outputs(tf, io).await.map(Some),
        Command::Inventory(_) => inventory(tf, io).await.map(Some),
        Command::Destroy(d) => tf
            .destroy(&d.targets, d.parallelism, io)
            .await
            .map(|()| None),
        Command::ForceUnlock(f) => force_unlock(tf, &f.lock_id, io, context)
            .await
            .map(|()| None),
    };
    match outcome {
        Ok(payload) => succeeded(payload),
        Err(e) => from_error(e, context.pod.as_deref()),
    }
}

/// Releases the state lock `lock_id`: with Terraform's `force-unlock`, and where that fails
/// on tfops' kubernetes backend, by freeing the lock's Lease directly (as `force-unlock`
/// does, and only while that exact lock holds it). Terraform cannot release a lock taken
/// while writing a workspace's first state (an `init` killed there): its `force-unlock`
/// loads that state first, which tries to take the same lock.
async fn force_unlock(
    tf: &Terraform,
    lock_id: &str,
    io: &Io,
    context: &Context,
) -> Result<(), TfError> {
    let by_terraform = tf.force_unlock(lock_id, io).await;
    let (Err(refused), Some(state), Some((stores, object))) =
        (&by_terraform, &context.kubernetes_state, &context.stores)
    else {
        return by_terraform;
    };
    if matches!(refused, TfError::Cancelled) {
        return by_terraform;
    }
    let admin = stores.state(object);
    let at = tfops_core::api::ObjectKey::new(&state.namespace, &object.key.name);
    let mut failed = None;
    for workspace in &state.workspaces {
        match admin
            .release_lock(&at, workspace, &state.suffix, lock_id)
            .await
        {
            Ok(true) => {
                let lease = tfops_core::naming::state_lease_name(workspace, &state.suffix);
                let _ = io.log.send((
                    crate::exec::Stream::Stderr,
                    format!("tfops: Terraform could not release lock {lock_id} ({refused}); released it on its Lease {lease}"),
                ));
                return Ok(());
            }
            Ok(false) => {}
            Err(e) => failed = Some(e),
        }
    }
    match failed {
        Some(e) => Err(store_failure(e)),
        None => by_terraform,
    }
}

/// Plans, and reads the saved plan back: a plan that cannot be read back is a failure, never
/// an empty plan.
async fn plan(
    tf: &Terraform,
    p: &proto::Plan,
    io: &Io,
    shown: &Mutex<Shown>,
) -> Result<Payload, TfError> {
    let kind = match proto::plan::Kind::try_from(p.kind).unwrap_or(proto::plan::Kind::Normal) {
        proto::plan::Kind::Normal => PlanKind::Normal,
        proto::plan::Kind::Destroy => PlanKind::Destroy,
        proto::plan::Kind::RefreshOnly => PlanKind::RefreshOnly,
        proto::plan::Kind::Speculative => PlanKind::Speculative,
    };
    *lock(shown) = Shown {
        speculative: kind == PlanKind::Speculative,
        ..Shown::default()
    };
    let o = tf.plan(kind, &p.targets, p.parallelism, io).await?;
    let plan_file = saved_plan(tf).await?;
    if !o.json.is_empty() {
        lock(shown).json = Some(o.json.clone());
    }
    Ok(Payload::Plan(proto::PlanOutcome {
        has_changes: o.has_changes,
        add: o.add,
        change: o.change,
        destroy: o.destroy,
        drifted: o.drifted,
        plan_file,
    }))
}

/// The plan file the last plan saved.
async fn saved_plan(tf: &Terraform) -> Result<Vec<u8>, TfError> {
    let path = tf.dir.join(crate::terraform::PLAN_FILE);
    tokio::fs::read(&path).await.map_err(|e| TfError::Failed {
        code: 1,
        diagnostic: format!("reading the saved plan {}: {e}", path.display()),
    })
}

/// Stores the last plan, binary and shown, for approval.
async fn save_plan(
    tf: &Terraform,
    p: proto::SavePlan,
    io: &Io,
    context: &Context,
) -> Result<(), TfError> {
    let (stores, object) = stores_of(context)?;
    let binary = saved_plan(tf).await?;
    let (readable, json) = show(tf, io, &context.shown).await?;
    let plan = StoredPlan {
        id: p.plan_id,
        binary,
        shown: ShownPlan { readable, json },
        is_destroy: p.is_destroy,
        is_drift: p.is_drift,
    };
    stores
        .plans(object)
        .save(&object.key, &p.workspace, &plan)
        .await
        .map_err(store_failure)
}

async fn delete_plan(p: &proto::DeletePlan, context: &Context) -> Result<(), TfError> {
    let (stores, object) = stores_of(context)?;
    stores
        .plans(object)
        .delete(&object.key, &p.workspace)
        .await
        .map_err(store_failure)
}

async fn delete_outputs(d: &proto::DeleteOutputs, context: &Context) -> Result<(), TfError> {
    let (stores, object) = stores_of(context)?;
    let sink = stores.outputs(object);
    if d.config_map {
        sink.delete_config_map(&object.key, &d.name).await
    } else {
        sink.delete(&object.key, &d.name).await
    }
    .map_err(store_failure)
}

async fn delete_state(d: &proto::DeleteState, context: &Context) -> Result<(), TfError> {
    let (stores, object) = stores_of(context)?;
    stores
        .state(object)
        .delete_state(&object.key, &d.workspace, &d.suffix)
        .await
        .map_err(store_failure)
}

/// Writes the outputs Secret and ConfigMap (and removes renamed ones); only the values the
/// controller asked for (`reveal`) leave the runner.
async fn write_outputs(
    tf: &Terraform,
    w: &proto::WriteOutputs,
    io: &Io,
    context: &Context,
) -> Result<Payload, TfError> {
    let (stores, object) = stores_of(context)?;
    let request = OutputsRequest {
        target: target(&w.target_json, "writeOutputsToSecret")?,
        remove: (!w.remove.is_empty()).then(|| w.remove.clone()),
        config_map: target(&w.config_map_json, "writeOutputsToConfigMap")?,
        remove_config_map: (!w.remove_config_map.is_empty()).then(|| w.remove_config_map.clone()),
        reveal: w.reveal.clone(),
    };
    let outputs: BTreeMap<String, OutputValue> = tf
        .outputs(io)
        .await?
        .into_iter()
        .map(|(k, (value, sensitive))| (k, OutputValue { value, sensitive }))
        .collect();
    let sink = stores.outputs(object);
    tfops_core::ports::write_outputs(sink.as_ref(), &object.key, &request, &outputs)
        .await
        .map_err(store_failure)?;
    Ok(Payload::Output(proto::OutputOutcome {
        outputs: outputs
            .into_iter()
            .map(|(k, v)| {
                let json = if w.reveal.contains(&k) {
                    v.value.to_string()
                } else {
                    "null".to_string()
                };
                let sensitive = v.sensitive;
                (k, proto::OutputValue { json, sensitive })
            })
            .collect(),
    }))
}

/// A write target sent as JSON (`field` of the spec), `None` when empty.
fn target<T: serde::de::DeserializeOwned>(json: &str, field: &str) -> Result<Option<T>, TfError> {
    if json.is_empty() {
        return Ok(None);
    }
    serde_json::from_str(json)
        .map(Some)
        .map_err(|e| TfError::Failed {
            code: 1,
            diagnostic: format!("{field}: {e}"),
        })
}

async fn outputs(tf: &Terraform, io: &Io) -> Result<Payload, TfError> {
    let outputs = tf.outputs(io).await?;
    Ok(Payload::Output(proto::OutputOutcome {
        outputs: outputs
            .into_iter()
            .map(|(k, (v, sensitive))| {
                let json = v.to_string();
                (k, proto::OutputValue { json, sensitive })
            })
            .collect(),
    }))
}

async fn inventory(tf: &Terraform, io: &Io) -> Result<Payload, TfError> {
    let resources = tf
        .inventory(io)
        .await?
        .into_iter()
        .map(|(address, r#type, id)| proto::Resource {
            address,
            r#type,
            id,
        })
        .collect();
    Ok(Payload::Inventory(proto::InventoryOutcome { resources }))
}

/// The last plan's `show` text and `show -json`, each run once per plan.
async fn show(tf: &Terraform, io: &Io, shown: &Mutex<Shown>) -> Result<(String, String), TfError> {
    let cached = {
        let s = lock(shown);
        (s.readable.clone(), s.json.clone())
    };
    let json = match cached.1 {
        Some(json) => json,
        None => tf.show_json(io).await?,
    };
    let readable = match cached.0 {
        Some(text) => text,
        None => tf.show_text(io).await?,
    };
    let mut s = lock(shown);
    s.json = Some(json.clone());
    s.readable = Some(readable.clone());
    Ok((readable, json))
}
