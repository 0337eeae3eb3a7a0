//! The Kubernetes ports other than plans and runners, each on its own against the test
//! cluster: the outputs Secret and ConfigMap, state administration and the lock holder, inputs from Secrets
//! and ConfigMaps, status by server-side apply, the finalizer, and events.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::events::v1::Event as KubeEvent;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;
use tfops_core::api::{
    FINALIZER, ObjectKey, TerraformObject, TerraformStatus, WriteOutputsToConfigMap,
    WriteOutputsToSecret,
};
use tfops_core::conditions::Reason;
use tfops_core::ports::{
    ConfigMapData, Event, EventSink, EventType, InputsPort, ObjectWriter, OutputValue, OutputsSink,
    PortError, StateAdmin,
};
use tfops_kube::meta::Owner;
use tfops_kube::{
    KubeEventSink, KubeInputs, KubeObjectWriter, KubeOutputsSink, KubeStateAdmin, Terraform,
};
use tfops_testcluster::TestCluster;

struct World {
    _cluster: TestCluster,
    client: kube::Client,
    key: ObjectKey,
    object: Terraform,
}

async fn world(spec: serde_json::Value) -> World {
    let cluster = TestCluster::start().await.unwrap();
    let client = support::client(&cluster).await;
    support::terraform_crd_served(&client).await;
    support::namespace(&client, "team").await;
    let object = support::terraform(&client, "team", "web", spec).await;
    World {
        _cluster: cluster,
        client,
        key: ObjectKey::new("team", "web"),
        object,
    }
}

fn output(value: serde_json::Value, sensitive: bool) -> OutputValue {
    OutputValue { value, sensitive }
}

fn secret_text(s: &Secret) -> BTreeMap<String, String> {
    s.data
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, String::from_utf8(v.0).unwrap()))
        .collect()
}

#[tokio::test]
async fn outputs_are_written_renamed_labelled_owned_and_never_over_someone_elses_secret() {
    let w = world(json!({})).await;
    let sink = KubeOutputsSink::new(w.client.clone(), Owner::Lookup(w.client.clone()));
    let target: WriteOutputsToSecret = support::from_json(json!({
        "name": "web-outputs",
        "labels": {"team": "a"},
        "annotations": {"note": "made by tfops"},
        "outputs": ["endpoint:url", "port", "password"],
    }));
    let outputs = BTreeMap::from([
        ("endpoint".to_string(), output(json!("https://web"), false)),
        ("port".to_string(), output(json!(8443), false)),
        ("password".to_string(), output(json!("hunter2"), true)),
        ("unselected".to_string(), output(json!("x"), false)),
    ]);
    sink.write(&w.key, &target, &outputs).await.unwrap();
    let secrets: Api<Secret> = Api::namespaced(w.client.clone(), "team");
    let written = secrets.get("web-outputs").await.unwrap();
    assert_eq!(
        secret_text(&written),
        BTreeMap::from([
            ("url".to_string(), "https://web".to_string()),
            ("port".to_string(), "8443".to_string()),
            ("password".to_string(), "hunter2".to_string()),
        ])
    );
    let labels = written.metadata.labels.clone().unwrap();
    assert_eq!(labels["team"], "a");
    assert_eq!(labels["app.kubernetes.io/managed-by"], "tfops");
    assert_eq!(
        written.metadata.annotations.unwrap()["note"],
        "made by tfops"
    );
    let owner = &written.metadata.owner_references.unwrap()[0];
    assert_eq!(owner.uid, w.object.metadata.uid.clone().unwrap());

    // An output that went away goes from the Secret too.
    let fewer = BTreeMap::from([("port".to_string(), output(json!(9000), false))]);
    sink.write(&w.key, &target, &fewer).await.unwrap();
    let written = secrets.get("web-outputs").await.unwrap();
    assert_eq!(
        secret_text(&written),
        BTreeMap::from([("port".to_string(), "9000".to_string())])
    );

    // Someone else's Secret is neither overwritten nor deleted.
    let theirs: Secret = support::from_json(json!({
        "metadata": {"name": "db-password"}, "stringData": {"password": "theirs"}}));
    secrets
        .create(&PostParams::default(), &theirs)
        .await
        .unwrap();
    let target_theirs: WriteOutputsToSecret = support::from_json(json!({"name": "db-password"}));
    match sink.write(&w.key, &target_theirs, &outputs).await {
        Err(PortError::Invalid(m)) => assert!(m.contains("db-password"), "{m}"),
        other => panic!("must refuse to take over a Secret: {other:?}"),
    }
    sink.delete(&w.key, "db-password").await.unwrap();
    assert_eq!(
        secret_text(&secrets.get("db-password").await.unwrap())["password"],
        "theirs"
    );

    sink.delete(&w.key, "web-outputs").await.unwrap();
    sink.delete(&w.key, "web-outputs").await.unwrap();
    assert!(secrets.get_opt("web-outputs").await.unwrap().is_none());
}

