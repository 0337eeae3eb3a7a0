//! Apply windows (`spec.applyWindows`): the API type, whether an apply may start at a given
//! time, and when the next one may. Pure: time is always a parameter. (The API re-exports
//! [`ApplyWindow`] and [`WindowKind`]; they live here so that this module needs nothing of
//! the API's.)
//!
//! A window is open from each occurrence of its cron schedule (read in its time zone) for its
//! duration: `[start, start + duration)`. An apply may start at `t` when no `deny` window is
//! open at `t` and, if there are `allow` windows, at least one of them is. Whether that holds
//! changes only where a window opens or closes, so the next time it holds is found by stepping
//! from boundary to boundary.

use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, TimeZone as _, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How far ahead [`Windows::gate`] looks for an opening, and how many window boundaries it
/// steps over on the way: a spec whose windows never open (a `deny` window always open, which
/// has a boundary every minute) must not make the decision loop for long. 2,000 boundaries
/// take about 0.1 s unoptimised.
const HORIZON: Duration = Duration::from_secs(400 * 24 * 3600);
const MAX_BOUNDARIES: usize = 2_000;

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

/// A window of `spec.applyWindows`, parsed.
#[derive(Debug, Clone)]
struct Window {
    kind: WindowKind,
    cron: Cron,
    duration_ms: i64,
    zone: Tz,
    /// As written, for messages: `allow 0 22 * * 1-5 for 4h (Europe/Berlin)`.
    label: String,
}

/// The parsed `spec.applyWindows`. Empty: applies may start at any time.
#[derive(Debug, Clone, Default)]
pub struct Windows {
    list: Vec<Window>,
    /// The spec's windows as written, for equality (a parsed cron has no `Eq`).
    written: Vec<ApplyWindow>,
}

impl PartialEq for Windows {
    fn eq(&self, other: &Self) -> bool {
        self.written == other.written
    }
}

impl Eq for Windows {}

/// Why a window of the spec cannot be used: `(field, message)` pairs for the spec's
/// validation.
pub type WindowProblems = Vec<(String, String)>;

/// Whether an apply may start now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gate {
    /// It may.
    Open,
    /// It may not.
    Closed {
        /// When it next may, if before `searched`.
        opens: Option<jiff::Timestamp>,
        /// How far ahead the opening was looked for (400 days, or less when the windows
        /// open and close more than 2,000 times before).
        searched: jiff::Timestamp,
        /// What keeps it closed now: `outside every allow window` or `inside the deny window
        /// <label>`.
        why: String,
    },
}

impl Windows {
    /// Parses `spec.applyWindows`, or lists what is wrong with each window (its field and
    /// why).
    pub fn parse(windows: &[ApplyWindow]) -> Result<Self, WindowProblems> {
        let mut problems = Vec::new();
        let mut list = Vec::new();
        for (i, w) in windows.iter().enumerate() {
            match parse_one(w) {
                Ok(window) => list.push(window),
                Err((field, message)) => {
                    problems.push((format!("spec.applyWindows[{i}].{field}"), message));
                }
            }
        }
        if problems.is_empty() {
            Ok(Self {
                list,
                written: windows.to_vec(),
            })
        } else {
            Err(problems)
        }
    }

    /// Whether the spec has no windows (applies start at any time).
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Whether an apply may start at `at`, and if not, when it next may.
    pub fn gate(&self, at: jiff::Timestamp) -> Gate {
        let now = at.as_millisecond();
        let Some(why) = self.closed_at(now) else {
            return Gate::Open;
        };
        let horizon = now.saturating_add(ms(HORIZON));
        let mut t = now;
        let mut opens = None;
        let mut searched = horizon;
        for i in 0..=MAX_BOUNDARIES {
            let Some(next) = self.next_boundary(t).filter(|&n| n <= horizon) else {
                break;
            };
            if i == MAX_BOUNDARIES {
                searched = t;
                break;
            }
            if self.closed_at(next).is_none() {
                opens = jiff::Timestamp::from_millisecond(next).ok();
                break;
            }
            t = next;
        }
        let searched = jiff::Timestamp::from_millisecond(searched).unwrap_or(at);
        Gate::Closed {
            opens,
            searched,
            why,
        }
    }

