//! The controller's composition in a cluster: the core's ports on the Kubernetes API
//! (`tfops-kube`), sources over Git and OCI with credentials from the cluster, runner Pods
//! dialled over mTLS with the controller's CA, and the `kube::runtime` controller that drives
//! them. The manager binary and embedders start it with [`run`].

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tfops_core::ports::{
    HealthChecker, PortError, Ports, ResolvedHealthCheck, RunnerPort, SystemClock,
};
use tfops_kube::controller::{self, Settings};
use tfops_kube::meta::Owner;
use tfops_kube::runner::pki::{ControllerPki, Validity};
use tfops_kube::{
    KubeCredentials, KubeEventSink, KubeInputs, KubeObjectWriter, KubeOutputsSink, KubePlanStore,
    KubePolicySource, KubeRunnerPort, KubeStateAdmin, RunnerSettings,
};

use crate::sources::{CredentialSource, RemoteSources};

/// What the controller is configured with (the manager's flags).
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// The controller's own namespace: its CA Secret lives there.
    pub controller_namespace: String,
    /// The CA Secret's name.
    pub ca_secret: String,
    /// Certificate lifetimes (`--ca-validity-duration`).
    pub validity: Validity,
    /// The runner image (`RUNNER_POD_IMAGE`).
    pub runner_image: String,
    /// How long a runner Pod may take to become Ready (`--runner-creation-timeout`).
    pub runner_creation_timeout: Duration,
    /// Argo CD's namespace when its repository credentials may be used
    /// (`--enable-argocd-credentials`).
    pub argocd_namespace: Option<String>,
    /// Where Git repositories are cached.
    pub git_cache: PathBuf,
    /// The name events are reported under (`reportingController`) and this instance.
    pub reporter: (String, String),
    /// How often the CA's expiry is checked (`--cert-rotation-check-frequency`).
    pub cert_rotation_check: Duration,
    /// The largest gRPC message to and from runners (`--runner-grpc-max-message-size`).
    pub runner_max_message: usize,
    /// Each Terraform command's timeout when the object sets none (`--default-timeout`).
    pub default_timeout: Duration,
    /// How long past a command's timeout a silent runner is given up
    /// (`--runner-deadline-margin`).
    pub runner_deadline_margin: Duration,
    /// The port runner Pods serve gRPC on (`--runner-grpc-port`).
    pub runner_grpc_port: u16,
    /// Namespaces to watch, concurrency, retry wait.
    pub controller: Settings,
    /// Plans pull requests ([`crate::pulls`]) when set: at the source poll interval, and when
    /// this asks (the forge's webhooks).
    pub pull_requests: Option<tfops_kube::controller::PollNow>,
    /// What the pull-request loop counts.
    pub pull_metrics: crate::pulls::PullMetrics,
}

impl ClusterOptions {
    /// Defaults for a controller in `namespace` using `runner_image`.
    pub fn new(namespace: &str, runner_image: &str) -> Self {
        Self {
            controller_namespace: namespace.to_string(),
            ca_secret: "tfops-ca".into(),
            validity: Validity::default(),
            runner_image: runner_image.to_string(),
            runner_creation_timeout: Duration::from_secs(120),
            argocd_namespace: None,
            git_cache: std::env::temp_dir().join("tfops-git-cache"),
            reporter: ("tfops".into(), "tfops".into()),
            cert_rotation_check: Duration::from_secs(1800),
            runner_max_message: tfops_runner::client::DEFAULT_MAX_MESSAGE,
            default_timeout: tfops_runner::client::DEFAULT_TIMEOUT,
            runner_deadline_margin: Duration::from_secs(300),
            runner_grpc_port: tfops_kube::runner::pod::GRPC_PORT,
            controller: Settings::default(),
            pull_requests: None,
            pull_metrics: crate::pulls::PullMetrics::default(),
        }
    }
}

