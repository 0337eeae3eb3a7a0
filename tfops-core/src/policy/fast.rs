//! A fast path for evaluating policy expressions straight over the parsed plan JSON.
//!
//! The `cel` crate's interpreter resolves every name at run time (a dotted name prefix by
//! prefix, in every scope) and works on its own value tree; a rule evaluated once per change of
//! a 10,000-change plan spends most of its time there. This evaluator runs the same parsed
//! expression with names resolved when the policy is loaded and values read in place from the
//! plan's JSON.
//!
//! It is deliberately partial: it covers what plan rules mostly do (field access, comparisons,
//! `&&`/`||`, `in`, `size`, string tests, the macros, the change helpers) and answers only when
//! it is sure. Anything else — an unsupported construct, a type mix whose CEL meaning it does
//! not reproduce, any error — is `None`, and the caller evaluates the expression with the `cel`
//! interpreter, which stays the reference (errors and their messages always come from it). A
//! differential property test checks that every answer given here is the interpreter's.

use std::cell::{Cell, OnceCell};
use std::rc::Rc;

use cel::Value as CelValue;
use cel::common::ast::{Expr, LiteralValue, operators};
use cel::parser::Expression;

/// A string: borrowed from the plan, or shared (literals, results) so copies are cheap.
#[derive(Debug, Clone)]
pub(super) enum Text<'a> {
    Borrowed(&'a str),
    Shared(Rc<str>),
}

impl std::ops::Deref for Text<'_> {
    type Target = str;
    fn deref(&self) -> &str {
        match self {
            Text::Borrowed(s) => s,
            Text::Shared(s) => s,
        }
    }
}

impl PartialEq for Text<'_> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl From<String> for Text<'_> {
    fn from(s: String) -> Self {
        Text::Shared(Rc::from(s))
    }
}

