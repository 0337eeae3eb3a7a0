//! Property tests of the reconciler: random sequences of spec edits, new revisions, approvals
//! (right, stale, garbage), failures at every step, time advances, drift, locks, dependency
//! changes and deletions, with the invariants checked after every reconcile.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use proptest::prelude::*;
use serde_json::json;
use tfops_core::api::{ApprovePlan, ObjectKey, TerraformObject, annotations};
use tfops_core::conditions::{self, ConditionStatus, ConditionType, Reason};
use tfops_core::naming;
use tfops_core::ports::PortError;
use tfops_core::reconcile::{Progress, RunReport, Snapshot, StepKind, decide};
use tfops_core::testing::{FakeOp, FakeWorld};

const OTHER_REPO: &str = "https://git.example/app.git";

#[derive(Debug, Clone)]
enum Edit {
    ApproveAuto,
    ApproveManual,
    ApprovePending,
    ApproveStale,
    ApproveGarbage,
    Force,
    PlanOnly,
    Suspend,
    Destroy,
    BumpVar,
    DestroyOnDeletion,
    DeleteStateOnDestroy,
    Retries(i64),
    ForceUnlockAuto,
    /// Adds or removes `app`'s dependency on `net` (on `net` itself: no effect, to avoid a cycle).
    Dependency,
}

#[derive(Debug, Clone)]
enum Action {
    Reconcile(usize),
    Edit(usize, Edit),
    NewRevision(usize, u8),
    ApproveByAnnotation(usize, bool),
    Replan(usize),
    RequestReconcile(usize),
    UnlockByAnnotation(usize),
    Fail(FakeOp),
    Advance(u64),
    Drift(usize),
    LockState(usize),
    Delete(usize),
    /// Adds or removes a `Deny` policy: no resource may become "2", and (rule 2) no plan may
    /// delete `terraform_data.drifted`.
    TogglePolicy,
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        1 => Just(Edit::ApproveAuto),
        1 => Just(Edit::ApproveManual),
        3 => Just(Edit::ApprovePending),
        1 => Just(Edit::ApproveStale),
        1 => Just(Edit::ApproveGarbage),
        1 => Just(Edit::Force),
        1 => Just(Edit::PlanOnly),
        1 => Just(Edit::Suspend),
        1 => Just(Edit::Destroy),
        1 => Just(Edit::BumpVar),
        1 => Just(Edit::DestroyOnDeletion),
        1 => Just(Edit::DeleteStateOnDestroy),
        1 => (-1i64..3).prop_map(Edit::Retries),
        1 => Just(Edit::ForceUnlockAuto),
        1 => Just(Edit::Dependency),
    ]
}

const FAULTS: &[FakeOp] = &[
    FakeOp::Resolve,
    FakeOp::Fetch,
    FakeOp::Inputs,
    FakeOp::Start,
    FakeOp::Setup,
    FakeOp::Init,
    FakeOp::Workspace,
    FakeOp::Plan,
    FakeOp::RefreshPlan,
    FakeOp::Show,
    FakeOp::Apply,
    FakeOp::Output,
    FakeOp::Inventory,
    FakeOp::Destroy,
    FakeOp::Unlock,
    FakeOp::Cleanup,
    FakeOp::SavePlan,
    FakeOp::DeletePlan,
    FakeOp::WriteOutputs,
    FakeOp::DeleteOutputs,
    FakeOp::DeleteState,
    FakeOp::Health,
    FakeOp::WriteStatus,
    FakeOp::AddFinalizer,
    FakeOp::RemoveFinalizer,
];

fn action() -> impl Strategy<Value = Action> {
    let obj = 0usize..2;
    prop_oneof![
        12 => obj.clone().prop_map(Action::Reconcile),
        4 => (obj.clone(), edit()).prop_map(|(o, e)| Action::Edit(o, e)),
        1 => (obj.clone(), 0u8..4).prop_map(|(o, r)| Action::NewRevision(o, r)),
        1 => (obj.clone(), any::<bool>()).prop_map(|(o, right)| Action::ApproveByAnnotation(o, right)),
        1 => obj.clone().prop_map(Action::Replan),
        1 => obj.clone().prop_map(Action::RequestReconcile),
        1 => obj.clone().prop_map(Action::UnlockByAnnotation),
        1 => proptest::sample::select(FAULTS).prop_map(Action::Fail),
        3 => proptest::sample::select(&[1u64, 20, 300, 660, 7200][..]).prop_map(Action::Advance),
        1 => obj.clone().prop_map(Action::Drift),
        1 => obj.clone().prop_map(Action::LockState),
        1 => (0usize..6).prop_filter_map("rare", |o| (o < 2).then_some(o)).prop_map(Action::Delete),
        1 => Just(Action::TogglePolicy),
    ]
}

