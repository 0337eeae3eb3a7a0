//! The source poller: resolves each distinct source of the watched objects once per
//! `--source-poll-interval` and wakes the objects that have not attempted its revision.
//!
//! Objects pick up a new revision at once instead of at their `spec.interval`, and one
//! resolution serves every object of a repository (a monorepo of hundreds of objects costs one
//! `ls-remote` per poll, not hundreds). A woken object's run looks at the source only and ends
//! there, without a runner Pod, when the revision changed nothing under its path
//! (`tfops_core::reconcile::Trigger::NewRevision`).
//!
//! A forge's push webhook asks for a poll of its repository at once ([`PollNow`]): the push
//! only says which sources to resolve, never which revision to run, so a forged or replayed
//! delivery can do no more than an early poll.
//!
//! The revisions seen are also what every run resolves: the newest resolution of a source, by
//! when it was made, is the one objects compare with, so that a run which resolved a newer
//! revision than the last poll wakes the rest of its source at once, and one that raced a
//! later poll does not wake them again.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::StreamExt;
use futures::channel::mpsc::UnboundedSender;
use kube::runtime::reflector::Store;
use tfops_core::api::{ObjectKey, SourceKind, SourceRef, TerraformObject};
use tfops_core::ports::{Ports, SourcePort};
use tfops_core::reconcile::{Outcome, RunReport, StepKind};
use tfops_core::source::repository_id;

use super::Settings;
use crate::Terraform;

/// Sources resolved at once while polling.
const AT_ONCE: usize = 4;

/// Asks the source poller to resolve the sources of some repositories now (a forge's push
/// webhook) instead of at its next poll. Cheap to clone; every clone asks the same poller.
#[derive(Debug, Clone, Default)]
pub struct PollNow(Arc<PollNowInner>);

#[derive(Debug, Default)]
struct PollNowInner {
    /// Repositories asked for since the poller last took them ([`repository_id`]s).
    repositories: Mutex<BTreeSet<String>>,
    notify: tokio::sync::Notify,
}

impl PollNow {
    /// Asks for a poll of the sources in the repository `url` names (any of its URLs).
    /// Whether the URL names a repository at all.
    pub fn repository(&self, url: &str) -> bool {
        let Some(id) = repository_id(url) else {
            return false;
        };
        locked(&self.0.repositories).insert(id);
        self.0.notify.notify_one();
        true
    }

    /// Asks for a poll of the repository `id` ([`repository_id`]).
    pub fn repository_id(&self, id: &str) {
        locked(&self.0.repositories).insert(id.to_string());
        self.0.notify.notify_one();
    }

    /// The repositories asked for and not yet polled ([`repository_id`]s).
    pub fn asked(&self) -> Vec<String> {
        locked(&self.0.repositories).iter().cloned().collect()
    }

    /// The repositories asked for, once there are any (taking them: the next call waits for
    /// new ones).
    pub async fn take(&self) -> BTreeSet<String> {
        loop {
            let asked = std::mem::take(&mut *locked(&self.0.repositories));
            if !asked.is_empty() {
                return asked;
            }
            self.0.notify.notified().await;
        }
    }
}

/// What identifies a source for every object reading it: the credentials' namespace when it
/// has any, and the source reference without what only concerns one object.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct SourceKey {
    namespace: String,
    source: String,
}

impl SourceKey {
    /// `None` for sources nothing can poll (`Local`, for local mode only).
    fn of(object: &TerraformObject) -> Option<Self> {
        let source = &object.spec.source_ref;
        if source.kind == SourceKind::Local {
            return None;
        }
        let shared = SourceRef {
            watch_paths: Vec::new(),
            pull_requests: None,
            ..source.clone()
        };
        Some(Self {
            namespace: if source.secret_ref.is_some() {
                object.metadata.namespace.clone()
            } else {
                String::new()
            },
            source: serde_json::to_string(&shared).ok()?,
        })
    }
}

/// The newest resolution of a source.
#[derive(Debug, Clone)]
struct Seen {
    revision: String,
    at: jiff::Timestamp,
}

/// Polls the sources of the objects in `stores` (one store per watched scope, each with the
/// channel that wakes its controller).
pub(super) struct SourcePoller {
    source: Arc<dyn SourcePort>,
    stores: Vec<Store<Terraform>>,
    wake: Vec<UnboundedSender<Terraform>>,
    seen: Mutex<HashMap<SourceKey, Seen>>,
    /// The revision each object was last woken for: once is enough (a woken object's
    /// reconcile runs, or its own requeue follows), and a poll while hundreds of looks are
    /// still queued would wake them all again.
    woken: Mutex<HashMap<ObjectKey, String>>,
}