    /// Whether an apply may start at `at` (milliseconds since the epoch).
    pub fn is_open(&self, at: jiff::Timestamp) -> bool {
        self.closed_at(at.as_millisecond()).is_none()
    }

    /// `None` when an apply may start at `t`; otherwise what keeps it from starting.
    fn closed_at(&self, t: i64) -> Option<String> {
        if let Some(deny) = self
            .list
            .iter()
            .find(|w| w.kind == WindowKind::Deny && w.end_if_open(t).is_some())
        {
            return Some(format!("inside the deny window {}", deny.label));
        }
        let mut allows = self
            .list
            .iter()
            .filter(|w| w.kind == WindowKind::Allow)
            .peekable();
        // Without allow windows every time is allowed.
        let restricted = allows.peek().is_some();
        let inside = allows.any(|w| w.end_if_open(t).is_some());
        (restricted && !inside).then(|| "outside every allow window".to_string())
    }

    /// The first time after `t` at which a window opens or closes.
    fn next_boundary(&self, t: i64) -> Option<i64> {
        self.list
            .iter()
            .flat_map(|w| [w.end_if_open(t), w.next_start(t)])
            .flatten()
            .filter(|&b| b > t)
            .min()
    }
}

impl Window {
    /// When the occurrence open at `t` closes, or `None` when the window is closed at `t`.
    /// Only the latest start at or before `t` matters: an earlier one closes earlier. A
    /// schedule that cannot be evaluated counts as open for `deny` and closed for `allow`
    /// (validation finds an occurrence for each schedule, so this is the safe side of a case
    /// that should not happen).
    fn end_if_open(&self, t: i64) -> Option<i64> {
        let at = self.zoned(t.div_euclid(1000) * 1000)?;
        match self.cron.find_previous_occurrence(&at, true) {
            Ok(start) => {
                let end = start.timestamp_millis().saturating_add(self.duration_ms);
                (t < end).then_some(end)
            }
            Err(_) if self.kind == WindowKind::Deny => Some(t.saturating_add(1000)),
            Err(_) => None,
        }
    }

    /// The first start strictly after `t`.
    fn next_start(&self, t: i64) -> Option<i64> {
        let at = self.zoned(t.div_euclid(1000) * 1000)?;
        let next = self.cron.find_next_occurrence(&at, false).ok()?;
        Some(next.timestamp_millis()).filter(|&n| n > t)
    }

