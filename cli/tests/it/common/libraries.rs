//! Real client libraries run against a server by the CLI tests: their packages installed from
//! PyPI and npm into a cache under the target directory when missing, and a flow in
//! cli/tests/libraries run with them (what it printed).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// Where the test's Python packages are installed (`pip install --target`).
pub(crate) fn pydeps() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("pydeps")
}

/// Installs `packages` (the first importable as `module`) into [`pydeps`] unless it is there.
pub(crate) fn pip_install(packages: &[&str], module: &str) {
    pip_install_into(&pydeps(), packages, module);
}

/// Installs `packages` into `dir` (`pip install --target`) unless `module` is there.
fn pip_install_into(dir: &Path, packages: &[&str], module: &str) {
    // One install at a time in this binary: the modules' tests share [`pydeps`].
    static INSTALLING: Mutex<()> = Mutex::new(());
    let _one = INSTALLING.lock().unwrap_or_else(|p| p.into_inner());
    if dir.join(module).exists() {
        return;
    }
    let ok = [&[][..], &["--break-system-packages"][..]]
        .iter()
        .any(|extra| {
            Command::new("python3")
                .args(["-m", "pip", "install", "--quiet", "--target"])
                .arg(dir)
                .args(packages)
                .args(*extra)
                .status()
                .is_ok_and(|s| s.success())
        });
    assert!(
        ok,
        "pip install --target {} {packages:?} failed",
        dir.display()
    );
}

/// Where the test's npm packages are installed (`npm install --prefix`).
pub(crate) fn npm_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("npm")
}

/// Installs `packages` (`name@version`) into [`npm_dir`] unless each is there.
pub(crate) fn npm_install(packages: &[&str]) {
    // Two tests of this binary installing into one directory at once would collide.
    static INSTALLING: Mutex<()> = Mutex::new(());
    let _one = INSTALLING.lock().unwrap_or_else(|p| p.into_inner());
    let dir = npm_dir();
    let missing = packages.iter().any(|p| {
        let name = p.rsplit_once('@').map_or(*p, |(n, _)| n);
        !dir.join("node_modules").join(name).exists()
    });
    if !missing {
        return;
    }
    std::fs::create_dir_all(&dir).expect("the npm directory is created");
    let ok = Command::new("npm")
        .args(["install", "--no-audit", "--no-fund", "--silent", "--prefix"])
        .arg(&dir)
        .args(packages)
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "npm install --prefix {} {packages:?} failed",
        dir.display()
    );
}

/// Runs `script` (in cli/tests/libraries) with `program` (`python3` or `node`, finding the
/// packages installed above) against the server on `port`, `args` after the port: what it
/// printed.
pub(crate) fn observe(program: &str, script: &str, port: u16, args: &[&str]) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/libraries")
        .join(script);
    let (path_var, deps) = if program == "node" {
        ("NODE_PATH", npm_dir().join("node_modules"))
    } else {
        ("PYTHONPATH", pydeps())
    };
    let out = Command::new("timeout")
        .arg("60")
        .arg(program)
        .arg(&path)
        .arg(port.to_string())
        .args(args)
        .env(path_var, deps)
        .output()
        .expect("the library's interpreter runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success() && !stderr.contains("not emulated"),
        "{script} against port {port} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    stdout
}

/// A directory of its own under the target directory for `packages` (pinned `name==version`),
/// installed there unless `module` is: a library whose versions differ in what they send is
/// tested at each version without one install replacing the other (`pip install --target`
/// keeps a package already in [`pydeps`]).
pub(crate) fn pip_install_pinned(packages: &[&str], module: &str) -> PathBuf {
    let name: Vec<String> = packages.iter().map(|p| p.replace("==", "-")).collect();
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("pydeps-{}", name.join("+")));
    pip_install_into(&dir, packages, module);
    dir
}

/// [`observe`] of a Python flow with the packages of `deps` (a [`pip_install_pinned`]
/// directory).
pub(crate) fn observe_with(deps: &Path, script: &str, port: u16, args: &[&str]) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/libraries")
        .join(script);
    let out = Command::new("timeout")
        .arg("60")
        .arg("python3")
        .arg(&path)
        .arg(port.to_string())
        .args(args)
        .env("PYTHONPATH", deps)
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success() && !stderr.contains("not emulated"),
        "{script} against port {port} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    stdout
}
