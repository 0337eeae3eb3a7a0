//! One versioned store for every kind: objects by key, and one `resourceVersion` sequence for
//! the whole cluster (as etcd's revision is for the real API server), so that lists, gets and,
//! later, watches can never disagree about order.

use std::collections::BTreeMap;

use serde_json::Value;

/// Where an object lives: its resource (`secrets`, `terraforms.infra.argocd.io`), namespace
/// (empty for cluster-scoped kinds) and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    /// The resource, qualified by group for non-core kinds.
    pub resource: String,
    /// The namespace, empty for cluster-scoped kinds.
    pub namespace: String,
    /// The name.
    pub name: String,
}

/// A change, in the order of `resourceVersion`.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    /// `ADDED`, `MODIFIED` or `DELETED`, as watch events name them.
    pub kind: &'static str,
    /// Which object.
    pub key: Key,
    /// The object after the change (before it, for a deletion).
    pub object: Value,
    /// The `resourceVersion` of the change.
    pub version: u64,
}

/// The objects and the change log.
#[derive(Debug)]
pub struct Store {
    version: u64,
    objects: BTreeMap<Key, Value>,
    log: Vec<Change>,
    /// Told every new `resourceVersion`: what watches wait on.
    changed: tokio::sync::watch::Sender<u64>,
}

impl Default for Store {
    fn default() -> Self {
        Self {
            version: 0,
            objects: BTreeMap::new(),
            log: Vec::new(),
            changed: tokio::sync::watch::Sender::new(0),
        }
    }
}

impl Store {
    /// The latest `resourceVersion`.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// A receiver told of every new `resourceVersion`.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// The object at `key`.
    pub fn get(&self, key: &Key) -> Option<&Value> {
        self.objects.get(key)
    }

    /// The objects of `resource` (in `namespace`, or all namespaces when `None`), by key.
    pub fn list(&self, resource: &str, namespace: Option<&str>) -> Vec<&Value> {
        self.objects
            .iter()
            .filter(|(k, _)| k.resource == resource && namespace.is_none_or(|ns| k.namespace == ns))
            .map(|(_, v)| v)
            .collect()
    }

    /// Writes `object` at `key` under the next `resourceVersion`, which it records in the
    /// object's metadata; gives the stored object.
    pub fn put(&mut self, key: Key, mut object: Value) -> Value {
        self.version += 1;
        object["metadata"]["resourceVersion"] = Value::String(self.version.to_string());
        let kind = if self.objects.contains_key(&key) {
            "MODIFIED"
        } else {
            "ADDED"
        };
        self.objects.insert(key.clone(), object.clone());
        self.log.push(Change {
            kind,
            key,
            object: object.clone(),
            version: self.version,
        });
        self.changed.send_replace(self.version);
        object
    }

    /// Removes the object at `key`; the deletion takes the next `resourceVersion`.
    pub fn remove(&mut self, key: &Key) -> Option<Value> {
        let mut object = self.objects.remove(key)?;
        self.version += 1;
        object["metadata"]["resourceVersion"] = Value::String(self.version.to_string());
        self.log.push(Change {
            kind: "DELETED",
            key: key.clone(),
            object: object.clone(),
            version: self.version,
        });
        self.changed.send_replace(self.version);
        Some(object)
    }

    /// The changes after `version`, oldest first.
    pub fn changes_since(&self, version: u64) -> &[Change] {
        let start = self.log.partition_point(|c| c.version <= version);
        &self.log[start..]
    }
}
