//! Reading `Terraform` objects (and the Secrets and ConfigMaps they use) from YAML files.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use base64::Engine;
use serde::Deserialize;
use tfops_core::api::{ObjectKey, TerraformSpec};

/// Why manifests could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The file could not be read.
    #[error("reading {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A document is not valid YAML, or not a valid object (unknown field, wrong type); the
    /// message carries the line and column.
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong, where.
        message: String,
    },
    /// A kind this mode does not read.
    #[error(
        "{path}: document {index} has kind {kind:?} ({api_version}); local mode reads Terraform (infra.argocd.io/v1alpha1), Secret and ConfigMap"
    )]
    UnsupportedKind {
        /// The file.
        path: PathBuf,
        /// The document's position.
        index: usize,
        /// Its kind.
        kind: String,
        /// Its apiVersion.
        api_version: String,
    },
    /// Two objects have the same namespace and name.
    #[error("{0} is defined twice")]
    Duplicate(ObjectKey),
    /// `dependsOn` forms a cycle.
    #[error("dependsOn forms a cycle: {}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join(" -> "))]
    Cycle(Vec<ObjectKey>),
}

/// A `Terraform` object read from a file.
#[derive(Debug, Clone)]
pub struct Manifest {
    /// Namespace and name.
    pub key: ObjectKey,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    pub annotations: BTreeMap<String, String>,
    /// The spec.
    pub spec: TerraformSpec,
    /// The directory of the file it came from (relative source paths start here).
    pub base_dir: PathBuf,
}

impl Manifest {
    /// The object as the cluster would hold it before its first reconcile (no status).
    pub fn object(&self) -> tfops_core::api::TerraformObject {
        tfops_core::api::TerraformObject {
            metadata: tfops_core::api::ObjectMeta {
                name: self.key.name.clone(),
                namespace: self.key.namespace.clone(),
                labels: self.labels.clone(),
                annotations: self.annotations.clone(),
                ..Default::default()
            },
            spec: self.spec.clone(),
            status: Default::default(),
        }
    }
}

