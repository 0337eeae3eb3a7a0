//! The core's driver on the real runner and real terraform, restarted mid-apply: the driver
//! that started the apply goes away, a new one attaches to the recorded run, and the apply
//! happens once. The object store, plans and outputs are the core's in-memory fakes; the
//! source is a real archive; the runner is the real gRPC server over mutual TLS.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use common::*;
use test_case::test_case;
use tfops_core::api::Binary;
use tfops_core::api::{ObjectKey, RunnerRole, SourceRef, TerraformObject};
use tfops_core::conditions::{self, ConditionType};
use tfops_core::ports::{Artifact, PortError, Revision, RunnerPort, RunnerSession, SourcePort};
use tfops_core::reconcile::Driver;
use tfops_core::testing::FakeWorld;
use tfops_runner::client::{ClientTls, RunnerClient, Session};

/// The configuration: one resource whose creation appends a line to `marker` and takes a
/// few seconds, so that the driver can be stopped while it runs.
fn slow_config(marker: &std::path::Path) -> String {
    format!(
        "resource \"terraform_data\" \"slow\" {{\n  provisioner \"local-exec\" {{\n    command = \"echo applied >> {} && sleep 3\"\n  }}\n}}\noutput \"id\" {{\n  value = terraform_data.slow.id\n}}\n",
        marker.display()
    )
}

/// A source that always resolves to one revision of a directory.
struct Tree(PathBuf);

#[async_trait]
impl SourcePort for Tree {
    async fn resolve(&self, _: &ObjectKey, _: &SourceRef) -> Result<Revision, PortError> {
        Ok(Revision {
            reference: "main".into(),
            digest: format!("sha1:{}", "ab".repeat(20)),
        })
    }
    async fn fetch(
        &self,
        _: &ObjectKey,
        _: &SourceRef,
        _: &Revision,
        _: Option<&str>,
    ) -> Result<Artifact, PortError> {
        Ok(artifact(&self.0))
    }
}

/// The runner port of a controller: connect to the runner at `addr` (it is already running,
/// as a runner Pod would be), and attach to it again by its address.
struct Remote {
    addr: SocketAddr,
    tls: ClientTls,
    /// Sessions so far: each names its runs with its own prefix (a runner refuses a run id
    /// that named another command).
    sessions: std::sync::atomic::AtomicU64,
}

impl Remote {
    fn name(&self) -> String {
        format!("https://{}", self.addr)
    }
}

#[async_trait]
impl RunnerPort for Remote {
    async fn start(
        &self,
        _: &TerraformObject,
        _: RunnerRole,
    ) -> Result<Box<dyn RunnerSession>, PortError> {
        let client = RunnerClient::connect(&self.name(), &self.tls)
            .await
            .map_err(|e| PortError::Unavailable(e.to_string()))?;
        let n = self
            .sessions
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let session = Session::start(client, &format!("vpc-{n}"))
            .await
            .map_err(|e| PortError::Unavailable(e.to_string()))?;
        Ok(Box::new(session.named(&self.name())))
    }
    async fn attach(
        &self,
        object: &TerraformObject,
        runner: &str,
    ) -> Result<Box<dyn RunnerSession>, PortError> {
        if runner != self.name() {
            return Err(PortError::NotFound(format!("no runner {runner}")));
        }
        self.start(object, RunnerRole::Plan).await
    }
}

