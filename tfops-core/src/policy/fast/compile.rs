//! Expressions compiled for the fast evaluator, with their names resolved.

use cel::common::ast::{ComprehensionExpr, Expr, LiteralValue, SelectExpr, operators};
use cel::parser::Expression;

use super::value::{CHANGE_FIELDS, CREATE, DELETE, Text, UPDATE, V};

/// The built-in names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::policy) enum Builtin {
    Plan,
    Object,
    Change,
    /// `changes`, `changed`, `creates`, `updates`, `deletes`, `replaces`.
    List(ChangeList),
}

/// Which changes a built-in list holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::policy) enum ChangeList {
    All,
    Changed,
    Creates,
    Updates,
    Deletes,
    Replaces,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::policy) enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::policy) enum Arith {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::policy) enum StrTest {
    Contains,
    StartsWith,
    EndsWith,
}

/// An expression with its names resolved.
#[derive(Debug, Clone)]
pub(in crate::policy) enum Node {
    Lit(V<'static>),
    Builtin(Builtin),
    Var(usize),
    Local(usize),
    /// `operand.field`, with the field's position among a change's fields when it is one.
    Select(Box<Node>, String, Option<u8>),
    /// `change.<actions|before|after>.k1.k2...`: the JSON field of the current change (by its
    /// slot) and the object keys below it.
    ChangePath(u8, Vec<String>),
    Has(Box<Node>, String),
    List(Vec<Node>),
    And(Box<Node>, Box<Node>),
    Or(Box<Node>, Box<Node>),
    Not(Box<Node>),
    /// The value when it is a bool (else left to the interpreter).
    IsBool(Box<Node>),
    NotStrictlyFalse(Box<Node>),
    Cond(Box<Node>, Box<Node>, Box<Node>),
    Cmp(Cmp, Box<Node>, Box<Node>),
    Arith(Arith, Box<Node>, Box<Node>),
    Neg(Box<Node>),
    Index(Box<Node>, Box<Node>),
    In(Box<Node>, Box<Node>),
    Size(Box<Node>),
    StrTest(StrTest, Box<Node>, Box<Node>),
    Str(Box<Node>),
    /// The change's actions include all of these flags.
    ChangeHas(u8, Box<Node>),
    /// `list.join()` / `list.join(separator)`.
    Join(Box<Node>, Option<Box<Node>>),
    OfType(Box<Node>, Box<Node>),
    Comprehension {
        range: Box<Node>,
        iter: usize,
        accu: usize,
        init: Box<Node>,
        cond: Box<Node>,
        step: Box<Node>,
        result: Box<Node>,
    },
}

/// Names in scope while compiling: locals (innermost last), the policy's variables, and
/// whether `change` exists.
pub(in crate::policy) struct Names<'a> {
    locals: Vec<String>,
    variables: &'a [String],
    resource: bool,
}

impl<'a> Names<'a> {
    /// The names of a policy with `variables` (those before the expression compiled), for a
    /// `scope: Resource` rule when `resource`.
    pub(in crate::policy) fn new(variables: &'a [String], resource: bool) -> Self {
        Names {
            locals: Vec::new(),
            variables,
            resource,
        }
    }
}

fn boxed(n: Node) -> Box<Node> {
    Box::new(n)
}

/// `e` with the conjunct that `types_of` found replaced by `true`: for a change the type
/// prefilter let through, that conjunct is true, and `true && x` is `x` (errors included).
pub(in crate::policy) fn without_type_test(e: &Expression) -> Expression {
    let mut out = e.clone();
    strip(&mut out);
    out
}

fn strip(e: &mut Expression) -> bool {
    let Expr::Call(call) = &mut e.expr else {
        return false;
    };
    if call.func_name == operators::LOGICAL_AND && call.args.len() == 2 {
        for i in 0..2 {
            let single = crate::policy::prefilter::types_of(&call.args[i]).is_some()
                && !matches!(&call.args[i].expr, Expr::Call(c) if c.func_name == operators::LOGICAL_AND);
            if single {
                call.args[i].expr = Expr::Literal(LiteralValue::Boolean(true.into()));
                return true;
            }
            if strip(&mut call.args[i]) {
                return true;
            }
        }
        return false;
    }
    if crate::policy::prefilter::types_of(e).is_some() {
        e.expr = Expr::Literal(LiteralValue::Boolean(true.into()));
        return true;
    }
    false
}

