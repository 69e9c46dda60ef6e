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
}

impl Comm {
    /// The world rank of `comm_rank` as seen by world rank `writer`: a rank
    /// of the group for an intracommunicator, of the remote group (the group
    /// that does not contain `writer`) for an intercommunicator.
    pub fn to_world(&self, writer: u32, comm_rank: u32) -> Option<u32> {
        let group = if self.inter {
            [&self.members, &self.remote_members]
                .into_iter()
                .find(|g| !g.is_empty() && !g.contains(&writer))?
        } else {
            &self.members
        };
        group.get(usize::try_from(comm_rank).ok()?).copied()
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
            Comm {
                global_id: WORLD_ID,
                inter: false,
                members: (0..world_size).collect(),
                remote_members: vec![],
            },
        );
        for (writer, def) in defs {
            if def.global_id == WORLD_ID {
                continue;
            }
            if def.global_id == self_comm_id(writer) {
                by_id.entry(def.global_id).or_insert_with(|| Comm {
                    global_id: def.global_id,
                    inter: false,
                    members: vec![writer],
                    remote_members: vec![],
                });
                continue;
            }
            let comm = by_id.entry(def.global_id).or_insert_with(|| Comm {
                global_id: def.global_id,
                inter: def.inter,
                members: vec![],
                remote_members: vec![],
            });
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
