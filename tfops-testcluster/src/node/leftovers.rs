//! What a Pod the agent ran may leave on the host after it is gone: its memory cgroup (and the
//! runtime's groups below it), processes still in them, and processes naming its container
//! (podman's monitor `conmon`, a `podman run` that never returned). A kubelet removes all of
//! these; a test that counts on a clean node asks for them by name.

use std::collections::{HashMap, HashSet};

use super::{cgroup, podman};

/// The leftovers of the Pods in `ever` (uid → `namespace/name`) that are neither in `live`
/// (the API server still lists them) nor in `running` (the agent runs them now, reported
/// apart); and a line for each Pod the agent still runs that the API server no longer has.
pub(super) fn find(
    ever: &HashMap<String, String>,
    live: &HashSet<String>,
    running: &HashSet<String>,
) -> Vec<String> {
    let mut out = Vec::new();
    let gone: Vec<(&String, &String)> = ever
        .iter()
        .filter(|(uid, _)| !live.contains(*uid))
        .collect();
    let commands = commands();
    for (uid, pod) in gone {
        let whose = format!("Pod {pod} ({uid})");
        if running.contains(uid) {
            out.push(format!("{whose}: still run by the node"));
        }
        for pid in cgroup::pids(uid) {
            out.push(format!(
                "{whose}: process {pid} ({}) in its cgroup",
                name_of(pid)
            ));
        }
        if let Some(dir) = cgroup::existing(uid) {
            out.push(format!("{whose}: cgroup {}", dir.display()));
        }
        let container = podman::name(uid);
        for (pid, command) in &commands {
            if command.split(' ').any(|word| word == container) {
                out.push(format!(
                    "{whose}: process {pid} ({}) naming its container",
                    name_of(*pid)
                ));
            }
        }
    }
    out.sort();
    out
}

/// Every process's command line, its arguments joined by spaces.
fn commands() -> Vec<(i32, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(bytes) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let words: Vec<String> = bytes
            .split(|b| *b == 0)
            .filter(|w| !w.is_empty())
            .map(|w| String::from_utf8_lossy(w).into_owned())
            .collect();
        out.push((pid, words.join(" ")));
    }
    out
}

/// A process's name (`comm`), or `?` once it is gone.
fn name_of(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|c| c.trim().to_string())
        .unwrap_or_else(|_| "?".into())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_process_naming_a_gone_pods_container_is_found_and_a_live_pods_is_not() {
        // A process of our own whose command line names a container, as conmon's does
        // (`$0` of a shell that stays, as `; true` keeps it from exec'ing `sleep`).
        let (gone, live) = ("00000000-gone-test", "00000000-live-test");
        let mut child = std::process::Command::new("bash")
            .args(["-c", "sleep 30; true", &podman::name(gone)])
            .spawn()
            .unwrap();
        // Right after the exec the kernel may show an empty command line for a moment.
        let cmdline = format!("/proc/{}/cmdline", child.id());
        let began = std::time::Instant::now();
        while std::fs::read(&cmdline).unwrap_or_default().is_empty() {
            assert!(began.elapsed().as_secs() < 10, "bash never started");
            std::thread::yield_now();
        }
        let ever = HashMap::from([
            (gone.to_string(), "ns/gone".to_string()),
            (live.to_string(), "ns/live".to_string()),
        ]);
        let live_set = HashSet::from([live.to_string()]);
        let found = find(&ever, &live_set, &HashSet::new());
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            found
                .iter()
                .any(|l| l.starts_with("Pod ns/gone") && l.contains("naming its container")),
            "{found:?}"
        );
        assert!(!found.iter().any(|l| l.contains("ns/live")), "{found:?}");
        let none = find(
            &ever,
            &HashSet::from([gone.to_string(), live.to_string()]),
            &HashSet::new(),
        );
        assert!(none.is_empty(), "{none:?}");
    }
}
