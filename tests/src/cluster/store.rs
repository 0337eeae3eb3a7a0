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
    /// The object before the change (`None` for an addition): what lets a list be read at an
    /// earlier version.
    pub previous: Option<Value>,
}

/// The objects and the change log.
#[derive(Debug)]
pub struct Store {
    version: u64,
    objects: BTreeMap<Key, Value>,
    log: std::collections::VecDeque<Change>,
    /// The oldest `resourceVersion` the log still reaches back to (changes before it are
    /// compacted away, as etcd compacts its history).
    compacted: u64,
    /// Which key holds each `uid`.
    by_uid: std::collections::HashMap<String, Key>,
    /// The objects whose `ownerReferences` name each `uid`.
    dependents: std::collections::HashMap<String, std::collections::BTreeSet<Key>>,
    /// Told every new `resourceVersion`: what watches wait on.
    changed: tokio::sync::watch::Sender<u64>,
}

impl Default for Store {
    fn default() -> Self {
        Self {
            version: 0,
            objects: BTreeMap::new(),
            log: std::collections::VecDeque::new(),
            compacted: 0,
            by_uid: std::collections::HashMap::new(),
            dependents: std::collections::HashMap::new(),
            changed: tokio::sync::watch::Sender::new(0),
        }
    }
}

impl Store {
    /// A copy to try a write on (`dryRun`): same objects and history, its own notifications,
    /// so nothing watching the real store hears of it.
    pub fn fork(&self) -> Self {
        Self {
            version: self.version,
            objects: self.objects.clone(),
            log: std::collections::VecDeque::new(),
            compacted: self.version,
            by_uid: self.by_uid.clone(),
            dependents: self.dependents.clone(),
            changed: tokio::sync::watch::Sender::new(self.version),
        }
    }

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

    /// The objects of `resource` (in `namespace`, or all namespaces when `None`), by key: a
    /// range of the ordered map, not a scan of every object.
    pub fn list(&self, resource: &str, namespace: Option<&str>) -> Vec<&Value> {
        self.range(resource, namespace).map(|(_, v)| v).collect()
    }

