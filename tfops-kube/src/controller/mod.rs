//! The controller: `kube::runtime`'s [`Controller`] over `Terraform` objects, driving the
//! core's [`Driver`] through the Kubernetes ports. Each reconcile reads the object afresh from
//! the API server (the watch cache can lag behind tfops' own status writes, and the decision
//! must start from what was last written), builds the dependency states from the cache and
//! the dependants from the [`index::DependsIndex`], and requeues as the driver says. Where an
//! object stands in its namespace's queue for runner Pods comes from the caches of objects and
//! ResourceQuotas (`queue`), and a quota's change wakes the longest waiters.

pub mod index;
mod poll;
mod queue;
pub mod shard;
mod state_size;
mod stores;

use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ResourceQuota;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tfops_core::api::{ObjectKey, TerraformObject};
use tfops_core::ports::{EventSink, Ports};
use tfops_core::reconcile::{
    DependencyState, DependencyView, Driver, DriverError, RunReport, StepKind,
};

use crate::watch_backoff::{already_waited, watch_backoff};
use crate::{KubeEventSink, Terraform};
use index::{DependsIndex, dependencies_of};
pub use poll::DEFAULT_INTERVAL as DEFAULT_SOURCE_POLL_INTERVAL;
pub use poll::PollNow;
use poll::SourcePoller;
use queue::RunnerQueues;
use shard::Shard;
pub use stores::SharedStores;

/// Why a reconcile did not finish; it is retried after [`Settings::error_requeue`].
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// Reading the object failed.
    #[error("reading Terraform {object}: {source}")]
    Read {
        /// The object.
        object: ObjectKey,
        /// The cause.
        #[source]
        source: kube::Error,
    },
    /// The driver could not finish (its status write failed).
    #[error(transparent)]
    Driver(#[from] DriverError),
}

/// Told of every reconcile (metrics, logs).
pub trait ReconcileObserver: Send + Sync {
    /// `object` was reconciled in `took`, with this outcome.
    fn reconciled(
        &self,
        object: &ObjectKey,
        took: Duration,
        outcome: Result<&RunReport, &ReconcileError>,
    );
    /// `object` no longer exists.
    fn deleted(&self, object: &ObjectKey) {
        let _ = object;
    }
    /// A reconcile of `object` begins (it holds one of the `--concurrent` slots now).
    fn started(&self, object: &ObjectKey) {
        let _ = object;
    }
}

/// A [`ReconcileObserver`] in [`Settings`].
#[derive(Clone)]
pub struct Observer(pub Arc<dyn ReconcileObserver>);

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Observer")
    }
}

/// How the controller runs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The namespaces to watch (empty: all). Each has its own watch; dependencies are found
    /// across them.
    pub namespaces: Vec<String>,
    /// Reconciles running at once, across all watched namespaces (0: no limit).
    pub concurrency: u16,
    /// Wait before retrying a reconcile that failed.
    pub error_requeue: Duration,
    /// Told of every reconcile.
    pub observer: Option<Observer>,
    /// The objects reconciled: those of this shard only.
    pub shard: Shard,
    /// How often each distinct source of the cached objects is resolved, waking the objects
    /// that have not attempted its revision (`None`: never; new revisions then wait for each
    /// object's `spec.interval`).
    pub source_poll_interval: Option<Duration>,
    /// Asks for a poll of some repositories' sources at once (a forge's push webhook); the
    /// poller runs for it even when it does not poll on its own.
    pub poll_now: Option<PollNow>,
    /// Where the controller shares its caches of `Terraform` objects (one per watched scope)
    /// once it runs, for other loops of the process to read instead of listing.
    pub stores: SharedStores,
    /// The reconciles under way a user may stop (the cancel annotation); shared with the
    /// runner port, whose sessions it stops.
    pub stops: Arc<crate::stops::Stops>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            namespaces: Vec::new(),
            concurrency: 4,
            error_requeue: Duration::from_secs(10),
            observer: None,
            shard: Shard::Default,
            source_poll_interval: Some(DEFAULT_SOURCE_POLL_INTERVAL),
            poll_now: None,
            stores: SharedStores::default(),
            stops: Arc::default(),
        }
    }
}

