//! The report: seed, commit, versions and duration; operations and faults by kind (with the
//! phase each fault struck); applies succeeded, failed and of unknown outcome; times to
//! converge; each invariant's cases; the managers' memory. Kept with what reproduces a run:
//! the event log, the ledger, the managers' and the control plane's logs.

use std::fmt::Write as _;
use std::time::Duration;

use crate::check::{Finding, applied_twice};
use crate::ledger::Kind;
use crate::run::Converged;
use crate::{Replica, Soak};

/// Resident memory (KiB) of the replica's process now.
pub(crate) fn memory(replica: &Replica) -> Option<u64> {
    let pid = replica.process.as_ref()?.child.id();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

fn percentile(sorted: &[Duration], p: f64) -> String {
    if sorted.is_empty() {
        return "-".into();
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    format!("{:.1} s", sorted[i].as_secs_f64())
}

/// The commit checked out now (read when the soak starts: the tree may move on meanwhile).
pub(crate) fn git_commit() -> String {
    std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// Writes the report and the logs under the soak's directory; returns the report.
pub(crate) fn write(soak: &Soak, converged: &Converged, findings: &[Finding]) -> String {
    let entries = soak.ledger.entries();
    let mut r = String::new();
    let _ = writeln!(r, "# Soak, seed {}\n", soak.settings.seed);
    let _ = writeln!(
        r,
        "commit {}; Kubernetes 1.37.2, etcd 3.7.3, Terraform {}; faults and users for {:.1} min, {:.1} min in all\n",
        soak.settings.commit,
        terraform_version(),
        soak.settings.minutes,
        soak.started.elapsed().as_secs_f64() / 60.0
    );
    let _ = writeln!(
        r,
        "## User actions\n\n| action | made | refused |\n|---|---|---|"
    );
    for (kind, (made, refused)) in &soak.actions {
        let _ = writeln!(r, "| {kind} | {made} | {refused} |");
    }
    let mut injected: std::collections::BTreeMap<&str, (u32, u32)> = Default::default();
    for (_, what) in &soak.events {
        if let Some(fault) = what.strip_prefix("fault: ") {
            let name = fault.split(" on ").next().unwrap_or(fault);
            let n = injected
                .entry(name.trim_end_matches(" (aimed mid-apply)"))
                .or_default();
            n.0 += 1;
            n.1 += u32::from(name.ends_with("(aimed mid-apply)"));
        }
    }
    let _ = writeln!(
        r,
        "\n## Faults injected\n\n| fault | times | aimed at an apply |\n|---|---|---|"
    );
    for (name, (n, aimed)) in &injected {
        let _ = writeln!(r, "| {name} | {n} | {aimed} |");
    }
    let _ = writeln!(
        r,
        "\n## What the faults struck\n\n| fault | phase of an object struck | times |\n|---|---|---|"
    );
    for ((kind, phase), n) in &soak.faults {
        let _ = writeln!(r, "| {kind} | {phase} | {n} |");
    }
    let starts = entries.iter().filter(|e| e.kind == Kind::Start).count();
    let dones = entries.iter().filter(|e| e.kind == Kind::Done).count();
    let destroys = entries.iter().filter(|e| e.kind == Kind::Destroy).count();
    let (_, unknown) = applied_twice(soak, &entries);
    let _ = writeln!(
        r,
        "\n## Applies (the ledger)\n\ncreates begun {starts}, ended {dones}, not ended (killed, failed or under way: outcome unknown to the witness) {}; destroys {destroys}; contents created again after an unknown outcome (Terraform's own limit, not a violation) {}",
        starts.saturating_sub(dones),
        unknown.len()
    );
    for u in &unknown {
        let _ = writeln!(r, "- {u}");
    }
    let mut latencies: Vec<Duration> = soak
        .world
        .changes
        .iter()
        .filter_map(|c| {
            entries
                .iter()
                .find(|e| {
                    e.kind == Kind::Done
                        && e.owner == c.owner
                        && e.content == c.content
                        && e.at > c.at
                })
                .map(|e| e.at - c.at)
        })
        .collect();
    latencies.sort();
    let mut settle: Vec<Duration> = converged.at.values().flatten().copied().collect();
    settle.sort();
    let _ = writeln!(
        r,
        "\n## Convergence\n\nfrom a change (or an approval) to its content created, {} of {} changes (the others were superseded): p50 {}, p99 {}, max {}\n\nfrom the faults' end to every object converged ({} of {} within {:?}): p50 {}, p99 {}, max {}",
        latencies.len(),
        soak.world.changes.len(),
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        percentile(&latencies, 1.0),
        settle.len(),
        converged.at.len(),
        crate::run::CONVERGE_WITHIN,
        percentile(&settle, 0.5),
        percentile(&settle, 0.99),
        percentile(&settle, 1.0),
    );
    let _ = writeln!(
        r,
        "\n## Invariants\n\n| invariant | violations |\n|---|---|"
    );
    for f in findings {
        let _ = writeln!(r, "| {} | {} |", f.name, f.cases.len());
    }
    for f in findings.iter().filter(|f| !f.cases.is_empty()) {
        let _ = writeln!(r, "\n{}:", f.name);
        for c in &f.cases {
            let _ = writeln!(r, "- {c}");
        }
    }
    let _ = writeln!(
        r,
        "\n## Managers\n\n| replica | shard | processes | exits on a lost Lease | memory at start | at the end |\n|---|---|---|---|---|---|"
    );
    for rep in &soak.replicas {
        let _ = writeln!(
            r,
            "| {} | {} | {} | {} | {:.1} MiB | {} |",
            rep.identity,
            rep.shard.as_deref().unwrap_or("(default)"),
            rep.logs.len(),
            rep.lease_losses,
            rep.memory_at_start as f64 / 1024.0,
            memory(rep).map_or("not running".into(), |m| format!(
                "{:.1} MiB",
                m as f64 / 1024.0
            ))
        );
    }
    keep(soak, &r);
    r
}

fn terraform_version() -> String {
    std::env::var("TFOPS_TERRAFORM")
        .ok()
        .and_then(|t| std::process::Command::new(t).arg("version").output().ok())
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .find(|l| l.starts_with("Terraform v"))
                .unwrap_or_default()
                .trim_start_matches("Terraform ")
                .to_string()
        })
        .unwrap_or_default()
}

/// Keeps the report, the event log, the managers' and the control plane's logs.
fn keep(soak: &Soak, report: &str) {
    let out = &soak.settings.out;
    let _ = std::fs::write(out.join("report.md"), report);
    let events: String = soak
        .events
        .iter()
        .map(|(at, what)| {
            format!(
                "{:8.1} {what}\n",
                at.saturating_duration_since(soak.started).as_secs_f64()
            )
        })
        .collect();
    let _ = std::fs::write(out.join("events.log"), events);
    for rep in &soak.replicas {
        for (n, log) in rep.logs.iter().enumerate() {
            let text = log.lock().unwrap().join("\n");
            let _ = std::fs::write(out.join(format!("{}-{n}.log", rep.identity)), text);
        }
    }
    // `audit` is the API server's audit log (metadata of every request: who wrote what when).
    for component in ["etcd", "kube-apiserver", "kube-controller-manager", "audit"] {
        let _ = std::fs::write(
            out.join(format!("{component}.log")),
            soak.op.cluster.log(component),
        );
    }
}
