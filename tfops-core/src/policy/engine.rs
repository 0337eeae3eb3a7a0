//! Compiling and evaluating policies.

use cel::{Context, ExecutionError, Program, Value};

use super::check::{Checker, Problem, Ty, built_ins};
use super::context::{BUILT_IN, PlanData, PolicyScope, base_context};
use super::fast;
use super::prefilter::{Types, strings, types_of};
use super::types::{Action, Rule, Scope, TerraformPolicy};
use crate::api::TerraformObject;

/// Why a policy could not be loaded or a plan not evaluated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// An expression does not parse.
    #[error("policy {policy}: {what} {name:?} does not compile: {message}")]
    Compile {
        /// The policy.
        policy: String,
        /// `variable`, `rule`, `message` or `match condition`.
        what: &'static str,
        /// Its name.
        name: String,
        /// The parser's message.
        message: String,
    },
    /// An expression uses a name that does not exist.
    #[error("policy {policy}: {what} {name:?} refers to {reference:?}, which is not defined")]
    UnknownName {
        /// The policy.
        policy: String,
        /// `variable`, `rule`, `message` or `match condition`.
        what: &'static str,
        /// Its name.
        name: String,
        /// The undefined name.
        reference: String,
    },
    /// An expression cannot work on any plan: an operator or function given the wrong kind of
    /// value, a rule that is not a boolean, a message that is not a string, an unknown function.
    #[error("policy {policy}: {what} {name:?} does not type-check: {message}")]
    Type {
        /// The policy.
        policy: String,
        /// `variable`, `rule`, `message` or `match condition`.
        what: &'static str,
        /// Its name.
        name: String,
        /// What is wrong.
        message: String,
    },
    /// A variable is named like a built-in name (`plan`, `change`, ...), which it would hide.
    #[error("policy {policy}: variable {name:?} has the name of a built-in; rename it")]
    Reserved {
        /// The policy.
        policy: String,
        /// The variable.
        name: String,
    },
    /// The document is not `terraform show -json` output of a plan.
    #[error("not a Terraform plan in JSON (terraform show -json): {0}")]
    NotAPlan(String),
}

struct Expr {
    what: &'static str,
    name: String,
    program: Program,
    /// The same for the fast evaluator, when it covers the expression.
    fast: Option<fast::Node>,
}

struct CompiledRule {
    rule: Rule,
    check: Expr,
    message: Option<Expr>,
    conditions: Vec<Expr>,
    /// The resource types the first match condition restricts a `scope: Resource` rule to.
    types: Option<Types>,
    /// The first match condition without its type test, for the changes the prefilter passed
    /// (fast evaluator only).
    residual: Option<fast::Node>,
}

/// A policy whose expressions all compiled.
pub struct CompiledPolicy {
    /// Its name.
    pub name: String,
    /// Its namespace.
    pub namespace: String,
    selector: std::collections::BTreeMap<String, String>,
    variables: Vec<Expr>,
    rules: Vec<CompiledRule>,
}

impl CompiledPolicy {
    /// How many rules it has.
    pub fn rule_count(&self) -> usize {
        self.rules.len()
    }
}

impl std::fmt::Debug for CompiledPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledPolicy")
            .field("name", &self.name)
            .field(
                "rules",
                &self.rules.iter().map(|r| &r.rule.name).collect::<Vec<_>>(),
            )
            .finish()
    }
}

fn compile_expr(
    policy: &str,
    what: &'static str,
    name: &str,
    source: &str,
) -> Result<Expr, PolicyError> {
    Program::compile(source)
        .map(|program| Expr {
            what,
            name: name.to_string(),
            program,
            fast: None,
        })
        .map_err(|e| PolicyError::Compile {
            policy: policy.to_string(),
            what,
            name: name.to_string(),
            message: e.to_string(),
        })
}

