//! The node agent: what a kubelet does that tests need, done as a client of the API server
//! only (it never touches etcd or the server's internals).
//!
//! - It registers a Node (Ready, `InternalIP` 127.0.0.1, capacity, the port of its log
//!   server in `daemonEndpoints`) and renews its Lease in `kube-node-lease`, as a kubelet's
//!   heartbeat does, so the node lifecycle controller keeps it Ready.
//! - It binds Pods nobody scheduled to itself (`pods/binding`), and runs the Pods bound to it:
//!   each Pod's first container as a local process, its image looked up in
//!   [`NodeConfig::images`] (an image → binary map: real containers come later).
//! - ServiceAccount tokens come from the TokenRequest API, bound to the Pod, and are projected
//!   with `ca.crt` and `namespace` where the Pod's volume says (the ServiceAccount admission
//!   plugin's `kube-api-access-*` volume at `/var/run/secrets/kubernetes.io/serviceaccount`).
//!   Running as root with `unshare` (util-linux) at hand, the process gets a private mount
//!   namespace with that directory bind-mounted at its real path, so a client's in-cluster
//!   configuration (kube-rs, client-go, Terraform's kubernetes backend) works as in a Pod;
//!   otherwise `TFOPS_KUBECONFIG` names a kubeconfig with the same token.
//! - It writes `pods/status` as a kubelet does, honours `deletionTimestamp` and the grace
//!   period, and serves container logs to the API server for `pods/log`.
//!
//! What it does not do: no network namespace (a Pod's address is a loopback address of its
//! own, `127.x.y.z`, given to the process as `TFOPS_LISTEN`), no images, no probes (a Pod with
//! a container port is Ready once the port accepts connections); init containers run in order
//! before the Pod's (first) container, which is the only one run.

mod cgroup;
mod container;
mod container_run;
mod leftovers;
mod logs;
mod pod;
mod podman;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};

pub use container::image_name;

/// A shell command that grows to 2 GiB (far past any limit of the tests, and bounded should a
/// limit not be enforced), touching every page it takes itself (a string doubled in the
/// shell's own memory). At a memory limit the page fault that meets it is the process's own,
/// so the OOM kill takes it on cgroup v1 and v2 alike (on v1 the agent turns the group's killer
/// off and kills the group itself; memory the kernel takes in a system call is refused there
/// instead: a `tail /dev/zero`, whose `read()` fills its buffer, fails with EFAULT).
pub const MEMORY_HOG: &str = "i=0; x=x; while [ $i -lt 31 ]; do x=$x$x; i=$((i+1)); done";

/// The host's address as a real container reaches it (podman's default network's gateway);
/// `None` without podman.
pub fn container_gateway() -> Option<std::net::Ipv4Addr> {
    podman::gateway()
}

/// Whether podman is here to run real containers.
pub fn containers_available() -> bool {
    podman::available()
}

