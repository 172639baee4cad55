//! The time a question asks about ([`TimeWindow`]), read from its words against "now": "last
//! week", "yesterday", "in June", "on July 4", "two days ago". English and rule-based; "now"
//! is read in UTC.

use chrono::{DateTime, Datelike, Duration, NaiveDate, TimeZone, Utc, Weekday};
use memory_core::Timestamp;
use serde::{Deserialize, Serialize};

/// A stretch of time a question refers to.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TimeWindow {
    /// The first instant.
    pub start: Timestamp,
    /// The end (exclusive).
    pub end: Timestamp,
    /// Where memories about it are looked for until (exclusive): the end for times counted
    /// from now ("yesterday", "last week": what was said then), and the end plus the
    /// window's length again (at least a day) for calendar times ("in June", "on July 4"),
    /// because what happened then is often told after it ("we went camping last month",
    /// said in July of a June trip).
    pub until: Timestamp,
    /// The words it was read from, lowercased ("last week", "june").
    pub said: String,
}

impl TimeWindow {
    fn new(start: DateTime<Utc>, end: DateTime<Utc>, calendar: bool, said: String) -> Self {
        let until = if calendar {
            end + (end - start).max(Duration::days(1))
        } else {
            end
        };
        Self {
            start: start.into(),
            end: end.into(),
            until: until.into(),
            said,
        }
    }

    /// Where matching memories are looked for: from the start until [`TimeWindow::until`].
    pub fn reach(&self) -> (Timestamp, Timestamp) {
        (self.start, self.until)
    }

    /// Whether `at` lies in [`TimeWindow::reach`].
    pub fn reaches(&self, at: Timestamp) -> bool {
        let (start, end) = self.reach();
        start <= at && at < end
    }
}

pub(crate) fn month(word: &str) -> Option<u32> {
    let m = match word {
        "january" | "jan" => 1,
        "february" | "feb" => 2,
        "march" | "mar" => 3,
        "april" | "apr" => 4,
        "may" => 5,
        "june" | "jun" => 6,
        "july" | "jul" => 7,
        "august" | "aug" => 8,
        "september" | "sep" | "sept" => 9,
        "october" | "oct" => 10,
        "november" | "nov" => 11,
        "december" | "dec" => 12,
        _ => return None,
    };
    Some(m)
}

pub(crate) fn weekday(word: &str) -> Option<Weekday> {
    let d = match word {
        "monday" => Weekday::Mon,
        "tuesday" => Weekday::Tue,
        "wednesday" => Weekday::Wed,
        "thursday" => Weekday::Thu,
        "friday" => Weekday::Fri,
        "saturday" => Weekday::Sat,
        "sunday" => Weekday::Sun,
        _ => return None,
    };
    Some(d)
}

fn number(word: &str) -> Option<i64> {
    let n = match word {
        "a" | "an" | "one" => 1,
        "two" | "couple" => 2,
        "three" | "few" => 3,
        "four" => 4,
        "five" => 5,
        "six" => 6,
        "seven" => 7,
        "eight" => 8,
        "nine" => 9,
        "ten" => 10,
        w => w.parse().ok().filter(|n| (1..=1000).contains(n))?,
    };
    Some(n)
}

fn year(word: &str) -> Option<i32> {
    (word.len() == 4)
        .then(|| word.parse().ok())
        .flatten()
        .filter(|y| (1900..=2200).contains(y))
}

fn midnight(date: NaiveDate) -> DateTime<Utc> {
    Utc.from_utc_datetime(&date.and_hms_opt(0, 0, 0).unwrap_or_default())
}

fn month_start(year: i32, month: u32) -> Option<DateTime<Utc>> {
    NaiveDate::from_ymd_opt(year, month, 1).map(midnight)
}

fn month_window(year: i32, month: u32) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
    let start = month_start(year, month)?;
    let end = if month == 12 {
        month_start(year + 1, 1)?
    } else {
        month_start(year, month + 1)?
    };
    Some((start, end))
}

/// The start of the latest `day` before `today` (whose weekday is `on`): a week back when
/// today is that day.
fn latest_before(today: DateTime<Utc>, on: Weekday, day: Weekday) -> DateTime<Utc> {
    let back =
        (7 + i64::from(on.num_days_from_monday()) - i64::from(day.num_days_from_monday()) - 1) % 7
            + 1;
    today - Duration::days(back)
}