/// Compiles a policy and checks that its expressions only use names that exist (a dry run on
/// an empty plan: an undefined name is an error now, not a silent pass later).
///
/// # Errors
/// [`PolicyError::Compile`] or [`PolicyError::UnknownName`], naming the expression.
pub fn compile(policy: &TerraformPolicy) -> Result<CompiledPolicy, PolicyError> {
    let p = &policy.metadata.name;
    if let Some(v) = policy
        .spec
        .variables
        .iter()
        .find(|v| BUILT_IN.contains(&v.name.as_str()))
    {
        return Err(PolicyError::Reserved {
            policy: p.clone(),
            name: v.name.clone(),
        });
    }
    let variables = policy
        .spec
        .variables
        .iter()
        .map(|v| compile_expr(p, "variable", &v.name, &v.expression))
        .collect::<Result<Vec<_>, _>>()?;
    let rules = policy
        .spec
        .rules
        .iter()
        .map(|r| {
            Ok(CompiledRule {
                check: compile_expr(p, "rule", &r.name, &r.expression)?,
                message: r
                    .message_expression
                    .as_deref()
                    .map(|m| compile_expr(p, "message", &r.name, m))
                    .transpose()?,
                conditions: r
                    .match_conditions
                    .iter()
                    .map(|c| compile_expr(p, "match condition", &c.name, &c.expression))
                    .collect::<Result<Vec<_>, _>>()?,
                types: None,
                residual: None,
                rule: r.clone(),
            })
            .map(|mut c: CompiledRule| {
                if c.rule.scope == Scope::Resource {
                    c.types = c
                        .conditions
                        .first()
                        .and_then(|e| types_of(e.program.expression()));
                }
                c
            })
        })
        .collect::<Result<Vec<_>, PolicyError>>()?;
    let compiled = CompiledPolicy {
        name: p.clone(),
        namespace: policy.metadata.namespace.clone(),
        selector: policy.spec.selector.clone(),
        variables,
        rules,
    };
    type_check(&compiled)?;
    let mut compiled = compiled;
    compile_fast(&mut compiled);
    dry_run(&compiled)?;
    Ok(compiled)
}

/// Whether a function called `name` exists in the policy environment: calling it with no
/// arguments fails as an undeclared reference only when it does not (else with a wrong
/// overload or argument count).
fn function_exists(name: &str) -> bool {
    let empty = serde_json::json!({});
    let data = PlanData::new(&empty, &empty);
    let scope = PolicyScope::new(&data, Vec::new());
    let ctx = base_context(&scope);
    let mut probes = vec![format!("{name}()")];
    if !name.contains('.') {
        probes.push(format!("null.{name}()"));
    }
    probes
        .iter()
        .filter_map(|source| Program::compile(source).ok())
        .any(|p| !matches!(p.execute(&ctx), Err(ExecutionError::UndeclaredReference(_))))
}

/// Compiles every expression for the fast evaluator too (where it covers it).
fn compile_fast(policy: &mut CompiledPolicy) {
    let names: Vec<String> = policy.variables.iter().map(|v| v.name.clone()).collect();
    for r in &mut policy.rules {
        let resource = r.rule.scope == Scope::Resource;
        for e in std::iter::once(&mut r.check)
            .chain(r.message.iter_mut())
            .chain(r.conditions.iter_mut())
        {
            e.fast = fast::compile(
                e.program.expression(),
                &mut fast::Names::new(&names, resource),
            );
        }
        if r.types.is_some()
            && let Some(first) = r.conditions.first()
        {
            let residual = fast::without_type_test(first.program.expression());
            r.residual = fast::compile(&residual, &mut fast::Names::new(&names, resource));
        }
    }
}

/// Type-checks every expression (see [`super::check`]): names exist, operators and functions
/// get operands they accept, rules and match conditions are booleans, messages strings.
fn type_check(compiled: &CompiledPolicy) -> Result<(), PolicyError> {
    let exists = |name: &str| function_exists(name);
    let mut checker = Checker::new(built_ins(), &exists);
    let fail = |e: &Expr, problem: Problem| match problem {
        Problem::Unknown(reference) => PolicyError::UnknownName {
            policy: compiled.name.clone(),
            what: e.what,
            name: e.name.clone(),
            reference,
        },
        Problem::UnknownFunction(f) => PolicyError::Type {
            policy: compiled.name.clone(),
            what: e.what,
            name: e.name.clone(),
            message: format!("there is no function {f}()"),
        },
        Problem::Type(message) => PolicyError::Type {
            policy: compiled.name.clone(),
            what: e.what,
            name: e.name.clone(),
            message,
        },
    };
    let expect = |checker: &mut Checker<'_>, e: &Expr, want: Ty| -> Result<(), PolicyError> {
        let got = checker
            .check(e.program.expression())
            .map_err(|p| fail(e, p))?;
        if got == want || got == Ty::Dyn {
            Ok(())
        } else {
            Err(fail(
                e,
                Problem::Type(format!("must be a {want}, but it is a {got}")),
            ))
        }
    };
    for v in &compiled.variables {
        let t = checker
            .check(v.program.expression())
            .map_err(|p| fail(v, p))?;
        checker.bind(&v.name, t);
    }
    for r in &compiled.rules {
        let mut checker = checker.clone();
        if r.rule.scope == Scope::Resource {
            checker.bind("change", Ty::Change);
        }
        for c in &r.conditions {
            expect(&mut checker, c, Ty::Bool)?;
        }
        expect(&mut checker, &r.check, Ty::Bool)?;
        if let Some(m) = &r.message {
            expect(&mut checker, m, Ty::String)?;
        }
    }
    Ok(())
}

