//! What the kubelet stand-in gives a container before it starts: its volumes as private
//! directories, its environment resolved from the store, mount paths rewritten to those
//! directories, and the image name it is looked up by.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use base64::Engine;
use serde_json::{Value, json};

use super::kubelet::namespace;
use super::serve::{Shared, lock};
use super::store::Key;

/// Resolves the container's environment from the store.
pub(super) fn environment(
    shared: &Shared,
    pod: &Value,
    container: &Value,
    ip: &str,
) -> Result<Vec<(String, String)>, String> {
    let ns = namespace(pod);
    let store = lock(&shared.store);
    let object = |resource: &str, name: &str| {
        store
            .get(&Key {
                resource: resource.into(),
                namespace: ns.clone(),
                name: name.into(),
            })
            .cloned()
    };
    let decode = |v: &Value| -> String {
        base64::engine::general_purpose::STANDARD
            .decode(v.as_str().unwrap_or(""))
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    };
    let mut out = Vec::new();
    for from in container["envFrom"].as_array().into_iter().flatten() {
        let prefix = from["prefix"].as_str().unwrap_or("");
        for (kind, resource, data) in [
            ("secretRef", "secrets", "data"),
            ("configMapRef", "configmaps", "data"),
        ] {
            let r = &from[kind];
            if r.is_null() {
                continue;
            }
            let source = r["name"].as_str().unwrap_or("");
            match object(resource, source) {
                Some(o) => {
                    for (k, v) in o[data].as_object().into_iter().flatten() {
                        let value = if resource == "secrets" {
                            decode(v)
                        } else {
                            v.as_str().unwrap_or("").to_string()
                        };
                        out.push((format!("{prefix}{k}"), value));
                    }
                }
                None if r["optional"] == true => {}
                None => {
                    return Err(format!(
                        "{} \"{source}\" not found",
                        if resource == "secrets" {
                            "secret"
                        } else {
                            "configmap"
                        }
                    ));
                }
            }
        }
    }
    for e in container["env"].as_array().into_iter().flatten() {
        let key = e["name"].as_str().unwrap_or("").to_string();
        if let Some(v) = e["value"].as_str() {
            out.push((key, v.to_string()));
            continue;
        }
        let from = &e["valueFrom"];
        if let Some(field) = from["fieldRef"]["fieldPath"].as_str() {
            let value = match field {
                "status.podIP" => json!(ip),
                other => other
                    .split('.')
                    .fold(pod.clone(), |v, part| v[part].clone()),
            };
            out.push((key, value.as_str().unwrap_or("").to_string()));
            continue;
        }
        for (kind, resource) in [
            ("secretKeyRef", "secrets"),
            ("configMapKeyRef", "configmaps"),
        ] {
            let r = &from[kind];
            if r.is_null() {
                continue;
            }
            let source = r["name"].as_str().unwrap_or("");
            let item = r["key"].as_str().unwrap_or("");
            let what = if resource == "secrets" {
                "secret"
            } else {
                "configmap"
            };
            match object(resource, source) {
                Some(o) => match o["data"].get(item) {
                    Some(v) if resource == "secrets" => out.push((key.clone(), decode(v))),
                    Some(v) => out.push((key.clone(), v.as_str().unwrap_or("").to_string())),
                    None if r["optional"] == true => {}
                    None => {
                        return Err(format!(
                            "couldn't find key {item} in {} {ns}/{source}",
                            if resource == "secrets" {
                                "Secret"
                            } else {
                                "ConfigMap"
                            }
                        ));
                    }
                },
                None if r["optional"] == true => {}
                None => return Err(format!("{what} \"{source}\" not found")),
            }
        }
    }
    Ok(out)
}

/// Writes the Pod's volumes; gives mount path → directory for the container's mounts.
pub(super) fn volumes(
    shared: &Shared,
    pod: &Value,
    container: &Value,
    dir: &Path,
) -> Result<Vec<(String, PathBuf)>, String> {
    let ns = namespace(pod);
    let mut written: HashMap<String, PathBuf> = HashMap::new();
    for v in pod["spec"]["volumes"].as_array().into_iter().flatten() {
        let vname = v["name"].as_str().unwrap_or("").to_string();
        let path = dir.join("volumes").join(&vname);
        std::fs::create_dir_all(&path).map_err(|e| e.to_string())?;
        let source = if let Some(s) = v["secret"]["secretName"].as_str() {
            Some(("secrets", s, v["secret"]["optional"] == true))
        } else {
            v["configMap"]["name"]
                .as_str()
                .map(|c| ("configmaps", c, v["configMap"]["optional"] == true))
        };
        if let Some((resource, source, optional)) = source {
            let object = lock(&shared.store)
                .get(&Key {
                    resource: resource.into(),
                    namespace: ns.clone(),
                    name: source.into(),
                })
                .cloned();
            match object {
                Some(o) => {
                    for (k, value) in o["data"].as_object().into_iter().flatten() {
                        let bytes = if resource == "secrets" {
                            base64::engine::general_purpose::STANDARD
                                .decode(value.as_str().unwrap_or(""))
                                .unwrap_or_default()
                        } else {
                            value.as_str().unwrap_or("").as_bytes().to_vec()
                        };
                        write_private(&path.join(k), &bytes).map_err(|e| e.to_string())?;
                    }
                }
                None if optional => {}
                None => {
                    let what = if resource == "secrets" {
                        "secret"
                    } else {
                        "configmap"
                    };
                    return Err(format!("{what} \"{source}\" not found"));
                }
            }
        }
        written.insert(vname, path);
    }
    let mut mounts = Vec::new();
    for m in container["volumeMounts"].as_array().into_iter().flatten() {
        let vname = m["name"].as_str().unwrap_or("");
        let Some(path) = written.get(vname) else {
            return Err(format!("volume \"{vname}\" not found"));
        };
        let sub = m["subPath"].as_str().unwrap_or("");
        mounts.push((
            m["mountPath"]
                .as_str()
                .unwrap_or("")
                .trim_end_matches('/')
                .to_string(),
            if sub.is_empty() {
                path.clone()
            } else {
                path.join(sub)
            },
        ));
    }
    // Longest mount paths first, so the rewriting picks the most specific.
    mounts.sort_by_key(|(m, _)| std::cmp::Reverse(m.len()));
    Ok(mounts)
}

pub(super) fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(bytes)
}

/// `value` with a leading mount path replaced by its directory.
pub(super) fn rewrite(value: &str, mounts: &[(String, PathBuf)]) -> String {
    for (mount, dir) in mounts {
        if value == mount {
            return dir.display().to_string();
        }
        if let Some(rest) = value.strip_prefix(mount.as_str())
            && rest.starts_with('/')
        {
            return format!("{}{rest}", dir.display());
        }
        // `--flag=/mount/path` forms.
        if let Some((flag, v)) = value.split_once('=')
            && (v == mount || v.starts_with(&format!("{mount}/")))
        {
            return format!("{flag}={}", rewrite(v, mounts));
        }
    }
    value.to_string()
}

/// The image name without registry tag or digest (`ghcr.io/x/runner:1.2` → `ghcr.io/x/runner`).
pub(super) fn image_name(image: &str) -> &str {
    let no_digest = image.split('@').next().unwrap_or(image);
    match no_digest.rfind(':') {
        Some(i) if !no_digest[i..].contains('/') => &no_digest[..i],
        _ => no_digest,
    }
}
