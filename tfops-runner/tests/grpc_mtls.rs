//! The runner over gRPC with mutual TLS on 127.0.0.1, port 0: who may talk to it, rotation,
//! and a whole run through the core's runner-session port with real terraform.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use common::*;
use test_case::test_case;
use tfops_core::api::Binary;
use tfops_core::ports::{self, Artifact, PortError, ResolvedInputs, RunnerSession, SetupRequest};
use tfops_runner::client::{ClientTls, RunnerClient};
use tfops_runner::proto;
use tfops_runner::tls::{Pki, runner_server_name};
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint};

/// The runner's `Info`, or what the controller would say of the failure.
async fn info(addr: SocketAddr, tls: &ClientTls) -> Result<(String, String), String> {
    let mut c = RunnerClient::connect(&format!("https://{addr}"), tls)
        .await
        .map_err(|e| e.to_string())?;
    c.info().await.map_err(|e| e.to_string())
}

#[tokio::test]
async fn only_clients_with_a_certificate_of_the_ca_are_served() {
    let pki = pki();
    let runner = start_runner(server_tls(&pki, "team-a")).await;
    let good = client_tls(&pki, "team-a");
    assert_eq!(info(runner.addr, &good).await.unwrap().0, "terraform");

    // No client certificate at all.
    let no_cert = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(&good.ca_bundle))
        .domain_name(good.server_name.clone());
    let attempt = async {
        let channel = Endpoint::from_shared(format!("https://{}", runner.addr))?
            .tls_config(no_cert)?
            .connect()
            .await?;
        proto::runner_client::RunnerClient::new(channel)
            .info(proto::InfoRequest {})
            .await
            .map_err(|s| -> Box<dyn std::error::Error> { Box::new(s) })?;
        Ok::<_, Box<dyn std::error::Error>>(())
    };
    assert!(
        attempt.await.is_err(),
        "a client without a certificate was served"
    );

    // Each refusal says who refused whose certificate and why, not "transport error".
    let refused = |why: &str| format!("the runner refused the controller's certificate: {why}");
    // A certificate from another CA (of the same name: its signature does not verify).
    let other = pki_other_client(&good);
    let said = info(runner.addr, &other).await.unwrap_err();
    assert!(
        said.contains(&refused("its signature does not verify")),
        "{said}"
    );

    // An expired certificate of the right CA.
    let long_ago = SystemTime::now() - 10 * DAY;
    let expired = pki.current().issue_client(long_ago, DAY).unwrap();
    let expired = ClientTls {
        cert: expired.cert,
        key: expired.key,
        ..good.clone()
    };
    let said = info(runner.addr, &expired).await.unwrap_err();
    assert!(said.contains(&refused("expired")), "{said}");
    assert!(!said.contains("transport error"), "{said}");

    // A certificate of the right CA made for the other end (server authentication only).
    let server = pki
        .current()
        .issue_server("team-a", SystemTime::now(), DAY)
        .unwrap();
    let wrong_usage = ClientTls {
        cert: server.cert,
        key: server.key,
        ..good.clone()
    };
    let said = info(runner.addr, &wrong_usage).await.unwrap_err();
    assert!(
        said.contains(&refused("not usable for client authentication")),
        "{said}"
    );

    // The controller refuses a runner whose certificate names another namespace.
    let wrong_name = ClientTls {
        server_name: runner_server_name("team-b"),
        ..good
    };
    let said = info(runner.addr, &wrong_name).await.unwrap_err();
    assert!(
        said.contains("the controller refused the runner's certificate: issued for another name"),
        "{said}"
    );
}

