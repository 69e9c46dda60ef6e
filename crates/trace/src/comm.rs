//! Communicators resolved across ranks.
//!
//! Records name communicators by a *rank-local index*; a `DefComm` record
//! ties that index to a `global_id` that every member shares. Member lists
//! are written once per group, by the group's rank 0, so a communicator's
//! membership is assembled from whichever rank wrote it:
//!
//! ```text
//!  global id 0          MPI_COMM_WORLD: members 0..world_size (never written)
//!  (r << 32) | 1        MPI_COMM_SELF of world rank r: members [r]
//!  other, intra         members = the one non-empty list written for that id
//!  other, inter         two groups, each written by its own rank 0; for a
//!                       rank r the remote group is the list without r
//! ```

use std::collections::BTreeMap;
use std::sync::OnceLock;

use pmtrace_format::record::CommDef;

/// Global id of `MPI_COMM_WORLD`.
pub const WORLD_ID: u64 = 0;

/// Global id of `MPI_COMM_SELF` on world rank `rank`.
pub fn self_comm_id(rank: u32) -> u64 {
    (u64::from(rank) << 32) | 1
}

/// A communicator as the whole trace knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Comm {
    pub global_id: u64,
    pub inter: bool,
    /// World ranks of the (first known) group, in communicator rank order.
    /// Empty while no member wrote the list (e.g. its rank 0 died first).
    pub members: Vec<u32>,
    /// For an intercommunicator: the other group. Empty for an intracommunicator.
    pub remote_members: Vec<u32>,
    /// Where each world rank is in `members` and in `remote_members`.
    index: [Index; 2],
}

/// A group no larger than this is scanned for a world rank, not indexed.
const SCAN: usize = 32;

/// The positions of the world ranks of a group: (world rank, its first
/// position), sorted, built at the first lookup in a group larger than
/// [`SCAN`]. Lookups are then logarithmic: on a world of 16,384 ranks a
/// scan per message or per collective call made exports quadratic.
#[derive(Debug, Clone, Default)]
struct Index(OnceLock<Box<[(u32, u32)]>>);

// What a group holds is its list; whether the index is built yet is not.
impl PartialEq for Index {
    fn eq(&self, _: &Index) -> bool {
        true
    }
}
impl Eq for Index {}

impl Index {
    /// The first position of `world` in `group` (the group this index is of).
    fn find(&self, group: &[u32], world: u32) -> Option<u32> {
        if group.len() <= SCAN {
            return group.iter().position(|&w| w == world).map(|p| p as u32);
        }
        let sorted = self.0.get_or_init(|| {
            let mut v: Vec<(u32, u32)> = (group.iter().enumerate())
                .map(|(p, &w)| (w, p as u32))
                .collect();
            v.sort_unstable();
            // The first of each world rank's run has its smallest position.
            v.dedup_by_key(|e| e.0);
            v.into_boxed_slice()
        });
        let i = sorted.binary_search_by_key(&world, |e| e.0).ok()?;
        Some(sorted[i].1)
    }
}

impl Comm {
    fn new(global_id: u64, inter: bool, members: Vec<u32>) -> Comm {
        Comm {
            global_id,
            inter,
            members,
            remote_members: vec![],
            index: Default::default(),
        }
    }

    /// The rank of world rank `world` in the group (`members`).
    pub fn rank_of(&self, world: u32) -> Option<u32> {
        self.index[0].find(&self.members, world)
    }

    /// The rank of world rank `world` in the remote group.
    pub fn remote_rank_of(&self, world: u32) -> Option<u32> {
        self.index[1].find(&self.remote_members, world)
    }

    /// The group whose ranks world rank `writer` names (false: `members`,
    /// true: `remote_members`): the group for an intracommunicator, the
    /// group that does not contain `writer` for an intercommunicator.
    fn peers_of(&self, writer: u32) -> Option<bool> {
        if !self.inter || (!self.members.is_empty() && self.rank_of(writer).is_none()) {
            Some(false)
        } else if !self.remote_members.is_empty() && self.remote_rank_of(writer).is_none() {
            Some(true)
        } else {
            None
        }
    }

    /// The world rank of `comm_rank` as seen by world rank `writer`: a rank
    /// of the group for an intracommunicator, of the remote group (the group
    /// that does not contain `writer`) for an intercommunicator.
    pub fn to_world(&self, writer: u32, comm_rank: u32) -> Option<u32> {
        let group = match self.peers_of(writer)? {
            false => &self.members,
            true => &self.remote_members,
        };
        group.get(usize::try_from(comm_rank).ok()?).copied()
    }

    /// The rank by which world rank `writer` names world rank `world`: the
    /// inverse of [`Comm::to_world`].
    pub fn rank_seen_by(&self, writer: u32, world: u32) -> Option<u32> {
        match self.peers_of(writer)? {
            false => self.rank_of(world),
            true => self.remote_rank_of(world),
        }
    }
}

/// Every communicator of a trace, by global id.
#[derive(Debug, Clone, Default)]
pub struct Comms {
    by_id: BTreeMap<u64, Comm>,
}

