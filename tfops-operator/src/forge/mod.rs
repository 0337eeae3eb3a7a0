//! Forges behind [`tfops_core::pulls::Forge`]: Gitea.

mod gitea;

pub use gitea::GiteaForge;
