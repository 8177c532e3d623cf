//! ApiVersions negotiation: which version of each API to speak with a broker.
//!
//! A connection sends ApiVersions first (the highest version this crate knows; if the broker
//! answers UNSUPPORTED_VERSION it answers in v0 format with its own ApiVersions range, and the
//! client retries with the highest version both support). Every later request uses the highest
//! version in (broker range ∩ kafka-protocol's range ∩ the caller's wanted range).

use std::collections::HashMap;
use std::ops::RangeInclusive;

use kafka_protocol::messages::{ApiKey, ApiVersionsResponse};
use kafka_protocol::protocol::VersionRange;

/// The version ranges a broker advertised, by API key.
#[derive(Debug, Clone, Default)]
pub(crate) struct ApiVersionTable {
    ranges: HashMap<i16, (i16, i16)>,
}

impl ApiVersionTable {
    pub(crate) fn from_response(resp: &ApiVersionsResponse) -> ApiVersionTable {
        ApiVersionTable {
            ranges: resp
                .api_keys
                .iter()
                .map(|k| (k.api_key, (k.min_version, k.max_version)))
                .collect(),
        }
    }

    /// The broker's advertised range for `key`.
    pub(crate) fn broker_range(&self, key: i16) -> Option<RangeInclusive<i16>> {
        self.ranges.get(&key).map(|&(lo, hi)| lo..=hi)
    }

    #[cfg(test)]
    pub(crate) fn from_pairs(pairs: &[(i16, i16, i16)]) -> ApiVersionTable {
        ApiVersionTable {
            ranges: pairs.iter().map(|&(k, lo, hi)| (k, (lo, hi))).collect(),
        }
    }
}

/// The intersection of two inclusive ranges, `None` if empty.
pub(crate) fn intersect(
    a: &RangeInclusive<i16>,
    b: &RangeInclusive<i16>,
) -> Option<RangeInclusive<i16>> {
    let lo = *a.start().max(b.start());
    let hi = *a.end().min(b.end());
    (lo <= hi).then_some(lo..=hi)
}

/// kafka-protocol's encodable range as an inclusive range.
pub(crate) fn crate_range(v: VersionRange) -> RangeInclusive<i16> {
    v.min..=v.max
}

/// Highest version in broker ∩ crate ∩ wanted.
pub(crate) fn pick(
    broker: Option<RangeInclusive<i16>>,
    crate_versions: RangeInclusive<i16>,
    wanted: RangeInclusive<i16>,
) -> Option<i16> {
    let both = intersect(&broker?, &crate_versions)?;
    intersect(&both, &wanted).map(|r| *r.end())
}

/// A readable API name (`Fetch`) for a key.
pub(crate) fn api_name(key: i16) -> String {
    match ApiKey::try_from(key) {
        Ok(k) => format!("{k:?}"),
        Err(()) => format!("API {key}"),
    }
}

pub(crate) fn fmt_range(r: Option<&RangeInclusive<i16>>) -> String {
    match r {
        Some(r) => format!("v{}-v{}", r.start(), r.end()),
        None => "none".to_owned(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn picks_highest_common_version() {
        // Kafka 4.x Fetch 4..=17, crate 4..=18, caller any.
        assert_eq!(pick(Some(4..=17), 4..=18, 0..=i16::MAX), Some(17));
        // Caller caps at 12 (no topic ids).
        assert_eq!(pick(Some(4..=17), 4..=18, 0..=12), Some(12));
        // Kafka 3.9 Produce 0..=11 with crate 3..=13.
        assert_eq!(pick(Some(0..=11), 3..=13, 0..=i16::MAX), Some(11));
    }

    #[test]
    fn empty_intersections() {
        assert_eq!(pick(None, 0..=5, 0..=5), None, "broker lacks the API");
        assert_eq!(pick(Some(0..=2), 3..=13, 0..=20), None, "broker too old");
        assert_eq!(
            pick(Some(4..=17), 4..=18, 18..=18),
            None,
            "caller wants too new"
        );
        assert_eq!(
            pick(Some(RangeInclusive::new(5, 3)), 0..=10, 0..=10),
            None,
            "inverted broker range"
        );
    }

    #[test]
    fn intersect_is_symmetric() {
        assert_eq!(intersect(&(1..=5), &(3..=9)), Some(3..=5));
        assert_eq!(intersect(&(3..=9), &(1..=5)), Some(3..=5));
        assert_eq!(intersect(&(1..=2), &(3..=4)), None);
        assert_eq!(intersect(&(3..=3), &(3..=3)), Some(3..=3));
    }

    #[test]
    fn table_lookup_and_names() {
        let t = ApiVersionTable::from_pairs(&[(1, 4, 17)]);
        assert_eq!(t.broker_range(1), Some(4..=17));
        assert_eq!(t.broker_range(0), None);
        assert_eq!(api_name(1), "Fetch");
        assert_eq!(api_name(-7), "API -7");
        assert_eq!(fmt_range(Some(&(4..=17))), "v4-v17");
    }
}
