//! The controllers of the real control plane that deletion depends on, run by the server after
//! every change (asynchronously to the request, as the real ones are):
//! - the **garbage collector**: an object whose owners (by `uid`) are all gone is deleted
//!   (background propagation); a reference to a gone owner among live ones is dropped; the
//!   dependents of an owner deleted in the foreground are deleted, and the owner's
//!   `foregroundDeletion` finalizer removed once no dependent with `blockOwnerDeletion` is
//!   left; an owner deleted with `orphan` has the references to it removed, then the finalizer;
//! - the **namespace controller**: a terminating Namespace has its content deleted (each object
//!   honouring its finalizers), then its `kubernetes` finalizer removed, then it goes.

use serde_json::{Value, json};

use super::registry;
use super::resources;
use super::store::{Key, Store};

/// Where the collector has read the change log up to.
#[derive(Debug, Default)]
pub struct Collector {
    seen: u64,
}

fn uid(object: &Value) -> &str {
    object["metadata"]["uid"].as_str().unwrap_or("")
}

fn deleting(object: &Value) -> bool {
    object["metadata"].get("deletionTimestamp").is_some()
}

impl Collector {
    /// Acts on every change since the last run, and on what its own actions change, until
    /// nothing is left to do.
    pub fn run(&mut self, store: &mut Store, now: jiff::Timestamp) {
        loop {
            let changes: Vec<(String, Key, Value)> = match store.changes_since(self.seen) {
                Some(c) => c
                    .map(|c| (c.kind.to_string(), c.key.clone(), c.object.clone()))
                    .collect(),
                // History compacted past us: look at everything.
                None => store
                    .objects()
                    .map(|(k, v)| ("MODIFIED".to_string(), k.clone(), v.clone()))
                    .collect(),
            };
            self.seen = store.version();
            if changes.is_empty() {
                return;
            }
            let mut quota_namespaces = std::collections::BTreeSet::new();
            for (kind, key, object) in changes {
                if key.resource == "pods" || key.resource == "resourcequotas" {
                    quota_namespaces.insert(key.namespace.clone());
                }
                if kind == "DELETED" {
                    self.gone(store, &key, &object, now);
                } else if let Some(current) = store.get(&key).cloned() {
                    self.changed(store, &key, &current, now);
                }
            }
            for namespace in quota_namespaces {
                quota_status(store, &namespace);
            }
        }
    }

    /// An object was removed: its dependents may be orphans now; an owner waiting in the
    /// foreground, or a terminating namespace, may be done.
    fn gone(&self, store: &mut Store, key: &Key, object: &Value, now: jiff::Timestamp) {
        for dependent in store.dependents_of(uid(object)) {
            if let Some(d) = store.get(&dependent).cloned() {
                dependent_check(store, &dependent, &d, now);
            }
        }
        for owner in owner_uids(object) {
            if let Some(k) = store.key_of_uid(&owner).cloned()
                && let Some(o) = store.get(&k).cloned()
            {
                foreground_check(store, &k, &o);
            }
        }
        if !key.namespace.is_empty() {
            let ns = Key {
                resource: "namespaces".into(),
                namespace: String::new(),
                name: key.namespace.clone(),
            };
            if let Some(n) = store.get(&ns).cloned()
                && deleting(&n)
            {
                namespace_check(store, &n, now);
            }
        }
    }

    fn changed(&self, store: &mut Store, key: &Key, object: &Value, now: jiff::Timestamp) {
        if key.resource == "namespaces" && !deleting(object) {
            default_service_account(store, &key.name, now);
        }
        if object["metadata"]["ownerReferences"].is_array() {
            dependent_check(store, key, object, now);
        }
        if !deleting(object) {
            return;
        }
        let finalizers = registry::finalizers(object);
        if finalizers.iter().any(|f| f == "orphan") {
            for dependent in store.dependents_of(uid(object)) {
                if let Some(d) = store.get(&dependent).cloned() {
                    drop_owner(store, &dependent, &d, uid(object));
                }
            }
            remove_finalizer(store, key, "orphan");
        }
        if finalizers.iter().any(|f| f == "foregroundDeletion") {
            for dependent in store.dependents_of(uid(object)) {
                delete(store, &dependent, now);
            }
            if let Some(o) = store.get(key).cloned() {
                foreground_check(store, key, &o);
            }
        }
        if key.resource == "namespaces" {
            namespace_check(store, object, now);
        }
    }
}

/// The quota controller: each ResourceQuota's `status` shows `hard` and what is used.
fn quota_status(store: &mut Store, namespace: &str) {
    let Some(r) = resources::by_store_name(store, "resourcequotas") else {
        return;
    };
    for (name, status) in super::quota::statuses(store, namespace) {
        let key = r.key(namespace, &name);
        if let Some(q) = store.get(&key).cloned()
            && q["status"] != status
        {
            let mut q = q;
            q["status"] = status;
            registry::controller_update(store, &r, q);
        }
    }
}

