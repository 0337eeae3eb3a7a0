//! The fast evaluator against the `cel` interpreter: random expressions over random plans;
//! whenever the fast evaluator answers, the interpreter must give the same value.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::cell::{Cell, RefCell};

use cel::{Program, Value};
use proptest::prelude::*;
use serde_json::json;

use super::context::{PlanData, PolicyScope, base_context};
use super::fast::{self, ChangeView, Frame, Names, V};

const TYPES: &[&str] = &["aws_db_instance", "aws_s3_bucket", "aws_instance"];
const ACTIONS: &[&[&str]] = &[
    &["create"],
    &["delete"],
    &["update"],
    &["no-op"],
    &["delete", "create"],
];

fn plan(changes: &[(usize, usize, u8)]) -> serde_json::Value {
    let rc: Vec<_> = changes
        .iter()
        .enumerate()
        .map(|(i, (t, a, shape))| {
            let after = match shape % 5 {
                0 => serde_json::Value::Null,
                1 => json!({"tags": {"owner": "x"}, "size": i, "name": format!("n{i}")}),
                2 => json!({"tags": null, "size": -1, "ratio": 0.5}),
                3 => json!({"tags": {}, "ports": [22, 443], "cidrs": ["0.0.0.0/0"]}),
                _ => json!({"size": 18_446_744_073_709_551_615u64, "flag": true}),
            };
            json!({"address": format!("{}.r{i}", TYPES[*t]), "type": TYPES[*t],
                   "name": format!("r{i}"), "mode": "managed",
                   "change": {"actions": ACTIONS[*a], "before": null, "after": after}})
        })
        .collect();
    json!({"format_version": "1.2", "resource_changes": rc})
}

fn leaf() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "change.type",
        "change.address",
        "change.after",
        "change.after.tags",
        "change.after.size",
        "change.after.ratio",
        "change.after.ports",
        "change.after.cidrs",
        "change.after.flag",
        "change.actions",
        "change",
        "changes",
        "changed",
        "deletes",
        "creates",
        "kinds",
        "limit",
        "1",
        "0",
        "-3",
        "2u",
        "1.5",
        "'aws_db_instance'",
        "'owner'",
        "''",
        "null",
        "true",
        "false",
        "['a', 'aws_instance']",
        "[1, 2]",
        "x",
    ])
    .prop_map(str::to_string)
}

fn expression() -> impl Strategy<Value = String> {
    leaf().prop_recursive(4, 48, 3, |inner| {
        let two = (inner.clone(), inner.clone());
        prop_oneof![
            (
                two.clone(),
                prop::sample::select(vec![
                    "==", "!=", "<", "<=", ">", ">=", "&&", "||", "+", "-", "*", "/", "%", "in",
                ])
            )
                .prop_map(|((a, b), op)| format!("({a} {op} {b})")),
            inner.clone().prop_map(|a| format!("!{a}")),
            inner.clone().prop_map(|a| format!("-{a}")),
            inner.clone().prop_map(|a| format!("size({a})")),
            inner.clone().prop_map(|a| format!("{a}.size()")),
            inner.clone().prop_map(|a| format!("string({a})")),
            inner.clone().prop_map(|a| format!("{a}.isDelete()")),
            inner.clone().prop_map(|a| format!("{a}.isReplace()")),
            inner.clone().prop_map(|a| format!("{a}.join(',')")),
            inner
                .clone()
                .prop_map(|a| format!("{a}.ofType('aws_instance')")),
            two.clone()
                .prop_map(|(a, b)| format!("{a}.startsWith({b})")),
            two.clone().prop_map(|(a, b)| format!("{a}.contains({b})")),
            two.clone().prop_map(|(a, b)| format!("{a}[{b}]")),
            two.clone().prop_map(|(a, b)| format!("{a}.all(x, {b})")),
            two.clone().prop_map(|(a, b)| format!("{a}.exists(x, {b})")),
            two.clone().prop_map(|(a, b)| format!("{a}.map(x, {b})")),
            two.clone().prop_map(|(a, b)| format!("{a}.filter(x, {b})")),
            (inner.clone(), inner.clone(), inner)
                .prop_map(|(a, b, c)| format!("({a} ? {b} : {c})")),
            Just("has(change.after.tags)".to_string()),
        ]
    })
}