/// Everything read from the files.
#[derive(Debug, Clone, Default)]
pub struct Manifests {
    /// The `Terraform` objects, in file order.
    pub objects: Vec<Manifest>,
    /// Secrets and ConfigMaps: (namespace, name) → key → value.
    pub data: BTreeMap<(String, String), BTreeMap<String, Vec<u8>>>,
    /// `TerraformPolicy` objects.
    pub policies: Vec<tfops_core::policy::TerraformPolicy>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Header {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Meta {
    name: String,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct TerraformDoc {
    #[allow(dead_code)]
    api_version: String,
    #[allow(dead_code)]
    kind: String,
    metadata: Meta,
    spec: TerraformSpec,
    #[serde(default)]
    #[allow(dead_code)]
    status: Option<serde_yaml_ng::Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DataDoc {
    metadata: Meta,
    #[serde(default)]
    data: BTreeMap<String, String>,
    #[serde(default)]
    string_data: BTreeMap<String, String>,
}

/// The namespace objects without one get, as `kubectl` does.
pub const DEFAULT_NAMESPACE: &str = "default";

/// Reads every document of every file.
///
/// # Errors
/// A [`ManifestError`] naming the file, and for YAML problems the line and column.
pub fn read(files: &[PathBuf]) -> Result<Manifests, ManifestError> {
    let mut out = Manifests::default();
    for path in files {
        let text = std::fs::read_to_string(path).map_err(|source| ManifestError::Read {
            path: path.clone(),
            source,
        })?;
        let base_dir = path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."));
        let invalid = |message: String| ManifestError::Invalid {
            path: path.clone(),
            message,
        };
        for (index, doc) in serde_yaml_ng::Deserializer::from_str(&text).enumerate() {
            let value =
                serde_yaml_ng::Value::deserialize(doc).map_err(|e| invalid(e.to_string()))?;
            if value.is_null() {
                continue;
            }
            let header: Header =
                serde_yaml_ng::from_value(value.clone()).map_err(|e| invalid(e.to_string()))?;
            match (header.api_version.as_str(), header.kind.as_str()) {
                ("infra.argocd.io/v1alpha1", "Terraform") => {
                    // Re-parse from the text so errors keep their line and column.
                    let doc: TerraformDoc = nth_document(&text, index)
                        .map_err(|e| invalid(format!("document {}: {e}", index + 1)))?;
                    let key = ObjectKey::new(
                        doc.metadata
                            .namespace
                            .unwrap_or_else(|| DEFAULT_NAMESPACE.into()),
                        doc.metadata.name,
                    );
                    if out.objects.iter().any(|o| o.key == key) {
                        return Err(ManifestError::Duplicate(key));
                    }
                    out.objects.push(Manifest {
                        key,
                        labels: doc.metadata.labels,
                        annotations: doc.metadata.annotations,
                        spec: doc.spec,
                        base_dir: base_dir.clone(),
                    });
                }
                ("infra.argocd.io/v1alpha1", "TerraformPolicy") => {
                    let mut policy: tfops_core::policy::TerraformPolicy =
                        nth_document(&text, index)
                            .map_err(|e| invalid(format!("document {}: {e}", index + 1)))?;
                    if policy.metadata.namespace.is_empty() {
                        policy.metadata.namespace = DEFAULT_NAMESPACE.into();
                    }
                    // Every expression is checked now, so a broken rule stops before any run.
                    tfops_core::policy::compile(&policy).map_err(|e| invalid(e.to_string()))?;
                    out.policies.push(policy);
                }
                ("v1", "Secret") | ("v1", "ConfigMap") => {
                    let doc: DataDoc =
                        serde_yaml_ng::from_value(value).map_err(|e| invalid(e.to_string()))?;
                    let (key, data) = data_of(header.kind == "Secret", doc, &invalid)?;
                    out.data.insert(key, data);
                }
                (api_version, kind) => {
                    return Err(ManifestError::UnsupportedKind {
                        path: path.clone(),
                        index: index + 1,
                        kind: kind.to_string(),
                        api_version: api_version.to_string(),
                    });
                }
            }
        }
    }
    Ok(out)
}

/// A Secret's or ConfigMap's data under its (namespace, name).
type NamedData = ((String, String), BTreeMap<String, Vec<u8>>);

/// A Secret's or ConfigMap's data, decoded (a Secret's is base64 and may be binary), under
/// its namespace and name.
fn data_of(
    secret: bool,
    doc: DataDoc,
    invalid: &dyn Fn(String) -> ManifestError,
) -> Result<NamedData, ManifestError> {
    let mut data = BTreeMap::new();
    for (k, v) in doc.data {
        // Secret data is base64 and may be binary (a keystore for a file mapping); whether a
        // value must be text is decided where it is used.
        let value = if secret {
            base64::engine::general_purpose::STANDARD
                .decode(v.trim())
                .map_err(|e| {
                    invalid(format!(
                        "Secret {}: data.{k} is not base64: {e}",
                        doc.metadata.name
                    ))
                })?
        } else {
            v.into_bytes()
        };
        data.insert(k, value);
    }
    data.extend(
        doc.string_data
            .into_iter()
            .map(|(k, v)| (k, v.into_bytes())),
    );
    let ns = doc
        .metadata
        .namespace
        .unwrap_or_else(|| DEFAULT_NAMESPACE.into());
    Ok(((ns, doc.metadata.name), data))
}

fn nth_document<T: serde::de::DeserializeOwned>(
    text: &str,
    n: usize,
) -> Result<T, serde_yaml_ng::Error> {
    let mut docs = serde_yaml_ng::Deserializer::from_str(text);
    let doc = docs.nth(n).ok_or_else(|| {
        <serde_yaml_ng::Error as serde::de::Error>::custom("document disappeared")
    })?;
    T::deserialize(doc)
}

/// The objects in an order where every object comes after what it depends on (dependencies
/// outside the set are left to the reconciler, which waits for them).
///
/// # Errors
/// [`ManifestError::Cycle`] naming the cycle.
pub fn order(objects: &[Manifest]) -> Result<Vec<usize>, ManifestError> {
    let index: BTreeMap<&ObjectKey, usize> = objects
        .iter()
        .enumerate()
        .map(|(i, o)| (&o.key, i))
        .collect();
    let deps = |i: usize| -> Vec<usize> {
        let o = &objects[i];
        o.spec
            .depends_on
            .iter()
            .filter_map(|d| {
                let key =
                    ObjectKey::new(d.namespace.as_deref().unwrap_or(&o.key.namespace), &d.name);
                index.get(&key).copied()
            })
            .collect()
    };
    let mut done = BTreeSet::new();
    let mut out = Vec::new();
    for start in 0..objects.len() {
        visit(start, &deps, &mut done, &mut Vec::new(), &mut out, objects)?;
    }
    Ok(out)
}

fn visit(
    i: usize,
    deps: &dyn Fn(usize) -> Vec<usize>,
    done: &mut BTreeSet<usize>,
    path: &mut Vec<usize>,
    out: &mut Vec<usize>,
    objects: &[Manifest],
) -> Result<(), ManifestError> {
    if done.contains(&i) {
        return Ok(());
    }
    if let Some(pos) = path.iter().position(|&p| p == i) {
        let mut cycle: Vec<ObjectKey> = path[pos..]
            .iter()
            .map(|&p| objects[p].key.clone())
            .collect();
        cycle.push(objects[i].key.clone());
        return Err(ManifestError::Cycle(cycle));
    }
    path.push(i);
    for d in deps(i) {
        visit(d, deps, done, path, out, objects)?;
    }
    path.pop();
    done.insert(i);
    out.push(i);
    Ok(())
}
