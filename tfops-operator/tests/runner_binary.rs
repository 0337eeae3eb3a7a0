//! The `tfops-runner` binary: serves over mTLS with the files of its TLS directory, refuses bad
//! flags, and stops cleanly on SIGTERM.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

use tfops_runner::client::{ClientTls, RunnerClient};
use tfops_runner::tls::{Pki, runner_server_name};

#[tokio::test]
async fn the_binary_serves_and_stops_on_sigterm() {
    let pki = Pki::new(
        SystemTime::now(),
        Duration::from_secs(86_400 * 30),
        Duration::from_secs(86_400),
        Duration::from_secs(3600),
    )
    .unwrap();
    let secret = pki.runner_secret("team-a", SystemTime::now()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let tls_dir = dir.path().join("tls");
    std::fs::create_dir(&tls_dir).unwrap();
    std::fs::write(tls_dir.join("ca.crt"), &secret.ca_crt).unwrap();
    std::fs::write(tls_dir.join("tls.crt"), &secret.tls_crt).unwrap();
    std::fs::write(tls_dir.join("tls.key"), &secret.tls_key).unwrap();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut child = Command::new(env!("CARGO_BIN_EXE_tfops-runner"))
        .args(["--grpc-port", &port.to_string(), "--tls-dir"])
        .arg(&tls_dir)
        .args(["--workdir-root"])
        .arg(dir.path())
        .args(["--binary", "terraform"])
        .env("TFOPS_TERRAFORM", common::terraform())
        .env("POD_NAME", "vpc-tf-runner")
        .env("POD_NAMESPACE", "team-a")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let client = pki.client(SystemTime::now()).unwrap();
    let tls = ClientTls {
        ca_bundle: pki.trust_bundle(),
        cert: client.cert,
        key: client.key,
        server_name: runner_server_name("team-a"),
    };
    let mut connected = None;
    for _ in 0..100 {
        if let Ok(c) = RunnerClient::connect(&format!("https://127.0.0.1:{port}"), &tls).await {
            connected = Some(c);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (binary, version) = connected.expect("the runner came up").info().await.unwrap();
    assert_eq!(binary, "terraform");
    assert!(version.starts_with("1."), "{version}");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "clean exit on SIGTERM: {status:?}");
}

#[test]
fn bad_flags_and_missing_tls_files_are_clear_errors() {
    let out = Command::new(env!("CARGO_BIN_EXE_tfops-runner"))
        .arg("--nope")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unexpected argument '--nope'"));
    let out = Command::new(env!("CARGO_BIN_EXE_tfops-runner"))
        .args(["--tls-dir", "/nonexistent/tls"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("/nonexistent/tls/tls.crt"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
