//! Client-side partition assignors for the classic consumer-group protocol.
//!
//! The coordinator elects one member as leader; the leader runs an assignor over every member's
//! subscription and the current partition counts and sends the result in SyncGroup. Every member
//! must produce the same answer from the same input, so the assignors here are pure functions of
//! their input: members are ordered the way the Java client orders them (static members by
//! `group.instance.id`, then dynamic members by member id) and topics/partitions are sorted.

use std::collections::{BTreeMap, BTreeSet};

/// A set of partitions grouped by topic, kept sorted (topic, then partition).
///
/// This is the shape of a consumer-protocol assignment and of a member's owned partitions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartitionSet {
    topics: BTreeMap<String, BTreeSet<i32>>,
}

impl PartitionSet {
    /// An empty set.
    pub fn new() -> PartitionSet {
        PartitionSet::default()
    }

    /// Adds one partition; returns false if it was already present.
    pub fn insert(&mut self, topic: &str, partition: i32) -> bool {
        match self.topics.get_mut(topic) {
            Some(set) => set.insert(partition),
            None => {
                self.topics
                    .insert(topic.to_owned(), BTreeSet::from([partition]));
                true
            }
        }
    }

    /// Whether the set holds `topic`/`partition`.
    pub fn contains(&self, topic: &str, partition: i32) -> bool {
        self.topics
            .get(topic)
            .is_some_and(|set| set.contains(&partition))
    }

    /// Number of partitions in the set.
    pub fn len(&self) -> usize {
        self.topics.values().map(BTreeSet::len).sum()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.topics.values().all(BTreeSet::is_empty)
    }

    /// Every partition, sorted by topic then partition.
    pub fn iter(&self) -> impl Iterator<Item = (&str, i32)> + '_ {
        self.topics
            .iter()
            .flat_map(|(t, ps)| ps.iter().map(move |p| (t.as_str(), *p)))
    }

    /// Topics with at least one partition, sorted, each with its sorted partitions.
    pub fn topics(&self) -> impl Iterator<Item = (&str, &BTreeSet<i32>)> + '_ {
        self.topics
            .iter()
            .filter(|(_, ps)| !ps.is_empty())
            .map(|(t, ps)| (t.as_str(), ps))
    }

    /// Removes one partition; returns whether it was present.
    pub fn remove(&mut self, topic: &str, partition: i32) -> bool {
        let removed = self
            .topics
            .get_mut(topic)
            .is_some_and(|set| set.remove(&partition));
        if self.topics.get(topic).is_some_and(BTreeSet::is_empty) {
            self.topics.remove(topic);
        }
        removed
    }

    /// Partitions in `self` that are not in `other`.
    pub fn difference(&self, other: &PartitionSet) -> PartitionSet {
        let mut out = PartitionSet::new();
        for (t, p) in self.iter() {
            if !other.contains(t, p) {
                out.insert(t, p);
            }
        }
        out
    }
}

impl<'a> FromIterator<(&'a str, i32)> for PartitionSet {
    fn from_iter<I: IntoIterator<Item = (&'a str, i32)>>(iter: I) -> Self {
        let mut set = PartitionSet::new();
        for (t, p) in iter {
            set.insert(t, p);
        }
        set
    }
}

/// One member's subscription as the leader sees it in the JoinGroup response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberSubscription {
    /// Member id assigned by the coordinator.
    pub member_id: String,
    /// `group.instance.id` of a static member.
    pub group_instance_id: Option<String>,
    /// Topics the member wants.
    pub topics: BTreeSet<String>,
    /// Partitions the member says it owns (sent by cooperative members; only the
    /// cooperative-sticky assignor uses it).
    pub owned: PartitionSet,
}

/// A client-side partition assignor (the classic protocol's "protocol name").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Assignor {
    /// `range`: per topic, contiguous ranges of partitions to the members subscribed to it,
    /// the first `partitions % members` members getting one extra. Java's default first choice.
    Range,
    /// `roundrobin`: all subscribed partitions (sorted by topic, partition) dealt one by one to
    /// the members in order, skipping members not subscribed to the partition's topic.
    RoundRobin,
    /// `cooperative-sticky` (KIP-429): balanced, members keep what they own, and only the
    /// partitions that move are revoked (incremental cooperative rebalancing: a second round
    /// hands them to their new owner). Offered alone (or with other cooperative assignors) it
    /// makes the member cooperative.
    CooperativeSticky,
}

