//! The manager as a real process (`tfops-manager`'s code, built with the tests as
//! `manager-process`), authenticated as the controller's ServiceAccount.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

/// A manager process; killed (SIGKILL, a crash) when dropped.
pub struct Manager {
    /// The process.
    pub child: Child,
    /// Where its metrics and health endpoints answer.
    pub endpoints: String,
    /// Where it receives the forge's webhooks (`-` without `--webhook-addr`).
    pub webhooks: String,
    /// Its log lines so far (JSON).
    pub log: Arc<Mutex<Vec<String>>>,
    _git_cache: tempfile::TempDir,
}

impl Drop for Manager {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The flags every test's manager has (endpoints on free ports, the runner image of the
/// node agent); `extra` come after them and win (the last value of a flag counts).
fn flags(identity: &str, extra: &[String]) -> Vec<String> {
    let mut flags: Vec<String> = [
        "--runner-pod-image",
        &super::runner_pod_image(),
        "--namespace",
        "tfops-system",
        "--identity",
        identity,
        "--metrics-addr",
        "127.0.0.1:0",
        "--health-addr",
        "127.0.0.1:0",
        "--runner-creation-timeout",
        "60s",
        "--error-requeue-interval",
        "2s",
    ]
    .iter()
    .map(ToString::to_string)
    .collect();
    flags.extend_from_slice(extra);
    flags
}

impl Manager {
    /// `GET path` of its metrics/health endpoint: status code and the whole answer.
    pub async fn get(&self, path: &str) -> (u16, String) {
        get(&self.endpoints, path).await
    }

    /// The value of counter `line` (a metric name with its labels) in `/metrics`; 0 when
    /// absent.
    pub async fn counter(&self, line: &str) -> f64 {
        let (_, text) = self.get("/metrics").await;
        text.lines()
            .find_map(|l| l.strip_prefix(line)?.trim().parse().ok())
            .unwrap_or(0.0)
    }

    /// Starts a manager named `identity` with `kubeconfig`, and waits for its first log line
    /// (which names its endpoints). Its later lines go to the test's output, shown when the
    /// test fails.
    pub fn start(kubeconfig: &Path, identity: &str, extra: &[String]) -> Self {
        let git_cache = tempfile::tempdir().unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_manager-process"))
            .args(flags(identity, extra))
            .env("KUBECONFIG", kubeconfig)
            .env("TFOPS_GIT_CACHE", git_cache.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, rx) = mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let started = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| {
                let status = child.try_wait();
                panic!("the manager logged nothing within 30 s: {status:?}")
            });
        let line: serde_json::Value = serde_json::from_str(&started)
            .unwrap_or_else(|_| panic!("a JSON log line, not {started}"));
        assert_eq!(line["message"], "tfops-manager starting", "{line}");
        assert_eq!(line["identity"], identity);
        let endpoints = line["health"].as_str().unwrap().to_string();
        let webhooks = line["webhooks"].as_str().unwrap_or("-").to_string();
        let who = identity.to_string();
        let log = Arc::new(Mutex::new(Vec::new()));
        let kept = log.clone();
        std::thread::spawn(move || {
            while let Ok(line) = rx.recv() {
                eprintln!("[{who}] {line}");
                kept.lock().unwrap().push(line);
            }
        });
        Self {
            child,
            endpoints,
            webhooks,
            log,
            _git_cache: git_cache,
        }
    }
}

/// `GET path` of the HTTP server at `addr`: status code and the whole answer.
pub async fn get(addr: &str, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    let code = answer.split(' ').nth(1).unwrap().parse().unwrap();
    (code, answer)
}
