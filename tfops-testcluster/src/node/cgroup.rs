//! Memory limits, enforced by the kernel: each container's processes go in a memory cgroup of
//! their own (`limits.memory` of the container), so a process that grows past it is killed by
//! the kernel's OOM killer and the Pod reports `OOMKilled`, as under a kubelet.
//!
//! cgroup v1's memory controller (`/sys/fs/cgroup/memory`, what these machines mount) or
//! cgroup v2 (`/sys/fs/cgroup` with `memory.max`). Without either, or without the right to
//! write there, limits are not enforced (and the Pod still runs).

use std::path::PathBuf;

/// The directory of the memory cgroup of the Pod with `uid`, and whether it is cgroup v1.
fn dir(uid: &str) -> Option<(PathBuf, bool)> {
    let v1 = PathBuf::from("/sys/fs/cgroup/memory");
    if v1.join("memory.limit_in_bytes").exists() {
        return Some((v1.join("tfops-node").join(uid), true));
    }
    let v2 = PathBuf::from("/sys/fs/cgroup");
    v2.join("cgroup.controllers")
        .exists()
        .then(|| (v2.join("tfops-node").join(uid), false))
}

/// A Kubernetes memory quantity in bytes (`64Mi`, `1G`, `128974848`, `1e9`).
pub fn parse_quantity(q: &str) -> Option<u64> {
    let q = q.trim();
    let units: [(&str, f64); 12] = [
        ("Ki", 1024.0),
        ("Mi", 1024.0 * 1024.0),
        ("Gi", 1024.0 * 1024.0 * 1024.0),
        ("Ti", 1024.0f64.powi(4)),
        ("Pi", 1024.0f64.powi(5)),
        ("Ei", 1024.0f64.powi(6)),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("P", 1e15),
        ("E", 1e18),
    ];
    for (suffix, factor) in units {
        if let Some(n) = q.strip_suffix(suffix) {
            return n.parse::<f64>().ok().map(|n| (n * factor) as u64);
        }
    }
    q.parse::<f64>().ok().map(|n| n as u64)
}

/// Makes the Pod's memory cgroup, limited to `limit` bytes when given; gives the file a
/// process writes its pid to in order to join it (`cgroup.procs`). The container's first
/// process joins before it execs the image's binary, so that nothing it starts is outside.
pub fn prepare(uid: &str, limit: Option<u64>) -> Option<PathBuf> {
    let (dir, v1) = dir(uid)?;
    if !v1 {
        // cgroup v2 gives a child group the memory controller only when each parent enables it
        // for its children (best effort: a limit that cannot be set is simply not enforced).
        let root = PathBuf::from("/sys/fs/cgroup");
        let _ = std::fs::write(root.join("cgroup.subtree_control"), "+memory");
        let _ = std::fs::create_dir_all(root.join("tfops-node"));
        let _ = std::fs::write(root.join("tfops-node/cgroup.subtree_control"), "+memory");
    }
    std::fs::create_dir_all(&dir).ok()?;
    if let Some(limit) = limit {
        set_limit(uid, limit);
    }
    Some(dir.join("cgroup.procs"))
}

/// Sets the memory limit of the Pod's cgroup (as an in-place resize does); whether it took.
///
/// An OOM kill then takes the whole Pod at once, as a kubelet's does on cgroup v2
/// (`memory.oom.group`). cgroup v1 has no such switch, so there the kernel's OOM killer is
/// turned off for the group: a process reaching the limit waits in the kernel (`under_oom`),
/// and the agent kills every process of the group ([`under_oom`], [`kill_all`]). Killing the
/// largest process alone would leave Terraform time to write its state and release its lock,
/// which a real OOM kill never gives.
pub fn set_limit(uid: &str, limit: u64) -> bool {
    let Some((dir, v1)) = dir(uid) else {
        return false;
    };
    let file = limit_file(v1);
    let group = if v1 {
        ("memory.oom_control", "1")
    } else {
        ("memory.oom.group", "1")
    };
    let _ = std::fs::write(dir.join(group.0), group.1);
    // v1 refuses a memory limit above the memory+swap one: that one is lifted first, and set
    // again after ([`no_swap`]).
    if v1 {
        let _ = std::fs::write(dir.join("memory.memsw.limit_in_bytes"), "-1");
    }
    let set = std::fs::write(dir.join(file), limit.to_string()).is_ok() || v1 && cut_to_usage(&dir);
    if set {
        no_swap(&dir, v1);
    }
    set
}

