//! The control plane as users meet it: the real server's version, ServiceAccount tokens from
//! the TokenRequest API authenticated and authorized by the real server (a 403 from RBAC), the
//! audit log naming who did what, and nothing left behind after the drop.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Instant;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
use kube::api::{Api, PostParams};
use serde_json::json;
use tfops_testcluster::{KUBERNETES_VERSION, TestCluster};

fn from_json<K: serde::de::DeserializeOwned>(v: serde_json::Value) -> K {
    serde_json::from_value(v).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_server_authenticates_authorizes_and_audits_and_stops_when_dropped() {
    let started = Instant::now();
    let cluster = TestCluster::start().await.unwrap();
    eprintln!(
        "control plane ready in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let admin = cluster.client().await.unwrap();
    let version = admin.apiserver_version().await.unwrap();
    assert_eq!(version.git_version, format!("v{KUBERNETES_VERSION}"));

    let pp = PostParams::default();
    Api::<Namespace>::all(admin.clone())
        .create(&pp, &from_json(json!({"metadata": {"name": "team-a"}})))
        .await
        .unwrap();
    Api::<ServiceAccount>::namespaced(admin.clone(), "team-a")
        .create(&pp, &from_json(json!({"metadata": {"name": "reader"}})))
        .await
        .unwrap();
    let token = cluster
        .service_account_token("team-a", "reader")
        .await
        .unwrap();
    let reader = cluster.client_for(&token).await.unwrap();
    let denied = Api::<ConfigMap>::namespaced(reader, "team-a")
        .create(&pp, &from_json(json!({"metadata": {"name": "x"}})))
        .await
        .unwrap_err();
    let kube::Error::Api(status) = denied else {
        panic!("not an API error: {denied:?}")
    };
    assert_eq!(status.code, 403, "{status:?}");
    assert!(
        status
            .message
            .contains("system:serviceaccount:team-a:reader"),
        "{}",
        status.message
    );

    // A missing ServiceAccount has no token.
    assert!(
        cluster
            .service_account_token("team-a", "nobody")
            .await
            .is_err()
    );

    let audit = cluster.audit();
    let refused = audit
        .iter()
        .find(|r| r.user == "system:serviceaccount:team-a:reader" && r.resource == "configmaps")
        .unwrap_or_else(|| panic!("no audit event of the refused create in {audit:#?}"));
    assert_eq!((refused.verb.as_str(), refused.code), ("create", 403));
    assert!(
        audit.iter().any(|r| r.user == "tfops-admin"
            && r.resource == "serviceaccounts"
            && r.subresource == "token"),
        "the TokenRequest is audited as the admin's"
    );

    let (pids, dir) = (cluster.pids(), cluster.dir().to_path_buf());
    assert_eq!(
        pids.len(),
        3,
        "etcd, kube-apiserver, kube-controller-manager"
    );
    drop(cluster);
    for pid in pids {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "process {pid} outlived the cluster"
        );
    }
    assert!(!dir.exists(), "{} outlived the cluster", dir.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_manager_runs_the_service_account_and_namespace_controllers() {
    let cluster = TestCluster::start().await.unwrap();
    let admin = cluster.client().await.unwrap();
    let pp = PostParams::default();
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    namespaces
        .create(&pp, &from_json(json!({"metadata": {"name": "gone-soon"}})))
        .await
        .unwrap();
    // The ServiceAccount controller gives each namespace its `default` account, and the root
    // CA publisher its `kube-root-ca.crt`.
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), "gone-soon");
    let cas: Api<ConfigMap> = Api::namespaced(admin.clone(), "gone-soon");
    let deadline = Instant::now() + std::time::Duration::from_secs(60);
    while accounts.get_opt("default").await.unwrap().is_none()
        || cas.get_opt("kube-root-ca.crt").await.unwrap().is_none()
    {
        assert!(
            Instant::now() < deadline,
            "no default ServiceAccount or root CA"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let ca = cas.get("kube-root-ca.crt").await.unwrap();
    assert_eq!(
        ca.data.unwrap()["ca.crt"].trim(),
        cluster.ca_pem.trim(),
        "Pods are given the cluster's CA"
    );
    // The namespace controller empties and removes a deleted namespace.
    namespaces
        .delete("gone-soon", &Default::default())
        .await
        .unwrap();
    while namespaces.get_opt("gone-soon").await.unwrap().is_some() {
        assert!(Instant::now() < deadline, "the namespace was never removed");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}