impl SourcePoller {
    pub(super) fn new(
        source: Arc<dyn SourcePort>,
        stores: Vec<Store<Terraform>>,
        wake: Vec<UnboundedSender<Terraform>>,
    ) -> Self {
        Self {
            source,
            stores,
            wake,
            seen: Mutex::new(HashMap::new()),
            woken: Mutex::new(HashMap::new()),
        }
    }

    fn seen(&self) -> MutexGuard<'_, HashMap<SourceKey, Seen>> {
        locked(&self.seen)
    }

    /// The newest revision seen of `object`'s source, as text.
    pub(super) fn revision(&self, object: &TerraformObject) -> Option<String> {
        let key = SourceKey::of(object)?;
        self.seen().get(&key).map(|s| s.revision.clone())
    }

    /// Forgets a deleted object.
    pub(super) fn forget(&self, key: &ObjectKey) {
        locked(&self.woken).remove(key);
    }

    /// Takes in the revision a run of `object` resolved; a newer one than seen wakes the other
    /// objects of its source.
    pub(super) fn observe(&self, object: &TerraformObject, report: &RunReport) {
        let resolved = report.records.iter().rev().find_map(|r| match &r.result {
            Ok(Outcome::Resolved(revision)) if r.step == StepKind::ResolveSource => {
                Some((revision.to_string(), r.at))
            }
            _ => None,
        });
        let (Some((revision, at)), Some(key)) = (resolved, SourceKey::of(object)) else {
            return;
        };
        if self.record(&key, revision, at) {
            self.wake_behind(Some(&key));
        }
    }

    /// Records a resolution unless a later one is known; whether the revision changed.
    fn record(&self, key: &SourceKey, revision: String, at: jiff::Timestamp) -> bool {
        record(&mut self.seen(), key, revision, at)
    }

    /// Polls every `every` (never with `None`) and when `now` asks, until the process ends.
    pub(super) async fn run(self: Arc<Self>, every: Option<Duration>, now: PollNow) {
        let mut ticks = every.map(|every| {
            let mut ticks = tokio::time::interval(every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            ticks
        });
        loop {
            let tick = async {
                match ticks.as_mut() {
                    Some(ticks) => {
                        ticks.tick().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                () = tick => self.poll_once(None).await,
                asked = now.take() => self.poll_once(Some(&asked)).await,
            }
        }
    }

    /// Resolves each source of the objects cached now once (of the repositories `only` names,
    /// or every one), and wakes those behind.
    async fn poll_once(&self, only: Option<&BTreeSet<String>>) {
        let asked = |object: &TerraformObject| {
            only.is_none_or(|ids| {
                repository_id(&object.spec.source_ref.url).is_some_and(|id| ids.contains(&id))
            })
        };
        let mut sources: BTreeMap<SourceKey, (ObjectKey, SourceRef)> = BTreeMap::new();
        for store in &self.stores {
            for tf in store.state() {
                let object = tf.to_object();
                let key = SourceKey::of(&object).filter(|_| pollable(&object) && asked(&object));
                if let Some(key) = key {
                    sources
                        .entry(key)
                        .or_insert_with(|| (object.key(), object.spec.source_ref.clone()));
                }
            }
        }
        let resolved: Vec<_> = futures::stream::iter(sources)
            .map(|(key, (object, source))| async move {
                let result = self.source.resolve(&object, &source).await;
                (key, object, result, jiff::Timestamp::now())
            })
            .buffer_unordered(AT_ONCE)
            .collect()
            .await;
        for (key, object, result, at) in resolved {
            match result {
                Ok(revision) => {
                    self.record(&key, revision.to_string(), at);
                }
                // The objects' own runs say what is wrong with a source, in their status.
                Err(error) => {
                    tracing::debug!(object = %object, %error, "polling the source failed");
                }
            }
        }
        self.wake_behind(None);
    }

    /// Wakes the objects that have not attempted their source's newest revision (of `only`'s
    /// source, or of every source), each once per revision: one pass over the cached objects.
    fn wake_behind(&self, only: Option<&SourceKey>) {
        let seen: HashMap<SourceKey, String> = self
            .seen()
            .iter()
            .filter(|(k, _)| only.is_none_or(|o| o == *k))
            .map(|(k, s)| (k.clone(), s.revision.clone()))
            .collect();
        if seen.is_empty() {
            return;
        }
        let mut woken = locked(&self.woken);
        for (store, wake) in self.stores.iter().zip(&self.wake) {
            for tf in store.state() {
                let object = tf.to_object();
                let Some(revision) = SourceKey::of(&object).and_then(|k| seen.get(&k)) else {
                    continue;
                };
                let behind =
                    object.status.last_attempted_revision.as_deref() != Some(revision.as_str());
                if !behind || !pollable(&object) || woken.get(&object.key()) == Some(revision) {
                    continue;
                }
                woken.insert(object.key(), revision.clone());
                // The controller has stopped only when the process is ending.
                let _ = wake.unbounded_send(Terraform::clone(&tf));
            }
        }
    }
}

/// A map of the poller's: a panic while holding it leaves it whole (each change is one insert
/// or removal).
fn locked<T>(map: &Mutex<T>) -> MutexGuard<'_, T> {
    map.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Records in `seen` a resolution of `key`'s source unless a later one is known (two runs, or
/// a run and a poll, may finish in another order than they resolved); whether the revision
/// seen changed.
fn record(
    seen: &mut HashMap<SourceKey, Seen>,
    key: &SourceKey,
    revision: String,
    at: jiff::Timestamp,
) -> bool {
    match seen.get(key) {
        Some(s) if s.at > at => false,
        Some(s) if s.revision == revision => {
            seen.insert(key.clone(), Seen { revision, at });
            false
        }
        _ => {
            seen.insert(key.clone(), Seen { revision, at });
            true
        }
    }
}

/// Whether a poll may start a run of `object`: it has run before, is not being deleted or
/// suspended, and is not failing (a failing object keeps its backoff).
fn pollable(object: &TerraformObject) -> bool {
    object.status.last_run_at.is_some()
        && object.metadata.deletion_timestamp.is_none()
        && object.suspension().is_none()
        && object.status.reconciliation_failures == 0
}

/// How often sources are polled by default.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(60);

/// The source poller, started when it polls on its own or a webhook can ask it to.
pub(super) fn start_poller(
    ports: &Ports,
    stores: &[Store<Terraform>],
    wakers: Vec<futures::channel::mpsc::UnboundedSender<Terraform>>,
    settings: &Settings,
) -> Option<(Arc<SourcePoller>, tokio::task::JoinHandle<()>)> {
    let every = settings
        .source_poll_interval
        .filter(|every| !every.is_zero());
    (every.is_some() || settings.poll_now.is_some()).then(|| {
        let poller = Arc::new(SourcePoller::new(
            ports.source.clone(),
            stores.to_vec(),
            wakers,
        ));
        let now = settings.poll_now.clone().unwrap_or_default();
        (poller.clone(), tokio::spawn(poller.run(every, now)))
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn object(namespace: &str, url: &str, secret: bool, watch: &[&str]) -> TerraformObject {
        let mut spec = serde_json::json!({
            "sourceRef": {"kind": "GitRepository", "url": url, "watchPaths": watch},
        });
        if secret {
            spec["sourceRef"]["secretRef"] = serde_json::json!({"name": "git"});
        }
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "a", "namespace": namespace, "generation": 1},
            "status": {},
            "spec": spec,
        }))
        .unwrap()
    }

    #[test]
    fn objects_share_a_source_unless_their_credentials_are_their_namespaces() {
        let a = SourceKey::of(&object("x", "https://g/r.git", false, &["m/"]));
        let b = SourceKey::of(&object("y", "https://g/r.git", false, &[]));
        assert_eq!(
            a, b,
            "watchPaths and namespace do not split a public source"
        );
        let c = SourceKey::of(&object("x", "https://g/r.git", true, &[]));
        let d = SourceKey::of(&object("y", "https://g/r.git", true, &[]));
        assert_ne!(c, d, "a Secret is read in the object's namespace");
        assert_ne!(
            a,
            SourceKey::of(&object("x", "https://g/other.git", false, &[]))
        );
    }

    #[test]
    fn the_latest_resolution_wins_whatever_order_they_arrive_in() {
        let key = SourceKey::of(&object("x", "https://g/r.git", false, &[])).unwrap();
        let at = |s: i64| jiff::Timestamp::from_second(1_800_000_000 + s).unwrap();
        let mut seen = HashMap::new();
        assert!(record(&mut seen, &key, "main@sha1:b".into(), at(10)), "new");
        assert!(
            !record(&mut seen, &key, "main@sha1:a".into(), at(5)),
            "older: ignored"
        );
        assert_eq!(seen[&key].revision, "main@sha1:b");
        assert!(
            !record(&mut seen, &key, "main@sha1:b".into(), at(20)),
            "the same again"
        );
        assert!(
            record(&mut seen, &key, "main@sha1:a".into(), at(30)),
            "moved back: a change"
        );
        assert_eq!(seen[&key].revision, "main@sha1:a");
    }
}
