//! Durations as written in a spec: Go's `time.ParseDuration` syntax (`30s`, `5m`, `1h30m`,
//! `1.5h`, `250ms`), which is what users of Kubernetes controllers already write.

use std::time::Duration;

/// Why a duration string could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// The string is empty.
    #[error("empty duration")]
    Empty,
    /// A number is missing or malformed at the given byte offset.
    #[error("expected a number at offset {0}")]
    ExpectedNumber(usize),
    /// A number has no unit or an unknown one.
    #[error("unknown or missing unit {0:?} (use ns, us, ms, s, m or h)")]
    BadUnit(String),
    /// Negative durations make no sense for intervals and timeouts.
    #[error("duration must not be negative")]
    Negative,
    /// The value does not fit in a `Duration`.
    #[error("duration is too large")]
    Overflow,
}

/// Parses a Go-style duration such as `1h30m` or `0.5s`. `0` alone is accepted.
///
/// # Errors
/// Returns a [`DurationError`] saying what is wrong with the text.
pub fn parse(text: &str) -> Result<Duration, DurationError> {
    let s = text.trim();
    if s.is_empty() {
        return Err(DurationError::Empty);
    }
    if s.starts_with('-') {
        return Err(DurationError::Negative);
    }
    let s = s.strip_prefix('+').unwrap_or(s);
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let bytes = s.as_bytes();
    let mut i = 0;
    let mut total_nanos: f64 = 0.0;
    while i < bytes.len() {
        let start = i;
        while i < bytes.len() && (bytes[i].is_ascii_digit() || bytes[i] == b'.') {
            i += 1;
        }
        let number: f64 = s[start..i]
            .parse()
            .map_err(|_| DurationError::ExpectedNumber(start))?;
        let unit_start = i;
        while i < bytes.len() && !(bytes[i].is_ascii_digit() || bytes[i] == b'.') {
            i += 1;
        }
        let nanos_per_unit = match &s[unit_start..i] {
            "ns" => 1.0,
            "us" | "µs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            other => return Err(DurationError::BadUnit(other.to_string())),
        };
        total_nanos += number * nanos_per_unit;
    }
    // About 292 years, Go's own limit; far beyond any useful interval.
    if !total_nanos.is_finite() || total_nanos > i64::MAX as f64 {
        return Err(DurationError::Overflow);
    }
    Ok(Duration::from_nanos(total_nanos.round() as u64))
}

/// Formats a duration the way [`parse`] reads it, for messages (`1h30m0s` style, trimmed).
pub fn format(d: Duration) -> String {
    let secs = d.as_secs();
    if secs == 0 {
        return format!("{}ms", d.as_millis());
    }
    let (h, m, s) = (secs / 3600, (secs % 3600) / 60, secs % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if s > 0 || out.is_empty() {
        out.push_str(&format!("{s}s"));
    }
    out
}

/// The time elapsed from `since` to `now` (zero if `now` is earlier).
pub fn elapsed(since: jiff::Timestamp, now: jiff::Timestamp) -> Duration {
    let ms = now.as_millisecond().saturating_sub(since.as_millisecond());
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_go_durations() {
        assert_eq!(parse("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
    }

    #[test]
    fn rejects_what_go_rejects() {
        assert_eq!(parse(""), Err(DurationError::Empty));
        assert_eq!(parse("5"), Err(DurationError::BadUnit(String::new())));
        assert_eq!(
            parse("5 minutes"),
            Err(DurationError::BadUnit(" minutes".into()))
        );
        assert_eq!(parse("-5m"), Err(DurationError::Negative));
        assert_eq!(parse("m"), Err(DurationError::ExpectedNumber(0)));
        assert_eq!(parse("1e400h"), Err(DurationError::BadUnit("e".into())));
    }

    #[test]
    fn formats_for_messages() {
        assert_eq!(format(Duration::from_secs(5400)), "1h30m");
        assert_eq!(format(Duration::from_secs(15)), "15s");
        assert_eq!(format(Duration::from_millis(250)), "250ms");
    }
}