#[tokio::test]
async fn an_expired_controller_certificate_reaches_the_session_port_in_words() {
    let pki = pki();
    let runner = start_runner(server_tls(&pki, "team-a")).await;
    let expired = pki
        .current()
        .issue_client(SystemTime::now() - 10 * DAY, DAY)
        .unwrap();
    let tls = ClientTls {
        cert: expired.cert,
        key: expired.key,
        ..client_tls(&pki, "team-a")
    };
    let client = RunnerClient::connect(&format!("https://{}", runner.addr), &tls)
        .await
        .unwrap();
    let mut s = tfops_runner::client::Session::start(client, "vpc-1")
        .await
        .unwrap();
    // What the reconciler turns into the condition's message.
    match s.init().await {
        Err(e @ PortError::TlsRefused(_)) => assert!(
            e.to_string().contains(
                "the runner refused the controller's certificate: expired or not yet valid"
            ),
            "{e}"
        ),
        other => panic!("expected the refusal, got {other:?}"),
    }
}

fn pki_other_client(good: &ClientTls) -> ClientTls {
    let other = pki();
    let c = other.client(SystemTime::now()).unwrap();
    ClientTls {
        cert: c.cert,
        key: c.key,
        ..good.clone()
    }
}

#[tokio::test]
async fn a_rotation_in_the_middle_of_a_sequence_of_calls_loses_no_call() {
    let mut pki = pki();
    let before = start_runner(server_tls(&pki, "team-a")).await;
    let mut calls = 0;
    for _ in 0..5 {
        info(before.addr, &client_tls(&pki, "team-a"))
            .await
            .unwrap();
        calls += 1;
    }
    // Within the look-ahead of expiry: a new CA; runners started now get its certificates.
    let rotated_at = SystemTime::now() + 28 * DAY;
    assert!(pki.rotate_if_due(rotated_at).unwrap());
    let after = start_runner(server_tls(&pki, "team-a")).await;
    for _ in 0..5 {
        let tls = client_tls(&pki, "team-a");
        info(before.addr, &tls)
            .await
            .expect("a runner from before the rotation still accepts the controller");
        info(after.addr, &tls)
            .await
            .expect("a runner from after the rotation accepts the controller");
        calls += 2;
    }
    assert_eq!(calls, 15);
}

#[test_case(Binary::Terraform ; "terraform")]
#[test_case(Binary::Tofu ; "tofu")]
#[tokio::test]
async fn a_whole_run_through_the_session_port(binary: Binary) {
    let pki = pki();
    let runner = start_runner(server_tls(&pki, "team-a")).await;
    let tree = tempfile::tempdir().unwrap();
    std::fs::create_dir(tree.path().join("infra")).unwrap();
    write_config(&tree.path().join("infra"), "");
    let request = SetupRequest {
        object: object_run_by("infra", binary),
        artifact: artifact(tree.path()),
        inputs: ResolvedInputs {
            vars: [("size".to_string(), serde_json::json!(3))].into(),
            ..Default::default()
        },
    };
    let mut s = session(runner.addr, &pki, "vpc-1").await;
    s.setup(&request).await.unwrap();
    s.init().await.unwrap();
    let reported = format!("{} 1.", binary.as_str());
    assert!(
        s.binary().starts_with(&reported),
        "known after init: {}",
        s.binary()
    );
    s.select_workspace("default").await.unwrap();
    let p = s.plan(&plan_of(ports::PlanKind::Normal)).await.unwrap();
    assert!(p.has_changes);
    assert_eq!(p.summary.add, 2);
    assert!(
        p.plan_file.starts_with(b"PK"),
        "the binary plan is a zip file"
    );
    let shown = s.show().await.unwrap();
    assert!(shown.readable.contains("terraform_data.a will be created"));
    s.apply("apply-1").await.unwrap();
    let outputs = s.outputs().await.unwrap();
    assert_eq!(
        outputs["a"].value,
        serde_json::json!("a-3"),
        "the variable reached terraform"
    );
    assert!(outputs["secret"].sensitive);
    assert_eq!(s.inventory().await.unwrap().len(), 2);
    let drift = s
        .plan(&plan_of(ports::PlanKind::RefreshOnly))
        .await
        .unwrap();
    assert!(!drift.has_changes, "{:?}", drift.drifted);
    // Destroying is what deletion does: a destroy plan, then its apply.
    let destroy = s.plan(&plan_of(ports::PlanKind::Destroy)).await.unwrap();
    assert_eq!(destroy.summary.destroy, 2);
    s.apply("apply-destroy").await.unwrap();
    assert!(s.inventory().await.unwrap().is_empty());
    s.cleanup().await.unwrap();
}

