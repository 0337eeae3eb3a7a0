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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_watches_waits_for_a_condition_and_prints_yaml() {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
    use std::process::{Command, Stdio};

    let cluster = LoopbackCluster::start().await.unwrap();
    let (dir, kubeconfig) = support::kubeconfig_file(&cluster);
    let client = support::client(&cluster).await;
    support::namespace(&client, "team-a").await;
    support::widgets_served(&client).await;
    let widgets: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "team-a",
        &ApiResource::from_gvk(&GroupVersionKind::gvk("test.tfops.io", "v1", "Widget")),
    );
    let w: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "test.tfops.io/v1", "kind": "Widget",
        "metadata": {"name": "a"}, "spec": {"path": "infra"},
    }))
    .unwrap();
    widgets.create(&PostParams::default(), &w).await.unwrap();

    // `get -w` prints the object, then its changes (its output goes to a file, read as it
    // grows).
    let out_path = dir.path().join("watch.out");
    let mut watch = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args([
            "-n",
            "team-a",
            "get",
            "widgets",
            "-w",
            "--output-watch-events",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::from(std::fs::File::create(&out_path).unwrap()))
        .stderr(Stdio::from(
            std::fs::File::create(dir.path().join("watch.err")).unwrap(),
        ))
        .spawn()
        .unwrap();
    // (A header line, then one line per event: `ADDED      a      0s`.)
    let events = |path: &std::path::Path| -> Vec<String> {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .skip(1)
            .map(|l| l.split_whitespace().take(2).collect::<Vec<_>>().join(" "))
            .collect()
    };
    let seen = |want: usize| {
        let out_path = out_path.clone();
        async move {
            loop {
                let e = events(&out_path);
                if e.len() >= want {
                    return e;
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        }
    };
    let first = tokio::time::timeout(std::time::Duration::from_secs(30), seen(1))
        .await
        .expect("kubectl get -w printed nothing");
    assert_eq!(first, ["ADDED a"]);

    // `wait --for=condition=Ready` returns once status says so.
    let k = kubeconfig.clone();
    let wait = tokio::task::spawn_blocking(move || {
        kubectl(
            &k,
            &[
                "-n",
                "team-a",
                "wait",
                "--for=condition=Ready",
                "widget/a",
                "--timeout=60s",
            ],
        )
    });
    // Set the condition once kubectl's wait is watching (or has read the object).
    let watching =
        async {
            while !cluster.audit().iter().any(|a| {
                a.method == "GET" && a.path.ends_with("/widgets") && a.path.contains("team-a")
            }) {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        };
    tokio::time::timeout(std::time::Duration::from_secs(30), watching)
        .await
        .unwrap();
    widgets
        .patch_status(
            "a",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}})),
        )
        .await
        .unwrap();
    let waited = wait.await.unwrap();
    assert!(waited.0, "{waited:?}");
    assert!(
        waited.1.contains("widget.test.tfops.io/a condition met"),
        "{waited:?}"
    );
    let both = tokio::time::timeout(std::time::Duration::from_secs(30), seen(2))
        .await
        .expect("kubectl get -w did not print the change");
    assert_eq!(both, ["ADDED a", "MODIFIED a"]);
    watch.kill().unwrap();
    watch.wait().unwrap();

    let k = kubeconfig.clone();
    let yaml = tokio::task::spawn_blocking(move || {
        kubectl(&k, &["-n", "team-a", "get", "wd", "a", "-o", "yaml"])
    })
    .await
    .unwrap();
    assert!(yaml.0, "{yaml:?}");
    assert!(
        yaml.1.contains("kind: Widget") && yaml.1.contains("path: infra"),
        "{}",
        yaml.1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_dry_runs_on_the_server_and_strict_validation_refuses_unknown_fields() {
    let cluster = LoopbackCluster::start().await.unwrap();
    let (dir, kubeconfig) = support::kubeconfig_file(&cluster);
    let client = support::client(&cluster).await;
    support::namespace(&client, "team-a").await;
    support::widgets_served(&client).await;
    let good = dir.path().join("good.yaml");
    let typo = dir.path().join("typo.yaml");
    let widget = "apiVersion: test.tfops.io/v1\nkind: Widget\nmetadata:\n  name: a\n  namespace: team-a\nspec:\n  path: infra\n";
    std::fs::write(&good, widget).unwrap();
    std::fs::write(&typo, format!("{widget}  paht: x\n")).unwrap();
    let k = kubeconfig.clone();
    let out = tokio::task::spawn_blocking(move || {
        let (g, t) = (good.to_str().unwrap(), typo.to_str().unwrap());
        vec![
            kubectl(&k, &["apply", "--dry-run=server", "-f", g]),
            kubectl(&k, &["-n", "team-a", "get", "widgets", "-o", "name"]),
            kubectl(&k, &["apply", "-f", t]),
            kubectl(&k, &["apply", "--server-side", "-f", t]),
            kubectl(&k, &["apply", "--validate=false", "-f", t]),
            kubectl(
                &k,
                &[
                    "-n",
                    "team-a",
                    "get",
                    "widget",
                    "a",
                    "-o",
                    "jsonpath={.spec}",
                ],
            ),
        ]
    })
    .await
    .unwrap();
    assert!(out[0].0, "{:?}", out[0]);
    assert!(
        out[0]
            .1
            .contains("widget.test.tfops.io/a created (server dry run)"),
        "{:?}",
        out[0]
    );
    assert_eq!(out[1].1.trim(), "", "a dry run stores nothing");
    for refused in [&out[2], &out[3]] {
        assert!(!refused.0);
        assert!(
            refused
                .2
                .contains("strict decoding error: unknown field \"spec.paht\""),
            "{refused:?}"
        );
    }
    // Without validation the unknown field is pruned, as the real server prunes it.
    assert!(out[4].0, "{:?}", out[4]);
    assert_eq!(out[5].1, r#"{"path":"infra","replicas":1}"#);
}
