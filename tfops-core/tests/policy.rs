//! Plan policies offline: load-time checks, plan- and resource-scoped rules, Warn and Deny,
//! selection, and bad input, against a plan JSON made by real Terraform.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use serde_json::json;
use tfops_core::policy::{Action, Outcome, PolicyError, TerraformPolicy, compile, evaluate};

const PLAN: &str = include_str!("fixtures/plan-delete-update-create.json");

fn policy(spec: serde_json::Value) -> TerraformPolicy {
    serde_json::from_value(
        json!({"metadata": {"name": "guard", "namespace": "team-a"}, "spec": spec}),
    )
    .unwrap()
}

fn plan() -> serde_json::Value {
    serde_json::from_str(PLAN).unwrap()
}

#[test]
fn rules_find_deletions_counts_and_missing_tags() {
    let p = compile(&policy(json!({
        "variables": [{"name": "maxChanges", "expression": "2"}],
        "rules": [
            {"name": "no-deleting-databases", "scope": "Resource",
             "matchConditions": [{"name": "db", "expression": "change.address.endsWith('.db')"}],
             "expression": "!('delete' in change.actions)",
             "messageExpression": "change.address + ' would be deleted'"},
            {"name": "at-most-two-changes", "expression": "changes.size() <= maxChanges", "message": "too many changes"},
            {"name": "tags-required", "scope": "Resource", "action": "Warn",
             "matchConditions": [{"name": "creates", "expression": "'create' in change.actions"}],
             "expression": "size(change.after.input.tags) > 0", "message": "tags are required"},
            {"name": "port-is-https", "scope": "Resource",
             "matchConditions": [{"name": "web", "expression": "change.address == 'terraform_data.web'"}],
             "expression": "change.after.input.port == 443"}
        ]
    })))
    .unwrap();
    let object = common::object("app", json!({}));
    let object = tfops_core::api::TerraformObject {
        metadata: tfops_core::api::ObjectMeta {
            namespace: "team-a".into(),
            ..object.metadata
        },
        ..object
    };
    let verdict = evaluate(&[p], &plan(), &object).unwrap();
    let by = |name: &str| {
        verdict
            .results
            .iter()
            .find(|r| r.rule == name)
            .unwrap()
            .clone()
    };
    assert_eq!(
        by("no-deleting-databases").outcome,
        Outcome::Violation {
            message: "terraform_data.db would be deleted".into(),
            addresses: vec!["terraform_data.db".into()]
        }
    );
    assert_eq!(
        by("at-most-two-changes").outcome,
        Outcome::Violation {
            message: "too many changes".into(),
            addresses: vec![]
        }
    );
    let tags = by("tags-required");
    assert_eq!(tags.action, Action::Warn);
    assert_eq!(
        tags.outcome,
        Outcome::Violation {
            message: "tags are required".into(),
            addresses: vec!["terraform_data.cache".into()]
        }
    );
    assert_eq!(by("port-is-https").outcome, Outcome::Pass);
    assert!(verdict.denied());
    assert_eq!(verdict.violations().count(), 3);
}

#[test]
fn warn_only_violations_do_not_deny_and_unselected_objects_are_untouched() {
    let p = compile(&policy(json!({
        "selector": {"tier": "prod"},
        "rules": [{"name": "no-deletes", "action": "Warn", "expression": "deletes.size() == 0"}]
    })))
    .unwrap();
    let mut object = common::object("app", json!({}));
    object.metadata.namespace = "team-a".into();
    assert!(
        evaluate(std::slice::from_ref(&p), &plan(), &object)
            .unwrap()
            .results
            .is_empty(),
        "not selected"
    );
    object.metadata.labels.insert("tier".into(), "prod".into());
    let verdict = evaluate(&[p], &plan(), &object).unwrap();
    assert_eq!(verdict.results.len(), 1);
    assert!(!verdict.denied(), "Warn never blocks");
}

