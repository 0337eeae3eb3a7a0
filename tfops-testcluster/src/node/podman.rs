//! A Pod's container as a real container: podman with runc, from an image podman has, on
//! podman's default bridge network (each Pod its own address, which the host reaches), with
//! the container's `securityContext`, volumes, environment and memory limit mapped to podman's
//! flags as a kubelet maps them to its runtime.
//!
//! runc, not crun: crun refuses the hybrid cgroup layout of these machines. The ulimits are
//! explicit because podman's default raises `RLIMIT_NOFILE` above the hard limit and fails.
//! The memory limit is not podman's `--memory`: the Pod's memory cgroup (see `cgroup`) is the
//! container's cgroup parent and carries the limit, so an in-place resize works as for a
//! process, and the OOM killer's kills are counted where the agent reads them.

use std::collections::HashSet;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::Value;

use super::container::{ConfigError, output_to};

/// The podman program.
const PODMAN: &str = "podman";

/// The label naming the process whose node agent made a container, as `<pid namespace>:<pid>`
/// (leftovers of a process that died are removed when the next agent of the same PID namespace
/// starts; another namespace's pids mean nothing here).
pub const OWNER_LABEL: &str = "io.tfops.node-agent.pid";

/// This process's owner label value.
fn owner() -> String {
    format!("{}:{}", pid_namespace(), std::process::id())
}

/// The PID namespace of this process (`pid:[4026531836]`).
fn pid_namespace() -> String {
    std::fs::read_link("/proc/self/ns/pid")
        .map(|p| p.display().to_string())
        .unwrap_or_default()
}

/// podman with the OCI runtime this machine needs, for one subcommand.
fn podman() -> std::process::Command {
    let mut cmd = std::process::Command::new(PODMAN);
    cmd.args(["--runtime", "runc"]);
    cmd
}

