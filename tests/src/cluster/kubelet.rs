//! The kubelet stand-in: it binds Pods to its one node (`loopback`) and runs each Pod's first
//! container as a real local process, as a kubelet runs it in a container:
//! - the image names a local binary ([`KubeletConfig::images`]); the container's `args` are
//!   its arguments; an unknown image waits in `ErrImagePull`, a binary that cannot start ends
//!   in `StartError`;
//! - volumes are private directories under the Pod's directory: `emptyDir`s (so `/tmp` and
//!   `/home/runner`), Secrets and ConfigMaps written file per key (mode 0600); a mount path at
//!   the start of an argument or environment value is rewritten to its directory; `HOME` and
//!   `TMPDIR` point at the mounts of `/home/runner` (or the Pod's `HOME` mount) and `/tmp`;
//! - `env` (`value`, `secretKeyRef`, `configMapKeyRef`, `fieldRef`) and `envFrom` are
//!   resolved from the store; a missing non-optional source leaves the container waiting in
//!   `CreateContainerConfigError`, as the real kubelet does;
//! - the Pod gets its own loopback address (`127.x.y.z`, reported as `status.podIP`) and its
//!   ServiceAccount identity: a token, `ca.crt` and `namespace` under
//!   `<pod>/serviceaccount/`, a kubeconfig beside them, `KUBERNETES_SERVICE_HOST`/`PORT`, and
//!   the two documented alternatives the runner accepts for what a network namespace and
//!   `/var/run/secrets` would give it: `TFOPS_LISTEN` (its address) and `TFOPS_KUBECONFIG`;
//! - status follows the process: `Running` with the `Ready` condition once the first
//!   container port accepts connections; on exit `terminated` with exit code, reason
//!   (`Completed`, `Error`, `OOMKilled`) and, with `FallbackToLogsOnError`, the log's tail as
//!   message; phase `Succeeded`/`Failed` (restartPolicy `Never`), or a restart with backoff;
//! - deletion honours the grace period: SIGTERM, SIGKILL when it runs out, then the Pod goes;
//! - logs are kept per Pod for `pods/log`.
//!
//! Faults a test can inject ([`Kubelet`]): a Pod that never becomes Ready, a process killed
//! now (dies mid-run), one OOM-killed now.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use super::container::{environment, image_name, rewrite, volumes, write_private};
use super::registry;
use super::resources;
use super::serve::{Shared, lock};
use super::store::Key;

/// What the kubelet runs Pods with.
#[derive(Debug, Clone, Default)]
pub struct KubeletConfig {
    /// Image name (without tag or digest) to the local binary that stands for it.
    pub images: BTreeMap<String, PathBuf>,
    /// Where Pod directories go.
    pub root: PathBuf,
    /// Environment every container starts with (`PATH`, `TFOPS_TERRAFORM`, ...), as an
    /// image's own environment would.
    pub base_env: BTreeMap<String, String>,
}

/// A fault a test injects into a Pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The Pod runs but never becomes Ready.
    NeverReady,
}

/// A running (or exited) container process.
struct Container {
    pid: i32,
    oom: bool,
    terminating: bool,
}

/// The kubelet's state, shared with the test's handle.
#[derive(Default)]
pub(super) struct State {
    running: Mutex<HashMap<String, Container>>,
    /// Pods (`namespace/name`) started already, by uid.
    started: Mutex<HashMap<String, String>>,
    faults: Mutex<HashMap<String, Fault>>,
    /// Log files by `namespace/name`.
    pub logs: Mutex<HashMap<String, PathBuf>>,
    /// How deleted Pods' processes stopped: `true` on SIGTERM, `false` killed when the grace
    /// period ran out; by `namespace/name`.
    graceful: Mutex<HashMap<String, bool>>,
}

impl State {
    /// Whether the container of the Pod with `uid` is running.
    pub(super) fn is_running(&self, uid: &str) -> bool {
        lock(&self.running).contains_key(uid)
    }
}

