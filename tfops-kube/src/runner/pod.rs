//! The runner Pod, built from `spec.runner` over the hardened defaults. Pure: the
//! same object and settings always give the same Pod.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};
use tfops_core::api::{Binary, PodTemplateSpec, RunnerRole, RunnerSpec, TerraformObject};
use tfops_core::naming;

use crate::meta::{LABEL_OBJECT, MANAGED_BY, owner_reference};

/// The gRPC port runners serve on by default (`--runner-grpc-port`).
pub const GRPC_PORT: u16 = 30000;
/// Where the TLS Secret is mounted in the runner.
pub const TLS_DIR: &str = "/run/tfops/tls";
/// The runner container's name.
pub const CONTAINER: &str = "tf-runner";
/// The version of the TLS Secret the Pod was started with (its certificate's digest): a Pod
/// kept between runs is replaced when the Secret changed.
pub const ANNOTATION_TLS_VERSION: &str = "infra.argocd.io/tls-version";
/// The label with the object's namespace (`infra.argocd.io/terraform`).
pub const LABEL_TERRAFORM: &str = "infra.argocd.io/terraform";

/// What the controller decides about every runner Pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodSettings {
    /// The default image (`RUNNER_POD_IMAGE`), used when `spec.runner.image` is empty.
    pub image: String,
    /// The controller's `HTTP_PROXY`/`HTTPS_PROXY`/`NO_PROXY` (and lowercase forms), forwarded
    /// so that runners behind the same egress proxy work unconfigured.
    pub proxy_env: BTreeMap<String, String>,
    /// The port runners serve gRPC on (`--runner-grpc-port`, default [`GRPC_PORT`]).
    pub grpc_port: u16,
}

impl PodSettings {
    /// Settings with `image`, forwarding the proxy variables of this process's environment.
    pub fn from_env(image: &str) -> Self {
        let names = [
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "NO_PROXY",
            "http_proxy",
            "https_proxy",
            "no_proxy",
        ];
        Self {
            image: image.to_string(),
            proxy_env: names
                .iter()
                .filter_map(|n| std::env::var(n).ok().map(|v| (n.to_string(), v)))
                .collect(),
            grpc_port: GRPC_PORT,
        }
    }
}

/// The hardened container security context (docs/security.md).
pub fn hardened_security_context() -> Value {
    json!({
        "runAsUser": 65532,
        "runAsGroup": 65532,
        "runAsNonRoot": true,
        "readOnlyRootFilesystem": true,
        "allowPrivilegeEscalation": false,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    })
}

/// `tf-runner-<first 10 of the revision's hash>` for `app.kubernetes.io/instance`, from the
/// revision last attempted (`unknown` before the first).
fn instance(object: &TerraformObject) -> String {
    let sha = object
        .status
        .last_attempted_revision
        .as_deref()
        .and_then(|r| r.rsplit_once(':'))
        .map(|(_, hex)| {
            hex.chars()
                .take(naming::PLAN_ID_SHA_LEN)
                .collect::<String>()
        })
        .filter(|h| !h.is_empty() && h.chars().all(|c| c.is_ascii_alphanumeric()))
        .unwrap_or_else(|| "unknown".into());
    format!("tf-runner-{sha}")
}

fn values(list: &[tfops_core::api::KubeValue]) -> Vec<Value> {
    list.iter().map(|v| v.0.clone()).collect()
}

/// The label saying which runner a Pod is (`plan` or `apply`, see [`RunnerRole`]).
pub const LABEL_ROLE: &str = "infra.argocd.io/runner-role";

