//! In-memory fakes of every port, for property tests and for embedders' own tests.
//!
//! [`FakeWorld`] is a tiny simulated cluster and cloud in one value: an object store that
//! behaves like the API server for status and finalizers, Git-like sources whose revisions hold
//! a set of resources, Secrets for inputs, and per-object infrastructure with a Terraform-like
//! state, lock and drift. It implements every port; [`FakeWorld::ports`] hands it to a
//! [`crate::reconcile::Driver`]. Any operation can be made to fail with [`FakeWorld::fail_next`]
//! or [`FakeWorld::fail_always`], and every runner command is recorded in [`WorldState::calls`].

mod locks;
mod ops;
mod ports;
mod runner;

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::api::{ObjectKey, RunnerRole, TerraformObject, TerraformSpec};
use crate::ports::{Event, PortError, Ports, StoredPlan};
use crate::reconcile::{
    DependencyState, DependencyView, Driver, DriverError, RunReport, RunnerQueue,
};

pub use ops::FakeOp;
pub use runner::FakeSession;

/// A driver crash to simulate ([`FakeWorld::crash_after_next_apply`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Crash {
    /// None.
    #[default]
    No,
    /// The next successful apply is followed by the driver dying.
    Armed,
    /// An apply succeeded: the next status write fails, and the driver stops.
    Applied,
}

/// The name of the runner of fake session `n` ([`crate::ports::RunnerSession::runner`]).
pub fn runner_ref(n: usize) -> String {
    format!("fake-runner-{n}")
}

/// A runner command as recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// The object the runner ran for.
    pub object: ObjectKey,
    /// The command.
    pub op: FakeOp,
    /// Which session (runner start) it belongs to, counting from 0.
    pub session: usize,
    /// The runner that session was started as.
    pub role: RunnerRole,
    /// The object's status as stored when the command ran: what a person reading the object
    /// saw while it ran.
    pub status: crate::api::TerraformStatus,
}

/// Simulated infrastructure of one object.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Infra {
    /// What Terraform's state says exists: address → value.
    pub state: BTreeMap<String, String>,
    /// What really exists. Differs from `state` when something drifted.
    pub real: BTreeMap<String, String>,
    /// A held state lock: (lock id, holder).
    pub lock: Option<(String, String)>,
    /// Whether the runner that finds the lock proves its holder gone (its own host).
    pub lock_holder_gone: bool,
    /// The lock was taken by an `init` writing the workspace's first state: while it is held,
    /// every `init` stops on it.
    pub lock_at_init: bool,
}

