//! One Pod's life on the node: bound, its container started as a local process, its status
//! written as a kubelet writes it, stopped within its grace period when deleted.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use serde_json::{Value, json};

use super::container::{environment, image_name, rewrite, volumes, write_private};
use super::{Context, Running, State, lock, pod_ref};

/// util-linux's `setpriv`, which sets the parent-death signal before it execs.
const SETPRIV: &str = "/usr/bin/setpriv";

/// Where a Pod's ServiceAccount directory is mounted in a container.
const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The time now as the API writes it.
pub(super) fn now() -> Value {
    json!(
        jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string()
    )
}

/// SIGKILL to every process of the container whose first process is `pid` (its process
/// group); whether there was one to kill.
pub(super) fn kill_group(pid: i32) -> bool {
    pid > 0
        && nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        )
        .is_ok()
}

/// Pod addresses: `127.<a>.<b>.<c>`, unique within this process and, by the process id in
/// `<a>`, unlikely to meet another test process's.
fn allocate_ip() -> std::net::Ipv4Addr {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let a = 16 + (std::process::id() % 200) as u8;
    let b = (n / 250 % 250) as u8;
    let c = (n % 250 + 2) as u8;
    std::net::Ipv4Addr::new(127, a, b, c)
}

fn text(v: &Value) -> String {
    v.as_str().unwrap_or("").to_string()
}

/// What runs an image: a local binary standing for it, or podman (a real container).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Runtime {
    Process(PathBuf),
    Container,
}

/// How the image is run here; `None` when it is not to be had (`ErrImagePull`).
async fn runtime_for(context: &Context, image: &str) -> Option<Runtime> {
    if let Some(binary) = context.config.images.get(image_name(image)) {
        return Some(Runtime::Process(binary.clone()));
    }
    (context.config.containers && super::podman::image_exists(image).await)
        .then_some(Runtime::Container)
}

/// Acts on one Pod event: bind an unscheduled Pod, start one bound here, stop one being
/// deleted (or gone).
pub(super) async fn sync(context: &Arc<Context>, state: &Arc<State>, pod: Value, gone: bool) {
    let uid = text(&pod["metadata"]["uid"]);
    let (ns, name) = (
        text(&pod["metadata"]["namespace"]),
        text(&pod["metadata"]["name"]),
    );
    let node = pod["spec"]["nodeName"].as_str().unwrap_or("");
    if gone {
        // Deleted without us (grace period 0, or the namespace went): the process goes too,
        // and nothing of this Pod is looked up by name any more.
        lock(&state.deleted).insert(uid.clone());
        if let Some(c) = lock(&state.running).get(&uid) {
            c.kill();
        }
        lock(&state.started).remove(&uid);
        return;
    }
    if pod["metadata"].get("deletionTimestamp").is_some() {
        if node == context.node || node.is_empty() {
            terminate(context, state, &pod);
        }
        return;
    }
    if node.is_empty() {
        let scheduler = pod["spec"]["schedulerName"]
            .as_str()
            .unwrap_or("default-scheduler");
        if scheduler != "default-scheduler" {
            return;
        }
        if cordoned(context, state).await {
            // As the scheduler says when no node can take the Pod (once: writing it again
            // would wake this very loop); bound at `uncordon`.
            let said = pod["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["reason"] == "Unschedulable");
            if said {
                return;
            }
            let message = "0/1 nodes are available: 1 node(s) were unschedulable.";
            let status = json!({"phase": "Pending", "conditions": [{
                "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": message, "lastTransitionTime": now(),
            }]});
            patch_status(context, &pod, status).await;
            return;
        }
        bind(context, &ns, &name, &uid).await;
        return;
    }
    if node != context.node {
        return;
    }
    let phase = pod["status"]["phase"].as_str().unwrap_or("");
    if phase == "Succeeded" || phase == "Failed" {
        return;
    }
    if marked_not_ready(state, &uid, &pod) {
        patch_status(context, &pod, json!({"conditions": conditions(true)})).await;
        return;
    }
    let first = lock(&state.started)
        .insert(uid.clone(), pod_ref(&ns, &name))
        .is_none();
    if first {
        lock(&state.ever).insert(uid.clone(), pod_ref(&ns, &name));
        let (context, state) = (context.clone(), state.clone());
        tokio::spawn(async move { start(context, state, pod).await });
    }
}

/// Whether someone else marked not Ready a Pod whose container this agent runs and found
/// ready: the node lifecycle controller does, once the node's heartbeat was missed (the API
/// server or etcd away). A kubelet recomputes Ready from its containers; so does the agent.
fn marked_not_ready(state: &State, uid: &str, pod: &Value) -> bool {
    let container_ready = pod["status"]["containerStatuses"][0]["ready"] == true;
    let not_ready = pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "False");
    container_ready
        && not_ready
        && lock(&state.running)
            .get(uid)
            .is_some_and(|r| !r.terminating)
}

