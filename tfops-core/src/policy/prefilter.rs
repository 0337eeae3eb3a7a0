//! Which resource types a `scope: Resource` rule can apply to, read off its first match
//! condition, so the rule only visits those changes.
//!
//! Exact, not a heuristic: when a conjunct of the first condition is `change.type == "t"` or
//! `change.type in L` (L a list literal or a policy variable holding strings) and a change's
//! type is not among them, that conjunct is false, so the whole condition is false whatever
//! the other conjuncts do (CEL's `&&` is false when either side is) and the rule does not
//! apply to that change. It is the first condition, which runs before any other, so skipping
//! the change also skips nothing that could have failed.

use cel::Value;
use cel::common::ast::{Expr, LiteralValue, operators};
use cel::parser::Expression;

/// Where a rule's types come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Types {
    /// Listed in the expression.
    Listed(Vec<String>),
    /// The value of a policy variable.
    Variable(String),
}

fn is_change_type(e: &Expression) -> bool {
    matches!(&e.expr, Expr::Select(s)
        if s.field == "type" && !s.test && matches!(&s.operand.expr, Expr::Ident(n) if n == "change"))
}

fn string_literal(e: &Expression) -> Option<String> {
    match &e.expr {
        Expr::Literal(LiteralValue::String(s)) => Some(s.inner().to_string()),
        _ => None,
    }
}

/// The types `e` (one match condition) restricts `change` to, if it says.
pub(super) fn types_of(e: &Expression) -> Option<Types> {
    let Expr::Call(call) = &e.expr else {
        return None;
    };
    if call.target.is_some() || call.args.len() != 2 {
        return None;
    }
    let (a, b) = (&call.args[0], &call.args[1]);
    match call.func_name.as_str() {
        operators::LOGICAL_AND => types_of(a).or_else(|| types_of(b)),
        operators::EQUALS if is_change_type(a) => string_literal(b).map(|t| Types::Listed(vec![t])),
        operators::EQUALS if is_change_type(b) => string_literal(a).map(|t| Types::Listed(vec![t])),
        operators::IN if is_change_type(a) => match &b.expr {
            Expr::Ident(name) => Some(Types::Variable(name.clone())),
            Expr::List(list) => list
                .elements
                .iter()
                .map(string_literal)
                .collect::<Option<Vec<_>>>()
                .map(Types::Listed),
            _ => None,
        },
        _ => None,
    }
}

/// The type names of a policy variable's value, if it is a list of strings.
pub(super) fn strings(value: &Value) -> Option<Vec<String>> {
    match value {
        Value::List(items) => items
            .iter()
            .map(|v| match v {
                Value::String(s) => Some(s.to_string()),
                _ => None,
            })
            .collect(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn of(source: &str) -> Option<Types> {
        types_of(cel::Program::compile(source).unwrap().expression())
    }

    #[test]
    fn type_tests_are_recognised_where_they_decide_alone() {
        let listed = |t: &[&str]| Some(Types::Listed(t.iter().map(|s| s.to_string()).collect()));
        assert_eq!(of("change.type == 'a'"), listed(&["a"]));
        assert_eq!(of("'a' == change.type"), listed(&["a"]));
        assert_eq!(of("change.type in ['a', 'b']"), listed(&["a", "b"]));
        assert_eq!(
            of("change.type in kinds"),
            Some(Types::Variable("kinds".into()))
        );
        assert_eq!(of("x && (y && change.type == 'a')"), listed(&["a"]));
        // Not deciding alone, or not about `change.type`:
        assert_eq!(of("change.type == 'a' || y"), None);
        assert_eq!(of("!(change.type == 'a')"), None);
        assert_eq!(of("change.type in ['a', 1]"), None);
        assert_eq!(of("change.name == 'a'"), None);
        assert_eq!(of("changes.exists(change, change.type == 'a')"), None);
        assert_eq!(of("has(change.type)"), None);
    }
}