/// Whether podman is installed and answers.
pub fn available() -> bool {
    podman()
        .args(["version", "--format", "{{.Client.Version}}"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The gateway of podman's default network: the host's address as a container reaches it.
pub fn gateway() -> Option<Ipv4Addr> {
    let out = podman()
        .args([
            "network",
            "inspect",
            "podman",
            "--format",
            "{{range .Subnets}}{{.Gateway}} {{end}}",
        ])
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .find_map(|g| g.parse().ok())
}

/// The host end of the veth pair that keeps the bridge in use (see [`pin_bridge`]).
const ANCHOR: &str = "tfops-anc0";

/// `ip ARGS`, its success.
fn ip(args: &[&str]) -> bool {
    std::process::Command::new("ip")
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Keeps podman's bridge stable for containers that come and go. A Linux bridge takes the
/// lowest MAC address among its ports unless given one: when a container leaves, the bridge's
/// MAC can change under the others, whose ARP entry for the gateway then points nowhere (seen
/// here: a container lost the API server for good once another stopped). And netavark deletes
/// the bridge when its last container leaves. So the bridge is made if missing (podman's own
/// name, gateway and prefix), a veth end of our own is attached to it for good (it is never
/// empty, never deleted), and the bridge gets that end's MAC as its fixed address. Best effort
/// (root and iproute2 needed); it stays after the agent.
pub fn pin_bridge() {
    let Ok(out) = podman()
        .args([
            "network",
            "inspect",
            "podman",
            "--format",
            "{{.NetworkInterface}} {{range .Subnets}}{{.Subnet}} {{.Gateway}} {{end}}",
        ])
        .output()
    else {
        return;
    };
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut words = text.split_whitespace();
    let (Some(bridge), Some(subnet), Some(gateway)) = (words.next(), words.next(), words.next())
    else {
        return;
    };
    let Some((_, prefix)) = subnet.split_once('/') else {
        return;
    };
    let sys = |name: &str| PathBuf::from("/sys/class/net").join(name);
    if !sys(bridge).exists() {
        let _ = ip(&["link", "add", bridge, "type", "bridge"])
            && ip(&["addr", "add", &format!("{gateway}/{prefix}"), "dev", bridge])
            && ip(&["link", "set", bridge, "up"]);
    }
    if !sys(ANCHOR).exists() {
        let _ = ip(&[
            "link",
            "add",
            ANCHOR,
            "type",
            "veth",
            "peer",
            "name",
            "tfops-anc1",
        ]) && ip(&["link", "set", ANCHOR, "master", bridge])
            && ip(&["link", "set", ANCHOR, "up"])
            && ip(&["link", "set", "tfops-anc1", "up"]);
    }
    let fixed = std::fs::read_to_string(sys(bridge).join("addr_assign_type"))
        .is_ok_and(|t| t.trim() == "3");
    if !fixed
        && let Ok(mac) = std::fs::read_to_string(sys(ANCHOR).join("address"))
        && !ip(&["link", "set", "dev", bridge, "address", mac.trim()])
    {
        tracing::warn!("could not give the bridge {bridge} a fixed MAC address");
    }
}

/// Whether podman has the image (nothing is ever pulled: no registry is reachable here).
pub async fn image_exists(image: &str) -> bool {
    tokio::process::Command::new(PODMAN)
        .args(["image", "exists", image])
        .status()
        .await
        .is_ok_and(|s| s.success())
}

/// The user an image runs as (`Config.User`), empty for root.
async fn image_user(image: &str) -> String {
    let out = tokio::process::Command::new(PODMAN)
        .args(["image", "inspect", "--format", "{{.Config.User}}", image])
        .output()
        .await;
    out.map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// Addresses on the bridge network, `10.88.<a>.<b>`, unique within this process and, by the
/// process id in `<a>`, unlikely to meet another test process's (podman refuses an address in
/// use; the Pod then waits and is tried again with the next one).
pub fn allocate_ip() -> Ipv4Addr {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let a = 1 + (std::process::id() % 250) as u8;
    Ipv4Addr::new(10, 88, a, (n % 250 + 2) as u8)
}

/// The Pod's host name, as a kubelet gives it: `spec.hostname`, else the Pod's name.
pub fn host_name(pod: &Value) -> &str {
    pod["spec"]["hostname"]
        .as_str()
        .filter(|h| !h.is_empty())
        .or_else(|| pod["metadata"]["name"].as_str())
        .unwrap_or("")
}

/// The container's name for the Pod with `uid` (one container per Pod is run).
pub fn name(uid: &str) -> String {
    format!("tfops-pod-{uid}")
}

/// Whether the container runs now (its network is attached: its address routes to it).
pub async fn running(name: &str) -> bool {
    tokio::process::Command::new(PODMAN)
        .args(["inspect", "--format", "{{.State.Status}}", name])
        .output()
        .await
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "running")
}

/// Sends `signal` (`TERM`, `KILL`) to the container; whether podman did.
pub fn kill(name: &str, signal: &str) -> bool {
    podman()
        .args(["kill", "--signal", signal, name])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Removes the container, stopping it first if it runs.
pub fn remove(name: &str) {
    let _ = podman()
        .args(["rm", "--force", "--time", "0", name])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
}

/// Removes containers an earlier agent made whose process is gone (a test killed mid-run:
/// `podman run` died with it, its container did not).
pub fn remove_orphans() {
    let Ok(out) = podman()
        .args([
            "ps",
            "--all",
            "--filter",
            &format!("label={OWNER_LABEL}"),
            "--format",
            &format!("{{{{.Names}}}} {{{{index .Labels \"{OWNER_LABEL}\"}}}}"),
        ])
        .output()
    else {
        return;
    };
    let ours = pid_namespace();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some((name, owner)) = line.split_once(' ') else {
            continue;
        };
        let Some((namespace, pid)) = owner.trim().rsplit_once(':') else {
            continue;
        };
        if namespace != ours {
            continue;
        }
        let alive = pid
            .parse::<i32>()
            .is_ok_and(|p| Path::new(&format!("/proc/{p}")).exists());
        if !alive {
            remove(name);
        }
    }
}

/// The numeric field `key` of the container's `securityContext`, else of the Pod's.
fn security<'a>(pod: &'a Value, container: &'a Value, key: &str) -> &'a Value {
    let own = &container["securityContext"][key];
    if own.is_null() {
        &pod["spec"]["securityContext"][key]
    } else {
        own
    }
}

/// Mount paths of the container that are read-only: `readOnly` mounts, and every Secret,
/// ConfigMap, projected and downward API volume (a kubelet mounts those read-only always).
fn read_only_mounts(pod: &Value, container: &Value) -> HashSet<String> {
    let read_only_volumes: HashSet<&str> = pod["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| {
            ["secret", "configMap", "projected", "downwardAPI"]
                .iter()
                .any(|k| v[*k].is_object())
        })
        .filter_map(|v| v["name"].as_str())
        .collect();
    container["volumeMounts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| {
            m["readOnly"] == true
                || m["name"]
                    .as_str()
                    .is_some_and(|n| read_only_volumes.contains(n))
        })
        .filter_map(|m| m["mountPath"].as_str())
        .map(|p| p.trim_end_matches('/').to_string())
        .collect()
}

/// Gives the Pod's volume files the owners and modes a kubelet gives them: Secret, ConfigMap,
/// projected and downward API files take the volume's `defaultMode` (0644 when unset),
/// emptyDirs are 0777; with an `fsGroup` every file and directory is that group's, files of
/// read-only volumes gain group read (0440), others group read-write (0660), directories the
/// set-group-id bit.
pub fn set_ownership(pod: &Value, volumes_dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let fs_group = pod["spec"]["securityContext"]["fsGroup"].as_u64();
    for v in pod["spec"]["volumes"].as_array().into_iter().flatten() {
        let Some(vname) = v["name"].as_str() else {
            continue;
        };
        let dir = volumes_dir.join(vname);
        let kind = ["secret", "configMap", "projected", "downwardAPI"]
            .into_iter()
            .find(|k| v[*k].is_object());
        let (file_mode, read_only) = match kind {
            Some(k) => (v[k]["defaultMode"].as_u64().unwrap_or(0o644) as u32, true),
            None => (0o777, false),
        };
        let group_mask = if read_only { 0o440 } else { 0o660 };
        let set = |path: &Path, is_dir: bool| {
            let mut mode = if is_dir {
                if kind.is_some() { 0o755 } else { 0o777 }
            } else {
                file_mode
            };
            if let Some(g) = fs_group {
                let _ = std::os::unix::fs::chown(path, None, u32::try_from(g).ok());
                mode |= if is_dir { 0o2000 | 0o050 } else { group_mask };
            }
            let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode));
        };
        set(&dir, true);
        for entry in walk(&dir) {
            set(&entry, entry.is_dir());
        }
    }
}