#[tokio::test]
async fn the_outputs_config_map_holds_text_only_ours_and_goes_even_from_the_controller() {
    let w = world(json!({})).await;
    let sink = KubeOutputsSink::new(w.client.clone(), Owner::Lookup(w.client.clone()))
        .leaving_deletes_to_garbage_collection();
    let target: WriteOutputsToConfigMap = support::from_json(json!({
        "name": "web-values",
        "labels": {"team": "a"},
        "annotations": {"note": "for helm"},
    }));
    let outputs = BTreeMap::from([
        ("endpoint".to_string(), output(json!("https://web"), false)),
        ("ports".to_string(), output(json!([80, 443]), false)),
        ("password".to_string(), output(json!("hunter2"), true)),
    ]);
    let data = ConfigMapData::select(&target, &outputs).unwrap();
    sink.write_config_map(&w.key, &target, &data).await.unwrap();
    let maps: Api<ConfigMap> = Api::namespaced(w.client.clone(), "team");
    let written = maps.get("web-values").await.unwrap();
    assert_eq!(
        written.data.clone().unwrap(),
        BTreeMap::from([
            ("endpoint".to_string(), "https://web".to_string()),
            ("ports".to_string(), "[80,443]".to_string()),
        ])
    );
    let labels = written.metadata.labels.clone().unwrap();
    assert_eq!(labels["team"], "a");
    assert_eq!(labels["infra.argocd.io/outputs"], "true");
    assert_eq!(written.metadata.annotations.unwrap()["note"], "for helm");
    let owner = &written.metadata.owner_references.unwrap()[0];
    assert_eq!(owner.uid, w.object.metadata.uid.clone().unwrap());

    // Someone else's ConfigMap is neither overwritten nor deleted.
    let theirs: ConfigMap = support::from_json(json!({
        "metadata": {"name": "app-config"}, "data": {"mode": "theirs"}}));
    maps.create(&PostParams::default(), &theirs).await.unwrap();
    let target_theirs: WriteOutputsToConfigMap = support::from_json(json!({"name": "app-config"}));
    match sink.write_config_map(&w.key, &target_theirs, &data).await {
        Err(PortError::Invalid(m)) => {
            assert!(
                m.contains("ConfigMap team/app-config")
                    && m.contains("writeOutputsToConfigMap.name"),
                "{m}"
            )
        }
        other => panic!("must refuse to take over a ConfigMap: {other:?}"),
    }
    sink.delete_config_map(&w.key, "app-config").await.unwrap();
    assert_eq!(
        maps.get("app-config").await.unwrap().data.unwrap()["mode"],
        "theirs"
    );

    // The controller's sink deletes no Secret, but does remove the ConfigMap it may delete.
    sink.delete_config_map(&w.key, "web-values").await.unwrap();
    sink.delete_config_map(&w.key, "web-values").await.unwrap();
    assert!(maps.get_opt("web-values").await.unwrap().is_none());
}

fn state_secret(name: &str, suffix: &str, bytes: usize) -> Secret {
    support::from_json(json!({
        "metadata": {
            "name": name,
            "labels": {"app.kubernetes.io/managed-by": "terraform", "tfstate": "true",
                       "tfstateSecretSuffix": suffix, "tfstateWorkspace": "default"},
            "annotations": {"encoding": "gzip"},
        },
        "data": {"tfstate": ByteString(vec![7; bytes])},
    }))
}

