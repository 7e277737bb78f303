//! The Lua scripts, compiled into the library from `lua/` (the one source of truth).
//!
//! The same text is run by the client (EVALSHA/EVAL), by the offline harness and by the load
//! generator. The Redis Function library (`FUNCTION LOAD`/`FCALL`) is composed from the very same
//! script files by [`function_library`], so the two forms can never drift apart.
//!
//! What a client loads in function mode is that library under a name that carries its
//! content's hash ([`loaded_library`]: `lockkit_<hash>`, functions `lockkit_<hash>_NAME`): a
//! client never replaces a library another version of lockkit loaded, so during a rolling
//! upgrade old and new clients each call their own functions, with their own argument layout.

use std::sync::LazyLock;

/// A script: its file name, its text and its SHA1 (the `EVALSHA` handle).
#[derive(Debug)]
pub struct LuaScript {
    name: &'static str,
    source: &'static str,
    sha: LazyLock<String>,
    fcall: LazyLock<String>,
}

impl LuaScript {
    /// The script's name: its file name without `.lua` (`release`, `extend`, ...).
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The script text, exactly as in `lua/NAME.lua`.
    pub fn source(&self) -> &'static str {
        self.source
    }

    /// The SHA1 of the text in lowercase hex, as `SCRIPT LOAD` returns it.
    pub fn sha(&self) -> &str {
        &self.sha
    }

    /// The name under which the Function library registers this script (`lockkit_NAME`).
    pub fn function_name(&self) -> String {
        format!("lockkit_{}", self.name)
    }

    /// The name under which [`loaded_library`] registers this script, the one a client in
    /// function mode calls: `lockkit_<hash>_NAME` (see [`library_tag`]).
    pub fn loaded_function_name(&self) -> &str {
        &self.fcall
    }

    /// `SCRIPT LOAD` of the text: caches it on the server, answers its SHA.
    pub(crate) fn load_cmd(&self) -> redis::Cmd {
        let mut cmd = redis::cmd("SCRIPT");
        cmd.arg("LOAD").arg(self.source);
        cmd
    }
}

macro_rules! script {
    ($name:literal) => {
        LuaScript {
            sha: LazyLock::new(|| {
                sha1_smol::Sha1::from(include_str!(concat!("../lua/", $name, ".lua")))
                    .digest()
                    .to_string()
            }),
            name: $name,
            source: include_str!(concat!("../lua/", $name, ".lua")),
            fcall: LazyLock::new(|| format!("lockkit_{}_{}", library_tag(), $name)),
        }
    };
}

/// Compare-and-delete: `1` released, `0` not held, `-1` held by another token.
pub static RELEASE: LuaScript = script!("release");
/// Compare-and-PEXPIRE: `1` extended, `0` not held, `-1` held by another token.
pub static EXTEND: LuaScript = script!("extend");
/// `SET NX PX` plus `INCR` of a fencing counter in one step: the token (> 0), or `0` when busy.
pub static ACQUIRE_FENCED: LuaScript = script!("acquire_fenced");
/// Fair acquire: take the lock when free and it is the caller's turn, or queue up in Redis:
/// `{0, ttl}` acquired, `{place, pttl}` queued.
pub static ACQUIRE_FAIR: LuaScript = script!("acquire_fair");
/// Compare-and-delete of a fair lock that wakes the queue's head: `1`, `0`, `-1` as [`RELEASE`].
pub static RELEASE_FAIR: LuaScript = script!("release_fair");
/// A waiter leaves the fair queue (waking the next one when it was the head): `1` left, `0` not
/// queued.
pub static LEAVE_FAIR: LuaScript = script!("leave_fair");

/// A semaphore's permit: taken when fewer than N leases are live: `{1, holders}` acquired,
/// `{0, holders}` busy. Ended leases are purged and the key's TTL kept at the longest lease.
pub static SEMAPHORE_ACQUIRE: LuaScript = script!("semaphore_acquire");
/// A semaphore's permit given back: `1` released, `0` not held.
pub static SEMAPHORE_RELEASE: LuaScript = script!("semaphore_release");
/// A semaphore's permit renewed: `1` extended, `0` not held.
pub static SEMAPHORE_EXTEND: LuaScript = script!("semaphore_extend");
/// A read-write lock taken for reading or writing: `{1, readers}` acquired, `{0, why}` busy.
pub static RW_ACQUIRE: LuaScript = script!("rw_acquire");
/// A read-write lock given back by its holder: `1`, `0`, `-1` as [`RELEASE`].
pub static RW_RELEASE: LuaScript = script!("rw_release");
/// A read-write lock's lease renewed by its holder: `1`, `0`, `-1` as [`EXTEND`].
pub static RW_EXTEND: LuaScript = script!("rw_extend");
/// A write hold turned into a read hold under the same token: `1`, `0`, `-1`.
pub static RW_DOWNGRADE: LuaScript = script!("rw_downgrade");

/// A write accepted only from a fencing token at least the highest seen: `1` written, `0`
/// refused (a newer token wrote already).
pub static FENCED_SET: LuaScript = script!("fenced_set");