/// What each reconcile needs.
pub struct Context {
    client: kube::Client,
    driver: Driver,
    /// The driver's event sink, for the controller's own warnings.
    sink: Arc<dyn EventSink>,
    events: Option<KubeEventSink>,
    index: Arc<DependsIndex>,
    /// The caches of every watched namespace.
    stores: Vec<Store<Terraform>>,
    /// The queues for runner Pods.
    queues: Arc<RunnerQueues>,
    /// The source poller, when sources are polled.
    poller: Option<Arc<SourcePoller>>,
    /// [`Settings::concurrency`] permits shared by every namespace's controller (each of
    /// which would otherwise allow that many on its own).
    permits: Arc<tokio::sync::Semaphore>,
    settings: Settings,
}

fn key_of(tf: &Terraform) -> ObjectKey {
    ObjectKey::new(
        tf.metadata.namespace.as_deref().unwrap_or_default(),
        tf.metadata.name.as_deref().unwrap_or_default(),
    )
}

fn object_ref(key: &ObjectKey) -> ObjectRef<Terraform> {
    ObjectRef::new(&key.name).within(&key.namespace)
}

impl Context {
    /// `key` as a cache has it.
    fn cached(&self, key: &ObjectKey) -> Option<Arc<Terraform>> {
        let reference = object_ref(key);
        self.stores.iter().find_map(|s| s.get(&reference))
    }

    /// The dependencies' states as the cache has them; one not cached (in another shard, or
    /// a namespace not watched) is read from the API server. A dependency that cannot be read
    /// counts as missing: the dependant waits, which is safe.
    async fn dependencies(&self, object: &TerraformObject) -> Vec<DependencyState> {
        let mut states = Vec::new();
        for key in dependencies_of(object) {
            let found = match self.cached(&key) {
                Some(tf) => Some(DependencyView::of(&tf.to_object())),
                None => Api::<Terraform>::namespaced(self.client.clone(), &key.namespace)
                    .get_opt(&key.name)
                    .await
                    .ok()
                    .flatten()
                    .map(|tf| DependencyView::of(&tf.to_object())),
            };
            states.push(DependencyState { key, found });
        }
        states
    }

    /// Resolves when `key` has left this manager's shard (its label changed): it is gone
    /// from the cache and the API server has it labelled for another shard. A deleted object
    /// never resolves it (its reconcile finishes the deletion).
    async fn left_shard(&self, key: &ObjectKey) {
        let api: Api<Terraform> = Api::namespaced(self.client.clone(), &key.namespace);
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            if self.cached(key).is_some() {
                continue;
            }
            match api.get_opt(&key.name).await {
                Ok(Some(tf)) if !self.settings.shard.owns(tf.labels()) => return,
                Ok(None) => std::future::pending::<()>().await,
                _ => {}
            }
        }
    }

    /// The objects that depend on `object` and still exist and still name it.
    fn dependants(&self, object: &TerraformObject) -> Vec<ObjectKey> {
        let me = object.key();
        self.index
            .dependants(&me)
            .into_iter()
            .filter(|k| {
                self.cached(k)
                    .is_some_and(|tf| dependencies_of(&tf.to_object()).contains(&me))
            })
            .collect()
    }
}

async fn reconcile(cached: Arc<Terraform>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    let key = key_of(&cached);
    let started = std::time::Instant::now();
    // Every line logged during the reconcile (kube's too) carries the object; the driver
    // opens a child span per step with the step and run id.
    let span = tracing::info_span!("reconcile", object = %key);
    // The semaphore is never closed, so acquiring fails never; were it closed, the reconcile
    // would go on unlimited rather than stop.
    let permit = ctx.permits.acquire().await.ok();
    if let Some(Observer(observer)) = &ctx.settings.observer {
        observer.started(&key);
    }
    let _stoppable = ctx.settings.stops.begin(&key, &cached);
    let result = tokio::select! {
        r = tracing::Instrument::instrument(reconcile_once(&key, &ctx), span) => r,
        () = ctx.left_shard(&key) => {
            // As a manager that lost its leadership: what runs in the runner Pod goes on
            // (an apply is recorded in status), and the new shard takes it from there.
            tracing::info!(object = %key, "moved to another shard mid-reconcile; left to it");
            Ok(None)
        }
    };
    drop(permit);
    if let Some(Observer(observer)) = &ctx.settings.observer {
        match &result {
            Ok(Some(report)) => observer.reconciled(&key, started.elapsed(), Ok(report)),
            Ok(None) => observer.deleted(&key),
            Err(e) => observer.reconciled(&key, started.elapsed(), Err(e)),
        }
    }
    Ok(match result?.and_then(|r| r.requeue_after) {
        Some(after) => Action::requeue(after),
        None => Action::await_change(),
    })
}

