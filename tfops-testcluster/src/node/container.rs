//! What the node agent gives a container before it starts, read through the API server as a
//! kubelet reads it: its environment (`env`, `envFrom`), its volumes written as private
//! directories (Secret, ConfigMap, emptyDir, projected: ServiceAccount token from the
//! TokenRequest API, ConfigMap, Secret, downward API), the mount paths rewritten to those
//! directories, and the image name it is looked up by.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use k8s_openapi::api::authentication::v1::BoundObjectReference;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Api;
use serde_json::Value;

/// A source of a container's configuration that could not be had: the container waits in
/// `CreateContainerConfigError` with this message, as a kubelet's does.
pub type ConfigError = String;

/// The data of a Secret or ConfigMap, decoded; `None` when it does not exist.
async fn data(
    client: &kube::Client,
    namespace: &str,
    secret: bool,
    name: &str,
) -> Result<Option<BTreeMap<String, Vec<u8>>>, ConfigError> {
    let answer = if secret {
        Api::<Secret>::namespaced(client.clone(), namespace)
            .get_opt(name)
            .await
            .map(|s| {
                s.map(|s| {
                    s.data
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(k, v)| (k, v.0))
                        .collect()
                })
            })
    } else {
        Api::<ConfigMap>::namespaced(client.clone(), namespace)
            .get_opt(name)
            .await
            .map(|c| {
                c.map(|c| {
                    let mut out: BTreeMap<String, Vec<u8>> = c
                        .data
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(k, v)| (k, v.into_bytes()))
                        .collect();
                    out.extend(
                        c.binary_data
                            .unwrap_or_default()
                            .into_iter()
                            .map(|(k, v)| (k, v.0)),
                    );
                    out
                })
            })
    };
    answer.map_err(|e| e.to_string())
}

fn kind_word(secret: bool) -> &'static str {
    if secret { "secret" } else { "configmap" }
}

