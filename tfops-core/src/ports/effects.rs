//! The rest of what a run does to the world: health checks, events, the object itself, the
//! time, and the plan policies it reads.

use std::time::Duration;

use async_trait::async_trait;

use crate::api::{HealthCheckType, ObjectKey, TerraformObject, TerraformStatus};
use crate::conditions::Reason;

use super::PortError;

/// A health check with its target rendered from outputs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedHealthCheck {
    /// Its name.
    pub name: String,
    /// TCP or HTTP.
    pub check_type: HealthCheckType,
    /// `host:port` or URL.
    pub target: String,
    /// How long it may take.
    pub timeout: Duration,
}

/// Runs health checks.
#[async_trait]
pub trait HealthChecker: Send + Sync {
    /// Runs one check.
    async fn check(&self, check: &ResolvedHealthCheck) -> Result<(), PortError>;
}

/// Normal or Warning, as Kubernetes events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Progress.
    Normal,
    /// A problem.
    Warning,
}

/// An event on the object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Normal or Warning.
    pub event_type: EventType,
    /// The reason (same set as conditions).
    pub reason: Reason,
    /// The message.
    pub message: String,
}

/// Emits events. Best effort: a failure to emit must not fail a run.
#[async_trait]
pub trait EventSink: Send + Sync {
    /// Emits one event.
    async fn emit(&self, object: &ObjectKey, event: Event);
}

/// Writes the object: status and finalizer.
#[async_trait]
pub trait ObjectWriter: Send + Sync {
    /// Writes the status.
    async fn write_status(
        &self,
        object: &ObjectKey,
        status: &TerraformStatus,
    ) -> Result<(), PortError>;
    /// Adds tfops' finalizer.
    async fn add_finalizer(&self, object: &ObjectKey) -> Result<(), PortError>;
    /// Removes tfops' finalizer.
    async fn remove_finalizer(&self, object: &ObjectKey) -> Result<(), PortError>;
}

/// The time. The decision function never reads a clock; the driver reads this one.
pub trait Clock: Send + Sync {
    /// Now.
    fn now(&self) -> jiff::Timestamp;
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> jiff::Timestamp {
        jiff::Timestamp::now()
    }
}

/// Gives the `TerraformPolicy` objects that may apply to an object (the driver compiles them
/// and keeps those that select it).
#[async_trait]
pub trait PolicySource: Send + Sync {
    /// The policies of the object's namespace.
    async fn policies(
        &self,
        object: &TerraformObject,
    ) -> Result<Vec<crate::policy::TerraformPolicy>, PortError>;
}
