//! Forges behind [`tfops_core::ports::Forge`]: Gitea.

mod gitea;

pub use gitea::GiteaForge;
