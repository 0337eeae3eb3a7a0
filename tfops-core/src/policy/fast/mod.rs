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

mod compile;
mod eval;
mod value;

pub(in crate::policy) use compile::{Names, Node, compile, without_type_test};
pub(in crate::policy) use eval::{Frame, run};
pub(in crate::policy) use value::{ChangeView, V, from_cel};