fn literal(l: &LiteralValue) -> Option<V<'static>> {
    Some(match l {
        LiteralValue::Boolean(b) => V::Bool(*b.inner()),
        LiteralValue::Int(i) => V::Int(*i.inner()),
        LiteralValue::UInt(u) => V::Uint(*u.inner()),
        LiteralValue::Double(d) => V::Double(*d.inner()),
        LiteralValue::String(s) => V::Str(Text::from(s.inner().to_string())),
        LiteralValue::Null => V::Null,
        LiteralValue::Bytes(_) => return None,
    })
}

/// A name: a comprehension's local, a policy variable, or one of the names every expression
/// has.
fn ident(name: &str, names: &Names<'_>) -> Option<Node> {
    if let Some(i) = names.locals.iter().rposition(|l| l == name) {
        return Some(Node::Local(i));
    }
    if let Some(i) = names.variables.iter().position(|v| v == name) {
        return Some(Node::Var(i));
    }
    Some(Node::Builtin(match name {
        "plan" => Builtin::Plan,
        "object" => Builtin::Object,
        "change" if names.resource => Builtin::Change,
        "changes" => Builtin::List(ChangeList::All),
        "changed" => Builtin::List(ChangeList::Changed),
        "creates" => Builtin::List(ChangeList::Creates),
        "updates" => Builtin::List(ChangeList::Updates),
        "deletes" => Builtin::List(ChangeList::Deletes),
        "replaces" => Builtin::List(ChangeList::Replaces),
        _ => return None,
    }))
}

/// Compiles `e`, or `None` when it uses something this evaluator leaves to the interpreter.
pub(in crate::policy) fn compile(e: &Expression, names: &mut Names<'_>) -> Option<Node> {
    Some(match &e.expr {
        Expr::Literal(l) => Node::Lit(literal(l)?),
        Expr::Ident(name) => ident(name, names)?,
        Expr::Select(s) => select(s, names)?,
        Expr::List(l) if l.optional_indices.is_empty() => Node::List(
            l.elements
                .iter()
                .map(|x| compile(x, names))
                .collect::<Option<_>>()?,
        ),
        Expr::Comprehension(c) if c.iter_var2.is_none() => comprehension(c, names)?,
        Expr::Call(call) => {
            return compile_call(&call.func_name, call.target.as_deref(), &call.args, names);
        }
        // Map literals, bytes and two-variable comprehensions are left to the interpreter.
        _ => return None,
    })
}

/// `x.field`, or `has(x.field)`; a path into the current change is read in place.
fn select(s: &SelectExpr, names: &mut Names<'_>) -> Option<Node> {
    let operand = boxed(compile(&s.operand, names)?);
    if s.test {
        return Some(Node::Has(operand, s.field.clone()));
    }
    let slot = CHANGE_FIELDS
        .iter()
        .position(|f| *f == s.field)
        .map(|i| i as u8);
    Some(match *operand {
        // `change.after.tags`: one node reading the path in place.
        Node::Builtin(Builtin::Change) if slot.is_some_and(|s| s >= 4) => {
            Node::ChangePath(slot.unwrap_or_default(), Vec::new())
        }
        Node::ChangePath(slot, mut keys) => {
            keys.push(s.field.clone());
            Node::ChangePath(slot, keys)
        }
        operand => Node::Select(Box::new(operand), s.field.clone(), slot),
    })
}

/// A one-variable comprehension (`all`, `exists`, `map`, `filter`, …, as CEL expands them).
fn comprehension(c: &ComprehensionExpr, names: &mut Names<'_>) -> Option<Node> {
    let range = boxed(compile(&c.iter_range, names)?);
    let init = boxed(compile(&c.accu_init, names)?);
    let depth = names.locals.len();
    names.locals.push(c.iter_var.clone());
    names.locals.push(c.accu_var.clone());
    let body = (|| {
        let cond = boxed(compile(&c.loop_cond, names)?);
        let step = boxed(compile(&c.loop_step, names)?);
        Some((cond, step))
    })();
    // The result sees the accumulator but not the loop variable; keep the slot numbering by
    // leaving the loop variable's slot in place, renamed out of reach.
    names.locals[depth] = String::new();
    let result = compile(&c.result, names).map(boxed);
    names.locals.truncate(depth);
    let (cond, step) = body?;
    Some(Node::Comprehension {
        range,
        iter: depth,
        accu: depth + 1,
        init,
        cond,
        step,
        result: result?,
    })
}