/// Whether the Node is cordoned, as the API server has it now: a scheduler's cache could lag
/// a `cordon` made just before a Pod was created, and a Pod listed after that `cordon` must
/// not be bound on the strength of an older Node event.
pub(super) async fn cordoned(context: &Context, state: &State) -> bool {
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(context.client.clone());
    match nodes.get(&context.node).await {
        Ok(n) => n.spec.and_then(|s| s.unschedulable).unwrap_or(false),
        Err(_) => state.cordoned.load(Ordering::SeqCst),
    }
}

/// Binds the Pod to this node, as the scheduler would.
pub(super) async fn bind(context: &Context, ns: &str, name: &str, uid: &str) {
    let pods: Api<Pod> = Api::namespaced(context.client.clone(), ns);
    let binding = json!({
        "apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": name, "namespace": ns, "uid": uid},
        "target": {"apiVersion": "v1", "kind": "Node", "name": context.node},
    });
    let answer: Result<Value, _> = pods
        .create_subresource("binding", name, &PostParams::default(), &binding)
        .await;
    if let Err(e) = answer {
        tracing::debug!("binding {ns}/{name}: {e}");
    }
}

/// Writes `status` (a merge patch of `pods/status`) to the Pod, if it is still the same Pod.
pub(super) async fn patch_status(context: &Context, pod: &Value, status: Value) {
    patch_status_with(&context.client, pod, status).await;
}

/// [`patch_status`] with a client of its own.
pub(super) async fn patch_status_with(client: &kube::Client, pod: &Value, status: Value) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &text(&pod["metadata"]["namespace"]));
    // The uid in the patch is a precondition: a new Pod of the same name is left alone.
    let patch = json!({"metadata": {"uid": pod["metadata"]["uid"]}, "status": status});
    if let Err(e) = pods
        .patch_status(
            &text(&pod["metadata"]["name"]),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await
    {
        tracing::debug!("pod status: {e}");
    }
}

pub(super) fn waiting(container: &Value, reason: &str, message: &str) -> Value {
    json!({"containerStatuses": [{
        "name": container["name"], "image": container["image"], "imageID": "", "ready": false,
        "restartCount": 0, "started": false,
        "state": {"waiting": {"reason": reason, "message": message}},
    }], "phase": "Pending"})
}

pub(super) fn conditions(ready: bool) -> Value {
    let r = if ready { "True" } else { "False" };
    json!([
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": now()},
        {"type": "Initialized", "status": "True", "lastTransitionTime": now()},
        {"type": "ContainersReady", "status": r, "lastTransitionTime": now()},
        {"type": "Ready", "status": r, "lastTransitionTime": now()},
    ])
}

/// Whether a private mount namespace can be made for a container (root, `unshare` present).
fn can_mount() -> bool {
    nix::unistd::geteuid().is_root() && Path::new("/usr/bin/unshare").exists()
}

