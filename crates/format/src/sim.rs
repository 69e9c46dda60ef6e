//! Simulated clocks (`PMTRACE_CLOCK_SIM`), a testing knob. All ranks on one
//! host share one physical clock, so real skew never shows on a single
//! machine. With the knob, every timestamp a rank takes goes through
//! [`ClockSim::apply`]: a deterministic offset and drift, and optionally a
//! second drift from some point on (a non-linear clock). Rank 0 keeps the
//! true clock.
//!
//! The trace header stores each rank's [`ClockSim`], and the mapping is
//! monotone and piecewise linear, so the true time of every event is
//! recovered exactly (to the nanosecond) by [`ClockSim::true_time`]: the true
//! time is kept beside each event at no cost per event.
//!
//! ```text
//! PMTRACE_CLOCK_SIM=seed=N[,offset_us=X][,drift_ppm=Y][,drift_change_s=S][,hosts=H]
//!   offset  uniform in ±X µs  (default 5000)
//!   drift   uniform in ±Y ppm (default 50)
//!   S       seconds after the rank's start at which its drift is drawn anew
//!   H       pretend the ranks run on H hosts, in blocks of consecutive
//!           ranks (rank r on host r·H/size): the offsets are then measured
//!           along a tree of hosts, as on a cluster
//! ```

use serde::{Deserialize, Serialize};

/// The parsed setting, the same on every rank.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SimSpec {
    pub seed: u64,
    pub offset_us: f64,
    pub drift_ppm: f64,
    pub drift_change_s: Option<f64>,
    /// Simulated hosts (`None`: the real ones).
    pub hosts: Option<u32>,
}

impl SimSpec {
    /// The host name rank `rank` of `size` reports: the real one, or under
    /// `hosts=H` the real one with the simulated host's number appended.
    pub fn host_name(&self, real: &str, rank: u32, size: u32) -> String {
        match self.hosts {
            Some(h) if size > 0 => {
                format!(
                    "{real}~sim{}",
                    u64::from(rank) * u64::from(h) / u64::from(size)
                )
            }
            _ => real.to_string(),
        }
    }
}

/// One rank's simulated clock. Times are ns of the rank's timer.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ClockSim {
    pub seed: u64,
    /// True time from which the drift counts: the rank's start.
    pub origin_ns: u64,
    pub offset_ns: f64,
    pub drift_ppm: f64,
    /// True ns after `origin_ns` at which `drift2_ppm` takes over.
    pub change_after_ns: Option<u64>,
    pub drift2_ppm: f64,
}

impl SimSpec {
    pub fn parse(text: &str) -> Result<SimSpec, String> {
        let mut spec = SimSpec {
            seed: 0,
            offset_us: 5000.0,
            drift_ppm: 50.0,
            drift_change_s: None,
            hosts: None,
        };
        let mut seed = None;
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("`{part}` is not key=value"))?;
            let num = |lo: f64, hi: f64| -> Result<f64, String> {
                v.trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|x| x.is_finite() && (lo..=hi).contains(x))
                    .ok_or_else(|| format!("{k}={v} is not a number in {lo}..{hi}"))
            };
            match k.trim() {
                "seed" => {
                    seed = Some(
                        v.trim()
                            .parse::<u64>()
                            .map_err(|_| format!("seed={v} is not an integer"))?,
                    )
                }
                "offset_us" => spec.offset_us = num(0.0, 1e9)?,
                "drift_ppm" => spec.drift_ppm = num(0.0, 1e4)?,
                "drift_change_s" => spec.drift_change_s = Some(num(0.0, 1e7)?),
                "hosts" => {
                    spec.hosts = Some(
                        v.trim()
                            .parse::<u32>()
                            .ok()
                            .filter(|&h| h >= 1)
                            .ok_or_else(|| format!("hosts={v} is not a positive integer"))?,
                    )
                }
                other => return Err(format!("unknown key `{other}`")),
            }
        }
        spec.seed = seed.ok_or("seed=N is required")?;
        Ok(spec)
    }

    /// `rank`'s clock, starting at true time `origin_ns`. Rank 0 is true.
    pub fn for_rank(&self, rank: u32, origin_ns: u64) -> ClockSim {
        let mut sim = ClockSim {
            seed: self.seed,
            origin_ns,
            offset_ns: 0.0,
            drift_ppm: 0.0,
            change_after_ns: None,
            drift2_ppm: 0.0,
        };
        if rank == 0 {
            return sim;
        }
        let mut rng = SplitMix(self.seed ^ u64::from(rank).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        sim.offset_ns = rng.symmetric() * self.offset_us * 1e3;
        sim.drift_ppm = rng.symmetric() * self.drift_ppm;
        if let Some(s) = self.drift_change_s {
            sim.change_after_ns = Some((s * 1e9) as u64);
            sim.drift2_ppm = rng.symmetric() * self.drift_ppm;
        }
        sim
    }
}

impl ClockSim {
    /// Whether this clock is the true one.
    pub fn is_identity(&self) -> bool {
        self.offset_ns == 0.0 && self.drift_ppm == 0.0 && self.drift2_ppm == 0.0
    }

    /// The simulated reading at true time `t`.
    pub fn apply(&self, t: u64) -> u64 {
        let dt = t as f64 - self.origin_ns as f64;
        let (d1, d2) = (self.drift_ppm * 1e-6, self.drift2_ppm * 1e-6);
        let shift = match self.change_after_ns {
            Some(c) if dt > c as f64 => d1 * c as f64 + d2 * (dt - c as f64),
            _ => d1 * dt,
        };
        (t as f64 + self.offset_ns + shift).round().max(0.0) as u64
    }