fn compile_call(
    name: &str,
    target: Option<&Expression>,
    args: &[Expression],
    names: &mut Names<'_>,
) -> Option<Node> {
    let mut all: Vec<Node> = Vec::with_capacity(args.len() + 1);
    if let Some(t) = target {
        all.push(compile(t, names)?);
    }
    for a in args {
        all.push(compile(a, names)?);
    }
    let method = target.is_some();
    let mut it = all.into_iter();
    let mut next = || it.next().map(boxed);
    let n = args.len() + usize::from(method);
    Some(match (name, n) {
        // `true && x` is `x` (what is left of a condition whose type test was taken out).
        // `true && x` is `x` when `x` is a bool, an error otherwise.
        (operators::LOGICAL_AND, 2) => match (next()?, next()?) {
            (a, b) if matches!(*a, Node::Lit(V::Bool(true))) => Node::IsBool(b),
            (a, b) if matches!(*b, Node::Lit(V::Bool(true))) => Node::IsBool(a),
            (a, b) => Node::And(a, b),
        },
        (operators::LOGICAL_OR, 2) => Node::Or(next()?, next()?),
        (operators::LOGICAL_NOT, 1) => Node::Not(next()?),
        (operators::NOT_STRICTLY_FALSE, 1) => Node::NotStrictlyFalse(next()?),
        (operators::CONDITIONAL, 3) => Node::Cond(next()?, next()?, next()?),
        (operators::EQUALS, 2) => Node::Cmp(Cmp::Eq, next()?, next()?),
        (operators::NOT_EQUALS, 2) => Node::Cmp(Cmp::Ne, next()?, next()?),
        (operators::LESS, 2) => Node::Cmp(Cmp::Lt, next()?, next()?),
        (operators::LESS_EQUALS, 2) => Node::Cmp(Cmp::Le, next()?, next()?),
        (operators::GREATER, 2) => Node::Cmp(Cmp::Gt, next()?, next()?),
        (operators::GREATER_EQUALS, 2) => Node::Cmp(Cmp::Ge, next()?, next()?),
        (operators::ADD, 2) => Node::Arith(Arith::Add, next()?, next()?),
        (operators::SUBSTRACT, 2) => Node::Arith(Arith::Sub, next()?, next()?),
        (operators::MULTIPLY, 2) => Node::Arith(Arith::Mul, next()?, next()?),
        (operators::DIVIDE, 2) => Node::Arith(Arith::Div, next()?, next()?),
        (operators::MODULO, 2) => Node::Arith(Arith::Mod, next()?, next()?),
        (operators::NEGATE, 1) => Node::Neg(next()?),
        (operators::INDEX, 2) => Node::Index(next()?, next()?),
        (operators::IN, 2) => Node::In(next()?, next()?),
        ("size", 1) => Node::Size(next()?),
        ("contains", 2) if method => Node::StrTest(StrTest::Contains, next()?, next()?),
        ("startsWith", 2) if method => Node::StrTest(StrTest::StartsWith, next()?, next()?),
        ("endsWith", 2) if method => Node::StrTest(StrTest::EndsWith, next()?, next()?),
        ("string", 1) if !method => Node::Str(next()?),
        ("isDelete", 1) => Node::ChangeHas(DELETE, next()?),
        ("isCreate", 1) => Node::ChangeHas(CREATE, next()?),
        ("isUpdate", 1) => Node::ChangeHas(UPDATE, next()?),
        ("isReplace", 1) => Node::ChangeHas(DELETE | CREATE, next()?),
        ("ofType", 2) => Node::OfType(next()?, next()?),
        ("join", 1) if method => Node::Join(next()?, None),
        ("join", 2) if method => Node::Join(next()?, Some(next()?)),
        _ => return None,
    })
}
