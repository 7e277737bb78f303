//! python3 with redis-py, for tests that drive lockkit with a foreign client.

use std::process::Command;
use std::sync::Once;

static PIP: Once = Once::new();

/// A `python3` command that can `import redis`: redis-py is installed from PyPI when missing
/// (as `.ci/run` does).
///
/// # Panics
/// redis-py is missing and cannot be installed (no python3 or pip).
pub fn python_with_redis() -> Command {
    PIP.call_once(|| {
        let have = Command::new("python3")
            .args(["-c", "import redis"])
            .status()
            .is_ok_and(|s| s.success());
        if !have {
            // Debian's own python refuses a plain install (PEP 668) and needs the second form.
            let installed = [&[][..], &["--break-system-packages"][..]]
                .iter()
                .any(|extra| {
                    Command::new("python3")
                        .args(["-m", "pip", "install", "--quiet", "redis"])
                        .args(*extra)
                        .status()
                        .is_ok_and(|s| s.success())
                });
            assert!(
                installed,
                "pip install redis failed (python3 and pip are needed)"
            );
        }
    });
    Command::new("python3")
}