fn dry_run(policy: &CompiledPolicy) -> Result<(), PolicyError> {
    // One empty change, so `change` is defined for `scope: Resource` rules.
    let empty = serde_json::json!({"format_version": "1.2", "resource_changes": [{}]});
    let spec = serde_json::json!({});
    let data = PlanData::new(&empty, &spec);
    let scope = PolicyScope::new(
        &data,
        policy.variables.iter().map(|v| v.name.clone()).collect(),
    );
    let ctx = base_context(&scope);
    let undefined = |e: &Expr, err: &ExecutionError| match err {
        ExecutionError::UndeclaredReference(name) => Err(PolicyError::UnknownName {
            policy: policy.name.clone(),
            what: e.what,
            name: e.name.clone(),
            reference: name.to_string(),
        }),
        // Anything else depends on the data of a real plan.
        _ => Ok(()),
    };
    for (i, v) in policy.variables.iter().enumerate() {
        match v.program.execute(&ctx) {
            Ok(value) => scope.set(i, value),
            Err(e) => {
                undefined(v, &e)?;
                scope.set(i, Value::Null);
            }
        }
    }
    for r in &policy.rules {
        for e in std::iter::once(&r.check)
            .chain(r.message.iter())
            .chain(r.conditions.iter())
        {
            if let Err(err) = e.program.execute(&ctx) {
                undefined(e, &err)?;
            }
        }
    }
    Ok(())
}

/// What a rule found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It holds.
    Pass,
    /// Its match conditions exclude this plan (or every change).
    NotApplicable,
    /// It does not hold.
    Violation {
        /// The message.
        message: String,
        /// The resources involved (`scope: Resource` rules).
        addresses: Vec<String>,
    },
    /// It could not be evaluated on this plan (counts as a violation for `Deny`).
    Error {
        /// What went wrong.
        message: String,
    },
}

/// One rule's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleResult {
    /// The policy.
    pub policy: String,
    /// The rule.
    pub rule: String,
    /// Deny or Warn.
    pub action: Action,
    /// What it found.
    pub outcome: Outcome,
}

/// The results of every rule of every selected policy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    /// In policy and rule order.
    pub results: Vec<RuleResult>,
}

impl Verdict {
    /// Whether a `Deny` rule was violated or could not be evaluated: no apply.
    pub fn denied(&self) -> bool {
        self.results.iter().any(|r| {
            r.action == Action::Deny
                && matches!(r.outcome, Outcome::Violation { .. } | Outcome::Error { .. })
        })
    }

    /// The violated (or failed) rules.
    pub fn violations(&self) -> impl Iterator<Item = &RuleResult> {
        self.results
            .iter()
            .filter(|r| matches!(r.outcome, Outcome::Violation { .. } | Outcome::Error { .. }))
    }
}

/// Whether `policy` applies to `object`: same namespace, and every selector label present.
pub fn selects(policy: &CompiledPolicy, object: &TerraformObject) -> bool {
    (policy.namespace.is_empty() || policy.namespace == object.metadata.namespace)
        && policy
            .selector
            .iter()
            .all(|(k, v)| object.metadata.labels.get(k) == Some(v))
}

fn truth(ctx: &Context<'_, '_>, frame: &fast::Frame<'_, '_>, e: &Expr) -> Result<bool, String> {
    if let Some(node) = &e.fast
        && let Some(fast::V::Bool(b)) = fast::run(node, frame)
    {
        return Ok(b);
    }
    match e.program.execute(ctx) {
        Ok(Value::Bool(b)) => Ok(b),
        Ok(other) => Err(format!(
            "{} {:?} must be true or false, not {other:?}",
            e.what, e.name
        )),
        Err(err) => Err(format!("{} {:?}: {err}", e.what, e.name)),
    }
}

fn message(ctx: &Context<'_, '_>, frame: &fast::Frame<'_, '_>, r: &CompiledRule) -> String {
    let fallback = || {
        if r.rule.message.is_empty() {
            format!("rule {} does not hold", r.rule.name)
        } else {
            r.rule.message.clone()
        }
    };
    let Some(e) = &r.message else {
        return fallback();
    };
    if let Some(node) = &e.fast
        && let Some(fast::V::Str(s)) = fast::run(node, frame)
    {
        return s.to_string();
    }
    match e.program.execute(ctx) {
        Ok(Value::String(s)) => s.to_string(),
        _ => fallback(),
    }
}

