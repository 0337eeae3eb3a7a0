//! The `kubernetes` state backend of Terraform and of OpenTofu (client-go inside each) on the
//! real API server, as processes: `init`, `apply` writing the state Secret, a second `apply`
//! refused while a first one holds the lock Lease, `force-unlock` after a killed run, and
//! workspaces, all as a ServiceAccount holding only the RBAC the notes list (no 403 in the
//! audit log). Run with every binary at hand: the Terraform the runner tests use, one of 1.13
//! or later (built by `scripts/install-terraform --at-least 1.13`), whose backend sends Lease
//! bodies as protobuf, and OpenTofu, whose backend keeps the same Secret, labels, Lease and
//! lock-info annotation.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use kube::api::{Api, ListParams};
use serde_json::json;
use tfops_testcluster::TestCluster;

mod support;

/// The binaries to judge the server with, and whether each sends protobuf: the Terraform the
/// runner tests use, one of 1.13 or later, and OpenTofu (`TFOPS_TOFU`).
fn terraforms() -> Vec<(PathBuf, bool)> {
    let mut out = Vec::new();
    let runner = std::env::var_os("TFOPS_TERRAFORM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("terraform"));
    let tools = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.tools/bin/terraform");
    let recent = std::env::var_os("TFOPS_TERRAFORM_PROTOBUF")
        .map(PathBuf::from)
        .unwrap_or(tools);
    for path in [runner, recent] {
        let Some(minor) = minor_version(&path) else {
            continue;
        };
        if !out.iter().any(|(p, _): &(PathBuf, bool)| p == &path) {
            out.push((path, minor >= 13));
        }
    }
    assert!(
        out.iter().any(|(_, protobuf)| *protobuf),
        "no Terraform >= 1.13 found: run scripts/install-terraform --at-least 1.13 (or set TFOPS_TERRAFORM_PROTOBUF)"
    );
    let tofu = tfops_runner::server::find_binary("tofu")
        .map(|(_, p)| p)
        .expect("no tofu: run scripts/install-tofu and set TFOPS_TOFU");
    assert!(is_tofu(&tofu), "{} is no OpenTofu", tofu.display());
    // OpenTofu's backend sends Lease bodies as protobuf since 1.11 (the notes).
    out.push((tofu, true));
    out
}

/// The minor version of a Terraform (`Terraform v1.N…`); `None` for anything else.
fn minor_version(terraform: &Path) -> Option<u32> {
    let text = version_text(terraform)?;
    let v = text.lines().next()?.strip_prefix("Terraform v")?;
    v.split('.').nth(1)?.parse().ok()
}

fn version_text(binary: &Path) -> Option<String> {
    let out = Command::new(binary)
        .arg("version")
        .env_remove("TF_CLI_CONFIG_FILE")
        .output()
        .ok()?;
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn is_tofu(binary: &Path) -> bool {
    version_text(binary).is_some_and(|t| t.starts_with("OpenTofu v"))
}

struct Workdir {
    terraform: PathBuf,
    dir: tempfile::TempDir,
}

impl Workdir {
    fn new(terraform: &Path, kubeconfig_text: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(&kubeconfig, kubeconfig_text).unwrap();
        std::fs::write(
            dir.path().join("main.tf"),
            format!(
                r#"
terraform {{
  backend "kubernetes" {{
    secret_suffix = "app"
    namespace     = "tf"
    config_path   = "{}"
  }}
}}
variable "hold" {{
  type    = string
  default = ""
}}
resource "terraform_data" "x" {{
  input = "hello-${{terraform.workspace}}"
  provisioner "local-exec" {{
    # With hold set, the apply waits (holding the state lock) until the file appears.
    command = var.hold == "" ? "true" : "touch started; while [ ! -f ${{var.hold}} ]; do sleep 0.05; done"
  }}
}}
output "x" {{
  value = terraform_data.x.output
}}
"#,
                kubeconfig.display()
            ),
        )
        .unwrap();
        Self {
            terraform: terraform.to_path_buf(),
            dir,
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        Self::command_in(&self.terraform, self.dir.path(), args)
    }

    fn command_in(terraform: &Path, dir: &Path, args: &[&str]) -> Command {
        let mut c = Command::new(terraform);
        c.args(args)
            .current_dir(dir)
            .env("HOME", dir)
            .env("TF_IN_AUTOMATION", "1")
            .env("TF_INPUT", "0")
            .env_remove("KUBECONFIG")
            .env_remove("KUBE_NAMESPACE")
            .env_remove("TF_CLI_CONFIG_FILE");
        c
    }

    fn borrowed(&self) -> Borrowed {
        Borrowed {
            dir: self.dir.path().to_path_buf(),
            terraform: self.terraform.clone(),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

fn wait_for_file(path: &Path, child: &mut std::process::Child) {
    let started = std::time::Instant::now();
    while !path.exists() {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            if let Some(e) = child.stderr.as_mut() {
                e.read_to_string(&mut err).unwrap();
            }
            panic!("terraform ended ({status}) before holding the lock: {err}");
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(120),
            "terraform never reached its provisioner"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

fn state_of(secret: &Secret) -> serde_json::Value {
    let gz = &secret.data.as_ref().unwrap()["tfstate"].0;
    let mut text = String::new();
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_string(&mut text)
        .unwrap();
    serde_json::from_str(&text).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terraforms_kubernetes_backend_keeps_state_and_locks_on_the_real_server() {
    for (terraform, protobuf) in terraforms() {
        eprintln!(
            "judging with {} (protobuf: {protobuf})",
            terraform.display()
        );
        judge(&terraform).await;
    }
}

async fn judge(terraform: &Path) {
    let cluster = TestCluster::start().await.unwrap();
    let client = support::client(&cluster).await;
    support::namespace(&client, "tf").await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "tf");
    let leases: Api<Lease> = Api::namespaced(client.clone(), "tf");
    // Terraform runs as a ServiceAccount with exactly the RBAC the notes list for the backend.
    let pp = kube::api::PostParams::default();
    Api::<ServiceAccount>::namespaced(client.clone(), "tf")
        .create(
            &pp,
            &support::from_json(json!({"metadata": {"name": "tf-runner"}})),
        )
        .await
        .unwrap();
    support::grant_state_backend(&client, "tf", "tf-runner").await;
    let token = cluster
        .service_account_token("tf", "tf-runner")
        .await
        .unwrap();
    let w = Workdir::new(terraform, &cluster.kubeconfig_for(&token));
    let label = terraform.display().to_string();

    // init and apply: the state Secret, with Terraform's labels, gzip state naming the resource.
    let (init, apply) = {
        let b = w.borrowed();
        tokio::task::spawn_blocking(move || (b.run(&["init"]), b.run(&["apply", "-auto-approve"])))
            .await
            .unwrap()
    };
    assert!(init.0, "{label}: init: {}", init.1);
    assert!(apply.0, "{label}: apply: {}", apply.1);
    let state = secrets.get("tfstate-default-app").await.unwrap();
    let labels = state.metadata.labels.clone().unwrap();
    assert_eq!(labels["tfstate"], "true", "{label}");
    assert_eq!(labels["tfstateWorkspace"], "default");
    assert_eq!(labels["app.kubernetes.io/managed-by"], "terraform");
    let json = state_of(&state);
    assert_eq!(json["outputs"]["x"]["value"], "hello-default", "{label}");
    let lease = leases.get("lock-tfstate-default-app").await.unwrap();
    assert!(
        lease.spec.unwrap().holder_identity.is_none(),
        "{label}: the lock is released after the apply"
    );

    // A second apply while the first holds the lock is refused, naming the holder.
    // (Its own process group: the provisioner's shell loop dies with it when it is killed.)
    let mut holder = w
        .command(&[
            "apply",
            "-auto-approve",
            "-replace=terraform_data.x",
            "-var",
            "hold=release",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let started = w.path("started");
    let blocked = tokio::task::spawn_blocking({
        let b = w.borrowed();
        move || {
            wait_for_file(&started, &mut holder);
            let second = b.run(&["apply", "-auto-approve", "-lock-timeout=0s"]);
            (holder, second)
        }
    })
    .await
    .unwrap();
    let (mut holder, second) = blocked;
    let held = leases.get("lock-tfstate-default-app").await.unwrap();
    let lock_id = held.spec.clone().unwrap().holder_identity.unwrap();
    let info: serde_json::Value = serde_json::from_str(
        &held.metadata.annotations.clone().unwrap()["app.terraform.io/lock-info"],
    )
    .unwrap();
    assert_eq!(info["ID"], lock_id.as_str(), "{label}");
    assert_eq!(info["Operation"], "OperationTypeApply");
    assert!(!second.0, "{label}: a second apply ran beside the first");
    assert!(
        second.1.contains("Error acquiring the state lock") && second.1.contains(&lock_id),
        "{label}: {}",
        second.1
    );

    // A killed holder leaves the Lease locked; force-unlock with its id frees it.
    nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(holder.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    holder.wait().unwrap();
    let still = leases.get("lock-tfstate-default-app").await.unwrap();
    assert_eq!(
        still.spec.unwrap().holder_identity.as_deref(),
        Some(lock_id.as_str())
    );
    let unlock = {
        let b = w.borrowed();
        let id = lock_id.clone();
        tokio::task::spawn_blocking(move || {
            (
                b.run(&["force-unlock", "-force", &id]),
                b.run(&["apply", "-auto-approve", "-lock-timeout=0s"]),
            )
        })
        .await
        .unwrap()
    };
    assert!(unlock.0.0, "{label}: force-unlock: {}", unlock.0.1);
    assert!(unlock.1.0, "{label}: apply after unlock: {}", unlock.1.1);
    let lease = leases.get("lock-tfstate-default-app").await.unwrap();
    assert!(lease.spec.unwrap().holder_identity.is_none());
    assert!(
        !lease
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key("app.terraform.io/lock-info"),
        "{label}: the lock info goes with the lock"
    );

    // Workspaces: listed by label, each with its own state Secret.
    let ws = {
        let b = w.borrowed();
        tokio::task::spawn_blocking(move || {
            (
                b.run(&["workspace", "new", "staging"]),
                b.run(&["apply", "-auto-approve"]),
                b.run(&["workspace", "list"]),
            )
        })
        .await
        .unwrap()
    };
    assert!(ws.0.0, "{label}: workspace new: {}", ws.0.1);
    assert!(ws.1.0, "{label}: apply in staging: {}", ws.1.1);
    assert!(
        ws.2.1.contains("default") && ws.2.1.contains("* staging"),
        "{label}: {}",
        ws.2.1
    );
    let staging = secrets.get("tfstate-staging-app").await.unwrap();
    assert_eq!(state_of(&staging)["outputs"]["x"]["value"], "hello-staging");
    let listed = secrets
        .list(&ListParams::default().labels("tfstate=true"))
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 2);

    // Every request of the backend was allowed by the RBAC the notes list.
    let refused: Vec<_> = cluster
        .audit()
        .into_iter()
        .filter(|a| a.code == 403)
        .collect();
    assert!(
        refused.is_empty(),
        "{label}: the backend needed more RBAC: {refused:?}"
    );
    let lease_writes = cluster
        .audit()
        .into_iter()
        .filter(|a| a.resource == "leases" && a.user == "system:serviceaccount:tf:tf-runner")
        .filter(|a| matches!(a.verb.as_str(), "create" | "update"))
        .count();
    assert!(
        lease_writes > 0,
        "{label}: the lock is a Lease written as the runner"
    );
}

/// The paths of a [`Workdir`], to run commands from a blocking task.
struct Borrowed {
    dir: PathBuf,
    terraform: PathBuf,
}

impl Borrowed {
    fn run(&self, args: &[&str]) -> (bool, String) {
        let out = Workdir::command_in(&self.terraform, &self.dir, args)
            .output()
            .unwrap();
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    }
}
