//! Whole JSON numbers for integer fields: JSON Schema's `integer` admits `2.0` and `1e3`, so the API does
//! too, while `2.5` or an out-of-range value is refused naming the field.

use std::fmt;

use serde::{
    Deserializer,
    de::{Error as _, Visitor},
};

/// Reads a whole number from a JSON integer or float.
struct Whole;

impl Visitor<'_> for Whole {
    type Value = i64;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a whole number")
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<i64, E> {
        Ok(v)
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<i64, E> {
        i64::try_from(v).map_err(|_| E::custom(format!("{v} is out of range for a 64-bit integer")))
    }

    fn visit_f64<E: serde::de::Error>(self, f: f64) -> Result<i64, E> {
        // i64::MAX as f64 rounds up to 2^63, so the upper bound is exclusive.
        if f.fract() == 0.0 && f >= i64::MIN as f64 && f < i64::MAX as f64 {
            Ok(f as i64)
        } else {
            Err(E::custom(format!("{f} is not a whole number in range")))
        }
    }
}

/// A whole number, `null` allowed.
struct MaybeWhole;

impl<'de> Visitor<'de> for MaybeWhole {
    type Value = Option<i64>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a whole number or null")
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Option<i64>, E> {
        Ok(None)
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Option<i64>, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, de: D) -> Result<Option<i64>, D::Error> {
        de.deserialize_any(Whole).map(Some)
    }
}

/// An `i64`.
pub fn i64<'de, D: Deserializer<'de>>(de: D) -> Result<i64, D::Error> {
    de.deserialize_any(Whole)
}

/// An `i32`.
pub fn i32<'de, D: Deserializer<'de>>(de: D) -> Result<i32, D::Error> {
    narrow::<D>(i64(de)?)
}

/// An optional `i64` (`null` is `None`).
pub fn option_i64<'de, D: Deserializer<'de>>(de: D) -> Result<Option<i64>, D::Error> {
    de.deserialize_option(MaybeWhole)
}

/// An optional `i32` (`null` is `None`).
pub fn option_i32<'de, D: Deserializer<'de>>(de: D) -> Result<Option<i32>, D::Error> {
    option_i64(de)?.map(narrow::<D>).transpose()
}

fn narrow<'de, D: Deserializer<'de>>(n: i64) -> Result<i32, D::Error> {
    i32::try_from(n).map_err(|_| D::Error::custom(format!("{n} is out of range for a 32-bit integer")))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    struct Body {
        #[serde(deserialize_with = "super::i32")]
        replicas: i32,
        #[serde(default, deserialize_with = "super::option_i64")]
        ttl: Option<i64>,
    }

    fn parse(json: &str) -> Result<Body, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    #[test]
    fn whole_floats_are_integers_and_fractions_are_not() {
        let b = parse(r#"{"replicas": 2.0, "ttl": 1e3}"#).unwrap();
        assert_eq!((b.replicas, b.ttl), (2, Some(1000)));
        assert_eq!(parse(r#"{"replicas": 3, "ttl": null}"#).unwrap().ttl, None);
        assert_eq!(parse(r#"{"replicas": 3}"#).unwrap().ttl, None);
        assert!(
            parse(r#"{"replicas": 2.5}"#)
                .unwrap_err()
                .contains("2.5 is not a whole number")
        );
        assert!(
            parse(r#"{"replicas": 3000000000}"#)
                .unwrap_err()
                .contains("out of range for a 32-bit integer")
        );
        assert!(parse(r#"{"replicas": 1, "ttl": 1e300}"#).is_err());
        assert!(
            parse(r#"{"replicas": "2"}"#)
                .unwrap_err()
                .contains("expected a whole number")
        );
    }
}