/// cgroup v1 refuses a limit below what the group uses (EBUSY, once reclaim fails): the limit
/// then is what it uses now, and its next allocation is out of memory. The usage may grow
/// between the read and the write, so a few tries.
fn cut_to_usage(dir: &std::path::Path) -> bool {
    (0..5).any(|_| {
        std::fs::read_to_string(dir.join("memory.usage_in_bytes"))
            .ok()
            .and_then(|u| u.trim().parse::<u64>().ok())
            .is_some_and(|used| {
                std::fs::write(dir.join(limit_file(true)), (used + (64 << 10)).to_string()).is_ok()
            })
    })
}

/// No swap past the limit, as a kubelet sets it: on a machine with swap, a process over its
/// limit would be swapped out rather than OOM-killed. (v1: memory and swap together limited
/// to the memory limit, where the kernel accounts swap; v2: no swap.)
fn no_swap(dir: &std::path::Path, v1: bool) {
    if v1 {
        let memsw = dir.join("memory.memsw.limit_in_bytes");
        if let Ok(limit) = std::fs::read_to_string(dir.join(limit_file(true))) {
            let _ = std::fs::write(memsw, limit.trim());
        }
    } else {
        let _ = std::fs::write(dir.join("memory.swap.max"), "0");
    }
}

/// Lifts the Pod's memory limit (after its container was OOM-killed): the runtime's own
/// processes in the group (podman's monitor and the `podman container cleanup` it starts when
/// the container exits) must not be held at a limit meant for the container, or they wait in
/// the kernel for good.
pub fn lift_limit(uid: &str) {
    let Some((dir, v1)) = dir(uid) else { return };
    let unlimited = if v1 { "-1" } else { "max" };
    // v1 keeps memory+swap at least the memory limit: that one is raised first.
    if v1 {
        let _ = std::fs::write(dir.join("memory.memsw.limit_in_bytes"), unlimited);
    }
    let _ = std::fs::write(dir.join(limit_file(v1)), unlimited);
}

/// The file of a cgroup's memory limit (cgroup v1 or v2).
fn limit_file(v1: bool) -> &'static str {
    if v1 {
        "memory.limit_in_bytes"
    } else {
        "memory.max"
    }
}

/// Whether a process of the Pod's cgroup (or of a group below it) waits at the memory limit
/// with the OOM killer turned off (cgroup v1, see [`set_limit`]): the Pod is out of memory.
pub fn under_oom(uid: &str) -> bool {
    let Some((dir, true)) = dir(uid) else {
        return false;
    };
    let under = |dir: &std::path::Path| {
        std::fs::read_to_string(dir.join("memory.oom_control"))
            .unwrap_or_default()
            .lines()
            .any(|l| l.trim() == "under_oom 1")
    };
    under(&dir)
        || std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .any(|c| c.path().is_dir() && under(&c.path()))
}

/// The Pod's cgroup as a container runtime's `--cgroup-parent` names it (relative to the
/// hierarchy's root), once [`prepare`] has made it.
pub fn parent(uid: &str) -> Option<String> {
    let (dir, _) = dir(uid)?;
    dir.is_dir().then(|| format!("/tfops-node/{uid}"))
}