/// A test's handle on the kubelet: faults and kills.
#[derive(Clone)]
pub struct Kubelet {
    pub(super) state: Arc<State>,
    pub(super) shared: Arc<Shared>,
}

fn pod_ref(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

impl Kubelet {
    /// Injects `fault` into the Pod `namespace/name` (now, or when it is created).
    pub fn inject(&self, namespace: &str, name: &str, fault: Fault) {
        lock(&self.state.faults).insert(pod_ref(namespace, name), fault);
    }

    /// Removes the fault of the Pod `namespace/name` (Pods created from now on run normally).
    pub fn heal(&self, namespace: &str, name: &str) {
        lock(&self.state.faults).remove(&pod_ref(namespace, name));
    }

    fn uid_of(&self, namespace: &str, name: &str) -> Option<String> {
        let store = lock(&self.shared.store);
        store
            .get(&Key {
                resource: "pods".into(),
                namespace: namespace.into(),
                name: name.into(),
            })
            .and_then(|p| p["metadata"]["uid"].as_str().map(String::from))
    }

    /// Kills the Pod's process now (SIGKILL: it dies mid-run). Whether it was running.
    pub fn kill(&self, namespace: &str, name: &str) -> bool {
        self.signal(namespace, name, false)
    }

    /// Kills the Pod's process as the kernel's OOM killer would: SIGKILL, reported as
    /// `OOMKilled` with exit code 137. Whether it was running.
    pub fn oom_kill(&self, namespace: &str, name: &str) -> bool {
        self.signal(namespace, name, true)
    }

    /// Whether the last deleted Pod `namespace/name` stopped on SIGTERM (`Some(false)`: it
    /// was killed when its grace period ran out; `None`: no such deletion seen).
    pub fn stopped_by_sigterm(&self, namespace: &str, name: &str) -> Option<bool> {
        lock(&self.state.graceful)
            .get(&pod_ref(namespace, name))
            .copied()
    }

    /// Kills every container process (the cluster is going away).
    pub(super) fn kill_all(&self) {
        for c in lock(&self.state.running).values() {
            kill_group(c.pid);
        }
    }

    fn signal(&self, namespace: &str, name: &str, oom: bool) -> bool {
        // (SIGKILL goes to the whole container: see `kill_group`.)
        let Some(uid) = self.uid_of(namespace, name) else {
            return false;
        };
        let mut running = lock(&self.state.running);
        let Some(c) = running.get_mut(&uid) else {
            return false;
        };
        c.oom = oom;
        kill_group(c.pid)
    }
}

/// SIGKILL to every process of the container whose first process is `pid` (its process
/// group); whether there was one to kill. SIGTERM, by contrast, goes to the first process only,
/// as a container runtime sends it.
fn kill_group(pid: i32) -> bool {
    pid > 0
        && nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        )
        .is_ok()
}

/// Pod addresses: `127.<a>.<b>.<c>` unique within this process and, by the process id in
/// `<a>`, unlikely to meet another test process's.
fn allocate_ip() -> std::net::Ipv4Addr {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let a = 16 + (std::process::id() % 200) as u8;
    let b = (n / 250 % 250) as u8;
    let c = (n % 250 + 2) as u8;
    std::net::Ipv4Addr::new(127, a, b, c)
}

fn now() -> Value {
    json!(
        jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string()
    )
}

/// Runs the kubelet until the cluster stops.
pub(super) async fn run(
    shared: Arc<Shared>,
    state: Arc<State>,
    config: Arc<KubeletConfig>,
    api: String,
) {
    let mut changed = lock(&shared.store).subscribe();
    loop {
        sync(&shared, &state, &config, &api);
        if changed.changed().await.is_err() {
            return;
        }
    }
}

