//! Proto3 JSON mapping helpers: bytes as base64, int64 as strings, enums by
//! name, and `google.protobuf.Timestamp` as RFC 3339.

use base64::Engine as _;
use serde::de::{self, Deserializer, Visitor};
use serde::Serializer;
use std::fmt;

/// `bytes` fields: standard base64 with padding out; standard or URL-safe,
/// padded or not, in.
pub mod b64 {
    use super::*;
    use bytes::Bytes;

    pub fn serialize<S: Serializer>(v: &Bytes, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(v))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Bytes, D::Error> {
        let text: Option<String> = serde::Deserialize::deserialize(d)?;
        let Some(text) = text else {
            return Ok(Bytes::new());
        };
        decode(&text).map(Bytes::from).map_err(de::Error::custom)
    }

    /// A `bytes` field that is not base64 in any alphabet proto3 JSON allows.
    #[derive(Debug, thiserror::Error)]
    #[error("invalid base64: {0}")]
    pub struct InvalidBase64(#[from] base64::DecodeError);

    /// Decodes any of the base64 alphabets proto3 JSON allows.
    pub fn decode(text: &str) -> Result<Vec<u8>, InvalidBase64> {
        let trimmed = text.trim_end_matches('=');
        let engine = if trimmed.contains(['-', '_']) {
            base64::engine::general_purpose::URL_SAFE_NO_PAD
        } else {
            base64::engine::general_purpose::STANDARD_NO_PAD
        };
        Ok(engine.decode(trimmed)?)
    }
}

/// `int64` fields: a decimal string out; a string or a number in.
pub mod i64_str {
    use super::*;

    pub fn serialize<S: Serializer>(v: &i64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&v.to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = i64;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an int64 as a string or a number")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<i64, E> {
                Ok(v)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<i64, E> {
                i64::try_from(v).map_err(E::custom)
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<i64, E> {
                if v.fract() == 0.0 && v.abs() < 9.2e18 {
                    Ok(v as i64)
                } else {
                    Err(E::custom("not an integer"))
                }
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<i64, E> {
                v.parse().map_err(E::custom)
            }
            fn visit_unit<E: de::Error>(self) -> Result<i64, E> {
                Ok(0)
            }
        }
        d.deserialize_any(V)
    }
}

/// Declares a proto enum: its values for prost and, each beside its value,
/// the proto names of its JSON mapping ([`ProtoEnum`]).
macro_rules! proto_enum {
    ($(#[$doc:meta])* pub enum $name:ident { $($variant:ident = $value:literal => $proto:literal,)+ }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
        #[repr(i32)]
        pub enum $name {
            $($variant = $value,)+
        }

        impl $crate::proto::json::ProtoEnum for $name {
            const NAMES: &'static [(i32, &'static str)] = &[$(($value, $proto),)+];
        }
    };
}
pub(crate) use proto_enum;

/// An enum with proto names, for the JSON mapping of enum fields.
pub trait ProtoEnum {
    /// Each value with its proto name.
    const NAMES: &'static [(i32, &'static str)];

    /// The proto name of a value, if it is known.
    fn name_of(value: i32) -> Option<&'static str> {
        Self::NAMES
            .iter()
            .find(|(v, _)| *v == value)
            .map(|(_, name)| *name)
    }

    /// The value of a proto name.
    fn value_of(name: &str) -> Option<i32> {
        Self::NAMES
            .iter()
            .find(|(_, n)| *n == name)
            .map(|(v, _)| *v)
    }
}

/// Serializes an enum field (an `i32`) by name, accepting names or numbers.
pub struct EnumField<E>(std::marker::PhantomData<E>);