/// One reconcile of `key`; `None` when the object is gone.
async fn reconcile_once(
    key: &ObjectKey,
    ctx: &Context,
) -> Result<Option<RunReport>, ReconcileError> {
    let key = key.clone();
    let api: Api<Terraform> = Api::namespaced(ctx.client.clone(), &key.namespace);
    let Some(fresh) = api
        .get_opt(&key.name)
        .await
        .map_err(|source| ReconcileError::Read {
            object: key.clone(),
            source,
        })?
    else {
        ctx.index.forget(&key);
        ctx.queues.forget(&key);
        if let Some(poller) = &ctx.poller {
            poller.forget(&key);
        }
        return Ok(None);
    };
    if !ctx.settings.shard.owns(fresh.labels()) {
        tracing::info!(object = %key, now = %Shard::describe(fresh.labels()), "not in this manager's shard; left to it");
        return Ok(None);
    }
    let object = fresh.to_object();
    if let Some(events) = &ctx.events {
        events.observe(&key, &object.metadata.uid).await;
    }
    let dependencies = ctx.dependencies(&object).await;
    let dependants = ctx.dependants(&object);
    let started = jiff::Timestamp::now();
    let (queue, seen) = ctx.queues.view(&object);
    let polled = ctx.poller.as_ref().and_then(|p| p.revision(&object));
    let report = ctx
        .driver
        .reconcile_polled(object.clone(), dependencies, dependants, queue, polled)
        .await?;
    ctx.queues.record(&key, seen, &report);
    if let Some(poller) = &ctx.poller {
        poller.observe(&object, &report);
    }
    state_size::warn_of_state_size(ctx, &object, &report).await;
    record_run(ctx, &object, &report, started).await;
    Ok(Some(report))
}

/// Adds the run to the object's history (not once the object is released for deletion: its
/// history goes with it). A history that cannot be written is logged, never a failed run.
async fn record_run(
    ctx: &Context,
    object: &TerraformObject,
    report: &RunReport,
    started: jiff::Timestamp,
) {
    let released = report
        .records
        .iter()
        .any(|r| r.step == StepKind::RemoveFinalizer && r.result.is_ok());
    let entry = tfops_core::history::entry(object, report, started);
    let Some(entry) = entry.filter(|_| !released) else {
        return;
    };
    let key = object.key();
    let history = crate::history::KubeRunHistory::new(ctx.client.clone());
    if let Err(error) = history.record(&key, &object.metadata.uid, entry).await {
        tracing::warn!(object = %key, %error, "the run history could not be written");
    }
}

fn error_policy(tf: Arc<Terraform>, error: &ReconcileError, ctx: Arc<Context>) -> Action {
    tracing::warn!(object = %key_of(&tf), %error, "reconcile failed; retrying");
    Action::requeue(ctx.settings.error_requeue)
}

