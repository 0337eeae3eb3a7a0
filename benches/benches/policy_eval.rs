//! `policy_eval`: parsing a plan JSON of 10,000 resource changes and evaluating 50 policy
//! rules over it, against parsing the same JSON with serde_json alone (the floor: every
//! evaluation must read the plan).

// A benchmark aborts when its setup fails: there is nothing to measure then.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::hint::black_box;
use std::time::Duration;

use benches::{plan_with_changes, starter_policies_dir};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use tfops_core::api::{ObjectMeta, TerraformObject};
use tfops_core::policy::{CompiledPolicy, TerraformPolicy, compile, evaluate};

/// The four starter policies (5 rules) ten times over, each copy with its own name and limit:
/// 50 rules, 40 of them run once per resource change.
fn policies() -> Vec<CompiledPolicy> {
    let mut out = Vec::new();
    for copy in 0..10 {
        for file in [
            "no-stateful-deletes.yaml",
            "no-public-ingress.yaml",
            "max-changes.yaml",
            "required-tags.yaml",
        ] {
            let text = std::fs::read_to_string(starter_policies_dir().join(file)).unwrap();
            let mut p: TerraformPolicy = serde_yaml_ng::from_str(&text).unwrap();
            p.metadata.name = format!("{}-{copy}", p.metadata.name);
            for v in &mut p.spec.variables {
                if v.name == "limit" {
                    v.expression = format!("{}", 20_000 + copy);
                }
            }
            out.push(compile(&p).unwrap());
        }
    }
    assert_eq!(out.iter().map(|p| p.rule_count()).sum::<usize>(), 50);
    out
}

fn object() -> TerraformObject {
    TerraformObject {
        metadata: ObjectMeta {
            name: "bench".into(),
            ..ObjectMeta::default()
        },
        spec: serde_json::from_value(
            serde_json::json!({"sourceRef": {"kind": "Local", "url": "."}}),
        )
        .unwrap(),
        status: Default::default(),
    }
}

fn bench(c: &mut Criterion) {
    let policies = policies();
    let object = object();
    for changes in [1_000, 10_000] {
        let json = plan_with_changes(changes).unwrap();
        let plan: serde_json::Value = serde_json::from_slice(&json).unwrap();
        let verdict = evaluate(&policies, &plan, &object).unwrap();
        println!(
            "policy_eval/{changes}: {} bytes of plan JSON, {} rule results, {} violated",
            json.len(),
            verdict.results.len(),
            verdict.violations().count()
        );
        let mut g = c.benchmark_group(format!("policy_eval/{changes}-changes"));
        g.throughput(Throughput::Bytes(json.len() as u64));
        g.sample_size(10);
        g.warm_up_time(Duration::from_millis(500));
        g.measurement_time(Duration::from_secs(5));
        g.bench_function(BenchmarkId::new("parse", "serde_json"), |b| {
            b.iter(|| serde_json::from_slice::<serde_json::Value>(black_box(&json)).unwrap())
        });
        g.bench_function(BenchmarkId::new("parse+evaluate", "50-rules"), |b| {
            b.iter(|| {
                let plan: serde_json::Value = serde_json::from_slice(black_box(&json)).unwrap();
                evaluate(&policies, &plan, &object).unwrap()
            })
        });
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
