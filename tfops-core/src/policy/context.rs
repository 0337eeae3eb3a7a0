//! What a rule sees: the plan, the object, the change lists and a few helper functions.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use cel::common::types::{
    CelBool, CelDouble, CelInt, CelList, CelMap, CelMapKey, CelNull, CelString, CelUInt,
};
use cel::common::value::{CowVal, Val};
use cel::context::VariableResolver;
use cel::extractors::This;
use cel::objects::Key;
use cel::{Context, Env, ExecutionError, FunctionContext, Value};

/// The variables every expression may use, besides the policy's variables and loop variables.
pub(super) const BUILT_IN: &[&str] = &[
    "plan", "object", "changes", "changed", "creates", "updates", "deletes", "replaces", "change",
];

/// The resource changes of a plan document.
fn resource_changes(plan: &serde_json::Value) -> Vec<&serde_json::Value> {
    plan["resource_changes"]
        .as_array()
        .map(|a| a.iter().collect())
        .unwrap_or_default()
}

/// Whether a resource change (`terraform show -json` shape) has `action`.
fn has_action(rc: &serde_json::Value, action: &str) -> bool {
    rc["change"]["actions"]
        .as_array()
        .is_some_and(|a| a.iter().any(|x| x == action))
}

/// One change as rules see it: `{address, type, name, mode, actions, before, after}`,
/// borrowing from the plan.
fn change_val(rc: &serde_json::Value) -> Box<dyn Val + '_> {
    let text = |key: &str| -> Box<dyn Val + '_> {
        Box::new(CelString::from(rc[key].as_str().unwrap_or_default()))
    };
    let mut fields: std::collections::HashMap<CelMapKey<'_>, Box<dyn Val + '_>> =
        std::collections::HashMap::with_capacity(7);
    for key in ["address", "type", "name", "mode"] {
        fields.insert(CelMapKey::from(key), text(key));
    }
    for key in ["actions", "before", "after"] {
        fields.insert(CelMapKey::from(key), to_val(&rc["change"][key]));
    }
    Box::new(CelMap::from(fields))
}

/// Whether `change` (a change map) lists `action`, read in place.
fn lists_action(change: &dyn Val, action: &str) -> bool {
    let Some(actions) = change
        .as_indexer()
        .and_then(|i| i.get(&CelString::from("actions")).ok())
    else {
        return false;
    };
    let Some(list) = actions.as_iterable() else {
        return false;
    };
    let mut items = list.iter();
    while let Some(item) = items.next() {
        if item
            .downcast_ref::<CelString>()
            .is_some_and(|s| s.inner() == action)
        {
            return true;
        }
    }
    false
}

/// A function working on CEL values in place (the `cel` crate's own function type, which it
/// does not name publicly).
type Function = Box<
    dyn for<'c, 'l> Fn(&mut FunctionContext<'c, 'l>) -> Result<CowVal<'c, 'l>, ExecutionError>
        + Send
        + Sync,
>;

/// A helper over one change, called as `change.f()` or `f(change)`.
fn change_test(test: fn(&dyn Val) -> bool) -> Function {
    Box::new(move |ftx: &mut FunctionContext<'_, '_>| {
        let change = match (&ftx.this, ftx.args.first()) {
            (Some(this), _) | (None, Some(this)) => this,
            (None, None) => return Err(ExecutionError::missing_argument_or_target()),
        };
        Ok(CowVal::owned(CelBool::from(test(change.as_ref()))))
    })
}

/// `changes.ofType("aws_db_instance")`: the changes of one resource type.
fn of_type(This(list): This<Arc<Vec<Value>>>, ty: Arc<String>) -> Value {
    let is_type = |c: &Value| match c {
        Value::Map(m) => matches!(m.get(&Key::from("type")), Some(Value::String(t)) if **t == *ty),
        _ => false,
    };
    Value::List(Arc::new(
        list.iter().filter(|c| is_type(c)).cloned().collect(),
    ))
}

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
    spec: &'j serde_json::Value,
    /// Every resource change of the plan (`terraform show -json` shape).
    pub(super) changes: Vec<&'j serde_json::Value>,
    /// The same, as CEL values, converted once for all `scope: Resource` rules.
    change_vals: OnceLock<Vec<Box<dyn Val + 'j>>>,
    /// The variable `change` of a `scope: Resource` rule: an index into `changes`.
    current: AtomicUsize,
    lazy: [OnceLock<Box<dyn Val + 'j>>; LAZY.len()],
    by_type: OnceLock<std::collections::HashMap<&'j str, Vec<usize>>>,
    of_types: std::sync::Mutex<Vec<TypesMemo>>,
}

