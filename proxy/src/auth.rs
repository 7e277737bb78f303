//! Who may log in at the proxy ([`ClientAuth`]): `--requirepass` (the user `default`),
//! `--user NAME:PASSWORD`, `--users-file`. The login itself, as Redis checks it (`-NOAUTH`
//! before `AUTH`, `AUTH`, `HELLO <proto> AUTH`), is the client side's
//! (`crate::client`'s `login` module); every proxy user reaches the upstream server as the
//! upstream URL's user.

use std::path::Path;

/// The users clients log in as at the proxy: `--requirepass` (the user `default`) and
/// `--user NAME:PASSWORD`.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ClientAuth {
    /// (name, password); `default` is the one `AUTH PASSWORD` checks.
    users: Vec<(String, String)>,
}

impl std::fmt::Debug for ClientAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.users.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("ClientAuth")
            .field("users", &names)
            .finish_non_exhaustive()
    }
}

/// The user `AUTH PASSWORD` logs in as (Redis's name).
pub(crate) const DEFAULT_USER: &str = "default";

impl ClientAuth {
    /// No users yet: every client is let in until one is added.
    pub fn new() -> Self {
        Self::default()
    }

    /// Clients log in with `AUTH password` (the user `default`).
    ///
    /// # Errors
    /// An empty password.
    pub fn requirepass(self, password: &str) -> Result<Self, String> {
        self.user(DEFAULT_USER, password)
    }

    /// A named user: `AUTH name password`.
    ///
    /// # Errors
    /// An empty name or password, a name with spaces, a name given twice.
    pub fn user(mut self, name: &str, password: &str) -> Result<Self, String> {
        if name.is_empty() || name.chars().any(char::is_whitespace) {
            return Err(format!(
                "user name `{name}`: must be non-empty and without spaces"
            ));
        }
        if password.is_empty() {
            return Err(format!("user `{name}`: empty password"));
        }
        if self.users.iter().any(|(n, _)| n == name) {
            return Err(format!("user `{name}` is given twice"));
        }
        self.users.push((name.to_string(), password.to_string()));
        Ok(self)
    }

    /// Adds `NAME:PASSWORD` (the password may hold `:`).
    ///
    /// ```
    /// use lockkit_proxy::ClientAuth;
    /// let auth = ClientAuth::new().user_spec("orders:pw:with:colons").unwrap();
    /// assert!(auth.is_required());
    /// assert!(ClientAuth::new().user_spec("no-password").is_err());
    /// ```
    ///
    /// # Errors
    /// No `:`, or what [`ClientAuth::user`] refuses.
    pub fn user_spec(self, spec: &str) -> Result<Self, String> {
        let Some((name, password)) = spec.split_once(':') else {
            return Err("expected NAME:PASSWORD".into());
        };
        self.user(name, password)
    }

    /// Adds the users of a file: one `NAME:PASSWORD` a line; blank lines and `#` comments.
    ///
    /// # Errors
    /// The file cannot be read, or a line is not a valid user (its number is named, never its
    /// password).
    pub fn users_file(mut self, path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("reading {}: {e}", path.display()))?;
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            self = self
                .user_spec(line)
                .map_err(|e| format!("{} line {}: {e}", path.display(), i + 1))?;
        }
        Ok(self)
    }

    /// Whether clients must log in.
    pub fn is_required(&self) -> bool {
        !self.users.is_empty()
    }

    /// The user names, `default` for `--requirepass`.
    pub fn user_names(&self) -> Vec<&str> {
        self.users.iter().map(|(n, _)| n.as_str()).collect()
    }

    /// Whether `password` is user `name`'s.
    pub(crate) fn check(&self, name: &[u8], password: &[u8]) -> bool {
        // Every user is compared, in time that does not depend on where the bytes differ.
        let mut ok = false;
        for (n, p) in &self.users {
            ok |= n.as_bytes() == name && same_bytes(p.as_bytes(), password);
        }
        ok
    }
}

fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let mut diff = a.len() ^ b.len();
    for (i, x) in a.iter().enumerate() {
        diff |= usize::from(x ^ b.get(i).copied().unwrap_or(!x));
    }
    diff == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth() -> ClientAuth {
        ClientAuth::new()
            .requirepass("pw")
            .unwrap()
            .user("app", "apw")
            .unwrap()
    }

    #[test]
    fn passwords_are_checked_per_user() {
        let a = auth();
        assert!(a.check(b"default", b"pw") && a.check(b"app", b"apw"));
        assert!(!a.check(b"app", b"pw") && !a.check(b"default", b"p") && !a.check(b"x", b"pw"));
    }

    #[test]
    fn the_debug_form_names_users_not_passwords() {
        let text = format!("{:?}", auth());
        assert!(text.contains("app") && !text.contains("apw"), "{text}");
    }
}
