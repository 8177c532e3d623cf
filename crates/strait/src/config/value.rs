//! Typed readers for raw values: strings, booleans, integers, lists, durations, byte sizes and
//! one-of choices. Every failure is an [`Error::Invalid`] naming the key and the expected form.
//!
//! Durations and sizes are parsed by hand: the accepted grammar is one integer and one unit
//! (`500ms`, `10s`, `2m`, `1h`; `256MiB`, `1GiB`, `100MB`), which is a few lines and keeps the
//! error messages ours.

use std::fmt;
use std::time::Duration;

use super::raw::{Entry, RawValue};
use crate::error::{Error, Result};

/// A size in bytes, written in files as an integer or as `"256MiB"`, `"1GiB"`, `"100MB"`...
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ByteSize(pub u64);

impl ByteSize {
    /// The size in bytes.
    pub fn bytes(self) -> u64 {
        self.0
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(&str, u64); 4] = [
            ("TiB", 1 << 40),
            ("GiB", 1 << 30),
            ("MiB", 1 << 20),
            ("KiB", 1 << 10),
        ];
        for (name, size) in UNITS {
            if self.0 >= size && self.0.is_multiple_of(size) {
                return write!(f, "{}{name}", self.0 / size);
            }
        }
        write!(f, "{}B", self.0)
    }
}

