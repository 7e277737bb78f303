//! `math.random` as Redis replaces it: a server-wide `rand48` generator (`redisLrand48`), never
//! reseeded between scripts unless a script calls `math.randomseed`.

/// The 48-bit linear congruential generator of `rand48`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Rand48 {
    x: u64,
}

impl Default for Rand48 {
    /// The state Redis starts with (`X0 X1 X2` = 0x330E 0xABCD 0x1234).
    fn default() -> Self {
        Rand48 {
            x: 0x1234_ABCD_330E,
        }
    }
}

const MASK: u64 = (1 << 48) - 1;
const INT32_MAX: f64 = 2_147_483_647.0;

impl Rand48 {
    /// `redisSrand48(seed)`.
    pub(super) fn seed(&mut self, seed: i32) {
        self.x = ((u64::from(seed as u32) << 16) | 0x330E) & MASK;
    }

    /// `redisLrand48()`: 31 random bits.
    pub(super) fn next_i32(&mut self) -> i32 {
        self.x = (0x5_DEEC_E66D_u64.wrapping_mul(self.x).wrapping_add(0xB)) & MASK;
        (self.x >> 17) as i32
    }

    /// A number in [0, 1), as `redis_math_random` computes it.
    pub(super) fn next_unit(&mut self) -> f64 {
        f64::from(self.next_i32() % i32::MAX) / INT32_MAX
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn first_draws_match_a_fresh_redis() {
        // A fresh redis-server 7.0 answers 397 then 841 to `return math.random(1000)`.
        let mut r = super::Rand48::default();
        let draw = |r: &mut super::Rand48| (r.next_unit() * 1000.0).floor() as i64 + 1;
        assert_eq!(draw(&mut r), 397);
        assert_eq!(draw(&mut r), 841);
    }
}
