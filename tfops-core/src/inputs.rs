//! Resolving a spec's inputs (`vars`, `varsFrom`, `values`, `fileMappings`,
//! `cliConfigSecretRef`) from Secrets and ConfigMaps, however an adapter reads those.

use std::collections::BTreeMap;

use crate::api::{SecretKeyRef, TerraformObject, VarsFromKind};
use crate::ports::{PortError, ResolvedFile, ResolvedInputs};

/// Reads the data of a Secret or ConfigMap: `(kind, namespace, name)` → key → bytes, or
/// `None` when it does not exist. Bytes, because Secrets hold binary data (a file mapping of a
/// keystore, say); a variable's value must be UTF-8 text.
pub trait DataSource {
    /// The object's data.
    fn data(
        &self,
        kind: VarsFromKind,
        namespace: &str,
        name: &str,
    ) -> Option<BTreeMap<String, Vec<u8>>>;
}

/// A key's bytes as the text a variable needs.
fn text(
    bytes: &[u8],
    key: &str,
    kind: VarsFromKind,
    namespace: &str,
    name: &str,
) -> Result<String, PortError> {
    String::from_utf8(bytes.to_vec()).map_err(|_| {
        PortError::Invalid(format!(
            "key {key} of {} {namespace}/{name} is not UTF-8 text, and a variable's value must be (binary data can go to a file with fileMappings)",
            kind_name(kind)
        ))
    })
}

/// A key's text as a JSON value when it parses as one, else as a string.
pub fn json_or_string(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|_| serde_json::Value::String(text.to_string()))
}

fn kind_name(kind: VarsFromKind) -> &'static str {
    match kind {
        VarsFromKind::Secret => "Secret",
        VarsFromKind::ConfigMap => "ConfigMap",
    }
}

fn read_key(
    source: &dyn DataSource,
    kind: VarsFromKind,
    namespace: &str,
    r: &SecretKeyRef,
) -> Result<Option<Vec<u8>>, PortError> {
    match source
        .data(kind, namespace, &r.name)
        .and_then(|d| d.get(&r.key).cloned())
    {
        Some(v) => Ok(Some(v)),
        None if r.optional => Ok(None),
        None => Err(PortError::NotFound(format!(
            "key {} of {} {namespace}/{}",
            r.key,
            kind_name(kind),
            r.name
        ))),
    }
}

/// Resolves every input of `object`. Later sources win: `varsFrom` (in order), then `vars`,
/// then `values` as the variable `values`.
///
/// # Errors
/// [`PortError::NotFound`] naming a missing, non-optional Secret, ConfigMap or key.
pub fn resolve(
    object: &TerraformObject,
    source: &dyn DataSource,
) -> Result<ResolvedInputs, PortError> {
    let ns = &object.metadata.namespace;
    let spec = &object.spec;
    let mut inputs = ResolvedInputs::default();
    for from in &spec.vars_from {
        let Some(data) = source.data(from.kind, ns, &from.name) else {
            if from.optional {
                continue;
            }
            return Err(PortError::NotFound(format!(
                "{} {ns}/{}",
                kind_name(from.kind),
                from.name
            )));
        };
        if from.var_keys.is_empty() {
            for (k, v) in &data {
                let v = text(v, k, from.kind, ns, &from.name)?;
                inputs.vars.insert(k.clone(), json_or_string(&v));
            }
        }
        for entry in &from.var_keys {
            let (key, name) = entry.split_once(':').unwrap_or((entry, entry));
            let v = data.get(key).ok_or_else(|| {
                PortError::NotFound(format!(
                    "key {key} of {} {ns}/{}",
                    kind_name(from.kind),
                    from.name
                ))
            })?;
            let v = text(v, key, from.kind, ns, &from.name)?;
            inputs.vars.insert(name.to_string(), json_or_string(&v));
        }
    }
    for var in &spec.vars {
        let value = match (&var.value, &var.value_from) {
            (Some(v), _) => Some(v.clone()),
            (None, Some(from)) => {
                let (kind, r) = match (&from.secret_key_ref, &from.config_map_key_ref) {
                    (Some(r), _) => (VarsFromKind::Secret, Some(r)),
                    (None, Some(r)) => (VarsFromKind::ConfigMap, Some(r)),
                    (None, None) => (VarsFromKind::Secret, None),
                };
                match r {
                    Some(r) => match read_key(source, kind, ns, r)? {
                        Some(b) => Some(json_or_string(&text(&b, &r.key, kind, ns, &r.name)?)),
                        None => None,
                    },
                    None => None,
                }
            }
            (None, None) => None,
        };
        if let Some(value) = value {
            inputs.vars.insert(var.name.clone(), value);
        }
    }
    if let Some(values) = &spec.values {
        inputs
            .vars
            .insert("values".into(), serde_json::Value::Object(values.clone()));
    }
    for m in &spec.file_mappings {
        if let Some(content) = read_key(source, VarsFromKind::Secret, ns, &m.secret_key_ref)? {
            inputs.files.push(ResolvedFile {
                location: m.location,
                path: m.path.clone(),
                content,
            });
        }
    }
    if let Some(r) = &spec.cli_config_secret_ref {
        inputs.cli_config = read_key(source, VarsFromKind::Secret, ns, r)?;
    }
    Ok(inputs)
}
