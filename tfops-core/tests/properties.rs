//! Property tests of the reconciler: random sequences of spec edits, new revisions, approvals
//! (right, stale, garbage), failures at every step, time advances, drift, locks, dependency
//! changes and deletions, with the invariants checked after every reconcile.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use proptest::prelude::*;
use serde_json::json;
use tfops_core::api::{ApprovePlan, ObjectKey, RunnerRole, TerraformObject, annotations};
use tfops_core::conditions::{self, ConditionStatus, ConditionType, Reason};
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
    /// Adds or removes `spec.runner.apply` (a separate apply identity).
    SplitApply,
    /// Sets `spec.writeOutputsToConfigMap` to one of [`config_map_target`]'s.
    OutputsConfigMap(u8),
}

#[derive(Debug, Clone)]
enum Action {
    Reconcile(usize),
    /// A reconcile with the revision a source poller sees now (a poll-triggered run when it
    /// differs from the last attempted one).
    Poll(usize),
    Edit(usize, Edit),
    /// A new revision of object `.0`'s repository holding value `.1`; with `.2`, the source
    /// says the commit changed only files outside the object's path (whatever the tree holds:
    /// a source that is wrong must not make anything unapproved apply).
    NewRevision(usize, u8, bool),
    /// (object, names the pending plan, with a fresh `@token`).
    ApproveByAnnotation(usize, bool, bool),
    /// Sets or removes the `infra.argocd.io/suspend` annotation.
    SuspendByAnnotation(usize),
    Replan(usize),
    RequestReconcile(usize),
    UnlockByAnnotation(usize),
    Fail(FakeOp),
    Advance(u64),
    Drift(usize),
    LockState(usize),
    /// The object's apply runner (`spec.runner.apply`) holds the state lock, its Pod still
    /// there (`.1`: perhaps applying) or gone.
    LockByApplyRunner(usize, bool),
    /// A dead process of the object's own runner left the lock in `init`, writing the
    /// workspace's first state: every `init` stops on it until it is released.
    LockAtInit(usize),
    /// The object's runner outlives the run that started it (a manager killed mid-run).
    LeaveRunner(usize),
    Delete(usize),
    /// Adds or removes a `Deny` policy: no resource may become "2", and (rule 2) no plan may
    /// delete `terraform_data.drifted`.
    TogglePolicy,
    /// Every runner disappears (Pods deleted): recorded runs can no longer be attached to.
    LoseRunners,
    /// The driver of the next successful apply dies right after it.
    CrashAfterApply,
    /// Someone else changes the infrastructure (and state) just before the next apply runner
    /// starts, so that its plan differs from the plan runner's.
    ChangeAtHandOver,
    /// The next apply makes one of its changes and is stopped at its timeout.
    TimeOutApply,
    /// The next apply makes one of its changes and is stopped by a user.
    StopApply,
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
        3 => Just(Edit::BumpVar),
        1 => Just(Edit::DestroyOnDeletion),
        1 => Just(Edit::DeleteStateOnDestroy),
        1 => (-1i64..3).prop_map(Edit::Retries),
        1 => Just(Edit::ForceUnlockAuto),
        1 => Just(Edit::Dependency),
        2 => Just(Edit::SplitApply),
        2 => (0u8..4).prop_map(Edit::OutputsConfigMap),
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
    FakeOp::Attach,
    FakeOp::Release,
    FakeOp::Output,
    FakeOp::Inventory,
    FakeOp::Unlock,
    FakeOp::Cleanup,
    FakeOp::SavePlan,
    FakeOp::DeletePlan,
    FakeOp::WriteOutputs,
    FakeOp::DeleteOutputs,
    FakeOp::WriteConfigMap,
    FakeOp::DeleteConfigMap,
    FakeOp::DeleteState,
    FakeOp::Health,
    FakeOp::WriteStatus,
    FakeOp::AddFinalizer,
    FakeOp::RemoveFinalizer,
];

