//! The loopback API server judged by kube-rs on custom resources: a CRD serves its kind once
//! created (and established, as `await_condition` checks); objects are pruned, defaulted and
//! validated by its schema with the real 422 field errors; `generation` follows the spec, the
//! status subresource takes only status; server-side apply merges conditions by `type`,
//! detects conflicts between managers and honours `force`; a `kube::runtime::Controller`
//! converges.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use serde_json::json;
use tests::cluster::LoopbackCluster;

mod support;

fn widgets(client: &kube::Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("test.tfops.io", "v1", "Widget");
    Api::namespaced_with(client.clone(), "team-a", &ApiResource::from_gvk(&gvk))
}

fn widget(name: &str, spec: serde_json::Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "test.tfops.io/v1", "kind": "Widget",
        "metadata": {"name": name}, "spec": spec,
    }))
    .unwrap()
}

async fn setup() -> (LoopbackCluster, kube::Client) {
    let cluster = LoopbackCluster::start().await.unwrap();
    let client = support::client(&cluster).await;
    support::namespace(&client, "team-a").await;
    support::widgets_served(&client).await;
    (cluster, client)
}

#[tokio::test]
async fn a_crd_serves_its_kind_with_pruning_defaults_and_validation() {
    let (_cluster, client) = setup().await;
    let api = widgets(&client);
    let created = api
        .create(
            &PostParams::default(),
            &widget("a", json!({"path": "infra", "typo": true})),
        )
        .await
        .unwrap();
    assert_eq!(
        created.data["spec"],
        json!({"path": "infra", "replicas": 1})
    );
    assert_eq!(created.metadata.generation, Some(1));

    let refused = api
        .create(
            &PostParams::default(),
            &widget("b", json!({"replicas": 0, "mode": "sometimes"})),
        )
        .await
        .unwrap_err();
    let e = support::status(refused);
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    let causes: Vec<String> = e
        .details
        .as_ref()
        .unwrap()
        .causes
        .iter()
        .map(|c| c.field.clone())
        .collect();
    assert_eq!(causes, ["spec.path", "spec.mode", "spec.replicas"]);
    assert_eq!(
        e.message,
        "Widget.test.tfops.io \"b\" is invalid: [spec.path: Required value, spec.mode: Unsupported value: \"sometimes\": supported values: \"auto\", \"manual\", spec.replicas: Invalid value: 0: spec.replicas in body should be greater than or equal to 1]"
    );

    // The CRD's kind is discoverable (kubectl and kube-rs discovery read this).
    let discovery = kube::discovery::Discovery::new(client.clone())
        .filter(&["test.tfops.io"])
        .run()
        .await
        .unwrap();
    let (resource, caps) = discovery
        .resolve_gvk(&GroupVersionKind::gvk("test.tfops.io", "v1", "Widget"))
        .unwrap();
    assert_eq!(resource.plural, "widgets");
    assert!(caps.subresources.iter().any(|(s, _)| s.plural == "status"));
}

#[tokio::test]
async fn generation_follows_the_spec_and_status_has_its_own_endpoint() {
    let (_cluster, client) = setup().await;
    let api = widgets(&client);
    let mut w = widget("a", json!({"path": "infra"}));
    w.data["status"] = json!({"observedGeneration": 7});
    let created = api.create(&PostParams::default(), &w).await.unwrap();
    assert!(
        created.data.get("status").is_none(),
        "create cannot set status"
    );

    // The main endpoint ignores status; the spec change bumps generation.
    let patched = api
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"path": "other"}, "status": {"observedGeneration": 1}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.metadata.generation, Some(2));
    assert!(patched.data.get("status").is_none());
    // A metadata change does not.
    let labelled = api
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
        )
        .await
        .unwrap();
    assert_eq!(labelled.metadata.generation, Some(2));

    // /status takes only status, and does not move generation.
    let status = api
        .patch_status(
            "a",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"path": "ignored"}, "status": {"observedGeneration": 2}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(status.data["status"]["observedGeneration"], 2);
    assert_eq!(status.data["spec"]["path"], "other");
    assert_eq!(status.metadata.generation, Some(2));

    // A custom resource allows no unconditional update.
    let mut stale = api.get("a").await.unwrap();
    stale.metadata.resource_version = None;
    let e = support::status(
        api.replace("a", &PostParams::default(), &stale)
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 422);
    assert!(
        e.message.contains("metadata.resourceVersion"),
        "{}",
        e.message
    );
}