/// The runner Pod of `object` for `role` (the apply runner's is `spec.runner` with
/// `spec.runner.apply` merged over it, under its own name), started with the TLS Secret of
/// version `tls_version`.
///
/// # Errors
/// When the merged Pod is not a valid Pod (a `podTemplate` value of the wrong shape).
pub fn runner_pod(
    object: &TerraformObject,
    role: RunnerRole,
    settings: &PodSettings,
    tls_version: &str,
) -> Result<Pod, serde_json::Error> {
    let runner = &object.spec.runner.for_role(role);
    let role = if object.spec.runner.splits_apply() || role == RunnerRole::PullRequest {
        role
    } else {
        RunnerRole::Plan
    };
    let template = &runner.pod_template;
    let t = &template.spec;
    let meta = &object.metadata;
    let image = if runner.image.is_empty() {
        settings.image.clone()
    } else {
        runner.image.clone()
    };
    let labels = labels(object, &template.metadata.labels, role);
    let pod_name = object.runner_pod_name(role);
    let host = naming::runner_host(&meta.namespace, &pod_name);
    let mut annotations = template.metadata.annotations.clone();
    annotations.insert(ANNOTATION_TLS_VERSION.into(), tls_version.into());

    let mut mounts = vec![
        json!({"name": "tls", "mountPath": TLS_DIR, "readOnly": true}),
        json!({"name": "tmp", "mountPath": "/tmp"}),
        json!({"name": "home", "mountPath": "/home/runner"}),
    ];
    mounts.extend(values(&t.volume_mounts));
    let mut volumes = vec![
        json!({"name": "tls", "secret": {"secretName": naming::RUNNER_TLS_SECRET, "defaultMode": 0o400}}),
        json!({"name": "tmp", "emptyDir": {}}),
        json!({"name": "home", "emptyDir": {}}),
    ];
    volumes.extend(values(&t.volumes));
    let grace = runner.termination_grace_period_seconds.max(0);
    let container = container(runner, settings, image, &host, mounts, grace);
    let mut spec = json!({
        // The TLS Secret's files are 0400: a kubelet makes them readable by the runner (UID
        // and GID 65532) only through the volume's group, which `fsGroup` sets.
        "securityContext": {"fsGroup": 65532},
        "hostname": host,
        "serviceAccountName": runner.service_account_name,
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": grace,
        "containers": [container],
        "volumes": volumes,
        "enableServiceLinks": false,
    });
    if role == RunnerRole::PullRequest {
        // It runs code nobody merged: no Kubernetes identity at all. The controller hands it
        // the object's state (`PodSession::handing_state`), and it stores nothing.
        spec["automountServiceAccountToken"] = json!(false);
    }
    optional_fields(&mut spec, t);
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": object.runner_pod_name(role),
            "namespace": meta.namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [owner_reference(&meta.name, &meta.uid)],
        },
        "spec": spec,
    }))
}

/// The Pod's labels: the template's, then tfops' own.
fn labels(
    object: &TerraformObject,
    template: &BTreeMap<String, String>,
    role: RunnerRole,
) -> BTreeMap<String, String> {
    let meta = &object.metadata;
    let mut labels = template.clone();
    labels.extend([
        (
            "app.kubernetes.io/name".to_string(),
            "tf-runner".to_string(),
        ),
        ("app.kubernetes.io/instance".to_string(), instance(object)),
        (LABEL_TERRAFORM.to_string(), meta.namespace.clone()),
        (MANAGED_BY.to_string(), "tfops".to_string()),
        (LABEL_ROLE.to_string(), role.as_str().to_string()),
        (
            LABEL_OBJECT.to_string(),
            naming::shorten(&meta.name, naming::MAX_LABEL),
        ),
    ]);
    labels
}

