//! Bounds on what one call of a Rust library function does for a script: the bytes it builds
//! outside the Lua heap (which the memory cap does not see) and the time it runs (which the
//! instruction hook does not see).

use mlua::Lua;

/// The most bytes one buffer built from script data may hold: Redis's 512 MiB string limit,
/// and the Lua memory cap (the result must fit in the Lua heap anyway).
pub(super) fn buffer_limit(lua: &Lua) -> usize {
    let cap = lua
        .app_data_ref::<super::Limits>()
        .map_or(usize::MAX, |l| l.memory_limit);
    cap.min(crate::keyspace::MAX_STRING)
}

/// Units of work between two looks at the clock.
const STEPS_PER_CHECK: u32 = 1024;
/// Bytes written between two looks at the clock (a JSON escape of 8 MB is a long step).
const BYTES_PER_CHECK: usize = 1 << 20;

/// The buffer and time budget of one library call.
pub(super) struct Budget<'a> {
    lua: &'a Lua,
    limit: usize,
    steps: u32,
    bytes: usize,
}

/// The refusal of a buffer past [`buffer_limit`], as Lua says it.
pub(super) const NO_MEMORY: &str = "not enough memory";

impl<'a> Budget<'a> {
    /// The budget of a call of a function running in `lua`.
    pub(super) fn new(lua: &'a Lua) -> Budget<'a> {
        Budget {
            lua,
            limit: buffer_limit(lua),
            steps: 0,
            bytes: 0,
        }
    }

    /// Makes room in `out` for `more` bytes: refused past the limit; the capacity grows as a
    /// Vec's would, doubling, but never past the limit (a buffer near it must not reserve
    /// twice it). Every [`BYTES_PER_CHECK`] bytes, a look at the time limit.
    ///
    /// # Errors
    /// [`NO_MEMORY`] past the limit; past the time limit, see [`Budget::step`].
    pub(super) fn room(&mut self, out: &mut Vec<u8>, more: usize) -> Result<(), String> {
        let need = out.len().saturating_add(more);
        if need > self.limit {
            return Err(NO_MEMORY.into());
        }
        if need > out.capacity() {
            let target = out.capacity().saturating_mul(2).max(need).min(self.limit);
            out.reserve_exact(target - out.len());
        }
        self.bytes = self.bytes.saturating_add(more);
        if self.bytes >= BYTES_PER_CHECK {
            self.bytes = 0;
            self.look_at_the_clock()?;
        }
        Ok(())
    }

    /// One unit of work (a table visited); every [`STEPS_PER_CHECK`] a look at the time limit.
    ///
    /// # Errors
    /// Past the time limit; [`crate::script::libargs::answer`] raises the stop itself.
    pub(super) fn step(&mut self) -> Result<(), String> {
        self.steps = self.steps.wrapping_add(1);
        if self.steps.is_multiple_of(STEPS_PER_CHECK) {
            self.look_at_the_clock()?;
        }
        Ok(())
    }

    fn look_at_the_clock(&self) -> Result<(), String> {
        super::check_time(self.lua).map_err(|_| "harness: script time limit reached".to_string())
    }
}