    fn zoned(&self, t: i64) -> Option<DateTime<Tz>> {
        Some(DateTime::<Utc>::from_timestamp_millis(t)?.with_timezone(&self.zone))
    }
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// One window, or the field that is wrong and why.
fn parse_one(w: &ApplyWindow) -> Result<Window, (&'static str, String)> {
    let parser = CronParser::builder().seconds(Seconds::Disallowed).build();
    let fields = w.schedule.split_whitespace().count();
    let cron = if fields == 5 {
        parser.parse(&w.schedule).map_err(|e| {
            (
                "schedule",
                format!("{:?} is not a cron schedule ({e})", w.schedule),
            )
        })?
    } else {
        return Err((
            "schedule",
            format!(
                "{:?} must have five fields (minute hour day-of-month month day-of-week), e.g. `0 22 * * 1-5`",
                w.schedule
            ),
        ));
    };
    let duration = crate::duration::parse(&w.duration).map_err(|e| {
        (
            "duration",
            format!(
                "{:?} is not a duration ({e}); write e.g. 30m or 4h",
                w.duration
            ),
        )
    })?;
    if duration.is_zero() {
        return Err(("duration", "must be longer than zero".into()));
    }
    let zone_name = w.time_zone.as_deref().unwrap_or("UTC");
    let zone = Tz::from_str(zone_name).map_err(|_| {
        (
            "timeZone",
            format!("{zone_name:?} is not an IANA time zone (e.g. UTC, Europe/Berlin)"),
        )
    })?;
    // A schedule that names a day that never comes (`0 0 30 2 *`) would never open.
    let reference = zone.with_ymd_and_hms(2024, 1, 1, 0, 0, 0).single();
    if let Some(reference) = reference
        && cron.find_next_occurrence(&reference, true).is_err()
    {
        return Err(("schedule", format!("{:?} never occurs", w.schedule)));
    }
    let kind = match w.kind {
        WindowKind::Allow => "allow",
        WindowKind::Deny => "deny",
    };
    Ok(Window {
        kind: w.kind,
        cron,
        duration_ms: ms(duration),
        zone,
        label: format!(
            "{kind} `{}` for {} ({zone_name})",
            w.schedule.trim(),
            w.duration
        ),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn window(kind: WindowKind, schedule: &str, duration: &str, zone: Option<&str>) -> ApplyWindow {
        ApplyWindow {
            kind,
            schedule: schedule.into(),
            duration: duration.into(),
            time_zone: zone.map(Into::into),
        }
    }

    fn at(s: &str) -> jiff::Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn an_allow_window_opens_at_its_schedule_for_its_duration() {
        let w = Windows::parse(&[window(WindowKind::Allow, "0 22 * * *", "2h", None)]).unwrap();
        assert!(w.is_open(at("2026-12-04T22:00:00Z")));
        assert!(w.is_open(at("2026-12-04T23:59:59Z")));
        assert!(!w.is_open(at("2026-12-05T00:00:00Z")));
        assert_eq!(
            w.gate(at("2026-12-04T10:30:00Z")),
            Gate::Closed {
                opens: Some(at("2026-12-04T22:00:00Z")),
                searched: at("2028-01-08T10:30:00Z"),
                why: "outside every allow window".into()
            }
        );
    }

    #[test]
    fn the_schedule_is_read_in_its_time_zone() {
        // 22:00 in Berlin is 21:00 UTC in winter.
        let w = Windows::parse(&[window(
            WindowKind::Allow,
            "0 22 * * *",
            "1h",
            Some("Europe/Berlin"),
        )])
        .unwrap();
        assert!(w.is_open(at("2026-12-04T21:30:00Z")));
        assert!(!w.is_open(at("2026-12-04T22:30:00Z")));
    }

    #[test]
    fn a_deny_window_wins_and_the_opening_is_its_end() {
        let w = Windows::parse(&[
            window(WindowKind::Allow, "0 0 * * *", "24h", None),
            window(WindowKind::Deny, "0 9 * * 5", "8h", None),
        ])
        .unwrap();
        // Friday 2026-12-04, 10:00 UTC.
        match w.gate(at("2026-12-04T10:00:00Z")) {
            Gate::Closed { opens, why, .. } => {
                assert_eq!(opens, Some(at("2026-12-04T17:00:00Z")));
                assert_eq!(why, "inside the deny window deny `0 9 * * 5` for 8h (UTC)");
            }
            Gate::Open => panic!("open inside a deny window"),
        }
        assert!(w.is_open(at("2026-12-03T10:00:00Z")));
    }

    #[test]
    fn windows_that_never_open_say_so() {
        let w = Windows::parse(&[window(WindowKind::Deny, "* * * * *", "1h", None)]).unwrap();
        match w.gate(at("2026-12-04T10:00:00Z")) {
            // A boundary a minute: 2,000 of them looked at.
            Gate::Closed {
                opens, searched, ..
            } => {
                assert_eq!(opens, None);
                assert_eq!(searched, at("2026-12-05T19:20:00Z"));
            }
            Gate::Open => panic!("open inside a deny window"),
        }
    }

    #[test]
    fn bad_windows_name_their_field() {
        let problems = Windows::parse(&[
            window(WindowKind::Allow, "0 22 * *", "1h", None),
            window(WindowKind::Allow, "0 22 * * *", "soon", None),
            window(WindowKind::Allow, "0 22 * * *", "1h", Some("Mars/Olympus")),
            window(WindowKind::Allow, "0 0 30 2 *", "1h", None),
            window(WindowKind::Allow, "0 25 * * *", "1h", None),
        ])
        .unwrap_err();
        let fields: Vec<_> = problems.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(
            fields,
            [
                "spec.applyWindows[0].schedule",
                "spec.applyWindows[1].duration",
                "spec.applyWindows[2].timeZone",
                "spec.applyWindows[3].schedule",
                "spec.applyWindows[4].schedule",
            ]
        );
        assert!(problems[3].1.contains("never occurs"), "{problems:?}");
    }
}