fn action() -> impl Strategy<Value = Action> {
    // `app` (manual approval) is where approvals matter: three times as many edits as `net`
    // (both are reconciled alike, so that `net` stays a Ready dependency often enough).
    let obj = prop_oneof![1 => Just(0usize), 3 => Just(1usize)];
    prop_oneof![
        12 => (0usize..2).prop_map(Action::Reconcile),
        3 => (0usize..2).prop_map(Action::Poll),
        4 => (obj.clone(), edit()).prop_map(|(o, e)| Action::Edit(o, e)),
        1 => (obj.clone(), 0u8..4, any::<bool>()).prop_map(|(o, r, f)| Action::NewRevision(o, r, f)),
        4 => (obj.clone(), proptest::bool::weighted(0.8), any::<bool>())
            .prop_map(|(o, right, token)| Action::ApproveByAnnotation(o, right, token)),
        1 => obj.clone().prop_map(Action::Replan),
        1 => obj.clone().prop_map(Action::RequestReconcile),
        1 => obj.clone().prop_map(Action::UnlockByAnnotation),
        1 => obj.clone().prop_map(Action::SuspendByAnnotation),
        1 => proptest::sample::select(FAULTS).prop_map(Action::Fail),
        3 => proptest::sample::select(&[1u64, 20, 300, 660, 7200][..]).prop_map(Action::Advance),
        1 => obj.clone().prop_map(Action::Drift),
        1 => obj.clone().prop_map(Action::LockState),
        1 => (obj.clone(), any::<bool>()).prop_map(|(o, alive)| Action::LockByApplyRunner(o, alive)),
        1 => obj.clone().prop_map(Action::LockAtInit),
        1 => obj.clone().prop_map(Action::LeaveRunner),
        1 => (0usize..6).prop_filter_map("rare", |o| (o < 2).then_some(o)).prop_map(Action::Delete),
        1 => Just(Action::TogglePolicy),
        1 => Just(Action::LoseRunners),
        2 => Just(Action::CrashAfterApply),
        1 => Just(Action::ChangeAtHandOver),
        2 => Just(Action::TimeOutApply),
        1 => Just(Action::StopApply),
    ]
}

/// What a plan does, as a human reads it in the stored plan: address → (before, after).
struct Model {
    world: FakeWorld,
    keys: [ObjectKey; 2],
    repos: [&'static str; 2],
    counter: u64,
    /// The model of the approval timeline, independent of how tfops decides: per object, the
    /// changes a human approved after seeing them pending and that were not applied since.
    approved: [Option<Changes>; 2],
    /// Per object, the generation whose spec the apply a crashed driver left under way was
    /// planned from (the spec the crashed reconcile started with).
    left_applying: [Option<i64>; 2],
}

impl Model {
    fn new(runner_writes: bool) -> Self {
        let world = world();
        world.lock().runner_writes = runner_writes;
        world.publish(
            OTHER_REPO,
            "main",
            &sha(1, 0),
            &[("terraform_data.app", "1")],
        );
        let a = world.create(object(
            "net",
            json!({"approvePlan": "auto", "path": "envs/net", "vars": [{"name": "n", "value": 0}]}),
        ));
        let b = world.create(object(
            "app",
            json!({"path": "envs/app", "sourceRef": {"url": OTHER_REPO}}),
        ));
        Self {
            world,
            keys: [a, b],
            repos: [REPO, OTHER_REPO],
            counter: 0,
            approved: [None, None],
            left_applying: [None, None],
        }
    }

    /// What a human sees pending now: the plan id in status and the stored plan's changes.
    fn pending_view(&self, i: usize) -> Option<(String, Changes)> {
        let o = self.world.object(&self.keys[i])?;
        if o.status.plan.pending.is_empty() {
            return None;
        }
        let stored = self
            .world
            .lock()
            .plans
            .get(&(self.keys[i].clone(), o.spec.workspace.clone()))
            .cloned()?;
        Some((o.status.plan.pending, changes_of(&stored.shown.json)))
    }