async fn start(context: Arc<Context>, state: Arc<State>, pod: Value) {
    let (ns, pname) = (
        text(&pod["metadata"]["namespace"]),
        text(&pod["metadata"]["name"]),
    );
    let uid = text(&pod["metadata"]["uid"]);
    let container = pod["spec"]["containers"][0].clone();
    let image = container["image"].as_str().unwrap_or("");
    let Some(runtime) = runtime_for(&context, image).await else {
        let message = format!("failed to pull and unpack image \"{image}\": not found");
        patch_status(
            &context,
            &pod,
            waiting(&container, "ErrImagePull", &message),
        )
        .await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let message = format!("Back-off pulling image \"{image}\"");
        patch_status(
            &context,
            &pod,
            waiting(&container, "ImagePullBackOff", &message),
        )
        .await;
        return;
    };
    let dir = context.config.root.join(format!("{ns}_{pname}_{uid}"));
    if let Err(e) = std::fs::create_dir_all(&dir) {
        patch_status(
            &context,
            &pod,
            waiting(&container, "CreateContainerError", &e.to_string()),
        )
        .await;
        return;
    }
    let ip = match runtime {
        Runtime::Process(_) => allocate_ip(),
        Runtime::Container => super::podman::allocate_ip(),
    };
    // What the container needs may not exist yet (a Secret created next, the namespace's
    // `kube-root-ca.crt` not yet published): the container waits and it is tried again, as a
    // kubelet does, until the Pod goes.
    let (mut mounts, env) = loop {
        let prepared = match volumes(&context.client, &pod, &container, &dir).await {
            Ok(m) => environment(&context.client, &pod, &container, &ip.to_string())
                .await
                .map(|e| (m, e)),
            Err(e) => Err(e),
        };
        match prepared {
            Ok(p) => break p,
            Err(e) => {
                let status = waiting(&container, "CreateContainerConfigError", &e);
                patch_status(&context, &pod, status).await;
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        if gone(&context, &ns, &pname, &uid).await {
            return;
        }
    };
    if runtime == Runtime::Container {
        super::podman::set_ownership(&pod, &dir.join("volumes"));
        let host = context.container_api_host.clone().unwrap_or_default();
        let identity_env = [
            ("KUBERNETES_SERVICE_HOST".to_string(), host),
            (
                "KUBERNETES_SERVICE_PORT".to_string(),
                context.api_port.to_string(),
            ),
        ];
        let log_path = dir.join("container.log");
        lock(&state.logs).insert(pod_ref(&ns, &pname), log_path.clone());
        let env: Vec<(String, String)> = identity_env.iter().cloned().chain(env).collect();
        for init in pod["spec"]["initContainers"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let image = init["image"].as_str().unwrap_or("");
            let prepared = async {
                let m = volumes(&context.client, &pod, init, &dir).await?;
                let e = environment(&context.client, &pod, init, &ip.to_string()).await?;
                Ok::<_, String>((m, e))
            }
            .await;
            let (mounts, own_env) = match prepared {
                Ok(p) => p,
                Err(e) => {
                    let status = waiting(init, "CreateContainerConfigError", &e);
                    patch_status(&context, &pod, status).await;
                    return;
                }
            };
            if runtime_for(&context, image).await != Some(Runtime::Container) {
                let message = format!("failed to pull and unpack image \"{image}\": not found");
                patch_status(&context, &pod, waiting(init, "ErrImagePull", &message)).await;
                return;
            }
            let env: Vec<(String, String)> = identity_env.iter().cloned().chain(own_env).collect();
            let run = super::container_run::ContainerRun {
                context: &context,
                state: &state,
                pod: &pod,
                container: init,
                mounts: &mounts,
                env: &env,
                ip,
                log: &log_path,
            };
            if !run.run_init().await || gone(&context, &ns, &pname, &uid).await {
                return;
            }
        }
        let run = super::container_run::ContainerRun {
            context: &context,
            state: &state,
            pod: &pod,
            container: &container,
            mounts: &mounts,
            env: &env,
            ip,
            log: &log_path,
        };
        run.run().await;
        return;
    }
    let Runtime::Process(binary) = runtime else {
        return;
    };
    // The ServiceAccount's directory: bind-mounted at its real path in the container's own
    // mount namespace where that can be done, else reached through `TFOPS_KUBECONFIG`.
    let service_account = mounts
        .iter()
        .position(|(m, _)| m == SERVICE_ACCOUNT_DIR)
        .map(|i| mounts[i].1.clone());
    let mut identity_env = vec![
        (
            "KUBERNETES_SERVICE_HOST".to_string(),
            context.api_host.clone(),
        ),
        (
            "KUBERNETES_SERVICE_PORT".to_string(),
            context.api_port.to_string(),
        ),
    ];
    let mut bind_mount = None;
    if let Some(sa) = &service_account {
        if can_mount() {
            mounts.retain(|(m, _)| m != SERVICE_ACCOUNT_DIR);
            bind_mount = Some(sa.clone());
        } else if let Ok(token) = std::fs::read_to_string(sa.join("token")) {
            let kubeconfig = sa.join("kubeconfig");
            if write_private(&kubeconfig, (context.kubeconfig)(&token).as_bytes()).is_ok() {
                identity_env.push(("TFOPS_KUBECONFIG".into(), kubeconfig.display().to_string()));
            }
        }
    }
    let log_path = dir.join("container.log");
    lock(&state.logs).insert(pod_ref(&ns, &pname), log_path.clone());
    let tmp = rewrite("/tmp", &mounts);
    let home = rewrite("/home/runner", &mounts);
    let inits: Vec<Value> = pod["spec"]["initContainers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for init in &inits {
        let ready = Init {
            context: &context,
            state: &state,
            pod: &pod,
            container: init,
            dir: &dir,
            ip,
            identity_env: &identity_env,
            bind_mount: bind_mount.as_deref(),
            home: &home,
            tmp: &tmp,
            log: &log_path,
        }
        .run()
        .await;
        if !ready || gone(&context, &ns, &pname, &uid).await {
            return;
        }
    }
    let mut attempt = 0u32;
    loop {
        let log = match std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
        {
            Ok(f) => f,
            Err(e) => {
                patch_status(
                    &context,
                    &pod,
                    waiting(&container, "CreateContainerError", &e.to_string()),
                )
                .await;
                return;
            }
        };
        let limit = container["resources"]["limits"]["memory"]
            .as_str()
            .and_then(super::cgroup::parse_quantity);
        let launch = Launch {
            cgroup: super::cgroup::prepare(&uid, limit),
            binary: &binary,
            container: &container,
            mounts: &mounts,
            bind_mount: bind_mount.as_deref(),
            pod_name: super::podman::host_name(&pod),
            env: &env,
            identity_env: &identity_env,
            home: &home,
            tmp: &tmp,
            ip,
            dir: &dir,
        };
        let mut cmd = launch.command(&context, log);
        if may_not_start(&state, &uid) {
            return;
        }
        let started_at = now();
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                let message = format!(
                    "failed to start container \"{}\": {e}",
                    container["name"].as_str().unwrap_or("")
                );
                terminated(
                    &context,
                    &pod,
                    &container,
                    128,
                    "StartError",
                    &message,
                    &started_at,
                    attempt,
                    true,
                )
                .await;
                return;
            }
        };
        let pid = child.id().and_then(|p| i32::try_from(p).ok()).unwrap_or(0);
        lock(&state.running).insert(
            uid.clone(),
            Running {
                pid,
                container: None,
                terminating: false,
            },
        );
        let oom_before = super::cgroup::oom_kills(&uid);
        let oom = Arc::new(AtomicBool::new(false));
        let oom_group = tokio::spawn(oom_group_kill(uid.clone(), pid, oom_before, oom.clone()));
        let ready_at_once = container["ports"].as_array().is_none_or(|p| p.is_empty());
        patch_status(
            &context,
            &pod,
            json!({
                "phase": "Running",
                "podIP": ip.to_string(),
                "podIPs": [{"ip": ip.to_string()}],
                "hostIP": "127.0.0.1",
                "hostIPs": [{"ip": "127.0.0.1"}],
                "startTime": started_at,
                "conditions": conditions(false),
                "containerStatuses": [{
                    "name": container["name"], "image": container["image"],
                    "imageID": format!("local://{}", binary.display()),
                    "containerID": format!("local://{pid}"),
                    "ready": false, "started": true, "restartCount": attempt,
                    "state": {"running": {"startedAt": started_at}},
                }],
            }),
        )
        .await;
        let port = container["ports"][0]["containerPort"]
            .as_u64()
            .and_then(|p| u16::try_from(p).ok())
            .unwrap_or(0);
        let readiness = {
            let (context, pod, container) = (context.clone(), pod.clone(), container.clone());
            let started_at = started_at.clone();
            let image_id = format!("local://{}", binary.display());
            tokio::spawn(async move {
                if !ready_at_once {
                    while tokio::net::TcpStream::connect((ip, port)).await.is_err() {
                        tokio::time::sleep(Duration::from_millis(25)).await;
                    }
                }
                let statuses = json!([{
                    "name": container["name"], "image": container["image"],
                    "imageID": image_id,
                    "containerID": format!("local://{pid}"),
                    "ready": true, "started": true, "restartCount": attempt,
                    "state": {"running": {"startedAt": started_at}},
                }]);
                patch_status(
                    &context,
                    &pod,
                    json!({"conditions": conditions(true), "containerStatuses": statuses}),
                )
                .await;
            })
        };
        let status = child.wait().await;
        oom_group.abort();
        // Finished (or cancelled at its sleep) before its verdict is read.
        let _ = oom_group.await;
        // The container's first process is gone: so is the rest of the container.
        kill_group(pid);
        readiness.abort();
        let _ = readiness.await;
        let terminating = lock(&state.running)
            .remove(&uid)
            .is_some_and(|c| c.terminating);
        let code = match &status {
            Ok(s) => {
                use std::os::unix::process::ExitStatusExt;
                s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(9))
            }
            Err(_) => 128,
        };
        let reason = if code == 0 {
            "Completed"
        } else if oom.load(Ordering::SeqCst) || super::cgroup::oom_kills(&uid) > oom_before {
            "OOMKilled"
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
            &context,
            &pod,
            &container,
            code,
            reason,
            &message,
            &started_at,
            attempt,
            !restart,
        )
        .await;
        if !restart {
            return;
        }
        attempt += 1;
        let backoff = Duration::from_millis(500 * u64::from(attempt.min(20)));
        let name = container["name"].as_str().unwrap_or("");
        patch_status(
            &context,
            &pod,
            json!({"containerStatuses": [{
                "name": container["name"], "image": container["image"], "imageID": "",
                "ready": false, "started": false, "restartCount": attempt,
                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": format!("back-off restarting failed container {name}")}},
            }]}),
        )
        .await;
        tokio::time::sleep(backoff).await;
        if may_not_start(&state, &uid) || gone(&context, &ns, &pname, &uid).await {
            return;
        }
    }
}