/// The first time expression of the text, resolved against `now`.
pub(crate) fn window(words: &[&str], now: DateTime<Utc>) -> Option<TimeWindow> {
    let today = midnight(now.date_naive());
    let day = Duration::days(1);
    let w = |i: usize| words.get(i).copied();
    for i in 0..words.len() {
        let said = |n: usize| words[i..(i + n).min(words.len())].join(" ");
        let found = match (w(i), w(i + 1), w(i + 2)) {
            (Some("day"), Some("before"), Some("yesterday")) => {
                Some((today - day * 2, today - day, 3))
            }
            (Some("yesterday"), _, _) => Some((today - day, today, 1)),
            (Some("last"), Some("night"), _) => Some((today - day, today + day, 2)),
            (Some("today" | "tonight"), _, _) => Some((today, today + day, 1)),
            (Some("this"), Some("morning" | "afternoon" | "evening"), _) => {
                Some((today, today + day, 2))
            }
            (Some(n), Some(unit), Some("ago")) => number(n).and_then(|n| {
                let (span, len) = match unit.trim_end_matches('s') {
                    "day" => (Duration::days(n), day),
                    "week" => (Duration::weeks(n), Duration::weeks(1)),
                    "month" => (Duration::days(30 * n), Duration::days(30)),
                    "year" => (Duration::days(365 * n), Duration::days(365)),
                    _ => return None,
                };
                let centre = now - span;
                if len == day {
                    let d = midnight(centre.date_naive());
                    Some((d, d + day, 3))
                } else {
                    Some((centre - len / 2, centre + len / 2, 3))
                }
            }),
            (Some(which @ ("last" | "past" | "previous" | "this")), Some(unit), _) => {
                let week_start =
                    today - Duration::days(i64::from(now.weekday().num_days_from_monday()));
                match (which, unit) {
                    ("past", "week") => Some((now - Duration::weeks(1), now, 2)),
                    ("past", "month") => Some((now - Duration::days(30), now, 2)),
                    ("past", "year") => Some((now - Duration::days(365), now, 2)),
                    ("this", "week") => Some((week_start, week_start + Duration::weeks(1), 2)),
                    (_, "week") => Some((week_start - Duration::weeks(1), week_start, 2)),
                    ("this", "weekend") => {
                        let sat = week_start + Duration::days(5);
                        Some((sat, sat + day * 2, 2))
                    }
                    (_, "weekend") => {
                        let sat = week_start - Duration::days(2);
                        Some((sat, sat + day * 2, 2))
                    }
                    ("this", "month") => {
                        month_window(now.year(), now.month()).map(|(s, e)| (s, e, 2))
                    }
                    (_, "month") => {
                        let (y, m) = if now.month() == 1 {
                            (now.year() - 1, 12)
                        } else {
                            (now.year(), now.month() - 1)
                        };
                        month_window(y, m).map(|(s, e)| (s, e, 2))
                    }
                    ("this", "year") => month_start(now.year(), 1)
                        .zip(month_start(now.year() + 1, 1))
                        .map(|(s, e)| (s, e, 2)),
                    (_, "year") => month_start(now.year() - 1, 1)
                        .zip(month_start(now.year(), 1))
                        .map(|(s, e)| (s, e, 2)),
                    (_, d) => weekday(d).map(|d| {
                        let s = latest_before(today, now.weekday(), d);
                        (s, s + day, 2)
                    }),
                }
            }
            (Some("on"), Some(d), _) if weekday(d).is_some() => weekday(d).map(|d| {
                let s = latest_before(today, now.weekday(), d);
                (s, s + day, 2)
            }),
            (Some(m), next, after) if month(m).is_some() => {
                let m_num = month(m).unwrap_or(1);
                let before = i.checked_sub(1).and_then(w);
                let lead = matches!(
                    before,
                    Some(
                        "in" | "during"
                            | "since"
                            | "early"
                            | "late"
                            | "mid"
                            | "of"
                            | "last"
                            | "this"
                            | "on"
                            | "until"
                            | "by"
                    )
                );
                let day_of = next
                    .and_then(|n| n.parse::<u32>().ok())
                    .filter(|d| (1..=31).contains(d));
                let year_at = if day_of.is_some() { after } else { next };
                let given = year_at.and_then(year);
                // "may" and "march" are also verbs; the abbreviations are words too.
                let ambiguous = matches!(
                    m,
                    "may"
                        | "march"
                        | "mar"
                        | "jan"
                        | "sep"
                        | "dec"
                        | "oct"
                        | "aug"
                        | "jun"
                        | "jul"
                        | "apr"
                        | "feb"
                        | "nov"
                        | "sept"
                );
                if ambiguous && !lead && day_of.is_none() && given.is_none() {
                    None
                } else {
                    let y = given.unwrap_or_else(|| {
                        // The latest such month that has begun by now.
                        if m_num > now.month() {
                            now.year() - 1
                        } else {
                            now.year()
                        }
                    });
                    let n = 1 + usize::from(day_of.is_some()) + usize::from(given.is_some());
                    match day_of {
                        Some(d) => NaiveDate::from_ymd_opt(y, m_num, d)
                            .map(midnight)
                            .map(|s| (s, s + day, n)),
                        None => month_window(y, m_num).map(|(s, e)| (s, e, n)),
                    }
                }
            }
            (Some(y), _, _) if year(y).is_some() => year(y).and_then(|y| {
                month_start(y, 1)
                    .zip(month_start(y + 1, 1))
                    .map(|(s, e)| (s, e, 1))
            }),
            _ => None,
        };
        if let Some((start, end, n)) = found {
            // Months, dates and years are calendar times; the rest count from now.
            let calendar = month(words[i]).is_some() || year(words[i]).is_some();
            return Some(TimeWindow::new(start, end, calendar, said(n)));
        }
    }
    None
}
