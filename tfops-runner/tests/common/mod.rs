//! Shared by the runner's tests: the real terraform binary and small configurations.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tfops_core::api::{Binary, ObjectMeta, TerraformObject};
use tfops_core::ports::Artifact;
use tfops_runner::client::{ClientTls, RunnerClient, ServerTls, Session, serve};
use tfops_runner::server::{RunnerConfig, RunnerService};
use tfops_runner::tls::{Pki, runner_server_name};

/// The terraform the tests run ([`program`]).
pub fn terraform() -> PathBuf {
    program(Binary::Terraform)
}

/// The `binary` the tests run: its variable, `PATH`, or the build of `scripts/install-terraform`
/// or `scripts/install-tofu` in this checkout ([`tfops_testcluster::tools`]); a test without
/// one fails at once naming the script to run.
pub fn program(binary: Binary) -> PathBuf {
    tfops_testcluster::tools::binary(binary.as_str()).unwrap_or_else(|e| panic!("{e}"))
}

/// A configuration: two resources, a variable, outputs (one sensitive), and a value read from
/// another local state (`upstream.tfstate`) so a test can make real drift.
pub const CONFIG: &str = r#"
variable "size" {
  type    = number
  default = 1
}

data "terraform_remote_state" "upstream" {
  backend = "local"
  config = {
    path = "${path.module}/upstream.tfstate"
  }
}

resource "terraform_data" "a" {
  input = "a-${var.size}"
}

resource "terraform_data" "b" {
  input = data.terraform_remote_state.upstream.outputs.color
}

output "a" {
  value = terraform_data.a.output
}

output "color" {
  value = terraform_data.b.output
}

output "upstream_color" {
  value = data.terraform_remote_state.upstream.outputs.color
}

output "secret" {
  value     = "s3cr3t-${var.size}"
  sensitive = true
}
"#;

/// A local state file whose only output `color` is `color`.
pub fn upstream_state(color: &str, serial: u32) -> String {
    format!(
        r#"{{"version":4,"terraform_version":"1.5.0","serial":{serial},"lineage":"00000000-0000-0000-0000-000000000000","outputs":{{"color":{{"value":"{color}","type":"string"}}}},"resources":[],"check_results":null}}"#
    )
}

pub fn write_config(dir: &Path, extra: &str) {
    std::fs::write(dir.join("main.tf"), format!("{CONFIG}\n{extra}")).unwrap();
    std::fs::write(dir.join("upstream.tfstate"), upstream_state("blue", 1)).unwrap();
}

/// A day.
pub const DAY: Duration = Duration::from_secs(86_400);

/// A CA valid 30 days, rotating 7 days ahead.
pub fn pki() -> Pki {
    Pki::new(SystemTime::now(), 30 * DAY, 7 * DAY, 3 * DAY).unwrap()
}

/// A runner server on 127.0.0.1, port 0, stopped when dropped.
pub struct Runner {
    pub addr: SocketAddr,
    /// The runner's home directory (`location: home` file mappings).
    pub home: PathBuf,
    _dir: tempfile::TempDir,
    _stop: tokio::sync::oneshot::Sender<()>,
}

pub async fn start_runner(tls: ServerTls) -> Runner {
    start_runner_with(tls, None).await
}

/// A runner writing plans and outputs with `stores`.
pub async fn start_runner_with(
    tls: ServerTls,
    stores: Option<Arc<dyn tfops_runner::stores::Stores>>,
) -> Runner {
    let dir = tempfile::tempdir().unwrap();
    let config = RunnerConfig {
        program: terraform(),
        binary: "terraform".into(),
        workdir_root: dir.path().join("work"),
        home: dir.path().join("home"),
        grace: Duration::from_secs(10),
        max_log_lines: 10_000,
        kubeconfig: None,
        pod_name: None,
        // A setup may ask for either binary by name.
        others: tfops_runner::server::Overrides {
            terraform: Some(terraform().into()),
            tofu: Some(program(Binary::Tofu).into()),
        },
    };
    std::fs::create_dir_all(&config.workdir_root).unwrap();
    std::fs::create_dir_all(&config.home).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let service = RunnerService::new(config);
    let service = match stores {
        Some(stores) => service.with_stores(stores),
        None => service,
    };
    tokio::spawn(async move {
        serve(listener, service, &tls, 64 << 20, async {
            let _ = stopped.await;
        })
        .await
        .unwrap();
    });
    Runner {
        addr,
        home: dir.path().join("home"),
        _dir: dir,
        _stop: stop,
    }
}

pub fn server_tls(pki: &Pki, ns: &str) -> ServerTls {
    let s = pki.runner_secret(ns, SystemTime::now()).unwrap();
    ServerTls {
        cert: s.tls_crt,
        key: s.tls_key,
        client_ca_bundle: s.ca_crt,
    }
}

pub fn client_tls(pki: &Pki, ns: &str) -> ClientTls {
    let c = pki.client(SystemTime::now()).unwrap();
    ClientTls {
        ca_bundle: pki.trust_bundle(),
        cert: c.cert,
        key: c.key,
        server_name: runner_server_name(ns),
    }
}

pub fn object(config_dir: &str) -> TerraformObject {
    object_run_by(config_dir, Binary::Auto)
}

/// The object of [`object`] asking for `binary` (`spec.runner.binary`): the runner of these
/// tests runs terraform itself and starts the other binary per setup, as a runner Pod does.
pub fn object_run_by(config_dir: &str, binary: Binary) -> TerraformObject {
    let spec = serde_json::from_value(serde_json::json!({
        "sourceRef": {"kind": "Local", "url": "."},
        "path": config_dir,
        "backendConfig": {"customConfiguration": "terraform {\n  backend \"local\" {\n    path = \"terraform.tfstate\"\n  }\n}\n"},
        "runner": {"binary": binary.as_str()},
    }))
    .unwrap();
    TerraformObject {
        metadata: ObjectMeta {
            name: "vpc".into(),
            namespace: "team-a".into(),
            generation: 1,
            ..Default::default()
        },
        spec,
        status: Default::default(),
    }
}

pub fn artifact(tree: &std::path::Path) -> Artifact {
    let mut data = Vec::new();
    let summary = tfops_core::source::build_archive(tree, None, &mut data).unwrap();
    Artifact {
        sha256: summary.sha256,
        data: Arc::new(data),
    }
}

pub async fn session(addr: SocketAddr, pki: &Pki, prefix: &str) -> Session {
    let client = RunnerClient::connect(&format!("https://{addr}"), &client_tls(pki, "team-a"))
        .await
        .unwrap();
    Session::start(client, prefix).await.unwrap()
}

/// A plan request of `kind`: every resource, Terraform's own parallelism.
pub fn plan_of(kind: tfops_core::ports::PlanKind) -> tfops_core::ports::PlanRequest {
    tfops_core::ports::PlanRequest {
        kind,
        targets: vec![],
        parallelism: 0,
    }
}
