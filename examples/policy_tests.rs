//! Unit-testing plan policies with the Rust API, the way a team tests its own code.
//!
//! `cargo test -p examples --example policy_tests` runs the `#[test]`s below: each loads the
//! starter policies of `examples/policies/`, evaluates a plan JSON made by real Terraform
//! (`terraform show -json`), and asserts on the verdict. `cargo run -p examples --example
//! policy_tests` prints the verdict of every fixture plan.

use std::path::{Path, PathBuf};

use tfops_core::api::{ObjectMeta, TerraformObject};
use tfops_core::policy::{CompiledPolicy, Outcome, TerraformPolicy, Verdict, compile, evaluate};

fn policies_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("policies")
}

/// Loads and compiles one policy file (a `TerraformPolicy` YAML document). A broken rule is
/// an error here, naming the policy, the rule and the CEL problem.
fn load(file: &str) -> Result<CompiledPolicy, Box<dyn std::error::Error>> {
    let text = std::fs::read_to_string(policies_dir().join(file))?;
    let policy: TerraformPolicy = serde_yaml_ng::from_str(&text)?;
    Ok(compile(&policy)?)
}

/// The `Terraform` object the plan belongs to: policies select objects by namespace and labels,
/// and rules may read its spec as `object`.
fn object(namespace: &str) -> TerraformObject {
    TerraformObject {
        metadata: ObjectMeta {
            name: "payments".into(),
            namespace: namespace.into(),
            ..ObjectMeta::default()
        },
        spec: serde_json::from_value(serde_json::json!({
            "sourceRef": {"kind": "GitRepository", "url": "https://git.example.com/payments.git"},
        }))
        .unwrap_or_else(|e| panic!("a valid spec: {e}")),
        status: Default::default(),
    }
}

/// Evaluates `policies` against a fixture plan.
fn verdict(
    policies: &[CompiledPolicy],
    fixture: &str,
) -> Result<Verdict, Box<dyn std::error::Error>> {
    let text = std::fs::read_to_string(policies_dir().join("fixtures").join(fixture))?;
    let plan: serde_json::Value = serde_json::from_str(&text)?;
    Ok(evaluate(policies, &plan, &object("default"))?)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let policies = [
        "no-stateful-deletes.yaml",
        "no-public-ingress.yaml",
        "max-changes.yaml",
        "required-tags.yaml",
    ]
    .into_iter()
    .map(load)
    .collect::<Result<Vec<_>, _>>()?;
    let mut fixtures: Vec<_> = std::fs::read_dir(policies_dir().join("fixtures"))?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<Result<_, _>>()?;
    fixtures.sort();
    for fixture in fixtures {
        let v = verdict(&policies, &fixture)?;
        let verdict = if v.denied() { "DENIED" } else { "allowed" };
        println!("{fixture:<30} {verdict}");
        for r in v.violations() {
            if let Outcome::Violation { message, .. } | Outcome::Error { message } = &r.outcome {
                println!("    {}/{}: {message}", r.policy, r.rule);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn replacing_a_database_is_denied_and_names_it() {
        let policies = [load("no-stateful-deletes.yaml").unwrap()];
        let v = verdict(&policies, "replace-database.plan.json").unwrap();
        assert!(v.denied());
        let r = &v.results[0];
        assert_eq!(r.rule, "no-stateful-deletes");
        let Outcome::Violation { message, addresses } = &r.outcome else {
            panic!("expected a violation, got {:?}", r.outcome);
        };
        assert_eq!(addresses, &["aws_db_instance.orders"]);
        assert!(message.contains("would be replaced"), "{message}");
    }

    #[test]
    fn deleting_a_server_is_allowed() {
        let policies = [load("no-stateful-deletes.yaml").unwrap()];
        let v = verdict(&policies, "delete-instance.plan.json").unwrap();
        assert!(!v.denied(), "{v:?}");
        assert_eq!(v.results[0].outcome, Outcome::Pass);
    }

    #[test]
    fn a_compliant_plan_passes_every_starter_policy() {
        let policies: Vec<_> = [
            "no-stateful-deletes.yaml",
            "no-public-ingress.yaml",
            "max-changes.yaml",
            "required-tags.yaml",
        ]
        .into_iter()
        .map(|f| load(f).unwrap())
        .collect();
        let v = verdict(&policies, "compliant.plan.json").unwrap();
        assert_eq!(v.violations().count(), 0, "{v:?}");
    }

    #[test]
    fn a_policy_in_another_namespace_does_not_apply() {
        let mut policy: TerraformPolicy = serde_yaml_ng::from_str(
            &std::fs::read_to_string(policies_dir().join("max-changes.yaml")).unwrap(),
        )
        .unwrap();
        policy.metadata.namespace = "team-b".into();
        let text = std::fs::read_to_string(
            policies_dir()
                .join("fixtures")
                .join("many-changes.plan.json"),
        )
        .unwrap();
        let plan: serde_json::Value = serde_json::from_str(&text).unwrap();
        let compiled = [compile(&policy).unwrap()];
        assert!(
            evaluate(&compiled, &plan, &object("team-b"))
                .unwrap()
                .denied()
        );
        assert!(
            evaluate(&compiled, &plan, &object("team-a"))
                .unwrap()
                .results
                .is_empty()
        );
    }
}
