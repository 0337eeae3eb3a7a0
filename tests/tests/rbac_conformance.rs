//! The loopback API server's authentication and RBAC, judged by kube-rs and kubectl: a
//! ServiceAccount's token is refused what no binding grants (403 worded as the real server),
//! gets what a Role grants in its namespace only, by verb and resource name; a group bound
//! by a ClusterRoleBinding gets it everywhere; `kubectl auth can-i` reads the same verdicts;
//! the token dies with its ServiceAccount.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;
use tests::cluster::LoopbackCluster;

mod support;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_account_tokens_get_what_rbac_grants_and_nothing_else() {
    let cluster = LoopbackCluster::start().await.unwrap();
    let admin = support::client(&cluster).await;
    support::namespace(&admin, "team-a").await;
    support::namespace(&admin, "team-b").await;
    let pp = PostParams::default();
    Api::<ServiceAccount>::namespaced(admin.clone(), "team-a")
        .create(
            &pp,
            &support::from_json(json!({"metadata": {"name": "tf-runner"}})),
        )
        .await
        .unwrap();
    for ns in ["team-a", "team-b"] {
        Api::<Secret>::namespaced(admin.clone(), ns)
            .create(
                &pp,
                &support::from_json(json!({"metadata": {"name": "db"}})),
            )
            .await
            .unwrap();
    }
    Api::<Secret>::namespaced(admin.clone(), "team-a")
        .create(
            &pp,
            &support::from_json(json!({"metadata": {"name": "other"}})),
        )
        .await
        .unwrap();
    let token = cluster
        .service_account_token("team-a", "tf-runner")
        .unwrap();
    let runner = support::client_for(&cluster, &token).await;
    let secrets_a: Api<Secret> = Api::namespaced(runner.clone(), "team-a");

    let e = support::status(secrets_a.get("db").await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        e.message,
        "secrets \"db\" is forbidden: User \"system:serviceaccount:team-a:tf-runner\" cannot get resource \"secrets\" in API group \"\" in the namespace \"team-a\""
    );

    Api::<Role>::namespaced(admin.clone(), "team-a")
        .create(
            &pp,
            &support::from_json(json!({
                "metadata": {"name": "runner"},
                "rules": [
                    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"], "resourceNames": ["db"]},
                    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list", "create"]},
                ],
            })),
        )
        .await
        .unwrap();
    Api::<RoleBinding>::namespaced(admin.clone(), "team-a")
        .create(
            &pp,
            &support::from_json(json!({
                "metadata": {"name": "runner"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "runner"},
                "subjects": [{"kind": "ServiceAccount", "name": "tf-runner", "namespace": "team-a"}],
            })),
        )
        .await
        .unwrap();
    secrets_a.get("db").await.unwrap();
    assert_eq!(
        support::status(secrets_a.get("other").await.unwrap_err()).code,
        403
    );
    let e = support::status(secrets_a.list(&ListParams::default()).await.unwrap_err());
    assert_eq!(e.code, 403);
    assert!(
        e.message.starts_with("secrets is forbidden: User"),
        "{}",
        e.message
    );
    let cms: Api<ConfigMap> = Api::namespaced(runner.clone(), "team-a");
    cms.create(
        &pp,
        &support::from_json(json!({"metadata": {"name": "plan"}})),
    )
    .await
    .unwrap();
    assert_eq!(
        support::status(
            cms.delete("plan", &DeleteParams::default())
                .await
                .unwrap_err()
        )
        .code,
        403
    );
    // The Role stops at its namespace; cluster-scoped reads need a ClusterRole.
    let b: Api<Secret> = Api::namespaced(runner.clone(), "team-b");
    assert_eq!(support::status(b.get("db").await.unwrap_err()).code, 403);
    let e = support::status(
        Api::<Namespace>::all(runner.clone())
            .list(&ListParams::default())
            .await
            .unwrap_err(),
    );
    assert!(e.message.ends_with("at the cluster scope"), "{}", e.message);

    // A group bound cluster-wide: every ServiceAccount of team-a reads every namespace.
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(
            &pp,
            &support::from_json(json!({
                "metadata": {"name": "team-a-admin"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                "subjects": [{"kind": "Group", "name": "system:serviceaccounts:team-a", "apiGroup": "rbac.authorization.k8s.io"}],
            })),
        )
        .await
        .unwrap();
    b.get("db").await.unwrap();

    // kubectl reads the same verdicts.
    let (_dir, kubeconfig) = support::kubeconfig_file(&cluster);
    std::fs::write(&kubeconfig, cluster.kubeconfig_for(&token)).unwrap();
    let k = kubeconfig.clone();
    let (yes, no) = tokio::task::spawn_blocking(move || {
        (
            support::kubectl(&k, &["auth", "can-i", "get", "secrets", "-n", "team-b"]),
            support::kubectl(
                &k,
                &[
                    "auth", "can-i", "get", "secrets", "-n", "team-b", "--as", "nobody",
                ],
            ),
        )
    })
    .await
    .unwrap();
    assert!(yes.0 && yes.1.trim() == "yes", "{yes:?}");
    assert!(!no.0, "impersonation is not granted: {no:?}");
    Api::<ClusterRoleBinding>::all(admin.clone())
        .delete("team-a-admin", &DeleteParams::default())
        .await
        .unwrap();
    let k = kubeconfig.clone();
    let (denied, granted) = tokio::task::spawn_blocking(move || {
        (
            support::kubectl(&k, &["auth", "can-i", "delete", "secrets", "-n", "team-a"]),
            support::kubectl(
                &k,
                &["auth", "can-i", "create", "configmaps", "-n", "team-a"],
            ),
        )
    })
    .await
    .unwrap();
    assert!(!denied.0 && denied.1.trim() == "no", "{denied:?}");
    assert!(granted.0 && granted.1.trim() == "yes", "{granted:?}");

    // The token dies with its ServiceAccount.
    Api::<ServiceAccount>::namespaced(admin.clone(), "team-a")
        .delete("tf-runner", &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(
        support::status(secrets_a.get("db").await.unwrap_err()).code,
        401
    );
}
