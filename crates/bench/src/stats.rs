//! The numbers every benchmark reports from its samples, computed one way.

/// The spread of a sample of timings (non-negative, finite): its least, median, 99th
/// percentile and greatest values; all 0 for no samples.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    pub min: f64,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

impl Spread {
    pub fn of(samples: &[f64]) -> Spread {
        let mut sorted = samples.to_vec();
        sorted.sort_by(|a, b| a.partial_cmp(b).expect("finite"));
        Spread {
            min: sorted.first().copied().unwrap_or(0.0),
            p50: percentile(&sorted, 0.5),
            p99: percentile(&sorted, 0.99),
            max: sorted.last().copied().unwrap_or(0.0),
        }
    }
}

/// The sample nearest to rank `p × (n − 1)` of `sorted`; 0 for no samples.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// A benchmark's `--json` result: one object on one line of stdout.
pub fn print_json(v: serde_json::Value) {
    println!("{v}");
}

#[cfg(test)]
mod tests {
    use super::Spread;

    #[test]
    fn the_median_is_the_upper_middle_of_an_even_sample() {
        let s = Spread::of(&[4.0, 1.0, 3.0, 2.0]);
        assert_eq!((s.min, s.p50, s.p99, s.max), (1.0, 3.0, 4.0, 4.0));
        let s = Spread::of(&[5.0, 1.0, 3.0]);
        assert_eq!((s.min, s.p50, s.max), (1.0, 3.0, 5.0));
    }

    #[test]
    fn the_99th_percentile_of_a_hundred_samples_is_the_99th() {
        let v: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        assert_eq!(Spread::of(&v).p99, 99.0);
        assert_eq!(Spread::of(&v).p50, 51.0);
    }

    #[test]
    fn no_samples_give_zeros() {
        let s = Spread::of(&[]);
        assert_eq!((s.min, s.p50, s.p99, s.max), (0.0, 0.0, 0.0, 0.0));
    }
}
