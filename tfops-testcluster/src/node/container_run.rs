//! A Pod's container run as a real container (see `podman`): started, its status written as a
//! kubelet writes it, restarted by the Pod's `restartPolicy`, reported `OOMKilled` when the
//! kernel's OOM killer took it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use super::pod::{
    conditions, gone, log_tail, may_not_start, now, patch_status, terminated, waiting,
};
use super::{Context, Running, State, cgroup, lock, podman};

/// One Pod's container as a real container.
pub(super) struct ContainerRun<'a> {
    pub context: &'a Context,
    pub state: &'a State,
    pub pod: &'a Value,
    pub container: &'a Value,
    /// Mount path → host directory of its volumes.
    pub mounts: &'a [(String, PathBuf)],
    /// Its environment, the API server's address included.
    pub env: &'a [(String, String)],
    /// Its address on the bridge network.
    pub ip: std::net::Ipv4Addr,
    pub log: &'a Path,
}

fn text(v: &Value) -> String {
    v.as_str().unwrap_or("").to_string()
}

impl ContainerRun<'_> {
    /// Runs one init container to completion (once: a failure fails the Pod, as for a Pod
    /// that is never restarted); whether it completed. The Pod stays Pending meanwhile.
    pub(super) async fn run_init(&self) -> bool {
        let (pod, c) = (self.pod, self.container);
        let status = |state: Value, phase: &str| {
            json!({
                "phase": phase,
                "conditions": [
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": now()},
                    {"type": "Initialized", "status": "False", "reason": "ContainersNotInitialized",
                     "lastTransitionTime": now()},
                    {"type": "Ready", "status": "False", "lastTransitionTime": now()},
                ],
                "initContainerStatuses": [{
                    "name": c["name"], "image": c["image"], "imageID": "", "ready": false,
                    "restartCount": 0, "started": state.get("running").is_some(), "state": state,
                }],
            })
        };
        let uid = text(&pod["metadata"]["uid"]);
        let Ok(log) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log)
        else {
            return false;
        };
        let run = podman::Run {
            pod,
            container: c,
            mounts: self.mounts,
            env: self.env,
            ip: self.ip,
            cgroup_parent: None,
        };
        let mut cmd = match run.command(log).await {
            Ok(cmd) => cmd,
            Err(e) => {
                let w = json!({"waiting": {"reason": "CreateContainerConfigError", "message": e}});
                patch_status(self.context, pod, status(w, "Pending")).await;
                return false;
            }
        };
        let name = podman::name(&uid);
        podman::remove(&name);
        if may_not_start(self.state, &uid) {
            return false;
        }
        let started_at = now();
        let Ok(mut child) = cmd.spawn() else {
            return false;
        };
        let pid = child.id().and_then(|p| i32::try_from(p).ok()).unwrap_or(0);
        lock(&self.state.running).insert(
            uid.clone(),
            Running {
                pid,
                container: Some(name),
                terminating: false,
            },
        );
        let running = json!({"running": {"startedAt": started_at}});
        patch_status(self.context, pod, status(running, "Pending")).await;
        let code = child
            .wait()
            .await
            .ok()
            .and_then(|s| s.code())
            .unwrap_or(128);
        lock(&self.state.running).remove(&uid);
        let reason = if code == 0 { "Completed" } else { "Error" };
        let t = json!({"terminated": {"exitCode": code, "reason": reason,
            "startedAt": started_at, "finishedAt": now()}});
        let phase = if code == 0 { "Pending" } else { "Failed" };
        patch_status(self.context, pod, status(t, phase)).await;
        code == 0
    }

    /// Runs it until it ends for good (or the Pod goes).
    pub(super) async fn run(self) {
        let (pod, container) = (self.pod, self.container);
        let (ns, pname, uid) = (
            text(&pod["metadata"]["namespace"]),
            text(&pod["metadata"]["name"]),
            text(&pod["metadata"]["uid"]),
        );
        let name = podman::name(&uid);
        let limit = container["resources"]["limits"]["memory"]
            .as_str()
            .and_then(cgroup::parse_quantity);
        let mut ip = self.ip;
        let mut attempt = 0u32;
        loop {
            let Ok(log) = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(self.log)
            else {
                return;
            };
            cgroup::prepare(&uid, limit);
            let run = podman::Run {
                pod,
                container,
                mounts: self.mounts,
                env: self.env,
                ip,
                cgroup_parent: cgroup::parent(&uid),
            };
            let mut cmd = match run.command(log).await {
                Ok(c) => c,
                Err(e) => {
                    let status = waiting(container, "CreateContainerConfigError", &e);
                    patch_status(self.context, pod, status).await;
                    return;
                }
            };
            if may_not_start(self.state, &uid) {
                return;
            }
            // A container of this name left by an earlier attempt would make podman refuse.
            podman::remove(&name);
            let started_at = now();
            let Ok(mut child) = cmd.spawn() else {
                let message = format!("failed to start container \"{}\"", text(&container["name"]));
                terminated(
                    self.context,
                    pod,
                    container,
                    128,
                    "StartError",
                    &message,
                    &started_at,
                    attempt,
                    true,
                )
                .await;
                return;
            };
            let pid = child.id().and_then(|p| i32::try_from(p).ok()).unwrap_or(0);
            lock(&self.state.running).insert(
                uid.clone(),
                Running {
                    pid,
                    container: Some(name.clone()),
                    terminating: false,
                },
            );
            let oom_before = cgroup::oom_kills(&uid);
            let oom = Arc::new(AtomicBool::new(false));
            let oom_watch = tokio::spawn(oom_group_kill(
                uid.clone(),
                name.clone(),
                oom_before,
                oom.clone(),
            ));
            // The Pod's address is told once the container runs: before, its address is not on
            // the bridge (the bridge itself may not exist yet) and a connection to it would
            // leave the host by the default route.
            let mut exited = None;
            while !podman::running(&name).await {
                if let Ok(Some(status)) = child.try_wait() {
                    exited = Some(status);
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let ids = json!({
                "image": container["image"], "imageID": format!("podman://{}", text(&container["image"])),
                "containerID": format!("podman://{name}"), "name": container["name"],
            });
            let running = |ready: bool| {
                let mut s = ids.clone();
                s["ready"] = json!(ready);
                s["started"] = json!(true);
                s["restartCount"] = json!(attempt);
                s["state"] = json!({"running": {"startedAt": started_at}});
                s
            };
            patch_status(
                self.context,
                pod,
                json!({
                    "phase": "Running",
                    "podIP": ip.to_string(), "podIPs": [{"ip": ip.to_string()}],
                    "hostIP": "127.0.0.1", "hostIPs": [{"ip": "127.0.0.1"}],
                    "startTime": started_at,
                    "conditions": conditions(false),
                    "containerStatuses": [running(false)],
                }),
            )
            .await;
            let readiness = {
                let port = container["ports"][0]["containerPort"]
                    .as_u64()
                    .and_then(|p| u16::try_from(p).ok());
                let status =
                    json!({"conditions": conditions(true), "containerStatuses": [running(true)]});
                let (client, pod) = (self.context.client.clone(), pod.clone());
                tokio::spawn(async move {
                    if let Some(port) = port {
                        while tokio::net::TcpStream::connect((ip, port)).await.is_err() {
                            tokio::time::sleep(Duration::from_millis(25)).await;
                        }
                    }
                    super::pod::patch_status_with(&client, &pod, status).await;
                })
            };
            let status = match exited {
                Some(status) => Ok(status),
                None => child.wait().await,
            };
            oom_watch.abort();
            // Finished (or cancelled at a wait) before its verdict is read.
            let _ = oom_watch.await;
            readiness.abort();
            let _ = readiness.await;
            let terminating = lock(&self.state.running)
                .remove(&uid)
                .is_some_and(|c| c.terminating);
            let code = status.ok().and_then(|s| s.code()).unwrap_or(128);
            let oom_killed = oom.load(Ordering::SeqCst) || cgroup::oom_kills(&uid) > oom_before;
            // podman's own failures (125: the container could not be made, e.g. its address
            // taken by another test's container) are a start error, not the container's exit.
            let (reason, message) = if code == 125 {
                ("StartError", log_tail(self.log))
            } else if code == 0 {
                ("Completed", String::new())
            } else if oom_killed {
                ("OOMKilled", String::new())
            } else if container["terminationMessagePolicy"] == "FallbackToLogsOnError" {
                ("Error", log_tail(self.log))
            } else {
                ("Error", String::new())
            };
            let code = if oom_killed { 137 } else { code };
            let policy = pod["spec"]["restartPolicy"].as_str().unwrap_or("Always");
            let restart = !terminating
                && (policy == "Always" || (policy == "OnFailure" && code != 0) || code == 125);
            terminated(
                self.context,
                pod,
                container,
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
            if code == 125 {
                ip = podman::allocate_ip();
            }
            attempt += 1;
            let backoff = Duration::from_millis(500 * u64::from(attempt.min(20)));
            let message = format!(
                "back-off restarting failed container {}",
                text(&container["name"])
            );
            let mut s = ids.clone();
            s["ready"] = json!(false);
            s["started"] = json!(false);
            s["restartCount"] = json!(attempt);
            s["state"] = json!({"waiting": {"reason": "CrashLoopBackOff", "message": message}});
            patch_status(self.context, pod, json!({"containerStatuses": [s]})).await;
            tokio::time::sleep(backoff).await;
            if may_not_start(self.state, &uid) || gone(self.context, &ns, &pname, &uid).await {
                return;
            }
        }
    }
}

/// Kills the whole container once it is out of memory (a process waits at the limit,
/// [`cgroup::under_oom`], or the OOM killer killed one), as a kubelet on cgroup v2 does
/// (`memory.oom.group`, where the kernel kills them all at once); notes that it did. Polls every 10 ms and kills the processes directly: through podman alone, the
/// container's other processes would go on for a tenth of a second or more (time for
/// Terraform to write its state and release its lock, which a real OOM kill never gives).
async fn oom_group_kill(uid: String, name: String, before: u64, seen: Arc<AtomicBool>) {
    loop {
        tokio::time::sleep(Duration::from_millis(10)).await;
        if cgroup::under_oom(&uid) || cgroup::oom_kills(&uid) > before {
            // Noted before the kill: the task waiting for the container may read it as soon
            // as the container's process dies.
            seen.store(true, Ordering::SeqCst);
            cgroup::kill_all(&uid);
            // Before anything of podman's: the exit of the container's process makes its
            // monitor start `podman container cleanup` (and `runc`) inside this group, which
            // would wait at the cut limit for good, holding the container's lock that any
            // other podman command on it waits for.
            cgroup::lift_limit(&uid);
            let _ = tokio::task::spawn_blocking(move || podman::kill(&name, "KILL")).await;
            return;
        }
    }
}
