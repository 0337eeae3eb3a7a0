//! Installing tfops: the Helm chart (`charts/tfops`) and the Kustomize tree
//! (`config/`) lint, render and validate against Kubernetes' schemas (`kubernetes-validate
//! --strict`) with Helm 4 and Helm 3 alike; Helm and Kustomize render the same objects for the
//! same settings; `config/default` installs with `kubectl apply -k`; and the chart, installed
//! into the test cluster with `helm install` (then upgraded, and at the end uninstalled),
//! runs a Terraform object from creation to Ready to deletion with the manager holding only
//! the chart's ServiceAccount token and the runner only `tf-runner`'s. Negative checks: a
//! namespace's runner cannot read another namespace's Secrets; the controller can neither
//! modify nor delete a state Secret.
//!
//! Helm and kubernetes-validate come from `TFOPS_HELM`, `TFOPS_HELM3` and
//! `TFOPS_KUBERNETES_VALIDATE` (set by `scripts/test`), else from `scripts/install-helm` and
//! `scripts/install-kubernetes-validate`, which install them under `.tools` when missing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::wait::await_condition;
use serde::Deserialize;
use serde_json::{Value, json};
use support::manager::Manager;
use support::operator::{CONFIG, ready_with};
use tfops_kube::Terraform;

/// The namespace of `config/default` and of the chart's install here.
const NAMESPACE: &str = "argocd-terraform-controller-system";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `env`, else what `script args` prints (it installs the tool when missing); once per run.
fn tool(cell: &'static OnceLock<PathBuf>, env: &str, script: &str, args: &[&str]) -> PathBuf {
    cell.get_or_init(|| {
        if let Some(path) = std::env::var_os(env) {
            return PathBuf::from(path);
        }
        let out = Command::new(repo().join("scripts").join(script))
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{script}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
    })
    .clone()
}

fn helm(major: u8) -> PathBuf {
    static HELM4: OnceLock<PathBuf> = OnceLock::new();
    static HELM3: OnceLock<PathBuf> = OnceLock::new();
    match major {
        4 => tool(&HELM4, "TFOPS_HELM", "install-helm", &[]),
        _ => tool(&HELM3, "TFOPS_HELM3", "install-helm", &["--major", "3"]),
    }
}

fn validator() -> PathBuf {
    static CELL: OnceLock<PathBuf> = OnceLock::new();
    tool(
        &CELL,
        "TFOPS_KUBERNETES_VALIDATE",
        "install-kubernetes-validate",
        &[],
    )
}

/// Runs `program args` in the repository; its standard output, or a panic with its errors.
fn run(program: &Path, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{} {args:?}: {}{}",
        program.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The chart rendered by Helm `major` with `values` files and `set` values.
fn helm_template(major: u8, values: &[&str], set: &[&str]) -> String {
    let mut args = vec![
        "template",
        "tfops",
        "charts/tfops",
        "--namespace",
        NAMESPACE,
        "--include-crds",
    ];
    for v in values {
        args.extend(["--values", v]);
    }
    for s in set {
        args.extend(["--set", s]);
    }
    run(&helm(major), &args)
}

fn kustomize(dir: &Path) -> String {
    run(Path::new("kubectl"), &["kustomize", dir.to_str().unwrap()])
}

/// Validates `manifests` strictly against Kubernetes 1.32's schemas.
fn validate(what: &str, manifests: &str) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("manifests.yaml");
    std::fs::write(&file, manifests).unwrap();
    let out = Command::new(validator())
        .args(["-k", "1.32.0", "--strict", file.to_str().unwrap()])
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{what} does not validate: {text}");
    assert!(!text.contains("ERROR"), "{what}: {text}");
    assert!(text.contains("passed"), "{what}: nothing validated: {text}");
}