#[test_case(Binary::Terraform ; "terraform")]
#[test_case(Binary::Tofu ; "tofu")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_stopped_mid_apply_is_replaced_and_the_apply_happens_once(binary: Binary) {
    let pki = pki();
    let runner = start_runner(server_tls(&pki, "team-a")).await;
    let tree = tempfile::tempdir().unwrap();
    let marker = tree.path().join("marker");
    let config_dir = tree.path().join("infra");
    std::fs::create_dir(&config_dir).unwrap();
    std::fs::write(config_dir.join("main.tf"), slow_config(&marker)).unwrap();

    let world = FakeWorld::new(tfops_core::Timestamp::now());
    let mut o = object_run_by("", binary);
    o.spec.approve_plan = "auto".into();
    let key = world.create(o);
    let mut ports = world.ports();
    ports.source = Arc::new(Tree(config_dir.clone()));
    ports.runner = Arc::new(Remote {
        addr: runner.addr,
        tls: client_tls(&pki, "team-a"),
        sessions: Default::default(),
    });
    let driver = Driver::new(ports);

    // The first driver (a controller about to be evicted) runs until the apply is recorded
    // as under way, then goes away.
    {
        let first = driver.reconcile(world.object(&key).unwrap(), vec![], vec![]);
        tokio::pin!(first);
        loop {
            tokio::select! {
                done = &mut first => panic!("the apply finished before the restart: {done:?}"),
                () = tokio::time::sleep(Duration::from_millis(20)) => {
                    let recorded = world.object(&key).unwrap().status.active_run.is_some();
                    if recorded && marker.exists() {
                        break;
                    }
                }
            }
        }
    }
    let left = world.object(&key).unwrap().status;
    let active = left.active_run.clone().expect("recorded before the apply");
    assert!(left.last_applied_revision.is_none());

    // A new driver takes the object as the store has it.
    let report = driver
        .reconcile(world.object(&key).unwrap(), vec![], vec![])
        .await
        .unwrap();
    let status = world.object(&key).unwrap().status;
    let ready = conditions::find(&status.conditions, ConditionType::Ready).unwrap();
    assert_eq!(ready.reason, "TerraformAppliedSucceed", "{}", ready.message);
    assert!(
        ready.message.contains(&active.run_id),
        "says it attached to {}: {}",
        active.run_id,
        ready.message
    );
    assert!(status.active_run.is_none());
    assert_eq!(status.available_outputs, vec!["id".to_string()]);
    let applied = std::fs::read_to_string(&marker).unwrap();
    assert_eq!(applied.lines().count(), 1, "applied once: {applied:?}");
    assert!(
        !report
            .records
            .iter()
            .any(|r| r.step == tfops_core::reconcile::StepKind::Plan),
        "the new driver did not plan again: {:?}",
        report.records
    );
}

/// A TCP proxy on 127.0.0.1:0 to `to`; `cut()` breaks the connections open now (new ones are
/// still forwarded), like a network blip or a restarted kube-proxy.
struct Proxy {
    addr: SocketAddr,
    open: Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>>,
    _accept: tokio::task::JoinHandle<()>,
}

impl Proxy {
    async fn start(to: SocketAddr) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let open: Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>> = Arc::default();
        let tasks = open.clone();
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let task = tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(to).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                tasks.lock().unwrap().push(task);
            }
        });
        Self {
            addr,
            open,
            _accept: accept,
        }
    }

    fn cut(&self) {
        for task in self.open.lock().unwrap().drain(..) {
            task.abort();
        }
    }
}

#[test_case(Binary::Terraform ; "terraform")]
#[test_case(Binary::Tofu ; "tofu")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_breaks_mid_apply_is_re_attached_and_the_apply_counts_once(binary: Binary) {
    let pki = pki();
    let runner = start_runner(server_tls(&pki, "team-a")).await;
    let proxy = Proxy::start(runner.addr).await;
    let tree = tempfile::tempdir().unwrap();
    let marker = tree.path().join("marker");
    std::fs::write(tree.path().join("main.tf"), slow_config(&marker)).unwrap();
    let client = RunnerClient::connect_with(
        &format!("https://{}", proxy.addr),
        &client_tls(&pki, "team-a"),
        tfops_runner::client::ClientConfig {
            reattach_backoff: Duration::from_millis(100),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let mut s = Session::start(client, "blip").await.unwrap();
    let request = tfops_core::ports::SetupRequest {
        object: object_run_by("", binary),
        artifact: artifact(tree.path()),
        inputs: Default::default(),
    };
    s.setup(&request).await.unwrap();
    s.init().await.unwrap();
    let plan = tfops_core::ports::PlanRequest {
        kind: tfops_core::ports::PlanKind::Normal,
        targets: vec![],
        parallelism: 0,
    };
    s.plan(&plan).await.unwrap();
    let apply = tokio::spawn(async move { s.apply("apply-blip").await });
    while !marker.exists() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    proxy.cut();
    let result = apply.await.unwrap();
    assert!(
        result.is_ok(),
        "re-attached and got the real result: {result:?}"
    );
    let applied = std::fs::read_to_string(&marker).unwrap();
    assert_eq!(applied.lines().count(), 1, "{applied:?}");
}