struct Model {
    world: FakeWorld,
    keys: [ObjectKey; 2],
    repos: [&'static str; 2],
    counter: u64,
}

impl Model {
    fn new() -> Self {
        let world = world();
        world.publish(
            OTHER_REPO,
            "main",
            &sha(1, 0),
            &[("terraform_data.app", "1")],
        );
        let a = world.create(object(
            "net",
            json!({"approvePlan": "auto", "vars": [{"name": "n", "value": 0}]}),
        ));
        let b = world.create(object(
            "app",
            json!({"sourceRef": {"url": OTHER_REPO}, "dependsOn": [{"name": "net"}]}),
        ));
        Self {
            world,
            keys: [a, b],
            repos: [REPO, OTHER_REPO],
            counter: 0,
        }
    }

    fn token(&mut self) -> String {
        self.counter += 1;
        format!("t{}", self.counter)
    }

    fn apply(
        &mut self,
        action: &Action,
        rt: &tokio::runtime::Runtime,
    ) -> Result<(), TestCaseError> {
        let w = self.world.clone();
        match action.clone() {
            Action::Reconcile(i) => return self.reconcile_and_check(i, rt),
            Action::Edit(i, e) => {
                let pending = w
                    .object(&self.keys[i])
                    .map(|o| o.status.plan.pending)
                    .unwrap_or_default();
                w.edit(&self.keys[i], |s| match e {
                    Edit::ApproveAuto => s.approve_plan = "auto".into(),
                    Edit::ApproveManual => s.approve_plan.clear(),
                    Edit::ApprovePending => s.approve_plan = pending.clone(),
                    Edit::ApproveStale => s.approve_plan = "plan-main-0000000000".into(),
                    Edit::ApproveGarbage => s.approve_plan = "yes please".into(),
                    Edit::Force => s.force = !s.force,
                    Edit::PlanOnly => s.plan_only = !s.plan_only,
                    Edit::Suspend => s.suspend = !s.suspend,
                    Edit::Destroy => s.destroy = !s.destroy,
                    Edit::BumpVar => {
                        let next = s
                            .vars
                            .first()
                            .and_then(|v| v.value.as_ref())
                            .and_then(|v| v.as_i64())
                            .unwrap_or(0)
                            + 1;
                        s.vars = vec![
                            serde_json::from_value(json!({"name": "n", "value": next})).unwrap(),
                        ];
                    }
                    Edit::DestroyOnDeletion => {
                        s.destroy_resources_on_deletion = !s.destroy_resources_on_deletion
                    }
                    Edit::DeleteStateOnDestroy => {
                        s.tfstate.delete_on_destroy = !s.tfstate.delete_on_destroy
                    }
                    Edit::Retries(n) => s.remediation.retries = n,
                    Edit::Dependency if i == 1 => {
                        if s.depends_on.is_empty() {
                            s.depends_on =
                                vec![serde_json::from_value(json!({"name": "net"})).unwrap()];
                        } else {
                            s.depends_on.clear();
                        }
                    }
                    Edit::Dependency => {}
                    Edit::ForceUnlockAuto => {
                        s.tfstate.force_unlock = match s.tfstate.force_unlock {
                            tfops_core::api::ForceUnlock::Auto => tfops_core::api::ForceUnlock::No,
                            _ => tfops_core::api::ForceUnlock::Auto,
                        }
                    }
                });
            }
            Action::NewRevision(i, r) => {
                let value = r.to_string();
                let address = if i == 0 {
                    "terraform_data.a"
                } else {
                    "terraform_data.app"
                };
                w.publish(
                    self.repos[i],
                    "main",
                    &sha(i, r),
                    &[(address, value.as_str())],
                );
            }
            Action::ApproveByAnnotation(i, right) => {
                let pending = w
                    .object(&self.keys[i])
                    .map(|o| o.status.plan.pending)
                    .unwrap_or_default();
                let id = if right {
                    pending
                } else {
                    "plan-main-0000000000".into()
                };
                let t = self.token();
                w.annotate(&self.keys[i], annotations::APPROVE, &id);
                w.annotate(&self.keys[i], annotations::RECONCILE, &t);
            }
            Action::Replan(i) => {
                let t = self.token();
                w.annotate(&self.keys[i], annotations::REPLAN, &t);
            }
            Action::RequestReconcile(i) => {
                let t = self.token();
                w.annotate(&self.keys[i], annotations::RECONCILE, &t);
            }
            Action::UnlockByAnnotation(i) => {
                let lock = w
                    .object(&self.keys[i])
                    .map(|o| o.status.lock.pending)
                    .unwrap_or_default();
                let t = self.token();
                w.annotate(&self.keys[i], annotations::FORCE_UNLOCK, &lock);
                w.annotate(&self.keys[i], annotations::RECONCILE, &t);
            }
            Action::Fail(op) => w.fail_next(op, fault(op)),
            Action::Advance(secs) => w.advance(Duration::from_secs(secs)),
            Action::Drift(i) => w.drift(&self.keys[i], "terraform_data.drifted", "by hand"),
            Action::LockState(i) => w.lock_state(&self.keys[i], "lock-1", "crashed-runner"),
            Action::Delete(i) => w.delete(&self.keys[i]),
            Action::TogglePolicy => {
                let mut l = w.lock();
                if l.policies.is_empty() {
                    l.policies.push(guard_policy());
                } else {
                    l.policies.clear();
                }
            }
        }
        Ok(())
    }

