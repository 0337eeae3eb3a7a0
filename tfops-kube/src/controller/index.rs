//! The `dependsOn` index: for every object, who depends on it, kept up to date from the watch
//! (not recomputed by scanning every object on each reconcile), and whether each object was
//! Ready when last seen, so that dependants are requeued when — and only when — a
//! dependency's readiness changes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use tfops_core::api::{ObjectKey, TerraformObject};
use tfops_core::reconcile::DependencyView;

#[derive(Debug, Default)]
struct Inner {
    /// Dependency → the objects that named it.
    dependants: BTreeMap<ObjectKey, BTreeSet<ObjectKey>>,
    /// Object → the dependencies it names (to undo on a spec edit).
    dependencies: BTreeMap<ObjectKey, BTreeSet<ObjectKey>>,
    /// Object → Ready at its generation, when last seen.
    ready: BTreeMap<ObjectKey, bool>,
}

/// The index.
#[derive(Debug, Default)]
pub struct DependsIndex {
    inner: Mutex<Inner>,
}

/// The keys `object` depends on.
pub fn dependencies_of(object: &TerraformObject) -> BTreeSet<ObjectKey> {
    let namespace = &object.metadata.namespace;
    object
        .spec
        .depends_on
        .iter()
        .map(|d| ObjectKey::new(d.namespace.as_deref().unwrap_or(namespace), &d.name))
        .collect()
}

impl DependsIndex {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // Plain maps: a panic elsewhere cannot leave them inconsistent in a way that matters.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records `object` as seen now; returns its dependants when its readiness changed (they
    /// must be reconciled again), none otherwise.
    pub fn observe(&self, object: &TerraformObject) -> Vec<ObjectKey> {
        let key = object.key();
        let wanted = dependencies_of(object);
        let ready =
            object.metadata.deletion_timestamp.is_none() && DependencyView::of(object).is_ready();
        let mut inner = self.lock();
        let before = inner.dependencies.insert(key.clone(), wanted.clone());
        for old in before.iter().flatten().filter(|d| !wanted.contains(*d)) {
            if let Some(set) = inner.dependants.get_mut(old) {
                set.remove(&key);
            }
        }
        for dependency in &wanted {
            inner
                .dependants
                .entry(dependency.clone())
                .or_default()
                .insert(key.clone());
        }
        let changed = inner.ready.insert(key.clone(), ready) != Some(ready);
        if changed {
            inner
                .dependants
                .get(&key)
                .map(|s| s.iter().cloned().collect())
                .unwrap_or_default()
        } else {
            Vec::new()
        }
    }

    /// What a change to `object` must requeue besides itself: its dependants when its
    /// readiness changed ([`DependsIndex::observe`]), and, while it is being deleted, its
    /// dependencies (whose own deletion may wait for it to go).
    pub fn triggered_by(&self, object: &TerraformObject) -> Vec<ObjectKey> {
        let mut keys = self.observe(object);
        if object.metadata.deletion_timestamp.is_some() {
            keys.extend(dependencies_of(object));
        }
        keys.sort();
        keys.dedup();
        keys
    }

    /// Forgets `key` (deleted); returns its dependants (a dependency that is gone changes what
    /// they see).
    pub fn forget(&self, key: &ObjectKey) -> Vec<ObjectKey> {
        let mut inner = self.lock();
        inner.ready.remove(key);
        for dependency in inner.dependencies.remove(key).unwrap_or_default() {
            if let Some(set) = inner.dependants.get_mut(&dependency) {
                set.remove(key);
            }
        }
        inner
            .dependants
            .get(key)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The objects that name `key` in their `dependsOn`.
    pub fn dependants(&self, key: &ObjectKey) -> Vec<ObjectKey> {
        self.lock()
            .dependants
            .get(key)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn object(name: &str, depends: &[&str], ready: bool) -> TerraformObject {
        let deps: Vec<_> = depends
            .iter()
            .map(|d| serde_json::json!({"name": d}))
            .collect();
        let conditions = if ready {
            serde_json::json!([{"type": "Ready", "status": "True", "reason": "TerraformAppliedSucceed",
                "message": "", "lastTransitionTime": "2026-12-01T00:00:00Z", "observedGeneration": 1}])
        } else {
            serde_json::json!([])
        };
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ns", "generation": 1},
            "spec": {"sourceRef": {"kind": "GitRepository", "url": "https://g/x"}, "dependsOn": deps},
            "status": {"observedGeneration": 1, "conditions": conditions},
        }))
        .unwrap()
    }

    fn key(name: &str) -> ObjectKey {
        ObjectKey::new("ns", name)
    }

    #[test]
    fn dependants_are_requeued_only_when_readiness_changes() {
        let index = DependsIndex::default();
        assert!(index.observe(&object("app", &["net"], false)).is_empty());
        assert_eq!(index.dependants(&key("net")), [key("app")]);
        // First sight of the dependency, then a change to Ready, then nothing new.
        assert_eq!(index.observe(&object("net", &[], false)), [key("app")]);
        assert!(index.observe(&object("net", &[], false)).is_empty());
        assert_eq!(index.observe(&object("net", &[], true)), [key("app")]);
        assert!(index.observe(&object("net", &[], true)).is_empty());
        // The dependant drops the dependency: no longer a dependant.
        index.observe(&object("app", &[], false));
        assert!(index.dependants(&key("net")).is_empty());
        index.observe(&object("app", &["net"], false));
        // A dependant being deleted requeues its dependency (waiting to be deleted itself).
        let mut leaving = object("app", &["net"], false);
        leaving.metadata.deletion_timestamp = Some(jiff::Timestamp::now());
        assert_eq!(index.triggered_by(&leaving), [key("net")]);
        assert_eq!(index.forget(&key("net")), [key("app")]);
        assert_eq!(index.forget(&key("app")), Vec::<ObjectKey>::new());
        assert!(index.dependants(&key("net")).is_empty());
    }
}
