//! Plan policies: CEL rules over `terraform show -json` output, evaluated offline.
//!
//! A [`TerraformPolicy`] (`infra.argocd.io/v1alpha1`) selects `Terraform` objects by label and
//! holds named variables and rules. [`compile`] checks every expression when the policy is
//! loaded: it must parse, every name it reads must exist, and it must type-check (an operator
//! or function given a kind of value it never accepts, a rule or match condition that is not a
//! boolean, a message that is not a string: see the `check` module); a dry run on an empty plan
//! catches the rest. What comes from the plan itself (`change.after.x`) is only known when a
//! plan is evaluated: an error there is an [`Outcome::Error`], which blocks like a violation for
//! `Deny` rules. [`evaluate`] runs the rules against a plan and returns a [`Verdict`]. A rule
//! with `scope: Resource` runs once per resource change, with the change as `change` (a name
//! only such rules have), so a violation names the resources involved.
//!
//! Evaluation: expressions run on a fast evaluator over the parsed plan JSON (names resolved
//! at load, values read in place; the `fast` module) where it covers them, and on the `cel`
//! interpreter otherwise; every error, and every case the fast evaluator is not sure of, is
//! the interpreter's. A differential property test holds the two to the same answers.
//!
//! Names every expression can use:
//!
//! | name | what |
//! | --- | --- |
//! | `plan` | the whole `terraform show -json` document |
//! | `object` | the `Terraform` object's spec |
//! | `changes` | every resource change: `{address, type, name, mode, actions, before, after}` |
//! | `changed` | the changes that do something (not `no-op`, not `read`) |
//! | `creates`, `updates`, `deletes`, `replaces` | the changes whose actions are those (`deletes` includes replacements, `creates` does not) |
//! | `change` | the change a `scope: Resource` rule is looking at |
//! | the policy's `variables` | computed once, in order |
//!
//! Helper functions (also callable as methods):
//!
//! | function | what |
//! | --- | --- |
//! | `list.ofType("aws_db_instance")` | the changes of one resource type |
//! | `change.isDelete()`, `isCreate()` | the change deletes / creates (a replacement does both) |
//! | `change.isUpdate()`, `isReplace()` | the change updates in place / replaces |

mod check;
mod context;
#[cfg(test)]
mod differential;
mod evaluate;
mod fast;
mod findings;
mod load;
mod prefilter;
mod types;

pub use evaluate::{Outcome, RuleResult, Verdict, evaluate, selects};
pub use findings::{Findings, FindingsError, denials, findings};
pub use load::{CompiledPolicy, PolicyError, compile};
pub use types::{
    Action, NamedExpression, PolicyMeta, Rule, Scope, TerraformPolicy, TerraformPolicySpec,
};
