//! What a collective function is, for the analyses: its [`Shape`] (how
//! its members' enters and exits depend on each other) and its [`Flow`]
//! (what orders them at all).
//!
//! The runtime writes both into the header's function table
//! ([`crate::meta::FunctionDef`]), from the shape each collective has in
//! `wrappers/mpi.wrap` ([`Coll::of_wrap`]). Traces written before that
//! carry neither; [`Coll::of_name`] works them out from the function's
//! name, as every reader did before.

use serde::{Deserialize, Serialize};

/// How a collective's enters and exits depend on each other (Becker et
/// al. §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Shape {
    /// The root sends to every member (bcast, scatter).
    OneToN,
    /// Every member sends to the root (reduce, gather).
    NToOne,
    /// Every member sends to every member.
    NToN,
    /// Member k receives from members 0..=k.
    Scan,
    /// Member k receives from members 0..k.
    Exscan,
}

/// What orders the members of a collective.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Flow {
    /// The data each member sends: a member that sends nothing orders
    /// nobody, one that receives nothing waits for nobody.
    Data,
    /// A barrier: every exit after every enter.
    Barrier,
    /// Nothing pmtrace can tell (neighbourhood collectives, whose
    /// neighbours the trace does not name; `MPI_Comm_idup`).
    Unordered,
}

/// A collective function's shape and flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Coll {
    pub shape: Shape,
    pub flow: Flow,
}

impl Shape {
    pub const ALL: [Shape; 5] = [
        Shape::OneToN,
        Shape::NToOne,
        Shape::NToN,
        Shape::Scan,
        Shape::Exscan,
    ];

    /// One byte on the wire (`pmtrace-mpi`'s exchanges).
    pub fn code(self) -> u8 {
        self as u8
    }

    pub fn from_code(c: u8) -> Option<Shape> {
        Shape::ALL.get(usize::from(c)).copied()
    }

    /// Whether the shape has a root.
    pub fn rooted(self) -> bool {
        matches!(self, Shape::OneToN | Shape::NToOne)
    }
}

impl Flow {
    pub const ALL: [Flow; 3] = [Flow::Data, Flow::Barrier, Flow::Unordered];

    /// One byte on the wire.
    pub fn code(self) -> u8 {
        self as u8
    }

    pub fn from_code(c: u8) -> Option<Flow> {
        Flow::ALL.get(usize::from(c)).copied()
    }
}

impl Coll {
    /// A collective of the shape `wrap` of `wrappers/mpi.wrap` (the word
    /// after `coll:`, `icoll:` or `pcoll:`; `comm_idup` for the kind of
    /// that name), or `None` for a shape the description does not use.
    pub fn of_wrap(wrap: &str) -> Option<Coll> {
        use Flow::*;
        use Shape::*;
        let (shape, flow) = match wrap {
            "barrier" => (NToN, Barrier),
            "bcast" | "scatter" | "scatterv" => (OneToN, Data),
            "reduce" | "gather" | "gatherv" => (NToOne, Data),
            "allreduce"
            | "reduce_scatter"
            | "reduce_scatter_block"
            | "allgather"
            | "allgatherv"
            | "alltoall"
            | "alltoallv"
            | "alltoallw" => (NToN, Data),
            "scan" => (Scan, Data),
            "exscan" => (Exscan, Data),
            "neighbor_allgather"
            | "neighbor_allgatherv"
            | "neighbor_alltoall"
            | "neighbor_alltoallv"
            | "neighbor_alltoallw"
            | "comm_idup" => (NToN, Unordered),
            _ => return None,
        };
        Some(Coll { shape, flow })
    }

