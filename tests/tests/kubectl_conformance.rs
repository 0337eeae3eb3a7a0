//! The loopback API server judged by kubectl (client-go), as a process: discovery and reads.
//! (kubectl writes built-in kinds as protobuf, which the server does not read yet: a write is
//! refused with 415 `UnsupportedMediaType`, as the real server refuses a format it lacks.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use tests::cluster::LoopbackCluster;

fn kubectl(kubeconfig: &std::path::Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .expect("kubectl (part of this machine image)");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_discovers_the_resources_and_reads_objects() {
    let cluster = LoopbackCluster::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, cluster.kubeconfig()).unwrap();
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::from_yaml(&cluster.kubeconfig()).unwrap(),
        &Default::default(),
    )
    .await
    .unwrap();
    let client = kube::Client::try_from(config).unwrap();
    let mut ns = k8s_openapi::api::core::v1::Namespace::default();
    ns.metadata.name = Some("team-a".into());
    Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
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
    assert!(!write.0);
    assert!(write.2.contains("UnsupportedMediaType"), "{}", write.2);
    assert!(patch.0, "{}{}", patch.1, patch.2);
    let patched = secrets.get("db").await.unwrap();
    assert_eq!(patched.metadata.labels.unwrap()["tier"], "prod");
}