impl<E: ProtoEnum> EnumField<E> {
    pub fn serialize<S: Serializer>(v: &i32, s: S) -> Result<S::Ok, S::Error> {
        match E::name_of(*v) {
            Some(name) => s.serialize_str(name),
            None => s.serialize_i32(*v),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<i32, D::Error> {
        struct V<E>(std::marker::PhantomData<E>);
        impl<E: ProtoEnum> Visitor<'_> for V<E> {
            type Value = i32;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an enum name or number")
            }
            fn visit_i64<Er: de::Error>(self, v: i64) -> Result<i32, Er> {
                i32::try_from(v).map_err(Er::custom)
            }
            fn visit_u64<Er: de::Error>(self, v: u64) -> Result<i32, Er> {
                i32::try_from(v).map_err(Er::custom)
            }
            fn visit_str<Er: de::Error>(self, v: &str) -> Result<i32, Er> {
                E::value_of(v).ok_or_else(|| Er::custom(format!("unknown enum value {v:?}")))
            }
            fn visit_unit<Er: de::Error>(self) -> Result<i32, Er> {
                Ok(0)
            }
        }
        d.deserialize_any(V::<E>(std::marker::PhantomData))
    }
}

/// Whether a scalar is its proto3 default (left out of JSON output).
pub fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian.
pub(crate) fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// (year, month, day) → days since 1970-01-01.
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Formats a timestamp as RFC 3339 in UTC (`2024-01-02T03:04:05.123Z`).
pub fn format_rfc3339(seconds: i64, nanos: i32) -> String {
    let days = seconds.div_euclid(86_400);
    let secs = seconds.rem_euclid(86_400);
    let (y, mo, d) = civil_from_days(days);
    let (h, mi, s) = (secs / 3600, (secs % 3600) / 60, secs % 60);
    let mut out = format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}");
    if nanos > 0 {
        let frac = format!("{nanos:09}");
        out.push('.');
        out.push_str(frac.trim_end_matches('0'));
    }
    out.push('Z');
    out
}

/// Parses an RFC 3339 timestamp (`Z` or a `±hh:mm` offset).
pub fn parse_rfc3339(text: &str) -> Option<(i64, i32)> {
    let b = text.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't') {
        return None;
    }
    let num = |r: std::ops::Range<usize>| text.get(r)?.parse::<i64>().ok();
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, s) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let mut rest = &text[19..];
    let mut nanos = 0i32;
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 || digits > 9 {
            return None;
        }
        let padded = format!("{:0<9}", &frac[..digits]);
        nanos = padded.parse().ok()?;
        rest = &frac[digits..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes().first()? {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let oh: i64 = rest.get(1..3)?.parse().ok()?;
            let om: i64 = rest.get(4..6)?.parse().ok()?;
            if rest.len() != 6 {
                return None;
            }
            sign * (oh * 3600 + om * 60)
        }
    };
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    let days = days_from_civil(y, mo as u32, d as u32);
    Some((days * 86_400 + h * 3600 + mi * 60 + s - offset, nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_round_trips() {
        assert_eq!(format_rfc3339(0, 0), "1970-01-01T00:00:00Z");
        assert_eq!(
            format_rfc3339(1_700_000_000, 120_000_000),
            "2023-11-14T22:13:20.12Z"
        );
        assert_eq!(
            parse_rfc3339("2023-11-14T22:13:20.12Z"),
            Some((1_700_000_000, 120_000_000))
        );
        assert_eq!(
            parse_rfc3339("2023-11-14T23:13:20+01:00"),
            Some((1_700_000_000, 0))
        );
        assert_eq!(parse_rfc3339("2023-11-14"), None);
        for secs in [-86_401i64, 951_782_400, 4_102_444_800] {
            let text = format_rfc3339(secs, 5);
            assert_eq!(parse_rfc3339(&text), Some((secs, 5)), "{text}");
        }
    }

    #[test]
    fn base64_accepts_every_alphabet() {
        assert_eq!(b64::decode("aGk/").unwrap(), b"hi?");
        assert_eq!(b64::decode("aGk_").unwrap(), b"hi?");
        assert_eq!(b64::decode("aGk").unwrap(), b"hi");
        assert_eq!(b64::decode("aGk=").unwrap(), b"hi");
        assert!(b64::decode("!!").is_err());
    }
}