    fn range(
        &self,
        resource: &str,
        namespace: Option<&str>,
    ) -> impl Iterator<Item = (&Key, &Value)> + '_ {
        let start = Key {
            resource: resource.to_string(),
            namespace: namespace.unwrap_or("").to_string(),
            name: String::new(),
        };
        let (resource, namespace) = (resource.to_string(), namespace.map(str::to_string));
        self.objects.range(start..).take_while(move |(k, _)| {
            k.resource == resource && namespace.as_ref().is_none_or(|ns| k.namespace == *ns)
        })
    }

    /// Writes `object` at `key` under the next `resourceVersion`, which it records in the
    /// object's metadata; gives the stored object.
    pub fn put(&mut self, key: Key, mut object: Value) -> Value {
        self.version += 1;
        object["metadata"]["resourceVersion"] = Value::String(self.version.to_string());
        if let Some(p) = self.objects.get(&key).cloned() {
            self.unindex(&key, &p);
        }
        self.index(&key, &object);
        let previous = self.objects.insert(key.clone(), object.clone());
        let kind = if previous.is_some() {
            "MODIFIED"
        } else {
            "ADDED"
        };
        self.log.push_back(Change {
            kind,
            key,
            object: object.clone(),
            version: self.version,
            previous,
        });
        self.changed.send_replace(self.version);
        object
    }

    /// Removes the object at `key`; the deletion takes the next `resourceVersion`.
    pub fn remove(&mut self, key: &Key) -> Option<Value> {
        let previous = self.objects.remove(key)?;
        self.unindex(key, &previous);
        self.version += 1;
        let mut object = previous.clone();
        object["metadata"]["resourceVersion"] = Value::String(self.version.to_string());
        self.log.push_back(Change {
            kind: "DELETED",
            key: key.clone(),
            object: object.clone(),
            version: self.version,
            previous: Some(previous),
        });
        self.changed.send_replace(self.version);
        Some(object)
    }

    /// The changes after `version`, oldest first (`None` when `version` is older than the
    /// compacted history: the caller answers 410 `Gone`).
    pub fn changes_since(&self, version: u64) -> Option<impl Iterator<Item = &Change>> {
        if version < self.compacted {
            return None;
        }
        let start = self.log.partition_point(|c| c.version <= version);
        Some(self.log.range(start..))
    }

    fn owners(object: &Value) -> impl Iterator<Item = &str> {
        object["metadata"]["ownerReferences"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|o| o["uid"].as_str())
    }

    fn index(&mut self, key: &Key, object: &Value) {
        if let Some(uid) = object["metadata"]["uid"].as_str() {
            self.by_uid.insert(uid.to_string(), key.clone());
        }
        for owner in Self::owners(object) {
            self.dependents
                .entry(owner.to_string())
                .or_default()
                .insert(key.clone());
        }
    }

    fn unindex(&mut self, key: &Key, object: &Value) {
        if let Some(uid) = object["metadata"]["uid"].as_str() {
            self.by_uid.remove(uid);
        }
        for owner in Self::owners(object) {
            if let Some(set) = self.dependents.get_mut(owner) {
                set.remove(key);
                if set.is_empty() {
                    self.dependents.remove(owner);
                }
            }
        }
    }

    /// The key of the object with `uid`.
    pub fn key_of_uid(&self, uid: &str) -> Option<&Key> {
        self.by_uid.get(uid)
    }

    /// The keys of the objects whose owner references name `uid`.
    pub fn dependents_of(&self, uid: &str) -> Vec<Key> {
        self.dependents
            .get(uid)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The oldest `resourceVersion` lists and watches can still start from.
    pub fn compacted(&self) -> u64 {
        self.compacted
    }

    /// Forgets the history before the latest `keep` changes.
    pub fn compact(&mut self, keep: usize) {
        while self.log.len() > keep {
            if let Some(c) = self.log.pop_front() {
                self.compacted = c.version;
            }
        }
        if keep == 0 {
            self.compacted = self.version;
        }
    }

    /// The objects of `resource` (in `namespace`, or all) as they were at `version`, by key:
    /// the current ones with the later changes undone.
    pub fn list_at(
        &self,
        resource: &str,
        namespace: Option<&str>,
        version: u64,
    ) -> Vec<(Key, Value)> {
        let wanted =
            |k: &Key| k.resource == resource && namespace.is_none_or(|ns| k.namespace == ns);
        let mut view: BTreeMap<Key, Value> = self
            .range(resource, namespace)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if version < self.version {
            let start = self.log.partition_point(|c| c.version <= version);
            for c in self.log.range(start..).rev().filter(|c| wanted(&c.key)) {
                match &c.previous {
                    Some(p) => view.insert(c.key.clone(), p.clone()),
                    None => view.remove(&c.key),
                };
            }
        }
        view.into_iter().collect()
    }

    /// One page of a list at `version`: the objects of `resource` (in `namespace`) after the
    /// `(namespace, name)` `after`, that `keep` selects, at most `limit` (0: all), and whether
    /// more follow. Read straight from the objects when nothing changed since `version`;
    /// otherwise from the view [`list_at`](Self::list_at) rebuilds.
    pub fn page(
        &self,
        resource: &str,
        namespace: Option<&str>,
        version: u64,
        after: Option<(&str, &str)>,
        keep: impl Fn(&Value) -> bool,
        limit: usize,
    ) -> (Vec<Value>, bool) {
        let later = |k: &Key| {
            after.is_none_or(|(ns, name)| (k.namespace.as_str(), k.name.as_str()) > (ns, name))
        };
        let mut out = Vec::new();
        let mut more = false;
        let mut take = |v: &Value| {
            if !keep(v) {
                return true;
            }
            if limit > 0 && out.len() == limit {
                more = true;
                return false;
            }
            out.push(v.clone());
            true
        };
        if version >= self.version {
            let start = Key {
                resource: resource.to_string(),
                namespace: after.map_or(namespace.unwrap_or(""), |a| a.0).to_string(),
                name: after.map_or("", |a| a.1).to_string(),
            };
            for (k, v) in self.objects.range(start..) {
                if k.resource != resource || namespace.is_some_and(|ns| k.namespace != ns) {
                    break;
                }
                if later(k) && !take(v) {
                    break;
                }
            }
        } else {
            for (k, v) in self.list_at(resource, namespace, version) {
                if later(&k) && !take(&v) {
                    break;
                }
            }
        }
        (out, more)
    }

    /// Every object (for the garbage collector), by key.
    pub fn objects(&self) -> impl Iterator<Item = (&Key, &Value)> {
        self.objects.iter()
    }
}
