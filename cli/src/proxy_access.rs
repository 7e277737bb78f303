//! Who may use the proxy, as `lockkit proxy` is told on its command line: client passwords
//! (`--requirepass`, `--user`, `--users-file`) and protected mode, which refuses a listener
//! that other hosts reach while nobody has to log in (as redis-server's protected mode does).

use std::net::ToSocketAddrs;
use std::path::PathBuf;

use lockkit_proxy::{ClientAuth, ListenerTls};

/// Client authentication and protected mode.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct AccessArgs {
    /// Clients must log in with `AUTH PASSWORD` before any command (the user `default`).
    /// Every client reaches the upstream as the --upstream URL's user.
    #[arg(
        long,
        env = "LOCKKIT_PROXY_REQUIREPASS",
        hide_env_values = true,
        value_name = "PASSWORD"
    )]
    pub requirepass: Option<String>,

    /// --requirepass read from a file (its first line; re-read on SIGHUP): the password kept
    /// off the command line and the environment, as a mounted secret.
    #[arg(
        long,
        env = "LOCKKIT_PROXY_REQUIREPASS_FILE",
        value_name = "FILE",
        conflicts_with = "requirepass"
    )]
    pub requirepass_file: Option<PathBuf>,

    /// A named user, `AUTH NAME PASSWORD` (repeatable): one secret per application.
    #[arg(long = "user", value_name = "NAME:PASSWORD")]
    pub users: Vec<String>,

    /// Named users from a file, one `NAME:PASSWORD` a line (`#` comments): passwords kept off
    /// the command line.
    #[arg(long, value_name = "FILE")]
    pub users_file: Option<PathBuf>,

    /// Listen on an address other hosts reach without client authentication (protected mode
    /// refuses it otherwise): anyone who reaches the proxy uses the upstream as its user.
    #[arg(long)]
    pub no_protected_mode: bool,

    /// TLS on the listener: the certificate chain (PEM, leaf first); needs --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// The listener's private key (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// Clients must present a certificate signed by one of these CAs (PEM); counts as client
    /// authentication for protected mode.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_ca: Option<PathBuf>,
}

impl AccessArgs {
    /// The users clients log in as.
    ///
    /// # Errors
    /// A `--user` without `:`, an empty password, a name given twice, an unreadable users file
    /// (the text names the flag, never a password).
    pub(crate) fn client_auth(&self) -> Result<ClientAuth, String> {
        let mut auth = ClientAuth::new();
        if let Some(pw) = &self.requirepass {
            auth = auth
                .requirepass(pw)
                .map_err(|e| format!("--requirepass: {e}"))?;
        }
        if let Some(file) = &self.requirepass_file {
            let pw = read_secret_file("--requirepass-file", file)?;
            auth = auth
                .requirepass(&pw)
                .map_err(|e| format!("--requirepass-file {}: {e}", file.display()))?;
        }
        for spec in &self.users {
            let name = spec.split_once(':').map_or("", |(n, _)| n);
            auth = auth
                .user_spec(spec)
                .map_err(|e| format!("--user {name}:***: {e}"))?;
        }
        if let Some(file) = &self.users_file {
            check_secret_file_mode("--users-file", file)?;
            auth = auth
                .users_file(file)
                .map_err(|e| format!("--users-file: {e}"))?;
        }
        Ok(auth)
    }

    /// The listener's TLS, from `--tls-cert`, `--tls-key` and `--tls-ca` (`None` without them).
    ///
    /// # Errors
    /// A file that cannot be read or does not hold what it should.
    pub(crate) fn listener_tls(&self) -> Result<Option<ListenerTls>, String> {
        match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => {
                ListenerTls::from_pem_files(cert, key, self.tls_ca.as_deref()).map(Some)
            }
            _ => Ok(None),
        }
    }

    /// Protected mode: refuses `listen` when other hosts reach it and nobody has to log in.
    ///
    /// # Errors
    /// The refusal, naming the flags that lift it.
    pub(crate) fn check_protected(&self, listen: &str, auth: &ClientAuth) -> Result<(), String> {
        let client_certs = self.tls_ca.is_some();
        if auth.is_required() || client_certs || self.no_protected_mode || is_loopback(listen) {
            return Ok(());
        }
        Err(format!(
            "--listen {listen} is reachable from other hosts and no client has to log in \
             (protected mode): anyone who reaches it would use the upstream as its URL's user. \
             Set client passwords with --requirepass, --user NAME:PASSWORD or --users-file, \
             or pass --no-protected-mode to accept that"
        ))
    }
}