/// The ServiceAccount controller: every active namespace has a `default` ServiceAccount.
pub(super) fn default_service_account(store: &mut Store, namespace: &str, now: jiff::Timestamp) {
    let key = Key {
        resource: "serviceaccounts".into(),
        namespace: namespace.into(),
        name: "default".into(),
    };
    if store.get(&key).is_some() {
        return;
    }
    if let Some(r) = resources::by_store_name(store, "serviceaccounts") {
        let ctx = registry::Ctx {
            now,
            uid: format!("00000000-0000-4000-a000-{:012x}", store.version()),
        };
        let sa = json!({"metadata": {"name": "default"}});
        let _ = registry::create(store, &r, namespace, sa, &ctx);
    }
}

fn owner_uids(object: &Value) -> Vec<String> {
    object["metadata"]["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|o| o["uid"].as_str().map(String::from))
        .collect()
}

/// Deletes an orphan, drops references to gone owners, deletes a dependent of an owner being
/// deleted in the foreground.
fn dependent_check(store: &mut Store, key: &Key, object: &Value, now: jiff::Timestamp) {
    let owners = owner_uids(object);
    if owners.is_empty() {
        return;
    }
    let live: Vec<&String> = owners
        .iter()
        .filter(|u| store.key_of_uid(u).is_some())
        .collect();
    if live.is_empty() {
        delete(store, key, now);
        return;
    }
    let foreground_owner = live.iter().any(|u| {
        store
            .key_of_uid(u)
            .and_then(|k| store.get(k))
            .is_some_and(|o| {
                deleting(o)
                    && registry::finalizers(o)
                        .iter()
                        .any(|f| f == "foregroundDeletion")
            })
    });
    if foreground_owner && live.len() == 1 {
        delete(store, key, now);
        return;
    }
    if live.len() < owners.len() {
        let mut o = object.clone();
        if let Some(refs) = o["metadata"]["ownerReferences"].as_array_mut() {
            refs.retain(|r| {
                r["uid"]
                    .as_str()
                    .is_some_and(|u| store.key_of_uid(u).is_some())
            });
        }
        write(store, key, o);
    }
}

/// Removes an owner's `foregroundDeletion` finalizer once no blocking dependent is left.
fn foreground_check(store: &mut Store, key: &Key, owner: &Value) {
    if !deleting(owner)
        || !registry::finalizers(owner)
            .iter()
            .any(|f| f == "foregroundDeletion")
    {
        return;
    }
    let owner_uid = uid(owner).to_string();
    let blocking = store.dependents_of(&owner_uid).into_iter().any(|k| {
        store.get(&k).is_some_and(|d| {
            d["metadata"]["ownerReferences"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|r| r["uid"] == owner_uid.as_str() && r["blockOwnerDeletion"] == true)
        })
    });
    if !blocking {
        remove_finalizer(store, key, "foregroundDeletion");
    }
}

/// Deletes a terminating namespace's content; when none is left, removes its `kubernetes`
/// finalizer (and with that, once its other finalizers are gone, the namespace).
fn namespace_check(store: &mut Store, namespace: &Value, now: jiff::Timestamp) {
    let name = namespace["metadata"]["name"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let content: Vec<Key> = store
        .objects()
        .filter(|(k, _)| k.namespace == name)
        .map(|(k, _)| k.clone())
        .collect();
    if content.is_empty() {
        if let Some(r) = resources::by_store_name(store, "namespaces") {
            let _ = registry::finalize_namespace(
                store,
                &r,
                &name,
                &json!({"spec": {"finalizers": []}}),
            );
        }
        return;
    }
    for key in content {
        let already = store.get(&key).is_some_and(deleting);
        if !already {
            delete(store, &key, now);
        }
    }
}

fn drop_owner(store: &mut Store, key: &Key, object: &Value, owner: &str) {
    let mut o = object.clone();
    if let Some(refs) = o["metadata"]["ownerReferences"].as_array_mut() {
        refs.retain(|r| r["uid"] != owner);
        if refs.is_empty()
            && let Some(m) = o["metadata"].as_object_mut()
        {
            m.remove("ownerReferences");
        }
    }
    write(store, key, o);
}

fn remove_finalizer(store: &mut Store, key: &Key, finalizer: &str) {
    if let Some(o) = store.get(key).cloned() {
        let left: Vec<String> = registry::finalizers(&o)
            .into_iter()
            .filter(|f| f != finalizer)
            .collect();
        write(store, key, registry::with_finalizers(&o, &left));
    }
}

fn write(store: &mut Store, key: &Key, object: Value) {
    if let Some(r) = resources::by_store_name(store, &key.resource) {
        registry::controller_update(store, &r, object);
    }
}

fn delete(store: &mut Store, key: &Key, now: jiff::Timestamp) {
    if let Some(r) = resources::by_store_name(store, &key.resource) {
        let _ = registry::delete(store, &r, &key.namespace, &key.name, &Value::Null, now);
    }
}