#[tokio::test]
async fn state_is_inspected_with_its_lock_holder_and_deleted_with_every_part() {
    let w = world(json!({})).await;
    let secrets: Api<Secret> = Api::namespaced(w.client.clone(), "team");
    let pp = PostParams::default();
    for (name, suffix, size) in [
        ("tfstate-default-web", "web", 1000),
        ("tfstate-default-web-part-1", "web", 500),
        ("tfstate-default-webapp", "webapp", 10),
    ] {
        secrets
            .create(&pp, &state_secret(name, suffix, size))
            .await
            .unwrap();
    }
    let leases: Api<Lease> = Api::namespaced(w.client.clone(), "team");
    let lock_info = json!({"ID": "5b1c-lock", "Operation": "OperationTypeApply",
        "Who": "runner@web-tf-runner", "Created": "2026-12-01T12:00:00Z"});
    leases
        .create(
            &pp,
            &support::from_json(json!({
                "metadata": {"name": "lock-tfstate-default-web",
                             "annotations": {"app.terraform.io/lock-info": lock_info.to_string()}},
                "spec": {"holderIdentity": "5b1c-lock"},
            })),
        )
        .await
        .unwrap();
    let admin = KubeStateAdmin::new(w.client.clone());
    let info = admin.inspect(&w.key, "default", "web").await.unwrap();
    assert!(info.exists);
    assert_eq!((info.secrets, info.stored_bytes), (2, 1500));
    let lock = info.lock.unwrap();
    assert_eq!(lock.id, "5b1c-lock");
    assert_eq!(lock.who, "runner@web-tf-runner");
    assert_eq!(
        lock.to_string(),
        "runner@web-tf-runner (OperationTypeApply) since 2026-12-01T12:00:00Z, lock id 5b1c-lock"
    );

    admin.delete_state(&w.key, "default", "web").await.unwrap();
    admin.delete_state(&w.key, "default", "web").await.unwrap();
    let left: Vec<String> = secrets
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|s| s.metadata.name)
        .filter(|n| n.starts_with("tfstate-"))
        .collect();
    assert_eq!(
        left,
        ["tfstate-default-webapp"],
        "only this object's state goes"
    );
    assert!(
        leases
            .get_opt("lock-tfstate-default-web")
            .await
            .unwrap()
            .is_none()
    );
    let info = admin.inspect(&w.key, "default", "web").await.unwrap();
    assert_eq!(info, Default::default());
}

async fn terraform_object(w: &World) -> TerraformObject {
    let api: Api<Terraform> = Api::namespaced(w.client.clone(), "team");
    api.get("web").await.unwrap().to_object()
}

#[tokio::test]
async fn inputs_are_read_from_secrets_and_config_maps_honouring_optional() {
    let w = world(json!({
        "varsFrom": [
            {"kind": "ConfigMap", "name": "settings"},
            {"kind": "Secret", "name": "creds", "varKeys": ["token:api_token"]},
            {"kind": "Secret", "name": "absent", "optional": true},
        ],
        "vars": [
            {"name": "region", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "region"}}},
            {"name": "maybe", "valueFrom": {"secretKeyRef": {"name": "absent", "key": "x", "optional": true}}},
        ],
        "fileMappings": [{"secretKeyRef": {"name": "creds", "key": "keystore"}, "location": "workspace", "path": "ks.p12"}],
        "cliConfigSecretRef": {"name": "creds", "key": "tfrc"},
    }))
    .await;
    let pp = PostParams::default();
    Api::<ConfigMap>::namespaced(w.client.clone(), "team")
        .create(
            &pp,
            &support::from_json(json!({"metadata": {"name": "settings"},
                "data": {"region": "eu-west-1", "replicas": "3"}})),
        )
        .await
        .unwrap();
    Api::<Secret>::namespaced(w.client.clone(), "team")
        .create(
            &pp,
            &support::from_json(json!({"metadata": {"name": "creds"},
                "stringData": {"token": "s3cret", "tfrc": "credentials \"x\" {}"},
                "data": {"keystore": ByteString(vec![0, 159, 146, 150])}})),
        )
        .await
        .unwrap();
    let object = terraform_object(&w).await;
    let inputs = KubeInputs::new(w.client.clone());
    let resolved = inputs.resolve(&object).await.unwrap();
    assert_eq!(resolved.vars["region"], json!("eu-west-1"));
    assert_eq!(resolved.vars["replicas"], json!(3));
    assert_eq!(resolved.vars["api_token"], json!("s3cret"));
    assert!(!resolved.vars.contains_key("maybe"));
    assert_eq!(resolved.files[0].content, vec![0, 159, 146, 150]);
    assert_eq!(
        resolved.cli_config.as_deref(),
        Some(&b"credentials \"x\" {}"[..])
    );
    assert!(
        !format!("{resolved:?}").contains("s3cret"),
        "values never in Debug"
    );

    // A required Secret that is missing is named in the error.
    Api::<Secret>::namespaced(w.client.clone(), "team")
        .delete("creds", &DeleteParams::default())
        .await
        .unwrap();
    match inputs.resolve(&object).await {
        Err(PortError::NotFound(m)) => assert!(m.contains("creds"), "{m}"),
        other => panic!("a missing Secret is NotFound: {other:?}"),
    }
}

