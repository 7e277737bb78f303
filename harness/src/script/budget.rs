//! Bounds on what one call of a Rust library function does for a script: the bytes it builds
//! outside the Lua heap (which the memory cap does not see) and the time it runs (which the
//! instruction hook does not see).

use mlua::Lua;

/// The most bytes one buffer built from script data may hold: Redis's 512 MiB string limit,
/// and the Lua memory cap (the result must fit in the Lua heap anyway).
pub fn buffer_limit(lua: &Lua) -> usize {
    let cap = lua
        .app_data_ref::<super::Limits>()
        .map_or(usize::MAX, |l| l.memory_limit);
    cap.min(crate::keyspace::MAX_STRING)
}

/// Units of work between two looks at the clock.
const STEPS_PER_CHECK: u32 = 1024;

/// The buffer and time budget of one library call.
pub struct Budget<'a> {
    lua: &'a Lua,
    limit: usize,
    steps: u32,
}

/// The refusal of a buffer past [`buffer_limit`], as Lua says it.
pub const NO_MEMORY: &str = "not enough memory";

impl<'a> Budget<'a> {
    /// The budget of a call of a function running in `lua`.
    pub fn new(lua: &'a Lua) -> Budget<'a> {
        Budget {
            lua,
            limit: buffer_limit(lua),
            steps: 0,
        }
    }

    /// Whether a buffer holding `len` bytes may take `more`.
    ///
    /// # Errors
    /// [`NO_MEMORY`] past the limit.
    pub fn room(&self, len: usize, more: usize) -> Result<(), String> {
        if len.saturating_add(more) > self.limit {
            return Err(NO_MEMORY.into());
        }
        Ok(())
    }

    /// One unit of work (a table visited); every [`STEPS_PER_CHECK`] a look at the time limit.
    ///
    /// # Errors
    /// Past the time limit; [`crate::script::libargs::answer`] raises the stop itself.
    pub fn step(&mut self) -> Result<(), String> {
        self.steps = self.steps.wrapping_add(1);
        if self.steps % STEPS_PER_CHECK == 0 && super::check_time(self.lua).is_err() {
            return Err("harness: script time limit reached".into());
        }
        Ok(())
    }
}