/// Formats a duration with the largest unit that represents it exactly (`10s`, `500ms`, `2m`).
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return "0s".into();
    }
    for (unit, size) in [("h", 3_600_000u128), ("m", 60_000), ("s", 1_000)] {
        if ms.is_multiple_of(size) {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

/// A key (already described with its origin) and its raw value.
pub(crate) struct Field<'a> {
    pub(crate) key: String,
    pub(crate) entry: &'a Entry,
}

impl<'a> Field<'a> {
    pub(crate) fn new(section: &str, name: &str, entry: &'a Entry) -> Field<'a> {
        Field {
            key: entry.origin.describe(&format!("{section}.{name}")),
            entry,
        }
    }

    pub(crate) fn invalid(&self, expected: impl Into<String>) -> Error {
        Error::Invalid {
            key: self.key.clone(),
            expected: expected.into(),
            got: self.entry.value.to_string(),
        }
    }

    /// The value as text: strings as they are, other scalars as TOML writes them.
    fn text(&self) -> Option<&str> {
        match &self.entry.value {
            RawValue::Toml(toml::Value::String(s)) | RawValue::Text(s) => Some(s),
            _ => None,
        }
    }

    pub(crate) fn string(&self) -> Result<String> {
        self.text()
            .map(|s| s.to_string())
            .ok_or_else(|| self.invalid("a string"))
    }

    pub(crate) fn non_empty_string(&self) -> Result<String> {
        match self.string() {
            Ok(s) if !s.trim().is_empty() => Ok(s),
            _ => Err(self.invalid("a non-empty string")),
        }
    }

    pub(crate) fn boolean(&self) -> Result<bool> {
        match &self.entry.value {
            RawValue::Toml(toml::Value::Boolean(b)) => Ok(*b),
            RawValue::Text(s) if s.trim().eq_ignore_ascii_case("true") => Ok(true),
            RawValue::Text(s) if s.trim().eq_ignore_ascii_case("false") => Ok(false),
            _ => Err(self.invalid("true or false")),
        }
    }

    pub(crate) fn integer(&self, expected: &str) -> Result<i64> {
        match &self.entry.value {
            RawValue::Toml(toml::Value::Integer(i)) => Ok(*i),
            RawValue::Text(s) => s.trim().parse().map_err(|_| self.invalid(expected)),
            _ => Err(self.invalid(expected)),
        }
    }

    pub(crate) fn float(&self, expected: &str) -> Result<f64> {
        let v = match &self.entry.value {
            RawValue::Toml(toml::Value::Float(f)) => Some(*f),
            RawValue::Toml(toml::Value::Integer(i)) => Some(*i as f64),
            RawValue::Text(s) => s.trim().parse().ok(),
            _ => None,
        };
        v.filter(|f| f.is_finite())
            .ok_or_else(|| self.invalid(expected))
    }

    /// A list of strings: a TOML array, or (from text) a comma-separated list or a TOML array
    /// literal such as `["a{1,3}", "b"]` for items that contain commas.
    pub(crate) fn list(&self) -> Result<Vec<String>> {
        const EXPECTED: &str = "a list of strings, e.g. [\"orders\", \"payments-.*\"]";
        match &self.entry.value {
            RawValue::Toml(toml::Value::Array(items)) => items
                .iter()
                .map(|v| v.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| self.invalid(EXPECTED)),
            RawValue::Text(s) if s.trim_start().starts_with('[') => {
                let doc: toml::Table = format!("v = {s}")
                    .parse()
                    .map_err(|_| self.invalid(EXPECTED))?;
                let entry = Entry {
                    value: RawValue::Toml(
                        doc.get("v").cloned().unwrap_or(toml::Value::Boolean(false)),
                    ),
                    origin: self.entry.origin.clone(),
                };
                Field {
                    key: self.key.clone(),
                    entry: &entry,
                }
                .list()
            }
            RawValue::Text(s) => Ok(s
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect()),
            _ => Err(self.invalid(EXPECTED)),
        }
    }

    /// One of a fixed set of words (case-insensitive).
    pub(crate) fn choice<T: Copy>(&self, options: &[(&str, T)]) -> Result<T> {
        let expected = expected_choices(options.iter().map(|(n, _)| *n));
        let s = self.text().ok_or_else(|| self.invalid(expected.clone()))?;
        options
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(s.trim()))
            .map(|(_, v)| *v)
            .ok_or_else(|| self.invalid(expected))
    }

    pub(crate) fn duration(&self) -> Result<Duration> {
        const EXPECTED: &str =
            "a duration: an integer and a unit (ms, s, m or h), e.g. \"10s\" or \"500ms\"";
        let s = self.text().ok_or_else(|| self.invalid(EXPECTED))?;
        parse_duration(s).ok_or_else(|| self.invalid(EXPECTED))
    }

    pub(crate) fn byte_size(&self) -> Result<ByteSize> {
        const EXPECTED: &str = "a size: bytes as an integer, or an integer and a unit \
                                (B, KiB, MiB, GiB, TiB, KB, MB, GB, TB), e.g. \"256MiB\"";
        match &self.entry.value {
            RawValue::Toml(toml::Value::Integer(i)) => u64::try_from(*i)
                .map(ByteSize)
                .map_err(|_| self.invalid(EXPECTED)),
            _ => {
                let s = self.text().ok_or_else(|| self.invalid(EXPECTED))?;
                parse_byte_size(s).ok_or_else(|| self.invalid(EXPECTED))
            }
        }
    }
}

/// `"a" or "b"` for two choices, `one of "a", "b", "c"` for more.
pub(crate) fn expected_choices<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let names: Vec<String> = names.map(|n| format!("\"{n}\"")).collect();
    match names.as_slice() {
        [a, b] => format!("{a} or {b}"),
        _ => format!("one of {}", names.join(", ")),
    }
}

/// Splits `"  10 s "` into (10, "s"); digits first, then a unit.
fn number_and_unit(s: &str) -> Option<(u64, &str)> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    if digits.is_empty() {
        return None;
    }
    Some((digits.parse().ok()?, unit.trim()))
}

/// Parses `500ms`, `10s`, `2m`, `1h`.
pub(crate) fn parse_duration(s: &str) -> Option<Duration> {
    let (n, unit) = number_and_unit(s)?;
    let ms = match unit {
        "ms" => n,
        "s" => n.checked_mul(1_000)?,
        "m" => n.checked_mul(60_000)?,
        "h" => n.checked_mul(3_600_000)?,
        _ => return None,
    };
    Some(Duration::from_millis(ms))
}

