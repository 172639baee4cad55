//! The dates and times a person types (`ava recall --as-of`, MCP's `as_of`, the inspector's
//! `as_of`, `after` and `before`), read one way.

use memory_core::Timestamp;

/// Reads `2026-03-01` (the end of that day, UTC) or an RFC 3339 time.
pub(crate) fn parse_as_of(text: &str) -> Result<Timestamp, String> {
    parse_day_or_time(text, DayEdge::End)
}

/// Which instant of a day a date alone stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DayEdge {
    /// Its first millisecond (from that day, or before it).
    Start,
    /// Its last millisecond (as the day ended).
    End,
}

/// Reads a day (`2026-03-01`, its first or last millisecond in UTC by `edge`), a day and
/// time of day in UTC (`2026-03-01T09:30`), or an RFC 3339 time.
pub(crate) fn parse_day_or_time(text: &str, edge: DayEdge) -> Result<Timestamp, String> {
    let text = text.trim();
    let naive = if let Ok(day) = chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        match edge {
            DayEdge::Start => day.and_hms_milli_opt(0, 0, 0, 0),
            DayEdge::End => day.and_hms_milli_opt(23, 59, 59, 999),
        }
    } else {
        chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M").ok()
    };
    if let Some(at) = naive {
        return Timestamp::from_millis(at.and_utc().timestamp_millis())
            .ok_or_else(|| format!("`{text}`: out of range"));
    }
    Timestamp::parse_rfc3339(text).map_err(|_| {
        format!("`{text}`: expected a date (2026-03-01) or an RFC 3339 time (2026-03-01T09:30:00Z)")
    })
}

#[cfg(test)]
mod tests {
    use super::{DayEdge, parse_as_of, parse_day_or_time};

    #[test]
    fn as_of_reads_days_and_times() {
        let day = parse_as_of("2026-03-01").unwrap();
        assert_eq!(day.to_string(), "2026-03-01T23:59:59.999Z");
        let t = parse_as_of("2026-03-01T09:30:00Z").unwrap();
        assert_eq!(t.to_string(), "2026-03-01T09:30:00.000Z");
        let e = parse_as_of("last week").unwrap_err();
        assert!(e.contains("expected a date"), "{e}");
        let from = parse_day_or_time("2026-03-01", DayEdge::Start).unwrap();
        assert_eq!(from.to_string(), "2026-03-01T00:00:00.000Z");
        let minute = parse_day_or_time("2026-03-01T09:30", DayEdge::End).unwrap();
        assert_eq!(minute.to_string(), "2026-03-01T09:30:00.000Z");
    }
}