    /// The shape and flow of the collective function `name`, worked out
    /// from the name alone: what a trace whose header does not give them
    /// gets. Any name gets an answer (all to all, ordered by its data,
    /// for a name it does not know).
    pub fn of_name(name: &str) -> Coll {
        let n = name.trim_start_matches("MPI_").to_ascii_lowercase();
        // Large-count forms and persistent collectives are their base's.
        let n = n.strip_suffix("_c").unwrap_or(&n);
        let n = n.strip_suffix("_init").unwrap_or(n);
        const BASES: [&str; 11] = [
            "bcast",
            "scatter",
            "reduce",
            "gather",
            "allreduce",
            "allgather",
            "alltoall",
            "scan",
            "exscan",
            "barrier",
            "neighbor",
        ];
        let n = n
            .strip_prefix('i')
            .filter(|rest| BASES.iter().any(|k| rest.starts_with(k)))
            .unwrap_or(n);
        let shape = if n.starts_with("bcast") || n.starts_with("scatter") {
            Shape::OneToN
        } else if n == "reduce" || n.starts_with("gather") {
            Shape::NToOne
        } else if n == "scan" {
            Shape::Scan
        } else if n == "exscan" {
            Shape::Exscan
        } else {
            Shape::NToN
        };
        let flow = if n.contains("barrier") {
            Flow::Barrier
        } else if n.contains("neighbor") || n.contains("comm_idup") {
            Flow::Unordered
        } else {
            Flow::Data
        };
        Coll { shape, flow }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_give_the_shapes_of_their_base_function() {
        let c = |n| {
            let c = Coll::of_name(n);
            (c.shape, c.flow)
        };
        assert_eq!(c("MPI_Bcast"), (Shape::OneToN, Flow::Data));
        assert_eq!(c("MPI_Iscatterv"), (Shape::OneToN, Flow::Data));
        assert_eq!(c("MPI_Reduce_c"), (Shape::NToOne, Flow::Data));
        assert_eq!(c("MPI_Igather_init"), (Shape::NToOne, Flow::Data));
        assert_eq!(c("MPI_Reduce_scatter"), (Shape::NToN, Flow::Data));
        assert_eq!(c("MPI_Iexscan"), (Shape::Exscan, Flow::Data));
        assert_eq!(c("MPI_Scan_init"), (Shape::Scan, Flow::Data));
        assert_eq!(c("MPI_Ibarrier"), (Shape::NToN, Flow::Barrier));
        assert_eq!(c("MPI_Ineighbor_alltoallw"), (Shape::NToN, Flow::Unordered));
        assert_eq!(c("MPI_Comm_idup"), (Shape::NToN, Flow::Unordered));
        // Not a prefix: MPI_Init is no collective, but any name gets one.
        assert_eq!(c("MPI_Init"), (Shape::NToN, Flow::Data));
    }

    #[test]
    fn wrap_shapes_name_their_collectives() {
        let w = |n| Coll::of_wrap(n).map(|c| (c.shape, c.flow));
        assert_eq!(w("scatterv"), Some((Shape::OneToN, Flow::Data)));
        assert_eq!(w("exscan"), Some((Shape::Exscan, Flow::Data)));
        assert_eq!(
            w("neighbor_allgather"),
            Some((Shape::NToN, Flow::Unordered))
        );
        assert_eq!(w("barrier"), Some((Shape::NToN, Flow::Barrier)));
        assert_eq!(w("reduce_scatter_block"), Some((Shape::NToN, Flow::Data)));
        assert_eq!(w("allreduc"), None);
    }

    #[test]
    fn codes_round_trip_and_unknown_codes_are_none() {
        for s in Shape::ALL {
            assert_eq!(Shape::from_code(s.code()), Some(s));
        }
        for f in Flow::ALL {
            assert_eq!(Flow::from_code(f.code()), Some(f));
        }
        assert_eq!(Shape::from_code(5), None);
        assert_eq!(Flow::from_code(3), None);
    }

    #[test]
    fn header_form_is_snake_case() {
        assert_eq!(
            serde_json::to_string(&Shape::OneToN).unwrap(),
            "\"one_to_n\""
        );
        assert_eq!(
            serde_json::to_string(&Flow::Unordered).unwrap(),
            "\"unordered\""
        );
    }
}