#[tokio::test]
async fn server_side_apply_of_status_merges_conditions_and_detects_conflicts() {
    let (_cluster, client) = setup().await;
    let api = widgets(&client);
    api.create(
        &PostParams::default(),
        &widget("a", json!({"path": "infra"})),
    )
    .await
    .unwrap();
    let apply = |manager: &str, force: bool| {
        let mut p = PatchParams::apply(manager);
        p.force = force;
        p
    };
    let status = |conditions: serde_json::Value| {
        Patch::Apply(json!({
            "apiVersion": "test.tfops.io/v1", "kind": "Widget",
            "status": {"conditions": conditions},
        }))
    };
    api.patch_status(
        "a",
        &apply("controller", true),
        &status(json!([{"type": "Ready", "status": "False", "reason": "Planning"}])),
    )
    .await
    .unwrap();
    // Another manager adds its own condition: merged by type, not replacing the list.
    let both = api
        .patch_status(
            "a",
            &apply("auditor", false),
            &status(json!([{"type": "Audited", "status": "True"}])),
        )
        .await
        .unwrap();
    let types: Vec<&str> = both.data["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["Ready", "Audited"]);
    // Changing a field the controller owns conflicts, naming manager and field...
    let e = support::status(
        api.patch_status(
            "a",
            &apply("auditor", false),
            &status(json!([{"type": "Ready", "status": "True"}])),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
    assert!(
        e.message.contains("conflict with \"controller\"")
            && e.message
                .contains(".status.conditions[type=\"Ready\"].status"),
        "{}",
        e.message
    );
    // ...and the controller's next apply, which no longer names Planning, drops its reason.
    let next = api
        .patch_status(
            "a",
            &apply("controller", true),
            &status(json!([{"type": "Ready", "status": "True"}])),
        )
        .await
        .unwrap();
    let ready = &next.data["status"]["conditions"][0];
    assert_eq!(ready["status"], "True");
    assert!(ready.get("reason").is_none(), "{ready}");
    let managers: Vec<(String, String)> = next
        .metadata
        .managed_fields
        .unwrap()
        .iter()
        .map(|m| {
            (
                m.manager.clone().unwrap(),
                m.subresource.clone().unwrap_or_default(),
            )
        })
        .collect();
    assert!(
        managers.contains(&("controller".into(), "status".into())),
        "{managers:?}"
    );
    assert!(managers.contains(&("auditor".into(), "status".into())));
}

#[tokio::test]
async fn a_kube_runtime_controller_converges_on_the_loopback_server() {
    let (_cluster, client) = setup().await;
    let api = widgets(&client);
    for name in ["a", "b"] {
        api.create(&PostParams::default(), &widget(name, json!({"path": name})))
            .await
            .unwrap();
    }
    let gvk = GroupVersionKind::gvk("test.tfops.io", "v1", "Widget");
    let ar = ApiResource::from_gvk(&gvk);
    // Reconcile: record the observed generation in status by server-side apply.
    let reconcile = |obj: Arc<DynamicObject>, api: Arc<Api<DynamicObject>>| async move {
        let name = obj.metadata.name.clone().unwrap();
        api.patch_status(
            &name,
            &PatchParams::apply("widget-controller").force(),
            &Patch::Apply(json!({
                "apiVersion": "test.tfops.io/v1", "kind": "Widget",
                "status": {"observedGeneration": obj.metadata.generation},
            })),
        )
        .await?;
        Ok::<_, kube::Error>(kube::runtime::controller::Action::await_change())
    };
    let controller = kube::runtime::Controller::new_with(
        api.clone(),
        kube::runtime::watcher::Config::default(),
        ar,
    )
    .run(
        reconcile,
        |_, _, _| kube::runtime::controller::Action::requeue(Duration::from_secs(1)),
        Arc::new(api.clone()),
    )
    .for_each(|_| async {});
    let task = tokio::spawn(controller);
    api.patch(
        "b",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"path": "changed"}})),
    )
    .await
    .unwrap();
    let converged = async {
        loop {
            let a = api.get("a").await.unwrap();
            let b = api.get("b").await.unwrap();
            if a.data["status"]["observedGeneration"] == 1
                && b.data["status"]["observedGeneration"] == 2
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(20), converged)
        .await
        .expect("the controller never converged");
    task.abort();
}