#[test]
fn broken_rules_are_reported_at_load_never_silently_passing() {
    let err = compile(&policy(
        json!({"rules": [{"name": "syntax", "expression": "changes.size( <"}]}),
    ))
    .unwrap_err();
    assert!(
        matches!(err, PolicyError::Compile { ref name, .. } if name == "syntax"),
        "{err}"
    );
    let err = compile(&policy(
        json!({"rules": [{"name": "typo", "expression": "chnges.size() == 0"}]}),
    ))
    .unwrap_err();
    assert_eq!(
        err,
        PolicyError::UnknownName {
            policy: "guard".into(),
            what: "rule",
            name: "typo".into(),
            reference: "chnges".into()
        }
    );
    assert!(err.to_string().contains("chnges"));
    // Even where CEL's `&&` would swallow the error at run time.
    let err = compile(&policy(
        json!({"rules": [{"name": "hidden", "expression": "false && chnges.size() == 0"}]}),
    ))
    .unwrap_err();
    assert!(
        matches!(err, PolicyError::UnknownName { ref reference, .. } if reference == "chnges"),
        "{err}"
    );
}

#[test]
fn a_rule_that_fails_at_run_time_is_an_error_that_denies() {
    let p = compile(&policy(
        json!({"rules": [{"name": "bad-field", "expression": "plan.no_such_field == 1"}]}),
    ))
    .unwrap();
    let mut object = common::object("app", json!({}));
    object.metadata.namespace = "team-a".into();
    let verdict = evaluate(&[p], &plan(), &object).unwrap();
    assert!(
        matches!(verdict.results[0].outcome, Outcome::Error { .. }),
        "{:?}",
        verdict.results
    );
    assert!(verdict.denied());
}

#[test]
fn what_is_not_a_plan_is_refused() {
    let p = compile(&policy(
        json!({"rules": [{"name": "x", "expression": "true"}]}),
    ))
    .unwrap();
    let object = common::object("app", json!({}));
    let err = evaluate(&[p], &json!(["not", "a", "plan"]), &object).unwrap_err();
    assert!(matches!(err, PolicyError::NotAPlan(_)));
}

#[test]
fn macros_and_their_loop_variables_compile() {
    let p = compile(&policy(json!({"rules": [
        {"name": "all", "expression": "changes.all(c, c.actions.size() > 0)"},
        {"name": "exists", "expression": "!deletes.exists(d, d.type == 'aws_db_instance')"},
        {"name": "filter", "expression": "creates.filter(c, c.type == 'terraform_data').size() <= 10"}
    ]})))
    .unwrap();
    let mut object = common::object("app", json!({}));
    object.metadata.namespace = "team-a".into();
    let verdict = evaluate(&[p], &plan(), &object).unwrap();
    assert!(
        verdict.results.iter().all(|r| r.outcome == Outcome::Pass),
        "{:?}",
        verdict.results
    );
}

#[test]
fn helpers_select_changes_by_type_and_action() {
    // The fixture plan deletes terraform_data.db, updates .web and creates .cache (no-ops aside).
    let rules = json!({"rules": [
        {"name": "of-type", "expression": "changes.ofType('terraform_data').size() == changes.size()"},
        {"name": "of-other-type", "expression": "changes.ofType('aws_s3_bucket').size() == 0"},
        {"name": "deletes", "expression": "changed.filter(c, c.isDelete()).map(c, c.address) == deletes.map(c, c.address)"},
        {"name": "creates", "expression": "changed.filter(c, c.isCreate() && !c.isReplace()).map(c, c.address) == creates.map(c, c.address)"},
        {"name": "updates", "expression": "changed.filter(c, c.isUpdate()).map(c, c.address) == updates.map(c, c.address)"},
        {"name": "as-functions", "expression": "changed.all(c, isDelete(c) || isCreate(c) || isUpdate(c))"},
        {"name": "changed-skips-no-ops", "expression": "changed.all(c, !('no-op' in c.actions)) && changed.size() == 3"},
        {"name": "strings-extension", "expression": "changed.map(c, c.name).join(',').size() > 0"},
        {"name": "regex", "expression": "changed.all(c, c.address.matches('^terraform_data[.][a-z]+$'))"}
    ]});
    let p = compile(&policy(rules)).unwrap();
    let mut object = common::object("app", json!({}));
    object.metadata.namespace = "team-a".into();
    let verdict = evaluate(&[p], &plan(), &object).unwrap();
    for r in &verdict.results {
        assert_eq!(r.outcome, Outcome::Pass, "{}", r.rule);
    }
    assert_eq!(verdict.results.len(), 9);
}