#[test_case(Binary::Terraform ; "terraform")]
#[test_case(Binary::Tofu ; "tofu")]
#[tokio::test]
async fn a_broken_plan_reports_terraforms_diagnostic(binary: Binary) {
    let pki = pki();
    let runner = start_runner(server_tls(&pki, "team-a")).await;
    let tree = tempfile::tempdir().unwrap();
    std::fs::write(
        tree.path().join("main.tf"),
        "resource \"terraform_data\" \"x\" {\n  nonsense = 1\n}\n",
    )
    .unwrap();
    let request = SetupRequest {
        object: object_run_by("", binary),
        artifact: artifact(tree.path()),
        inputs: Default::default(),
    };
    let mut s = session(runner.addr, &pki, "bad-1").await;
    s.setup(&request).await.unwrap();
    s.init().await.unwrap();
    match s.plan(&plan_of(ports::PlanKind::Normal)).await {
        Err(PortError::Terraform(d)) => assert!(
            d.contains("Unsupported argument") && d.contains("nonsense"),
            "{d}"
        ),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn an_archive_with_a_path_escape_is_refused() {
    let pki = pki();
    let runner = start_runner(server_tls(&pki, "team-a")).await;
    // A tar whose only entry is ../evil.tf.
    let mut h = tar::Header::new_gnu();
    h.as_gnu_mut().unwrap().name[..11].copy_from_slice(b"../evil.tf\0");
    h.set_size(1);
    h.set_entry_type(tar::EntryType::Regular);
    h.set_mode(0o644);
    h.set_cksum();
    let mut raw = h.as_bytes().to_vec();
    raw.extend_from_slice(b"x");
    raw.resize(1024 + 512, 0);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, &raw).unwrap();
    let data = gz.finish().unwrap();
    let sha256 = tfops_core::digest::sha256_hex(&data);
    let request = SetupRequest {
        object: object(""),
        artifact: Artifact {
            sha256,
            data: Arc::new(data),
        },
        inputs: Default::default(),
    };
    let mut s = session(runner.addr, &pki, "evil-1").await;
    match s.setup(&request).await {
        Err(PortError::Invalid(m)) => assert!(m.contains("../evil.tf"), "{m}"),
        other => panic!("{other:?}"),
    }
}

const SLOW: &str = r#"resource "terraform_data" "slow" {
  provisioner "local-exec" {
    command = "sleep 4"
  }
}"#;