impl Assignor {
    /// The protocol name sent in JoinGroup, as the Java client spells it.
    pub fn name(self) -> &'static str {
        match self {
            Assignor::Range => "range",
            Assignor::RoundRobin => "roundrobin",
            Assignor::CooperativeSticky => "cooperative-sticky",
        }
    }

    /// Whether the assignor follows the cooperative rebalance protocol (KIP-429).
    pub fn is_cooperative(self) -> bool {
        matches!(self, Assignor::CooperativeSticky)
    }

    /// The assignor with this protocol name, if this crate implements it.
    pub fn from_name(name: &str) -> Option<Assignor> {
        match name {
            "range" => Some(Assignor::Range),
            "roundrobin" => Some(Assignor::RoundRobin),
            "cooperative-sticky" => Some(Assignor::CooperativeSticky),
            _ => None,
        }
    }

    /// Computes the assignment of every member.
    ///
    /// `partition_counts` holds the current partition count of every topic that exists;
    /// subscribed topics missing from it are skipped (they do not exist yet). Every member gets
    /// an entry, possibly empty. The result depends only on the input.
    pub fn assign(
        self,
        partition_counts: &BTreeMap<String, i32>,
        members: &[MemberSubscription],
    ) -> BTreeMap<String, PartitionSet> {
        let ordered = ordered_members(members);
        let mut out: BTreeMap<String, PartitionSet> = members
            .iter()
            .map(|m| (m.member_id.clone(), PartitionSet::new()))
            .collect();
        match self {
            Assignor::Range => assign_range(partition_counts, &ordered, &mut out),
            Assignor::RoundRobin => assign_round_robin(partition_counts, &ordered, &mut out),
            Assignor::CooperativeSticky => {
                let partitions: Vec<(&str, i32)> = subscribed_topics(partition_counts, &ordered)
                    .into_iter()
                    .flat_map(|(t, n)| (0..n).map(move |p| (t, p)))
                    .collect();
                super::sticky::assign(&partitions, &ordered, &mut out);
            }
        }
        out
    }
}

/// Members in the order the Java client's assignors use: static members (sorted by instance
/// id) before dynamic ones (sorted by member id). Duplicate member ids keep the first entry.
fn ordered_members(members: &[MemberSubscription]) -> Vec<&MemberSubscription> {
    let mut seen = BTreeSet::new();
    let mut ordered: Vec<&MemberSubscription> = members
        .iter()
        .filter(|m| seen.insert(m.member_id.as_str()))
        .collect();
    ordered.sort_by(|a, b| {
        match (&a.group_instance_id, &b.group_instance_id) {
            (Some(x), Some(y)) => x.cmp(y),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => std::cmp::Ordering::Equal,
        }
        .then_with(|| a.member_id.cmp(&b.member_id))
    });
    ordered
}

fn subscribed_topics<'a>(
    partition_counts: &'a BTreeMap<String, i32>,
    members: &[&MemberSubscription],
) -> Vec<(&'a str, i32)> {
    partition_counts
        .iter()
        .filter(|(t, n)| **n > 0 && members.iter().any(|m| m.topics.contains(*t)))
        .map(|(t, n)| (t.as_str(), *n))
        .collect()
}

fn assign_range(
    partition_counts: &BTreeMap<String, i32>,
    members: &[&MemberSubscription],
    out: &mut BTreeMap<String, PartitionSet>,
) {
    for (topic, count) in subscribed_topics(partition_counts, members) {
        let consumers: Vec<&&MemberSubscription> = members
            .iter()
            .filter(|m| m.topics.contains(topic))
            .collect();
        // consumers is non-empty: subscribed_topics only yields topics someone wants.
        let n = consumers.len() as i32;
        let per = count / n;
        let extra = count % n;
        for (i, m) in consumers.iter().enumerate() {
            let i = i as i32;
            let start = per * i + i.min(extra);
            let len = per + i32::from(i < extra);
            if let Some(set) = out.get_mut(&m.member_id) {
                for p in start..start + len {
                    set.insert(topic, p);
                }
            }
        }
    }
}