/// Mostly well-typed boolean expressions, the shape real rules have.
fn rule() -> impl Strategy<Value = String> {
    let text = prop::sample::select(vec![
        "change.type",
        "change.address",
        "change.name",
        "change.mode",
        "'aws_instance'",
        "''",
        "'owner'",
        "string(limit)",
        "change.type + '.x'",
        "changes.map(c, c.address).join(',')",
    ]);
    let number = prop::sample::select(vec![
        "size(changes)",
        "size(changed)",
        "limit",
        "1",
        "-3",
        "change.after.size",
        "changes.filter(c, c.after != null).size()",
        "changes.ofType('aws_instance').size()",
        "(limit * 2 - 1)",
        "(limit / 2)",
        "(limit % 3)",
        "size(change.address)",
    ]);
    let texts = prop::sample::select(vec![
        "kinds",
        "['a', 'aws_instance']",
        "change.actions",
        "changes.map(c, c.type)",
        "[]",
        "change.after.cidrs",
    ]);
    let atom = prop_oneof![
        (
            text.clone(),
            text.clone(),
            prop::sample::select(vec!["==", "!=", "<", ">="])
        )
            .prop_map(|(a, b, op)| format!("{a} {op} {b}")),
        (
            number.clone(),
            number.clone(),
            prop::sample::select(vec!["==", "!=", "<", "<=", ">", ">="])
        )
            .prop_map(|(a, b, op)| format!("{a} {op} {b}")),
        (text.clone(), texts.clone()).prop_map(|(a, l)| format!("{a} in {l}")),
        text.clone()
            .prop_map(|a| format!("{a} in change.after.tags")),
        (text.clone(), text.clone()).prop_map(|(a, b)| format!("{a}.startsWith({b})")),
        (text.clone(), text).prop_map(|(a, b)| format!("{a}.endsWith({b}) || {a}.contains({b})")),
        texts
            .clone()
            .prop_map(|l| format!("{l}.all(x, x.startsWith('a'))")),
        texts.prop_map(|l| format!("{l}.exists(x, x == 'aws_instance')")),
        prop::sample::select(vec![
            "has(change.after.tags)",
            "change.after != null",
            "change.after.tags != null",
            "change.isDelete()",
            "change.isReplace()",
            "changes.exists(c, c.isDelete())",
            "changes.all(c, c.type in kinds)",
            "changed.all(c, c.after == null || c.after.tags != null)",
            "change.after.flag",
            "change.after.ports.exists(p, p == 22)",
            "true",
            "false",
            "deletes.exists(d, d.address == change.address)",
        ])
        .prop_map(str::to_string),
    ];
    atom.prop_recursive(3, 16, 2, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a}) && ({b})")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a}) || ({b})")),
            inner.clone().prop_map(|a| format!("!({a})")),
            (inner.clone(), inner.clone(), inner)
                .prop_map(|(a, b, c)| format!("({a}) ? ({b}) : ({c})")),
        ]
    })
}

fn to_cel(v: &V<'_>) -> Value {
    match v {
        V::Null => Value::Null,
        V::Bool(b) => Value::Bool(*b),
        V::Int(i) => Value::Int(*i),
        V::Uint(u) => Value::UInt(*u),
        V::Double(d) => Value::Float(*d),
        V::Str(s) => Value::String(std::sync::Arc::new(s.to_string())),
        V::Json(j) => cel::to_value(j).unwrap(),
        V::List(items) => Value::List(std::sync::Arc::new(items.iter().map(to_cel).collect())),
        V::Change(c) => cel::to_value(c.as_json()).unwrap(),
        V::Changes(items) => Value::List(std::sync::Arc::new(
            items
                .iter()
                .map(|c| cel::to_value(c.as_json()).unwrap())
                .collect(),
        )),
    }
}

fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Float(x), Value::Float(y)) => x == y || (x.is_nan() && y.is_nan()),
        _ => a == b,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn fast_answers_are_the_interpreters(
        changes in prop::collection::vec((0..TYPES.len(), 0..ACTIONS.len(), any::<u8>()), 0..6),
        current in 0usize..6,
        mut sources in prop::collection::vec(expression(), 8),
        rules in prop::collection::vec(rule(), 8),
    ) {
        sources.extend(rules);
        let plan = plan(&changes);
        let spec = json!({"sourceRef": {"kind": "Local", "url": "."}});
        let data = PlanData::new(&plan, &spec);
        let names = vec!["kinds".to_string(), "limit".to_string()];
        let scope = PolicyScope::new(&data, names.clone());
        let kinds = Value::List(std::sync::Arc::new(vec![
            Value::String(std::sync::Arc::new("aws_s3_bucket".into())),
            Value::String(std::sync::Arc::new("aws_instance".into())),
        ]));
        scope.set(0, kinds.clone());
        scope.set(1, Value::Int(2));
        let ctx = base_context(&scope);
        let views: Vec<ChangeView<'_>> = data.changes.iter().map(|rc| ChangeView::new(rc)).collect();
        let lists = Default::default();
        let variables = vec![fast::from_cel(&kinds), fast::from_cel(&Value::Int(2))];
        let frame = Frame {
            plan: &plan,
            spec: &spec,
            changes: &views,
            lists: &lists,
            variables: &variables,
            change: Cell::new(None),
            locals: RefCell::new(Vec::new()),
        };
        if !views.is_empty() {
            let i = current % views.len();
            data.set_current(i);
            frame.change.set(views.get(i));
        }
        for source in &sources {
            let Ok(program) = Program::compile(source) else { continue };
            let Some(node) = fast::compile(program.expression(), &mut Names::new(&names, !views.is_empty())) else {
                continue;
            };
            let Some(answer) = fast::run(&node, &frame) else { continue };
            let reference = program.execute(&ctx);
            prop_assert!(
                matches!(&reference, Ok(r) if same(r, &to_cel(&answer))),
                "{source}: fast {:?}, interpreter {:?}",
                answer,
                reference
            );
        }
    }
}