#[tokio::test]
async fn a_controller_that_reconnects_mid_apply_gets_the_real_result_and_cancel_stops_an_apply() {
    let pki = pki();
    let runner = start_runner(server_tls(&pki, "team-a")).await;
    let tree = tempfile::tempdir().unwrap();
    write_config(tree.path(), SLOW);
    let request = SetupRequest {
        object: object(""),
        artifact: artifact(tree.path()),
        inputs: Default::default(),
    };
    let mut s = session(runner.addr, &pki, "slow-1").await;
    s.setup(&request).await.unwrap();
    s.init().await.unwrap();
    s.plan(&plan_of(ports::PlanKind::Normal)).await.unwrap();
    let apply_id = "apply-slow-1".to_string();
    // The first controller starts the apply and goes away mid-way.
    let id = apply_id.clone();
    let apply = tokio::spawn(async move { s.apply(&id).await });
    tokio::time::sleep(Duration::from_secs(2)).await;
    apply.abort();
    // A new controller re-attaches by run id: no second apply, the real result.
    let mut again = RunnerClient::connect(
        &format!("https://{}", runner.addr),
        &client_tls(&pki, "team-a"),
    )
    .await
    .unwrap();
    let mut lines = 0;
    let result = again.run(&apply_id, None, |_| lines += 1).await.unwrap();
    assert_eq!(
        result.status,
        proto::run_result::Status::Succeeded as i32,
        "{}",
        result.diagnostic
    );
    assert!(lines > 0, "the log so far is replayed");

    // Cancellation: a new slow resource, an apply cancelled mid-way.
    let tree = tempfile::tempdir().unwrap();
    write_config(tree.path(), &SLOW.replace("sleep 4", "sleep 60"));
    let request = SetupRequest {
        object: object(""),
        artifact: artifact(tree.path()),
        inputs: Default::default(),
    };
    let mut s = session(runner.addr, &pki, "slow-2").await;
    s.setup(&request).await.unwrap();
    s.init().await.unwrap();
    s.plan(&plan_of(ports::PlanKind::Normal)).await.unwrap();
    let id = "apply-slow-2".to_string();
    let started = std::time::Instant::now();
    let run_id = id.clone();
    let apply = tokio::spawn(async move { s.apply(&run_id).await });
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(again.cancel(&id).await.unwrap(), "the apply was running");
    let result = apply.await.unwrap();
    assert!(matches!(result, Err(PortError::Cancelled)), "{result:?}");
    assert!(started.elapsed() < Duration::from_secs(30));
}

#[tokio::test]
async fn a_pki_saved_and_loaded_by_a_restarted_controller_keeps_its_runners() {
    let before = pki();
    let runner = start_runner(server_tls(&before, "team-a")).await;
    // The controller restarts: it loads the CA it saved in its own namespace.
    let saved = serde_json::to_string(&before.save()).unwrap();
    assert!(
        !format!("{:?}", before.save()).contains("PRIVATE KEY"),
        "Debug hides the key"
    );
    let after = Pki::load(
        &serde_json::from_str(&saved).unwrap(),
        30 * DAY,
        7 * DAY,
        3 * DAY,
    )
    .unwrap();
    assert_eq!(after.trust_bundle(), before.trust_bundle());
    // Its client certificates are accepted by the runner set up before the restart...
    let (binary, _) = info(runner.addr, &client_tls(&after, "team-a"))
        .await
        .unwrap();
    assert_eq!(binary, "terraform");
    // ...and a runner set up after it is accepted by a client of before.
    let later = start_runner(server_tls(&after, "team-b")).await;
    assert!(
        info(later.addr, &client_tls(&before, "team-b"))
            .await
            .is_ok()
    );

    // A saved CA whose key is another's is refused, not used.
    let mut wrong = before.save();
    wrong.current.key = pki().save().current.key;
    let refused = Pki::load(&wrong, 30 * DAY, 7 * DAY, 3 * DAY).err().unwrap();
    assert!(
        refused
            .to_string()
            .contains("not the key of the certificate"),
        "{refused}"
    );
}

#[tokio::test]
async fn home_file_mappings_are_removed_at_cleanup() {
    let pki = pki();
    let runner = start_runner(server_tls(&pki, "team-a")).await;
    let tree = tempfile::tempdir().unwrap();
    write_config(tree.path(), "");
    let request = SetupRequest {
        object: object(""),
        artifact: artifact(tree.path()),
        inputs: ResolvedInputs {
            files: vec![tfops_core::ports::ResolvedFile {
                location: tfops_core::api::FileLocation::Home,
                path: ".config/cloud/credentials".into(),
                content: b"secret".to_vec(),
            }],
            ..Default::default()
        },
    };
    let mut s = session(runner.addr, &pki, "home-1").await;
    s.setup(&request).await.unwrap();
    let mapped = runner.home.join(".config/cloud/credentials");
    assert_eq!(std::fs::read(&mapped).unwrap(), b"secret");
    s.cleanup().await.unwrap();
    assert!(
        !mapped.exists(),
        "a credential left in the runner's home after the run"
    );
}
