//! Tables keyed by operation id, without hashing: the runtime numbers
//! each thread's operations from 1 (`thread << OP_THREAD_SHIFT | n`), so a
//! table per thread indexed by `n` holds them. An id past any count a rank
//! could have made (a damaged trace) goes to a map instead, so that a bad
//! id never allocates a huge table.

use pmtrace_format::record::OP_THREAD_SHIFT;
use rustc_hash::FxHashMap;

/// A value per operation id.
#[derive(Debug, Clone)]
pub struct OpTable<T> {
    /// By the making thread's index, then the operation's number.
    by_thread: Vec<Vec<Option<T>>>,
    /// Ids outside the tables' range.
    other: FxHashMap<u64, T>,
    /// Thread indices and numbers at or past this go to `other`.
    bound: usize,
}

impl<T> Default for OpTable<T> {
    fn default() -> Self {
        OpTable::new(0)
    }
}

fn split(op: u64) -> (usize, usize) {
    (
        (op >> OP_THREAD_SHIFT) as usize,
        (op & ((1u64 << OP_THREAD_SHIFT) - 1)) as usize,
    )
}

impl<T> OpTable<T> {
    /// A table for the ids of a rank of `calls` calls (no thread made more
    /// operations than that).
    pub fn new(calls: usize) -> OpTable<T> {
        OpTable {
            by_thread: Vec::new(),
            other: FxHashMap::default(),
            bound: calls.saturating_add(16),
        }
    }

    pub fn get(&self, op: &u64) -> Option<&T> {
        let (t, n) = split(*op);
        match self.by_thread.get(t).and_then(|table| table.get(n)) {
            Some(v) => v.as_ref(),
            None => self.other.get(op),
        }
    }

    pub fn get_mut(&mut self, op: &u64) -> Option<&mut T> {
        let (t, n) = split(*op);
        match self.by_thread.get_mut(t).and_then(|table| table.get_mut(n)) {
            Some(v) => v.as_mut(),
            None => self.other.get_mut(op),
        }
    }

    pub fn contains_key(&self, op: &u64) -> bool {
        self.get(op).is_some()
    }

    /// Sets the value of `op`, replacing any.
    pub fn insert(&mut self, op: u64, value: T) {
        let (t, n) = split(op);
        if t >= self.bound || n >= self.bound {
            self.other.insert(op, value);
            return;
        }
        if self.by_thread.len() <= t {
            self.by_thread.resize_with(t + 1, Vec::new);
        }
        let table = &mut self.by_thread[t];
        if table.len() <= n {
            table.resize_with(n + 1, || None);
        }
        table[n] = Some(value);
    }

    /// Every id with its value, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &T)> {
        let tables = self.by_thread.iter().enumerate().flat_map(|(t, table)| {
            table.iter().enumerate().filter_map(move |(n, v)| {
                v.as_ref()
                    .map(|v| ((t as u64) << OP_THREAD_SHIFT | n as u64, v))
            })
        });
        tables.chain(self.other.iter().map(|(&op, v)| (op, v)))
    }

    /// Every value, in no particular order.
    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.by_thread
            .iter()
            .flatten()
            .flatten()
            .chain(self.other.values())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmtrace_format::record::op_id;

    #[test]
    fn ids_are_found_by_thread_and_number_and_outliers_by_map() {
        let mut t: OpTable<u32> = OpTable::new(100);
        t.insert(op_id(1, 1), 7);
        t.insert(op_id(1, 3), 9);
        t.insert(op_id(5, 1 << 30), 11);
        t.insert(op_id(1 << 20, 2), 13);
        assert_eq!(t.get(&op_id(1, 1)), Some(&7));
        assert_eq!(t.get(&op_id(1, 2)), None);
        assert_eq!(t.get(&op_id(1, 3)), Some(&9));
        assert_eq!(t.get(&op_id(1, 4)), None, "past the table");
        assert_eq!(t.get(&op_id(0, 1)), None, "a thread without ids");
        assert_eq!(t.get(&op_id(5, 1 << 30)), Some(&11));
        assert_eq!(t.get(&op_id(1 << 20, 2)), Some(&13));
        assert!(t.by_thread.len() <= 2, "outliers make no tables");
        *t.get_mut(&op_id(1, 3)).unwrap() += 1;
        *t.get_mut(&op_id(5, 1 << 30)).unwrap() += 1;
        assert_eq!(t.get(&op_id(1, 3)), Some(&10));
        let mut v: Vec<u32> = t.values().copied().collect();
        v.sort();
        assert_eq!(v, vec![7, 10, 12, 13]);
        let mut ids: Vec<(u64, u32)> = t.iter().map(|(op, &v)| (op, v)).collect();
        ids.sort();
        let mut want = vec![
            (op_id(1, 1), 7),
            (op_id(1, 3), 10),
            (op_id(5, 1 << 30), 12),
            (op_id(1 << 20, 2), 13),
        ];
        want.sort();
        assert_eq!(ids, want);
    }
}
