//! Which key a cycle locks: unique, uniform over K, zipf over K, or one hot key.

use std::fmt::Write as _;
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Zipf};

use crate::config::KeyDist;

/// A key choice: the index in the key space (for the safety checker) and nothing else; the
/// text is formatted into a reused buffer by [`KeyPicker::format`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyChoice {
    /// Index into the shared key space `0..K`.
    Shared(u64),
    /// A key only this task ever uses (its counter); needs no cross-task check.
    Unique(u64),
}

/// Picks keys for one task; cheap to build per task (zipf is sampled by rejection-inversion,
/// with no table).
#[derive(Debug)]
pub struct KeyPicker {
    dist: KeyDist,
    keys: u64,
    zipf: Option<Zipf<f64>>,
    rng: SmallRng,
    task: u64,
    counter: u64,
    prefix: Arc<str>,
}

impl KeyPicker {
    /// A picker for task `task`; `zipf_s` is the exponent for [`KeyDist::Zipf`] (a positive
    /// finite number, as `--zipf-s` is checked to be; any other value picks rank 1 only).
    pub fn new(
        dist: KeyDist,
        keys: u64,
        zipf_s: f64,
        task: u64,
        seed: u64,
        prefix: Arc<str>,
    ) -> Self {
        let keys = keys.max(1);
        let zipf = (dist == KeyDist::Zipf)
            .then(|| Zipf::new(keys as f64, zipf_s).ok())
            .flatten();
        KeyPicker {
            dist,
            keys,
            zipf,
            rng: SmallRng::seed_from_u64(seed ^ task.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
            task,
            counter: 0,
            prefix,
        }
    }

    /// The next key.
    pub fn pick(&mut self) -> KeyChoice {
        match self.dist {
            KeyDist::Unique => {
                self.counter += 1;
                KeyChoice::Unique(self.counter)
            }
            KeyDist::Uniform => KeyChoice::Shared(self.rng.random_range(0..self.keys)),
            KeyDist::Hot => KeyChoice::Shared(0),
            KeyDist::Zipf => {
                // Zipf samples a rank in 1..=keys; key indices start at 0.
                let rank = self.zipf.map_or(1.0, |z| z.sample(&mut self.rng));
                KeyChoice::Shared((rank as u64).saturating_sub(1).min(self.keys - 1))
            }
        }
    }

    /// Writes the key's text into `buf` (cleared first): `PREFIX{k}` or `PREFIXu:{task}:{n}`.
    pub fn format(&self, choice: KeyChoice, buf: &mut String) {
        buf.clear();
        buf.push_str(&self.prefix);
        let _ = match choice {
            KeyChoice::Shared(i) => write!(buf, "{i}"),
            KeyChoice::Unique(n) => write!(buf, "u:{}:{n}", self.task),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn picker(dist: KeyDist, keys: u64) -> KeyPicker {
        KeyPicker::new(dist, keys, 0.99, 3, 42, "p:".into())
    }

    #[test]
    fn uniform_stays_in_the_key_space() {
        let mut p = picker(KeyDist::Uniform, 10);
        for _ in 0..1000 {
            assert!(matches!(p.pick(), KeyChoice::Shared(i) if i < 10));
        }
    }

    #[test]
    fn zipf_favours_low_ranks() {
        let mut p = picker(KeyDist::Zipf, 1000);
        let mut first = 0;
        for _ in 0..10_000 {
            match p.pick() {
                KeyChoice::Shared(0) => first += 1,
                KeyChoice::Shared(i) => assert!(i < 1000),
                KeyChoice::Unique(_) => unreachable!(),
            }
        }
        // Rank 1 has 1/H(1000, 0.99) ≈ 13% of the mass (uniform would give 0.1%): the
        // sampler must land within 5 standard deviations of that.
        let h: f64 = (1..=1000).map(|k| 1.0 / f64::from(k).powf(0.99)).sum();
        let expected = 10_000.0 / h;
        let sd = (expected * (1.0 - 1.0 / h)).sqrt();
        assert!(
            (f64::from(first) - expected).abs() < 5.0 * sd,
            "{first} vs {expected:.0}"
        );
    }

    #[test]
    fn unique_keys_never_repeat_and_carry_the_task() {
        let mut p = picker(KeyDist::Unique, 1);
        let (a, b) = (p.pick(), p.pick());
        assert_ne!(a, b);
        let mut buf = String::new();
        p.format(a, &mut buf);
        assert_eq!(buf, "p:u:3:1");
        p.format(KeyChoice::Shared(7), &mut buf);
        assert_eq!(buf, "p:7");
    }

    #[test]
    fn hot_is_one_key() {
        let mut p = picker(KeyDist::Hot, 100);
        assert_eq!(p.pick(), KeyChoice::Shared(0));
        assert_eq!(p.pick(), KeyChoice::Shared(0));
    }
}
