//! What a rule sees: the plan, the object, the change lists and a few helper functions.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use cel::common::types::CelNull;
use cel::common::value::{CowVal, Val};
use cel::context::VariableResolver;
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

/// The plan and object as rules see them, converted to CEL values only when an expression
/// first reads them: a plan of 10,000 changes is large, and most rules read a list or two.
pub(super) struct PlanData<'j> {
    plan: &'j serde_json::Value,
    spec: serde_json::Value,
    /// Every resource change in the shape rules see (`change_json`).
    pub(super) changes: Vec<serde_json::Value>,
    /// The same, as CEL values, converted once for all `scope: Resource` rules.
    change_vals: OnceLock<Vec<Box<dyn Val>>>,
    /// The variable `change` of a `scope: Resource` rule: an index into `changes`.
    current: AtomicUsize,
    lazy: [OnceLock<Box<dyn Val>>; LAZY.len()],
    by_type: OnceLock<std::collections::HashMap<String, Vec<usize>>>,
}

/// The variables built on first use, in the order of `PlanData::lazy`.
const LAZY: [&str; 8] = [
    "plan", "object", "changes", "changed", "creates", "updates", "deletes", "replaces",
];

fn to_val(v: &serde_json::Value) -> Box<dyn Val> {
    // A JSON document always converts; were it not to, null is what a rule then sees.
    Box::<dyn Val>::try_from(json_value(v)).unwrap_or_else(|_| Box::new(CelNull))
}

impl<'j> PlanData<'j> {
    /// The data of `plan` (`terraform show -json`) for an object with `spec`.
    pub(super) fn new(plan: &'j serde_json::Value, spec: serde_json::Value) -> Self {
        PlanData {
            plan,
            spec,
            changes: changes(plan),
            change_vals: OnceLock::new(),
            current: AtomicUsize::new(0),
            lazy: Default::default(),
            by_type: OnceLock::new(),
        }
    }

    /// The indexes of the changes whose type is one of `types`, in plan order.
    pub(super) fn changes_of_types<'t>(&self, types: impl Iterator<Item = &'t str>) -> Vec<usize> {
        let index = self.by_type.get_or_init(|| {
            let mut index: std::collections::HashMap<String, Vec<usize>> = Default::default();
            for (i, c) in self.changes.iter().enumerate() {
                let ty = c["type"].as_str().unwrap_or_default().to_string();
                index.entry(ty).or_default().push(i);
            }
            index
        });
        let mut out: Vec<usize> = types
            .filter_map(|t| index.get(t))
            .flatten()
            .copied()
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Makes `change` the `index`th change (for `scope: Resource` rules).
    pub(super) fn set_current(&self, index: usize) {
        self.current.store(index, Ordering::Relaxed);
    }

    fn change_vals(&self) -> &[Box<dyn Val>] {
        self.change_vals
            .get_or_init(|| self.changes.iter().map(to_val).collect())
    }

    fn build(&self, name: &str) -> Box<dyn Val> {
        let filter = |f: &dyn Fn(&serde_json::Value) -> bool| {
            to_val(&serde_json::Value::Array(
                self.changes.iter().filter(|c| f(c)).cloned().collect(),
            ))
        };
        match name {
            "plan" => to_val(self.plan),
            "object" => to_val(&self.spec),
            "changes" => filter(&|_| true),
            "changed" => filter(&|c| !(has_action(c, "no-op") || has_action(c, "read"))),
            "creates" => filter(&|c| has_action(c, "create") && !has_action(c, "delete")),
            "updates" => filter(&|c| has_action(c, "update")),
            "deletes" => filter(&|c| has_action(c, "delete")),
            "replaces" => filter(&|c| has_action(c, "delete") && has_action(c, "create")),
            _ => Box::new(CelNull),
        }
    }
}

impl VariableResolver for PlanData<'_> {
    fn resolve<'b>(&'b self, variable: &str) -> Option<CowVal<'b, 'b>> {
        if variable == "change" {
            let vals = self.change_vals();
            return vals
                .get(self.current.load(Ordering::Relaxed))
                .map(|v| CowVal::Borrowed(v.as_ref()));
        }
        let i = match variable {
            "plan" => 0,
            "object" => 1,
            "changes" => 2,
            "changed" => 3,
            "creates" => 4,
            "updates" => 5,
            "deletes" => 6,
            "replaces" => 7,
            _ => return None,
        };
        let val = self.lazy[i].get_or_init(|| self.build(LAZY[i]));
        Some(CowVal::Borrowed(val.as_ref()))
    }
}

/// A policy's variables over the plan data: one scope, so a name is looked up once (CEL looks
/// a dotted name up in every scope, once per prefix).
pub(super) struct PolicyScope<'d, 'j> {
    data: &'d PlanData<'j>,
    names: Vec<String>,
    vals: Vec<OnceLock<Box<dyn Val>>>,
}

impl<'d, 'j> PolicyScope<'d, 'j> {
    /// A scope for variables called `names`, none set yet.
    pub(super) fn new(data: &'d PlanData<'j>, names: Vec<String>) -> Self {
        let vals = names.iter().map(|_| OnceLock::new()).collect();
        PolicyScope { data, names, vals }
    }

    /// Sets the `index`th variable (each is set once, in order: a later one is not visible to
    /// an earlier one's expression).
    pub(super) fn set(&self, index: usize, value: Value) {
        if let Some(slot) = self.vals.get(index) {
            let _ = slot.set(Box::<dyn Val>::try_from(value).unwrap_or_else(|_| Box::new(CelNull)));
        }
    }
}

impl VariableResolver for PolicyScope<'_, '_> {
    fn resolve<'b>(&'b self, variable: &str) -> Option<CowVal<'b, 'b>> {
        match self.names.iter().position(|n| n == variable) {
            Some(i) => self.vals[i].get().map(|v| CowVal::Borrowed(v.as_ref())),
            None => self.data.resolve(variable),
        }
    }
}

/// The root context over `scope`: the standard library with extensions, the helper functions,
/// and the plan's and policy's variables.
pub(super) fn base_context<'d>(scope: &'d PolicyScope<'_, '_>) -> Context<'d, 'd> {
    let mut ctx = Context::with_env(env());
    // The names are not CEL built-ins, so adding them cannot conflict; a conflict would only
    // mean the helper is missing, which the load-time checks then report.
    let _ = ctx.add_function("ofType", of_type);
    let _ = ctx.add_function("isDelete", is_delete);
    let _ = ctx.add_function("isCreate", is_create);
    let _ = ctx.add_function("isUpdate", is_update);
    let _ = ctx.add_function("isReplace", is_replace);
    ctx.set_variable_resolver(scope);
    ctx
}