    /// A human who looked at the pending plan approves what they saw.
    fn approve_what_is_seen(&mut self, i: usize) {
        self.approved[i] = self.pending_view(i).map(|(_, c)| c);
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
            Action::Reconcile(i) => return self.reconcile_and_check(i, rt, false),
            Action::Poll(i) => return self.reconcile_and_check(i, rt, true),
            Action::Edit(i, e) => {
                let before = w.object(&self.keys[i]);
                let pending = before
                    .as_ref()
                    .map(|o| o.status.plan.pending.clone())
                    .unwrap_or_default();
                let approve_before = before.map(|o| o.spec.approve_plan).unwrap_or_default();
                let object_name = self.keys[i].name.clone();
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
                    Edit::SplitApply => {
                        s.runner.apply = match s.runner.apply {
                            Some(_) => None,
                            None => Some(
                                serde_json::from_value(json!({"serviceAccountName": "tf-apply"}))
                                    .unwrap(),
                            ),
                        }
                    }
                    Edit::OutputsConfigMap(n) => {
                        s.write_outputs_to_config_map = config_map_target(&object_name, n);
                    }
                    Edit::ForceUnlockAuto => {
                        s.tfstate.force_unlock = match s.tfstate.force_unlock {
                            tfops_core::api::ForceUnlock::Auto => tfops_core::api::ForceUnlock::No,
                            _ => tfops_core::api::ForceUnlock::Auto,
                        }
                    }
                });
                // Changing approvePlan to the pending id is a human approving what they see.
                let approve_after = w
                    .object(&self.keys[i])
                    .map(|o| o.spec.approve_plan)
                    .unwrap_or_default();
                if !pending.is_empty() && approve_after == pending && approve_before != pending {
                    self.approve_what_is_seen(i);
                }
            }
            Action::NewRevision(i, r, foreign) => {
                let value = r.to_string();
                let file = if foreign {
                    "envs/elsewhere/main.tf".to_string()
                } else {
                    format!("envs/{}/main.tf", self.keys[i].name)
                };
                for from in 0..4 {
                    w.changed_between(&sha(i, from), &sha(i, r), &[file.as_str()]);
                }
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
            Action::ApproveByAnnotation(i, right, token) => {
                let before = w.object(&self.keys[i]);
                let pending = before
                    .as_ref()
                    .map(|o| o.status.plan.pending.clone())
                    .unwrap_or_default();
                let id = if right {
                    pending.clone()
                } else {
                    "plan-main-0000000000".into()
                };
                let t = self.token();
                let value = if token { format!("{id}@{t}") } else { id };
                // A new value naming the pending plan is an approval of what is seen.
                let changed = before
                    .as_ref()
                    .is_some_and(|o| o.annotation(annotations::APPROVE) != Some(value.as_str()));
                let names_pending = value.split('@').next() == Some(pending.as_str());
                if names_pending && changed && !pending.is_empty() {
                    self.approve_what_is_seen(i);
                }
                w.annotate(&self.keys[i], annotations::APPROVE, &value);
                w.annotate(&self.keys[i], annotations::RECONCILE, &t);
            }
            Action::Replan(i) => {
                let t = self.token();
                w.annotate(&self.keys[i], annotations::REPLAN, &t);
            }
            Action::SuspendByAnnotation(i) => {
                let set = w
                    .object(&self.keys[i])
                    .is_some_and(|o| o.metadata.annotations.contains_key(annotations::SUSPEND));
                if set {
                    w.unannotate(&self.keys[i], annotations::SUSPEND);
                } else {
                    let reason = format!("frozen {}", self.token());
                    w.annotate(&self.keys[i], annotations::SUSPEND, &reason);
                }
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
            Action::LockByApplyRunner(i, alive) => {
                w.lock_state_of_apply_runner(&self.keys[i], "lock-2", alive);
            }
            Action::LockAtInit(i) => w.lock_state_at_init_of_dead_runner(&self.keys[i], "lock-3"),
            Action::LeaveRunner(i) => w.leave_runner(&self.keys[i]),
            Action::Delete(i) => w.delete(&self.keys[i]),
            Action::LoseRunners => w.lose_runners(),
            Action::CrashAfterApply => w.crash_after_next_apply(),
            Action::ChangeAtHandOver => w.change_before_next_apply_runner(),
            Action::TimeOutApply => w.time_out_next_apply(),
            Action::StopApply => w.stop_next_apply("alice"),
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
        polled: bool,
    ) -> Result<(), TestCaseError> {
        let w = &self.world;
        let key = &self.keys[i];
        let Some(before) = w.object(key) else {
            return Ok(());
        };
        let (deps, _) = w.relations(&before);
        let (calls_before, sessions_before, deleted_before, shown_before) = {
            let l = w.lock();
            (
                l.calls.len(),
                l.sessions,
                l.deleted_states.len(),
                l.shown.len(),
            )
        };
        let now0 = w.lock().now;
        let guarded = !w.lock().policies.is_empty();
        let real = || {
            w.lock()
                .infra
                .get(key)
                .map(|i| i.real.clone())
                .unwrap_or_default()
        };
        let real_before = real();
        let timed_out_before = w.lock().interrupted_applies;
        // The lock held by this object's apply runner whose Pod is still there (the model's
        // own record of who holds it): nothing but a user's request may break it.
        let held_by_live_runner = {
            let l = w.lock();
            l.live_apply_runners.contains(key)
                && l.infra
                    .get(key)
                    .and_then(|i| i.lock.as_ref())
                    .is_some_and(|(_, holder)| {
                        let pod = tfops_core::naming::apply_runner_pod_name(&key.name);
                        holder.ends_with(&tfops_core::naming::runner_host(&key.namespace, &pod))
                    })
        };
        // An apply recorded as under way (its runner may still be applying): the reconcile
        // must never end that object's runners.
        let apply_recorded = before.status.active_run.is_some();
        let released_before = w.lock().released.iter().filter(|k| *k == key).count();
        let lock_id_before = w
            .lock()
            .infra
            .get(key)
            .and_then(|i| i.lock.as_ref().map(|l| l.0.clone()));
        let unlock_asked = lock_id_before.as_deref().is_some_and(|id| {
            before.annotation(annotations::FORCE_UNLOCK) == Some(id)
                || (before.spec.tfstate.force_unlock == tfops_core::api::ForceUnlock::Yes
                    && before.spec.tfstate.lock_identifier == id)
        });
        // What the human had approved when this reconcile started (the checks below void
        // an approval once it was used).
        let approved_before = self.approved[i].clone();
        let source_revision = polled.then(|| w.polled_revision(&before)).flatten();
        let result =
            rt.block_on(w.reconcile_polled(key, Default::default(), source_revision.clone()));
        let calls: Vec<_> = w.lock().calls[calls_before..].to_vec();
        let new_sessions = w.lock().sessions > sessions_before;
        let deleting = before.metadata.deletion_timestamp.is_some();

        // A lock whose holder may still be applying is never broken by tfops on its own.
        if held_by_live_runner && !unlock_asked {
            let after = w
                .lock()
                .infra
                .get(key)
                .and_then(|i| i.lock.as_ref().map(|l| l.0.clone()));
            prop_assert_eq!(
                after,
                lock_id_before.clone(),
                "the lock of an apply runner still there was broken"
            );
        }

        // A suspended object (spec.suspend, or the suspend annotation with any value) starts
        // nothing: no runner session, no apply (deletion is not a run and goes on).
        let suspended = before.spec.suspend
            || before
                .metadata
                .annotations
                .contains_key(annotations::SUSPEND);
        if suspended && !deleting {
            prop_assert!(!new_sessions, "a suspended object started a runner session");
            prop_assert!(
                calls.iter().all(|c| c.op != FakeOp::Apply),
                "a suspended object applied"
            );
        }
        // Its runners are never ended while an apply is recorded as under way; and one that
        // ends saying Suspended has no runner left up, unless ending it failed (a fault, or a
        // runner that may be applying).
        let released_now = w.lock().released.iter().filter(|k| *k == key).count();
        if apply_recorded {
            prop_assert_eq!(
                released_now,
                released_before,
                "a runner ended while an apply was recorded"
            );
        }
        let says_suspended = w.object(key).is_some_and(|o| {
            conditions::find(&o.status.conditions, ConditionType::Ready)
                .is_some_and(|c| c.reason == Reason::Suspended.as_str())
        });
        let release_failed = result
            .as_ref()
            .ok()
            .and_then(Option::as_ref)
            .is_some_and(|r| {
                r.records
                    .iter()
                    .any(|x| x.step == StepKind::ReleaseRunners && x.result.is_err())
            });
        if suspended
            && !deleting
            && !apply_recorded
            && says_suspended
            && result.is_ok()
            && !release_failed
        {
            prop_assert!(
                !w.lock().leftover_runners.contains(key),
                "a suspended object's runner was left up"
            );
        }

        // Nothing is applied without auto or force, unless a human approved exactly what it
        // does after seeing it pending, and never without a plan made in the same session.
        let real_after = real();
        // An apply of this reconcile was stopped part-way (its timeout, or a user).
        let timed_out = w.lock().interrupted_applies > timed_out_before;
        let applied_plan = w
            .lock()
            .plans
            .get(&(key.clone(), before.spec.workspace.clone()))
            .map(|p| changes_of(&p.shown.json));
        let automatic =
            before.spec.force || ApprovePlan::parse(&before.spec.approve_plan) == ApprovePlan::Auto;
        let mut applied = false;
        for (n, call) in calls
            .iter()
            .enumerate()
            .filter(|(_, c)| c.op == FakeOp::Apply)
        {
            if deleting {
                // Deletion applies only a destroy plan, and only when asked to destroy.
                prop_assert!(
                    before.spec.destroy_resources_on_deletion,
                    "apply during deletion without destroyResourcesOnDeletion"
                );
                // (Its stored plan is gone with the object's plans: judge by what changed.
                // A destroy stopped at its timeout removed some of it, and changed nothing.)
                prop_assert!(
                    real_after.is_empty()
                        || real_after == real_before
                        || (timed_out
                            && real_after
                                .iter()
                                .all(|(k, v)| real_before.get(k) == Some(v))),
                    "deletion applied something else than a destroy: {real_after:?}"
                );
            } else if !automatic {
                prop_assert!(
                    self.approved[i].is_some() && self.approved[i] == applied_plan,
                    "applied a plan nobody approved: applied {:?}, approved {:?}, status {:?}",
                    applied_plan,
                    self.approved[i],
                    before.status.plan
                );
            }
            let planned_first = calls[..n]
                .iter()
                .any(|c| c.session == call.session && c.op == FakeOp::Plan);
            prop_assert!(planned_first, "apply without a plan in the same session");
            applied = true;
        }
        if applied && !deleting && real_after != real_before {
            let changed = diff(&real_before, &real_after);
            if timed_out {
                // Stopped part-way: what changed is part of the plan, nothing else.
                let plan = applied_plan.clone().unwrap_or_default();
                prop_assert!(
                    changed.iter().all(|(k, c)| plan.get(k) == Some(c)),
                    "a stopped apply changed what the plan does not: {changed:?}, plan {plan:?}"
                );
            } else {
                prop_assert_eq!(
                    Some(changed),
                    applied_plan.clone(),
                    "what changed is not the plan"
                );
            }
            // An approval counts once, even for an apply stopped part-way: the rest is a new
            // plan, to approve anew.
            self.approved[i] = None;
        }
        // An approval is for the plan that was pending when it was given: once another plan
        // (or none) is pending, it is void.
        if self.approved[i].is_some() && self.pending_view(i).map(|(_, c)| c) != self.approved[i] {
            self.approved[i] = None;
        }

        // The apply identity (`spec.runner.apply`): every apply runs in the apply runner, and
        // nothing else of a run that does not apply does. The model: an apply runner may start
        // only for a plan that may be applied, judged by what the plan runner of this reconcile
        // showed (the plan the policies and the human saw), before anything of its own ran.
        let split = before.spec.runner.apply.is_some();
        let mine: Vec<_> = calls.iter().filter(|c| c.object == *key).collect();
        for c in &mine {
            if c.op == FakeOp::Apply {
                let want = if split {
                    RunnerRole::Apply
                } else {
                    RunnerRole::Plan
                };
                prop_assert_eq!(c.role, want, "apply in the wrong runner: {:?}", mine);
            }
            if c.role == RunnerRole::Apply {
                // A session of an earlier reconcile is one attached to: it finishes the apply
                // recorded under way in that runner, whatever the spec says now, and starts
                // nothing of its own there.
                let attached = c.session < sessions_before;
                prop_assert!(
                    split || attached,
                    "an apply runner without spec.runner.apply: {:?}",
                    mine
                );
                prop_assert!(
                    c.op != FakeOp::RefreshPlan,
                    "a drift check in the apply runner"
                );
                if attached {
                    prop_assert!(
                        !matches!(c.op, FakeOp::Plan | FakeOp::Apply | FakeOp::RefreshPlan),
                        "a new plan or apply in an attached apply runner: {:?}",
                        mine
                    );
                }
            }
        }
        let roles = w.lock().session_roles.clone();
        let apply_sessions: Vec<usize> = (sessions_before..roles.len())
            .filter(|n| roles[*n] == RunnerRole::Apply)
            .collect();
        prop_assert!(
            apply_sessions.len() <= 1,
            "two apply runners in one reconcile"
        );
        if let Some(first) = apply_sessions.first() {
            let shown: Vec<(usize, String)> = w.lock().shown[shown_before..].to_vec();
            let seen = shown
                .iter()
                .rev()
                .find(|(n, _)| n < first && roles[*n] == RunnerRole::Plan)
                .map(|(_, json)| changes_of(json));
            prop_assert!(seen.is_some(), "an apply runner before any plan was shown");
            let may = if deleting {
                before.spec.destroy_resources_on_deletion
            } else {
                !before.spec.plan_only && (automatic || approved_before == seen)
            };
            prop_assert!(
                may,
                "an apply runner started for a plan that may not be applied: {:?}, approved {:?}; calls {:?}",
                seen,
                approved_before,
                mine
            );
            if guarded {
                let seen = seen.unwrap_or_default();
                prop_assert!(
                    seen.values()
                        .all(|(b, a)| a.as_deref() != Some("2") || b.as_deref() == Some("2")),
                    "an apply runner started for a plan a Deny policy forbids: {:?}",
                    seen
                );
            }
        }

        // A driver that dies after its apply leaves it under way, planned from the spec it
        // started with. The run that attaches to it and plans nothing answers for that spec
        // only: a spec written meanwhile is not observed by it (it is planned next).
        let left = w.object(key).is_some_and(|o| o.status.active_run.is_some());
        if left && calls.iter().any(|c| c.op == FakeOp::Apply) {
            self.left_applying[i] = Some(before.metadata.generation);
        }
        let planned = calls
            .iter()
            .any(|c| matches!(c.op, FakeOp::Plan | FakeOp::RefreshPlan));
        if let (Some(planned_at), Some(after)) = (self.left_applying[i], w.object(key))
            && calls.iter().any(|c| c.op == FakeOp::Attach)
            && !planned
            && result.is_ok()
        {
            prop_assert!(
                after.status.observed_generation <= planned_at,
                "generation {} observed by a run that only attached to the apply planned at {}",
                after.status.observed_generation,
                planned_at
            );
        }
        if planned && !left {
            self.left_applying[i] = None;
        }

        // Nothing runs twice: an apply recorded as under way (its driver stopped) is attached to
        // before anything else runs, and nothing is applied unless that runner is gone.
        if before.status.active_run.is_some() && !deleting {
            let gone = before
                .status
                .active_run
                .as_ref()
                .is_some_and(|a| w.lock().gone_runners.contains(&a.runner));
            if let Some(first) = calls.first()
                && !gone
            {
                prop_assert_eq!(first.op, FakeOp::Attach, "ran {:?} before attaching", calls);
            }
            if calls.iter().any(|c| c.op == FakeOp::Apply) {
                prop_assert!(
                    gone,
                    "applied again while the recorded apply's runner lives"
                );
            }
        }

        // Nothing a Deny policy forbids is applied: with the guard policy in place, an apply
        // never makes a resource "2" that was not, nor removes the drifted resource.
        if guarded && calls.iter().any(|c| c.op == FakeOp::Apply) {
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
            prop_assert!(
                real_after.is_empty(),
                "state deleted while resources exist: {real_after:?}"
            );
            // The state is the runner's to write: a runner that writes for the object removes
            // it too, in a session of this reconcile; the controller's own ports never do.
            if w.lock().runner_writes {
                let by_runner = w.lock().calls[calls_before..]
                    .iter()
                    .filter(|c| c.op == FakeOp::DeleteState && c.object == *key)
                    .count();
                prop_assert_eq!(
                    by_runner,
                    w.lock().deleted_states.len() - deleted_before,
                    "state deleted by the controller, not the runner"
                );
            }
        }

        check_outputs_config_map(
            w,
            key,
            &before,
            result.as_ref().ok().and_then(Option::as_ref),
        )?;
        let Ok(Some(report)) = result else {
            return Ok(());
        };
        check_replay(&before, &deps, &report, now0, w, source_revision.as_deref())?;

        // Every failure that ends a run is visible as Ready=False with its reason.
        // (A failed automatic force-unlock leaves the lock failure before it as the cause. A
        // suspended object's release of its runners is not a run: it stays Suspended.)
        let mut ending = report.records.iter().rev().filter(|r| {
            ![
                StepKind::Cleanup,
                StepKind::ProbeRunner,
                StepKind::ReleaseRunners,
            ]
            .contains(&r.step)
        });
        let mut last = ending.next();
        if last.is_some_and(|r| r.step == StepKind::ForceUnlock && r.result.is_err()) {
            last = ending.next();
        }
        if let (Some(Err(f)), Some(after)) = (last.map(|r| &r.result), w.object(key))
            && last.is_some_and(|r| r.step != StepKind::AddFinalizer)
        {
            let ready = conditions::find(&after.status.conditions, ConditionType::Ready).unwrap();
            if f.reason == Reason::RunnerQuotaExhausted {
                // Not a failure: the object waits for a runner Pod, counting none.
                prop_assert_eq!(ready.status, ConditionStatus::Unknown);
                prop_assert_eq!(&ready.reason, Reason::RunnerQuotaExhausted.as_str());
                prop_assert_eq!(
                    after.status.reconciliation_failures,
                    before.status.reconciliation_failures
                );
            } else {
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
        }

        // A status-only update (the one just written) never starts a run, unless the run
        // left a spec generation unobserved and asked to be run again at once (an apply
        // taken up after a restart answers to the generation it was planned at).
        let unobserved = w.object(key).is_some_and(|o| {
            o.status.observed_generation < o.metadata.generation
                && report.requeue_after == Some(Duration::ZERO)
        });
        let add_failed = report
            .records
            .iter()
            .any(|r| r.step == StepKind::AddFinalizer && r.result.is_err());
        if let Some(after) = w.object(key)
            && !add_failed
            && !unobserved
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
    source_revision: Option<&str>,
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
            queue: Default::default(),
            source_revision: source_revision.map(str::to_string),
            pull_approvals: Vec::new(),
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
    // A condition that changed status in the run changed when one of its steps ended (or at
    // its start): a time read from the records, never from a clock.
    let times: std::collections::BTreeSet<_> = std::iter::once(now0)
        .chain(report.records.iter().map(|r| r.at))
        .collect();
    for c in &report.status.conditions {
        let old = before.status.conditions.iter().find(|o| o.type_ == c.type_);
        if old.is_none_or(|o| o.last_transition_time != c.last_transition_time) {
            prop_assert!(
                times.contains(&c.last_transition_time),
                "{} changed at {}, no step's end: {:?}",
                c.type_,
                c.last_transition_time,
                report.records
            );
        }
    }
    Ok(())
}

/// What changed from `before` to `after`, in the same form.
fn diff(
    before: &std::collections::BTreeMap<String, String>,
    after: &std::collections::BTreeMap<String, String>,
) -> Changes {
    before
        .keys()
        .chain(after.keys())
        .filter(|k| before.get(*k) != after.get(*k))
        .map(|k| (k.clone(), (before.get(k).cloned(), after.get(k).cloned())))
        .collect()
}

/// The `writeOutputsToConfigMap` of edit `n`: none; every output not sensitive; one renamed;
/// the sensitive `token` (which must be refused).
fn config_map_target(object: &str, n: u8) -> Option<tfops_core::api::WriteOutputsToConfigMap> {
    let target = match n {
        0 => return None,
        1 => json!({"name": format!("{object}-values")}),
        2 => json!({"name": format!("{object}-cfg"), "outputs": ["resource_count:count"]}),
        _ => json!({"name": format!("{object}-values"), "outputs": ["resource_count", "token"]}),
    };
    Some(serde_json::from_value(target).unwrap())
}

/// The outputs ConfigMap, judged by a model of what it must hold (the fake Terraform's
/// outputs: `resource_count`, the number of resources in the state, and the sensitive
/// `token`): no ConfigMap ever holds a sensitive output; an Outputs step that selects the
/// token fails, naming it; one that succeeds leaves exactly the selection of the outputs the
/// spec asks for, as text, recorded in status, and the ConfigMap recorded before gone when
/// the name changed; a deleted object leaves neither the ConfigMap it asked for nor the one it
/// recorded.
fn check_outputs_config_map(
    w: &FakeWorld,
    key: &ObjectKey,
    before: &TerraformObject,
    report: Option<&RunReport>,
) -> Result<(), TestCaseError> {
    let maps = w.lock().output_config_maps.clone();
    for ((_, name), data) in &maps {
        prop_assert!(
            !data.contains_key("token") && data.values().all(|v| !v.contains("s3cr3t")),
            "ConfigMap {name} holds a sensitive output: {data:?}"
        );
    }
    let at = |name: &str| maps.get(&(key.namespace.clone(), name.to_string()));
    let Some(after) = w.object(key) else {
        if before.metadata.deletion_timestamp.is_some() {
            let asked = before.spec.write_outputs_to_config_map.as_ref();
            for name in asked
                .map(|t| t.name.clone())
                .into_iter()
                .chain(before.status.outputs_config_map.clone())
            {
                prop_assert!(at(&name).is_none(), "{name} left after deletion");
            }
        }
        return Ok(());
    };
    let target = before.spec.write_outputs_to_config_map.as_ref();
    let outputs_steps = report
        .map(|r| r.records.as_slice())
        .unwrap_or_default()
        .iter()
        .filter(|r| r.step == StepKind::Outputs);
    let mut read = false;
    for record in outputs_steps {
        if target.is_some_and(|t| t.outputs.iter().any(|o| o == "token")) {
            let failure = record.result.as_ref().err();
            prop_assert!(
                failure.is_some_and(|f| f
                    .message
                    .contains(r#"output "token" is marked sensitive"#)
                    || f.message.contains("injected")),
                "the sensitive token was not refused: {:?}",
                record.result
            );
        }
        read |= record.result.is_ok();
    }
    if !read {
        return Ok(());
    }
    let count = w
        .lock()
        .infra
        .get(key)
        .map_or(0, |i| i.state.len())
        .to_string();
    if let Some(t) = target {
        let key = if t.outputs.is_empty() {
            "resource_count"
        } else {
            "count"
        };
        let expected = [(key.to_string(), count)].into();
        prop_assert_eq!(at(&t.name), Some(&expected), "ConfigMap {}", t.name);
    }
    prop_assert_eq!(
        after.status.outputs_config_map.as_deref(),
        target.map(|t| t.name.as_str())
    );
    if let Some(old) = before.status.outputs_config_map.as_deref()
        && target.is_none_or(|t| t.name != old)
    {
        prop_assert!(at(old).is_none(), "{old} left after it was replaced");
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
            holder_gone: false,
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
    // The human changes a policy that denies the destroy.
    w.lock().policies.clear();
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
    fn reconciler_invariants_hold(
        actions in proptest::collection::vec(action(), 1..80),
        runner_writes in any::<bool>(),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let mut model = Model::new(runner_writes);
        for a in &actions {
            model.apply(a, &rt)?;
        }
        check_deletion_terminates(&mut model, &rt)?;
    }
}

/// The soak's seed-7 history in the model: a driver dies after its apply, the spec changes
/// while nobody drives, the next driver attaches (the invariants of `reconcile_and_check`,
/// the attached run's observed generation among them), and then plans the newer spec.
#[test]
fn a_spec_changed_while_an_apply_was_left_is_not_observed_by_the_attach() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let mut model = Model::new(false);
    for a in [
        Action::CrashAfterApply,
        Action::Reconcile(0),
        Action::Edit(0, Edit::ApproveManual),
        Action::Reconcile(0),
        Action::Reconcile(0),
    ] {
        model.apply(&a, &rt).unwrap();
    }
    let o = model.world.object(&model.keys[0]).unwrap();
    assert_eq!(o.status.observed_generation, o.metadata.generation);
}

/// Deletions that destroy, often: both objects start asking to destroy on deletion and to
/// delete their state, then histories mix reconciles, faults, drift, toggles of those two
/// fields and deletions. The invariants of `reconcile_and_check` hold (state deleted only when
/// asked, after a destroy left nothing, and by the runner when it writes for the object), and
/// deletion still terminates.
fn deletion_action() -> impl Strategy<Value = Action> {
    prop_oneof![
        8 => (0usize..2).prop_map(Action::Reconcile),
        2 => (0usize..2).prop_map(Action::Delete),
        1 => (0usize..2).prop_map(|o| Action::Edit(o, Edit::DestroyOnDeletion)),
        1 => (0usize..2).prop_map(|o| Action::Edit(o, Edit::DeleteStateOnDestroy)),
        2 => (0usize..2, proptest::bool::weighted(0.8), any::<bool>())
            .prop_map(|(o, right, token)| Action::ApproveByAnnotation(o, right, token)),
        2 => proptest::sample::select(FAULTS).prop_map(Action::Fail),
        2 => proptest::sample::select(&[1u64, 20, 300, 660][..]).prop_map(Action::Advance),
        1 => (0usize..2).prop_map(Action::Drift),
        1 => Just(Action::LoseRunners),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, max_shrink_iters: 2000, ..ProptestConfig::default() })]

    #[test]
    fn deletions_that_destroy_keep_the_state_rules(
        actions in proptest::collection::vec(deletion_action(), 1..40),
        runner_writes in any::<bool>(),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let mut model = Model::new(runner_writes);
        for key in model.keys.clone() {
            model.world.edit(&key, |s| {
                s.destroy_resources_on_deletion = true;
                s.tfstate.delete_on_destroy = true;
            });
        }
        for a in &actions {
            model.apply(a, &rt)?;
        }
        check_deletion_terminates(&mut model, &rt)?;
    }
}

/// The outputs ConfigMap, often: histories of reconciles, changes of
/// `writeOutputsToConfigMap` (none, all not sensitive, one renamed, the sensitive token),
/// faults around the outputs, new revisions, time and deletions. The invariants of
/// `check_outputs_config_map` hold after every reconcile, and deletion still terminates.
fn outputs_action() -> impl Strategy<Value = Action> {
    prop_oneof![
        8 => (0usize..2).prop_map(Action::Reconcile),
        4 => (0usize..2, 0u8..4).prop_map(|(o, n)| Action::Edit(o, Edit::OutputsConfigMap(n))),
        1 => (0usize..2).prop_map(|o| Action::Edit(o, Edit::ApproveAuto)),
        1 => (0usize..2, 0u8..4).prop_map(|(o, r)| Action::NewRevision(o, r, false)),
        2 => proptest::sample::select(&[
            FakeOp::Output,
            FakeOp::Inventory,
            FakeOp::WriteOutputs,
            FakeOp::WriteConfigMap,
            FakeOp::DeleteConfigMap,
        ][..]).prop_map(Action::Fail),
        2 => proptest::sample::select(&[20u64, 660, 7200][..]).prop_map(Action::Advance),
        1 => (0usize..2).prop_map(Action::Delete),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, max_shrink_iters: 2000, ..ProptestConfig::default() })]

    #[test]
    fn outputs_config_maps_hold_no_secret_and_leave_nothing_behind(
        actions in proptest::collection::vec(outputs_action(), 1..40),
        runner_writes in any::<bool>(),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let mut model = Model::new(runner_writes);
        for a in &actions {
            model.apply(a, &rt)?;
        }
        check_deletion_terminates(&mut model, &rt)?;
    }
}