/// How many processes of the Pod's cgroup the OOM killer has killed. cgroup v2 counts a
/// child's kills in its parent too; v1 counts them only where the victim was, so there the
/// counts of the child groups (a real container's own cgroup, while it exists) are added.
pub fn oom_kills(uid: &str) -> u64 {
    let Some((dir, v1)) = dir(uid) else { return 0 };
    let count = |dir: &std::path::Path| -> u64 {
        let file = if v1 {
            "memory.oom_control"
        } else {
            "memory.events"
        };
        std::fs::read_to_string(dir.join(file))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("oom_kill "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    };
    let mut total = count(&dir);
    if v1 {
        for child in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            if child.path().is_dir() {
                total += count(&child.path());
            }
        }
    }
    total
}

/// SIGKILL to every process in the Pod's cgroup and the groups below it but `conmon` (podman's
/// monitor, which records the container's exit): what the kernel does at once with
/// `memory.oom.group` on cgroup v2, done by hand where it has no such switch.
pub fn kill_all(uid: &str) {
    let Some((dir, _)) = dir(uid) else { return };
    let mut todo = vec![dir];
    while let Some(d) = todo.pop() {
        let pids = std::fs::read_to_string(d.join("cgroup.procs")).unwrap_or_default();
        for pid in pids.lines().filter_map(|p| p.trim().parse::<i32>().ok()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        for child in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = child.path();
            if path.is_dir() && child.file_name() != "conmon" {
                todo.push(path);
            }
        }
    }
}

/// Removes the Pod's cgroup and the groups the runtime made below it (its containers' and
/// their monitor's), deepest first: a cgroup with children cannot be removed. A group with a
/// process still in it stays; whether none is left.
pub fn remove(uid: &str) -> bool {
    match dir(uid) {
        Some((dir, _)) => {
            // Deepest first: a cgroup with children cannot be removed.
            for group in tree(dir.clone()).iter().rev() {
                let _ = std::fs::remove_dir(group);
            }
            !dir.exists()
        }
        None => true,
    }
}

/// Removes the Pod's cgroup once the runtime's last process in it is gone (podman's monitor
/// ends after the container, with its cleanup), as a kubelet's housekeeping retries it;
/// gives up after a minute (a test that checks for leftovers then finds it).
pub async fn remove_when_empty(uid: String) {
    let began = std::time::Instant::now();
    while !remove(&uid) && began.elapsed() < std::time::Duration::from_secs(60) {
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

/// The group `dir` and every group below it, each after its parent.
fn tree(dir: PathBuf) -> Vec<PathBuf> {
    let mut groups = vec![dir];
    let mut next = 0;
    while let Some(d) = groups.get(next).cloned() {
        next += 1;
        let children = std::fs::read_dir(&d).into_iter().flatten().flatten();
        groups.extend(children.map(|c| c.path()).filter(|p| p.is_dir()));
    }
    groups
}

/// The Pod's cgroup directory, when it exists.
pub fn existing(uid: &str) -> Option<PathBuf> {
    dir(uid).map(|(d, _)| d).filter(|d| d.exists())
}

/// Every process in the Pod's cgroup and the groups below it.
pub fn pids(uid: &str) -> Vec<i32> {
    let groups = existing(uid).map(tree).unwrap_or_default();
    groups
        .iter()
        .flat_map(|d| {
            let procs = std::fs::read_to_string(d.join("cgroup.procs")).unwrap_or_default();
            let pids: Vec<i32> = procs
                .lines()
                .filter_map(|p| p.trim().parse().ok())
                .collect();
            pids
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::parse_quantity;

    #[test]
    fn quantities_in_binary_and_decimal_units() {
        assert_eq!(parse_quantity("64Mi"), Some(64 * 1024 * 1024));
        assert_eq!(parse_quantity("1G"), Some(1_000_000_000));
        assert_eq!(parse_quantity("128974848"), Some(128_974_848));
        assert_eq!(parse_quantity("abc"), None);
    }
}
