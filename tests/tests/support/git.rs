//! The Git server of the tests (`tests::git`).

pub use tests::git::*;
