//! What a pull request's plan can reach, on the real control plane with the shipped RBAC and a
//! real Gitea: its runner Pod has no Kubernetes identity (no ServiceAccount token at all), its
//! Terraform plans against the object's state that the controller read and handed over, and
//! nothing in the cluster is read or changed by it. A head whose Terraform looks for the token
//! finds none, and the comment shows the refusal, never a secret. The forge token is kept in a
//! namespace of its own, which no runner identity can read.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use serde_json::json;
use support::operator::{CONFIG, Operator, ready_with};
use support::pulls::{comment_where, open, status_where};
use tfops_core::api::FORGE_TOKEN_NAMESPACES;
use tfops_testcluster::gitea::Gitea;

const SECRET: &str = "isolation-s3cret";
const TOKEN: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";
/// How every ServiceAccount token (a JWT) begins.
const JWT: &str = "eyJ";

/// Terraform that looks for a ServiceAccount token and any mounted secret at plan time, with
/// built-in functions only (nothing a provider must bring).
fn probing(guarded: bool) -> String {
    let token = if guarded {
        format!("fileexists(\"{TOKEN}\") ? \"READ ${{file(\"{TOKEN}\")}}\" : \"no token\"")
    } else {
        format!("\"READ ${{file(\"{TOKEN}\")}}\"")
    };
    format!(
        "{}\noutput \"probe\" {{\n  value = {{\n    token   = {token}\n    mounted = join(\",\", concat(tolist(fileset(\"/run\", \"secrets/**\")), tolist(fileset(\"/var/run\", \"secrets/**\"))))\n  }}\n}}\n",
        CONFIG.replace("hello", "bonjour")
    )
}

/// The resource versions of what a pull request's plan must leave alone: the object's state
/// Secret, its lock Lease (if any) and the forge token's Secret.
async fn versions(op: &Operator) -> Vec<Option<String>> {
    let secrets = |ns| Api::<Secret>::namespaced(op.admin.clone(), ns);
    let leases: Api<Lease> = Api::namespaced(op.admin.clone(), "team-a");
    let mut out = Vec::new();
    for (ns, name) in [("team-a", "tfstate-default-b"), ("tfops-forge", "forge")] {
        out.push(
            secrets(ns)
                .get(name)
                .await
                .unwrap()
                .metadata
                .resource_version,
        );
    }
    out.push(
        leases
            .get_opt("lock-tfstate-default-b")
            .await
            .unwrap()
            .and_then(|l| l.metadata.resource_version),
    );
    out
}

/// Requests the runners' ServiceAccount made, and requests nobody authenticated.
fn runner_requests(op: &Operator) -> usize {
    op.cluster
        .audit()
        .iter()
        .filter(|r| {
            r.user == "system:serviceaccount:team-a:tf-runner" || r.user == "system:anonymous"
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pull_requests_plan_has_no_identity_and_plans_against_the_state_handed_to_it() {
    let gitea = Gitea::start().await.unwrap();
    gitea.create_repo("infra").await.unwrap();
    gitea
        .push(&gitea.admin, "infra", "main", &[("b/main.tf", CONFIG)], "b")
        .await
        .unwrap();
    let (op, receiver, _secret) = support::pulls::with_webhooks(SECRET).await;
    // The forge token where no runner runs, granted to team-a's objects.
    op.apply("apiVersion: v1\nkind: Namespace\nmetadata: {name: tfops-forge}\n");
    op.apply(&format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: forge, namespace: tfops-forge, annotations: {{{FORGE_TOKEN_NAMESPACES}: team-a}}}}\nstringData: {{token: {}}}\n",
        gitea.admin.token
    ));
    let pulls =
        json!({"forge": "gitea", "tokenSecretRef": {"name": "forge", "namespace": "tfops-forge"}});
    op.apply(&op.manifest(
        "b",
        json!({"path": "b", "approvePlan": "auto",
               "sourceRef": {"url": gitea.clone_url("infra"), "pullRequests": pulls}}),
    ));
    op.wait_for("b", "applied", 180, |t| {
        ready_with(t, "TerraformAppliedSucceed")
    })
    .await;
    support::pulls::add_hook(&gitea, &receiver, SECRET, &["push", "pull_request"]).await;
    let before = (versions(&op).await, runner_requests(&op));

    let head = gitea
        .push(
            &gitea.admin,
            "infra",
            "probe",
            &[("b/main.tf", &probing(true))],
            "b looks for a token",
        )
        .await
        .unwrap();
    let pr = open(&gitea, "probe").await;
    let body = comment_where(&gitea, pr, 180, |b| b.contains("✅")).await;
    // Planned against b's applied state, handed over: its resource is changed in place, not
    // created again as it would be against no state.
    assert!(body.contains("`+0 ~1 -0`"), "{body}");
    assert!(body.contains("no token"), "{body}");
    assert!(!body.contains(JWT), "{body}");
    status_where(&gitea, &head, "tfops/team-a/b", 30, |s, _| s == "success").await;

    // A head that reads the token without looking first: the plan fails, and the comment says
    // why in Terraform's words.
    let head = gitea
        .push(
            &gitea.admin,
            "infra",
            "probe",
            &[("b/main.tf", &probing(false))],
            "b reads the token",
        )
        .await
        .unwrap();
    let body = comment_where(&gitea, pr, 180, |b| {
        b.contains(&head[..12]) && b.contains("❌")
    })
    .await;
    assert!(body.contains("Invalid function argument"), "{body}");
    assert!(!body.contains(JWT), "{body}");
    status_where(&gitea, &head, "tfops/team-a/b", 30, |s, _| s == "failure").await;

    // Nothing of b's state, its lock or the forge token was written, and no request came
    // from the runners' identity or from anyone unauthenticated while the plans ran.
    assert_eq!(
        (versions(&op).await, runner_requests(&op)),
        before,
        "a pull request's plan touched the cluster"
    );
    let now = op.terraforms().get("b").await.unwrap();
    assert!(ready_with(&now, "TerraformAppliedSucceed"));

    // No runner identity may read the forge token where it is kept, as the real authorizer
    // answers for the shipped RBAC.
    let runner = "--as=system:serviceaccount:team-a:tf-runner";
    for what in [&["get", "secret/forge"][..], &["list", "secrets"]] {
        let mut args = vec!["auth", "can-i"];
        args.extend(what);
        args.extend(["-n", "tfops-forge", runner]);
        let (_, answer, _) = support::kubectl(&op.kubeconfig, &args);
        assert_eq!(answer.trim(), "no", "{args:?}");
    }
}