/// Every script the library uses, in a fixed order.
pub static ALL: [&LuaScript; 14] = [
    &RELEASE,
    &EXTEND,
    &ACQUIRE_FENCED,
    &ACQUIRE_FAIR,
    &RELEASE_FAIR,
    &LEAVE_FAIR,
    &SEMAPHORE_ACQUIRE,
    &SEMAPHORE_RELEASE,
    &SEMAPHORE_EXTEND,
    &RW_ACQUIRE,
    &RW_RELEASE,
    &RW_EXTEND,
    &RW_DOWNGRADE,
    &FENCED_SET,
];

/// The name of the Function library.
pub const LIBRARY_NAME: &str = "lockkit";

/// The Redis Function library (`#!lua name=lockkit`) built from the script files: each script's
/// body becomes `redis.register_function('lockkit_NAME', function(KEYS, ARGV) ... end)`.
///
/// `lua/lockkit.functions.lua` holds the same text for `redis-cli FUNCTION LOAD`; a test checks
/// the two are equal.
pub fn function_library() -> String {
    library_text(LIBRARY_NAME, "lockkit_")
}

/// The first 12 hex digits of the SHA1 of [`function_library`]: what tells one version of the
/// scripts from another.
pub fn library_tag() -> &'static str {
    static TAG: LazyLock<String> = LazyLock::new(|| {
        let sha = sha1_smol::Sha1::from(function_library())
            .digest()
            .to_string();
        sha[..12].to_string()
    });
    &TAG
}

/// The library a client in function mode loads (`FUNCTION LOAD REPLACE`): [`function_library`]
/// named `lockkit_<tag>`, each function `lockkit_<tag>_NAME` ([`library_tag`]). Another version
/// of lockkit has another tag, so loading it never replaces (or clashes with) the library an
/// older or newer client uses; replacing it replaces the very same text.
pub fn loaded_library() -> &'static str {
    static TEXT: LazyLock<String> = LazyLock::new(|| {
        let tag = library_tag();
        library_text(&format!("lockkit_{tag}"), &format!("lockkit_{tag}_"))
    });
    &TEXT
}

/// The library text under `name`, each script registered as `prefix` + its name.
fn library_text(name: &str, prefix: &str) -> String {
    let mut out = format!(
        "#!lua name={name}\n\
         -- lockkit's scripts as a Redis Function library. GENERATED from lua/*.lua by\n\
         -- lockkit::scripts::function_library(); edit the script files, not this one.\n"
    );
    for script in ALL {
        out.push_str(&format!(
            "\nredis.register_function('{prefix}{}', function(KEYS, ARGV)\n",
            script.name
        ));
        for line in script.source.lines() {
            if line.is_empty() {
                out.push('\n');
            } else {
                out.push_str("  ");
                out.push_str(line);
                out.push('\n');
            }
        }
        out.push_str("end)\n");
    }
    out
}

/// `FUNCTION LOAD REPLACE` of [`loaded_library`]: (re)loads this version's library on the
/// server, leaving other versions' libraries alone.
pub(crate) fn function_load_cmd() -> redis::Cmd {
    let mut cmd = redis::cmd("FUNCTION");
    cmd.arg("LOAD").arg("REPLACE").arg(loaded_library());
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha_matches_known_sha1_of_text() {
        // sha1("") is the classic constant; our scripts' SHAs are 40 lowercase hex digits.
        assert_eq!(
            sha1_smol::Sha1::from("").digest().to_string(),
            "da39a3ee5e6b4b0d3255bfef95601890afd80709"
        );
        for s in ALL {
            assert_eq!(s.sha().len(), 40);
            assert!(s
                .sha()
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        }
        assert_ne!(RELEASE.sha(), EXTEND.sha());
    }

    #[test]
    fn every_script_documents_keys_argv_and_replies() {
        for s in ALL {
            let header: String = s
                .source()
                .lines()
                .take_while(|l| l.starts_with("--"))
                .collect();
            for word in ["KEYS[1]", "ARGV[1]", "Replies"] {
                assert!(header.contains(word), "{} header lacks {word}", s.name());
            }
        }
    }

    #[test]
    fn the_loaded_library_carries_the_tag_of_its_text_in_every_name() {
        let tag = library_tag();
        assert_eq!(tag.len(), 12);
        let text = loaded_library();
        assert!(
            text.starts_with(&format!("#!lua name=lockkit_{tag}\n")),
            "{text}"
        );
        for script in ALL {
            let name = script.loaded_function_name();
            assert_eq!(name, format!("lockkit_{tag}_{}", script.name()));
            assert!(
                text.contains(&format!("register_function('{name}',")),
                "{name}"
            );
        }
        // The same scripts as the committed library, under other names.
        assert_eq!(
            text.replace(&format!("lockkit_{tag}"), "lockkit"),
            function_library()
        );
    }

    #[test]
    fn committed_function_library_is_generated_text() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/lua/lockkit.functions.lua");
        if std::env::var_os("LOCKKIT_REGENERATE").is_some() {
            std::fs::write(path, function_library()).expect("write lua/lockkit.functions.lua");
        }
        let committed = std::fs::read_to_string(path).expect("read lua/lockkit.functions.lua");
        assert_eq!(
            committed,
            function_library(),
            "lua/lockkit.functions.lua is stale: regenerate it with \
             `LOCKKIT_REGENERATE=1 cargo test -p lockkit --lib scripts`"
        );
    }
}