/// The objects of a multi-document YAML stream, by kind, namespace and name, without the
/// labels only Helm adds.
fn objects(yaml: &str) -> BTreeMap<(String, String, String), Value> {
    let mut all = BTreeMap::new();
    for doc in serde_yaml_ng::Deserializer::from_str(yaml) {
        let mut v = Value::deserialize(doc).unwrap();
        if v.is_null() {
            continue;
        }
        if let Some(labels) = v
            .pointer_mut("/metadata/labels")
            .and_then(Value::as_object_mut)
        {
            for helm_only in [
                "helm.sh/chart",
                "app.kubernetes.io/managed-by",
                "app.kubernetes.io/instance",
                "app.kubernetes.io/version",
            ] {
                labels.remove(helm_only);
            }
            if labels.is_empty() {
                v["metadata"].as_object_mut().unwrap().remove("labels");
            }
        }
        let text = |p: &str| {
            v.pointer(p)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let key = (
            text("/kind"),
            text("/metadata/namespace"),
            text("/metadata/name"),
        );
        assert!(all.insert(key.clone(), v).is_none(), "{key:?} twice");
    }
    all
}

fn ci_values() -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(repo().join("charts/tfops/ci"))
        .unwrap()
        .map(|e| {
            format!(
                "charts/tfops/ci/{}",
                e.unwrap().file_name().to_string_lossy()
            )
        })
        .collect();
    files.sort();
    assert!(files.len() >= 4, "{files:?}");
    files
}

