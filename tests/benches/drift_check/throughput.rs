//! How many drift checks one manager sustains with container runners: `objects` objects, all
//! asked for a check at once, `rounds` times, at each `--concurrent`; and so how many objects
//! a 10-minute interval allows.

use std::time::{Duration, Instant};

use kube::api::{Patch, PatchParams};
use serde_json::json;

use crate::support::operator::{Operator, ready_with};

/// Checks per minute at `concurrent`, from `objects` objects checked `rounds` times.
pub(crate) async fn per_minute(objects: usize, concurrent: u16, rounds: usize) -> f64 {
    let mut op = Operator::prepare_on(true).await;
    let image = crate::support::runner_image();
    let concurrent = concurrent.to_string();
    op.start_prepared(&["--runner-pod-image", &image, "--concurrent", &concurrent]);
    let names: Vec<String> = (0..objects).map(|i| format!("o{i}")).collect();
    for name in &names {
        op.apply(&op.manifest(name, json!({"approvePlan": "auto", "interval": "1h"})));
    }
    for name in &names {
        op.wait_for(name, "became Ready", 600, |t| {
            ready_with(t, "TerraformAppliedSucceed")
        })
        .await;
    }
    let began = Instant::now();
    for round in 0..rounds {
        let token = format!("round-{round}");
        for name in &names {
            let body = json!({"metadata": {"annotations": {
                tfops_core::api::annotations::RECONCILE: token.clone()
            }}});
            op.terraforms()
                .patch(name, &PatchParams::default(), &Patch::Merge(body))
                .await
                .unwrap();
        }
        for name in &names {
            let token = token.clone();
            op.wait_for(name, "checked", 600, move |t| {
                t.status.as_ref().is_some_and(|s| {
                    s.last_handled_reconcile_at.as_deref() == Some(token.as_str())
                        && !s.conditions.iter().any(|c| c.type_ == "Reconciling")
                })
            })
            .await;
        }
    }
    let elapsed = began.elapsed().max(Duration::from_millis(1));
    (objects * rounds) as f64 / elapsed.as_secs_f64() * 60.0
}
