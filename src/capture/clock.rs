//! The timer: the invariant TSC scaled to nanoseconds, or CLOCK_MONOTONIC.
//!
//! The TSC costs 9.7 ns a read here against 23.5 ns for `clock_gettime`.
//! Its rate is calibrated against CLOCK_MONOTONIC over the span of
//! `PMPI_Init` itself (tens of milliseconds, so well under 1 ppm of error
//! at no cost), and the trace records both clocks at start and end so that
//! a reader can rescale exactly. Until calibration, `now()` reads
//! CLOCK_MONOTONIC, and the TSC scale is anchored so that both agree at the
//! switch: time never steps.

use pmtrace_format::sim::ClockSim;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::OnceLock;

/// What `now()` does, read once per call: `TSC` and `SIMULATED` bits.
static TIMER: AtomicU8 = AtomicU8::new(0);
const TSC: u8 = 1;
const SIMULATED: u8 = 2;
static TSC_BASE: AtomicU64 = AtomicU64::new(0);
static NS_BASE: AtomicU64 = AtomicU64::new(0);
/// Nanoseconds per tick, 32.32 fixed point.
static MULT: AtomicU64 = AtomicU64::new(0);
static TSC_HZ_BITS: AtomicU64 = AtomicU64::new(0);

#[inline(always)]
pub fn monotonic() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to fill; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[inline(always)]
pub fn tsc() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: rdtsc has no preconditions on x86_64.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        monotonic()
    }
}

/// The trace timer, in ns. The TSC alone is the path a call takes; the
/// others (before calibration, without an invariant TSC, simulated) are
/// out of line.
#[inline(always)]
pub fn now() -> u64 {
    let timer = TIMER.load(Relaxed);
    if timer == TSC {
        return scaled(tsc());
    }
    now_other(timer)
}

/// A TSC reading in trace nanoseconds.
#[inline(always)]
fn scaled(ticks: u64) -> u64 {
    let dt = ticks.wrapping_sub(TSC_BASE.load(Relaxed));
    NS_BASE.load(Relaxed) + ((u128::from(dt) * u128::from(MULT.load(Relaxed))) >> 32) as u64
}

/// The timer when it is known to be the bare TSC (the main thread's
/// lane, `lane::TIMER`).
#[inline(always)]
pub fn now_tsc() -> u64 {
    scaled(tsc())
}

/// Closes the main thread's lane unless the timer is the bare TSC.
fn timer_changed() {
    crate::lane::close(crate::lane::TIMER, TIMER.load(Relaxed) != TSC);
}

#[cold]
#[inline(never)]
fn now_other(timer: u8) -> u64 {
    let t = if timer & TSC != 0 {
        scaled(tsc())
    } else {
        monotonic()
    };
    if timer & SIMULATED != 0 {
        return simulated(t);
    }
    t
}

/// `PMTRACE_CLOCK_SIM`: the clock this rank pretends to have.
static SIM: OnceLock<ClockSim> = OnceLock::new();

/// From now on every reading of `now()` goes through `sim`.
pub fn simulate(sim: ClockSim) {
    if SIM.set(sim).is_ok() && !sim.is_identity() {
        TIMER.fetch_or(SIMULATED, Relaxed);
        timer_changed();
    }
}

/// A true reading as this rank's (possibly simulated) timer shows it.
#[cold]
pub fn simulated(t: u64) -> u64 {
    SIM.get().map_or(t, |s| s.apply(t))
}

/// Whether this CPU's TSC runs at a constant rate through sleep states.
pub fn tsc_is_invariant() -> bool {
    if !cfg!(target_arch = "x86_64") {
        return false;
    }
    std::fs::read_to_string("/proc/cpuinfo")
        .map(|s| {
            s.lines()
                .find(|l| l.starts_with("flags"))
                .map(|l| {
                    l.split_whitespace().any(|f| f == "constant_tsc")
                        && l.split_whitespace().any(|f| f == "nonstop_tsc")
                })
                .unwrap_or(false)
        })
        .unwrap_or(false)
}

/// A paired reading of both clocks.
#[derive(Clone, Copy, Debug)]
pub struct Pair {
    pub tsc: u64,
    pub mono: u64,
}

pub fn pair() -> Pair {
    // Bracket the monotonic read with two TSC reads and keep the tightest
    // of a few tries: a try that was preempted or interrupted between its
    // reads would pair clocks milliseconds apart.
    let mut best = (u64::MAX, Pair { tsc: 0, mono: 0 });
    for _ in 0..16 {
        let a = tsc();
        let mono = monotonic();
        let b = tsc();
        let width = b.wrapping_sub(a);
        if width < best.0 {
            best = (
                width,
                Pair {
                    tsc: a + width / 2,
                    mono,
                },
            );
        }
    }
    best.1
}

/// Switches to the TSC, calibrated between two readings at least 1 ms
/// apart (it waits if they are closer). Returns the TSC rate in Hz.
pub fn start_tsc(first: Pair) -> f64 {
    let mut second = pair();
    while second.mono.saturating_sub(first.mono) < 1_000_000 {
        second = pair();
    }
    let ticks = (second.tsc - first.tsc) as f64;
    let ns = (second.mono - first.mono) as f64;
    let hz = ticks / ns * 1e9;
    let mult = (ns / ticks * 4294967296.0) as u64;
    TSC_BASE.store(second.tsc, Relaxed);
    NS_BASE.store(second.mono, Relaxed);
    MULT.store(mult, Relaxed);
    TSC_HZ_BITS.store(hz.to_bits(), Relaxed);
    TIMER.fetch_or(TSC, Relaxed);
    timer_changed();
    hz
}