#[test]
fn a_variable_may_not_hide_a_built_in_name() {
    let err = compile(&policy(json!({
        "variables": [{"name": "change", "expression": "1"}],
        "rules": [{"name": "r", "expression": "true"}]
    })))
    .unwrap_err();
    assert!(
        matches!(err, PolicyError::Reserved { ref name, .. } if name == "change"),
        "{err}"
    );
}

mod type_prefilter {
    //! A `scope: Resource` rule whose first match condition tests `change.type` only visits
    //! changes of those types; the outcome must be exactly what visiting every change gives.
    //! The same rule with the type test written so it is not recognised (`change.type + ""`)
    //! visits every change, and both must agree on random plans.
    use super::*;
    use proptest::prelude::*;

    const TYPES: &[&str] = &[
        "aws_db_instance",
        "aws_s3_bucket",
        "aws_instance",
        "null_resource",
    ];
    const ACTIONS: &[&[&str]] = &[
        &["create"],
        &["delete"],
        &["update"],
        &["no-op"],
        &["delete", "create"],
    ];

    fn plan_of(changes: &[(usize, usize, bool)]) -> serde_json::Value {
        let rc: Vec<_> = changes
            .iter()
            .enumerate()
            .map(|(i, (t, a, tagged))| {
                let after = if ACTIONS[*a] == ["delete"] {
                    serde_json::Value::Null
                } else if *tagged {
                    json!({"tags": {"owner": "x"}, "size": i})
                } else {
                    json!({"tags": null, "size": i})
                };
                json!({"address": format!("{}.r{i}", TYPES[*t]), "type": TYPES[*t], "name": format!("r{i}"),
                       "mode": "managed", "change": {"actions": ACTIONS[*a], "before": null, "after": after}})
            })
            .collect();
        json!({"format_version": "1.2", "resource_changes": rc})
    }

    fn rule(first: &str) -> serde_json::Value {
        json!({"name": "r", "scope": "Resource",
               "matchConditions": [{"name": "t", "expression": first},
                                   {"name": "kept", "expression": "change.after != null"}],
               "expression": "change.after.tags != null && 'owner' in change.after.tags",
               "messageExpression": "change.address"})
    }

    fn outcome(first: &str, plan: &serde_json::Value) -> Outcome {
        let p = compile(&policy(json!({
            "variables": [{"name": "kinds", "expression": "['aws_db_instance', 'aws_s3_bucket']"}],
            "rules": [rule(first)]
        })))
        .unwrap();
        let mut object = common::object("app", json!({}));
        object.metadata.namespace = "team-a".into();
        evaluate(&[p], plan, &object).unwrap().results[0]
            .outcome
            .clone()
    }

    proptest! {
        #[test]
        fn skipping_other_types_changes_nothing(
            changes in proptest::collection::vec((0..TYPES.len(), 0..ACTIONS.len(), any::<bool>()), 0..24)
        ) {
            let plan = plan_of(&changes);
            for (fast, slow) in [
                ("change.type == 'aws_instance'", "change.type + '' == 'aws_instance'"),
                ("'aws_instance' == change.type", "change.type + '' == 'aws_instance'"),
                ("change.type in kinds", "change.type + '' in kinds"),
                ("change.type in ['aws_s3_bucket', 'null_resource']", "change.type + '' in ['aws_s3_bucket', 'null_resource']"),
                ("change.isCreate() && change.type in kinds", "change.isCreate() && change.type + '' in kinds"),
                ("change.type in kinds && change.after.size > 3", "change.type + '' in kinds && change.after.size > 3"),
            ] {
                prop_assert_eq!(outcome(fast, &plan), outcome(slow, &plan), "{}", fast);
            }
        }
    }
}

