//! Runner Pods: the [`RunnerPort`] on Kubernetes. Starting a run makes sure the
//! namespace has a current TLS Secret, creates the `<name>-tf-runner` Pod (or reuses a kept
//! one that is Ready and has the current certificate), waits until it is Ready within the
//! creation timeout, and dials it by Pod IP over mutual TLS. A Pod that fails to start says
//! why at once (image, missing Secret, quota); one that dies mid-run is reported by the
//! session with the container's reason.

pub mod pki;
pub mod pod;
pub mod pod_state;
pub mod session;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use kube::runtime::wait::await_condition;
use tfops_core::api::{RunnerRole, TerraformObject};
use tfops_core::naming;
use tfops_core::ports::{PortError, RunnerPort, RunnerSession};
use tfops_runner::client::{ClientConfig, RunnerClient, Session};

use crate::error::{is_not_found, port_error};
use pki::ControllerPki;
use pod::{ANNOTATION_TLS_VERSION, PodSettings, runner_pod};
use pod_state::{death, is_ready, pod_ip, summary};
use session::{PodSession, PodWatch};

/// How runner Pods are made and reached.
#[derive(Debug, Clone)]
pub struct RunnerSettings {
    /// Image and forwarded environment.
    pub pod: PodSettings,
    /// How long a new Pod may take to become Ready (`--runner-creation-timeout`).
    pub creation_timeout: Duration,
    /// The gRPC client's settings.
    pub client: ClientConfig,
    /// The reconciles a user may stop ([`crate::controller::Settings::stops`]): a session
    /// of one of them stops its command when told.
    pub stops: Option<Arc<crate::stops::Stops>>,
}

impl RunnerSettings {
    /// Settings with `image` and the defaults (two minutes to become Ready).
    pub fn new(image: &str) -> Self {
        Self {
            pod: PodSettings::from_env(image),
            creation_timeout: Duration::from_secs(120),
            client: ClientConfig::default(),
            stops: None,
        }
    }
}

/// Runner Pods in the objects' namespaces.
#[derive(Clone)]
pub struct KubeRunnerPort {
    client: kube::Client,
    pki: Arc<ControllerPki>,
    settings: RunnerSettings,
}

impl std::fmt::Debug for KubeRunnerPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeRunnerPort")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// Why creating the Pod was refused, in the reason's terms: a quota is
/// [`PortError::QuotaExhausted`], said as the queue says it ([`crate::quota::refusal`]); a
/// missing ServiceAccount (the admission plugin's 403) [`PortError::NotFound`].
fn creation_error(namespace: &str, doing: &str, e: kube::Error) -> PortError {
    if let kube::Error::Api(s) = &e
        && s.code == 403
    {
        if s.message.contains("service account") {
            return PortError::NotFound(format!("{doing}: {}", s.message));
        }
        if s.message.contains("exceeded quota") {
            return PortError::QuotaExhausted(crate::quota::refusal(namespace, &s.message));
        }
    }
    port_error(doing, e)
}

impl KubeRunnerPort {
    /// Runner Pods made with `client`, certificates from `pki`.
    pub fn new(client: kube::Client, pki: Arc<ControllerPki>, settings: RunnerSettings) -> Self {
        Self {
            client,
            pki,
            settings,
        }
    }

    fn pods(&self, namespace: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// Waits until `name` is gone (a Pod being deleted still holds its name).
    async fn wait_gone(&self, pods: &Api<Pod>, name: &str) -> Result<(), PortError> {
        let gone = await_condition(pods.clone(), name, |p: Option<&Pod>| p.is_none());
        match tokio::time::timeout(self.settings.creation_timeout, gone).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(PortError::Unavailable(format!(
                "waiting for the old runner Pod {name} to go: {e}"
            ))),
            Err(_) => Err(PortError::Unavailable(format!(
                "the old runner Pod {name} was still terminating after {} s",
                self.settings.creation_timeout.as_secs()
            ))),
        }
    }