/// This rank's TSC scale (base tick, base ns, ns per tick in 32.32, the
/// rate in Hz as f64 bits), or `None` on the monotonic clock.
pub fn tsc_scale() -> Option<[u64; 4]> {
    using_tsc().then(|| {
        [
            TSC_BASE.load(Relaxed),
            NS_BASE.load(Relaxed),
            MULT.load(Relaxed),
            TSC_HZ_BITS.load(Relaxed),
        ]
    })
}

/// Takes `scale` (another rank's [`tsc_scale`] on this host) as this
/// rank's, so that every rank of a host turns one TSC reading into one
/// time: each rank's own calibration over its `MPI_Init` differs by a few
/// tens of ppb, and two ranks of one host drifted 325 ns apart in 10 s,
/// enough for a message to seem received before it was sent. Time never
/// runs back: where the new scale reads earlier, this waits until it
/// passes the last reading. Only while one thread reads the timer, and
/// refused (false) when the two scales are more than `limit_ns` apart.
pub fn adopt_tsc_scale(scale: [u64; 4], limit_ns: u64) -> bool {
    if !using_tsc() || scale[2] == 0 {
        return false;
    }
    let at = |s: [u64; 4], tick: u64| {
        let dt = tick.wrapping_sub(s[0]) as i64 as i128;
        (s[1] as i128 + ((dt * s[2] as i128) >> 32)) as i64
    };
    let tick = tsc();
    if (tick.wrapping_sub(scale[0]) as i64) < 0 {
        return false;
    }
    let mine = tsc_scale().unwrap_or(scale);
    let (old, new) = (at(mine, tick), at(scale, tick));
    if old.abs_diff(new) > limit_ns {
        return false;
    }
    TSC_BASE.store(scale[0], Relaxed);
    NS_BASE.store(scale[1], Relaxed);
    MULT.store(scale[2], Relaxed);
    TSC_HZ_BITS.store(scale[3], Relaxed);
    while (at(scale, tsc())) <= old {
        core::hint::spin_loop();
    }
    true
}

pub fn using_tsc() -> bool {
    TIMER.load(Relaxed) & TSC != 0
}

pub fn tsc_hz() -> Option<f64> {
    using_tsc().then(|| f64::from_bits(TSC_HZ_BITS.load(Relaxed)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whichever timer the machine allows: the TSC where it is invariant
    /// (calibrated against the monotonic clock), the monotonic clock
    /// itself elsewhere; either way the timer tracks the monotonic clock.
    #[test]
    fn the_timer_tracks_monotonic_after_calibration() {
        let invariant = tsc_is_invariant();
        if invariant {
            start_tsc(pair());
        }
        assert_eq!(
            using_tsc(),
            invariant,
            "the TSC is used where invariant only"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
        // The closest of a few back-to-back readings (a reading can be
        // preempted between the two clocks).
        let (a, b, diff) = (0..16)
            .map(|_| {
                let (a, b) = (now(), monotonic());
                (a, b, a.abs_diff(b))
            })
            .min_by_key(|x| x.2)
            .unwrap();
        // 20 ms at the calibration error of a 1 ms window (tens of ppm)
        // plus read jitter stays far below 50 us.
        assert!(diff < 50_000, "timer {a} vs monotonic {b}: {diff} ns apart");
    }

    /// A rank takes its leader's scale: from then on its readings are the
    /// leader's (here: a scale 300 ns ahead, then back), never running
    /// back; a scale further off than the limit is refused.
    #[test]
    fn an_adopted_tsc_scale_gives_its_readings_and_time_never_runs_back() {
        if !tsc_is_invariant() {
            // On the monotonic clock there is no scale, and none is taken.
            assert_eq!(tsc_scale(), None);
            assert!(!adopt_tsc_scale([1, 0, 1 << 32, 0], u64::MAX));
            assert_eq!(tsc_scale(), None);
            return;
        }
        start_tsc(pair());
        let own = tsc_scale().unwrap();
        let ahead = [own[0], own[1] + 300, own[2], own[3]];
        // The timer is read first, so any delay before the second read
        // (a preemption, an interrupt) only lowers `t - m`: the largest
        // of many pairs is the one read closest together.
        let offset = |n: usize| {
            (0..n)
                .map(|_| {
                    let (t, m) = (now(), monotonic());
                    t as i64 - m as i64
                })
                .max()
                .unwrap()
        };
        let before = offset(64);
        assert!(adopt_tsc_scale(ahead, 1_000));
        assert_eq!(tsc_scale(), Some(ahead));
        let after = offset(64);
        assert!(
            (after - before - 300).abs() < 100,
            "300 ns ahead: {before} then {after}"
        );
        let last = now();
        assert!(adopt_tsc_scale(own, 1_000));
        assert!(now() > last, "time ran back");
        assert!(!adopt_tsc_scale(
            [own[0], own[1] + 5_000, own[2], own[3]],
            1_000
        ));
        assert_eq!(tsc_scale(), Some(own));
    }
}