#[test]
fn type_errors_are_refused_at_load_with_the_rule_and_what_is_wrong() {
    let refused = |rule: serde_json::Value| {
        let err = compile(&policy(json!({
            "variables": [{"name": "limit", "expression": "20"}, {"name": "kinds", "expression": "['a', 'b']"}],
            "rules": [rule]
        })))
        .unwrap_err();
        match err {
            PolicyError::Type {
                ref name,
                ref message,
                ..
            } => {
                // The rule, or the match condition `c` of the rule.
                assert!(name == "r" || name == "c", "{name}");
                message.clone()
            }
            other => panic!("expected a type error, got {other}"),
        }
    };
    let plan_rule = |e: &str| json!({"name": "r", "expression": e});
    for (expression, fragment) in [
        ("size(changes) > '3'", "cannot order int against string"),
        ("size(changed)", "must be a bool, but it is a int"),
        ("limit == 'twenty'", "comparing int with string"),
        (
            "changes.all(c, c.address)",
            "needs bool operands, not string",
        ),
        (
            "changes.exists(c, c.adress == 'x')",
            "a change has no field \"adress\"",
        ),
        (
            "'x' in limit",
            "`in` needs a list or a map on its right, not int",
        ),
        (
            "kinds.size() + 'x' == 'y'",
            "cannot add int and string (convert with string())",
        ),
        (
            "limit.startsWith('2')",
            "startsWith() is a string function, not one of int",
        ),
        ("changes.sise() == 0", "there is no function sise()"),
        ("changes[0].address.size() > limit.size()", "size() of int"),
        ("!limit", "! needs bool operands, not int"),
        (
            "math.greatest(1, 2) == 2",
            "there is no function math.greatest()",
        ),
    ] {
        let message = refused(plan_rule(expression));
        assert!(message.contains(fragment), "{expression}: {message}");
    }
    // A message that is not a string, a match condition that is not a bool.
    let message =
        refused(json!({"name": "r", "expression": "true", "messageExpression": "size(changes)"}));
    assert!(
        message.contains("must be a string, but it is a int"),
        "{message}"
    );
    let message = refused(
        json!({"name": "r", "scope": "Resource", "expression": "true",
        "matchConditions": [{"name": "c", "expression": "change.address"}]}),
    );
    assert!(
        message.contains("must be a bool, but it is a string"),
        "{message}"
    );
    // `change` only exists for scope: Resource rules.
    let err = compile(&policy(
        json!({"rules": [{"name": "r", "expression": "change.type == 'x'"}]}),
    ))
    .unwrap_err();
    assert!(
        matches!(err, PolicyError::UnknownName { ref reference, .. } if reference == "change"),
        "{err}"
    );
}

#[test]
fn well_typed_rules_over_plan_data_load() {
    for expression in [
        "size(changed) <= 20 && changed.all(c, c.address.startsWith('aws_') || c.mode == 'data')",
        "plan.resource_changes.size() >= 0",
        "object.vars == null || object.vars.size() < 100",
        "changes.map(c, c.address).join(', ').size() >= 0",
        "changes.filter(c, c.after != null && has(c.after.tags)).size() >= 0",
        "changes.exists(c, 'delete' in c.actions) ? deletes.size() > 0 : true",
        "math.abs(-2) == 2",
        "string(size(changes)) + ' changes' != ''",
        "changes.ofType('aws_s3_bucket').all(c, !c.isDelete())",
        "dyn(plan.format_version) == '1.2' || true",
        "{'a': 1}['a'] == 1 && [1, 2][0] == 1",
    ] {
        compile(&policy(
            json!({"rules": [{"name": "r", "expression": expression}]}),
        ))
        .unwrap_or_else(|e| panic!("{expression}: {e}"));
    }
}