/// A list of resource types and the indexes of the changes of those types.
type TypesMemo = (Vec<String>, Arc<Vec<usize>>);

/// The variables built on first use, in the order of `PlanData::lazy`.
const LAZY: [&str; 8] = [
    "plan", "object", "changes", "changed", "creates", "updates", "deletes", "replaces",
];

/// `v` as a CEL value, borrowing its strings (no copy of the plan's text).
fn to_val<'j>(v: &'j serde_json::Value) -> Box<dyn Val + 'j> {
    match v {
        serde_json::Value::Null => Box::new(CelNull),
        serde_json::Value::Bool(b) => Box::new(CelBool::from(*b)),
        serde_json::Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Box::new(CelInt::from(i)),
            (None, Some(u)) => Box::new(CelUInt::from(u)),
            _ => Box::new(CelDouble::from(n.as_f64().unwrap_or(f64::NAN))),
        },
        serde_json::Value::String(s) => Box::new(CelString::from(s.as_str())),
        serde_json::Value::Array(items) => {
            Box::new(CelList::from(items.iter().map(to_val).collect::<Vec<_>>()))
        }
        serde_json::Value::Object(fields) => Box::new(CelMap::from(
            fields
                .iter()
                .map(|(k, v)| (CelMapKey::from(k.as_str()), to_val(v)))
                .collect::<std::collections::HashMap<_, _>>(),
        )),
    }
}

impl<'j> PlanData<'j> {
    /// The data of `plan` (`terraform show -json`) for an object with `spec`.
    pub(super) fn new(plan: &'j serde_json::Value, spec: &'j serde_json::Value) -> Self {
        PlanData {
            plan,
            spec,
            changes: resource_changes(plan),
            change_vals: OnceLock::new(),
            current: AtomicUsize::new(0),
            lazy: Default::default(),
            by_type: OnceLock::new(),
            of_types: Default::default(),
        }
    }

    /// The indexes of the changes whose type is one of `types`, in plan order (remembered:
    /// copies of a policy, or rules about the same types, ask for the same list).
    pub(super) fn changes_of_types(&self, types: &[String]) -> Arc<Vec<usize>> {
        // Only a panic while holding it could poison the lock; the memo is then still sound.
        let mut memo = self.of_types.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(found) = memo.iter().find(|(t, _)| t.as_slice() == types) {
            return found.1.clone();
        }
        let list = Arc::new(self.index_of_types(types.iter().map(String::as_str)));
        memo.push((types.to_vec(), list.clone()));
        list
    }

    fn index_of_types<'t>(&self, types: impl Iterator<Item = &'t str>) -> Vec<usize> {
        let index = self.by_type.get_or_init(|| {
            let mut index: std::collections::HashMap<&'j str, Vec<usize>> = Default::default();
            for (i, c) in self.changes.iter().enumerate() {
                let ty = c.get("type").and_then(|t| t.as_str()).unwrap_or_default();
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

    fn change_vals(&self) -> &[Box<dyn Val + 'j>] {
        self.change_vals
            .get_or_init(|| self.changes.iter().map(|c| change_val(c)).collect())
    }

    fn build(&self, name: &str) -> Box<dyn Val + 'j> {
        // The lists hold copies of the changes' values (a CEL list owns its items).
        let filter = |f: &dyn Fn(&serde_json::Value) -> bool| -> Box<dyn Val + 'j> {
            Box::new(CelList::from(
                self.changes
                    .iter()
                    .zip(self.change_vals())
                    .filter(|(c, _)| f(c))
                    .map(|(_, v)| v.clone())
                    .collect::<Vec<_>>(),
            ))
        };
        match name {
            "plan" => to_val(self.plan),
            "object" => to_val(self.spec),
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
    // `isDelete`: deletes (a replacement does too); `isCreate`: creates (likewise);
    // `isUpdate`: updates in place; `isReplace`: deletes and re-creates.
    let _ = ctx.add_function("isDelete", change_test(|c| lists_action(c, "delete")));
    let _ = ctx.add_function("isCreate", change_test(|c| lists_action(c, "create")));
    let _ = ctx.add_function("isUpdate", change_test(|c| lists_action(c, "update")));
    let _ = ctx.add_function(
        "isReplace",
        change_test(|c| lists_action(c, "delete") && lists_action(c, "create")),
    );
    ctx.set_variable_resolver(scope);
    ctx
}