/// What the cache keeps of an object: no `managedFields` and no `kubectl apply` copy of the
/// last configuration, which nothing reads from the cache (every reconcile reads the object
/// afresh) and which are a good part of each object's size (2 of 5 KB for a Ready object
/// with status written by server-side apply).
fn slim(tf: &mut Terraform) {
    tf.metadata.managed_fields = None;
    if let Some(annotations) = tf.metadata.annotations.as_mut() {
        annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
}

/// The APIs of each watched scope: all namespaces, or each of `namespaces`.
fn scopes(
    client: &kube::Client,
    namespaces: &[String],
) -> Vec<(Api<Terraform>, Api<ResourceQuota>)> {
    if namespaces.is_empty() {
        return vec![(Api::all(client.clone()), Api::all(client.clone()))];
    }
    namespaces
        .iter()
        .map(|ns| {
            (
                Api::namespaced(client.clone(), ns),
                Api::namespaced(client.clone(), ns),
            )
        })
        .collect()
}

/// What one watched scope's controller is built from.
struct Scope {
    api: Api<Terraform>,
    quota_api: Api<ResourceQuota>,
    reader: Store<Terraform>,
    writer: reflector::store::Writer<Terraform>,
    quota_writer: reflector::store::Writer<ResourceQuota>,
    /// The source poller's wake-ups for this scope.
    woken: futures::channel::mpsc::UnboundedReceiver<Terraform>,
}

/// The controller of one watched scope: its objects, their relations, quota changes and the
/// source poller's wake-ups.
fn controller(
    scope: Scope,
    index: &Arc<DependsIndex>,
    queues: &Arc<RunnerQueues>,
    settings: &Settings,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) -> Controller<Terraform> {
    let index = index.clone();
    let mapper = move |tf: Terraform| {
        let dependants = index.observe(&tf.to_object());
        dependants
            .into_iter()
            .map(|k| object_ref(&k))
            .collect::<Vec<_>>()
    };
    let selected = watcher::Config::default().labels(&settings.shard.selector());
    let stops = settings.stops.clone();
    let objects = watcher(scope.api.clone(), selected.clone())
        .backoff(watch_backoff())
        .modify(slim)
        .reflect(scope.writer)
        .applied_objects()
        // (A reconcile under way would see a new cancel value only once it ended.)
        .inspect_ok(move |tf| stops.seen(&key_of(tf), tf));
    let wake = queues.clone();
    kube_runtime::Controller::for_stream(objects, scope.reader)
        .with_config(ControllerConfig::default().concurrency(settings.concurrency))
        // Every trigger below waits after its own errors (crate::watch_backoff).
        .trigger_backoff(already_waited())
        // The same objects again, for their relations: a dependency whose readiness changed
        // requeues the objects that wait for it, a dependant being deleted its dependencies.
        .watches_stream(
            watcher(scope.api, selected)
                .backoff(watch_backoff())
                .touched_objects(),
            mapper,
        )
        // A quota's change wakes the longest waiters for a runner Pod.
        .watches_stream(
            queue::quota_changes(scope.quota_api, scope.quota_writer),
            move |quota: ResourceQuota| wake.wake(&quota),
        )
        // The source poller's: objects behind their source's newest revision.
        .watches_stream(scope.woken.map(Ok), |tf: Terraform| {
            Some(ObjectRef::from_obj(&tf))
        })
        .graceful_shutdown_on(shutdown)
}

/// Runs the controller until `shutdown` resolves (reconciles under way finish first).
pub async fn run(
    client: kube::Client,
    ports: Ports,
    events: Option<KubeEventSink>,
    settings: Settings,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let index = Arc::new(DependsIndex::default());
    let shutdown = shutdown.shared();
    let scoped: Vec<_> = scopes(&client, &settings.namespaces)
        .into_iter()
        .map(|(api, quotas)| (api, quotas, reflector::store(), reflector::store()))
        .collect();
    let stores = settings
        .stores
        .set(scoped.iter().map(|(_, _, (r, _), _)| r.clone()).collect());
    let quota_stores = scoped.iter().map(|(_, _, _, (r, _))| r.clone()).collect();
    let queues = Arc::new(RunnerQueues::new(stores.clone(), quota_stores));
    let (wakers, woken): (Vec<_>, Vec<_>) = scoped
        .iter()
        .map(|_| futures::channel::mpsc::unbounded::<Terraform>())
        .unzip();
    settings.stores.set_wakers(wakers.clone());
    let poller = poll::start_poller(&ports, &stores, wakers, &settings);
    let controllers: Vec<Controller<Terraform>> = scoped
        .into_iter()
        .zip(woken)
        .map(
            |((api, quota_api, (reader, writer), (_, quota_writer)), woken)| {
                let scope = Scope {
                    api,
                    quota_api,
                    reader,
                    writer,
                    quota_writer,
                    woken,
                };
                controller(scope, &index, &queues, &settings, shutdown.clone())
            },
        )
        .collect();
    let driver = Driver::new(ports.clone());
    let permits = Arc::new(tokio::sync::Semaphore::new(match settings.concurrency {
        0 => tokio::sync::Semaphore::MAX_PERMITS,
        n => usize::from(n),
    }));
    let runs = controllers.into_iter().map(|controller| {
        let context = Arc::new(Context {
            client: client.clone(),
            sink: ports.events.clone(),
            driver: driver.clone(),
            events: events.clone(),
            index: index.clone(),
            stores: stores.clone(),
            queues: queues.clone(),
            poller: poller.as_ref().map(|(p, _)| p.clone()),
            permits: permits.clone(),
            settings: settings.clone(),
        });
        controller
            .run(reconcile, error_policy, context)
            .for_each(|result| async move {
                if let Err(e) = result {
                    tracing::debug!(error = %e, "controller");
                }
            })
    });
    futures::future::join_all(runs).await;
    if let Some((_, polling)) = poller {
        polling.abort();
    }
}