/// How a container's process is started: its binary (the image), arguments with mount paths
/// rewritten, the Pod's environment, and the ServiceAccount directory bind-mounted in a private
/// mount namespace when there is one.
struct Launch<'a> {
    /// The `cgroup.procs` of the container's memory cgroup, when there is one.
    cgroup: Option<PathBuf>,
    binary: &'a Path,
    container: &'a Value,
    mounts: &'a [(String, PathBuf)],
    bind_mount: Option<&'a Path>,
    /// The Pod's host name (`spec.hostname`, else its name), in its own UTS namespace, with
    /// the bind mount.
    pod_name: &'a str,
    env: &'a [(String, String)],
    identity_env: &'a [(String, String)],
    home: &'a str,
    tmp: &'a str,
    ip: std::net::Ipv4Addr,
    dir: &'a Path,
}

impl Launch<'_> {
    /// The command, its output going to `log`.
    fn command(&self, context: &Context, log: std::fs::File) -> tokio::process::Command {
        let args: Vec<String> = self.container["command"]
            .as_array()
            .into_iter()
            .flatten()
            .skip(1)
            .chain(self.container["args"].as_array().into_iter().flatten())
            .filter_map(Value::as_str)
            .map(|a| rewrite(a, self.mounts))
            .collect();
        // A shell that joins the memory cgroup and makes the mount namespace's bind mount, then
        // execs the binary: the container's first process keeps its pid throughout, and
        // everything it starts is in the cgroup from the first instruction on.
        let mut script = String::new();
        if let Some(procs) = &self.cgroup {
            script.push_str(&format!("echo $$ > '{}' && ", procs.display()));
        }
        if self.bind_mount.is_some() {
            script.push_str(&format!(
                "mkdir -p {SERVICE_ACCOUNT_DIR} && mount --bind \"$0\" {SERVICE_ACCOUNT_DIR} && "
            ));
            // Its own UTS namespace named after the Pod, as a container's host name is (Pod
            // names are DNS labels: nothing to quote).
            let pod = self.pod_name.replace('\'', "");
            script.push_str(&format!(
                "printf %s '{pod}' > /proc/sys/kernel/hostname && "
            ));
        }
        let mut argv: Vec<std::ffi::OsString> = Vec::new();
        // The kernel kills the container's first process if this process dies first
        // (`setpriv --pdeathsig`, util-linux): a test killed mid-run leaves no runner behind.
        if Path::new(SETPRIV).exists() {
            argv.extend([SETPRIV, "--pdeathsig", "KILL", "--"].map(Into::into));
        }
        if !script.is_empty() {
            script.push_str("exec \"$@\"");
            if self.bind_mount.is_some() {
                argv.extend(
                    [
                        "/usr/bin/unshare",
                        "--mount",
                        "--uts",
                        "--propagation",
                        "private",
                        "--",
                    ]
                    .map(Into::into),
                );
            }
            argv.extend(["/bin/sh", "-c"].map(Into::into));
            argv.push(script.into());
            argv.push(self.bind_mount.unwrap_or(Path::new("sh")).into());
        }
        argv.push(self.binary.into());
        let mut cmd = tokio::process::Command::new(&argv[0]);
        cmd.args(&argv[1..]);
        cmd.args(&args)
            .env_clear()
            .envs(&context.config.base_env)
            .env("HOME", self.home)
            .env("TMPDIR", self.tmp)
            .env("TFOPS_LISTEN", self.ip.to_string())
            .envs(self.identity_env.iter().cloned())
            .envs(
                self.env
                    .iter()
                    .map(|(k, v)| (k.clone(), rewrite(v, self.mounts))),
            )
            .current_dir(self.dir)
            .stdin(std::process::Stdio::null())
            // Its own process group stands for the container: what it starts (Terraform)
            // dies with it.
            .process_group(0)
            .kill_on_drop(true);
        super::container::output_to(&mut cmd, log);
        cmd
    }
}

