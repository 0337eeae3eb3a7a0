//! Criterion benchmarks of tfops.
//!
//! No benchmark exists yet. This crate will hold `plan_codec`, `source_archive`,
//! `runner_overhead` and `policy_eval`, each measured against a baseline in the same run, with
//! the figures recorded in `benches/README.md`.
