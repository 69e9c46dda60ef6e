//! How the processes of a parallel run talk: a few collective operations
//! over byte buffers, in lockstep (every process calls each operation, in
//! the same order).
//!
//! `pmtrace-mpi` implements [`Fabric`] on MPI. [`Threads`] runs P
//! processes as threads of one process, for tests, and [`Alone`] is the
//! one-process fabric. Everything above talks to the trait only, so the
//! parallel algorithms never link MPI.

use std::sync::{Barrier, Mutex};

/// The collective operations the parallel verbs use. Not `Sync`: MPI is
/// called from the thread that initialized it only.
pub trait Fabric {
    /// Processes in the run.
    fn size(&self) -> usize;
    /// This process's index, `0..size()`.
    fn index(&self) -> usize;
    /// All-to-all: `out[p]` goes to process `p`; returns what each process
    /// sent here, by process.
    fn exchange(&self, out: Vec<Vec<u8>>) -> Vec<Vec<u8>>;
    /// Every process's buffer, by process, on every process.
    fn all_gather(&self, mine: Vec<u8>) -> Vec<Vec<u8>> {
        self.exchange(vec![mine; self.size()])
    }
    /// Every process's buffer, by process, on process 0 (empty elsewhere).
    fn gather(&self, mine: Vec<u8>) -> Vec<Vec<u8>> {
        let mut out = vec![Vec::new(); self.size()];
        out[0] = mine;
        let got = self.exchange(out);
        if self.index() == 0 {
            got
        } else {
            Vec::new()
        }
    }
    /// Element-wise sums over every process, on every process.
    fn sum(&self, v: &mut [u64]) {
        reduce(self, v, |a, b| a.wrapping_add(b))
    }
    /// Element-wise maxima over every process, on every process.
    fn max(&self, v: &mut [u64]) {
        reduce(self, v, u64::max)
    }
}

/// `v` combined element-wise with every other process's by `op`, through
/// [`Fabric::all_gather`].
fn reduce<F: Fabric + ?Sized>(f: &F, v: &mut [u64], op: fn(u64, u64) -> u64) {
    let mine = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    let all = f.all_gather(mine);
    v.fill(0);
    for (p, bytes) in all.iter().enumerate() {
        for (i, chunk) in bytes.chunks_exact(8).enumerate() {
            let x = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
            v[i] = if p == 0 { x } else { op(v[i], x) };
        }
    }
}

/// Sums of one value over every process.
pub fn sum_of<F: Fabric + ?Sized>(f: &F, x: u64) -> u64 {
    let mut v = [x];
    f.sum(&mut v);
    v[0]
}

/// The same outcome on every process: `Ok` where every process's was,
/// else the error of the lowest process that failed.
pub fn agree<F: Fabric + ?Sized, T>(f: &F, r: Result<T, String>) -> Result<T, String> {
    let mine = match &r {
        Ok(_) => Vec::new(),
        Err(e) => {
            let mut b = vec![1];
            b.extend_from_slice(e.as_bytes());
            b
        }
    };
    let all = f.all_gather(mine);
    match all.iter().find(|b| !b.is_empty()) {
        None => r,
        Some(b) => Err(String::from_utf8_lossy(&b[1..]).into_owned()),
    }
}

/// One process alone.
#[derive(Debug, Default, Clone, Copy)]
pub struct Alone;

impl Fabric for Alone {
    fn size(&self) -> usize {
        1
    }
    fn index(&self) -> usize {
        0
    }
    fn exchange(&self, out: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
        out
    }
}

/// P processes as threads of this one: [`Threads::run`].
pub struct Threads {
    size: usize,
    /// `board[from][to]`: what `from` put for `to` in the current exchange.
    board: Mutex<Vec<Vec<Option<Vec<u8>>>>>,
    barrier: Barrier,
}

/// One thread's end of [`Threads`].
pub struct ThreadEnd<'a> {
    shared: &'a Threads,
    index: usize,
}

impl Threads {
    /// Runs `work` on `size` threads, each with its own end of one fabric;
    /// their results by index.
    pub fn run<R: Send>(size: usize, work: impl Fn(&ThreadEnd) -> R + Sync) -> Vec<R> {
        let shared = Threads {
            size,
            board: Mutex::new(vec![vec![None; size]; size]),
            barrier: Barrier::new(size),
        };
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..size)
                .map(|index| {
                    let (shared, work) = (&shared, &work);
                    s.spawn(move || work(&ThreadEnd { shared, index }))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("a fabric thread panicked"))
                .collect()
        })
    }
}

impl Fabric for ThreadEnd<'_> {
    fn size(&self) -> usize {
        self.shared.size
    }
    fn index(&self) -> usize {
        self.index
    }
    fn exchange(&self, out: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
        assert_eq!(out.len(), self.shared.size, "one buffer per process");
        {
            let mut board = self.shared.board.lock().expect("board");
            for (to, bytes) in out.into_iter().enumerate() {
                board[self.index][to] = Some(bytes);
            }
        }
        self.shared.barrier.wait();
        let got = {
            let mut board = self.shared.board.lock().expect("board");
            (0..self.shared.size)
                .map(|from| board[from][self.index].take().expect("posted"))
                .collect()
        };
        // Nobody posts the next exchange before everyone took this one.
        self.shared.barrier.wait();
        got
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_exchange_gather_and_reduce_like_processes() {
        let out = Threads::run(3, |f| {
            let me = f.index() as u8;
            let got = f.exchange((0..3).map(|to| vec![me, to as u8]).collect());
            let gathered = f.all_gather(vec![me * 10]);
            let mut v = [u64::from(me) + 1, 7 - u64::from(me)];
            f.sum(&mut v);
            let mut m = [u64::from(me)];
            f.max(&mut m);
            (got, gathered, v, m[0])
        });
        for (i, (got, gathered, v, m)) in out.into_iter().enumerate() {
            assert_eq!(
                got,
                vec![vec![0, i as u8], vec![1, i as u8], vec![2, i as u8]]
            );
            assert_eq!(gathered, vec![vec![0], vec![10], vec![20]]);
            assert_eq!(v, [6, 18]);
            assert_eq!(m, 2);
        }
    }

    #[test]
    fn agree_gives_every_process_the_lowest_failure() {
        let out = Threads::run(3, |f| {
            let r: Result<u32, String> = match f.index() {
                0 => Ok(1),
                i => Err(format!("failed on {i}")),
            };
            agree(f, r)
        });
        assert!(out.iter().all(|r| r == &Err("failed on 1".to_string())));
        assert_eq!(
            Threads::run(2, |f| agree(f, Ok::<_, String>(f.index()))),
            vec![Ok(0), Ok(1)]
        );
    }
}
