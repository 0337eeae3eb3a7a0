//! Reading a runner Pod's status: whether it is Ready, and whether (and how) it died, in the
//! words a user needs (reason, exit code, the container's message).

use k8s_openapi::api::core::v1::Pod;

/// Container waiting reasons that do not go away by waiting (the Pod will not start).
const STUCK: &[&str] = &[
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
    "CrashLoopBackOff",
    "RunContainerError",
];

/// Whether the Pod is Ready.
pub fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The Pod's address, once it has one.
pub fn pod_ip(pod: &Pod) -> Option<String> {
    pod.status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .filter(|ip| !ip.is_empty())
}

/// The port the Pod's runner serves gRPC on: its container port named `grpc` (a Pod made
/// before `--runner-grpc-port` changed keeps its own).
pub fn grpc_port(pod: &Pod) -> Option<u16> {
    let spec = pod.spec.as_ref()?;
    spec.containers
        .iter()
        .flat_map(|c| c.ports.iter().flatten())
        .find(|p| p.name.as_deref() == Some("grpc"))
        .and_then(|p| u16::try_from(p.container_port).ok())
}

/// Why the Pod's runner is gone or will never serve, if it is: deleted, its container
/// terminated (reason, exit code, message), failed, or stuck waiting.
pub fn death(pod: &Pod) -> Option<String> {
    if pod.metadata.deletion_timestamp.is_some() {
        return Some("was deleted".into());
    }
    let status = pod.status.as_ref()?;
    let container = status
        .container_statuses
        .as_ref()
        .and_then(|cs| cs.first())
        .and_then(|c| c.state.as_ref());
    if let Some(t) = container.and_then(|s| s.terminated.as_ref()) {
        let mut text = ending(t.reason.as_deref(), t.exit_code);
        let printed = t.message.as_deref().map(last_lines).unwrap_or_default();
        if !printed.is_empty() {
            text.push_str("; the last lines Terraform printed:\n");
            text.push_str(&printed);
        }
        return Some(text);
    }
    if let Some(w) = container.and_then(|s| s.waiting.as_ref())
        && let Some(reason) = w.reason.as_deref().filter(|r| STUCK.contains(r))
    {
        let message = w.message.clone().unwrap_or_default();
        return Some(
            format!("{reason}: {message}")
                .trim_end_matches(": ")
                .to_string(),
        );
    }
    match status.phase.as_deref() {
        Some(phase @ ("Failed" | "Succeeded")) => Some(format!(
            "phase {phase}{}",
            status
                .message
                .as_deref()
                .map(|m| format!(": {m}"))
                .unwrap_or_default()
        )),
        _ => None,
    }
}

/// How a container ended, in words: killed for memory, killed by a signal (an exit code over
/// 128 is 128 + the signal, as a shell and the kubelet report it), or exited with a code.
fn ending(reason: Option<&str>, code: i32) -> String {
    if reason == Some("OOMKilled") {
        return format!("killed (OOMKilled: over its memory limit, exit code {code})");
    }
    if code > 128 {
        let signal = match code - 128 {
            1 => "SIGHUP".to_string(),
            2 => "SIGINT".to_string(),
            6 => "SIGABRT".to_string(),
            9 => "SIGKILL".to_string(),
            11 => "SIGSEGV".to_string(),
            15 => "SIGTERM".to_string(),
            n => format!("signal {n}"),
        };
        return format!("killed by {signal} (exit code {code})");
    }
    match reason {
        Some(r) if r != "Error" => format!("exited with code {code} ({r})"),
        _ => format!("exited with code {code}"),
    }
}

/// Lines of a termination message (the tail of the runner's log, which may start mid-line)
/// as a person reads them: the lines Terraform printed, from the runner's JSON log lines
/// (those naming a `command`), at most the last [`PRINTED_LINES`]; without any, the runner's
/// own last messages; plain text lines as they are. A cut first line is dropped.
fn last_lines(message: &str) -> String {
    let mut terraform = Vec::new();
    let mut runner = Vec::new();
    for (i, line) in message.lines().enumerate() {
        let line = line.trim_end();
        if line.is_empty() {
            continue;
        }
        match serde_json::from_str::<serde_json::Value>(line) {
            Ok(serde_json::Value::Object(o)) => {
                let text = o
                    .get("message")
                    .and_then(|m| m.as_str())
                    .unwrap_or_default();
                if o.contains_key("command") {
                    terraform.push(text.to_string());
                } else if !text.is_empty() {
                    runner.push(text.to_string());
                }
            }
            // The first line of a cut log is a fragment of a JSON line: not worth reading.
            _ if i == 0 && !line.starts_with('{') && message.contains("\n{") => {}
            _ if line.starts_with('{') || line.contains("\":") => {}
            _ => runner.push(line.to_string()),
        }
    }
    let chosen = if terraform.is_empty() {
        runner
    } else {
        terraform
    };
    let from = chosen.len().saturating_sub(PRINTED_LINES);
    tail(&chosen[from..].join("\n"), 1200)
}

/// How many of the last printed lines a death's message keeps.
const PRINTED_LINES: usize = 8;