#[test]
fn the_chart_lints_and_renders_valid_manifests_with_helm_4_and_3() {
    for values in ci_values() {
        for major in [4, 3] {
            run(
                &helm(major),
                &["lint", "charts/tfops", "--strict", "--values", &values],
            );
        }
        let rendered = helm_template(4, &[&values], &[]);
        validate(&values, &rendered);
        assert_eq!(
            objects(&rendered),
            objects(&helm_template(3, &[&values], &[])),
            "Helm 3 renders {values} as Helm 4 does"
        );
    }
    // Bad values are refused by values.schema.json with the offending field named.
    let out = Command::new(helm(4))
        .args(["template", "t", "charts/tfops", "--set", "replicaCount=-1"])
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("replicaCount"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_chart_renders_each_option_group_as_documented() {
    let rendered = objects(&helm_template(
        4,
        &[
            "charts/tfops/ci/manager-values.yaml",
            "charts/tfops/ci/runners-values.yaml",
            "charts/tfops/ci/integrations-values.yaml",
        ],
        &[],
    ));
    let get = |kind: &str, ns: &str, name: &str| {
        rendered
            .get(&(kind.to_string(), ns.to_string(), name.to_string()))
            .unwrap_or_else(|| panic!("no {kind} {ns}/{name} in {:?}", rendered.keys()))
    };
    let deployment = get("Deployment", NAMESPACE, "tfops-manager");
    assert_eq!(deployment["spec"]["replicas"], 2);
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        container["image"],
        "registry.example/tfops-manager:0.1.0-rc1"
    );
    assert_eq!(container["imagePullPolicy"], "Always");
    let args: Vec<&str> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    for arg in [
        "--leader-election=true",
        "--watch-namespaces=team-a,team-b",
        "--enable-argocd-credentials",
        "--argocd-namespace=argocd",
        "--concurrent=8",
        "--runner-creation-timeout=5m",
        "--kube-api-qps=100",
    ] {
        assert!(args.contains(&arg), "{arg} in {args:?}");
    }
    // Every flag the chart passes is one the manager knows.
    use clap::Parser;
    let mut line = vec!["tfops-manager", "--runner-pod-image", "r:1"];
    line.extend(args.iter().copied());
    tfops_operator::manager::flags::Flags::try_parse_from(line).unwrap();
    assert_eq!(
        container["env"][0],
        json!({"name": "RUNNER_POD_IMAGE", "value": "registry.example/tfops-runner:0.1.0"})
    );
    for ns in ["team-a", "team-b"] {
        // A plan and an apply identity, each with the runner's role and its own cloud role.
        for (account, role) in [
            ("tf-plan", "terraform-read"),
            ("tf-apply", "terraform-write"),
        ] {
            let sa = get("ServiceAccount", ns, account);
            assert_eq!(
                sa["metadata"]["annotations"]["eks.amazonaws.com/role-arn"],
                format!("arn:aws:iam::111122223333:role/{role}")
            );
            let binding = get("RoleBinding", ns, account);
            assert_eq!(binding["roleRef"]["name"], "tfops-runner");
            assert_eq!(
                binding["subjects"][0],
                json!({"kind": "ServiceAccount", "name": account, "namespace": ns})
            );
        }
        assert!(
            !rendered.contains_key(&(
                "ServiceAccount".to_string(),
                ns.to_string(),
                "tf-runner".to_string()
            )),
            "only the ServiceAccounts asked for"
        );
        let policy = get("NetworkPolicy", ns, "tf-runner");
        assert_eq!(
            policy["spec"]["ingress"][0]["ports"][0],
            json!({"protocol": "TCP", "port": 30000})
        );
        assert_eq!(
            policy["spec"]["egress"][1]["to"][0]["ipBlock"]["cidr"],
            "10.0.0.1/32"
        );
    }
    let namespace = get("Namespace", "", NAMESPACE);
    assert_eq!(
        namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
        "restricted"
    );
    get("Role", "argocd", "tfops-argocd-credentials");
    get("ServiceMonitor", NAMESPACE, "tfops-manager");
}

#[test]
fn the_chart_runs_one_manager_per_shard_with_disjoint_selectors() {
    use clap::Parser;
    let rendered = objects(&helm_template(
        4,
        &["charts/tfops/ci/shards-values.yaml"],
        &[],
    ));
    let mut leases = Vec::new();
    let mut selectors = Vec::new();
    for (name, shard) in [
        ("tfops-manager", None),
        ("tfops-manager-eu", Some("eu")),
        ("tfops-manager-us", Some("us")),
    ] {
        let key = (
            "Deployment".to_string(),
            NAMESPACE.to_string(),
            name.to_string(),
        );
        let deployment = rendered
            .get(&key)
            .unwrap_or_else(|| panic!("no {name} in {:?}", rendered.keys()));
        assert_eq!(deployment["spec"]["replicas"], 2);
        let container = &deployment["spec"]["template"]["spec"]["containers"][0];
        let mut line = vec![
            "tfops-manager".to_string(),
            "--runner-pod-image".into(),
            "r".into(),
        ];
        line.extend(
            container["args"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_str().unwrap().to_string()),
        );
        let flags = tfops_operator::manager::flags::Flags::try_parse_from(line).unwrap();
        assert_eq!(
            flags.shard,
            tfops_kube::controller::shard::Shard::parse(shard.unwrap_or("")).unwrap()
        );
        assert_eq!(flags.concurrent, 8);
        leases.push(flags.lease_name());
        let template_labels = &deployment["spec"]["template"]["metadata"]["labels"];
        assert_eq!(
            template_labels
                .get("infra.argocd.io/shard")
                .and_then(Value::as_str),
            shard
        );
        selectors.push(deployment["spec"]["selector"].clone());
    }
    leases.sort();
    leases.dedup();
    assert_eq!(
        leases.len(),
        3,
        "each shard elects its own leader: {leases:?}"
    );
    assert_eq!(
        selectors[0]["matchExpressions"],
        json!([{"key": "infra.argocd.io/shard", "operator": "DoesNotExist"}]),
        "the default shard's Deployment does not select the others' Pods"
    );
    assert_eq!(selectors[1]["matchLabels"]["infra.argocd.io/shard"], "eu");
}

#[test]
fn helm_and_kustomize_render_the_same_objects() {
    let helm = objects(&helm_template(4, &[], &["namespace.create=true"]));
    let kustomized = objects(&kustomize(&repo().join("config/default")));
    validate("config/default", &kustomize(&repo().join("config/default")));
    assert_eq!(
        helm.keys().collect::<Vec<_>>(),
        kustomized.keys().collect::<Vec<_>>()
    );
    for (key, object) in &helm {
        assert_eq!(object, &kustomized[key], "{key:?}");
    }
    // A namespace for Terraform objects: the chart's runnerNamespaces and config/runner.
    let overlay = tempfile::tempdir().unwrap();
    let root = overlay.path().canonicalize().unwrap();
    std::fs::write(
        root.join("kustomization.yaml"),
        format!(
            "namespace: team-a\nresources:\n  - {}\n",
            support::kustomize_path(&root, &repo().join("config/runner"))
        ),
    )
    .unwrap();
    let runner = objects(&kustomize(overlay.path()));
    validate("config/runner", &kustomize(overlay.path()));
    let with_runner = objects(&helm_template(
        4,
        &[],
        &["namespace.create=true", "runnerNamespaces={team-a}"],
    ));
    let added: BTreeMap<_, _> = with_runner
        .into_iter()
        .filter(|(k, _)| !helm.contains_key(k))
        .collect();
    assert_eq!(added, runner);
    // The samples render (they are checked against the CRD by the API server in the install
    // test: kubernetes-validate knows no custom kinds).
    let samples = objects(&kustomize(&repo().join("config/samples")));
    for name in ["hello", "network"] {
        assert!(
            samples.contains_key(&(
                "Terraform".to_string(),
                "default".to_string(),
                name.to_string()
            )),
            "sample {name}"
        );
    }
}

#[test]
fn the_webhook_receiver_is_exposed_alike_by_the_chart_and_the_kustomize_component() {
    let overlay = tempfile::tempdir().unwrap();
    let root = overlay.path().canonicalize().unwrap();
    std::fs::write(
        root.join("kustomization.yaml"),
        format!(
            "namespace: {NAMESPACE}\nresources:\n  - {}\ncomponents:\n  - {}\n",
            support::kustomize_path(&root, &repo().join("config/default")),
            support::kustomize_path(&root, &repo().join("config/webhooks")),
        ),
    )
    .unwrap();
    let kustomized = kustomize(overlay.path());
    validate("config/default with config/webhooks", &kustomized);
    let helm = objects(&helm_template(
        4,
        &[],
        &["namespace.create=true", "webhooks.enabled=true"],
    ));
    let kustomized = objects(&kustomized);
    assert_eq!(
        helm.keys().collect::<Vec<_>>(),
        kustomized.keys().collect::<Vec<_>>()
    );
    for (key, object) in &helm {
        assert_eq!(object, &kustomized[key], "{key:?}");
    }
    let service = &helm[&(
        "Service".to_string(),
        NAMESPACE.to_string(),
        "tfops-webhooks".to_string(),
    )];
    assert_eq!(
        service["spec"]["selector"]["infra.argocd.io/webhooks"],
        "true"
    );
    let deployment = &helm[&(
        "Deployment".to_string(),
        NAMESPACE.to_string(),
        "tfops-manager".to_string(),
    )];
    let pod = &deployment["spec"]["template"];
    assert_eq!(
        pod["metadata"]["labels"]["infra.argocd.io/webhooks"],
        "true"
    );
    let container = &pod["spec"]["containers"][0];
    let args: Vec<&str> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    use clap::Parser;
    let mut line = vec!["tfops-manager", "--runner-pod-image", "r:1"];
    line.extend(args.iter().copied());
    let flags = tfops_operator::manager::flags::Flags::try_parse_from(line).unwrap();
    assert_eq!(flags.webhook_addr.unwrap().port(), 9090);
    assert_eq!(
        flags.webhook_secret_file.unwrap(),
        PathBuf::from("/etc/tfops/webhook/secret")
    );
    assert_eq!(
        pod["spec"]["volumes"][1]["secret"],
        json!({"secretName": "tfops-webhook", "items": [{"key": "secret", "path": "secret"}]})
    );
    // The chart's Ingress routes only the receiver's path to it.
    let values = "charts/tfops/ci/webhooks-values.yaml";
    let rendered = objects(&helm_template(4, &[values], &[]));
    let ingress = &rendered[&(
        "Ingress".to_string(),
        NAMESPACE.to_string(),
        "tfops-webhooks".to_string(),
    )];
    let rule = &ingress["spec"]["rules"][0];
    assert_eq!(rule["host"], "tfops.example.com");
    assert_eq!(
        rule["http"]["paths"],
        json!([{"path": "/hooks/", "pathType": "Prefix", "backend": {"service": {"name": "tfops-webhooks", "port": {"name": "webhooks"}}}}])
    );
    // Only the default shard receives them.
    let sharded = objects(&helm_template(4, &[values], &["shards={blue}"]));
    let blue = &sharded[&(
        "Deployment".to_string(),
        NAMESPACE.to_string(),
        "tfops-manager-blue".to_string(),
    )];
    let blue_args = blue["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
    assert!(!blue_args.contains("--webhook-addr"), "{blue_args}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn installed_from_the_chart_it_runs_an_object_under_the_rbac_it_grants() {
    let (cluster, _pods) = support::cluster_with_node().await;
    let admin = support::client(&cluster).await;
    let (_dir, kubeconfig) = support::kubeconfig_file(&cluster);
    for ns in ["team-a", "team-b"] {
        support::namespace(&admin, ns).await;
    }
    // `helm install` into the test cluster, then an upgrade (the namespace exists first:
    // it is where Helm keeps its release).
    support::namespace(&admin, NAMESPACE).await;
    let kube_flag = format!("--kubeconfig={}", kubeconfig.display());
    let runner_repository = format!("runnerImage.repository={}", support::RUNNER_IMAGE);
    let mut install = vec![
        "install",
        "tfops",
        "charts/tfops",
        "--namespace",
        NAMESPACE,
        &kube_flag,
        "--set",
        "runnerNamespaces={team-a,team-b}",
        "--set",
        &runner_repository,
        "--set",
        "runnerImage.tag=dev",
    ];
    let out = run(&helm(4), &install);
    assert!(out.contains("STATUS: deployed"), "{out}");
    install[0] = "upgrade";
    install.extend(["--set", "replicaCount=2"]);
    let out = run(&helm(4), &install);
    assert!(out.contains("REVISION: 2"), "{out}");
    support::tfops_crds_established(&kubeconfig);
    let (ok, out, err) = support::kubectl(
        &kubeconfig,
        &[
            "get",
            "deployment",
            "tfops-manager",
            "-n",
            NAMESPACE,
            "-o",
            "json",
        ],
    );
    assert!(ok, "{err}");
    let deployment: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(deployment["spec"]["replicas"], 2, "the upgrade took");
    // The samples are valid against the installed CRD (server-side, strict).
    for sample in ["hello.yaml", "separate-apply-identity.yaml"] {
        let (ok, out, err) = support::kubectl(
            &kubeconfig,
            &[
                "apply",
                "--dry-run=server",
                "--validate=strict",
                "-n",
                "team-a",
                "-f",
                repo().join("config/samples").join(sample).to_str().unwrap(),
            ],
        );
        assert!(ok, "the sample {sample}: {out}{err}");
    }

    // The manager as the chart's ServiceAccount, with the installed Deployment's arguments and
    // environment (no controller runs Deployments here; a Pod's namespace would come from the
    // downward API).
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let mut flags: Vec<String> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    let image = container["env"][0]["value"].as_str().unwrap().to_string();
    assert_eq!(image, format!("{}:dev", support::RUNNER_IMAGE));
    flags.extend(["--namespace".into(), NAMESPACE.into()]);
    flags.extend(["--runner-pod-image".into(), image]);
    let token = cluster
        .service_account_token(NAMESPACE, "tfops-controller")
        .await
        .unwrap();
    let (_controller_dir, controller_kubeconfig) =
        support::operator::kubeconfig_dir_for(&cluster, &token);
    let _manager = Manager::start(&controller_kubeconfig, "tfops-manager-0", &flags);

    let git = support::git::GitDaemon::start();
    git.commit("infra", &[("main.tf", CONFIG)]);
    let object: Terraform = support::from_json(json!({
        "apiVersion": "infra.argocd.io/v1alpha1", "kind": "Terraform",
        "metadata": {"name": "app", "namespace": "team-a"},
        "spec": {
            "interval": "1h", "retryInterval": "2s", "approvePlan": "auto",
            "sourceRef": {"kind": "GitRepository", "url": git.url("infra")},
            "writeOutputsToSecret": {"name": "app-outputs"},
        },
    }));
    let terraforms: Api<Terraform> = Api::namespaced(admin.clone(), "team-a");
    terraforms
        .create(&PostParams::default(), &object)
        .await
        .unwrap();
    let ready = |t: Option<&Terraform>| t.is_some_and(|t| ready_with(t, "TerraformAppliedSucceed"));
    tokio::time::timeout(
        Duration::from_secs(180),
        await_condition(terraforms.clone(), "app", ready),
    )
    .await
    .expect("Ready under the chart's RBAC")
    .unwrap();
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), "team-a");
    assert!(
        secrets
            .get_opt("tfstate-default-app")
            .await
            .unwrap()
            .is_some()
    );
    assert!(secrets.get_opt("app-outputs").await.unwrap().is_some());

    // A runner's identity stops at its namespace.
    let mut other = Secret::default();
    other.metadata.name = Some("team-b-creds".into());
    Api::<Secret>::namespaced(admin.clone(), "team-b")
        .create(&PostParams::default(), &other)
        .await
        .unwrap();
    let runner_a = support::client_for(
        &cluster,
        &cluster
            .service_account_token("team-a", "tf-runner")
            .await
            .unwrap(),
    )
    .await;
    let theirs: Api<Secret> = Api::namespaced(runner_a.clone(), "team-b");
    assert_eq!(
        support::status(theirs.get("team-b-creds").await.unwrap_err()).code,
        403
    );
    assert_eq!(
        support::status(theirs.list(&Default::default()).await.unwrap_err()).code,
        403
    );
    // The controller reads but can neither change nor delete a state Secret.
    let controller = support::client_for(&cluster, &token).await;
    let state: Api<Secret> = Api::namespaced(controller, "team-a");
    let current = state.get("tfstate-default-app").await.unwrap();
    let patch = json!({"metadata": {"labels": {"tampered": "yes"}}});
    let e = state
        .patch(
            "tfstate-default-app",
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .unwrap_err();
    assert_eq!(support::status(e).code, 403);
    let e = state
        .replace("tfstate-default-app", &PostParams::default(), &current)
        .await
        .unwrap_err();
    assert_eq!(support::status(e).code, 403);
    let e = state
        .delete("tfstate-default-app", &Default::default())
        .await
        .unwrap_err();
    assert_eq!(support::status(e).code, 403);

    // Deleted: the finalizer runs under the same RBAC and the object goes.
    terraforms.delete("app", &Default::default()).await.unwrap();
    tokio::time::timeout(
        Duration::from_secs(120),
        await_condition(terraforms, "app", |t: Option<&Terraform>| t.is_none()),
    )
    .await
    .expect("deleted")
    .unwrap();
    // What the object owned goes with it: garbage collection, asynchronous in a real cluster.
    // kube-controller-manager's garbage collector learns of a CRD installed after it started
    // when it next reads discovery (every 30 s), so this can take a minute after an install.
    let outputs_gone = async {
        while secrets.get_opt("app-outputs").await.unwrap().is_some() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(120), outputs_gone)
        .await
        .expect("the outputs Secret went with its object");
    assert!(
        secrets
            .get_opt("tfstate-default-app")
            .await
            .unwrap()
            .is_some(),
        "the state is kept unless asked otherwise"
    );

    // Uninstalled: what the chart made goes, the CRDs stay (Helm never deletes them).
    let out = run(
        &helm(4),
        &["uninstall", "tfops", "--namespace", NAMESPACE, &kube_flag],
    );
    assert!(out.contains("uninstalled"), "{out}");
    let (ok, _, _) = support::kubectl(&kubeconfig, &["get", "clusterrole", "tfops-controller"]);
    assert!(!ok, "the controller's ClusterRole is gone");
    let (ok, _, err) = support::kubectl(&kubeconfig, &["get", "crd", "terraforms.infra.argocd.io"]);
    assert!(ok, "the CRD stays: {err}");
}

/// `config/default` and a namespace overlay of `config/runner` install with kubectl.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kustomize_tree_installs_with_kubectl() {
    let cluster = tfops_testcluster::TestCluster::start().await.unwrap();
    let (_dir, kubeconfig) = support::kubeconfig_file(&cluster);
    let config = repo().join("config");
    let (ok, out, err) = support::kubectl(
        &kubeconfig,
        &["apply", "-k", config.join("default").to_str().unwrap()],
    );
    assert!(ok, "{out}{err}");
    assert!(
        out.contains("deployment.apps/tfops-manager created"),
        "{out}"
    );
    support::tfops_crds_established(&kubeconfig);
    let (ok, _, err) = support::kubectl(&kubeconfig, &["create", "namespace", "team-a"]);
    assert!(ok, "{err}");
    let (ok, out, err) = support::kubectl(
        &kubeconfig,
        &[
            "apply",
            "-n",
            "team-a",
            "-f",
            config.join("runner/service-account.yaml").to_str().unwrap(),
            "-f",
            config.join("runner/role-binding.yaml").to_str().unwrap(),
        ],
    );
    assert!(ok, "{out}{err}");
    let (ok, out, _) = support::kubectl(
        &kubeconfig,
        &[
            "auth",
            "can-i",
            "create",
            "secrets",
            "-n",
            "team-a",
            "--as=system:serviceaccount:team-a:tf-runner",
        ],
    );
    assert!(ok && out.trim() == "yes", "{out}");
    let (_, out, _) = support::kubectl(
        &kubeconfig,
        &[
            "auth",
            "can-i",
            "delete",
            "secrets",
            "-n",
            "team-a",
            "--as=system:serviceaccount:argocd-terraform-controller-system:tfops-controller",
        ],
    );
    assert_eq!(out.trim(), "no", "the controller deletes no Secret");
}

/// The metrics `docs/metrics.md` lists: name → (type, labels).
fn documented_metrics() -> BTreeMap<String, (String, Vec<String>)> {
    let text = std::fs::read_to_string(repo().join("docs/metrics.md")).unwrap();
    let mut metrics = BTreeMap::new();
    for row in text.lines().filter(|l| l.starts_with("| `tfops_")) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let name = cells[1].trim_matches('`').to_string();
        let labels = cells[3]
            .split(',')
            .map(|l| l.trim().trim_matches('`').to_string())
            .filter(|l| !l.is_empty())
            .collect();
        metrics.insert(name, (cells[2].to_string(), labels));
    }
    metrics
}

