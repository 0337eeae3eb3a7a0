//! `spec.applyWindows`: when an apply may start.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A recurring window in which applies may start (`allow`) or may not (`deny`). Plans and drift
/// checks run at any time; only the start of an apply waits for a window. With at least one
/// `allow` window, an apply starts only inside one of them; inside any `deny` window it never
/// starts. `spec.force` ignores windows; an apply under way when a window closes finishes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApplyWindow {
    /// `allow` (the default): applies may start inside the window. `deny`: they may not, even
    /// inside an `allow` window.
    #[serde(default)]
    pub kind: WindowKind,
    /// When the window opens: a cron expression of five fields (minute, hour, day of month,
    /// month, day of week), read in `timeZone`; e.g. `0 22 * * 1-5` for 22:00 on weekdays.
    pub schedule: String,
    /// How long the window stays open from each opening, as a Go duration (`30m`, `4h`).
    pub duration: String,
    /// The IANA time zone `schedule` is read in (`Europe/Berlin`). Default `UTC`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
}

/// Whether a window lets applies start or keeps them from starting.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum WindowKind {
    /// Applies may start inside the window.
    #[default]
    Allow,
    /// Applies may not start inside the window.
    Deny,
}