/// Everything the fake world holds. Public so tests can look at (and arrange) anything.
#[derive(Debug, Default)]
pub struct WorldState {
    /// The object store.
    pub objects: BTreeMap<ObjectKey, TerraformObject>,
    /// The current revision of each source URL: (reference, sha).
    pub sources: BTreeMap<String, (String, String)>,
    /// The resources of each revision, by sha.
    pub trees: BTreeMap<String, BTreeMap<String, String>>,
    /// The files that differ between two revisions, by (from sha, to sha); a pair not here
    /// cannot be compared ([`crate::source::SourceChanges::Unknown`]).
    pub changed_files: BTreeMap<(String, String), Vec<String>>,
    /// The comparisons asked for, as (from sha, to sha), in order.
    pub comparisons: Vec<(String, String)>,
    /// Secrets and ConfigMaps alike: (namespace, name) → key → value.
    pub secrets: BTreeMap<(String, String), BTreeMap<String, String>>,
    /// Infrastructure per object.
    pub infra: BTreeMap<ObjectKey, Infra>,
    /// Stored plans per (object, workspace).
    pub plans: BTreeMap<(ObjectKey, String), StoredPlan>,
    /// Outputs Secrets: (namespace, name) → key → JSON value.
    pub output_secrets: BTreeMap<(String, String), BTreeMap<String, serde_json::Value>>,
    /// Outputs ConfigMaps: (namespace, name) → key → text.
    pub output_config_maps: BTreeMap<(String, String), BTreeMap<String, String>>,
    /// States deleted through the state admin port: (object, workspace, suffix).
    pub deleted_states: Vec<(ObjectKey, String, String)>,
    /// Emitted events.
    pub events: Vec<(ObjectKey, Event)>,
    /// Runner commands.
    pub calls: Vec<Call>,
    /// How many runner sessions were started.
    pub sessions: usize,
    /// The role each session was started as, by session number.
    pub session_roles: Vec<RunnerRole>,
    /// Every plan shown (`show -json`), with the session that made it.
    pub shown: Vec<(usize, String)>,
    /// Armed by [`FakeWorld::change_before_next_apply_runner`].
    pub change_at_hand_over: bool,
    /// The result of every apply by run id, as a runner keeps it for re-attaching.
    pub runs: BTreeMap<String, Result<(), PortError>>,
    /// Runners that are gone ([`FakeWorld::lose_runners`]): attaching to them finds nothing.
    pub gone_runners: std::collections::BTreeSet<String>,
    /// Objects whose apply runner Pod (by its name, [`crate::naming::apply_runner_pod_name`])
    /// still exists ([`FakeWorld::lock_state_of_apply_runner`]); the others' is gone.
    pub live_apply_runners: std::collections::BTreeSet<ObjectKey>,
    /// Objects whose runner outlived the run that started it ([`FakeWorld::leave_runner`]),
    /// until a new session replaces it or [`crate::ports::RunnerPort::release`] ends it.
    pub leftover_runners: std::collections::BTreeSet<ObjectKey>,
    /// The objects whose runners were released, in order.
    pub released: Vec<ObjectKey>,
    /// A driver crash armed with [`FakeWorld::crash_after_next_apply`].
    pub crash: Crash,
    /// Armed with [`FakeWorld::time_out_next_apply`] or [`FakeWorld::stop_next_apply`]: the
    /// next apply makes one of its changes, then ends with this error.
    pub interrupt_apply: Option<crate::ports::PortError>,
    /// How many applies were interrupted part-way (timed out or stopped by a user).
    pub interrupted_applies: usize,
    /// How many status writes succeeded.
    pub status_writes: usize,
    /// `TerraformPolicy` objects.
    pub policies: Vec<crate::policy::TerraformPolicy>,
    /// The approvals recorded on each object's merged pull requests.
    pub pull_approvals: BTreeMap<ObjectKey, Vec<crate::ports::PullApproval>>,
    /// Runner sessions store plans and write outputs themselves, as runner Pods do (through
    /// this world's plan store and outputs sink, with the same faults).
    pub runner_writes: bool,
    /// The current time.
    pub now: jiff::Timestamp,
    /// How far the clock moves at each reading.
    pub tick: Duration,
    one_shot: BTreeMap<FakeOp, VecDeque<(usize, PortError)>>,
    always: BTreeMap<FakeOp, PortError>,
}

/// A simulated cluster and cloud; cheap to clone (clones share the same world).
#[derive(Debug, Clone)]
pub struct FakeWorld {
    state: Arc<Mutex<WorldState>>,
}

impl FakeWorld {
    /// An empty world whose clock starts at `now` and moves one second at each reading.
    pub fn new(now: jiff::Timestamp) -> Self {
        let state = WorldState {
            now,
            tick: Duration::from_secs(1),
            ..WorldState::default()
        };
        Self {
            state: Arc::new(Mutex::new(state)),
        }
    }

    /// Locks the world for reading or arranging it directly.
    pub fn lock(&self) -> MutexGuard<'_, WorldState> {
        // A panic while holding the lock can only come from a failing test; keep going with
        // whatever state it left so that test reports its own failure.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every port, backed by this world.
    pub fn ports(&self) -> Ports {
        let me = Arc::new(self.clone());
        Ports {
            source: me.clone(),
            inputs: me.clone(),
            runner: me.clone(),
            plans: me.clone(),
            outputs: me.clone(),
            state: me.clone(),
            health: me.clone(),
            events: me.clone(),
            objects: me.clone(),
            clock: me.clone(),
            policies: me,
        }
    }

    /// The next call of `op` fails with `error` (queued: several calls queue several failures).
    pub fn fail_next(&self, op: FakeOp, error: PortError) {
        self.fail_after(op, 0, error);
    }

    /// The call of `op` after the next `successes` ones fails with `error`.
    pub fn fail_after(&self, op: FakeOp, successes: usize, error: PortError) {
        self.lock()
            .one_shot
            .entry(op)
            .or_default()
            .push_back((successes, error));
    }

    /// Every call of `op` fails with `error` until [`FakeWorld::heal`].
    pub fn fail_always(&self, op: FakeOp, error: PortError) {
        self.lock().always.insert(op, error);
    }

    /// Removes every fault of `op`.
    pub fn heal(&self, op: FakeOp) {
        let mut w = self.lock();
        w.always.remove(&op);
        w.one_shot.remove(&op);
    }

    /// Fails if a fault is set for `op`.
    pub(crate) fn check(&self, op: FakeOp) -> Result<(), PortError> {
        let mut w = self.lock();
        if let Some(queue) = w.one_shot.get_mut(&op)
            && let Some((successes, _)) = queue.front_mut()
        {
            if *successes > 0 {
                *successes -= 1;
                return Ok(());
            }
            if let Some((_, e)) = queue.pop_front() {
                return Err(e);
            }
        }
        w.always.get(&op).cloned().map_or(Ok(()), Err)
    }