#[tokio::test]
async fn status_is_server_side_applied_by_tfops_and_the_finalizer_keeps_others() {
    let w = world(json!({})).await;
    let writer = KubeObjectWriter::new(w.client.clone());
    let api: Api<Terraform> = Api::namespaced(w.client.clone(), "team");
    let status: TerraformStatus = support::from_json(json!({
        "observedGeneration": 1,
        "conditions": [{"type": "Ready", "status": "True", "reason": "TerraformAppliedSucceed",
                        "message": "applied", "lastTransitionTime": "2026-12-01T10:00:00Z",
                        "observedGeneration": 1}],
        "lastAppliedRevision": "main@sha1:abc",
    }));
    writer.write_status(&w.key, &status).await.unwrap();
    let stored = api.get("web").await.unwrap();
    assert_eq!(stored.status.as_ref(), Some(&status));
    assert_eq!(
        stored.metadata.generation,
        Some(1),
        "status writes leave generation alone"
    );
    let managers: Vec<(String, String)> = stored
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .map(|m| (m.manager.unwrap(), m.subresource.unwrap_or_default()))
        .collect();
    assert!(
        managers.contains(&("tfops".to_string(), "status".to_string())),
        "{managers:?}"
    );

    // A field dropped from the status goes: tfops owns all of it.
    let mut later = status.clone();
    later.last_applied_revision = None;
    writer.write_status(&w.key, &later).await.unwrap();
    assert_eq!(api.get("web").await.unwrap().status, Some(later));

    // The finalizer: added once, next to someone else's; removed alone.
    let other = json!({"metadata": {"finalizers": ["example.com/keep"]}});
    api.patch("web", &Default::default(), &kube::api::Patch::Merge(&other))
        .await
        .unwrap();
    writer.add_finalizer(&w.key).await.unwrap();
    writer.add_finalizer(&w.key).await.unwrap();
    let finalizers = api.get("web").await.unwrap().metadata.finalizers.unwrap();
    assert_eq!(finalizers, ["example.com/keep", FINALIZER]);
    writer.remove_finalizer(&w.key).await.unwrap();
    writer.remove_finalizer(&w.key).await.unwrap();
    let finalizers = api.get("web").await.unwrap().metadata.finalizers.unwrap();
    assert_eq!(finalizers, ["example.com/keep"]);

    // Removing ours from an object being deleted releases it once the other goes.
    writer.add_finalizer(&w.key).await.unwrap();
    api.delete("web", &DeleteParams::default()).await.unwrap();
    // Still there from before: nothing to add, and no error.
    writer.add_finalizer(&w.key).await.unwrap();
    writer.remove_finalizer(&w.key).await.unwrap();
    let left = api.get("web").await.unwrap();
    assert_eq!(left.metadata.finalizers.unwrap(), ["example.com/keep"]);
    api.patch(
        "web",
        &Default::default(),
        &kube::api::Patch::Merge(&json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert!(api.get_opt("web").await.unwrap().is_none());
    writer.remove_finalizer(&w.key).await.unwrap();
}

#[tokio::test]
async fn events_name_the_object_and_repeats_become_a_series() {
    let w = world(json!({})).await;
    let sink = KubeEventSink::new(
        w.client.clone(),
        kube::runtime::events::Reporter {
            controller: "tfops".into(),
            instance: Some("tfops-0".into()),
        },
    );
    let event = |reason, message: &str| Event {
        event_type: EventType::Warning,
        reason,
        message: message.into(),
    };
    sink.emit(&w.key, event(Reason::TFExecPlanFailed, "plan failed"))
        .await;
    sink.emit(&w.key, event(Reason::TFExecPlanFailed, "plan failed"))
        .await;
    sink.emit(&w.key, event(Reason::TFExecApplyFailed, &"é".repeat(2000)))
        .await;
    let events: Vec<KubeEvent> = Api::<KubeEvent>::namespaced(w.client.clone(), "team")
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert_eq!(events.len(), 2, "a repeat is a series, not a second event");
    let plan = events
        .iter()
        .find(|e| e.reason.as_deref() == Some("TFExecPlanFailed"))
        .unwrap();
    assert_eq!(plan.series.as_ref().map(|s| s.count), Some(2));
    assert_eq!(plan.type_.as_deref(), Some("Warning"));
    assert_eq!(plan.reporting_controller.as_deref(), Some("tfops"));
    let regarding = plan.regarding.as_ref().unwrap();
    assert_eq!(regarding.kind.as_deref(), Some("Terraform"));
    assert_eq!(regarding.uid, w.object.metadata.uid);
    let apply = events
        .iter()
        .find(|e| e.reason.as_deref() == Some("TFExecApplyFailed"))
        .unwrap();
    assert!(apply.note.as_ref().unwrap().len() <= 1024);
}

#[tokio::test]
async fn source_credentials_come_from_the_named_secret_or_argo_cds_matching_repository() {
    let w = world(json!({})).await;
    support::namespace(&w.client, "argocd").await;
    let pp = PostParams::default();
    let argocd: Api<Secret> = Api::namespaced(w.client.clone(), "argocd");
    for (name, kind, url, user) in [
        (
            "repo-exact",
            "repository",
            "https://git.example.com/team/infra.git",
            "exact",
        ),
        (
            "creds-team",
            "repo-creds",
            "https://git.example.com/team",
            "team",
        ),
        ("creds-all", "repo-creds", "https://git.example.com", "all"),
    ] {
        argocd
            .create(
                &pp,
                &support::from_json(json!({
                    "metadata": {"name": name, "labels": {"argocd.argoproj.io/secret-type": kind}},
                    "stringData": {"url": url, "username": user, "password": "p"},
                })),
            )
            .await
            .unwrap();
    }
    // A Secret without the label is not Argo CD's.
    argocd
        .create(
            &pp,
            &support::from_json(json!({"metadata": {"name": "other"},
                "stringData": {"url": "https://git.example.com/team/other", "username": "nope"}})),
        )
        .await
        .unwrap();
    let user = |d: Option<BTreeMap<String, Vec<u8>>>| {
        d.map(|d| String::from_utf8(d["username"].clone()).unwrap())
    };
    let enabled = tfops_kube::KubeCredentials::new(w.client.clone(), Some("argocd".into()));
    assert_eq!(
        user(
            enabled
                .argocd("https://git.example.com/team/infra")
                .await
                .unwrap()
        )
        .as_deref(),
        Some("exact"),
        "a repository Secret matches its URL (without .git)"
    );
    assert_eq!(
        user(
            enabled
                .argocd("https://git.example.com/team/other")
                .await
                .unwrap()
        )
        .as_deref(),
        Some("team"),
        "else the longest repo-creds prefix"
    );
    assert_eq!(
        user(enabled.argocd("https://git.example.com/x/y").await.unwrap()).as_deref(),
        Some("all")
    );
    assert_eq!(
        enabled.argocd("https://elsewhere.example/x").await.unwrap(),
        None
    );
    let disabled = tfops_kube::KubeCredentials::new(w.client.clone(), None);
    assert_eq!(
        disabled
            .argocd("https://git.example.com/team/infra")
            .await
            .unwrap(),
        None,
        "only when enabled"
    );
    // The source's own Secret, in the object's namespace.
    Api::<Secret>::namespaced(w.client.clone(), "team")
        .create(
            &pp,
            &support::from_json(json!({"metadata": {"name": "git-creds"},
                "stringData": {"username": "mine", "password": "p"}})),
        )
        .await
        .unwrap();
    assert_eq!(
        user(enabled.secret("team", "git-creds").await.unwrap()).as_deref(),
        Some("mine")
    );
    assert_eq!(enabled.secret("team", "absent").await.unwrap(), None);
}
