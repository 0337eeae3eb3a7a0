//! Evaluating compiled policies against a plan.

use cel::{Context, Value};

use super::context::{PlanData, PolicyScope, base_context};
use super::fast;
use super::load::{CompiledPolicy, CompiledRule, Expr, PolicyError};
use super::prefilter::{Types, strings};
use super::types::{Action, Scope, selected};
use crate::api::TerraformObject;

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
    selected(&policy.namespace, &policy.selector, object)
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

/// One rule's outcome: once on the plan, or on each change (of the prefiltered types).
fn run_rule(
    ctx: &Context<'_, '_>,
    frame: &fast::Frame<'_, '_>,
    data: &PlanData<'_>,
    variable: &dyn Fn(&str) -> Option<Vec<String>>,
    r: &CompiledRule,
) -> Outcome {
    match r.rule.scope {
        Scope::Plan => plan_rule(ctx, frame, r),
        Scope::Resource => resource_rule(ctx, frame, data, variable, r),
    }
}

/// Whether every match condition of `r` holds. `prefiltered`: the change is of a type the
/// first condition's type test accepts.
fn applies(
    ctx: &Context<'_, '_>,
    frame: &fast::Frame<'_, '_>,
    r: &CompiledRule,
    prefiltered: bool,
) -> Result<bool, String> {
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
}

/// A `scope: Plan` rule: once, over the whole plan.
fn plan_rule(ctx: &Context<'_, '_>, frame: &fast::Frame<'_, '_>, r: &CompiledRule) -> Outcome {
    let checked = applies(ctx, frame, r, false).and_then(|a| {
        if a {
            truth(ctx, frame, &r.check).map(Some)
        } else {
            Ok(None)
        }
    });
    match checked {
        Ok(None) => Outcome::NotApplicable,
        Ok(Some(true)) => Outcome::Pass,
        Ok(Some(false)) => Outcome::Violation {
            message: message(ctx, frame, r),
            addresses: Vec::new(),
        },
        Err(message) => Outcome::Error { message },
    }
}

/// A `scope: Resource` rule: once per resource change (of the types its first condition
/// tests, when it tests one), naming the changes that violate it.
fn resource_rule(
    ctx: &Context<'_, '_>,
    frame: &fast::Frame<'_, '_>,
    data: &PlanData<'_>,
    variable: &dyn Fn(&str) -> Option<Vec<String>>,
    r: &CompiledRule,
) -> Outcome {
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
        frame.change.set(frame.changes.get(i));
        match applies(ctx, frame, r, prefiltered) {
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
                None => run_rule(&ctx, &frame, &data, &variable, r),
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
