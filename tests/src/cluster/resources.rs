//! The kinds the server serves: the built-in ones it knows, and those of the
//! CustomResourceDefinitions in its store (a CRD serves its resource once it is created, as the
//! real apiextensions server does once the CRD is `Established`).

use serde_json::Value;

use super::store::{Key, Store};

/// A kind the server serves.
#[derive(Debug, Clone, PartialEq)]
pub struct Resource {
    /// The API group (empty for the core group).
    pub group: String,
    /// The version.
    pub version: String,
    /// The plural resource name in paths.
    pub plural: String,
    /// The singular name (discovery, kubectl).
    pub singular: String,
    /// Short names (`tf`, `ns`, `cm`).
    pub short_names: Vec<String>,
    /// The kind.
    pub kind: String,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Whether it has a `status` subresource: then the main endpoint ignores status changes
    /// and `/status` changes only status.
    pub status_subresource: bool,
    /// Whether its strategy keeps `metadata.generation` (bumped on changes outside metadata
    /// and, with a status subresource, status).
    pub generation: bool,
    /// Whether a delete answers with the deleted object (the real store's
    /// `ReturnDeletedObject`, set for Namespaces) rather than a `Success` `Status`.
    pub returns_deleted: bool,
    /// Whether a PUT without `resourceVersion` is allowed (built-in kinds; not CRDs and
    /// custom resources, whose strategies refuse it).
    pub unconditional_update: bool,
    /// The structural schema of a custom resource's version (`openAPIV3Schema`).
    pub schema: Option<Value>,
}

impl Resource {
    /// `v1` or `group/version`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The name the store files it under (`secrets`, `terraforms.infra.argocd.io`).
    pub fn store_name(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// The store key of the object `name` in `namespace` (ignored for cluster-scoped kinds).
    pub fn key(&self, namespace: &str, name: &str) -> Key {
        Key {
            resource: self.store_name(),
            namespace: if self.namespaced {
                namespace.to_string()
            } else {
                String::new()
            },
            name: name.to_string(),
        }
    }

    /// The object's etcd key in the real server (`/registry/secrets/ns/name`), which some
    /// error messages quote.
    pub fn etcd_key(&self, namespace: &str, name: &str) -> String {
        let resource = if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}/{}", self.group, self.plural)
        };
        if self.namespaced {
            format!("/registry/{resource}/{namespace}/{name}")
        } else {
            format!("/registry/{resource}/{name}")
        }
    }
}

/// `(group, version, plural, kind, short names, namespaced, status subresource, generation)`.
type Row = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static [&'static str],
    bool,
    bool,
    bool,
);

/// The built-in kinds, with the flags of their real strategies (Secrets, ConfigMaps and
/// Namespaces keep no `generation`; CRDs do).
const BUILT_IN: &[Row] = &[
    (
        "",
        "v1",
        "namespaces",
        "Namespace",
        &["ns"],
        false,
        true,
        false,
    ),
    ("", "v1", "secrets", "Secret", &[], true, false, false),
    (
        "",
        "v1",
        "configmaps",
        "ConfigMap",
        &["cm"],
        true,
        false,
        false,
    ),
    (
        "",
        "v1",
        "serviceaccounts",
        "ServiceAccount",
        &["sa"],
        true,
        false,
        false,
    ),
    ("", "v1", "pods", "Pod", &["po"], true, true, false),
    // Stored only (no controller runs Deployments or routes Services here): enough for an
    // installation to be applied with kubectl as it would be to a real cluster.
    ("", "v1", "services", "Service", &["svc"], true, true, false),
    (
        "apps",
        "v1",
        "deployments",
        "Deployment",
        &["deploy"],
        true,
        true,
        true,
    ),
    ("", "v1", "events", "Event", &["ev"], true, false, false),
    (
        "",
        "v1",
        "resourcequotas",
        "ResourceQuota",
        &["quota"],
        true,
        true,
        false,
    ),
    (
        "coordination.k8s.io",
        "v1",
        "leases",
        "Lease",
        &[],
        true,
        false,
        false,
    ),
    (
        "events.k8s.io",
        "v1",
        "events",
        "Event",
        &["ev"],
        true,
        false,
        false,
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "roles",
        "Role",
        &[],
        true,
        false,
        false,
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "rolebindings",
        "RoleBinding",
        &[],
        true,
        false,
        false,
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "clusterroles",
        "ClusterRole",
        &[],
        false,
        false,
        false,
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "clusterrolebindings",
        "ClusterRoleBinding",
        &[],
        false,
        false,
        false,
    ),
    (
        "authorization.k8s.io",
        "v1",
        "selfsubjectaccessreviews",
        "SelfSubjectAccessReview",
        &[],
        false,
        false,
        false,
    ),
    (
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        &["crd", "crds"],
        false,
        true,
        true,
    ),
];

