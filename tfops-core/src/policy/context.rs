//! What a rule sees: the plan, the object, the change lists and a few helper functions.

use std::sync::{Arc, OnceLock};

use cel::extractors::This;
use cel::objects::Key;
use cel::{Context, Env, Value};

/// The variables every expression may use, besides the policy's variables and loop variables.
pub(super) const BUILT_IN: &[&str] = &[
    "plan", "object", "changes", "changed", "creates", "updates", "deletes", "replaces", "change",
];

pub(super) fn json_value(v: &serde_json::Value) -> Value {
    cel::to_value(v).unwrap_or(Value::Null)
}

/// One change as rules see it.
pub(super) fn change_json(rc: &serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "address": rc["address"].as_str().unwrap_or_default(),
        "type": rc["type"].as_str().unwrap_or_default(),
        "name": rc["name"].as_str().unwrap_or_default(),
        "mode": rc["mode"].as_str().unwrap_or_default(),
        "actions": rc["change"]["actions"].clone(),
        "before": rc["change"]["before"].clone(),
        "after": rc["change"]["after"].clone(),
    })
}

fn changes(plan: &serde_json::Value) -> Vec<serde_json::Value> {
    plan["resource_changes"]
        .as_array()
        .map(|a| a.iter().map(change_json).collect())
        .unwrap_or_default()
}

fn has_action(change: &serde_json::Value, action: &str) -> bool {
    change["actions"]
        .as_array()
        .is_some_and(|a| a.iter().any(|x| x == action))
}

/// A change's field, when the value is a change map.
fn field<'a>(change: &'a Value, name: &str) -> Option<&'a Value> {
    match change {
        Value::Map(m) => m.get(&Key::from(name)),
        _ => None,
    }
}

fn actions_include(change: &Value, action: &str) -> bool {
    matches!(field(change, "actions"), Some(Value::List(a))
        if a.iter().any(|x| matches!(x, Value::String(s) if s.as_str() == action)))
}

/// `changes.ofType("aws_db_instance")`: the changes of one resource type.
fn of_type(This(list): This<Arc<Vec<Value>>>, ty: Arc<String>) -> Value {
    Value::List(Arc::new(
        list.iter()
            .filter(|c| matches!(field(c, "type"), Some(Value::String(t)) if **t == *ty))
            .cloned()
            .collect(),
    ))
}

/// `change.isDelete()`: the change deletes the resource (a replacement does too).
fn is_delete(This(change): This<Value>) -> bool {
    actions_include(&change, "delete")
}

/// `change.isCreate()`: the change creates the resource (a replacement does too).
fn is_create(This(change): This<Value>) -> bool {
    actions_include(&change, "create")
}

/// `change.isUpdate()`: the change updates the resource in place.
fn is_update(This(change): This<Value>) -> bool {
    actions_include(&change, "update")
}

/// `change.isReplace()`: the change deletes and re-creates the resource.
fn is_replace(This(change): This<Value>) -> bool {
    actions_include(&change, "delete") && actions_include(&change, "create")
}

/// The names of the helper functions, for documentation and the type checker.
#[allow(dead_code)] // read by the type checker (next commit)
pub(super) const FUNCTIONS: &[&str] = &["ofType", "isDelete", "isCreate", "isUpdate", "isReplace"];

/// The CEL standard library with the strings (`join`, `split`, `lowerAscii`, ...), lists
/// (`flatten`, `slice`, ...) and math extensions, built once.
fn env() -> Arc<Env> {
    static ENV: OnceLock<Arc<Env>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = Env::stdlib();
        // The extensions only declare names the standard library does not, so registering
        // them cannot conflict; were one to fail, its functions would be reported as
        // undefined names when a policy that uses them is loaded.
        let _ = cel::extensions::strings(&mut env);
        let _ = cel::extensions::lists(&mut env);
        let _ = cel::extensions::math(&mut env);
        Arc::new(env)
    })
    .clone()
}

/// The root context for one plan and object.
pub(super) fn base_context<'a>(
    plan: &serde_json::Value,
    spec: &serde_json::Value,
) -> Context<'a, 'static> {
    let all = changes(plan);
    let filter = |f: &dyn Fn(&serde_json::Value) -> bool| -> serde_json::Value {
        serde_json::Value::Array(all.iter().filter(|c| f(c)).cloned().collect())
    };
    let mut ctx = Context::with_env(env());
    // The names are not CEL built-ins, so adding them cannot conflict; a conflict would only
    // mean the helper is missing, which the load-time checks then report.
    let _ = ctx.add_function("ofType", of_type);
    let _ = ctx.add_function("isDelete", is_delete);
    let _ = ctx.add_function("isCreate", is_create);
    let _ = ctx.add_function("isUpdate", is_update);
    let _ = ctx.add_function("isReplace", is_replace);
    ctx.add_variable_from_value("plan", json_value(plan));
    ctx.add_variable_from_value("object", json_value(spec));
    ctx.add_variable_from_value(
        "creates",
        json_value(&filter(&|c| {
            has_action(c, "create") && !has_action(c, "delete")
        })),
    );
    ctx.add_variable_from_value("updates", json_value(&filter(&|c| has_action(c, "update"))));
    ctx.add_variable_from_value("deletes", json_value(&filter(&|c| has_action(c, "delete"))));
    ctx.add_variable_from_value(
        "replaces",
        json_value(&filter(&|c| {
            has_action(c, "delete") && has_action(c, "create")
        })),
    );
    ctx.add_variable_from_value(
        "changed",
        json_value(&filter(&|c| {
            !(has_action(c, "no-op") || has_action(c, "read"))
        })),
    );
    ctx.add_variable_from_value("changes", json_value(&serde_json::Value::Array(all)));
    ctx
}
