//! Loading policies: parsing, checking and compiling every expression.

use cel::{ExecutionError, Program, Value};

use super::check::{Checker, Problem, Ty, built_ins};
use super::context::{BUILT_IN, PlanData, PolicyScope, base_context};
use super::fast;
use super::prefilter::{Types, types_of};
use super::types::{Rule, Scope, TerraformPolicy};

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

/// One expression of a policy, parsed and checked.
pub(super) struct Expr {
    /// `variable`, `rule`, `message` or `match condition`.
    pub(super) what: &'static str,
    /// The name of the variable, rule or condition.
    pub(super) name: String,
    pub(super) program: Program,
    /// The same for the fast evaluator, when it covers the expression.
    pub(super) fast: Option<fast::Node>,
}

/// One rule of a policy, with its expressions parsed and checked.
pub(super) struct CompiledRule {
    pub(super) rule: Rule,
    pub(super) check: Expr,
    pub(super) message: Option<Expr>,
    pub(super) conditions: Vec<Expr>,
    /// The resource types the first match condition restricts a `scope: Resource` rule to.
    pub(super) types: Option<Types>,
    /// The first match condition without its type test, for the changes the prefilter passed
    /// (fast evaluator only).
    pub(super) residual: Option<fast::Node>,
}

/// A policy whose expressions all compiled.
pub struct CompiledPolicy {
    /// Its name.
    pub name: String,
    /// Its namespace.
    pub namespace: String,
    pub(super) selector: std::collections::BTreeMap<String, String>,
    pub(super) variables: Vec<Expr>,
    pub(super) rules: Vec<CompiledRule>,
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