    /// Waits until the Pod is Ready, or fails at once when it cannot become so.
    async fn wait_ready(
        &self,
        pods: &Api<Pod>,
        namespace: &str,
        name: &str,
    ) -> Result<Pod, PortError> {
        let settled = await_condition(pods.clone(), name, |p: Option<&Pod>| {
            p.is_none_or(|p| is_ready(p) || death(p).is_some())
        });
        let timeout = self.settings.creation_timeout;
        let found = match tokio::time::timeout(timeout, settled).await {
            Ok(Ok(p)) => p,
            Ok(Err(e)) => {
                return Err(PortError::Unavailable(format!(
                    "waiting for runner Pod {namespace}/{name}: {e}"
                )));
            }
            Err(_) => {
                let now = pods.get_opt(name).await.ok().flatten();
                return Err(PortError::Unavailable(format!(
                    "runner Pod {namespace}/{name} did not become Ready within {} s ({})",
                    timeout.as_secs(),
                    now.as_ref().map_or_else(|| "gone".into(), summary)
                )));
            }
        };
        let Some(pod) = found else {
            return Err(PortError::Unavailable(format!(
                "runner Pod {namespace}/{name} was deleted while starting"
            )));
        };
        if let Some(why) = death(&pod) {
            return Err(PortError::Unavailable(format!(
                "runner Pod {namespace}/{name} cannot run: {why}"
            )));
        }
        Ok(pod)
    }

    /// Dials the Ready Pod's runner.
    async fn dial(&self, namespace: &str, pod: &Pod) -> Result<RunnerClient, PortError> {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let ip = pod_ip(pod).ok_or_else(|| {
            PortError::Unavailable(format!("runner Pod {namespace}/{name} has no IP yet"))
        })?;
        let tls = self.pki.client_tls(namespace).await?;
        let port = pod_state::grpc_port(pod).unwrap_or(self.settings.pod.grpc_port);
        let endpoint = format!("https://{ip}:{port}");
        RunnerClient::connect_with(&endpoint, &tls, self.settings.client.clone())
            .await
            .map_err(|e| {
                PortError::Unavailable(format!(
                    "connecting to runner Pod {namespace}/{name} at {endpoint}: {e}"
                ))
            })
    }