/// One init container of a Pod (its status is the only one in `initContainerStatuses` while it
/// runs), run to completion before the Pod's container starts, as a
/// kubelet runs them (in order; the Pod stays Pending and not Initialized meanwhile; a failure
/// fails a Pod that is never restarted).
struct Init<'a> {
    context: &'a Context,
    state: &'a State,
    pod: &'a Value,
    container: &'a Value,
    dir: &'a Path,
    ip: std::net::Ipv4Addr,
    identity_env: &'a [(String, String)],
    bind_mount: Option<&'a Path>,
    home: &'a str,
    tmp: &'a str,
    log: &'a Path,
}

impl Init<'_> {
    fn status(&self, state: Value, phase: &str) -> Value {
        let c = self.container;
        json!({
            "phase": phase,
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": now()},
                {"type": "Initialized", "status": "False", "reason": "ContainersNotInitialized",
                 "lastTransitionTime": now()},
                {"type": "ContainersReady", "status": "False", "lastTransitionTime": now()},
                {"type": "Ready", "status": "False", "lastTransitionTime": now()},
            ],
            "initContainerStatuses": [{
                "name": c["name"], "image": c["image"], "imageID": "", "ready": false,
                "restartCount": 0, "started": state.get("running").is_some(), "state": state,
            }],
        })
    }

    /// Runs it; whether it completed (else the Pod's status says why).
    async fn run(self) -> bool {
        let c = self.container;
        let image = c["image"].as_str().unwrap_or("");
        let Some(Runtime::Process(binary)) = runtime_for(self.context, image).await else {
            let message = format!("failed to pull and unpack image \"{image}\": not found");
            let waiting = json!({"waiting": {"reason": "ErrImagePull", "message": message}});
            patch_status(self.context, self.pod, self.status(waiting, "Pending")).await;
            return false;
        };
        let prepared = match volumes(&self.context.client, self.pod, c, self.dir).await {
            Ok(m) => environment(&self.context.client, self.pod, c, &self.ip.to_string())
                .await
                .map(|e| (m, e)),
            Err(e) => Err(e),
        };
        let (mut mounts, env) = match prepared {
            Ok(p) => p,
            Err(e) => {
                let waiting =
                    json!({"waiting": {"reason": "CreateContainerConfigError", "message": e}});
                patch_status(self.context, self.pod, self.status(waiting, "Pending")).await;
                return false;
            }
        };
        if self.bind_mount.is_some() {
            mounts.retain(|(m, _)| m != SERVICE_ACCOUNT_DIR);
        }
        let Ok(log) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log)
        else {
            return false;
        };
        let launch = Launch {
            cgroup: None,
            binary: &binary,
            container: c,
            mounts: &mounts,
            bind_mount: self.bind_mount,
            pod_name: super::podman::host_name(self.pod),
            env: &env,
            identity_env: self.identity_env,
            home: self.home,
            tmp: self.tmp,
            ip: self.ip,
            dir: self.dir,
        };
        let started_at = now();
        let uid = text(&self.pod["metadata"]["uid"]);
        if may_not_start(self.state, &uid) {
            return false;
        }
        let Ok(mut child) = launch.command(self.context, log).spawn() else {
            let t = json!({"terminated": {"exitCode": 128, "reason": "StartError", "startedAt": started_at, "finishedAt": now()}});
            patch_status(self.context, self.pod, self.status(t, "Failed")).await;
            return false;
        };
        let pid = child.id().and_then(|p| i32::try_from(p).ok()).unwrap_or(0);
        lock(&self.state.running).insert(
            uid.clone(),
            Running {
                pid,
                container: None,
                terminating: false,
            },
        );
        let running = json!({"running": {"startedAt": started_at}});
        patch_status(self.context, self.pod, self.status(running, "Pending")).await;
        let code = match child.wait().await {
            Ok(s) => {
                use std::os::unix::process::ExitStatusExt;
                s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(9))
            }
            Err(_) => 128,
        };
        kill_group(pid);
        lock(&self.state.running).remove(&uid);
        let reason = if code == 0 { "Completed" } else { "Error" };
        let t = json!({"terminated": {"exitCode": code, "reason": reason, "startedAt": started_at, "finishedAt": now()}});
        let phase = if code == 0 { "Pending" } else { "Failed" };
        patch_status(self.context, self.pod, self.status(t, phase)).await;
        code == 0
    }
}