/// The runner's environment: who and where it is, the manager's proxy settings, then the
/// template's.
fn environment(settings: &PodSettings, t: &PodTemplateSpec, host: &str) -> Vec<Value> {
    let mut env = vec![
        json!({"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}),
        json!({"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}),
        // One JSON object per line, as the manager's logs in a Pod.
        json!({"name": "TFOPS_LOG_FORMAT", "value": "json"}),
        // The host name it has (`spec.hostname`), by which it knows a lock of its own host.
        json!({"name": "TFOPS_RUNNER_HOST", "value": host}),
    ];
    env.extend(
        settings
            .proxy_env
            .iter()
            .map(|(k, v)| json!({"name": k, "value": v})),
    );
    env.extend(
        t.env
            .iter()
            .map(|e| serde_json::to_value(e).unwrap_or(Value::Null)),
    );
    env
}

/// The runner container: its arguments, ports, environment, mounts and the hardened security
/// context (unless the template gives one).
fn container(
    runner: &RunnerSpec,
    settings: &PodSettings,
    image: String,
    host: &str,
    mounts: Vec<Value>,
    grace: i64,
) -> Value {
    let t = &runner.pod_template.spec;
    let env = environment(settings, t, host);
    let mut args = vec![
        "--grpc-port".to_string(),
        settings.grpc_port.to_string(),
        "--tls-dir".to_string(),
        TLS_DIR.to_string(),
        // Terraform gets the Pod's grace period, less a little for the runner to exit.
        "--grace-period".to_string(),
        (grace - 5).max(1).to_string(),
    ];
    match runner.binary {
        Binary::Auto => {}
        Binary::Terraform => args.extend(["--binary".into(), "terraform".into()]),
        Binary::Tofu => args.extend(["--binary".into(), "tofu".into()]),
    }
    let mut container = json!({
        "name": CONTAINER,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "args": args,
        "ports": [{"name": "grpc", "containerPort": settings.grpc_port, "protocol": "TCP"}],
        "env": env,
        "volumeMounts": mounts,
        "securityContext": t.security_context.as_ref().map_or_else(hardened_security_context, |s| s.0.clone()),
        "readinessProbe": {"tcpSocket": {"port": settings.grpc_port}, "periodSeconds": 1},
        "terminationMessagePolicy": "FallbackToLogsOnError",
    });
    if !t.env_from.is_empty() {
        container["envFrom"] = json!(values(&t.env_from));
    }
    if let Some(r) = &t.resources {
        container["resources"] = r.0.clone();
    }
    container
}

/// The template's optional Pod fields, set only when given.
fn optional_fields(spec: &mut Value, t: &PodTemplateSpec) {
    let optional = [
        (
            "initContainers",
            json!(values(&t.init_containers)),
            t.init_containers.is_empty(),
        ),
        (
            "tolerations",
            json!(values(&t.tolerations)),
            t.tolerations.is_empty(),
        ),
        (
            "hostAliases",
            json!(values(&t.host_aliases)),
            t.host_aliases.is_empty(),
        ),
        (
            "nodeSelector",
            json!(t.node_selector),
            t.node_selector.is_empty(),
        ),
        (
            "priorityClassName",
            json!(t.priority_class_name),
            t.priority_class_name.is_empty(),
        ),
    ];
    for (key, value, empty) in optional {
        if !empty {
            spec[key] = value;
        }
    }
    if let Some(a) = &t.affinity {
        spec["affinity"] = a.0.clone();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn object(runner: Value) -> TerraformObject {
        serde_json::from_value(json!({
            "metadata": {"name": "vpc", "namespace": "team-a", "uid": "u-1", "generation": 1},
            "spec": {"sourceRef": {"kind": "GitRepository", "url": "https://g/x.git"}, "runner": runner},
            "status": {"lastAttemptedRevision": "main@sha1:0123456789abcdef"},
        }))
        .unwrap()
    }

    fn settings() -> PodSettings {
        PodSettings {
            image: "ghcr.io/tfops/tfops-runner:v1".into(),
            proxy_env: [("HTTPS_PROXY".to_string(), "http://proxy:3128".to_string())].into(),
            grpc_port: GRPC_PORT,
        }
    }

    fn pod_json(runner: Value) -> Value {
        serde_json::to_value(
            runner_pod(&object(runner), RunnerRole::Plan, &settings(), "v7").unwrap(),
        )
        .unwrap()
    }

    #[test]
    fn the_apply_runner_is_its_own_pod_with_the_apply_identity() {
        let runner = json!({
            "serviceAccountName": "tf-plan",
            "podTemplate": {"spec": {"env": [{"name": "AWS_ROLE_ARN", "value": "reader"}]}},
            "apply": {
                "serviceAccountName": "tf-apply",
                "podTemplate": {"spec": {"env": [{"name": "AWS_ROLE_ARN", "value": "writer"}]}}
            }
        });
        let pod = |role| {
            serde_json::to_value(
                runner_pod(&object(runner.clone()), role, &settings(), "v7").unwrap(),
            )
            .unwrap()
        };
        let (plan, apply) = (pod(RunnerRole::Plan), pod(RunnerRole::Apply));
        assert_eq!(plan["metadata"]["name"], "vpc-tf-runner");
        assert_eq!(apply["metadata"]["name"], "vpc-tf-runner-apply");
        assert_eq!(plan["metadata"]["labels"][LABEL_ROLE], "plan");
        assert_eq!(apply["metadata"]["labels"][LABEL_ROLE], "apply");
        assert_eq!(plan["spec"]["serviceAccountName"], "tf-plan");
        assert_eq!(apply["spec"]["serviceAccountName"], "tf-apply");
        let role_arn = |p: &Value| {
            p["spec"]["containers"][0]["env"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|e| e["name"] == "AWS_ROLE_ARN")
                .map(|e| e["value"].as_str().unwrap().to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(role_arn(&plan), ["reader"]);
        assert_eq!(role_arn(&apply), ["writer"]);
        // Hardened the same way.
        assert_eq!(
            plan["spec"]["containers"][0]["securityContext"],
            apply["spec"]["containers"][0]["securityContext"]
        );
        // Without spec.runner.apply, the one runner does both.
        let one = serde_json::to_value(
            runner_pod(&object(json!({})), RunnerRole::Apply, &settings(), "v7").unwrap(),
        )
        .unwrap();
        assert_eq!(one["metadata"]["name"], "vpc-tf-runner");
        assert_eq!(one["metadata"]["labels"][LABEL_ROLE], "plan");
    }

    #[test]
    fn only_a_pull_requests_runner_goes_without_a_service_account_token() {
        let pod = |role| {
            serde_json::to_value(runner_pod(&object(json!({})), role, &settings(), "v7").unwrap())
                .unwrap()
        };
        let pr = pod(RunnerRole::PullRequest);
        assert_eq!(pr["metadata"]["name"], "vpc-tf-runner-pr");
        assert_eq!(pr["spec"]["automountServiceAccountToken"], false);
        // Still the plan identity, for what a provider may take from it besides the token.
        assert_eq!(
            pr["spec"]["serviceAccountName"],
            pod(RunnerRole::Plan)["spec"]["serviceAccountName"]
        );
        for role in [RunnerRole::Plan, RunnerRole::Apply] {
            assert!(
                pod(role)["spec"]
                    .get("automountServiceAccountToken")
                    .is_none()
            );
        }
    }

    #[test]
    fn the_default_pod_is_hardened_labelled_owned_and_has_no_resources() {
        let p = pod_json(json!({}));
        let labels = &p["metadata"]["labels"];
        assert_eq!(p["metadata"]["name"], "vpc-tf-runner");
        assert_eq!(labels["app.kubernetes.io/name"], "tf-runner");
        assert_eq!(labels["app.kubernetes.io/instance"], "tf-runner-0123456789");
        assert_eq!(labels["infra.argocd.io/terraform"], "team-a");
        assert_eq!(p["metadata"]["annotations"][ANNOTATION_TLS_VERSION], "v7");
        let owner = &p["metadata"]["ownerReferences"][0];
        assert_eq!(
            (owner["kind"].as_str(), owner["uid"].as_str()),
            (Some("Terraform"), Some("u-1"))
        );
        let spec = &p["spec"];
        assert_eq!(spec["serviceAccountName"], "tf-runner");
        assert_eq!(spec["terminationGracePeriodSeconds"], 30);
        let c = &spec["containers"][0];
        assert_eq!(c["image"], "ghcr.io/tfops/tfops-runner:v1");
        assert_eq!(c["securityContext"], hardened_security_context());
        assert_eq!(spec["securityContext"]["fsGroup"], 65532);
        let host = tfops_core::naming::runner_host("team-a", "vpc-tf-runner");
        assert_eq!(spec["hostname"], host.as_str());
        assert!(
            c["env"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e["name"] == "TFOPS_RUNNER_HOST" && e["value"] == host.as_str())
        );
        assert!(
            c.get("resources").is_none(),
            "no requests or limits by default"
        );
        assert_eq!(c["ports"][0]["containerPort"], 30000);
        let env: Vec<&str> = c["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            env,
            [
                "POD_NAME",
                "POD_NAMESPACE",
                "TFOPS_LOG_FORMAT",
                "TFOPS_RUNNER_HOST",
                "HTTPS_PROXY"
            ]
        );
        let mounts: Vec<&str> = c["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["mountPath"].as_str().unwrap())
            .collect();
        assert_eq!(mounts, [TLS_DIR, "/tmp", "/home/runner"]);
        assert_eq!(
            spec["volumes"][0]["secret"]["secretName"],
            naming::RUNNER_TLS_SECRET
        );
        assert_eq!(spec["volumes"][1]["emptyDir"], json!({}));
    }

    #[test]
    fn the_template_merges_and_its_security_context_replaces_the_default() {
        let p = pod_json(json!({
            "image": "registry.example.com/runner:extra",
            "serviceAccountName": "infra",
            "binary": "tofu",
            "terminationGracePeriodSeconds": 60,
            "podTemplate": {
                "metadata": {"labels": {"team": "a", "app.kubernetes.io/name": "mine"}, "annotations": {"cost": "x"}},
                "spec": {
                    "env": [{"name": "TF_LOG", "value": "INFO"}],
                    "envFrom": [{"secretRef": {"name": "aws-creds"}}],
                    "volumes": [{"name": "ca", "configMap": {"name": "corp-ca"}}],
                    "volumeMounts": [{"name": "ca", "mountPath": "/etc/ssl/corp", "readOnly": true}],
                    "initContainers": [{"name": "fetch", "image": "oras"}],
                    "nodeSelector": {"workload": "infra"},
                    "tolerations": [{"key": "infra", "operator": "Exists"}],
                    "priorityClassName": "infra-runs",
                    "securityContext": {"runAsUser": 1000},
                    "resources": {"limits": {"memory": "2Gi"}},
                },
            },
        }));
        let labels = &p["metadata"]["labels"];
        assert_eq!(labels["team"], "a");
        assert_eq!(
            labels["app.kubernetes.io/name"], "tf-runner",
            "tfops' labels win"
        );
        assert_eq!(p["metadata"]["annotations"]["cost"], "x");
        let spec = &p["spec"];
        assert_eq!(spec["serviceAccountName"], "infra");
        assert_eq!(spec["terminationGracePeriodSeconds"], 60);
        assert_eq!(spec["nodeSelector"]["workload"], "infra");
        assert_eq!(spec["priorityClassName"], "infra-runs");
        assert_eq!(spec["initContainers"][0]["name"], "fetch");
        assert_eq!(spec["tolerations"][0]["key"], "infra");
        let c = &spec["containers"][0];
        assert_eq!(c["image"], "registry.example.com/runner:extra");
        assert_eq!(
            c["securityContext"],
            json!({"runAsUser": 1000}),
            "replaced whole"
        );
        assert_eq!(c["resources"]["limits"]["memory"], "2Gi");
        assert_eq!(c["envFrom"][0]["secretRef"]["name"], "aws-creds");
        assert_eq!(c["env"][4]["name"], "HTTPS_PROXY");
        assert_eq!(c["env"][5]["name"], "TF_LOG");
        assert_eq!(c["volumeMounts"][3]["mountPath"], "/etc/ssl/corp");
        assert_eq!(spec["volumes"][3]["name"], "ca");
        let args: Vec<&str> = c["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert!(args.ends_with(&["--binary", "tofu"]), "{args:?}");
        assert!(
            args.windows(2).any(|w| w == ["--grace-period", "55"]),
            "{args:?}"
        );
    }
}