impl Comms {
    /// Assembles communicators from each rank's definitions. `defs` yields
    /// (world rank of the writer, definition). Conflicting member lists keep
    /// the first one seen and add a line to `warnings`.
    pub fn resolve<'a>(
        world_size: u32,
        defs: impl IntoIterator<Item = (u32, &'a CommDef)>,
        warnings: &mut Vec<String>,
    ) -> Comms {
        let mut by_id = BTreeMap::new();
        by_id.insert(
            WORLD_ID,
            Comm::new(WORLD_ID, false, (0..world_size).collect()),
        );
        for (writer, def) in defs {
            if def.global_id == WORLD_ID {
                continue;
            }
            if def.global_id == self_comm_id(writer) {
                by_id
                    .entry(def.global_id)
                    .or_insert_with(|| Comm::new(def.global_id, false, vec![writer]));
                continue;
            }
            let comm = by_id
                .entry(def.global_id)
                .or_insert_with(|| Comm::new(def.global_id, def.inter, vec![]));
            if def.members.is_empty() {
                continue;
            }
            if def.members.len() != def.size as usize {
                warnings.push(format!(
                    "communicator {:#x}: rank {writer} wrote {} members for a group of size {}",
                    def.global_id,
                    def.members.len(),
                    def.size
                ));
            }
            let slot = if comm.members.is_empty() || comm.members == def.members {
                &mut comm.members
            } else if comm.inter
                && (comm.remote_members.is_empty() || comm.remote_members == def.members)
            {
                &mut comm.remote_members
            } else {
                warnings.push(format!(
                    "communicator {:#x}: rank {writer} wrote a member list that conflicts with an earlier one; keeping the earlier one",
                    def.global_id
                ));
                continue;
            };
            if slot.is_empty() {
                *slot = def.members.clone();
            }
        }
        Comms { by_id }
    }

    pub fn get(&self, global_id: u64) -> Option<&Comm> {
        self.by_id.get(&global_id)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Comm> {
        self.by_id.values()
    }

    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(index: u32, global_id: u64, inter: bool, rank: u32, members: &[u32]) -> CommDef {
        CommDef {
            index,
            global_id,
            inter,
            size: members.len().max(1) as u32,
            rank,
            remote_size: 0,
            members: members.to_vec(),
        }
    }

    #[test]
    fn ranks_are_found_by_scan_and_by_index_alike() {
        // Below and above the scan limit, with a world rank twice in the
        // group (its first position counts) and one absent.
        for n in [5u32, SCAN as u32 + 9, 1000] {
            let mut members: Vec<u32> = (0..n).map(|i| (i * 7 + 3) % (2 * n)).collect();
            members.push(members[1]);
            let c = Comm::new(9, false, members.clone());
            for w in 0..2 * n + 1 {
                let scan = members.iter().position(|&x| x == w).map(|p| p as u32);
                assert_eq!(c.rank_of(w), scan, "n {n}, world rank {w}");
                assert_eq!(c.rank_seen_by(0, w), scan, "n {n}, world rank {w}");
            }
            assert_eq!(c.remote_rank_of(members[0]), None);
        }
    }

    #[test]
    fn intercommunicator_ranks_are_seen_in_the_other_group() {
        let mut c = Comm::new(90, true, (0..40).map(|i| 2 * i).collect());
        c.remote_members = (0..50).map(|i| 2 * i + 1).collect();
        // Writer 4 (member rank 2) names the remote group: world 7 is its rank 3.
        assert_eq!(c.rank_seen_by(4, 7), Some(3));
        assert_eq!(c.to_world(4, 3), Some(7));
        assert_eq!(c.rank_seen_by(4, 6), None, "its own group is not named");
        // Writer 7 (remote rank 3) names the first group.
        assert_eq!(c.rank_seen_by(7, 78), Some(39));
        assert_eq!(c.to_world(7, 39), Some(78));
        // A writer in neither group names the first one, as before.
        assert_eq!(c.rank_seen_by(1000, 2), Some(1));
    }

    #[test]
    fn world_and_self_need_no_member_lists() {
        let w = def(0, WORLD_ID, false, 2, &[]);
        let s = def(1, self_comm_id(2), false, 0, &[]);
        let comms = Comms::resolve(4, [(2, &w), (2, &s)], &mut vec![]);
        assert_eq!(comms.get(WORLD_ID).unwrap().members, vec![0, 1, 2, 3]);
        assert_eq!(comms.get(self_comm_id(2)).unwrap().members, vec![2]);
        assert_eq!(comms.get(self_comm_id(2)).unwrap().to_world(2, 0), Some(2));
    }

    #[test]
    fn split_members_come_from_the_groups_rank_zero() {
        // World ranks 3 and 1 form a split communicator; rank 3 is its rank 0.
        let by_rank0 = def(2, 77, false, 0, &[3, 1]);
        let by_rank1 = def(2, 77, false, 1, &[]);
        let comms = Comms::resolve(4, [(1, &by_rank1), (3, &by_rank0)], &mut vec![]);
        let c = comms.get(77).unwrap();
        assert_eq!(c.members, vec![3, 1]);
        assert_eq!(c.to_world(1, 0), Some(3));
        assert_eq!(c.to_world(1, 2), None);
    }

    #[test]
    fn intercommunicator_peers_are_in_the_remote_group() {
        // Groups {0, 2} and {1, 3}; each group's rank 0 wrote its own list.
        let a = def(3, 90, true, 0, &[0, 2]);
        let b = def(3, 90, true, 0, &[1, 3]);
        let comms = Comms::resolve(4, [(0, &a), (1, &b)], &mut vec![]);
        let c = comms.get(90).unwrap();
        assert_eq!(
            c.to_world(0, 1),
            Some(3),
            "rank 0's remote rank 1 is world rank 3"
        );
        assert_eq!(
            c.to_world(3, 0),
            Some(0),
            "rank 3's remote rank 0 is world rank 0"
        );
        assert_eq!(c.to_world(2, 0), Some(1));
    }

    #[test]
    fn conflicting_member_lists_keep_the_first_and_warn() {
        let a = def(2, 5, false, 0, &[0, 1]);
        let b = def(2, 5, false, 0, &[1, 0]);
        let mut warnings = vec![];
        let comms = Comms::resolve(2, [(0, &a), (1, &b)], &mut warnings);
        assert_eq!(comms.get(5).unwrap().members, vec![0, 1]);
        assert_eq!(warnings.len(), 1);
    }
}