    /// The true time of simulated reading `s` (the inverse of `apply`, to
    /// the nanosecond).
    pub fn true_time(&self, s: u64) -> u64 {
        let (d1, d2) = (self.drift_ppm * 1e-6, self.drift2_ppm * 1e-6);
        let o = self.origin_ns as f64;
        // s = o + dt (1 + d1) + offset on the first piece.
        let first = |s: f64| o + (s - o - self.offset_ns) / (1.0 + d1);
        let t = match self.change_after_ns {
            Some(c) => {
                let c = c as f64;
                let s_change = o + c * (1.0 + d1) + self.offset_ns;
                if (s as f64) <= s_change {
                    first(s as f64)
                } else {
                    o + c + (s as f64 - s_change) / (1.0 + d2)
                }
            }
            None => first(s as f64),
        };
        t.round().max(0.0) as u64
    }
}

/// A small deterministic generator (SplitMix64).
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1).
    fn symmetric(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_parse_with_defaults_and_refuse_nonsense() {
        let s = SimSpec::parse("seed=11").unwrap();
        assert_eq!(
            s,
            SimSpec {
                seed: 11,
                offset_us: 5000.0,
                drift_ppm: 50.0,
                drift_change_s: None,
                hosts: None,
            }
        );
        let s = SimSpec::parse("seed=2,hosts=3").unwrap();
        assert_eq!(s.hosts, Some(3));
        // Blocks of consecutive ranks: 8 ranks on 3 hosts.
        let names: Vec<String> = (0..8).map(|r| s.host_name("n", r, 8)).collect();
        assert_eq!(
            names,
            ["n~sim0", "n~sim0", "n~sim0", "n~sim1", "n~sim1", "n~sim1", "n~sim2", "n~sim2"]
        );
        assert_eq!(SimSpec::parse("seed=2").unwrap().host_name("n", 5, 8), "n");
        assert!(SimSpec::parse("seed=1,hosts=0").is_err());
        let s = SimSpec::parse("seed=3, offset_us=100,drift_ppm=20,drift_change_s=0.5").unwrap();
        assert_eq!(
            (s.offset_us, s.drift_ppm, s.drift_change_s),
            (100.0, 20.0, Some(0.5))
        );
        assert!(SimSpec::parse("offset_us=3").is_err(), "seed is required");
        assert!(SimSpec::parse("seed=x").is_err());
        assert!(SimSpec::parse("seed=1,drift_ppm=-3").is_err());
        assert!(SimSpec::parse("seed=1,colour=red").is_err());
        assert!(SimSpec::parse("seed=1,offset_us").is_err());
    }

    #[test]
    fn rank_zero_is_true_and_others_are_deterministic_and_bounded() {
        let spec = SimSpec::parse("seed=7,offset_us=1000,drift_ppm=30,drift_change_s=2").unwrap();
        let zero = spec.for_rank(0, 5_000);
        assert!(zero.is_identity());
        assert_eq!(zero.apply(123_456_789), 123_456_789);
        let mut offsets = Vec::new();
        for r in 1..64 {
            let a = spec.for_rank(r, 5_000);
            assert_eq!(a, spec.for_rank(r, 5_000), "deterministic");
            assert!(a.offset_ns.abs() <= 1e6 && a.drift_ppm.abs() <= 30.0);
            assert!(a.drift2_ppm.abs() <= 30.0);
            assert_eq!(a.change_after_ns, Some(2_000_000_000));
            offsets.push(a.offset_ns);
        }
        // Spread over the range, not all on one side.
        assert!(offsets.iter().any(|&o| o > 5e5) && offsets.iter().any(|&o| o < -5e5));
        assert_ne!(
            spec.for_rank(1, 0),
            SimSpec { seed: 8, ..spec }.for_rank(1, 0)
        );
    }

    #[test]
    fn apply_is_offset_plus_drift_piecewise() {
        let sim = ClockSim {
            seed: 0,
            origin_ns: 1_000_000_000,
            offset_ns: 2_000.0,
            drift_ppm: 10.0,
            change_after_ns: Some(1_000_000_000),
            drift2_ppm: -20.0,
        };
        assert_eq!(sim.apply(1_000_000_000), 1_000_002_000);
        // 0.5 s in: +5 us of drift.
        assert_eq!(sim.apply(1_500_000_000), 1_500_007_000);
        // 1 s in: +10 us; then 1 s at -20 ppm: -20 us.
        assert_eq!(sim.apply(2_000_000_000), 2_000_012_000);
        assert_eq!(sim.apply(3_000_000_000), 2_999_992_000);
    }

    #[test]
    fn true_time_inverts_apply_to_the_nanosecond() {
        let spec = SimSpec::parse("seed=99,drift_change_s=0.25").unwrap();
        for r in 0..16 {
            let sim = spec.for_rank(r, 777_000_000);
            let mut prev = 0;
            for k in 0..2000u64 {
                let t = 777_000_000 + k * 1_000_003;
                let s = sim.apply(t);
                assert!(s >= prev, "monotone");
                prev = s;
                assert!(sim.true_time(s).abs_diff(t) <= 1, "rank {r} t {t}");
            }
        }
    }
}