/// One pass over the Pods: bind, start, terminate.
fn sync(shared: &Arc<Shared>, state: &Arc<State>, config: &Arc<KubeletConfig>, api: &str) {
    let pods: Vec<Value> = lock(&shared.store)
        .list("pods", None)
        .into_iter()
        .cloned()
        .collect();
    for pod in pods {
        let uid = pod["metadata"]["uid"].as_str().unwrap_or("").to_string();
        let deleting = pod["metadata"].get("deletionTimestamp").is_some();
        if deleting {
            terminate(shared, state, &pod);
            continue;
        }
        if pod["spec"]["nodeName"].as_str().is_none_or(str::is_empty) {
            update_pod(shared, &pod, |p| {
                p["spec"]["nodeName"] = json!("loopback");
                p["status"]["conditions"] = json!([
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": now()},
                ]);
            });
            continue;
        }
        let first = lock(&state.started)
            .insert(uid.clone(), pod_ref(&namespace(&pod), &name(&pod)))
            .is_none();
        if first {
            let (shared, state, config, api) = (
                shared.clone(),
                state.clone(),
                config.clone(),
                api.to_string(),
            );
            tokio::spawn(async move { start(shared, state, config, api, pod).await });
        }
    }
}

/// The Pod's namespace.
pub(super) fn namespace(pod: &Value) -> String {
    pod["metadata"]["namespace"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

fn name(pod: &Value) -> String {
    pod["metadata"]["name"].as_str().unwrap_or("").to_string()
}

/// Writes a change to the Pod's current version (if it is still the same Pod).
fn update_pod(shared: &Shared, pod: &Value, change: impl FnOnce(&mut Value)) {
    let mut store = lock(&shared.store);
    let key = Key {
        resource: "pods".into(),
        namespace: namespace(pod),
        name: name(pod),
    };
    let Some(mut current) = store.get(&key).cloned() else {
        return;
    };
    if current["metadata"]["uid"] != pod["metadata"]["uid"] {
        return;
    }
    let before = current.clone();
    change(&mut current);
    if current != before
        && let Some(r) = resources::by_store_name(&store, "pods")
    {
        registry::controller_update(&mut store, &r, current);
    }
}

/// The container status a waiting container reports.
fn waiting(pod: &Value, reason: &str, message: &str) -> Value {
    let c = &pod["spec"]["containers"][0];
    json!([{
        "name": c["name"], "image": c["image"], "imageID": "", "ready": false,
        "restartCount": 0, "started": false,
        "state": {"waiting": {"reason": reason, "message": message}},
    }])
}

fn set_waiting(shared: &Shared, pod: &Value, reason: &str, message: &str) {
    let statuses = waiting(pod, reason, message);
    update_pod(shared, pod, |p| {
        p["status"]["containerStatuses"] = statuses;
    });
}

async fn start(
    shared: Arc<Shared>,
    state: Arc<State>,
    config: Arc<KubeletConfig>,
    api: String,
    pod: Value,
) {
    let (ns, pname) = (namespace(&pod), name(&pod));
    let uid = pod["metadata"]["uid"].as_str().unwrap_or("").to_string();
    let container = pod["spec"]["containers"][0].clone();
    let image = container["image"].as_str().unwrap_or("");
    let Some(binary) = config.images.get(image_name(image)).cloned() else {
        set_waiting(
            &shared,
            &pod,
            "ErrImagePull",
            &format!("failed to pull and unpack image \"{image}\": not found"),
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        set_waiting(
            &shared,
            &pod,
            "ImagePullBackOff",
            &format!("Back-off pulling image \"{image}\""),
        );
        return;
    };
    let dir = config.root.join(format!("{ns}_{pname}_{uid}"));
    if let Err(e) = std::fs::create_dir_all(dir.join("serviceaccount")) {
        set_waiting(&shared, &pod, "CreateContainerError", &e.to_string());
        return;
    }
    let ip = allocate_ip();
    let mounts = match volumes(&shared, &pod, &container, &dir) {
        Ok(m) => m,
        Err(e) => {
            set_waiting(&shared, &pod, "CreateContainerConfigError", &e);
            return;
        }
    };
    let env = match environment(&shared, &pod, &container, &ip.to_string()) {
        Ok(e) => e,
        Err(e) => {
            set_waiting(&shared, &pod, "CreateContainerConfigError", &e);
            return;
        }
    };
    // The ServiceAccount's identity, where a process can read it.
    let account = pod["spec"]["serviceAccountName"]
        .as_str()
        .unwrap_or("default")
        .to_string();
    let mut identity_env = Vec::new();
    if pod["spec"]["automountServiceAccountToken"] != false {
        let token = {
            let store = lock(&shared.store);
            lock(&shared.tokens).mint_service_account(&store, &ns, &account)
        };
        let Some(token) = token else {
            set_waiting(
                &shared,
                &pod,
                "CreateContainerConfigError",
                &format!("serviceaccount \"{account}\" not found"),
            );
            return;
        };
        let sa = dir.join("serviceaccount");
        let kubeconfig = sa.join("kubeconfig");
        let (host, port) = api.rsplit_once(':').unwrap_or((&api, "443"));
        let written = write_private(&sa.join("token"), token.as_bytes())
            .and_then(|()| write_private(&sa.join("ca.crt"), shared.ca_pem.as_bytes()))
            .and_then(|()| write_private(&sa.join("namespace"), ns.as_bytes()))
            .and_then(|()| write_private(&kubeconfig, shared.kubeconfig_for(&token).as_bytes()));
        if let Err(e) = written {
            set_waiting(&shared, &pod, "CreateContainerError", &e.to_string());
            return;
        }
        identity_env = vec![
            ("KUBERNETES_SERVICE_HOST".to_string(), host.to_string()),
            ("KUBERNETES_SERVICE_PORT".to_string(), port.to_string()),
            (
                "TFOPS_KUBECONFIG".to_string(),
                kubeconfig.display().to_string(),
            ),
        ];
    }
    let log_path = dir.join("container.log");
    lock(&state.logs).insert(pod_ref(&ns, &pname), log_path.clone());
    let tmp = rewrite("/tmp", &mounts);
    let home = rewrite("/home/runner", &mounts);
    let mut attempt = 0u32;
    loop {
        let log = match std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
        {
            Ok(f) => f,
            Err(e) => {
                set_waiting(&shared, &pod, "CreateContainerError", &e.to_string());
                return;
            }
        };
        let mut cmd = tokio::process::Command::new(&binary);
        let args: Vec<String> = container["command"]
            .as_array()
            .into_iter()
            .flatten()
            .skip(1)
            .chain(container["args"].as_array().into_iter().flatten())
            .filter_map(Value::as_str)
            .map(|a| rewrite(a, &mounts))
            .collect();
        cmd.args(&args)
            .env_clear()
            .envs(&config.base_env)
            .env("HOME", &home)
            .env("TMPDIR", &tmp)
            .env("TFOPS_LISTEN", ip.to_string())
            .envs(identity_env.iter().cloned())
            .envs(env.iter().map(|(k, v)| (k.clone(), rewrite(v, &mounts))))
            .current_dir(&dir)
            .stdin(std::process::Stdio::null())
            .stderr(
                log.try_clone()
                    .map(std::process::Stdio::from)
                    .unwrap_or_else(|_| std::process::Stdio::null()),
            )
            .stdout(log)
            // Its own process group stands for the container: what it starts (Terraform)
            // dies with it, as every process of a container dies with the container.
            .process_group(0)
            .kill_on_drop(true);
        let started_at = now();
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                let message = format!(
                    "failed to start container \"{}\": {e}",
                    container["name"].as_str().unwrap_or("")
                );
                terminated(
                    &shared,
                    &pod,
                    &container,
                    128,
                    "StartError",
                    &message,
                    &started_at,
                    attempt,
                    true,
                );
                return;
            }
        };
        let pid = child.id().map(|p| p as i32).unwrap_or(0);
        lock(&state.running).insert(
            uid.clone(),
            Container {
                pid,
                oom: false,
                terminating: false,
            },
        );
        let ready_at_once = container["ports"].as_array().is_none_or(|p| p.is_empty());
        update_pod(&shared, &pod, |p| {
            p["status"]["phase"] = json!("Running");
            p["status"]["podIP"] = json!(ip.to_string());
            p["status"]["podIPs"] = json!([{"ip": ip.to_string()}]);
            p["status"]["hostIP"] = json!("127.0.0.1");
            if p["status"]["startTime"].is_null() {
                p["status"]["startTime"] = started_at.clone();
            }
            p["status"]["conditions"] = conditions(false);
            p["status"]["containerStatuses"] = json!([{
                "name": container["name"], "image": container["image"],
                "imageID": format!("loopback://{}", binary.display()),
                "containerID": format!("loopback://{pid}"),
                "ready": false, "started": true, "restartCount": attempt,
                "state": {"running": {"startedAt": started_at}},
            }]);
        });
        let port = container["ports"][0]["containerPort"].as_u64().unwrap_or(0) as u16;
        let readiness = {
            let (shared, state, pod) = (shared.clone(), state.clone(), pod.clone());
            let key = pod_ref(&ns, &pname);
            tokio::spawn(async move {
                if !ready_at_once {
                    loop {
                        let never = lock(&state.faults).get(&key) == Some(&Fault::NeverReady);
                        if !never && tokio::net::TcpStream::connect((ip, port)).await.is_ok() {
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(25)).await;
                    }
                }
                update_pod(&shared, &pod, |p| {
                    p["status"]["conditions"] = conditions(true);
                    p["status"]["containerStatuses"][0]["ready"] = json!(true);
                });
            })
        };
        let status = child.wait().await;
        // The container's first process is gone: so is the rest of the container.
        kill_group(pid);
        readiness.abort();
        let (oom, terminating) = lock(&state.running)
            .remove(&uid)
            .map(|c| (c.oom, c.terminating))
            .unwrap_or((false, false));
        let code = match &status {
            Ok(s) => {
                use std::os::unix::process::ExitStatusExt;
                s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(9))
            }
            Err(_) => 128,
        };
        let reason = if oom {
            "OOMKilled"
        } else if code == 0 {
            "Completed"
        } else {
            "Error"
        };
        let message =
            if code != 0 && container["terminationMessagePolicy"] == "FallbackToLogsOnError" {
                log_tail(&log_path)
            } else {
                String::new()
            };
        let policy = pod["spec"]["restartPolicy"].as_str().unwrap_or("Always");
        let restart = !terminating && (policy == "Always" || (policy == "OnFailure" && code != 0));
        terminated(
            &shared,
            &pod,
            &container,
            code,
            reason,
            &message,
            &started_at,
            attempt,
            !restart,
        );
        if !restart {
            return;
        }
        attempt += 1;
        let backoff = Duration::from_millis(500 * u64::from(attempt.min(20)));
        update_pod(&shared, &pod, |p| {
            p["status"]["containerStatuses"][0]["state"] = json!({"waiting": {"reason": "CrashLoopBackOff", "message": format!("back-off restarting failed container {}", container["name"].as_str().unwrap_or(""))}});
        });
        tokio::time::sleep(backoff).await;
        let gone = lock(&shared.store)
            .get(&Key {
                resource: "pods".into(),
                namespace: ns.clone(),
                name: pname.clone(),
            })
            .is_none_or(|p| {
                p["metadata"]["uid"] != uid.as_str()
                    || p["metadata"].get("deletionTimestamp").is_some()
            });
        if gone {
            return;
        }
    }
}

