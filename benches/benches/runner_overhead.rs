//! `runner_overhead`: what the driver does for a plan with changes and its apply — plan, show
//! (text and JSON), the content digest an approval is bound to, storing the plan with the
//! chunked codec, apply — for 50 `terraform_data` resources through the runner (gRPC over
//! mutual TLS on loopback, in-process server), against the same Terraform commands run
//! directly (`plan -out`, `show -json`, `show`, `apply`), in the same run; once with Terraform
//! and once with OpenTofu, each against its own direct baseline (see `benches/README.md`).

// A benchmark aborts when its setup fails: there is nothing to measure then.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use criterion::{Criterion, criterion_group, criterion_main};
use tfops_core::api::{ObjectMeta, TerraformObject};
use tfops_core::ports::{Artifact, PlanKind, PlanRequest, RunnerSession, SetupRequest};
use tfops_runner::client::{ClientTls, RunnerClient, ServerTls, Session, serve};
use tfops_runner::server::{RunnerConfig, RunnerService};
use tfops_runner::tls::{Pki, runner_server_name};

/// 50 resources whose input changes at every apply (`timestamp()` is unknown at plan time), so
/// every plan has 50 changes and every apply applies them.
fn config() -> String {
    let mut c = String::from(
        "terraform {\n  backend \"local\" {\n    path = \"terraform.tfstate\"\n  }\n}\n",
    );
    for i in 0..50 {
        c.push_str(&format!(
            "resource \"terraform_data\" \"r{i}\" {{\n  input = \"{i}-${{timestamp()}}\"\n}}\n"
        ));
    }
    c
}

fn tf(terraform: &Path, dir: &Path, args: &[&str]) {
    let out = Command::new(terraform)
        .args(args)
        .current_dir(dir)
        .env("TF_IN_AUTOMATION", "1")
        .env("TF_INPUT", "0")
        .env_remove("TF_CLI_CONFIG_FILE")
        .output()
        .expect("terraform");
    assert!(
        out.status.success() || (args[0] == "plan" && out.status.code() == Some(2)),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn bench(c: &mut Criterion) {
    for (name, program) in benches::binaries("runner_overhead") {
        bench_binary(c, name, &program);
    }
}

/// The benchmark with the binary `name` at `terraform`.
fn bench_binary(c: &mut Criterion, name: &str, terraform: &Path) {
    let terraform = terraform.to_path_buf();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();

    // Direct: the commands the runner runs for a plan (plan -out, show -json) and an apply.
    let direct = tempfile::tempdir().unwrap();
    std::fs::write(direct.path().join("main.tf"), config()).unwrap();
    tf(
        &terraform,
        direct.path(),
        &["init", "-input=false", "-no-color"],
    );

    // Through the runner.
    let pki = Pki::new(
        SystemTime::now(),
        Duration::from_secs(86_400 * 30),
        Duration::from_secs(86_400),
        Duration::from_secs(3600),
    )
    .unwrap();
    let secret = pki.runner_secret("bench", SystemTime::now()).unwrap();
    let work = tempfile::tempdir().unwrap();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let service = RunnerService::new(RunnerConfig {
        program: terraform.clone(),
        binary: name.into(),
        workdir_root: work.path().to_path_buf(),
        home: work.path().to_path_buf(),
        grace: Duration::from_secs(10),
        max_log_lines: 100_000,
        kubeconfig: None,
        pod_name: None,
        others: Default::default(),
    });
    let server_tls = ServerTls {
        cert: secret.tls_crt,
        key: secret.tls_key,
        client_ca_bundle: secret.ca_crt,
    };
    rt.spawn(async move {
        serve(
            listener,
            service,
            &server_tls,
            64 << 20,
            std::future::pending(),
        )
        .await
    });
    let client = pki.client(SystemTime::now()).unwrap();
    let tls = ClientTls {
        ca_bundle: pki.trust_bundle(),
        cert: client.cert,
        key: client.key,
        server_name: runner_server_name("bench"),
    };
    let source = tempfile::tempdir().unwrap();
    std::fs::write(source.path().join("main.tf"), config()).unwrap();
    let mut archive = Vec::new();
    let summary = tfops_core::source::build_archive(source.path(), None, &mut archive).unwrap();
    let object = TerraformObject {
        metadata: ObjectMeta {
            name: "bench".into(),
            namespace: "bench".into(),
            generation: 1,
            ..Default::default()
        },
        spec: serde_json::from_value(serde_json::json!({
            "sourceRef": {"kind": "Local", "url": "."},
            "backendConfig": {"disable": true},
        }))
        .unwrap(),
        status: Default::default(),
    };
    let mut session = rt.block_on(async {
        let c = RunnerClient::connect(&format!("https://{addr}"), &tls)
            .await
            .unwrap();
        let mut s = Session::start(c, "bench").await.unwrap();
        let request = SetupRequest {
            object,
            artifact: Artifact {
                sha256: summary.sha256,
                data: Arc::new(archive),
            },
            inputs: Default::default(),
        };
        s.setup(&request).await.unwrap();
        s.init().await.unwrap();
        s
    });
    let plan = PlanRequest {
        kind: PlanKind::Normal,
        targets: vec![],
        parallelism: 0,
    };

    let mut g = c.benchmark_group(format!(
        "runner_overhead/plan+apply-50-terraform_data/{name}"
    ));
    g.sample_size(10);
    g.warm_up_time(Duration::from_secs(1));
    g.measurement_time(Duration::from_secs(30));
    g.bench_function("direct", |b| {
        b.iter(|| {
            tf(
                &terraform,
                direct.path(),
                &[
                    "plan",
                    "-input=false",
                    "-no-color",
                    "-detailed-exitcode",
                    "-out=tfplan",
                ],
            );
            tf(
                &terraform,
                direct.path(),
                &["show", "-json", "-no-color", "tfplan"],
            );
            tf(&terraform, direct.path(), &["show", "-no-color", "tfplan"]);
            tf(
                &terraform,
                direct.path(),
                &["apply", "-input=false", "-no-color", "tfplan"],
            );
        })
    });
    let mut applies = 0u64;
    g.bench_function("through the runner (gRPC + mTLS)", |b| {
        b.iter(|| {
            rt.block_on(async {
                let p = session.plan(&plan).await.unwrap();
                assert_eq!(
                    p.summary.add + p.summary.change,
                    50,
                    "every plan changes all 50"
                );
                let shown = session.show().await.unwrap();
                let digest = tfops_core::plan::content_digest(&shown.json).unwrap();
                assert_eq!(digest.len(), 64);
                let (index, chunks) = tfops_core::plan::encode_reader(
                    &p.plan_file[..],
                    tfops_core::plan::CodecConfig::default(),
                    "plan-bench",
                    &format!("upload-{applies}"),
                    Vec::new(),
                )
                .unwrap();
                std::hint::black_box((index, chunks));
                applies += 1;
                session.apply(&format!("apply-{applies}")).await.unwrap();
            })
        })
    });
    g.finish();
}

criterion_group!(runner_overhead, bench);
criterion_main!(runner_overhead);
