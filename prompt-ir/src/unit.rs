//! Numbers confined to the unit interval `0..=1` (ratios, relevance), checked on construction
//! and on deserialization so an out-of-range value can never exist.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

const UNIT: &str = "a finite number from 0 to 1";

/// Checks that `value` lies in `0..=1`; `what` names it in the error.
pub(crate) fn check_unit(value: f64, what: &'static str) -> Result<f64> {
    if value.is_finite() && (0.0..=1.0).contains(&value) {
        // `+ 0.0` turns -0.0 into 0.0, so equal values always serialize identically.
        Ok(value + 0.0)
    } else {
        Err(Error::OutOfRange {
            what,
            value,
            expected: UNIT,
        })
    }
}

macro_rules! unit_interval {
    ($(#[$meta:meta])* $name:ident, $what:literal) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, PartialOrd, Serialize, Deserialize)]
        #[serde(try_from = "f64", into = "f64")]
        pub struct $name(f64);

        impl $name {
            /// Zero.
            pub const ZERO: Self = Self(0.0);
            /// One.
            pub const ONE: Self = Self(1.0);

            /// The value, if it is a finite number from 0 to 1.
            pub fn new(value: f64) -> Result<Self> {
                check_unit(value, $what).map(Self)
            }

            /// The value clamped into `0..=1`; NaN becomes 0. For scores from outside
            /// (e.g. a cosine similarity) that are only roughly in range.
            pub fn clamped(value: f64) -> Self {
                if value.is_nan() {
                    Self::ZERO
                } else {
                    Self(value.clamp(0.0, 1.0) + 0.0)
                }
            }

            /// The number itself.
            pub fn get(self) -> f64 {
                self.0
            }
        }

        impl TryFrom<f64> for $name {
            type Error = Error;
            fn try_from(value: f64) -> Result<Self> {
                Self::new(value)
            }
        }

        impl From<$name> for f64 {
            fn from(value: $name) -> f64 {
                value.0
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.0.fmt(f)
            }
        }
    };
}

unit_interval!(
    /// A share of something, from 0 (none) to 1 (all): budget reserve and allocation ratios,
    /// compression ratios, similarity thresholds.
    Ratio,
    "ratio"
);

unit_interval!(
    /// How relevant a section is to the current request, from 0 (not at all) to 1 (fully).
    Relevance,
    "relevance"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_closed_unit_interval() {
        assert_eq!(Ratio::new(0.0).unwrap().get(), 0.0);
        assert_eq!(Ratio::new(1.0).unwrap().get(), 1.0);
        assert_eq!(Relevance::new(0.25).unwrap().get(), 0.25);
    }

    #[test]
    fn rejects_out_of_range_with_a_clear_message() {
        let err = Ratio::new(1.5).unwrap_err();
        assert_eq!(
            err.to_string(),
            "ratio was 1.5, expected a finite number from 0 to 1"
        );
        assert!(Ratio::new(-0.1).is_err());
        assert!(Relevance::new(f64::NAN).is_err());
        assert!(Relevance::new(f64::INFINITY).is_err());
    }

    #[test]
    fn negative_zero_is_normalised() {
        let r = Ratio::new(-0.0).unwrap();
        assert_eq!(serde_json::to_string(&r).unwrap(), "0.0");
    }

    #[test]
    fn clamped_never_fails() {
        assert_eq!(Relevance::clamped(f64::NAN), Relevance::ZERO);
        assert_eq!(Relevance::clamped(-3.0), Relevance::ZERO);
        assert_eq!(Relevance::clamped(7.0), Relevance::ONE);
    }

    #[test]
    fn deserialization_rejects_out_of_range() {
        assert!(serde_json::from_str::<Ratio>("1.01").is_err());
        assert_eq!(serde_json::from_str::<Ratio>("0.5").unwrap().get(), 0.5);
    }
}