    /// Makes `url` resolve to a new revision holding `resources` (address, value).
    pub fn publish(&self, url: &str, reference: &str, sha: &str, resources: &[(&str, &str)]) {
        // The tree first: the revision is never resolved before it can be fetched.
        self.commit(sha, resources);
        let source = (reference.into(), sha.into());
        self.lock().sources.insert(url.into(), source);
    }

    /// Adds commit `sha` holding `resources` (address, value) without moving any branch: a
    /// pull request's head.
    pub fn commit(&self, sha: &str, resources: &[(&str, &str)]) {
        let tree = resources
            .iter()
            .map(|(a, v)| (a.to_string(), v.to_string()))
            .collect();
        self.lock().trees.insert(sha.into(), tree);
    }

    /// Says which files differ between revisions `from` and `to` (both shas).
    pub fn changed_between(&self, from: &str, to: &str, files: &[&str]) {
        self.lock().changed_files.insert(
            (from.into(), to.into()),
            files.iter().map(|f| f.to_string()).collect(),
        );
    }

    /// Stores a Secret (or ConfigMap) for inputs.
    pub fn set_secret(&self, namespace: &str, name: &str, data: &[(&str, &str)]) {
        let data = data
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self.lock()
            .secrets
            .insert((namespace.into(), name.into()), data);
    }

    /// Creates an object (generation 1 unless set).
    pub fn create(&self, mut object: TerraformObject) -> ObjectKey {
        if object.metadata.generation == 0 {
            object.metadata.generation = 1;
        }
        let key = object.key();
        self.lock().objects.insert(key.clone(), object);
        key
    }

    /// Edits an object's spec; the generation moves when the spec changed, as on an API server.
    pub fn edit(&self, key: &ObjectKey, change: impl FnOnce(&mut TerraformSpec)) {
        let mut w = self.lock();
        if let Some(o) = w.objects.get_mut(key) {
            let before = o.spec.clone();
            change(&mut o.spec);
            if o.spec != before {
                o.metadata.generation += 1;
            }
        }
    }

    /// Sets an annotation (generation unchanged, as on an API server).
    pub fn annotate(&self, key: &ObjectKey, name: &str, value: &str) {
        if let Some(o) = self.lock().objects.get_mut(key) {
            o.metadata.annotations.insert(name.into(), value.into());
        }
    }

    /// Removes an annotation (generation unchanged).
    pub fn unannotate(&self, key: &ObjectKey, name: &str) {
        if let Some(o) = self.lock().objects.get_mut(key) {
            o.metadata.annotations.remove(name);
        }
    }

    /// Requests deletion: the object goes at once without finalizers, else when they are gone.
    pub fn delete(&self, key: &ObjectKey) {
        let mut w = self.lock();
        let now = w.now;
        let gone = match w.objects.get_mut(key) {
            Some(o) => {
                o.metadata.deletion_timestamp.get_or_insert(now);
                o.metadata.finalizers.is_empty()
            }
            None => false,
        };
        if gone {
            w.objects.remove(key);
        }
    }

    /// The object, if it exists.
    pub fn object(&self, key: &ObjectKey) -> Option<TerraformObject> {
        self.lock().objects.get(key).cloned()
    }

    /// Moves the clock.
    pub fn advance(&self, by: Duration) {
        let mut w = self.lock();
        w.now = add(w.now, by);
    }

    /// Changes a resource behind Terraform's back (drift).
    pub fn drift(&self, key: &ObjectKey, address: &str, value: &str) {
        let mut w = self.lock();
        let infra = w.infra.entry(key.clone()).or_default();
        infra.real.insert(address.into(), value.into());
    }

    /// The driver that makes the next successful apply dies right after it (before it can
    /// write anything more), leaving the status as it was written before the apply.
    pub fn crash_after_next_apply(&self) {
        self.lock().crash = Crash::Armed;
    }

    /// The next apply makes the first of its changes (in address order), then is stopped at
    /// its timeout ([`crate::ports::PortError::TimedOut`]): what it made is in the state, the
    /// rest is not, and its plan is used up (a stale plan, as Terraform's would be).
    pub fn time_out_next_apply(&self) {
        self.lock().interrupt_apply = Some(crate::ports::PortError::TimedOut(
            "terraform apply ran past its timeout of 2h and was stopped".into(),
        ));
    }

