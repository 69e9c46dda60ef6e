//! Order statistics of values spread over the processes, exactly: the
//! k-th smallest is found a byte at a time, most significant first, each
//! round a histogram of the next byte among the values that share the
//! bytes found so far, summed over the processes (8 rounds for 64 bits;
//! no process ever holds another's values).

use pmtrace_sync::quality::ErrorStats;

use crate::fabric::{sum_of, Fabric};

/// The `ks`-th smallest (from 0) of the union of every process's
/// `values`; each k below the union's size.
pub fn kth<F: Fabric + ?Sized>(f: &F, values: &[u64], ks: &[u64]) -> Vec<u64> {
    let q = ks.len();
    let mut prefix = vec![0u64; q];
    let mut rank = ks.to_vec();
    for round in 0..8u32 {
        let shift = 56 - 8 * round;
        let mut hist = vec![0u64; 256 * q];
        for &v in values {
            for j in 0..q {
                // The bytes above this one must match those found.
                if round == 0 || v >> (shift + 8) == prefix[j] >> (shift + 8) {
                    hist[256 * j + ((v >> shift) & 0xff) as usize] += 1;
                }
            }
        }
        f.sum(&mut hist);
        for j in 0..q {
            let h = &hist[256 * j..256 * (j + 1)];
            let mut byte = 0;
            while rank[j] >= h[byte] {
                rank[j] -= h[byte];
                byte += 1;
            }
            prefix[j] |= (byte as u64) << shift;
        }
    }
    prefix
}

/// Median, 99th percentile and largest of every process's `errs`, as
/// [`pmtrace_sync::quality::error_stats`] gives them of all.
pub fn error_stats<F: Fabric + ?Sized>(f: &F, errs: &[u64]) -> ErrorStats {
    let n = sum_of(f, errs.len() as u64);
    if n == 0 {
        return ErrorStats::default();
    }
    let mut max = [errs.iter().copied().max().unwrap_or(0)];
    f.max(&mut max);
    let ks = kth(f, errs, &[(n - 1) / 2, ((n - 1) * 99) / 100]);
    ErrorStats {
        median: ks[0],
        p99: ks[1],
        max: max[0],
    }
}

/// The 1st percentile of every process's latencies, 0 if negative; `None`
/// if there are none (as [`pmtrace_sync::quality::floor`]).
pub fn latency_floor<F: Fabric + ?Sized>(f: &F, lat: &[i64]) -> Option<u64> {
    let n = sum_of(f, lat.len() as u64);
    if n == 0 {
        return None;
    }
    // Signed order as unsigned: flip the sign bit.
    let keys: Vec<u64> = lat.iter().map(|&x| (x as u64) ^ (1 << 63)).collect();
    let k = kth(f, &keys, &[(n - 1) / 100])[0];
    Some(((k ^ (1 << 63)) as i64).max(0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::Threads;
    use pmtrace_sync::quality;

    #[test]
    fn order_statistics_over_processes_are_those_of_all_values() {
        let mut x = 12345u64;
        let mut next = || {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            x >> 11
        };
        let all: Vec<u64> = (0..5000)
            .map(|i| if i % 7 == 0 { next() % 50 } else { next() })
            .collect();
        let lat: Vec<i64> = all.iter().map(|&v| (v % 2000) as i64 - 700).collect();
        let want = quality::error_stats(all.clone());
        let want_floor = quality::floor(lat.clone());
        for procs in 1..=4 {
            let got = Threads::run(procs, |f| {
                let part = |n: usize| n * f.index() / f.size()..n * (f.index() + 1) / f.size();
                (
                    error_stats(f, &all[part(all.len())]),
                    latency_floor(f, &lat[part(lat.len())]),
                )
            });
            for (stats, floor) in got {
                assert_eq!(stats, want);
                assert_eq!(floor, want_floor);
            }
        }
        assert_eq!(Threads::run(2, |f| latency_floor(f, &[])), vec![None, None]);
    }
}
