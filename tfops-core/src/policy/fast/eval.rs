//! Evaluating compiled expressions over the plan JSON.

use std::cell::{Cell, OnceCell};
use std::rc::Rc;

use super::compile::{Arith, Builtin, ChangeList, Cmp, Node, StrTest};
use super::value::{
    CHANGE_FIELDS, CREATE, ChangeView, DELETE, NO_OP, READ, Text, UPDATE, V, from_json,
};

/// What the evaluator reads: the plan data, the policy's variables, the current change.
pub(in crate::policy) struct Frame<'f, 'a> {
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
        // A value against null, of another kind (doubles aside): never equal.
        (V::Null, other) | (other, V::Null) if !matches!(other, V::Double(_)) => false,
        _ => return None,
    })
}

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
pub(in crate::policy) fn run<'a>(n: &Node, f: &Frame<'_, 'a>) -> Option<V<'a>> {
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
        Node::Builtin(b) => builtin(*b, f)?,
        Node::Var(i) => f.variables.get(*i)?.clone()?,
        Node::Local(i) => locals.get(*i)?.clone(),
        Node::Select(operand, field, slot) => select(&eval(operand, f, locals)?, field, *slot)?,
        Node::ChangePath(slot, keys) => change_path(f, *slot, keys)?,
        Node::Has(operand, field) => V::Bool(has(&eval(operand, f, locals)?, field)?),
        Node::List(items) => V::List(Rc::new(
            items
                .iter()
                .map(|x| eval(x, f, locals))
                .collect::<Option<Vec<_>>>()?,
        )),
        Node::And(a, b) => logic(a, b, false, f, locals)?,
        Node::Or(a, b) => logic(a, b, true, f, locals)?,
        Node::IsBool(a) => V::Bool(boolean(eval(a, f, locals)?)?),
        Node::Not(a) => V::Bool(!boolean(eval(a, f, locals)?)?),
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
        Node::Cmp(op, a, b) => V::Bool(compare(*op, &eval(a, f, locals)?, &eval(b, f, locals)?)?),
        Node::Arith(op, a, b) => arith(*op, eval(a, f, locals)?, eval(b, f, locals)?)?,
        Node::Neg(a) => match eval(a, f, locals)? {
            V::Int(x) => V::Int(x.checked_neg()?),
            _ => return None,
        },
        Node::Index(a, i) => index(&eval(a, f, locals)?, &eval(i, f, locals)?)?,
        Node::In(x, container) => {
            let x = eval(x, f, locals)?;
            V::Bool(contains(&eval(container, f, locals)?, &x)?)
        }
        Node::Size(a) => V::Int(i64::try_from(len(&eval(a, f, locals)?)?).ok()?),
        Node::StrTest(op, s, arg) => {
            let s = eval(s, f, locals)?;
            V::Bool(str_test(*op, s, eval(arg, f, locals)?)?)
        }
        Node::Str(a) => string(eval(a, f, locals)?)?,
        Node::ChangeHas(flags, c) => match eval(c, f, locals)? {
            V::Change(c) => V::Bool(c.flags & flags == *flags),
            _ => return None,
        },
        Node::Join(list, separator) => join(list, separator.as_deref(), f, locals)?,
        Node::OfType(list, ty) => {
            let list = eval(list, f, locals)?;
            of_type(list, eval(ty, f, locals)?)?
        }
        Node::Comprehension {
            range,
            iter,
            accu,
            init,
            cond,
            step,
            result,
        } => {
            let body = Loop {
                iter: *iter,
                accu: *accu,
                init,
                cond,
                step,
                result,
            };
            comprehension(&eval(range, f, locals)?, &body, f, locals)?
        }
    })
}

/// `change.before.x.y`, read in place from the current change.
fn change_path<'a>(f: &Frame<'_, 'a>, slot: u8, keys: &[String]) -> Option<V<'a>> {
    let c = f.change.get()?;
    let mut v = match slot {
        4 => c.actions,
        5 => c.before,
        _ => c.after,
    };
    for key in keys {
        v = v.as_object()?.get(key)?;
    }
    Some(from_json(v))
}