/// A value during fast evaluation, borrowing from the plan where it can.
#[derive(Debug, Clone)]
pub(super) enum V<'j> {
    Null,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Double(f64),
    Str(Text<'j>),
    /// A JSON array or object of the plan or the object's spec.
    Json(&'j serde_json::Value),
    List(Rc<Vec<V<'j>>>),
    /// A resource change of the plan, seen as `{address, type, name, mode, actions, before,
    /// after}`.
    Change(&'j ChangeView<'j>),
    /// A list of resource changes.
    Changes(Rc<Vec<&'j ChangeView<'j>>>),
}

const CREATE: u8 = 1;
const DELETE: u8 = 2;
const UPDATE: u8 = 4;
const NO_OP: u8 = 8;
const READ: u8 = 16;

/// A resource change entry of the plan with its fields looked up once.
#[derive(Debug)]
pub(super) struct ChangeView<'j> {
    address: &'j str,
    ty: &'j str,
    name: &'j str,
    mode: &'j str,
    actions: &'j serde_json::Value,
    before: &'j serde_json::Value,
    after: &'j serde_json::Value,
    flags: u8,
}

impl<'j> ChangeView<'j> {
    /// The change as the interpreter sees it (for comparing the two evaluators).
    #[cfg(test)]
    pub(super) fn as_json(&self) -> serde_json::Value {
        serde_json::json!({
            "address": self.address, "type": self.ty, "name": self.name, "mode": self.mode,
            "actions": self.actions, "before": self.before, "after": self.after,
        })
    }

    /// The view of `rc`, an entry of the plan's `resource_changes`.
    pub(super) fn new(rc: &'j serde_json::Value) -> Self {
        static NULL: serde_json::Value = serde_json::Value::Null;
        let mut view = ChangeView {
            address: "",
            ty: "",
            name: "",
            mode: "",
            actions: &NULL,
            before: &NULL,
            after: &NULL,
            flags: 0,
        };
        // One pass over each object: looking each field up costs a search per field.
        let text = |v: &'j serde_json::Value| v.as_str().unwrap_or_default();
        for (key, value) in rc.as_object().into_iter().flatten() {
            match key.as_str() {
                "address" => view.address = text(value),
                "type" => view.ty = text(value),
                "name" => view.name = text(value),
                "mode" => view.mode = text(value),
                "change" => {
                    for (key, value) in value.as_object().into_iter().flatten() {
                        match key.as_str() {
                            "actions" => view.actions = value,
                            "before" => view.before = value,
                            "after" => view.after = value,
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        for a in view.actions.as_array().into_iter().flatten() {
            view.flags |= match a.as_str() {
                Some("create") => CREATE,
                Some("delete") => DELETE,
                Some("update") => UPDATE,
                Some("no-op") => NO_OP,
                Some("read") => READ,
                _ => 0,
            };
        }
        view
    }
}

fn from_json(v: &serde_json::Value) -> V<'_> {
    match v {
        serde_json::Value::Null => V::Null,
        serde_json::Value::Bool(b) => V::Bool(*b),
        serde_json::Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => V::Int(i),
            (None, Some(u)) => V::Uint(u),
            _ => V::Double(n.as_f64().unwrap_or(f64::NAN)),
        },
        serde_json::Value::String(s) => V::Str(Text::Borrowed(s)),
        other => V::Json(other),
    }
}

/// A value the interpreter computed (a policy variable), when this evaluator can hold it.
pub(super) fn from_cel(v: &CelValue) -> Option<V<'static>> {
    Some(match v {
        CelValue::Null => V::Null,
        CelValue::Bool(b) => V::Bool(*b),
        CelValue::Int(i) => V::Int(*i),
        CelValue::UInt(u) => V::Uint(*u),
        CelValue::Float(f) => V::Double(*f),
        CelValue::String(s) => V::Str(Text::from(s.to_string())),
        CelValue::List(items) => V::List(Rc::new(
            items.iter().map(from_cel).collect::<Option<Vec<_>>>()?,
        )),
        _ => return None,
    })
}

/// The built-in names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Builtin {
    Plan,
    Object,
    Change,
    /// `changes`, `changed`, `creates`, `updates`, `deletes`, `replaces`.
    List(ChangeList),
}

/// Which changes a built-in list holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ChangeList {
    All,
    Changed,
    Creates,
    Updates,
    Deletes,
    Replaces,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Arith {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StrTest {
    Contains,
    StartsWith,
    EndsWith,
}

/// An expression with its names resolved.
#[derive(Debug, Clone)]
pub(super) enum Node {
    Lit(V<'static>),
    Builtin(Builtin),
    Var(usize),
    Local(usize),
    /// `operand.field`, with the field's position among a change's fields when it is one.
    Select(Box<Node>, String, Option<u8>),
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
pub(super) struct Names<'a> {
    locals: Vec<String>,
    variables: &'a [String],
    resource: bool,
}

impl<'a> Names<'a> {
    /// The names of a policy with `variables` (those before the expression compiled), for a
    /// `scope: Resource` rule when `resource`.
    pub(super) fn new(variables: &'a [String], resource: bool) -> Self {
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
pub(super) fn without_type_test(e: &Expression) -> Expression {
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
            let single = super::prefilter::types_of(&call.args[i]).is_some()
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
    if super::prefilter::types_of(e).is_some() {
        e.expr = Expr::Literal(LiteralValue::Boolean(true.into()));
        return true;
    }
    false
}

/// Compiles `e`, or `None` when it uses something this evaluator leaves to the interpreter.
pub(super) fn compile(e: &Expression, names: &mut Names<'_>) -> Option<Node> {
    Some(match &e.expr {
        Expr::Literal(l) => Node::Lit(match l {
            LiteralValue::Boolean(b) => V::Bool(*b.inner()),
            LiteralValue::Int(i) => V::Int(*i.inner()),
            LiteralValue::UInt(u) => V::Uint(*u.inner()),
            LiteralValue::Double(d) => V::Double(*d.inner()),
            LiteralValue::String(s) => V::Str(Text::from(s.inner().to_string())),
            LiteralValue::Null => V::Null,
            LiteralValue::Bytes(_) => return None,
        }),
        Expr::Ident(name) => {
            if let Some(i) = names.locals.iter().rposition(|l| l == name) {
                Node::Local(i)
            } else if let Some(i) = names.variables.iter().position(|v| v == name) {
                Node::Var(i)
            } else {
                Node::Builtin(match name.as_str() {
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
                })
            }
        }
        Expr::Select(s) => {
            let operand = boxed(compile(&s.operand, names)?);
            if s.test {
                Node::Has(operand, s.field.clone())
            } else {
                let slot = CHANGE_FIELDS
                    .iter()
                    .position(|f| *f == s.field)
                    .map(|i| i as u8);
                Node::Select(operand, s.field.clone(), slot)
            }
        }
        Expr::List(l) if l.optional_indices.is_empty() => Node::List(
            l.elements
                .iter()
                .map(|x| compile(x, names))
                .collect::<Option<_>>()?,
        ),
        Expr::Comprehension(c) if c.iter_var2.is_none() => {
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
            // The result sees the accumulator but not the loop variable; keep the slot
            // numbering by leaving the loop variable's slot in place, renamed out of reach.
            names.locals[depth] = String::new();
            let result = compile(&c.result, names).map(boxed);
            names.locals.truncate(depth);
            let (cond, step) = body?;
            Node::Comprehension {
                range,
                iter: depth,
                accu: depth + 1,
                init,
                cond,
                step,
                result: result?,
            }
        }
        Expr::Call(call) => {
            return compile_call(&call.func_name, call.target.as_deref(), &call.args, names);
        }
        // Map literals, bytes and two-variable comprehensions are left to the interpreter.
        _ => return None,
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

/// What the evaluator reads: the plan data, the policy's variables, the current change.
pub(super) struct Frame<'f, 'a> {
    pub plan: &'a serde_json::Value,
    pub spec: &'a serde_json::Value,
    pub changes: &'a [ChangeView<'a>],
    pub lists: &'a [OnceCell<Rc<Vec<&'a ChangeView<'a>>>>; 6],
    pub variables: &'f [Option<V<'a>>],
    pub change: Cell<Option<&'a ChangeView<'a>>>,
    /// Scratch space for comprehension variables, reused across evaluations.
    pub locals: std::cell::RefCell<Vec<V<'a>>>,
}

impl<'a> Frame<'_, 'a> {
    fn list(&self, which: ChangeList) -> Rc<Vec<&'a ChangeView<'a>>> {
        self.lists[which as usize]
            .get_or_init(|| {
                let keep = |c: &ChangeView<'_>| match which {
                    ChangeList::All => true,
                    ChangeList::Changed => c.flags & (NO_OP | READ) == 0,
                    ChangeList::Creates => c.flags & CREATE != 0 && c.flags & DELETE == 0,
                    ChangeList::Updates => c.flags & UPDATE != 0,
                    ChangeList::Deletes => c.flags & DELETE != 0,
                    ChangeList::Replaces => c.flags & (DELETE | CREATE) == DELETE | CREATE,
                };
                Rc::new(self.changes.iter().filter(|c| keep(c)).collect())
            })
            .clone()
    }
}

/// The `i`th element of a list-like value (for iterating without copying the list).
fn element<'a>(v: &V<'a>, i: usize) -> Option<V<'a>> {
    match v {
        V::List(items) => items.get(i).cloned(),
        V::Json(serde_json::Value::Array(items)) => items.get(i).map(from_json),
        V::Changes(items) => items.get(i).map(|c| V::Change(c)),
        _ => None,
    }
}

/// The elements of a list-like value.
fn elements<'a>(v: &V<'a>) -> Option<Vec<V<'a>>> {
    let n = match v {
        V::List(_) | V::Json(serde_json::Value::Array(_)) | V::Changes(_) => len(v)?,
        _ => return None,
    };
    (0..n).map(|i| element(v, i)).collect()
}

fn len(v: &V<'_>) -> Option<usize> {
    match v {
        V::List(items) => Some(items.len()),
        V::Json(serde_json::Value::Array(items)) => Some(items.len()),
        V::Json(serde_json::Value::Object(fields)) => Some(fields.len()),
        V::Changes(items) => Some(items.len()),
        V::Change(_) => Some(7),
        V::Str(s) => Some(s.chars().count()),
        _ => None,
    }
}

/// `a == b` where this evaluator is sure of CEL's answer.
fn equal(a: &V<'_>, b: &V<'_>) -> Option<bool> {
    Some(match (a, b) {
        (V::Null, V::Null) => true,
        (V::Bool(x), V::Bool(y)) => x == y,
        (V::Int(x), V::Int(y)) => x == y,
        (V::Uint(x), V::Uint(y)) => x == y,
        (V::Double(x), V::Double(y)) => x == y,
        (V::Str(x), V::Str(y)) => x == y,
        // A value against null, of another kind: never equal.
        (
            V::Null,
            V::Bool(_)
            | V::Int(_)
            | V::Uint(_)
            | V::Str(_)
            | V::Json(_)
            | V::List(_)
            | V::Change(_)
            | V::Changes(_),
        )
        | (
            V::Bool(_)
            | V::Int(_)
            | V::Uint(_)
            | V::Str(_)
            | V::Json(_)
            | V::List(_)
            | V::Change(_)
            | V::Changes(_),
            V::Null,
        ) => false,
        _ => return None,
    })
}

/// A change's fields, in the order of [`change_field`].
const CHANGE_FIELDS: [&str; 7] = [
    "address", "type", "name", "mode", "actions", "before", "after",
];

/// The `slot`th field of a change (see [`CHANGE_FIELDS`]).
fn change_field<'a>(c: &'a ChangeView<'a>, slot: u8) -> Option<V<'a>> {
    Some(match slot {
        0 => V::Str(Text::Borrowed(c.address)),
        1 => V::Str(Text::Borrowed(c.ty)),
        2 => V::Str(Text::Borrowed(c.name)),
        3 => V::Str(Text::Borrowed(c.mode)),
        4 => from_json(c.actions),
        5 => from_json(c.before),
        6 => from_json(c.after),
        _ => return None,
    })
}

fn select<'j>(v: &V<'j>, field: &str, slot: Option<u8>) -> Option<V<'j>> {
    match v {
        V::Json(serde_json::Value::Object(fields)) => fields.get(field).map(from_json),
        V::Change(c) => change_field(c, slot?),
        _ => None,
    }
}