/// The Pod's state in a few words, for a timeout message.
pub fn summary(pod: &Pod) -> String {
    let status = pod.status.clone().unwrap_or_default();
    let mut text = format!("phase {}", status.phase.unwrap_or_else(|| "Pending".into()));
    let waiting = status
        .container_statuses
        .as_ref()
        .and_then(|cs| cs.first())
        .and_then(|c| c.state.as_ref())
        .and_then(|s| s.waiting.as_ref())
        .and_then(|w| w.reason.clone());
    if let Some(w) = waiting {
        text.push_str(&format!(", container waiting: {w}"));
    }
    if !is_ready(pod) {
        text.push_str(", not Ready");
    }
    text
}

/// The last `max` bytes of `text` (on a character boundary): the end of a log says most.
fn tail(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("...{}", &text[start..])
}

/// Who the Pod acts as towards the API server: its ServiceAccount's user name
/// (`system:serviceaccount:<namespace>:<name>`, as RBAC sees it).
pub fn identity(pod: &Pod) -> String {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    let account = pod
        .spec
        .as_ref()
        .and_then(|s| s.service_account_name.as_deref())
        .filter(|a| !a.is_empty())
        .unwrap_or("default");
    format!("system:serviceaccount:{namespace}:{account}")
}

/// Which runner the Pod is, by its [`super::pod::LABEL_ROLE`] label.
pub fn role(pod: &Pod) -> Option<tfops_core::api::RunnerRole> {
    use tfops_core::api::RunnerRole;
    match pod
        .metadata
        .labels
        .as_ref()?
        .get(super::pod::LABEL_ROLE)?
        .as_str()
    {
        "plan" => Some(RunnerRole::Plan),
        "apply" => Some(RunnerRole::Apply),
        "pull-request" => Some(RunnerRole::PullRequest),
        _ => None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({"metadata": {"name": "p"}, "status": status}))
            .unwrap()
    }

    #[test]
    fn terminations_and_stuck_containers_are_described() {
        let oom = pod(
            serde_json::json!({"phase": "Failed", "containerStatuses": [{
            "name": "tf-runner", "ready": false, "restartCount": 0, "image": "i", "imageID": "",
            "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled", "message": "killed"}}}]}),
        );
        assert_eq!(
            death(&oom).as_deref(),
            Some(
                "killed (OOMKilled: over its memory limit, exit code 137); the last lines \
                 Terraform printed:\nkilled"
            )
        );
        let stuck = pod(
            serde_json::json!({"phase": "Pending", "containerStatuses": [{
            "name": "tf-runner", "ready": false, "restartCount": 0, "image": "i", "imageID": "",
            "state": {"waiting": {"reason": "ErrImagePull", "message": "no such image"}}}]}),
        );
        assert_eq!(
            death(&stuck).as_deref(),
            Some("ErrImagePull: no such image")
        );
        let starting = pod(
            serde_json::json!({"phase": "Pending", "containerStatuses": [{
            "name": "tf-runner", "ready": false, "restartCount": 0, "image": "i", "imageID": "",
            "state": {"waiting": {"reason": "ContainerCreating"}}}]}),
        );
        assert_eq!(death(&starting), None);
        assert!(summary(&starting).contains("ContainerCreating"));
        let ready = pod(serde_json::json!({"phase": "Running", "podIP": "10.0.0.1",
            "conditions": [{"type": "Ready", "status": "True"}]}));
        assert!(is_ready(&ready) && death(&ready).is_none());
        assert_eq!(pod_ip(&ready).as_deref(), Some("10.0.0.1"));
        assert!(tail(&"é".repeat(1000), 11).starts_with("..."));
    }

    #[test]
    fn a_killed_runner_says_so_and_what_terraform_printed_last() {
        assert_eq!(
            ending(Some("Error"), 137),
            "killed by SIGKILL (exit code 137)"
        );
        assert_eq!(
            ending(Some("Error"), 143),
            "killed by SIGTERM (exit code 143)"
        );
        assert_eq!(ending(Some("Error"), 1), "exited with code 1");
        assert_eq!(
            ending(Some("Completed"), 0),
            "exited with code 0 (Completed)"
        );
        // A log tail cut mid-line: the fragment goes, Terraform's lines stay as text.
        let log = concat!(
            "ld\":\"x\",\"message\":\"serving\"}\n",
            "{\"level\":\"INFO\",\"message\":\"serving\",\"port\":30000}\n",
            "{\"level\":\"INFO\",\"command\":\"apply\",\"stream\":\"stdout\",\"message\":\"terraform_data.x: Creating...\"}\n",
            "{\"level\":\"INFO\",\"command\":\"apply\",\"stream\":\"stdout\",\"message\":\"terraform_data.x: Still creating... [10s elapsed]\"}\n",
        );
        assert_eq!(
            last_lines(log),
            "terraform_data.x: Creating...\nterraform_data.x: Still creating... [10s elapsed]"
        );
        // No Terraform line: the runner's own last messages.
        assert_eq!(
            last_lines("{\"message\":\"serving\"}\n{\"message\":\"stopping\"}\n"),
            "serving\nstopping"
        );
    }
}