fn conditions(ready: bool) -> Value {
    let r = if ready { "True" } else { "False" };
    json!([
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": now()},
        {"type": "Initialized", "status": "True", "lastTransitionTime": now()},
        {"type": "ContainersReady", "status": r, "lastTransitionTime": now()},
        {"type": "Ready", "status": r, "lastTransitionTime": now()},
    ])
}

/// The last 80 lines (at most 2048 bytes) of the log, as the kubelet's fallback message.
fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(80)..].join("\n");
    let start = tail.len().saturating_sub(2048);
    let start = (start..tail.len())
        .find(|i| tail.is_char_boundary(*i))
        .unwrap_or(0);
    tail[start..].to_string()
}

#[allow(clippy::too_many_arguments)]
fn terminated(
    shared: &Shared,
    pod: &Value,
    container: &Value,
    code: i32,
    reason: &str,
    message: &str,
    started_at: &Value,
    attempt: u32,
    last: bool,
) {
    let phase = if code == 0 { "Succeeded" } else { "Failed" };
    update_pod(shared, pod, |p| {
        let mut state = json!({"exitCode": code, "reason": reason, "startedAt": started_at, "finishedAt": now()});
        if !message.is_empty() {
            state["message"] = json!(message);
        }
        p["status"]["conditions"] = conditions(false);
        p["status"]["containerStatuses"] = json!([{
            "name": container["name"], "image": container["image"], "imageID": "",
            "ready": false, "started": false, "restartCount": attempt,
            "state": {"terminated": state.clone()},
            "lastState": {},
        }]);
        if last {
            p["status"]["phase"] = json!(phase);
        } else {
            p["status"]["containerStatuses"][0]["lastState"] = json!({"terminated": state});
        }
    });
}

