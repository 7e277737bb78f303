//! Which key a cycle locks: unique, uniform over K, zipf over K, or one hot key.

use std::fmt::Write as _;
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::args::KeyDist;

/// A key choice: the index in the key space (for the safety checker) and nothing else; the
/// text is formatted into a reused buffer by [`KeyPicker::format`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyChoice {
    /// Index into the shared key space `0..K`.
    Shared(u64),
    /// A key only this task ever uses (its counter); needs no cross-task check.
    Unique(u64),
}

/// Picks keys for one task; cheap to build per task (the zipf table is shared).
#[derive(Debug)]
pub struct KeyPicker {
    dist: KeyDist,
    keys: u64,
    zipf: Option<Arc<[f64]>>,
    rng: SmallRng,
    task: u64,
    counter: u64,
    prefix: Arc<str>,
}

/// The cumulative distribution of zipf(s) over `n` ranks, normalised to end at 1.0.
pub fn zipf_table(n: u64, s: f64) -> Arc<[f64]> {
    let mut acc = 0.0;
    let mut cdf: Vec<f64> = (1..=n)
        .map(|k| {
            acc += 1.0 / (k as f64).powf(s);
            acc
        })
        .collect();
    for x in &mut cdf {
        *x /= acc;
    }
    cdf.into()
}

impl KeyPicker {
    /// A picker for task `task`; `zipf` must be given for [`KeyDist::Zipf`].
    pub fn new(
        dist: KeyDist,
        keys: u64,
        zipf: Option<Arc<[f64]>>,
        task: u64,
        seed: u64,
        prefix: Arc<str>,
    ) -> Self {
        KeyPicker {
            dist,
            keys: keys.max(1),
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
                let cdf = self.zipf.as_deref().unwrap_or(&[1.0]);
                let r: f64 = self.rng.random();
                let i = cdf.partition_point(|&c| c < r).min(cdf.len() - 1);
                KeyChoice::Shared(i as u64)
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
        let zipf = (dist == KeyDist::Zipf).then(|| zipf_table(keys, 0.99));
        KeyPicker::new(dist, keys, zipf, 3, 42, "p:".into())
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
        // rank 1 has ~1/H(1000, 0.99) ≈ 13% of the mass; uniform would give 0.1%.
        assert!(first > 500, "{first}");
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