/// The metrics the manager serves, by the name a query selects (counters end in `_total`),
/// with their type: after a reconcile that planned and an API request, so that every family
/// has a series (a labelled family without one is not served).
fn served_metrics() -> BTreeMap<String, String> {
    use tfops_core::reconcile::{Outcome, Record, RunReport, StepKind};
    use tfops_kube::controller::ReconcileObserver;
    let metrics = tfops_operator::manager::metrics::Metrics::new();
    metrics.api_request("GET", 200);
    metrics.webhook_delivery("push", "accepted");
    // A family shows once it has a series: one of each of the pull-request loop's.
    let pulls = metrics.pull_metrics();
    pulls
        .forge_requests
        .get_or_create(&tfops_operator::forge::ForgeRequest {
            method: "GET".into(),
            code: 200,
        })
        .inc();
    pulls
        .plans
        .get_or_create(&tfops_operator::pulls::PlanResult { result: "planned" })
        .inc();
    let report: RunReport = RunReport {
        records: vec![Record {
            step: StepKind::ResolveSource,
            at: jiff::Timestamp::UNIX_EPOCH,
            result: Ok(Outcome::Fetched {
                sha256: String::new(),
            }),
        }],
        requeue_after: None,
        status: serde_json::from_value(json!({"conditions": [{
            "type": "Ready", "status": "False", "reason": "SourceFetchFailed",
            "lastTransitionTime": "2026-01-01T00:00:00Z"}]}))
        .unwrap(),
        output_tail: String::new(),
    };
    let key = tfops_core::api::ObjectKey::new("team-a", "app");
    metrics.reconciled(&key, std::time::Duration::ZERO, Ok(&report));
    let text = metrics.encode();
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| {
            let (name, kind) = l.split_once(' ').unwrap();
            let name = match kind {
                "counter" => format!("{name}_total"),
                _ => name.to_string(),
            };
            (name, kind.to_string())
        })
        .collect()
}