    /// As [`FakeWorld::time_out_next_apply`], the apply stopped by `who`
    /// ([`crate::ports::PortError::Stopped`]).
    pub fn stop_next_apply(&self, who: &str) {
        self.lock().interrupt_apply = Some(crate::ports::PortError::Stopped(format!(
            "stopped by {who}: the command was interrupted as Ctrl-C does"
        )));
    }

    /// When the next apply runner starts, someone else changes the object's infrastructure
    /// and state first (as a concurrent apply would): that runner's plan differs from the one
    /// the plan runner made.
    pub fn change_before_next_apply_runner(&self) {
        self.lock().change_at_hand_over = true;
    }

    /// Every runner started so far disappears (its Pod deleted, the machine restarted): runs
    /// recorded in status can no longer be attached to.
    pub fn lose_runners(&self) {
        let mut w = self.lock();
        let all: Vec<String> = (0..w.sessions).map(runner_ref).collect();
        w.gone_runners.extend(all);
        w.runs.clear();
    }

    /// The object's runner stays up after the run that started it, as when the manager that
    /// ran it was killed or fenced mid-run.
    pub fn leave_runner(&self, key: &ObjectKey) {
        self.lock().leftover_runners.insert(key.clone());
    }

    /// How many applies ran for the object.
    pub fn applies(&self, key: &ObjectKey) -> usize {
        self.calls_of(key, FakeOp::Apply)
    }

    /// How many times `op` ran on a runner for the object.
    pub fn calls_of(&self, key: &ObjectKey, op: FakeOp) -> usize {
        self.lock()
            .calls
            .iter()
            .filter(|c| c.object == *key && c.op == op)
            .count()
    }

    /// The dependency states and dependants of an object, read from the store the way the
    /// Kubernetes layer reads them from its caches.
    pub fn relations(&self, object: &TerraformObject) -> (Vec<DependencyState>, Vec<ObjectKey>) {
        let w = self.lock();
        let me = object.key();
        let dependencies = object
            .spec
            .depends_on
            .iter()
            .map(|d| {
                let key = ObjectKey::new(d.namespace.as_deref().unwrap_or(&me.namespace), &d.name);
                let found = w.objects.get(&key).map(DependencyView::of);
                DependencyState { key, found }
            })
            .collect();
        let dependants = w
            .objects
            .values()
            .filter(|o| {
                o.spec.depends_on.iter().any(|d| {
                    d.name == me.name
                        && d.namespace.as_deref().unwrap_or(&o.metadata.namespace) == me.namespace
                })
            })
            .map(TerraformObject::key)
            .collect();
        (dependencies, dependants)
    }

    /// Reconciles the object once with a driver over this world. `Ok(None)` when the object
    /// does not exist.
    ///
    /// # Errors
    /// The driver's error.
    pub async fn reconcile(&self, key: &ObjectKey) -> Result<Option<RunReport>, DriverError> {
        self.reconcile_queued(key, RunnerQueue::default()).await
    }

    /// The revision a source poller would see now for `object`'s source, as text (`None`:
    /// the repository does not exist).
    pub fn polled_revision(&self, object: &TerraformObject) -> Option<String> {
        let w = self.lock();
        let (reference, sha) = w.sources.get(&object.spec.source_ref.url)?;
        let revision = crate::ports::Revision {
            reference: reference.clone(),
            digest: format!("sha1:{sha}"),
        };
        Some(revision.to_string())
    }

    /// [`FakeWorld::reconcile_queued`] with `source_revision` as the revision a source poller
    /// saw ([`crate::reconcile::Snapshot::source_revision`]).
    ///
    /// # Errors
    /// The driver's error.
    pub async fn reconcile_polled(
        &self,
        key: &ObjectKey,
        queue: RunnerQueue,
        source_revision: Option<String>,
    ) -> Result<Option<RunReport>, DriverError> {
        let Some(object) = self.object(key) else {
            return Ok(None);
        };
        let (dependencies, dependants) = self.relations(&object);
        Driver::new(self.ports())
            .reconcile_polled(object, dependencies, dependants, queue, source_revision)
            .await
            .map(Some)
    }

    /// [`FakeWorld::reconcile`], the object standing in its namespace's queue for runner Pods
    /// as `queue` says.
    ///
    /// # Errors
    /// The driver's error.
    pub async fn reconcile_queued(
        &self,
        key: &ObjectKey,
        queue: RunnerQueue,
    ) -> Result<Option<RunReport>, DriverError> {
        self.reconcile_polled(key, queue, None).await
    }
}

fn add(t: jiff::Timestamp, d: Duration) -> jiff::Timestamp {
    let ms = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
    jiff::Timestamp::from_millisecond(t.as_millisecond().saturating_add(ms)).unwrap_or(t)
}