/// Evaluates `n` in `f`; `None` leaves the answer to the interpreter.
pub(super) fn run<'a>(n: &Node, f: &Frame<'_, 'a>) -> Option<V<'a>> {
    let mut locals = f.locals.take();
    locals.clear();
    let out = eval(n, f, &mut locals);
    f.locals.replace(locals);
    out
}

/// `a && b` (`decisive` false) or `a || b` (`decisive` true): the decisive value on either
/// side wins, even over an error on the other side.
fn logic<'a>(
    a: &Node,
    b: &Node,
    decisive: bool,
    f: &Frame<'_, 'a>,
    locals: &mut Vec<V<'a>>,
) -> Option<V<'a>> {
    match eval(a, f, locals) {
        Some(V::Bool(x)) if x == decisive => Some(V::Bool(decisive)),
        Some(V::Bool(_)) => match eval(b, f, locals)? {
            V::Bool(y) => Some(V::Bool(y)),
            _ => None,
        },
        _ => match eval(b, f, locals)? {
            V::Bool(y) if y == decisive => Some(V::Bool(decisive)),
            _ => None,
        },
    }
}

/// Evaluates `n`; `None` leaves the answer to the interpreter.
pub(super) fn eval<'a>(n: &Node, f: &Frame<'_, 'a>, locals: &mut Vec<V<'a>>) -> Option<V<'a>> {
    Some(match n {
        Node::Lit(v) => v.clone(),
        Node::Builtin(b) => match b {
            Builtin::Plan => from_json(f.plan),
            Builtin::Object => from_json(f.spec),
            Builtin::Change => V::Change(f.change.get()?),
            Builtin::List(which) => V::Changes(f.list(*which)),
        },
        Node::Var(i) => f.variables.get(*i)?.clone()?,
        Node::Local(i) => locals.get(*i)?.clone(),
        Node::Select(operand, field, slot) => select(&eval(operand, f, locals)?, field, *slot)?,
        Node::Has(operand, field) => match eval(operand, f, locals)? {
            V::Json(serde_json::Value::Object(fields)) => {
                V::Bool(fields.contains_key(field.as_str()))
            }
            _ => return None,
        },
        Node::List(items) => V::List(Rc::new(
            items
                .iter()
                .map(|x| eval(x, f, locals))
                .collect::<Option<Vec<_>>>()?,
        )),
        Node::And(a, b) => logic(a, b, false, f, locals)?,
        Node::Or(a, b) => logic(a, b, true, f, locals)?,
        Node::IsBool(a) => match eval(a, f, locals)? {
            V::Bool(x) => V::Bool(x),
            _ => return None,
        },
        Node::Not(a) => match eval(a, f, locals)? {
            V::Bool(x) => V::Bool(!x),
            _ => return None,
        },
        Node::NotStrictlyFalse(a) => match eval(a, f, locals) {
            Some(V::Bool(x)) => V::Bool(x),
            Some(_) => V::Bool(true),
            // Whether an error counts as "not strictly false" here is the interpreter's call.
            None => return None,
        },
        Node::Cond(c, a, b) => match eval(c, f, locals)? {
            V::Bool(true) => eval(a, f, locals)?,
            V::Bool(false) => eval(b, f, locals)?,
            _ => return None,
        },
        Node::Cmp(op, a, b) => {
            let (a, b) = (eval(a, f, locals)?, eval(b, f, locals)?);
            V::Bool(match op {
                Cmp::Eq => equal(&a, &b)?,
                Cmp::Ne => !equal(&a, &b)?,
                _ => {
                    let ord = match (&a, &b) {
                        (V::Int(x), V::Int(y)) => x.cmp(y),
                        (V::Uint(x), V::Uint(y)) => x.cmp(y),
                        (V::Double(x), V::Double(y)) => x.partial_cmp(y)?,
                        (V::Str(x), V::Str(y)) => x.cmp(y),
                        _ => return None,
                    };
                    match op {
                        Cmp::Lt => ord.is_lt(),
                        Cmp::Le => ord.is_le(),
                        Cmp::Gt => ord.is_gt(),
                        _ => ord.is_ge(),
                    }
                }
            })
        }
        Node::Arith(op, a, b) => {
            let (a, b) = (eval(a, f, locals)?, eval(b, f, locals)?);
            match (op, a, b) {
                (Arith::Add, V::Int(x), V::Int(y)) => V::Int(x.checked_add(y)?),
                (Arith::Sub, V::Int(x), V::Int(y)) => V::Int(x.checked_sub(y)?),
                (Arith::Mul, V::Int(x), V::Int(y)) => V::Int(x.checked_mul(y)?),
                (Arith::Div, V::Int(x), V::Int(y)) => V::Int(x.checked_div(y)?),
                (Arith::Mod, V::Int(x), V::Int(y)) => V::Int(x.checked_rem(y)?),
                (Arith::Add, V::Str(x), V::Str(y)) => V::Str(Text::from(format!("{}{}", &*x, &*y))),
                _ => return None,
            }
        }
        Node::Neg(a) => match eval(a, f, locals)? {
            V::Int(x) => V::Int(x.checked_neg()?),
            _ => return None,
        },
        Node::Index(a, i) => {
            let (a, i) = (eval(a, f, locals)?, eval(i, f, locals)?);
            match (&a, &i) {
                (V::Json(serde_json::Value::Object(_)) | V::Change(_), V::Str(k)) => {
                    let slot = CHANGE_FIELDS
                        .iter()
                        .position(|f| *f == &**k)
                        .map(|i| i as u8);
                    select(&a, k, slot)?
                }
                (_, V::Int(k)) => {
                    let k = usize::try_from(*k).ok()?;
                    match &a {
                        V::List(items) => items.get(k)?.clone(),
                        V::Json(serde_json::Value::Array(items)) => from_json(items.get(k)?),
                        V::Changes(items) => V::Change(items.get(k)?),
                        _ => return None,
                    }
                }
                _ => return None,
            }
        }
        Node::In(x, container) => {
            let (x, container) = (eval(x, f, locals)?, eval(container, f, locals)?);
            V::Bool(match &container {
                V::Json(serde_json::Value::Object(fields)) => match &x {
                    V::Str(k) => fields.contains_key(&**k),
                    _ => return None,
                },
                V::Json(serde_json::Value::Array(items)) => {
                    let mut found = false;
                    for item in items {
                        if equal(&x, &from_json(item))? {
                            found = true;
                            break;
                        }
                    }
                    found
                }
                V::List(items) => {
                    let mut found = false;
                    for item in items.iter() {
                        if equal(&x, item)? {
                            found = true;
                            break;
                        }
                    }
                    found
                }
                _ => return None,
            })
        }
        Node::Size(a) => V::Int(i64::try_from(len(&eval(a, f, locals)?)?).ok()?),
        Node::StrTest(op, s, arg) => match (eval(s, f, locals)?, eval(arg, f, locals)?) {
            (V::Str(s), V::Str(arg)) => V::Bool(match op {
                StrTest::Contains => s.contains(&*arg),
                StrTest::StartsWith => s.starts_with(&*arg),
                StrTest::EndsWith => s.ends_with(&*arg),
            }),
            _ => return None,
        },
        Node::Str(a) => match eval(a, f, locals)? {
            V::Str(s) => V::Str(s),
            V::Int(i) => V::Str(Text::from(i.to_string())),
            V::Uint(u) => V::Str(Text::from(u.to_string())),
            _ => return None,
        },
        Node::ChangeHas(flags, c) => match eval(c, f, locals)? {
            V::Change(c) => V::Bool(c.flags & flags == *flags),
            _ => return None,
        },
        Node::Join(list, separator) => {
            let separator = match separator {
                Some(s) => match eval(s, f, locals)? {
                    V::Str(s) => s,
                    _ => return None,
                },
                None => Text::Borrowed(""),
            };
            let mut out = String::new();
            for (i, item) in elements(&eval(list, f, locals)?)?.iter().enumerate() {
                let V::Str(s) = item else {
                    return None;
                };
                if i > 0 {
                    out.push_str(&separator);
                }
                out.push_str(s);
            }
            V::Str(Text::from(out))
        }
        Node::OfType(list, ty) => match (eval(list, f, locals)?, eval(ty, f, locals)?) {
            (V::Changes(items), V::Str(ty)) => V::Changes(Rc::new(
                items.iter().copied().filter(|c| c.ty == &*ty).collect(),
            )),
            _ => return None,
        },
        Node::Comprehension {
            range,
            iter,
            accu,
            init,
            cond,
            step,
            result,
        } => {
            let range = eval(range, f, locals)?;
            let count = match &range {
                V::List(_) | V::Json(serde_json::Value::Array(_)) | V::Changes(_) => len(&range)?,
                _ => return None,
            };
            let init = eval(init, f, locals)?;
            if locals.len() != *iter {
                return None;
            }
            locals.push(V::Null);
            locals.push(init);
            let out = (|| {
                for i in 0..count {
                    locals[*iter] = element(&range, i)?;
                    match eval(cond, f, locals)? {
                        V::Bool(true) => {}
                        V::Bool(false) => break,
                        _ => return None,
                    }
                    locals[*accu] = eval(step, f, locals)?;
                }
                eval(result, f, locals)
            })();
            locals.truncate(*iter);
            out?
        }
    })
}