/// Every selector of a PromQL expression: the metric name, the label names it matches on, and
/// those the aggregations around it group by.
#[derive(Default)]
struct Selectors(Vec<(String, Vec<String>)>, Vec<String>);

impl promql_parser::util::ExprVisitor for Selectors {
    type Error = String;
    fn pre_visit(&mut self, expr: &promql_parser::parser::Expr) -> Result<bool, String> {
        use promql_parser::parser::Expr;
        let vs = match expr {
            Expr::VectorSelector(vs) => vs,
            Expr::MatrixSelector(ms) => &ms.vs,
            Expr::Aggregate(a) => {
                if let Some(m) = &a.modifier {
                    self.1.extend(m.labels().labels.iter().cloned());
                }
                return Ok(true);
            }
            _ => return Ok(true),
        };
        let name = vs.name.clone().ok_or("a selector without a metric name")?;
        let labels = vs
            .matchers
            .matchers
            .iter()
            .map(|m| m.name.clone())
            .collect();
        self.0.push((name, labels));
        Ok(true)
    }
}

#[test]
fn the_prometheus_rule_alerts_only_on_documented_metrics_the_manager_serves() {
    let documented = documented_metrics();
    // Every metric served is documented with its type, and only those.
    let types: BTreeMap<String, String> = documented
        .iter()
        .map(|(n, (t, _))| (n.clone(), t.clone()))
        .collect();
    assert_eq!(types, served_metrics(), "docs/metrics.md and /metrics");
    // Off by default.
    let default = objects(&helm_template(4, &[], &[]));
    assert!(!default.keys().any(|k| k.0 == "PrometheusRule"));
    let rendered = objects(&helm_template(
        4,
        &["charts/tfops/ci/integrations-values.yaml"],
        &["prometheusRule.drift.enabled=false"],
    ));
    let rule = &rendered[&(
        "PrometheusRule".to_string(),
        NAMESPACE.to_string(),
        "tfops".to_string(),
    )];
    assert_eq!(rule["metadata"]["labels"]["release"], "prometheus");
    let monitor = &rendered[&(
        "ServiceMonitor".to_string(),
        NAMESPACE.to_string(),
        "tfops-manager".to_string(),
    )];
    assert_eq!(monitor["spec"]["endpoints"][0]["honorLabels"], true);
    let rules = rule["spec"]["groups"][0]["rules"].as_array().unwrap();
    let alerts: Vec<&str> = rules.iter().map(|r| r["alert"].as_str().unwrap()).collect();
    assert_eq!(
        alerts,
        [
            "TfopsObjectNotReady",
            "TfopsPlanAwaitingApproval",
            "TfopsRunsFailing",
            "TfopsRunnerQueueWaitHigh",
            "TfopsRunNearTimeout",
            "TfopsManagerAbsent",
        ],
        "the CI values turn the drift and Pending Pod alerts off and add one"
    );
    let awaiting = &rules[1];
    assert!(
        awaiting["expr"].as_str().unwrap().ends_with("> 7200"),
        "{awaiting}"
    );
    assert_eq!(awaiting["labels"]["severity"], "page");
    assert!(
        awaiting["annotations"]["summary"]
            .as_str()
            .unwrap()
            .contains("{{ $labels.namespace }}/{{ $labels.name }}"),
        "{awaiting}"
    );
    // Every expression of the defaults is PromQL selecting documented metrics by their labels.
    let all = objects(&helm_template(4, &[], &["prometheusRule.enabled=true"]));
    let rules = all[&(
        "PrometheusRule".to_string(),
        NAMESPACE.to_string(),
        "tfops".to_string(),
    )]["spec"]["groups"][0]["rules"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(rules.len(), 7);
    for rule in rules.iter().chain(&rules_of_ci()) {
        let expr = rule["expr"].as_str().unwrap();
        let parsed = promql_parser::parser::parse(expr)
            .unwrap_or_else(|e| panic!("{} does not parse: {e}: {expr}", rule["alert"]));
        let mut found = Selectors::default();
        promql_parser::util::walk_expr(&mut found, &parsed).unwrap();
        assert!(!found.0.is_empty(), "{expr}");
        for (name, matched) in &found.0 {
            let (_, labels) = documented
                .get(name)
                .unwrap_or_else(|| panic!("{name} in {expr} is not a metric tfops serves"));
            for label in matched.iter().chain(&found.1) {
                assert!(
                    labels.contains(label),
                    "{name} has no label {label}: {expr}"
                );
            }
        }
        if let Some(d) = rule.get("for") {
            promql_parser::util::parse_duration(d.as_str().unwrap()).unwrap();
        }
    }
}

/// The rules the CI values render (with one of the values' own).
fn rules_of_ci() -> Vec<Value> {
    let rendered = objects(&helm_template(
        4,
        &["charts/tfops/ci/integrations-values.yaml"],
        &[],
    ));
    rendered[&(
        "PrometheusRule".to_string(),
        NAMESPACE.to_string(),
        "tfops".to_string(),
    )]["spec"]["groups"][0]["rules"]
        .as_array()
        .unwrap()
        .clone()
}
