//! `Timestamp`: a UTC instant with millisecond precision, the only time type memories use.

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::{MemoryError, Result};

/// A UTC instant with millisecond precision.
///
/// Millisecond precision is the invariant: every backend stores exactly this, so an entry
/// read back compares equal to the one written, whatever the backend. Serialized as RFC 3339.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(i64);

impl Timestamp {
    /// The current time, truncated to milliseconds.
    pub fn now() -> Self {
        Self(Utc::now().timestamp_millis())
    }

    /// A timestamp from milliseconds since the Unix epoch, if it lies in the range RFC 3339
    /// can write: years 0001 to 9999.
    pub fn from_millis(millis: i64) -> Option<Self> {
        (Self::MIN.0..=Self::MAX.0)
            .contains(&millis)
            .then_some(Self(millis))
    }

    /// Milliseconds since the Unix epoch.
    pub fn as_millis(self) -> i64 {
        self.0
    }

    /// This instant as a chrono date-time.
    pub fn to_datetime(self) -> DateTime<Utc> {
        // The constructor only admits representable values.
        DateTime::<Utc>::from_timestamp_millis(self.0).unwrap_or_default()
    }

    /// Parses an RFC 3339 date-time such as `2026-11-21T15:43:26.123Z`.
    pub fn parse_rfc3339(text: &str) -> Result<Self> {
        DateTime::parse_from_rfc3339(text)
            .ok()
            .and_then(|dt| Self::from_millis(dt.timestamp_millis()))
            .ok_or_else(|| {
                MemoryError::invalid(
                    "timestamp",
                    format!(
                        "`{text}` is not an RFC 3339 date-time in years 0001-9999; \
                         expected e.g. 2026-11-21T15:43:26Z"
                    ),
                )
            })
    }

    /// This instant moved `duration` into the past, saturating at the earliest timestamp.
    pub fn minus(self, duration: Duration) -> Self {
        let ms = i64::try_from(duration.as_millis()).unwrap_or(i64::MAX);
        Self::from_millis(self.0.saturating_sub(ms)).unwrap_or(Self::MIN)
    }

    /// This instant moved `duration` into the future, saturating at the latest timestamp.
    pub fn plus(self, duration: Duration) -> Self {
        let ms = i64::try_from(duration.as_millis()).unwrap_or(i64::MAX);
        Self::from_millis(self.0.saturating_add(ms)).unwrap_or(Self::MAX)
    }

    /// How long after `earlier` this instant is; zero if it is not later.
    pub fn since(self, earlier: Timestamp) -> Duration {
        Duration::from_millis(u64::try_from(self.0.saturating_sub(earlier.0)).unwrap_or(0))
    }

    /// The earliest representable timestamp.
    pub const MIN: Timestamp = Timestamp(-62_135_596_800_000);
    /// The latest representable timestamp.
    pub const MAX: Timestamp = Timestamp(253_402_300_799_999);
}

impl From<DateTime<Utc>> for Timestamp {
    /// Converts, clamping to years 0001-9999.
    fn from(dt: DateTime<Utc>) -> Self {
        Self(dt.timestamp_millis().clamp(Self::MIN.0, Self::MAX.0))
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            &self
                .to_datetime()
                .to_rfc3339_opts(SecondsFormat::Millis, true),
        )
    }
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Self::parse_rfc3339(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_representable_and_round_trip() {
        assert_eq!(
            Timestamp::from_millis(Timestamp::MIN.as_millis()),
            Some(Timestamp::MIN)
        );
        assert_eq!(
            Timestamp::from_millis(Timestamp::MAX.as_millis()),
            Some(Timestamp::MAX)
        );
        assert_eq!(Timestamp::from_millis(Timestamp::MAX.as_millis() + 1), None);
        let t = Timestamp::from_millis(1_700_000_000_123).unwrap();
        let json = serde_json::to_string(&t).unwrap();
        assert_eq!(json, "\"2023-11-14T22:13:20.123Z\"");
        assert_eq!(serde_json::from_str::<Timestamp>(&json).unwrap(), t);
        assert!(serde_json::from_str::<Timestamp>("\"yesterday\"").is_err());
    }

    #[test]
    fn arithmetic_saturates() {
        let t = Timestamp::from_millis(10_000).unwrap();
        assert_eq!(t.minus(Duration::from_secs(1)).as_millis(), 9_000);
        assert_eq!(t.plus(Duration::from_secs(1)).as_millis(), 11_000);
        assert_eq!(t.since(t.plus(Duration::from_secs(5))), Duration::ZERO);
        assert_eq!(Timestamp::MIN.minus(Duration::from_secs(1)), Timestamp::MIN);
        assert_eq!(Timestamp::MAX.plus(Duration::MAX), Timestamp::MAX);
    }
}