/// Source credentials from the cluster.
struct ClusterCredentials(KubeCredentials);

#[async_trait]
impl CredentialSource for ClusterCredentials {
    async fn secret(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<BTreeMap<String, Vec<u8>>>, PortError> {
        self.0.secret(namespace, name).await
    }

    async fn for_url(&self, url: &str) -> Result<Option<BTreeMap<String, Vec<u8>>>, PortError> {
        self.0.argocd(url).await
    }
}

/// Health checks from the controller (TCP, plain HTTP).
struct NetworkHealth;

#[async_trait]
impl HealthChecker for NetworkHealth {
    async fn check(&self, check: &ResolvedHealthCheck) -> Result<(), PortError> {
        crate::local::health::check(check).await
    }
}

/// What the controller runs on: every port, the event sink (which the controller tells
/// objects' uids) and the CA (which rotates).
pub struct Wiring {
    /// The ports.
    pub ports: Ports,
    /// The event sink among them.
    pub events: KubeEventSink,
    /// The CA.
    pub pki: Arc<ControllerPki>,
    /// Signs and checks the approvals merged pull requests carry to the apply.
    pub approval_key: tfops_kube::approval_key::ApprovalKey,
}

/// Every port of the controller.
///
/// # Errors
/// Loading or creating the CA.
pub async fn ports(client: &kube::Client, options: &ClusterOptions) -> Result<Wiring, PortError> {
    let pki = Arc::new(
        ControllerPki::load_or_create(
            client.clone(),
            &options.controller_namespace,
            &options.ca_secret,
            options.validity,
        )
        .await?,
    );
    // Beside the CA, where no runner reads: approvals carried across a merge are signed with it.
    let approval_key = tfops_kube::approval_key::ApprovalKey::load_or_create(
        client.clone(),
        &options.controller_namespace,
        &format!("{}-pull-approvals", options.ca_secret),
    )
    .await?;
    let mut runner = RunnerSettings::new(&options.runner_image);
    runner.creation_timeout = options.runner_creation_timeout;
    runner.client.max_message = options.runner_max_message;
    runner.client.default_timeout = options.default_timeout;
    runner.client.deadline_margin = options.runner_deadline_margin;
    // The controller's reconciles a user may stop; their runner sessions are told.
    runner.stops = Some(options.controller.stops.clone());
    runner.pod.grpc_port = options.runner_grpc_port;
    let credentials = KubeCredentials::new(client.clone(), options.argocd_namespace.clone());
    let events = KubeEventSink::new(
        client.clone(),
        kube::runtime::events::Reporter {
            controller: options.reporter.0.clone(),
            instance: Some(options.reporter.1.clone()),
        },
    );
    let owner = Owner::Lookup(client.clone());
    let ports = Ports {
        source: Arc::new(RemoteSources::new(
            &options.git_cache,
            Arc::new(ClusterCredentials(credentials)),
        )),
        inputs: Arc::new(KubeInputs::new(client.clone())),
        runner: Arc::new(KubeRunnerPort::new(client.clone(), pki.clone(), runner)),
        // Runner Pods store plans and write outputs themselves; these stores only remove
        // what is left when an object is deleted without a runner.
        // The controller deletes no Secret (its role has no such right): runners write and
        // remove plans and outputs, and what a deleted object leaves goes with it by its owner
        // reference.
        plans: Arc::new(
            KubePlanStore::new(client.clone(), owner.clone())
                .leaving_secrets_to_garbage_collection()
                .with_approval_key(approval_key.clone()),
        ),
        outputs: Arc::new(
            KubeOutputsSink::new(client.clone(), owner).leaving_deletes_to_garbage_collection(),
        ),
        state: Arc::new(KubeStateAdmin::new(client.clone())),
        health: Arc::new(NetworkHealth),
        events: Arc::new(events.clone()),
        objects: Arc::new(KubeObjectWriter::new(client.clone())),
        clock: Arc::new(SystemClock),
        policies: Arc::new(KubePolicySource::new(client.clone())),
    };
    Ok(Wiring {
        ports,
        events,
        pki,
        approval_key,
    })
}

/// [`ports`], waiting out an API server that cannot be reached (a dropped connection, a 5xx)
/// rather than failing: a replica that has just won its Lease while the API server restarts
/// would otherwise exit and come back only in a crash loop (found by the soak, seed 2). A
/// refusal is waited out for the first minute too, as joining the election does: a
/// kube-apiserver just started refuses until its RBAC caches are filled. Anything else (a CA
/// Secret that is not one) fails at once. Each wait is logged, at most every ten seconds.
///
/// A leader that waits here longer than its Lease loses its authority (the fence) and its
/// leadership, which ends it; an embedder without an election waits as long as it takes.
///
/// # Errors
/// As [`ports`], but never [`PortError::Unavailable`].
pub async fn ports_when_reachable(
    client: &kube::Client,
    options: &ClusterOptions,
) -> Result<Wiring, PortError> {
    let began = std::time::Instant::now();
    let mut wait = Duration::from_millis(500);
    loop {
        let error = match ports(client, options).await {
            Ok(wiring) => return Ok(wiring),
            Err(error @ PortError::Unavailable(_)) => error,
            Err(error @ PortError::AccessDenied(_)) if began.elapsed() < REFUSALS_WAITED => error,
            Err(error) => return Err(error),
        };
        tracing::warn!(%error, retry_in = ?wait, "cannot read the runner CA and the approval key yet; trying again");
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(Duration::from_secs(10));
    }
}

/// How long refusals of the API server are taken for one that has just started.
const REFUSALS_WAITED: Duration = Duration::from_secs(60);

/// Runs the controller until `shutdown` resolves.
///
/// # Errors
/// Building the ports (the CA).
pub async fn run(
    client: kube::Client,
    options: ClusterOptions,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) -> Result<(), PortError> {
    run_with_runner(client, options, shutdown, None).await
}

/// [`run`] with another [`RunnerPort`] than runner Pods, when given: for embedders with
/// runners of their own, and for the scale benchmark's runner double.
///
/// # Errors
/// Building the ports (the CA).
pub async fn run_with_runner(
    client: kube::Client,
    options: ClusterOptions,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
    runner: Option<Arc<dyn RunnerPort>>,
) -> Result<(), PortError> {
    let mut wiring = ports_when_reachable(&client, &options).await?;
    if let Some(runner) = runner {
        wiring.ports.runner = runner;
    }
    // The CA is renewed a look-ahead before it expires; runners get the new trust bundle with
    // their next TLS Secret, and kept Pods are replaced when it changes.
    let (pki, every) = (wiring.pki.clone(), options.cert_rotation_check);
    let rotation = tokio::spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            match pki.rotate_if_due().await {
                Ok(true) => tracing::info!("the runner CA was rotated"),
                Ok(false) => {}
                Err(e) => tracing::warn!(error = %e, "could not rotate the runner CA"),
            }
        }
    });
    let pulls = options.pull_requests.clone().map(|nudge| {
        let c = &options.controller;
        let settings = crate::pulls::PullSettings {
            interval: c.source_poll_interval,
            shard: c.shard.clone(),
            concurrency: usize::from(c.concurrency).max(1),
            nudge,
            metrics: options.pull_metrics.clone(),
            stores: c.stores.clone(),
            approval_key: wiring.approval_key.clone(),
        };
        tokio::spawn(crate::pulls::run(
            client.clone(),
            wiring.ports.clone(),
            settings,
        ))
    });
    controller::run(
        client,
        wiring.ports,
        Some(wiring.events),
        options.controller,
        shutdown,
    )
    .await;
    rotation.abort();
    if let Some(pulls) = pulls {
        pulls.abort();
    }
    Ok(())
}
