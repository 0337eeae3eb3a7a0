//! How `tfops history` and `tfops logs` (and their `tfops local` forms) print a run history.

use tfops_core::history::RunEntry;

/// How long ago `t` was, as kubectl prints ages (`45s`, `12m`, `3h`, `5d`).
pub fn age(t: Option<jiff::Timestamp>) -> String {
    let Some(t) = t else { return "-".into() };
    let secs = jiff::Timestamp::now().as_second() - t.as_second();
    match secs.max(0) {
        s if s < 120 => format!("{s}s"),
        s if s < 2 * 3600 => format!("{}m", s / 60),
        s if s < 2 * 86400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

/// `main@sha1:0123456789abcdef…` as `main@0123456`.
fn short_revision(revision: &str) -> String {
    match revision.split_once('@') {
        Some((reference, digest)) => {
            let hex = digest.split_once(':').map_or(digest, |(_, h)| h);
            format!("{reference}@{}", &hex[..hex.len().min(7)])
        }
        None => revision.to_string(),
    }
}

/// The table of `runs` (newest first, numbered from 1).
pub fn rows(runs: &[RunEntry]) -> Vec<Vec<String>> {
    let mut rows = vec![
        [
            "#", "STARTED", "TRIGGER", "REVISION", "PLAN", "CHANGES", "RESULT", "REASON", "BINARY",
            "DURATION",
        ]
        .map(String::from)
        .to_vec(),
    ];
    let dash = |s: &str| {
        if s.is_empty() {
            "-".to_string()
        } else {
            s.to_string()
        }
    };
    for (i, r) in runs.iter().enumerate() {
        rows.push(vec![
            (i + 1).to_string(),
            age(Some(r.started_at)) + " ago",
            r.trigger.clone(),
            dash(&short_revision(&r.revision)),
            dash(&r.plan_id),
            r.summary.map_or("-".into(), |s| s.to_string()),
            r.result.clone(),
            dash(&r.reason),
            dash(&r.binary),
            format!("{:.1}s", r.duration().as_secs_f64()),
        ]);
    }
    rows
}

/// Prints the runs of `object` as a table (a line on standard error when there are none).
pub fn print_runs(object: &str, runs: &[RunEntry]) {
    if runs.is_empty() {
        eprintln!("{object} has no recorded runs yet.");
        return;
    }
    for line in crate::local::output::render_table(&rows(runs)) {
        println!("{line}");
    }
}

/// Prints Terraform's kept output of run `n` (1: the newest) of `object`.
///
/// # Errors
/// A run number past the history.
pub fn print_output(object: &str, runs: &[RunEntry], n: usize) -> anyhow::Result<()> {
    let Some(run) = n.checked_sub(1).and_then(|i| runs.get(i)) else {
        anyhow::bail!(
            "{object} has {} recorded run(s); --run takes 1 (the newest) to {}",
            runs.len(),
            runs.len()
        );
    };
    eprintln!(
        "run {n} of {object}: {} ({}), started {}, {}{}",
        run.result,
        run.trigger,
        run.started_at,
        run.reason,
        identities(run)
    );
    if run.output_tail.is_empty() {
        eprintln!("(no Terraform output was kept for this run)");
    }
    print!("{}", run.output_tail);
    Ok(())
}

/// `, with tofu 1.12.6, planned by A, applied by B` for the binary and identities a run
/// recorded, and the state lock it released and why (empty when it recorded none).
fn identities(run: &RunEntry) -> String {
    let mut out = String::new();
    if !run.binary.is_empty() {
        out.push_str(&format!(", with {}", run.binary));
    }
    if !run.planned_by.is_empty() {
        out.push_str(&format!(", planned by {}", run.planned_by));
    }
    if !run.applied_by.is_empty() {
        out.push_str(&format!(", applied by {}", run.applied_by));
    }
    if !run.unlocked.is_empty() {
        out.push_str(&format!(", released state {}", run.unlocked));
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn run(planned_by: &str, applied_by: &str) -> RunEntry {
        serde_json::from_value(serde_json::json!({
            "startedAt": "2026-12-01T10:00:00Z",
            "finishedAt": "2026-12-01T10:00:05Z",
            "trigger": "interval",
            "result": "Succeeded",
            "reason": "TerraformAppliedSucceed",
            "plannedBy": planned_by,
            "appliedBy": applied_by,
        }))
        .unwrap()
    }

    #[test]
    fn the_output_header_names_who_planned_and_who_applied() {
        assert_eq!(
            identities(&run(
                "system:serviceaccount:a:tf-plan",
                "system:serviceaccount:a:tf-apply"
            )),
            ", planned by system:serviceaccount:a:tf-plan, applied by system:serviceaccount:a:tf-apply"
        );
        assert_eq!(
            identities(&run("local:plan", "")),
            ", planned by local:plan"
        );
        assert_eq!(identities(&run("", "")), "");
        let mut released = run("", "");
        released.unlocked =
            "lock l-1 of 65532@app-tf-runner-0a1b2c3d4e: a runner of this object that is gone"
                .into();
        assert_eq!(
            identities(&released),
            ", released state lock l-1 of 65532@app-tf-runner-0a1b2c3d4e: a runner of this object that is gone"
        );
    }

    #[test]
    fn revisions_are_shortened_as_git_does() {
        assert_eq!(short_revision("main@sha1:0123456789abcdef"), "main@0123456");
        assert_eq!(short_revision("v1@sha256:abc"), "v1@abc");
        assert_eq!(short_revision(""), "");
    }
}