fn built_in() -> impl Iterator<Item = Resource> {
    BUILT_IN.iter().map(
        |&(group, version, plural, kind, short, namespaced, status, generation)| Resource {
            group: group.into(),
            version: version.into(),
            plural: plural.into(),
            singular: kind.to_lowercase(),
            short_names: short.iter().map(|s| s.to_string()).collect(),
            kind: kind.into(),
            namespaced,
            status_subresource: status,
            generation,
            returns_deleted: plural == "namespaces",
            unconditional_update: plural != "customresourcedefinitions",
            schema: None,
        },
    )
}

/// The store name of CustomResourceDefinitions.
pub const CRDS: &str = "customresourcedefinitions.apiextensions.k8s.io";

/// The resources one CRD serves (one per served version).
pub fn of_crd(crd: &Value) -> Vec<Resource> {
    let spec = &crd["spec"];
    let names = &spec["names"];
    let text = |v: &Value| v.as_str().unwrap_or("").to_string();
    let plural = text(&names["plural"]);
    let kind = text(&names["kind"]);
    let singular = names["singular"]
        .as_str()
        .map_or_else(|| kind.to_lowercase(), str::to_string);
    let short_names = strings(&names["shortNames"]);
    spec["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| v["served"].as_bool().unwrap_or(false))
        .map(|v| Resource {
            group: text(&spec["group"]),
            version: text(&v["name"]),
            plural: plural.clone(),
            singular: singular.clone(),
            short_names: short_names.clone(),
            kind: kind.clone(),
            namespaced: spec["scope"] == "Namespaced",
            status_subresource: v["subresources"].get("status").is_some(),
            generation: true,
            returns_deleted: false,
            unconditional_update: false,
            schema: v["schema"].get("openAPIV3Schema").cloned(),
        })
        .collect()
}

/// Every resource served now: the built-in ones, then those of the CRDs in `store` (a CRD
/// being deleted still serves, as the real one does until its objects are gone).
pub fn all(store: &Store) -> Vec<Resource> {
    let mut out: Vec<Resource> = built_in().collect();
    for crd in store.list(CRDS, None) {
        out.extend(of_crd(crd));
    }
    out
}

/// The resource `group/version/plural`, if served.
pub fn find(store: &Store, group: &str, version: &str, plural: &str) -> Option<Resource> {
    if let Some(r) =
        built_in().find(|r| r.group == group && r.version == version && r.plural == plural)
    {
        return Some(r);
    }
    store
        .list(CRDS, None)
        .into_iter()
        .flat_map(of_crd)
        .find(|r| r.group == group && r.version == version && r.plural == plural)
}

/// The resource the store files under `store_name`, in its first served version.
pub fn by_store_name(store: &Store, store_name: &str) -> Option<Resource> {
    all(store)
        .into_iter()
        .find(|r| r.store_name() == store_name)
}

/// The strings of a JSON list (empty for anything else).
pub fn strings(list: &Value) -> Vec<String> {
    list.as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}