fn assign_round_robin(
    partition_counts: &BTreeMap<String, i32>,
    members: &[&MemberSubscription],
    out: &mut BTreeMap<String, PartitionSet>,
) {
    if members.is_empty() {
        return;
    }
    let mut next = 0usize;
    for (topic, count) in subscribed_topics(partition_counts, members) {
        for p in 0..count {
            // Some member wants this topic, so the scan ends within one lap.
            for _ in 0..members.len() {
                let m = members[next % members.len()];
                next = (next + 1) % members.len();
                if m.topics.contains(topic) {
                    if let Some(set) = out.get_mut(&m.member_id) {
                        set.insert(topic, p);
                    }
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn member(id: &str, topics: &[&str]) -> MemberSubscription {
        MemberSubscription {
            member_id: id.to_owned(),
            group_instance_id: None,
            topics: topics.iter().map(|t| (*t).to_owned()).collect(),
            owned: PartitionSet::new(),
        }
    }

    fn counts(list: &[(&str, i32)]) -> BTreeMap<String, i32> {
        list.iter().map(|(t, n)| ((*t).to_owned(), *n)).collect()
    }

    fn set(list: &[(&str, i32)]) -> PartitionSet {
        list.iter().copied().collect()
    }

    /// Every partition of every subscribed topic is assigned exactly once, and only to members
    /// subscribed to its topic.
    fn assert_complete_and_disjoint(
        counts: &BTreeMap<String, i32>,
        members: &[MemberSubscription],
        result: &BTreeMap<String, PartitionSet>,
    ) {
        let mut seen = PartitionSet::new();
        for m in members {
            let mine = &result[&m.member_id];
            for (t, p) in mine.iter() {
                assert!(m.topics.contains(t), "{} got unsubscribed {t}", m.member_id);
                assert!(seen.insert(t, p), "{t}-{p} assigned twice");
            }
        }
        for (t, n) in counts {
            if members.iter().any(|m| m.topics.contains(t)) {
                for p in 0..*n {
                    assert!(seen.contains(t, p), "{t}-{p} unassigned");
                }
            }
        }
    }

    #[test]
    fn range_splits_each_topic_into_contiguous_ranges() {
        let members = [member("b", &["t"]), member("a", &["t"])];
        let c = counts(&[("t", 7)]);
        let r = Assignor::Range.assign(&c, &members);
        assert_eq!(r["a"], set(&[("t", 0), ("t", 1), ("t", 2), ("t", 3)]));
        assert_eq!(r["b"], set(&[("t", 4), ("t", 5), ("t", 6)]));
        assert_complete_and_disjoint(&c, &members, &r);
    }

    #[test]
    fn range_is_per_topic_so_the_first_member_gets_every_remainder() {
        let members = [member("m1", &["x", "y"]), member("m2", &["x", "y"])];
        let c = counts(&[("x", 3), ("y", 3)]);
        let r = Assignor::Range.assign(&c, &members);
        assert_eq!(r["m1"], set(&[("x", 0), ("x", 1), ("y", 0), ("y", 1)]));
        assert_eq!(r["m2"], set(&[("x", 2), ("y", 2)]));
    }

    #[test]
    fn range_six_partitions_two_members_three_each() {
        let members = [member("m-2", &["t"]), member("m-1", &["t"])];
        let c = counts(&[("t", 6)]);
        let r = Assignor::Range.assign(&c, &members);
        assert_eq!(r["m-1"], set(&[("t", 0), ("t", 1), ("t", 2)]));
        assert_eq!(r["m-2"], set(&[("t", 3), ("t", 4), ("t", 5)]));
    }

    #[test]
    fn range_more_members_than_partitions_leaves_some_empty() {
        let members = [
            member("a", &["t"]),
            member("b", &["t"]),
            member("c", &["t"]),
        ];
        let c = counts(&[("t", 2)]);
        let r = Assignor::Range.assign(&c, &members);
        assert_eq!(r["a"], set(&[("t", 0)]));
        assert_eq!(r["b"], set(&[("t", 1)]));
        assert!(r["c"].is_empty());
        assert_complete_and_disjoint(&c, &members, &r);
    }

    #[test]
    fn round_robin_deals_across_topics() {
        let members = [member("m1", &["x", "y"]), member("m2", &["x", "y"])];
        let c = counts(&[("x", 3), ("y", 3)]);
        let r = Assignor::RoundRobin.assign(&c, &members);
        assert_eq!(r["m1"], set(&[("x", 0), ("x", 2), ("y", 1)]));
        assert_eq!(r["m2"], set(&[("x", 1), ("y", 0), ("y", 2)]));
        assert_complete_and_disjoint(&c, &members, &r);
    }

    #[test]
    fn round_robin_skips_members_not_subscribed() {
        let members = [
            member("a", &["t0"]),
            member("b", &["t0", "t1"]),
            member("c", &["t0", "t1", "t2"]),
        ];
        let c = counts(&[("t0", 1), ("t1", 2), ("t2", 3)]);
        let r = Assignor::RoundRobin.assign(&c, &members);
        assert_eq!(r["a"], set(&[("t0", 0)]));
        assert_eq!(r["b"], set(&[("t1", 0)]));
        assert_eq!(r["c"], set(&[("t1", 1), ("t2", 0), ("t2", 1), ("t2", 2)]));
        assert_complete_and_disjoint(&c, &members, &r);
    }

    #[test]
    fn unknown_and_empty_topics_are_skipped() {
        let members = [member("a", &["missing", "t"])];
        let c = counts(&[("t", 2), ("other", 4)]);
        for a in [Assignor::Range, Assignor::RoundRobin] {
            let r = a.assign(&c, &members);
            assert_eq!(r["a"], set(&[("t", 0), ("t", 1)]), "{a:?}");
        }
    }

    #[test]
    fn static_members_sort_first_by_instance_id() {
        let mut s1 = member("zzz", &["t"]);
        s1.group_instance_id = Some("i-1".into());
        let mut s2 = member("aaa", &["t"]);
        s2.group_instance_id = Some("i-2".into());
        let dynamic = member("0", &["t"]);
        let members = [dynamic, s2, s1];
        let c = counts(&[("t", 3)]);
        let r = Assignor::Range.assign(&c, &members);
        assert_eq!(r["zzz"], set(&[("t", 0)]));
        assert_eq!(r["aaa"], set(&[("t", 1)]));
        assert_eq!(r["0"], set(&[("t", 2)]));
    }

    #[test]
    fn result_does_not_depend_on_input_order() {
        let a = member("a", &["x", "y"]);
        let b = member("b", &["y"]);
        let c = member("c", &["x", "y", "z"]);
        let counts = counts(&[("x", 5), ("y", 4), ("z", 3)]);
        for assignor in [Assignor::Range, Assignor::RoundRobin] {
            let one = assignor.assign(&counts, &[a.clone(), b.clone(), c.clone()]);
            let two = assignor.assign(&counts, &[c.clone(), a.clone(), b.clone()]);
            assert_eq!(one, two, "{assignor:?}");
            assert_complete_and_disjoint(&counts, &[a.clone(), b.clone(), c.clone()], &one);
        }
    }

    #[test]
    fn balanced_for_many_members_and_partitions() {
        for n_members in 1..=7 {
            for n_parts in 0..=20 {
                let members: Vec<_> = (0..n_members)
                    .map(|i| member(&format!("m{i:02}"), &["t"]))
                    .collect();
                let c = counts(&[("t", n_parts)]);
                for a in [Assignor::Range, Assignor::RoundRobin] {
                    let r = a.assign(&c, &members);
                    assert_complete_and_disjoint(&c, &members, &r);
                    let sizes: Vec<usize> = r.values().map(PartitionSet::len).collect();
                    let (min, max) = (sizes.iter().min(), sizes.iter().max());
                    assert!(
                        max.zip(min).is_some_and(|(x, y)| x - y <= 1),
                        "{a:?} {sizes:?}"
                    );
                }
            }
        }
    }

    /// Scale-out with many small topics (issue: range put partition 0 of every topic on the
    /// first member): round-robin spreads 100 one-partition topics over 3 members as 34/33/33.
    #[test]
    fn many_single_partition_topics_round_robin_balances_range_does_not() {
        let names: Vec<String> = (0..100).map(|i| format!("topic-{i:03}")).collect();
        let topics: Vec<&str> = names.iter().map(String::as_str).collect();
        let members = [
            member("m1", &topics),
            member("m2", &topics),
            member("m3", &topics),
        ];
        let c: BTreeMap<String, i32> = names.iter().map(|t| (t.clone(), 1)).collect();
        let rr = Assignor::RoundRobin.assign(&c, &members);
        assert_complete_and_disjoint(&c, &members, &rr);
        let sizes: Vec<usize> = ["m1", "m2", "m3"].iter().map(|m| rr[*m].len()).collect();
        assert_eq!(sizes, [34, 33, 33]);
        let range = Assignor::Range.assign(&c, &members);
        let sizes: Vec<usize> = ["m1", "m2", "m3"].iter().map(|m| range[*m].len()).collect();
        assert_eq!(sizes, [100, 0, 0], "range is per topic");
    }

    #[test]
    fn names_round_trip() {
        for a in [
            Assignor::Range,
            Assignor::RoundRobin,
            Assignor::CooperativeSticky,
        ] {
            assert_eq!(Assignor::from_name(a.name()), Some(a));
        }
        assert_eq!(Assignor::from_name("sticky"), None);
    }

    #[test]
    fn partition_set_difference() {
        let a = set(&[("t", 0), ("t", 1), ("u", 0)]);
        let b = set(&[("t", 1)]);
        assert_eq!(a.difference(&b), set(&[("t", 0), ("u", 0)]));
        assert_eq!(a.len(), 3);
        assert!(PartitionSet::new().is_empty());
    }
}
