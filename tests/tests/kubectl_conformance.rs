//! The loopback API server judged by kubectl (client-go), as a process: discovery, reads,
//! typed writes (protobuf bodies), patches, client-side and server-side `apply`, `delete`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use support::kubectl;
use tests::cluster::LoopbackCluster;

mod support;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_discovers_the_resources_and_reads_objects() {
    let cluster = LoopbackCluster::start().await.unwrap();
    let (_dir, kubeconfig) = support::kubeconfig_file(&cluster);
    let client = support::client(&cluster).await;
    support::namespace(&client, "team-a").await;
    let secrets: Api<Secret> = Api::namespaced(client, "team-a");
    let mut s = Secret::default();
    s.metadata.name = Some("db".into());
    secrets.create(&PostParams::default(), &s).await.unwrap();

    let k = kubeconfig.clone();
    let (resources, json, missing, write, patch) = tokio::task::spawn_blocking(move || {
        (
            kubectl(&k, &["api-resources"]),
            kubectl(&k, &["-n", "team-a", "get", "secret", "db", "-o", "json"]),
            kubectl(&k, &["-n", "team-a", "get", "secret", "nope"]),
            kubectl(&k, &["create", "namespace", "team-b"]),
            kubectl(
                &k,
                &[
                    "-n",
                    "team-a",
                    "patch",
                    "secret",
                    "db",
                    "--type",
                    "merge",
                    "-p",
                    r#"{"metadata":{"labels":{"tier":"prod"}}}"#,
                ],
            ),
        )
    })
    .await
    .unwrap();
    assert!(resources.0, "{}", resources.2);
    assert!(resources.1.contains("secrets") && resources.1.contains("Secret"));
    assert!(json.0, "{}", json.2);
    let v: serde_json::Value = serde_json::from_str(&json.1).unwrap();
    assert_eq!(v["metadata"]["name"], "db");
    assert!(v["metadata"]["uid"].as_str().is_some_and(|u| !u.is_empty()));
    assert!(!missing.0);
    assert!(
        missing.2.contains("NotFound") && missing.2.contains("\"nope\" not found"),
        "{}",
        missing.2
    );
    assert!(write.0, "{}", write.2);
    assert!(write.1.contains("namespace/team-b created"), "{}", write.1);
    assert!(patch.0, "{}{}", patch.1, patch.2);
    let patched = secrets.get("db").await.unwrap();
    assert_eq!(patched.metadata.labels.unwrap()["tier"], "prod");
}

const CONFIG_MAP: &str = "apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: team-a
  labels:
    app: tfops
data:
  a: \"1\"
  b: \"2\"
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applies_client_side_and_server_side_and_deletes() {
    let cluster = LoopbackCluster::start().await.unwrap();
    let (dir, kubeconfig) = support::kubeconfig_file(&cluster);
    let manifest = dir.path().join("cm.yaml");
    let changed = dir.path().join("cm2.yaml");
    std::fs::write(&manifest, CONFIG_MAP).unwrap();
    // The second version drops key b and label app, changes a.
    std::fs::write(
        &changed,
        CONFIG_MAP
            .replace("  labels:\n    app: tfops\n", "")
            .replace("  b: \"2\"\n", "")
            .replace("\"1\"", "\"one\""),
    )
    .unwrap();
    let k = kubeconfig.clone();
    let (m, c) = (manifest.clone(), changed.clone());
    let out = tokio::task::spawn_blocking(move || {
        let m = m.to_str().unwrap();
        let c = c.to_str().unwrap();
        vec![
            kubectl(&k, &["create", "namespace", "team-a"]),
            kubectl(&k, &["apply", "-f", m]),
            kubectl(
                &k,
                &["-n", "team-a", "get", "configmap", "settings", "-o", "json"],
            ),
            kubectl(&k, &["apply", "-f", c]),
            kubectl(
                &k,
                &["-n", "team-a", "get", "configmap", "settings", "-o", "json"],
            ),
            // Taking over from client-side apply conflicts on data.a, as on a real server.
            kubectl(
                &k,
                &[
                    "apply",
                    "--server-side",
                    "--force-conflicts",
                    "--field-manager",
                    "ops",
                    "-f",
                    m,
                ],
            ),
            kubectl(
                &k,
                &[
                    "apply",
                    "--server-side",
                    "--field-manager",
                    "other",
                    "-f",
                    c,
                ],
            ),
            kubectl(
                &k,
                &[
                    "apply",
                    "--server-side",
                    "--force-conflicts",
                    "--field-manager",
                    "other",
                    "-f",
                    c,
                ],
            ),
            kubectl(
                &k,
                &[
                    "-n",
                    "team-a",
                    "get",
                    "configmap",
                    "settings",
                    "-o",
                    "json",
                    "--show-managed-fields",
                ],
            ),
            kubectl(&k, &["-n", "team-a", "delete", "configmap", "settings"]),
            kubectl(&k, &["-n", "team-a", "get", "configmap", "settings"]),
        ]
    })
    .await
    .unwrap();
    for (i, o) in out.iter().enumerate() {
        let expect_ok = !matches!(i, 6 | 10);
        assert_eq!(o.0, expect_ok, "step {i}: {}{}", o.1, o.2);
    }
    let first: serde_json::Value = serde_json::from_str(&out[2].1).unwrap();
    assert_eq!(first["data"], serde_json::json!({"a": "1", "b": "2"}));
    assert!(
        first["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .is_string()
    );
    // Client-side apply removes what the manifest no longer has (by the last-applied
    // annotation and a strategic merge patch).
    let second: serde_json::Value = serde_json::from_str(&out[4].1).unwrap();
    assert_eq!(second["data"], serde_json::json!({"a": "one"}));
    assert!(second["metadata"]["labels"].get("app").is_none());
    // Server-side apply: "other" conflicts with "ops" over data.a until it forces; data.b
    // stays, still applied by "ops".
    assert!(
        out[6].2.contains("conflict with \"ops\"") && out[6].2.contains(".data.a"),
        "{}",
        out[6].2
    );
    let forced: serde_json::Value = serde_json::from_str(&out[8].1).unwrap();
    assert_eq!(forced["data"], serde_json::json!({"a": "one", "b": "2"}));
    let managers: Vec<&str> = forced["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["manager"].as_str())
        .collect();
    assert!(
        managers.contains(&"other") && managers.contains(&"ops"),
        "{managers:?}"
    );
    assert!(
        out[9].1.contains("configmap \"settings\" deleted"),
        "{}",
        out[9].1
    );
    assert!(out[10].2.contains("NotFound"), "{}", out[10].2);
}