/// Parses `1048576`, `512KiB`, `256MiB`, `1GiB`, `100MB` (units case-insensitive).
pub(crate) fn parse_byte_size(s: &str) -> Option<ByteSize> {
    let (n, unit) = number_and_unit(s)?;
    let factor: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kib" | "ki" => 1 << 10,
        "mib" | "mi" => 1 << 20,
        "gib" | "gi" => 1 << 30,
        "tib" | "ti" => 1 << 40,
        "kb" | "k" => 1_000,
        "mb" | "m" => 1_000_000,
        "gb" | "g" => 1_000_000_000,
        "tb" | "t" => 1_000_000_000_000,
        _ => return None,
    };
    n.checked_mul(factor).map(ByteSize)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::config::raw::Origin;

    fn field(entry: &Entry) -> Field<'_> {
        Field::new("mirror", "x", entry)
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s"), Some(Duration::from_secs(10)));
        assert_eq!(parse_duration(" 500ms "), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_duration("10"), None);
        assert_eq!(parse_duration("s"), None);
        assert_eq!(parse_duration("1.5s"), None);
        assert_eq!(parse_duration("10 days"), None);
        assert_eq!(format_duration(Duration::from_secs(10)), "10s");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
        assert_eq!(format_duration(Duration::from_secs(120)), "2m");
    }

    #[test]
    fn byte_sizes() {
        assert_eq!(parse_byte_size("256MiB"), Some(ByteSize(256 << 20)));
        assert_eq!(parse_byte_size("1GiB"), Some(ByteSize(1 << 30)));
        assert_eq!(parse_byte_size("1gib"), Some(ByteSize(1 << 30)));
        assert_eq!(parse_byte_size("100MB"), Some(ByteSize(100_000_000)));
        assert_eq!(parse_byte_size("4096"), Some(ByteSize(4096)));
        assert_eq!(parse_byte_size("12 parsecs"), None);
        assert_eq!(parse_byte_size("99999999999TiB"), None);
        assert_eq!(ByteSize(256 << 20).to_string(), "256MiB");
        assert_eq!(ByteSize(1000).to_string(), "1000B");
        let e = Entry {
            value: RawValue::Toml(toml::Value::Integer(-1)),
            origin: Origin::File,
        };
        assert!(field(&e).byte_size().is_err());
    }

    #[test]
    fn choices_name_the_key_and_the_options() {
        let e = Entry::text("begin", Origin::File);
        let err = field(&e)
            .choice(&[("earliest", 0), ("latest", 1)])
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "mirror.x: expected \"earliest\" or \"latest\", got \"begin\""
        );
        let e = Entry::text("LATEST", Origin::Env("STRAIT_MIRROR_X".into()));
        assert_eq!(
            field(&e).choice(&[("earliest", 0), ("latest", 1)]).unwrap(),
            1
        );
        let err = field(&Entry::text("x", Origin::File))
            .choice(&[("a", 0), ("b", 1), ("c", 2)])
            .unwrap_err()
            .to_string();
        assert!(err.contains("one of \"a\", \"b\", \"c\""), "{err}");
    }

    #[test]
    fn lists_from_text_and_toml() {
        let e = Entry::text("a, b,,c", Origin::File);
        assert_eq!(field(&e).list().unwrap(), ["a", "b", "c"]);
        let e = Entry::text(r#"["a{1,3}", "b"]"#, Origin::File);
        assert_eq!(field(&e).list().unwrap(), ["a{1,3}", "b"]);
        let e = Entry {
            value: RawValue::Toml(toml::Value::Array(vec![toml::Value::Integer(1)])),
            origin: Origin::File,
        };
        assert!(field(&e).list().is_err());
    }

    #[test]
    fn booleans_and_integers_from_text() {
        assert!(field(&Entry::text("TRUE", Origin::File)).boolean().unwrap());
        assert!(field(&Entry::text("yes", Origin::File)).boolean().is_err());
        assert_eq!(
            field(&Entry::text(" 3 ", Origin::File))
                .integer("n")
                .unwrap(),
            3
        );
        assert!(
            field(&Entry::text("three", Origin::File))
                .integer("n")
                .is_err()
        );
        assert!(field(&Entry::text("NaN", Origin::File)).float("f").is_err());
    }
}