/// A Pod being deleted: its process gets SIGTERM, then SIGKILL when the grace period ends;
/// once it is gone (or never ran) the Pod is removed.
fn terminate(shared: &Arc<Shared>, state: &Arc<State>, pod: &Value) {
    let uid = pod["metadata"]["uid"].as_str().unwrap_or("").to_string();
    let pid = {
        let mut running = lock(&state.running);
        match running.get_mut(&uid) {
            Some(c) if !c.terminating => {
                c.terminating = true;
                Some(c.pid)
            }
            Some(_) => return,
            None => None,
        }
    };
    let Some(pid) = pid else {
        remove(shared, state, pod);
        return;
    };
    let grace = pod["metadata"]["deletionGracePeriodSeconds"]
        .as_u64()
        .unwrap_or(30);
    let (shared, state, pod) = (shared.clone(), state.clone(), pod.clone());
    tokio::spawn(async move {
        let pid = nix::unistd::Pid::from_raw(pid);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(grace);
        let mut killed = false;
        while lock(&state.running).contains_key(&uid) {
            if tokio::time::Instant::now() >= deadline && !killed {
                kill_group(pid.as_raw());
                killed = true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        lock(&state.graceful).insert(pod_ref(&namespace(&pod), &name(&pod)), !killed);
        remove(&shared, &state, &pod);
    });
}

/// Removes a Pod whose process is gone (a delete with grace period 0), and its directory.
fn remove(shared: &Shared, state: &State, pod: &Value) {
    let (ns, pname) = (namespace(pod), name(pod));
    let uid = pod["metadata"]["uid"].as_str().unwrap_or("").to_string();
    {
        let mut store = lock(&shared.store);
        if let Some(r) = resources::by_store_name(&store, "pods") {
            let options = json!({"gracePeriodSeconds": 0, "preconditions": {"uid": uid}});
            let _ = registry::delete(
                &mut store,
                &r,
                &ns,
                &pname,
                &options,
                jiff::Timestamp::now(),
            );
        }
    }
    lock(&state.started).remove(&uid);
    // Logs are kept by name (for `pods/log`), and a new Pod of the same name may already run:
    // only this Pod's entry and directory (named by its uid) go.
    let mut logs = lock(&state.logs);
    let key = pod_ref(&ns, &pname);
    let ours = logs
        .get(&key)
        .and_then(|log| log.parent())
        .is_some_and(|dir| dir.to_string_lossy().ends_with(&format!("_{uid}")));
    if ours && let Some(log) = logs.remove(&key) {
        drop(logs);
        if let Some(dir) = log.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}