/// `a op b` for the comparisons.
fn compare(op: Cmp, a: &V<'_>, b: &V<'_>) -> Option<bool> {
    Some(match op {
        Cmp::Eq => equal(a, b)?,
        Cmp::Ne => !equal(a, b)?,
        _ => {
            let ord = match (a, b) {
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

/// `a op b` for the arithmetic on integers, and `+` on strings; overflow is the
/// interpreter's.
fn arith<'a>(op: Arith, a: V<'a>, b: V<'a>) -> Option<V<'a>> {
    Some(match (op, a, b) {
        (Arith::Add, V::Int(x), V::Int(y)) => V::Int(x.checked_add(y)?),
        (Arith::Sub, V::Int(x), V::Int(y)) => V::Int(x.checked_sub(y)?),
        (Arith::Mul, V::Int(x), V::Int(y)) => V::Int(x.checked_mul(y)?),
        (Arith::Div, V::Int(x), V::Int(y)) => V::Int(x.checked_div(y)?),
        (Arith::Mod, V::Int(x), V::Int(y)) => V::Int(x.checked_rem(y)?),
        (Arith::Add, V::Str(x), V::Str(y)) => V::Str(Text::from(format!("{}{}", &*x, &*y))),
        _ => return None,
    })
}

/// `a[i]`: a field of an object or change by name, an item of a list by position.
fn index<'a>(a: &V<'a>, i: &V<'a>) -> Option<V<'a>> {
    match (a, i) {
        (V::Json(serde_json::Value::Object(_)) | V::Change(_), V::Str(k)) => {
            let slot = CHANGE_FIELDS
                .iter()
                .position(|f| *f == &**k)
                .map(|i| i as u8);
            select(a, k, slot)
        }
        (_, V::Int(k)) => {
            let k = usize::try_from(*k).ok()?;
            match a {
                V::List(items) => items.get(k).cloned(),
                V::Json(serde_json::Value::Array(items)) => items.get(k).map(from_json),
                V::Changes(items) => items.get(k).map(|c| V::Change(c)),
                _ => None,
            }
        }
        _ => None,
    }
}

/// `x in container`: a key of an object, an item of a list.
fn contains(container: &V<'_>, x: &V<'_>) -> Option<bool> {
    match container {
        V::Json(serde_json::Value::Object(fields)) => match x {
            V::Str(k) => Some(fields.contains_key(&**k)),
            _ => None,
        },
        V::Json(serde_json::Value::Array(items)) => {
            for item in items {
                if equal(x, &from_json(item))? {
                    return Some(true);
                }
            }
            Some(false)
        }
        V::List(items) => {
            for item in items.iter() {
                if equal(x, item)? {
                    return Some(true);
                }
            }
            Some(false)
        }
        _ => None,
    }
}

/// `list.join()` and `list.join(separator)` over strings.
fn join<'a>(
    list: &Node,
    separator: Option<&Node>,
    f: &Frame<'_, 'a>,
    locals: &mut Vec<V<'a>>,
) -> Option<V<'a>> {
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
    Some(V::Str(Text::from(out)))
}

/// The parts of a comprehension besides its range.
struct Loop<'n> {
    iter: usize,
    accu: usize,
    init: &'n Node,
    cond: &'n Node,
    step: &'n Node,
    result: &'n Node,
}

/// A comprehension over `range`: its loop variable and accumulator are locals `iter` and
/// `accu`, pushed for the loop and popped after.
fn comprehension<'a>(
    range: &V<'a>,
    body: &Loop<'_>,
    f: &Frame<'_, 'a>,
    locals: &mut Vec<V<'a>>,
) -> Option<V<'a>> {
    let count = match range {
        V::List(_) | V::Json(serde_json::Value::Array(_)) | V::Changes(_) => len(range)?,
        _ => return None,
    };
    let init = eval(body.init, f, locals)?;
    if locals.len() != body.iter {
        return None;
    }
    locals.push(V::Null);
    locals.push(init);
    let out = (|| {
        for i in 0..count {
            locals[body.iter] = element(range, i)?;
            match eval(body.cond, f, locals)? {
                V::Bool(true) => {}
                V::Bool(false) => break,
                _ => return None,
            }
            locals[body.accu] = eval(body.step, f, locals)?;
        }
        eval(body.result, f, locals)
    })();
    locals.truncate(body.iter);
    out
}

/// One of the names every expression has.
fn builtin<'a>(b: Builtin, f: &Frame<'_, 'a>) -> Option<V<'a>> {
    Some(match b {
        Builtin::Plan => from_json(f.plan),
        Builtin::Object => from_json(f.spec),
        Builtin::Change => V::Change(f.change.get()?),
        Builtin::List(which) => V::Changes(f.list(which)),
    })
}

/// `s.contains(arg)`, `s.startsWith(arg)`, `s.endsWith(arg)` on strings.
fn str_test(op: StrTest, s: V<'_>, arg: V<'_>) -> Option<bool> {
    match (s, arg) {
        (V::Str(s), V::Str(arg)) => Some(match op {
            StrTest::Contains => s.contains(&*arg),
            StrTest::StartsWith => s.starts_with(&*arg),
            StrTest::EndsWith => s.ends_with(&*arg),
        }),
        _ => None,
    }
}

/// `string(x)` of a string or an integer.
fn string(v: V<'_>) -> Option<V<'_>> {
    Some(match v {
        V::Str(s) => V::Str(s),
        V::Int(i) => V::Str(Text::from(i.to_string())),
        V::Uint(u) => V::Str(Text::from(u.to_string())),
        _ => return None,
    })
}

/// `changes.ofType(type)`: the changes of one resource type.
fn of_type<'a>(list: V<'a>, ty: V<'a>) -> Option<V<'a>> {
    match (list, ty) {
        (V::Changes(items), V::Str(ty)) => Some(V::Changes(Rc::new(
            items.iter().copied().filter(|c| c.ty == &*ty).collect(),
        ))),
        _ => None,
    }
}

/// `has(x.field)` on an object.
fn has(v: &V<'_>, field: &str) -> Option<bool> {
    match v {
        V::Json(serde_json::Value::Object(fields)) => Some(fields.contains_key(field)),
        _ => None,
    }
}

/// A boolean, or `None` for the interpreter to say what else is.
fn boolean(v: V<'_>) -> Option<bool> {
    match v {
        V::Bool(x) => Some(x),
        _ => None,
    }
}