/// Every path below `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p.clone());
            }
            out.push(p);
        }
    }
    out
}

/// What a container is run with.
pub struct Run<'a> {
    /// The Pod, as the API server has it.
    pub pod: &'a Value,
    /// The container of the Pod to run.
    pub container: &'a Value,
    /// Mount path → host directory of each of its volume mounts.
    pub mounts: &'a [(String, PathBuf)],
    /// Its environment: the Pod's `env`/`envFrom` and the API server's address.
    pub env: &'a [(String, String)],
    /// Its address on the bridge network.
    pub ip: Ipv4Addr,
    /// The Pod's memory cgroup (relative to the hierarchy's root), the container's parent.
    pub cgroup_parent: Option<String>,
}

impl Run<'_> {
    /// `podman run` of the container, attached (its output is the container's), its exit
    /// status the container's; the environment's values are handed over through podman's own
    /// environment, never on its command line.
    ///
    /// # Errors
    /// `runAsNonRoot` with an image that runs as root and no `runAsUser`.
    pub async fn command(
        &self,
        log: std::fs::File,
    ) -> Result<tokio::process::Command, ConfigError> {
        let (pod, c) = (self.pod, self.container);
        let image = c["image"].as_str().unwrap_or("");
        let uid = pod["metadata"]["uid"].as_str().unwrap_or("");
        let mut args: Vec<String> = vec![
            "--runtime".into(),
            "runc".into(),
            "run".into(),
            "--rm".into(),
            "--name".into(),
            name(uid),
            "--label".into(),
            format!("{OWNER_LABEL}={}", owner()),
            "--ip".into(),
            self.ip.to_string(),
            "--hostname".into(),
            host_name(pod).to_string(),
            "--ulimit".into(),
            "nofile=20000:20000".into(),
            "--ulimit".into(),
            "nproc=4096:4096".into(),
            "--pull".into(),
            "never".into(),
        ];
        args.extend(self.security_flags(image).await?);
        if let Some(parent) = &self.cgroup_parent {
            args.extend(["--cgroup-parent".into(), parent.clone()]);
        }
        let read_only = read_only_mounts(pod, c);
        for (mount, dir) in self.mounts {
            let ro = if read_only.contains(mount) { ":ro" } else { "" };
            args.extend(["--volume".into(), format!("{}:{mount}{ro}", dir.display())]);
        }
        for (k, _) in self.env {
            args.extend(["--env".into(), k.clone()]);
        }
        if let Some(w) = c["workingDir"].as_str() {
            args.extend(["--workdir".into(), w.into()]);
        }
        let command: Vec<&str> = c["command"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        if !command.is_empty() {
            args.extend([
                "--entrypoint".into(),
                serde_json::json!(command).to_string(),
            ]);
        }
        args.push(image.to_string());
        args.extend(
            c["args"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(String::from),
        );
        let mut cmd = tokio::process::Command::new(PODMAN);
        cmd.args(&args)
            .envs(self.env.iter().cloned())
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        output_to(&mut cmd, log);
        Ok(cmd)
    }

    /// The `securityContext` (the container's, else the Pod's) as podman flags.
    async fn security_flags(&self, image: &str) -> Result<Vec<String>, ConfigError> {
        let (pod, c) = (self.pod, self.container);
        let sc = &c["securityContext"];
        let mut flags = Vec::new();
        let user = security(pod, c, "runAsUser").as_u64();
        let group = security(pod, c, "runAsGroup").as_u64();
        match (user, group) {
            (Some(u), Some(g)) => flags.extend(["--user".into(), format!("{u}:{g}")]),
            (Some(u), None) => flags.extend(["--user".into(), u.to_string()]),
            _ => {}
        }
        if security(pod, c, "runAsNonRoot") == true {
            let runs_as_root = match user {
                Some(u) => u == 0,
                None => {
                    let u = image_user(image).await;
                    let name = u.split(':').next().unwrap_or("");
                    name.is_empty() || name == "root" || name == "0"
                }
            };
            if runs_as_root {
                return Err("container has runAsNonRoot and image will run as root".into());
            }
        }
        if let Some(g) = pod["spec"]["securityContext"]["fsGroup"].as_u64() {
            flags.extend(["--group-add".into(), g.to_string()]);
        }
        for g in pod["spec"]["securityContext"]["supplementalGroups"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_u64)
        {
            flags.extend(["--group-add".into(), g.to_string()]);
        }
        if sc["privileged"] == true {
            flags.push("--privileged".into());
        }
        if sc["readOnlyRootFilesystem"] == true {
            // Only the root: podman would also put tmpfs on /tmp, /var/tmp and /run.
            flags.extend(["--read-only".into(), "--read-only-tmpfs=false".into()]);
        }
        if sc["allowPrivilegeEscalation"] == false {
            flags.extend(["--security-opt".into(), "no-new-privileges".into()]);
        }
        for cap in sc["capabilities"]["drop"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            flags.push(format!("--cap-drop={cap}"));
        }
        for cap in sc["capabilities"]["add"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            flags.push(format!("--cap-add={cap}"));
        }
        // A kubelet's default is Unconfined unless asked (the SeccompDefault feature is off by
        // default); RuntimeDefault is podman's default profile.
        let seccomp = security(pod, c, "seccompProfile");
        match seccomp["type"].as_str() {
            Some("RuntimeDefault") => {}
            Some("Localhost") => {
                let profile = seccomp["localhostProfile"].as_str().unwrap_or("");
                flags.extend(["--security-opt".into(), format!("seccomp={profile}")]);
            }
            _ => flags.extend(["--security-opt".into(), "seccomp=unconfined".into()]),
        }
        Ok(flags)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secret_and_projected_mounts_are_read_only_empty_dirs_are_not() {
        let pod = json!({"spec": {"volumes": [
            {"name": "tls", "secret": {"secretName": "s"}},
            {"name": "tmp", "emptyDir": {}},
            {"name": "ro", "emptyDir": {}},
        ]}});
        let c = json!({"volumeMounts": [
            {"name": "tls", "mountPath": "/tls/"},
            {"name": "tmp", "mountPath": "/tmp"},
            {"name": "ro", "mountPath": "/ro", "readOnly": true},
        ]});
        let ro = read_only_mounts(&pod, &c);
        assert!(ro.contains("/tls") && ro.contains("/ro") && !ro.contains("/tmp"));
    }

    #[tokio::test]
    async fn the_security_context_becomes_podman_flags() {
        let pod = json!({"metadata": {"uid": "u"}, "spec": {"securityContext": {"fsGroup": 7}}});
        let c = json!({"image": "x", "securityContext": {
            "runAsUser": 65532, "runAsGroup": 65532, "runAsNonRoot": true,
            "readOnlyRootFilesystem": true, "allowPrivilegeEscalation": false,
            "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"},
        }});
        let run = Run {
            pod: &pod,
            container: &c,
            mounts: &[],
            env: &[],
            ip: Ipv4Addr::new(10, 88, 1, 2),
            cgroup_parent: None,
        };
        let flags = run.security_flags("x").await.unwrap().join(" ");
        assert_eq!(
            flags,
            "--user 65532:65532 --group-add 7 --read-only --read-only-tmpfs=false \
             --security-opt no-new-privileges --cap-drop=ALL"
        );
        let root = json!({"image": "x", "securityContext": {"runAsUser": 0, "runAsNonRoot": true}});
        let run = Run {
            container: &root,
            ..run
        };
        assert!(run.security_flags("x").await.is_err());
        let plain = json!({"image": "x"});
        let run = Run {
            container: &plain,
            ..run
        };
        assert_eq!(
            run.security_flags("x").await.unwrap().join(" "),
            "--group-add 7 --security-opt seccomp=unconfined"
        );
    }
}