/// The value of `fieldPath` of the Pod (`metadata.name`, `metadata.labels['x']`,
/// `status.podIP`, ...).
fn field(pod: &Value, path: &str, ip: &str) -> String {
    if path == "status.podIP" {
        return ip.to_string();
    }
    if let Some((map, key)) = path.split_once("['") {
        let key = key.trim_end_matches("']");
        let map = map.split('.').fold(pod.clone(), |v, part| v[part].clone());
        return map[key].as_str().unwrap_or("").to_string();
    }
    let v = path.split('.').fold(pod.clone(), |v, part| v[part].clone());
    match v {
        Value::String(s) => s,
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// Resolves the container's environment through the API server.
///
/// # Errors
/// A missing Secret, ConfigMap or key that is not optional.
pub async fn environment(
    client: &kube::Client,
    pod: &Value,
    container: &Value,
    ip: &str,
) -> Result<Vec<(String, String)>, ConfigError> {
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or("");
    let mut out = Vec::new();
    for from in container["envFrom"].as_array().into_iter().flatten() {
        let prefix = from["prefix"].as_str().unwrap_or("");
        for (kind, secret) in [("secretRef", true), ("configMapRef", false)] {
            let r = &from[kind];
            if r.is_null() {
                continue;
            }
            let source = r["name"].as_str().unwrap_or("");
            match data(client, ns, secret, source).await? {
                Some(d) => {
                    for (k, v) in d {
                        out.push((
                            format!("{prefix}{k}"),
                            String::from_utf8_lossy(&v).into_owned(),
                        ));
                    }
                }
                None if r["optional"] == true => {}
                None => return Err(format!("{} \"{source}\" not found", kind_word(secret))),
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
        if let Some(path) = from["fieldRef"]["fieldPath"].as_str() {
            out.push((key, field(pod, path, ip)));
            continue;
        }
        for (kind, secret) in [("secretKeyRef", true), ("configMapKeyRef", false)] {
            let r = &from[kind];
            if r.is_null() {
                continue;
            }
            let source = r["name"].as_str().unwrap_or("");
            let item = r["key"].as_str().unwrap_or("");
            match data(client, ns, secret, source).await? {
                Some(d) => match d.get(item) {
                    Some(v) => out.push((key.clone(), String::from_utf8_lossy(v).into_owned())),
                    None if r["optional"] == true => {}
                    None => {
                        let what = if secret { "Secret" } else { "ConfigMap" };
                        return Err(format!("couldn't find key {item} in {what} {ns}/{source}"));
                    }
                },
                None if r["optional"] == true => {}
                None => return Err(format!("{} \"{source}\" not found", kind_word(secret))),
            }
        }
    }
    Ok(out)
}

/// Writes `items` (key → path) of `d`, or every key when `items` is empty, under `dir`.
fn write_items(
    dir: &Path,
    d: &BTreeMap<String, Vec<u8>>,
    items: &Value,
) -> Result<(), ConfigError> {
    let selected: Vec<(String, String)> = match items.as_array() {
        Some(list) if !list.is_empty() => list
            .iter()
            .map(|i| {
                (
                    i["key"].as_str().unwrap_or("").to_string(),
                    i["path"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect(),
        _ => d.keys().map(|k| (k.clone(), k.clone())).collect(),
    };
    for (key, path) in selected {
        if let Some(bytes) = d.get(&key) {
            write_private(&dir.join(path), bytes).map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

/// Writes the Pod's volumes under `dir/volumes`; gives mount path → directory for the
/// container's mounts, longest mount path first.
///
/// # Errors
/// A missing source that is not optional, a token the TokenRequest API refused, a mount of a
/// volume the Pod does not have.
pub async fn volumes(
    client: &kube::Client,
    pod: &Value,
    container: &Value,
    dir: &Path,
) -> Result<Vec<(String, PathBuf)>, ConfigError> {
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or("");
    let mut written: HashMap<String, PathBuf> = HashMap::new();
    for v in pod["spec"]["volumes"].as_array().into_iter().flatten() {
        let vname = v["name"].as_str().unwrap_or("").to_string();
        let path = dir.join("volumes").join(&vname);
        std::fs::create_dir_all(&path).map_err(|e| e.to_string())?;
        let mut sources: Vec<Value> = Vec::new();
        if v["secret"].is_object() {
            let mut s = serde_json::json!({"secret": v["secret"].clone()});
            s["secret"]["name"] = v["secret"]["secretName"].clone();
            sources.push(s);
        } else if v["configMap"].is_object() {
            sources.push(serde_json::json!({"configMap": v["configMap"].clone()}));
        } else if let Some(list) = v["projected"]["sources"].as_array() {
            sources.extend(list.iter().cloned());
        }
        for source in sources {
            project(client, pod, ns, &source, &path).await?;
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
        let mount_path = m["mountPath"].as_str().unwrap_or("").trim_end_matches('/');
        mounts.push((
            mount_path.to_string(),
            if sub.is_empty() {
                path.clone()
            } else {
                path.join(sub)
            },
        ));
    }
    mounts.sort_by_key(|(m, _)| std::cmp::Reverse(m.len()));
    Ok(mounts)
}

/// Writes one source of a volume (Secret, ConfigMap, ServiceAccount token, downward API).
async fn project(
    client: &kube::Client,
    pod: &Value,
    ns: &str,
    source: &Value,
    path: &Path,
) -> Result<(), ConfigError> {
    for (kind, secret) in [("secret", true), ("configMap", false)] {
        let s = &source[kind];
        if !s.is_object() {
            continue;
        }
        let name = s["name"].as_str().unwrap_or("");
        match data(client, ns, secret, name).await? {
            Some(d) => write_items(path, &d, &s["items"])?,
            None if s["optional"] == true => {}
            None => return Err(format!("{} \"{name}\" not found", kind_word(secret))),
        }
    }
    let token = &source["serviceAccountToken"];
    if token.is_object() {
        let account = pod["spec"]["serviceAccountName"]
            .as_str()
            .unwrap_or("default");
        let bound = BoundObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: pod["metadata"]["name"].as_str().map(String::from),
            uid: pod["metadata"]["uid"].as_str().map(String::from),
        };
        let seconds = token["expirationSeconds"].as_i64().unwrap_or(3607);
        let mut request = k8s_openapi::api::authentication::v1::TokenRequest {
            spec: k8s_openapi::api::authentication::v1::TokenRequestSpec {
                audiences: token["audience"]
                    .as_str()
                    .map(|a| vec![a.to_string()])
                    .unwrap_or_default(),
                bound_object_ref: Some(bound),
                expiration_seconds: Some(seconds),
            },
            ..Default::default()
        };
        request.metadata.namespace = Some(ns.to_string());
        let answer = crate::control_plane::token_request(client, ns, account, &request)
            .await
            .map_err(|e| format!("failed to fetch token: {e}"))?;
        let file = token["path"].as_str().unwrap_or("token");
        write_private(&path.join(file), answer.as_bytes()).map_err(|e| e.to_string())?;
    }
    for item in source["downwardAPI"]["items"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if let Some(f) = item["fieldRef"]["fieldPath"].as_str() {
            let value = field(pod, f, "");
            let file = item["path"].as_str().unwrap_or("");
            write_private(&path.join(file), value.as_bytes()).map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

/// Sends the command's standard output and error to `log` (the container's log).
pub fn output_to(cmd: &mut tokio::process::Command, log: std::fs::File) {
    cmd.stderr(
        log.try_clone()
            .map(std::process::Stdio::from)
            .unwrap_or_else(|_| std::process::Stdio::null()),
    )
    .stdout(log);
}

/// Writes `bytes` to `path` readable by its owner only, making its directory.
///
/// # Errors
/// What the file system says.
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(bytes)
}

/// `value` with a leading mount path replaced by its directory (a process on the host sees
/// the volume there).
pub fn rewrite(value: &str, mounts: &[(String, PathBuf)]) -> String {
    for (mount, dir) in mounts {
        if value == mount {
            return dir.display().to_string();
        }
        if let Some(rest) = value.strip_prefix(mount.as_str())
            && rest.starts_with('/')
        {
            return format!("{}{rest}", dir.display());
        }
        if let Some((flag, v)) = value.split_once('=')
            && (v == mount || v.starts_with(&format!("{mount}/")))
        {
            return format!("{flag}={}", rewrite(v, mounts));
        }
    }
    value.to_string()
}

/// The image name without tag or digest (`ghcr.io/x/runner:1.2` → `ghcr.io/x/runner`).
pub fn image_name(image: &str) -> &str {
    let no_digest = image.split('@').next().unwrap_or(image);
    match no_digest.rfind(':') {
        Some(i) if !no_digest[i..].contains('/') => &no_digest[..i],
        _ => no_digest,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn image_names_lose_tag_and_digest_but_not_a_registry_port() {
        assert_eq!(image_name("ghcr.io/x/runner:1.2"), "ghcr.io/x/runner");
        assert_eq!(image_name("localhost:5000/runner"), "localhost:5000/runner");
        assert_eq!(image_name("r@sha256:ab"), "r");
    }

    #[test]
    fn mount_paths_are_rewritten_in_values_and_flags() {
        let mounts = vec![("/tmp".to_string(), PathBuf::from("/pods/p/tmp"))];
        assert_eq!(rewrite("/tmp/x", &mounts), "/pods/p/tmp/x");
        assert_eq!(rewrite("--dir=/tmp/y", &mounts), "--dir=/pods/p/tmp/y");
        assert_eq!(rewrite("/tmpx", &mounts), "/tmpx");
    }

    #[test]
    fn fields_of_the_pod_are_read_by_path() {
        let pod = serde_json::json!({"metadata": {"name": "p", "labels": {"a": "b"}}});
        assert_eq!(field(&pod, "metadata.name", ""), "p");
        assert_eq!(field(&pod, "metadata.labels['a']", ""), "b");
        assert_eq!(field(&pod, "status.podIP", "127.1.2.3"), "127.1.2.3");
    }
}