/// Kills the whole container once it is out of memory, as a kubelet on cgroup v2 does
/// (`memory.oom.group`, its default since 1.28): a process waits at the limit
/// ([`super::cgroup::under_oom`], cgroup v1) or the OOM killer killed one (v2 kills the group
/// itself). Notes that it did, for the `OOMKilled` reason. Polls every 10 ms.
async fn oom_group_kill(uid: String, pid: i32, before: u64, seen: Arc<AtomicBool>) {
    loop {
        tokio::time::sleep(Duration::from_millis(10)).await;
        if super::cgroup::under_oom(&uid) || super::cgroup::oom_kills(&uid) > before {
            // Noted before the kill: the task waiting for the container may read it as soon
            // as the first process dies, before this task would get to a later line.
            seen.store(true, Ordering::SeqCst);
            super::cgroup::kill_all(&uid);
            kill_group(pid);
            return;
        }
    }
}

/// Whether a container of the Pod `uid` must not start now: the agent stopped, or the Pod
/// was deleted (or is being deleted) while it was being prepared.
pub(super) fn may_not_start(state: &State, uid: &str) -> bool {
    state.stopped.load(Ordering::SeqCst) || lock(&state.deleted).contains(uid)
}

/// Whether the Pod `ns/name` with `uid` is gone or being deleted.
pub(super) async fn gone(context: &Context, ns: &str, name: &str, uid: &str) -> bool {
    let pods: Api<Pod> = Api::namespaced(context.client.clone(), ns);
    match pods.get_opt(name).await {
        Ok(Some(p)) => {
            p.metadata.uid.as_deref() != Some(uid) || p.metadata.deletion_timestamp.is_some()
        }
        Ok(None) => true,
        Err(_) => false,
    }
}