/// Why the node agent could not start.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// Registering the Node failed.
    #[error("registering the Node: {0}")]
    Register(#[from] kube::Error),
    /// The log server could not be started.
    #[error("starting the log server: {0}")]
    Logs(#[from] std::io::Error),
    /// Its serving certificate could not be made.
    #[error(transparent)]
    Pki(#[from] crate::pki::PkiError),
    /// TLS could not be configured.
    #[error("configuring TLS: {0}")]
    Tls(#[from] rustls::Error),
}

/// What the node agent runs Pods with.
#[derive(Debug, Clone, Default)]
pub struct NodeConfig {
    /// The Node's name (default `node-1`).
    pub name: Option<String>,
    /// Image name (without tag or digest) → the local binary that stands for it.
    pub images: BTreeMap<String, PathBuf>,
    /// Where Pod directories go.
    pub root: PathBuf,
    /// Environment every process-run container starts with (`PATH`, `TFOPS_TERRAFORM`, ...),
    /// as an image's own environment would.
    pub base_env: BTreeMap<String, String>,
    /// Run images not in [`NodeConfig::images`] as real containers with podman (see the
    /// `podman` module); the API server then also listens on the container network's gateway.
    pub containers: bool,
}

/// A container the agent runs: a local process, or a real container.
#[derive(Debug)]
struct Running {
    /// The container's first process (for a real container: its `podman run`).
    pid: i32,
    /// The real container's name, when it is one.
    container: Option<String>,
    terminating: bool,
}

impl Running {
    /// SIGKILL to every process of the container; whether there was one to kill.
    fn kill(&self) -> bool {
        match &self.container {
            Some(name) => podman::kill(name, "KILL"),
            None => pod::kill_group(self.pid),
        }
    }

    /// SIGTERM to the container's first process, as a kubelet's stop does.
    fn terminate(&self) {
        match &self.container {
            Some(name) => {
                podman::kill(name, "TERM");
            }
            None => {
                let pid = nix::unistd::Pid::from_raw(self.pid);
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            }
        }
    }
}

/// The agent's state, shared by its tasks and the test's handle.
#[derive(Default)]
struct State {
    /// Running containers by Pod uid.
    running: Mutex<HashMap<String, Running>>,
    /// Pods started already (uid → `namespace/name`).
    started: Mutex<HashMap<String, String>>,
    /// Every Pod the agent ever started (uid → `namespace/name`), to look for what each left.
    ever: Mutex<HashMap<String, String>>,
    /// Log files by `namespace/name` (the newest Pod of that name).
    logs: Mutex<HashMap<String, PathBuf>>,
    /// How deleted Pods stopped: `true` on SIGTERM, `false` killed when the grace period ran
    /// out; by `namespace/name`.
    graceful: Mutex<HashMap<String, bool>>,
    /// Whether the Node is cordoned (`spec.unschedulable`): no Pod is bound to it then.
    cordoned: std::sync::atomic::AtomicBool,
    /// Set when the agent stops: no container starts (or restarts) any more.
    stopped: std::sync::atomic::AtomicBool,
    /// Pods (by uid) deleted or being deleted: a container not yet started never starts.
    deleted: Mutex<std::collections::HashSet<String>>,
}

/// A lock that survives a panicked holder (the maps stay consistent: each write is one
/// insert or remove).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What a Pod's process is started with, besides its own spec.
struct Context {
    client: kube::Client,
    config: NodeConfig,
    node: String,
    /// The API server's address as a Pod reaches it (`KUBERNETES_SERVICE_HOST`/`PORT`).
    api_host: String,
    /// The same for a real container: the container network's gateway.
    container_api_host: Option<String>,
    api_port: u16,
    /// A kubeconfig for a bearer token (the fallback to in-cluster configuration).
    kubeconfig: Box<dyn Fn(&str) -> String + Send + Sync>,
}

/// The running node agent; see the module's documentation.
pub struct NodeAgent {
    name: String,
    state: Arc<State>,
    client: kube::Client,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for NodeAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeAgent")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

fn pod_ref(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

impl NodeAgent {
    /// Registers the Node, starts the log server and the Pod loop.
    ///
    /// # Errors
    /// [`NodeError`].
    pub async fn start(
        client: kube::Client,
        cluster: &crate::TestCluster,
        config: NodeConfig,
    ) -> Result<Self, NodeError> {
        let name = config.name.clone().unwrap_or_else(|| "node-1".into());
        if config.containers {
            podman::pin_bridge();
            podman::remove_orphans();
        }
        let state = Arc::new(State::default());
        let (logs_port, logs_task) = logs::serve(state.clone(), &crate::pki::Ca::new()?).await?;
        register(&client, &name, logs_port).await?;
        let (server, ca_pem) = (cluster.server.clone(), cluster.ca_pem.clone());
        let context = Arc::new(Context {
            client: client.clone(),
            config,
            node: name.clone(),
            api_host: "127.0.0.1".into(),
            container_api_host: cluster.pod_gateway.map(|g| g.to_string()),
            api_port: cluster.port,
            kubeconfig: Box::new(move |token| {
                crate::kubeconfig::text(
                    &server,
                    &ca_pem,
                    &crate::kubeconfig::Credentials::Token(token),
                )
            }),
        });
        let heartbeat = tokio::spawn(heartbeat(client.clone(), name.clone()));
        let node = tokio::spawn(watch_node(context.clone(), state.clone()));
        let pods = tokio::spawn(run(context, state.clone()));
        Ok(Self {
            name,
            state,
            client,
            tasks: vec![logs_task, heartbeat, node, pods],
        })
    }

    /// The Node's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Kills the Pod's container now, every process of it (SIGKILL: it dies mid-run, as when
    /// its process crashes or a node's OOM killer takes it). Whether one was running.
    pub fn kill(&self, namespace: &str, name: &str) -> bool {
        let Some(uid) = self.uid_of(namespace, name) else {
            return false;
        };
        lock(&self.state.running)
            .get(&uid)
            .is_some_and(Running::kill)
    }

    /// Sets the memory limit of the Pod's container to `bytes` now, as an in-place resize
    /// does; a container already using more is killed by the kernel's OOM killer and reported
    /// `OOMKilled`. Whether the limit took (`false`: no such Pod, or no memory cgroup here).
    pub fn set_memory_limit(&self, namespace: &str, name: &str, bytes: u64) -> bool {
        self.uid_of(namespace, name)
            .is_some_and(|uid| cgroup::set_limit(&uid, bytes))
    }

    fn uid_of(&self, namespace: &str, name: &str) -> Option<String> {
        lock(&self.state.started)
            .iter()
            .find(|(_, r)| **r == pod_ref(namespace, name))
            .map(|(uid, _)| uid.clone())
    }

    /// What the Pods this agent ran and that are not in `live` (uids the API server still
    /// lists) left on the host: their memory cgroups, processes in them, processes naming
    /// their containers (podman's monitor), and containers the agent still counts as running.
    /// Each is one line saying what and whose.
    pub fn leftovers(&self, live: &std::collections::HashSet<String>) -> Vec<String> {
        let ever = lock(&self.state.ever).clone();
        let running: std::collections::HashSet<String> =
            lock(&self.state.running).keys().cloned().collect();
        leftovers::find(&ever, live, &running)
    }

    /// Whether the last deleted Pod `namespace/name` stopped on SIGTERM (`Some(false)`: it
    /// was killed when its grace period ran out; `None`: no such deletion seen).
    pub fn stopped_by_sigterm(&self, namespace: &str, name: &str) -> Option<bool> {
        lock(&self.state.graceful)
            .get(&pod_ref(namespace, name))
            .copied()
    }

    /// Stops the agent and kills every container it runs.
    pub fn stop(self) {
        self.state
            .stopped
            .store(true, std::sync::atomic::Ordering::SeqCst);
        for t in &self.tasks {
            t.abort();
        }
        for c in lock(&self.state.running).values() {
            match &c.container {
                Some(name) => podman::remove(name),
                None => {
                    pod::kill_group(c.pid);
                }
            }
        }
        // Best effort: a memory cgroup is removed once its processes are gone.
        for uid in lock(&self.state.started).keys() {
            let _ = cgroup::remove(uid);
        }
        drop(self.client);
    }
}

/// Creates (or takes over) the Node, Ready.
async fn register(client: &kube::Client, name: &str, logs_port: u16) -> Result<(), kube::Error> {
    let nodes: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64", "node.kubernetes.io/instance-type": "tfops-test",
        }},
    }))
    .map_err(kube::Error::SerdeError)?;
    match nodes.create(&PostParams::default(), &node).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(e),
    }
    let status = json!({"status": {
        "capacity": {"cpu": "2", "memory": "24Gi", "pods": "250", "ephemeral-storage": "100Gi"},
        "allocatable": {"cpu": "2", "memory": "24Gi", "pods": "250", "ephemeral-storage": "100Gi"},
        "addresses": [
            {"type": "InternalIP", "address": "127.0.0.1"},
            {"type": "Hostname", "address": name},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": logs_port}},
        "nodeInfo": {
            "machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "",
            "osImage": "tfops node agent", "containerRuntimeVersion": "local-process://1",
            "kubeletVersion": format!("v{}", crate::KUBERNETES_VERSION), "kubeProxyVersion": "",
            "operatingSystem": "linux", "architecture": "amd64",
        },
        "conditions": node_conditions(),
    }});
    nodes
        .patch_status(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(status),
        )
        .await?;
    Ok(())
}

