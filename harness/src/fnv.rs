//! FNV-1a: a fast hasher for the harness's small internal maps (command names, script SHAs),
//! whose keys are not attacker-chosen.

use std::hash::{BuildHasherDefault, Hasher};

/// The FNV-1a 64-bit hasher.
#[derive(Debug, Clone, Copy)]
pub struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

/// `BuildHasher` for [`Fnv`].
pub type FnvBuild = BuildHasherDefault<Fnv>;