/// The last 80 lines (at most 2048 bytes) of the log, as the kubelet's fallback message.
pub(super) fn log_tail(path: &Path) -> String {
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
pub(super) async fn terminated(
    context: &Context,
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
    let mut state =
        json!({"exitCode": code, "reason": reason, "startedAt": started_at, "finishedAt": now()});
    if !message.is_empty() {
        state["message"] = json!(message);
    }
    let mut status = json!({
        "conditions": conditions(false),
        "containerStatuses": [{
            "name": container["name"], "image": container["image"], "imageID": "",
            "ready": false, "started": false, "restartCount": attempt,
            "state": {"terminated": state.clone()},
        }],
    });
    if last {
        status["phase"] = json!(phase);
    } else {
        status["containerStatuses"][0]["lastState"] = json!({"terminated": state});
    }
    patch_status(context, pod, status).await;
}

/// A Pod being deleted: its process gets SIGTERM, then SIGKILL when the grace period ends;
/// once it is gone (or never ran) the Pod is removed.
fn terminate(context: &Arc<Context>, state: &Arc<State>, pod: &Value) {
    let uid = text(&pod["metadata"]["uid"]);
    lock(&state.deleted).insert(uid.clone());
    let running = {
        let mut running = lock(&state.running);
        match running.get_mut(&uid) {
            Some(c) if !c.terminating => {
                c.terminating = true;
                Some(Running {
                    pid: c.pid,
                    container: c.container.clone(),
                    terminating: true,
                })
            }
            Some(_) => return,
            None => None,
        }
    };
    let grace = pod["metadata"]["deletionGracePeriodSeconds"]
        .as_u64()
        .unwrap_or(30);
    let (context, state, pod) = (context.clone(), state.clone(), pod.clone());
    tokio::spawn(async move {
        if let Some(c) = running {
            c.terminate();
            let deadline = tokio::time::Instant::now() + Duration::from_secs(grace);
            let mut killed = false;
            while lock(&state.running).contains_key(&uid) {
                if tokio::time::Instant::now() >= deadline && !killed {
                    c.kill();
                    killed = true;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let key = pod_ref(
                &text(&pod["metadata"]["namespace"]),
                &text(&pod["metadata"]["name"]),
            );
            lock(&state.graceful).insert(key, !killed);
        }
        remove(&context, &state, &pod).await;
    });
}

/// Deletes a Pod whose process is gone (grace period 0, this Pod's uid only) and its directory.
async fn remove(context: &Context, state: &State, pod: &Value) {
    let (ns, pname) = (
        text(&pod["metadata"]["namespace"]),
        text(&pod["metadata"]["name"]),
    );
    let uid = text(&pod["metadata"]["uid"]);
    let pods: Api<Pod> = Api::namespaced(context.client.clone(), &ns);
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: Some(uid.clone()),
            resource_version: None,
        }),
        ..Default::default()
    };
    if let Err(e) = pods.delete(&pname, &params).await {
        tracing::debug!("deleting {ns}/{pname}: {e}");
    }
    lock(&state.started).remove(&uid);
    tokio::spawn(super::cgroup::remove_when_empty(uid.clone()));
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
        if let Some(dir) = log.parent().map(PathBuf::from) {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}