fn node_conditions() -> Value {
    let now = pod::now();
    json!([{
        "type": "Ready", "status": "True", "reason": "KubeletReady",
        "message": "tfops node agent is posting ready status",
        "lastHeartbeatTime": now, "lastTransitionTime": now,
    }])
}

/// Renews the Node's Lease and Ready condition every 10 s, as a kubelet's heartbeat does.
async fn heartbeat(client: kube::Client, name: String) {
    use k8s_openapi::api::coordination::v1::Lease;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let nodes: Api<Node> = Api::all(client);
    loop {
        let lease = json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "namespace": "kube-node-lease"},
            "spec": {"holderIdentity": name, "leaseDurationSeconds": 40,
                     "renewTime": jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()},
        });
        let _ = leases
            .patch(
                &name,
                &kube::api::PatchParams::apply("tfops-node-agent").force(),
                &kube::api::Patch::Apply(lease),
            )
            .await;
        let _ = nodes
            .patch_status(
                &name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(json!({"status": {"conditions": node_conditions()}})),
            )
            .await;
        tokio::time::sleep(Duration::from_secs(10)).await;
    }
}

/// Follows the Node's `spec.unschedulable` (`kubectl cordon`/`uncordon`): Pods that waited
/// while it was cordoned are bound once it is not.
async fn watch_node(context: Arc<Context>, state: Arc<State>) {
    use std::sync::atomic::Ordering;
    let nodes: Api<Node> = Api::all(context.client.clone());
    let config = watcher::Config::default().fields(&format!("metadata.name={}", context.node));
    let mut events = std::pin::pin!(watcher(nodes, config).backoff(Retry));
    while let Some(event) = events.next().await {
        let node = match event {
            Ok(watcher::Event::Apply(n) | watcher::Event::InitApply(n)) => n,
            _ => continue,
        };
        let cordoned = node.spec.and_then(|s| s.unschedulable).unwrap_or(false);
        state.cordoned.store(cordoned, Ordering::SeqCst);
        if cordoned {
            continue;
        }
        // Every Pod still unscheduled now, read from the API server (not remembered: a Pod
        // seen while cordoned may be noted after this event). The Node is read again after
        // the list: this event may be older than a `cordon` made before a listed Pod existed.
        let pods: Api<Pod> = Api::all(context.client.clone());
        let unscheduled = kube::api::ListParams::default().fields("spec.nodeName=");
        let Ok(list) = pods.list(&unscheduled).await else {
            continue;
        };
        if pod::cordoned(&context, &state).await {
            continue;
        }
        for p in list.items {
            let default = p
                .spec
                .as_ref()
                .and_then(|s| s.scheduler_name.as_deref())
                .is_none_or(|n| n == "default-scheduler");
            if !default || p.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let (Some(ns), Some(name), Some(uid)) =
                (p.metadata.namespace, p.metadata.name, p.metadata.uid)
            else {
                continue;
            };
            pod::bind(&context, &ns, &name, &uid).await;
        }
    }
}

/// Watches every Pod and acts on each change: bind, start, terminate.
async fn run(context: Arc<Context>, state: Arc<State>) {
    let pods: Api<Pod> = Api::all(context.client.clone());
    let mut events = std::pin::pin!(watcher(pods, watcher::Config::default()).backoff(Retry));
    while let Some(event) = events.next().await {
        let changed = match event {
            Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => vec![(p, false)],
            Ok(watcher::Event::Delete(p)) => vec![(p, true)],
            Ok(_) => continue,
            Err(e) => {
                tracing::debug!("pod watch: {e}");
                continue;
            }
        };
        for (p, gone) in changed {
            let Ok(value) = serde_json::to_value(&p) else {
                continue;
            };
            pod::sync(&context, &state, value, gone).await;
        }
    }
}

/// The node agent's watches look again half a second after an error: no hot loop while the
/// API server is away (a test kills it), and Pods started soon after it is back (client-go's
/// default, up to a minute, would make every such test wait on the node rather than on tfops).
struct Retry;

impl Iterator for Retry {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        Some(Duration::from_millis(500))
    }
}

impl kube::runtime::utils::Backoff for Retry {
    fn reset(&mut self) {}
}
