//! ResourceQuota for Pods, as the real quota admission plugin and quota controller do it: a
//! Pod whose creation would take a namespace's usage over a quota's `hard` limit for `pods`
//! (or `count/pods`), `requests.cpu`/`cpu`, `requests.memory`/`memory`, `limits.cpu` or
//! `limits.memory` is refused with the real 403 "exceeded quota" message; a quota on requests
//! or limits refuses a Pod that does not state them ("must specify"); `status.used` follows
//! the Pods that are not terminated.
//!
//! Quantities are parsed here (decimal and binary suffixes, `m` for milli): the one
//! maintained Rust parser of Kubernetes quantities depends on k8s-openapi versions we do not
//! use, and this is the small subset quotas need.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::errors::ApiError;
use super::store::Store;

/// A quantity in thousandths of its unit (millicores, millibytes), so sums stay exact.
fn parse(q: &str) -> Option<i128> {
    let q = q.trim();
    let split = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+'))
        .unwrap_or(q.len());
    let (number, suffix) = q.split_at(split);
    let multiplier: f64 = match suffix {
        "" => 1.0,
        "m" => 0.001,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        "Ti" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    let n: f64 = number.parse().ok()?;
    Some((n * multiplier * 1000.0).round() as i128)
}

/// Prints thousandths back as a quantity (`500m`, `2`, `128Mi`), as the real messages do.
fn show(milli: i128, memory: bool) -> String {
    if memory && milli % 1000 == 0 {
        let bytes = milli / 1000;
        for (suffix, size) in [("Gi", 1i128 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)] {
            if bytes != 0 && bytes % size == 0 {
                return format!("{}{suffix}", bytes / size);
            }
        }
        return bytes.to_string();
    }
    if milli % 1000 == 0 {
        (milli / 1000).to_string()
    } else {
        format!("{milli}m")
    }
}

/// What one Pod uses of each quota resource.
fn usage(pod: &Value) -> BTreeMap<&'static str, Option<i128>> {
    let containers: Vec<&Value> = pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .collect();
    let sum = |kind: &str, resource: &str| -> Option<i128> {
        let mut total = 0;
        for c in &containers {
            total += parse(c["resources"][kind][resource].as_str()?)?;
        }
        Some(total)
    };
    let mut out = BTreeMap::new();
    out.insert("pods", Some(1000));
    out.insert("count/pods", Some(1000));
    out.insert("requests.cpu", sum("requests", "cpu"));
    out.insert("cpu", sum("requests", "cpu"));
    out.insert("requests.memory", sum("requests", "memory"));
    out.insert("memory", sum("requests", "memory"));
    out.insert("limits.cpu", sum("limits", "cpu"));
    out.insert("limits.memory", sum("limits", "memory"));
    out
}

fn terminated(pod: &Value) -> bool {
    matches!(
        pod["status"]["phase"].as_str(),
        Some("Succeeded" | "Failed")
    )
}

/// The namespace's current usage, over the Pods that are not terminated.
fn used(store: &Store, namespace: &str) -> BTreeMap<&'static str, i128> {
    let mut out = BTreeMap::new();
    for pod in store.list("pods", Some(namespace)) {
        if terminated(pod) {
            continue;
        }
        for (k, v) in usage(pod) {
            *out.entry(k).or_insert(0) += v.unwrap_or(0);
        }
    }
    out
}

fn is_memory(resource: &str) -> bool {
    resource.ends_with("memory")
}

/// Admits or refuses the creation of `pod` named `name` in `namespace`.
///
/// # Errors
/// 403 `Forbidden` "exceeded quota" or "failed quota: ...: must specify".
pub fn admit(store: &Store, namespace: &str, name: &str, pod: &Value) -> Result<(), ApiError> {
    let quotas = store.list("resourcequotas", Some(namespace));
    if quotas.is_empty() {
        return Ok(());
    }
    let wanted = usage(pod);
    let current = used(store, namespace);
    for quota in quotas {
        let quota_name = quota["metadata"]["name"].as_str().unwrap_or("");
        let hard: BTreeMap<String, i128> = quota["spec"]["hard"]
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some((k.clone(), parse(v.as_str()?)?)))
            .collect();
        let mut missing = Vec::new();
        let mut exceeded = Vec::new();
        for (resource, limit) in &hard {
            let Some(request) = wanted.get(resource.as_str()) else {
                continue;
            };
            let Some(request) = *request else {
                missing.push(resource.clone());
                continue;
            };
            let have = current.get(resource.as_str()).copied().unwrap_or(0);
            if have + request > *limit {
                exceeded.push((resource.clone(), request, have, *limit));
            }
        }
        if !missing.is_empty() {
            return Err(ApiError::forbidden(
                "pods",
                "",
                name,
                format!(
                    "failed quota: {quota_name}: must specify {}",
                    missing.join(",")
                ),
            ));
        }
        if !exceeded.is_empty() {
            let list = |pick: fn(&(String, i128, i128, i128)) -> i128| {
                exceeded
                    .iter()
                    .map(|e| format!("{}={}", e.0, show(pick(e), is_memory(&e.0))))
                    .collect::<Vec<_>>()
                    .join(",")
            };
            return Err(ApiError::forbidden(
                "pods",
                "",
                name,
                format!(
                    "exceeded quota: {quota_name}, requested: {}, used: {}, limited: {}",
                    list(|e| e.1),
                    list(|e| e.2),
                    list(|e| e.3)
                ),
            ));
        }
    }
    Ok(())
}

/// The `status` each quota of `namespace` should have now (`hard` and `used`), by name.
pub fn statuses(store: &Store, namespace: &str) -> Vec<(String, Value)> {
    let current = used(store, namespace);
    store
        .list("resourcequotas", Some(namespace))
        .into_iter()
        .map(|q| {
            let hard = q["spec"]["hard"].clone();
            let used: serde_json::Map<String, Value> = hard
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, _)| {
                    let v = current.get(k.as_str()).copied().unwrap_or(0);
                    (k.clone(), json!(show(v, is_memory(k))))
                })
                .collect();
            (
                q["metadata"]["name"].as_str().unwrap_or("").to_string(),
                json!({"hard": hard, "used": used}),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn quantities_parse_and_print_as_kubernetes_writes_them() {
        assert_eq!(parse("100m"), Some(100));
        assert_eq!(parse("0.5"), Some(500));
        assert_eq!(parse("2"), Some(2000));
        assert_eq!(parse("128Mi"), Some(128 * 1024 * 1024 * 1000));
        assert_eq!(parse("1G"), Some(1_000_000_000_000));
        assert_eq!(parse("ten"), None);
        assert_eq!(show(1500, false), "1500m");
        assert_eq!(show(2000, false), "2");
        assert_eq!(show(parse("256Mi").unwrap(), true), "256Mi");
    }
}