    /// Waits (at most the creation timeout) until the runner in `pod` runs no command. A
    /// runner that cannot be reached counts as idle: it is replaced anyway.
    async fn wait_idle(&self, namespace: &str, pod: &Pod) -> Result<(), PortError> {
        let Ok(mut client) = self.dial(namespace, pod).await else {
            return Ok(());
        };
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let deadline = tokio::time::Instant::now() + self.settings.creation_timeout;
        loop {
            let Ok(info) = client.info_reply().await else {
                return Ok(());
            };
            if info.running_run_id.is_empty() {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(PortError::Unavailable(format!(
                    "runner Pod {namespace}/{name} still runs {} of an earlier session after {} s; trying again later",
                    info.running_run_id,
                    self.settings.creation_timeout.as_secs()
                )));
            }
            tracing::info!(pod = %name, run = %info.running_run_id, "waiting for a run of an earlier session to end");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Whether the runner of the running Pod runs nothing now; `Unavailable` when it runs a
    /// command, or cannot be asked (not Ready, not answering: it may be busy all the same).
    async fn idle_now(&self, namespace: &str, pod: &Pod) -> Result<(), PortError> {
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let unknown = |why: String| {
            PortError::Unavailable(format!(
                "runner Pod {namespace}/{name} may still run a command ({why}); ended later"
            ))
        };
        if !is_ready(pod) {
            return Err(unknown(format!("not Ready: {}", summary(pod))));
        }
        // Asked within a bound: a frozen runner must not hold the reconcile that asks.
        let asked = tokio::time::timeout(ASK_IDLE_WITHIN, async {
            let mut client = self.dial(namespace, pod).await?;
            client
                .info_reply()
                .await
                .map_err(|e| PortError::Unavailable(e.to_string()))
        })
        .await;
        let info = match asked {
            Ok(Ok(info)) => info,
            Ok(Err(e)) => return Err(unknown(e.to_string())),
            Err(_) => {
                return Err(unknown(format!(
                    "no answer within {} s",
                    ASK_IDLE_WITHIN.as_secs()
                )));
            }
        };
        if info.running_run_id.is_empty() {
            return Ok(());
        }
        Err(PortError::Unavailable(format!(
            "runner Pod {namespace}/{name} still runs {} of an earlier session; ended later",
            info.running_run_id
        )))
    }

    /// Dials the Ready Pod and opens a session on it; `attaching`: to a run an earlier
    /// session started (so the session asks the runner what it is now, not at `init`).
    async fn connect(
        &self,
        object: &TerraformObject,
        role: RunnerRole,
        pod: &Pod,
        delete_after: bool,
        attaching: bool,
    ) -> Result<Box<dyn RunnerSession>, PortError> {
        let namespace = &object.metadata.namespace;
        let name = pod.metadata.name.clone().unwrap_or_default();
        let client = self.dial(namespace, pod).await?;
        // Run ids unique to this session: a kept Pod remembers the runs of earlier ones.
        let prefix = format!(
            "{}-{}",
            naming::shorten(&object.metadata.name, 40),
            jiff::Timestamp::now().as_millisecond()
        );
        let mut session = Session::start(client, &prefix)
            .await
            .map_err(|e| PortError::Unavailable(e.to_string()))?
            .named(&name);
        if attaching {
            session.learn().await?;
        }
        // A stop is for the object's own run, not for a pull request's plan of it.
        let stops = self.settings.stops.as_ref();
        let stops = stops.filter(|_| role != RunnerRole::PullRequest);
        if let Some(stop) = stops.and_then(|s| s.signal(&object.key())) {
            session.stop_on(stop);
        }
        let watch = PodWatch::new(
            self.pods(namespace),
            namespace,
            &name,
            pod.metadata.uid.as_deref().unwrap_or_default(),
        );
        let session = PodSession::new(session, watch, delete_after, pod_state::identity(pod));
        Ok(Box::new(if role == RunnerRole::PullRequest {
            session.handing_state(crate::state::KubeStateAdmin::new(self.client.clone()))
        } else {
            session
        }))
    }
}

#[async_trait]
impl RunnerPort for KubeRunnerPort {
    async fn start(
        &self,
        object: &TerraformObject,
        role: RunnerRole,
    ) -> Result<Box<dyn RunnerSession>, PortError> {
        let namespace = &object.metadata.namespace;
        let name = object.runner_pod_name(role);
        let version = self.pki.ensure_runner_secret(namespace).await?;
        let pods = self.pods(namespace);
        let mut pod = runner_pod(object, role, &self.settings.pod, &version)
            .map_err(|e| PortError::Invalid(format!("spec.runner.podTemplate: {e}")))?;
        let wanted = spec_digest(&pod);
        pod.metadata
            .annotations
            .get_or_insert_default()
            .insert(ANNOTATION_SPEC_DIGEST.into(), wanted.clone());
        // The apply runner's credentials never outlive its run: it is never kept. Nor is a
        // pull request's (it ran code no one merged).
        let keep = !object.spec.runner.always_cleanup
            && !is_apply_runner(object, role)
            && role != RunnerRole::PullRequest;
        let doing = format!("creating runner Pod {namespace}/{name}");
        if let Some(existing) = pods
            .get_opt(&name)
            .await
            .map_err(|e| port_error(&format!("reading runner Pod {namespace}/{name}"), e))?
        {
            if is_ready(&existing) && death(&existing).is_none() {
                // Another session may still run a command there (a manager that stopped or
                // lost the object to another shard mid-plan): wait for it, never race it.
                self.wait_idle(namespace, &existing).await?;
            }
            let annotation = |key: &str| {
                existing
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(key))
                    .cloned()
            };
            // A kept Pod made from another spec (another ServiceAccount, other credentials)
            // is never reused: it would run as an identity the object no longer names.
            let current = annotation(ANNOTATION_TLS_VERSION) == Some(version.clone())
                && annotation(ANNOTATION_SPEC_DIGEST) == Some(wanted.clone());
            if keep && current && is_ready(&existing) && death(&existing).is_none() {
                return self.connect(object, role, &existing, false, false).await;
            }
            // Left over, exited, made from another spec, or holding a rotated certificate:
            // replaced. One already being deleted (the last run's, its container still
            // stopping) is only waited for.
            if existing.metadata.deletion_timestamp.is_none() {
                let uid = existing.metadata.uid.clone().unwrap_or_default();
                PodWatch::new(pods.clone(), namespace, &name, &uid)
                    .delete()
                    .await?;
            }
            self.wait_gone(&pods, &name).await?;
        }
        pods.create(&PostParams::default(), &pod)
            .await
            .map_err(|e| creation_error(namespace, &doing, e))?;
        let ready = self.wait_ready(&pods, namespace, &name).await;
        let ready = match ready {
            Ok(p) => p,
            Err(e) => {
                // A Pod that will not serve is not left behind.
                if let Ok(Some(p)) = pods.get_opt(&name).await {
                    let uid = p.metadata.uid.unwrap_or_default();
                    let _ = PodWatch::new(pods.clone(), namespace, &name, &uid)
                        .delete()
                        .await;
                }
                return Err(e);
            }
        };
        self.connect(object, role, &ready, !keep, false).await
    }

    async fn attach(
        &self,
        object: &TerraformObject,
        runner: &str,
    ) -> Result<Box<dyn RunnerSession>, PortError> {
        let namespace = &object.metadata.namespace;
        let pods = self.pods(namespace);
        let pod = match pods.get(runner).await {
            Ok(p) => p,
            Err(e) if is_not_found(&e) => {
                return Err(PortError::NotFound(format!(
                    "runner Pod {namespace}/{runner} is gone"
                )));
            }
            Err(e) => {
                return Err(port_error(
                    &format!("reading runner Pod {namespace}/{runner}"),
                    e,
                ));
            }
        };
        if let Some(why) = death(&pod) {
            return Err(PortError::NotFound(format!(
                "runner Pod {namespace}/{runner} {why}"
            )));
        }
        if !is_ready(&pod) {
            return Err(PortError::Unavailable(format!(
                "runner Pod {namespace}/{runner} is not Ready ({})",
                summary(&pod)
            )));
        }
        let role = pod_state::role(&pod).unwrap_or(RunnerRole::Plan);
        let delete_after = object.spec.runner.always_cleanup
            || matches!(role, RunnerRole::Apply | RunnerRole::PullRequest);
        self.connect(object, role, &pod, delete_after, true).await
    }

    /// Deletes the object's plan and apply runner Pods that are left (by their names, whatever
    /// `spec.runner.apply` says now), but only one whose container has ended, has not started,
    /// or whose runner says it runs nothing: one that runs a command (an earlier session's,
    /// perhaps a fenced manager's) or cannot be asked fails the call, and is asked again
    /// later. A pull request's runner Pod is the pull request planner's, not this.
    async fn release(&self, object: &TerraformObject) -> Result<(), PortError> {
        let namespace = &object.metadata.namespace;
        let pods = self.pods(namespace);
        let name = &object.metadata.name;
        let names = [
            naming::runner_pod_name(name),
            naming::apply_runner_pod_name(name),
        ];
        for name in names {
            let found = pods
                .get_opt(&name)
                .await
                .map_err(|e| port_error(&format!("reading runner Pod {namespace}/{name}"), e))?;
            let Some(pod) = found.filter(|p| p.metadata.deletion_timestamp.is_none()) else {
                continue;
            };
            let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
            if death(&pod).is_none() && phase != Some("Pending") {
                self.idle_now(namespace, &pod).await?;
            }
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            PodWatch::new(pods.clone(), namespace, &name, &uid)
                .delete()
                .await?;
            tracing::info!(pod = %name, namespace = %namespace, "ended a runner Pod left by an earlier run");
        }
        Ok(())
    }
}

/// How long a left runner is given to say whether it runs a command before it is released.
const ASK_IDLE_WITHIN: Duration = Duration::from_secs(15);

/// The annotation with the digest of the Pod spec a runner Pod was made from.
pub const ANNOTATION_SPEC_DIGEST: &str = "infra.argocd.io/spec-digest";

/// SHA-256 of the Pod's spec as tfops made it.
fn spec_digest(pod: &Pod) -> String {
    let spec = serde_json::to_value(&pod.spec).unwrap_or_default();
    tfops_core::digest::sha256_hex(tfops_core::digest::canonical_json(&spec).as_bytes())
}

fn is_apply_runner(object: &TerraformObject, role: RunnerRole) -> bool {
    role == RunnerRole::Apply && object.spec.runner.splits_apply()
}
