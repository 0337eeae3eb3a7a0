//! `loopback_cluster`: whether the loopback API server holds what the scale benchmark will put
//! in it — 10,000 `Terraform` objects and a Secret for each — and what reading them costs a
//! kube-rs client: a full list, a paged list (500 per page, as reflectors page), and a watch
//! from scratch to its 10,000th `ADDED` event. The baseline in the same run is decoding the
//! same list body from memory (what the bytes cost a client without HTTP, TLS or the server).
//! The one-off creation time of the 20,000 objects is printed too.

// A benchmark aborts when its setup fails: there is nothing to measure then.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams, WatchParams,
};
use serde_json::json;
use tests::cluster::LoopbackCluster;

const OBJECTS: usize = 10_000;

fn crd() -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "terraforms.infra.argocd.io"},
        "spec": {
            "group": "infra.argocd.io", "scope": "Namespaced",
            "names": {"plural": "terraforms", "singular": "terraform", "kind": "Terraform", "shortNames": ["tf"]},
            "versions": [{"name": "v1alpha1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                }}}}],
        },
    }))
    .unwrap()
}

/// A `Terraform` object of about the size a real one has (a Git source, vars, an approval
/// policy).
fn terraform(i: usize) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "infra.argocd.io/v1alpha1", "kind": "Terraform",
        "metadata": {"name": format!("tf-{i:05}"), "labels": {"team": format!("t{}", i % 20)}},
        "spec": {
            "sourceRef": {"kind": "Git", "url": "https://git.example.com/infra/modules.git", "ref": {"branch": "main"}},
            "path": format!("envs/prod/stack-{i}"),
            "interval": "10m",
            "approvePlan": "auto",
            "vars": [{"name": "region", "value": "eu-west-1"}, {"name": "size", "value": i}],
            "writeOutputsToSecret": {"name": format!("tf-{i:05}-outputs")},
        },
    }))
    .unwrap()
}

fn secret(i: usize) -> Secret {
    serde_json::from_value(json!({
        "metadata": {"name": format!("tfstate-default-tf-{i:05}"), "labels": {"tfstate": "true"}},
        "data": {"tfstate": base64_of(&"x".repeat(768))},
    }))
    .unwrap()
}

fn base64_of(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(s)
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (cluster, api, client) = runtime.block_on(async {
        let cluster = LoopbackCluster::start().await.unwrap();
        let kubeconfig = kube::config::Kubeconfig::from_yaml(&cluster.kubeconfig()).unwrap();
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap();
        let client = kube::Client::try_from(config).unwrap();
        let mut ns = Namespace::default();
        ns.metadata.name = Some("scale".into());
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
        Api::<CustomResourceDefinition>::all(client.clone())
            .create(&PostParams::default(), &crd())
            .await
            .unwrap();
        let gvk = GroupVersionKind::gvk("infra.argocd.io", "v1alpha1", "Terraform");
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), "scale", &ApiResource::from_gvk(&gvk));
        let secrets: Api<Secret> = Api::namespaced(client.clone(), "scale");
        let started = Instant::now();
        // Eight writers at a time, as a controller's workers would write.
        futures::stream::iter(0..OBJECTS)
            .for_each_concurrent(8, |i| {
                let (api, secrets) = (api.clone(), secrets.clone());
                async move {
                    api.create(&PostParams::default(), &terraform(i)).await.unwrap();
                    secrets.create(&PostParams::default(), &secret(i)).await.unwrap();
                }
            })
            .await;
        eprintln!(
            "loopback_cluster: created {OBJECTS} Terraform objects and {OBJECTS} Secrets in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        (cluster, api, client)
    });
    // The list as JSON again: the same bytes, near enough, as the server's answer.
    let body = runtime.block_on(async {
        serde_json::to_string(&api.list(&ListParams::default()).await.unwrap()).unwrap()
    });
    drop(client);
    eprintln!("loopback_cluster: a full list is {} bytes", body.len());

    let mut group = c.benchmark_group("loopback_cluster");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(20));
    group.bench_function("baseline: decode the list body", |b| {
        b.iter(|| {
            let list: kube::core::ObjectList<DynamicObject> = serde_json::from_str(&body).unwrap();
            assert_eq!(list.items.len(), OBJECTS);
        })
    });
    group.bench_function("list 10,000", |b| {
        b.iter(|| {
            runtime.block_on(async {
                let list = api.list(&ListParams::default()).await.unwrap();
                assert_eq!(list.items.len(), OBJECTS);
            })
        })
    });
    group.bench_function("list 10,000 in pages of 500", |b| {
        b.iter(|| {
            runtime.block_on(async {
                let mut seen = 0;
                let mut token: Option<String> = None;
                loop {
                    let mut lp = ListParams::default().limit(500);
                    if let Some(t) = &token {
                        lp = lp.continue_token(t);
                    }
                    let page = api.list(&lp).await.unwrap();
                    seen += page.items.len();
                    token = page.metadata.continue_.filter(|t| !t.is_empty());
                    if token.is_none() {
                        break;
                    }
                }
                assert_eq!(seen, OBJECTS);
            })
        })
    });
    group.bench_function("watch from scratch to 10,000 ADDED", |b| {
        b.iter(|| {
            runtime.block_on(async {
                let stream = api
                    .watch(&WatchParams::default().timeout(60), "0")
                    .await
                    .unwrap();
                let added = stream.take(OBJECTS).count().await;
                assert_eq!(added, OBJECTS);
            })
        })
    });
    group.finish();
    drop(cluster);
}

criterion_group!(benches, bench);
criterion_main!(benches);