/// A secret's first line, from `file` (given as `flag`): its mode checked as a users file's,
/// the line's end (`\n` or `\r\n`) left out. The text of an error never holds the secret.
///
/// # Errors
/// The file cannot be read, others may write it, or its first line is empty.
pub(crate) fn read_secret_file(flag: &str, file: &std::path::Path) -> Result<String, String> {
    check_secret_file_mode(flag, file)?;
    let text =
        std::fs::read_to_string(file).map_err(|e| format!("{flag} {}: {e}", file.display()))?;
    let line = text
        .lines()
        .next()
        .unwrap_or_default()
        .trim_end_matches('\r');
    if line.is_empty() {
        return Err(format!(
            "{flag} {}: its first line is empty",
            file.display()
        ));
    }
    Ok(line.to_string())
}

/// A file of secrets others may write is refused (anyone could add a user or set the
/// password); one others may read is warned about, as ssh does for its keys.
fn check_secret_file_mode(flag: &str, file: &std::path::Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = std::fs::metadata(file) else {
        return Ok(()); // reading it names the error
    };
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o022 != 0 {
        return Err(format!(
            "{flag} {}: others may write it (mode {mode:03o}): anyone could change who may \
             log in; chmod 600 it",
            file.display()
        ));
    }
    if mode & 0o044 != 0 {
        eprintln!(
            "lockkit proxy: warning: {flag} {} is readable by others (mode {mode:03o}): \
             chmod 600 it",
            file.display()
        );
    }
    Ok(())
}

/// Whether every address `listen` names is a loopback one (one that does not resolve counts
/// as reachable: binding it fails later with its own message).
pub(crate) fn is_loopback(listen: &str) -> bool {
    match listen.to_socket_addrs() {
        Ok(addrs) => {
            let addrs: Vec<_> = addrs.collect();
            !addrs.is_empty() && addrs.iter().all(|a| a.ip().is_loopback())
        }
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_listeners_need_no_login() {
        let open = AccessArgs::default();
        let none = ClientAuth::new();
        for ok in [
            "127.0.0.1:7000",
            "[::1]:7000",
            "localhost:7000",
            "127.0.0.2:0",
        ] {
            assert!(open.check_protected(ok, &none).is_ok(), "{ok}");
        }
        for refused in ["0.0.0.0:7000", "[::]:7000", "10.1.2.3:7000"] {
            let e = open.check_protected(refused, &none).unwrap_err();
            assert!(
                e.contains("--requirepass") && e.contains("--no-protected-mode"),
                "{e}"
            );
        }
        let with_user = AccessArgs {
            users: vec!["app:pw".into()],
            ..AccessArgs::default()
        };
        let auth = with_user.client_auth().unwrap();
        assert!(with_user.check_protected("0.0.0.0:7000", &auth).is_ok());
        let opted_out = AccessArgs {
            no_protected_mode: true,
            ..AccessArgs::default()
        };
        assert!(opted_out.check_protected("0.0.0.0:7000", &none).is_ok());
    }

    #[test]
    fn a_bad_user_is_named_without_its_password() {
        let args = AccessArgs {
            users: vec!["app:s3cret".into(), "app:other-s3cret".into()],
            ..AccessArgs::default()
        };
        let e = args.client_auth().unwrap_err();
        assert!(e.contains("--user app:***") && !e.contains("s3cret"), "{e}");
    }
}
