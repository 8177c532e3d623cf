//! The "cooperative-sticky" assignor (KIP-429), as the group leader runs it on the classic
//! protocol: balanced like round-robin, but every member keeps what it owns up to its fair share,
//! and a partition that moves from one member to another is withheld for one round: its old owner
//! revokes it (it is not in its new assignment) and rejoins, and the second round hands it to
//! the new owner. So no partition is ever owned by two members, and only moved partitions pause.

use std::collections::{BTreeMap, BTreeSet};

use super::assignor::{MemberSubscription, PartitionSet};

/// Assigns every partition of `partitions` (sorted) to `members` (in the Java order).
pub(super) fn assign(
    partitions: &[(&str, i32)],
    members: &[&MemberSubscription],
    out: &mut BTreeMap<String, PartitionSet>,
) {
    if members.is_empty() {
        return;
    }
    let exists: BTreeSet<(&str, i32)> = partitions.iter().copied().collect();
    let floor = partitions.len() / members.len();
    let mut above_floor = partitions.len() % members.len();
    let mut taken: BTreeSet<(&str, i32)> = BTreeSet::new();
    let mut load: Vec<usize> = vec![0; members.len()];
    // 1. Stickiness: each member keeps what it owns (still existing, still subscribed, not
    //    claimed by an earlier member) up to its share.
    for (i, m) in members.iter().enumerate() {
        let valid: Vec<(&str, i32)> = m
            .owned
            .iter()
            .filter(|tp| exists.contains(tp) && m.topics.contains(tp.0) && !taken.contains(tp))
            .collect();
        let mut keep = valid.len().min(floor);
        if valid.len() > floor && above_floor > 0 {
            keep = floor + 1;
            above_floor -= 1;
        }
        for (t, p) in valid.into_iter().take(keep) {
            let Some(&(t, p)) = exists.get(&(t, p)) else {
                continue;
            };
            taken.insert((t, p));
            load[i] += 1;
            if let Some(set) = out.get_mut(&m.member_id) {
                set.insert(t, p);
            }
        }
    }
    // 2. The rest to the least loaded subscribed member (ties: member order).
    for &(t, p) in partitions {
        if taken.contains(&(t, p)) {
            continue;
        }
        let target = (0..members.len())
            .filter(|&i| members[i].topics.contains(t))
            .min_by_key(|&i| (load[i], i));
        let Some(i) = target else { continue };
        load[i] += 1;
        if let Some(set) = out.get_mut(&members[i].member_id) {
            set.insert(t, p);
        }
    }
    // 3. Cooperative: a partition another member still owns is withheld until it revoked it.
    for m in members {
        let owned_elsewhere: Vec<(String, i32)> = out
            .get(&m.member_id)
            .map(|set| {
                set.iter()
                    .filter(|(t, p)| {
                        !m.owned.contains(t, *p)
                            && members
                                .iter()
                                .any(|o| o.member_id != m.member_id && o.owned.contains(t, *p))
                    })
                    .map(|(t, p)| (t.to_owned(), p))
                    .collect()
            })
            .unwrap_or_default();
        if let Some(set) = out.get_mut(&m.member_id) {
            for (t, p) in owned_elsewhere {
                set.remove(&t, p);
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::assignor::Assignor;
    use super::*;

    fn member(id: &str, owned: &[i32]) -> MemberSubscription {
        MemberSubscription {
            member_id: id.to_owned(),
            group_instance_id: None,
            topics: BTreeSet::from(["t".to_owned()]),
            owned: owned.iter().map(|p| ("t", *p)).collect(),
        }
    }

    fn counts(n: i32) -> BTreeMap<String, i32> {
        BTreeMap::from([("t".to_owned(), n)])
    }

    fn parts(set: &PartitionSet) -> Vec<i32> {
        set.iter().map(|(_, p)| p).collect()
    }

    #[test]
    fn a_new_member_gets_nothing_that_is_still_owned_in_the_first_round() {
        let a = member("a", &[0, 1, 2, 3, 4, 5]);
        let b = member("b", &[]);
        let r = Assignor::CooperativeSticky.assign(&counts(6), &[a.clone(), b.clone()]);
        // a keeps its share; the three it gives up are withheld from b for this round.
        assert_eq!(parts(&r["a"]), [0, 1, 2]);
        assert!(r["b"].is_empty());
        // Second round: a rejoined owning only 0..3, b gets the rest.
        let a2 = member("a", &[0, 1, 2]);
        let r = Assignor::CooperativeSticky.assign(&counts(6), &[a2, b]);
        assert_eq!(parts(&r["a"]), [0, 1, 2]);
        assert_eq!(parts(&r["b"]), [3, 4, 5]);
    }

    #[test]
    fn members_keep_what_they_own_when_one_leaves() {
        let a = member("a", &[0, 3]);
        let c = member("c", &[2, 5]);
        // b (owning 1 and 4) left: its partitions go to the others, nobody else moves.
        let r = Assignor::CooperativeSticky.assign(&counts(6), &[a, c]);
        assert_eq!(parts(&r["a"]), [0, 1, 3]);
        assert_eq!(parts(&r["c"]), [2, 4, 5]);
    }

    #[test]
    fn claims_on_the_same_partition_go_to_the_first_member() {
        let a = member("a", &[0]);
        let b = member("b", &[0, 1]);
        let r = Assignor::CooperativeSticky.assign(&counts(2), &[a, b]);
        assert_eq!(parts(&r["a"]), [0]);
        assert_eq!(parts(&r["b"]), [1]);
    }

    #[test]
    fn balanced_after_the_second_round() {
        for n_members in 1..=5usize {
            for n_parts in 0..=13 {
                let mut members: Vec<MemberSubscription> = (0..n_members)
                    .map(|i| member(&format!("m{i}"), &[]))
                    .collect();
                members[0].owned = (0..n_parts).map(|p| ("t", p)).collect();
                let first = Assignor::CooperativeSticky.assign(&counts(n_parts), &members);
                for m in members.iter_mut() {
                    m.owned = first[&m.member_id].clone();
                }
                let second = Assignor::CooperativeSticky.assign(&counts(n_parts), &members);
                let sizes: Vec<usize> = second.values().map(PartitionSet::len).collect();
                assert_eq!(sizes.iter().sum::<usize>(), n_parts as usize);
                let (min, max) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
                assert!(max - min <= 1, "{n_members} members, {n_parts}: {sizes:?}");
                // Nobody lost a partition in the second round it had kept in the first.
                for m in &members {
                    assert!(
                        m.owned.difference(&second[&m.member_id]).is_empty(),
                        "{}",
                        m.member_id
                    );
                }
            }
        }
    }
}