    fn reconcile_and_check(
        &mut self,
        i: usize,
        rt: &tokio::runtime::Runtime,
    ) -> Result<(), TestCaseError> {
        let w = &self.world;
        let key = &self.keys[i];
        let Some(before) = w.object(key) else {
            return Ok(());
        };
        let (deps, _) = w.relations(&before);
        let (calls_before, sessions_before, deleted_before) = {
            let l = w.lock();
            (l.calls.len(), l.sessions, l.deleted_states.len())
        };
        let now0 = w.lock().now;
        let revision = w.lock().sources.get(&before.spec.source_ref.url).cloned();
        let guarded = !w.lock().policies.is_empty();
        let real_before = w
            .lock()
            .infra
            .get(key)
            .map(|i| i.real.clone())
            .unwrap_or_default();
        let result = rt.block_on(w.reconcile(key));
        let calls: Vec<_> = w.lock().calls[calls_before..].to_vec();
        let new_sessions = w.lock().sessions > sessions_before;
        let deleting = before.metadata.deletion_timestamp.is_some();

        // Nothing is applied without auto, force or the matching pending plan id, and never
        // without a plan made in the same session first.
        for (n, call) in calls
            .iter()
            .enumerate()
            .filter(|(_, c)| c.op == FakeOp::Apply)
        {
            prop_assert!(!deleting, "apply during deletion");
            prop_assert!(!before.spec.plan_only, "apply with planOnly");
            let (reference, sha) = revision.clone().unwrap();
            let id = naming::plan_id(&reference, &sha);
            let by_id = before.spec.approve_plan == id
                || (before.annotation(annotations::APPROVE) == Some(id.as_str())
                    && before.annotation(annotations::RECONCILE)
                        != before.status.last_handled_reconcile_at.as_deref());
            let approved = before.spec.force
                || ApprovePlan::parse(&before.spec.approve_plan) == ApprovePlan::Auto
                || (by_id && before.status.plan.pending == id);
            prop_assert!(approved, "applied without approval: {:?}", before.spec);
            let planned_first = calls[..n]
                .iter()
                .any(|c| c.session == call.session && c.op == FakeOp::Plan);
            prop_assert!(planned_first, "apply without a plan in the same session");
        }

        // Nothing a Deny policy forbids is applied: with the guard policy in place, an apply
        // never makes a resource "2" that was not, nor removes the drifted resource.
        if guarded && calls.iter().any(|c| c.op == FakeOp::Apply) {
            let real_after = w
                .lock()
                .infra
                .get(key)
                .map(|i| i.real.clone())
                .unwrap_or_default();
            for (address, value) in &real_after {
                prop_assert!(
                    value != "2" || real_before.get(address).map(String::as_str) == Some("2"),
                    "{address} became 2 despite a Deny policy"
                );
            }
            if real_before.contains_key("terraform_data.drifted") {
                prop_assert!(
                    real_after.contains_key("terraform_data.drifted"),
                    "drift remediation deleted what a Deny policy protects"
                );
            }
        }

        // A dependant never runs while a dependency is not Ready at its current generation.
        if new_sessions && !deleting {
            for d in &deps {
                prop_assert!(
                    d.found.as_ref().is_some_and(|v| v.is_ready()),
                    "ran while {} not ready",
                    d.key
                );
            }
        }

        // State is only deleted when asked, after a destroy, on deletion.
        if w.lock().deleted_states.len() > deleted_before {
            prop_assert!(
                deleting
                    && before.spec.tfstate.delete_on_destroy
                    && before.spec.destroy_resources_on_deletion
            );
            prop_assert!(calls.iter().any(|c| c.op == FakeOp::Destroy));
        }

        let Ok(Some(report)) = result else {
            return Ok(());
        };
        check_replay(&before, &deps, &report, now0, w)?;

        // Every failure that ends a run is visible as Ready=False with its reason.
        // (A failed automatic force-unlock leaves the lock failure before it as the cause.)
        let mut ending = report
            .records
            .iter()
            .rev()
            .filter(|r| r.step != StepKind::Cleanup);
        let mut last = ending.next();
        if last.is_some_and(|r| r.step == StepKind::ForceUnlock && r.result.is_err()) {
            last = ending.next();
        }
        if let (Some(Err(f)), Some(after)) = (last.map(|r| &r.result), w.object(key))
            && last.is_some_and(|r| r.step != StepKind::AddFinalizer)
        {
            let ready = conditions::find(&after.status.conditions, ConditionType::Ready).unwrap();
            prop_assert_eq!(ready.status, ConditionStatus::False);
            prop_assert!(
                ready.reason == f.reason.as_str()
                    || ready.reason == Reason::RetryLimitReached.as_str(),
                "Ready reason {} for failure {:?}",
                ready.reason,
                f
            );
            prop_assert!(after.status.reconciliation_failures > 0);
        }

        // A status-only update (the one just written) never starts a run.
        let add_failed = report
            .records
            .iter()
            .any(|r| r.step == StepKind::AddFinalizer && r.result.is_err());
        if let Some(after) = w.object(key)
            && !add_failed
            && !report
                .records
                .iter()
                .any(|r| r.result.is_err() && r.step == StepKind::RemoveFinalizer)
        {
            let sessions = w.lock().sessions;
            let applies = w.applies(key);
            // The update arrives at the instant of the last decision, with the clock stopped, so
            // that only the status write (and not time) can trigger anything.
            let (now, tick) = {
                let mut l = w.lock();
                let saved = (l.now, l.tick);
                l.now = jiff::Timestamp::from_millisecond(
                    l.now.as_millisecond() - l.tick.as_millis() as i64,
                )
                .unwrap();
                l.tick = Duration::ZERO;
                saved
            };
            let again = rt.block_on(w.reconcile(key));
            {
                let mut l = w.lock();
                (l.now, l.tick) = (now, tick);
            }
            if let Ok(Some(again)) = again {
                prop_assert_eq!(
                    w.lock().sessions,
                    sessions,
                    "status-only update started a run: {:?}",
                    again.records
                );
            }
            prop_assert_eq!(w.applies(key), applies);
            let _ = after;
        }
        Ok(())
    }
}

/// A `Deny` policy for both objects' namespace (see [`Action::TogglePolicy`]).
fn guard_policy() -> tfops_core::policy::TerraformPolicy {
    serde_json::from_value(json!({
        "metadata": {"name": "guard", "namespace": "team-a"},
        "spec": {"rules": [
            {"name": "never-2", "scope": "Resource",
             "matchConditions": [{"name": "kept", "expression": "change.after != null"}],
             "expression": "string(change.after) != '2'"},
            {"name": "keep-drifted", "expression": "!deletes.exists(c, c.address == 'terraform_data.drifted')"}
        ]}
    }))
    .unwrap()
}

/// The decision function is deterministic and the driver did exactly what it decided.
fn check_replay(
    before: &TerraformObject,
    deps: &[tfops_core::reconcile::DependencyState],
    report: &RunReport,
    now0: tfops_core::Timestamp,
    w: &FakeWorld,
) -> Result<(), TestCaseError> {
    let (_, dependants) = w.relations(before);
    let mut progress = Progress::default();
    for (n, record) in report.records.iter().enumerate() {
        let now = if n == 0 {
            now0
        } else {
            report.records[n - 1].at
        };
        let snapshot = Snapshot {
            object: before.clone(),
            dependencies: deps.to_vec(),
            dependants: dependants.clone(),
            progress: progress.clone(),
            now,
            started_at: now0,
        };
        let first = decide(&snapshot);
        prop_assert_eq!(
            &first,
            &decide(&snapshot.clone()),
            "decide is not deterministic"
        );
        prop_assert_eq!(
            first.step.kind(),
            record.step,
            "driver did not follow the decision"
        );
        progress.push(record.step, record.at, record.result.clone());
    }
    Ok(())
}

fn sha(object: usize, revision: u8) -> String {
    format!("{object}{revision}").repeat(20)
}

fn fault(op: FakeOp) -> PortError {
    match op {
        FakeOp::Resolve => PortError::AccessDenied("401".into()),
        FakeOp::Start => PortError::QuotaExhausted("pods".into()),
        FakeOp::Inputs => PortError::NotFound("secret".into()),
        FakeOp::Plan | FakeOp::Apply => PortError::StateLocked {
            lock_id: "other".into(),
            holder: "someone".into(),
        },
        _ => PortError::Terraform(format!("Error: injected into {op:?}")),
    }
}

/// After any history, once faults are gone and a human fixes what needs a human, deleting
/// every object always finishes: finalizers are removed and the objects disappear.
fn check_deletion_terminates(
    m: &mut Model,
    rt: &tokio::runtime::Runtime,
) -> Result<(), TestCaseError> {
    let w = m.world.clone();
    for op in FAULTS {
        w.heal(*op);
    }
    for key in m.keys.clone() {
        // The human fixes an invalid spec (a destroy cannot run on one).
        w.edit(&key, |s| {
            if s.approve_plan == "yes please" {
                s.approve_plan.clear();
            }
            s.plan_only = false;
            if !s.destroy_resources_on_deletion {
                s.tfstate.delete_on_destroy = false;
            }
        });
        if let Some(o) = w.object(&key) {
            prop_assert!(
                tfops_core::api::validate(&o).is_ok(),
                "{:?}",
                tfops_core::api::validate(&o)
            );
        }
        if let Some(o) = w.object(&key) {
            let lock = o.status.lock.pending.clone();
            w.annotate(&key, annotations::FORCE_UNLOCK, &lock);
        }
        w.lock().infra.entry(key.clone()).or_default().lock = None;
        w.delete(&key);
    }
    for round in 0..12 {
        for key in m.keys.clone().iter().rev() {
            let t = m.token();
            w.annotate(key, annotations::RECONCILE, &t);
            let _ = rt.block_on(w.reconcile(key));
        }
        w.advance(Duration::from_secs(3600));
        if m.keys.iter().all(|k| w.object(k).is_none()) {
            return Ok(());
        }
        prop_assert!(
            round < 11,
            "deletion did not terminate: {:?}",
            m.keys.iter().map(|k| w.object(k)).collect::<Vec<_>>()
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, max_shrink_iters: 2000, ..ProptestConfig::default() })]

    #[test]
    fn reconciler_invariants_hold(actions in proptest::collection::vec(action(), 1..80)) {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let mut model = Model::new();
        for a in &actions {
            model.apply(a, &rt)?;
        }
        check_deletion_terminates(&mut model, &rt)?;
    }
}