fn run_rule<'a>(
    ctx: &Context<'_, '_>,
    frame: &fast::Frame<'_, 'a>,
    views: &'a [fast::ChangeView<'a>],
    data: &PlanData<'_>,
    variable: &dyn Fn(&str) -> Option<Vec<String>>,
    r: &CompiledRule,
) -> Outcome {
    // `prefiltered`: the change is of a type the first condition's type test accepts.
    let applies = |ctx: &Context<'_, '_>, prefiltered: bool| -> Result<bool, String> {
        for (i, c) in r.conditions.iter().enumerate() {
            if i == 0
                && prefiltered
                && let Some(node) = &r.residual
                && let Some(fast::V::Bool(b)) = fast::run(node, frame)
            {
                if b {
                    continue;
                }
                return Ok(false);
            }
            if !truth(ctx, frame, c)? {
                return Ok(false);
            }
        }
        Ok(true)
    };
    match r.rule.scope {
        Scope::Plan => match applies(ctx, false).and_then(|a| {
            if a {
                truth(ctx, frame, &r.check).map(Some)
            } else {
                Ok(None)
            }
        }) {
            Ok(None) => Outcome::NotApplicable,
            Ok(Some(true)) => Outcome::Pass,
            Ok(Some(false)) => Outcome::Violation {
                message: message(ctx, frame, r),
                addresses: Vec::new(),
            },
            Err(message) => Outcome::Error { message },
        },
        Scope::Resource => {
            let mut applied = false;
            let mut addresses = Vec::new();
            let mut first_message = None;
            let types = match &r.types {
                Some(Types::Listed(types)) => Some(types.clone()),
                Some(Types::Variable(name)) => variable(name),
                None => None,
            };
            let prefiltered = types.is_some();
            let listed = types.map(|types| data.changes_of_types(&types));
            let visit: Box<dyn Iterator<Item = usize>> = match &listed {
                Some(list) => Box::new(list.iter().copied()),
                None => Box::new(0..data.changes.len()),
            };
            for i in visit {
                let change = data.changes[i];
                data.set_current(i);
                frame.change.set(views.get(i));
                match applies(ctx, prefiltered) {
                    Ok(false) => continue,
                    Ok(true) => applied = true,
                    Err(message) => return Outcome::Error { message },
                }
                match truth(ctx, frame, &r.check) {
                    Ok(true) => {}
                    Ok(false) => {
                        if let Some(a) = change["address"].as_str() {
                            addresses.push(a.to_string());
                        }
                        first_message.get_or_insert_with(|| message(ctx, frame, r));
                    }
                    Err(message) => return Outcome::Error { message },
                }
            }
            match (applied, first_message) {
                (false, _) => Outcome::NotApplicable,
                (true, None) => Outcome::Pass,
                (true, Some(message)) => Outcome::Violation { message, addresses },
            }
        }
    }
}

/// Evaluates the `policies` that select `object` against `plan` (`terraform show -json`).
///
/// # Errors
/// [`PolicyError::NotAPlan`] when `plan` is not plan JSON.
pub fn evaluate(
    policies: &[CompiledPolicy],
    plan: &serde_json::Value,
    object: &TerraformObject,
) -> Result<Verdict, PolicyError> {
    if !plan.is_object()
        || (plan.get("format_version").is_none() && plan.get("resource_changes").is_none())
    {
        return Err(PolicyError::NotAPlan(
            "expected an object with format_version and resource_changes".into(),
        ));
    }
    let spec = serde_json::to_value(&object.spec).unwrap_or_default();
    let data = PlanData::new(plan, &spec);
    let views: Vec<fast::ChangeView<'_>> = data
        .changes
        .iter()
        .map(|rc| fast::ChangeView::new(rc))
        .collect();
    let lists = Default::default();
    let mut verdict = Verdict::default();
    for policy in policies.iter().filter(|p| selects(p, object)) {
        let names = policy.variables.iter().map(|v| v.name.clone()).collect();
        let scope = PolicyScope::new(&data, names);
        let ctx = base_context(&scope);
        let mut values = Vec::new();
        let mut broken = None;
        for (i, v) in policy.variables.iter().enumerate() {
            match v.program.execute(&ctx) {
                Ok(value) => {
                    values.push((v.name.as_str(), value.clone()));
                    scope.set(i, value);
                }
                Err(e) => {
                    broken = Some(format!("variable {:?}: {e}", v.name));
                    break;
                }
            }
        }
        let fast_variables: Vec<Option<fast::V<'_>>> =
            values.iter().map(|(_, v)| fast::from_cel(v)).collect();
        let frame = fast::Frame {
            plan,
            spec: &spec,
            changes: &views,
            lists: &lists,
            variables: &fast_variables,
            change: std::cell::Cell::new(None),
            locals: Default::default(),
        };
        let variable = |name: &str| {
            values
                .iter()
                .find(|(n, _)| *n == name)
                .and_then(|(_, v)| strings(v))
        };
        for r in &policy.rules {
            let outcome = match &broken {
                Some(message) => Outcome::Error {
                    message: message.clone(),
                },
                None => run_rule(&ctx, &frame, &views, &data, &variable, r),
            };
            verdict.results.push(RuleResult {
                policy: policy.name.clone(),
                rule: r.rule.name.clone(),
                action: r.rule.action,
                outcome,
            });
        }
    }
    Ok(verdict)
}
