//! The one loop of every forward replay over blocks (the CLC pass, the
//! clock rules, the weighted sweep): in each round every process goes as
//! far as it can alone, then one all-to-all carries what the others
//! wait for. When no process stepped and nothing moved anywhere, every
//! process is stuck on something lost (a send whose record is gone):
//! then one step goes anyway, chosen the same way on every process, as
//! the serial replay does.

use crate::fabric::Fabric;
use crate::wire::{In, Out, Wire};

/// One process's side of a replay in rounds.
pub trait Round {
    /// Steps as far as it can without news; how many steps it took.
    fn advance(&mut self) -> u64;
    /// What goes to each process this round (taken from the round).
    fn outgoing(&mut self) -> Vec<Out>;
    /// Applies what process `from` sent this round.
    fn take(&mut self, from: usize, bytes: &[u8]);
    /// Work left here (0: done here).
    fn left(&self) -> u64;
    /// Whatever moved this round besides steps (records sent or taken,
    /// answers queued for the next round); counting starts again after.
    fn moved(&mut self) -> u64;
    /// Every process is stuck: each calls this, and together they make
    /// the one step that goes anyway.
    fn force<F: Fabric + ?Sized>(&mut self, f: &F);
}

/// Runs `r` in rounds until no process has work left; how many steps
/// were forced.
pub fn run<F: Fabric + ?Sized>(f: &F, r: &mut impl Round) -> u64 {
    let mut forced = 0;
    loop {
        let stepped = r.advance();
        let out = r.outgoing();
        let got = f.exchange(out.into_iter().map(|o| o.0).collect());
        for (from, bytes) in got.iter().enumerate() {
            r.take(from, bytes);
        }
        let mut v = [r.left(), stepped, r.moved()];
        f.sum(&mut v);
        if v[0] == 0 {
            return forced;
        }
        if v[1] == 0 && v[2] == 0 {
            forced += 1;
            r.force(f);
        }
    }
}

/// The queued bytes of `out`: what a round has ready for the next one.
pub fn pending(out: &[Out]) -> u64 {
    out.iter().map(|o| o.0.len() as u64).sum()
}

/// Where a walk that travels as a token went on one process: it ended
/// after so many hops, or goes on at process `.0` in state `.1`.
pub enum Went<T> {
    Ended(u64),
    On(usize, T),
}

const TOKEN: u8 = 0;
const ENDED: u8 = 1;

/// The walks back of the critical paths, which go from the block of one
/// rank to another's as a token: `token` is this process's start if the
/// walk starts here, `ended` whether there is none anywhere; `go` walks
/// the token as far as this block's ranks take it. The hops, on every
/// process.
pub fn pass_token<F: Fabric + ?Sized, T: Wire>(
    f: &F,
    mut token: Option<T>,
    mut ended: bool,
    mut go: impl FnMut(T) -> Went<T>,
) -> u64 {
    let mut hops = 0;
    while !ended {
        let mut out = vec![Out::default(); f.size()];
        match token.take().map(&mut go) {
            Some(Went::Ended(h)) => {
                for o in &mut out {
                    o.u8(ENDED).u64(h);
                }
            }
            Some(Went::On(to, t)) => {
                out[to].u8(TOKEN).put(&t);
            }
            None => {}
        }
        for bytes in f.exchange(out.into_iter().map(|o| o.0).collect()) {
            let mut i = In::new(&bytes);
            while !i.done() {
                match i.u8() {
                    TOKEN => token = Some(i.get()),
                    _ => {
                        hops = i.u64();
                        ended = true;
                    }
                }
            }
        }
    }
    hops
}
