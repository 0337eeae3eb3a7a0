//! End-to-end tests of tfops and their harness: Argo CD's Lua runtime for our health and action
//! scripts ([`argocd_lua`]) and Git servers ([`git`]). The cluster the tests run on is the real
//! control plane with a node agent, from the `tfops-testcluster` crate. The reconciler's property
//! tests live with the reconciler, in `tfops-core/tests/`.

pub mod argocd_lua;
pub mod git;
