//! Redis URLs: read once, by a real URL parser, and shown with the password hidden.
//!
//! lockkit accepts what redis-rs accepts (`redis://`, `rediss://` for TLS, `redis+unix://`,
//! `unix://`, user and password in the URL). Everything that shows a URL (logs, errors, reports,
//! the command line) goes through [`redact_url`], so a password is never printed.

use redis::{ConnectionInfo, IntoConnectionInfo};

use crate::error::{Error, Result};

/// Shows a connection URL with any password (or a lone user-info part, which some clients read
/// as a password) replaced by `***`.
///
/// ```
/// use lockkit::redact_url;
/// assert_eq!(redact_url("redis://user:s3cret@localhost:6379/0"), "redis://user:***@localhost:6379/0");
/// assert_eq!(redact_url("redis://s3cret@localhost"), "redis://***@localhost");
/// assert_eq!(redact_url("redis://localhost:6379"), "redis://localhost:6379");
/// assert_eq!(redact_url("rediss://u:p@ss@h/2"), "rediss://u:***@h/2");
/// ```
pub fn redact_url(url: &str) -> String {
    if let Ok(mut parsed) = ::url::Url::parse(url) {
        if parsed.password().is_some() {
            let _ = parsed.set_password(Some("***"));
            return parsed.to_string();
        }
        if !parsed.username().is_empty() {
            let _ = parsed.set_username("***");
            return parsed.to_string();
        }
        if parsed.has_host() || parsed.cannot_be_a_base() || url.contains("://") {
            return url.to_string();
        }
    }
    redact_by_hand(url)
}

/// The fallback for text the URL parser refuses (a half-typed URL in an error message): hide
/// whatever stands between `://` and the last `@` of the authority.
fn redact_by_hand(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_string();
    };
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return url.to_string();
    };
    let userinfo = &rest[..at];
    let shown = match userinfo.find(':') {
        Some(colon) => format!("{}:***", &userinfo[..colon]),
        None if userinfo.is_empty() => String::new(),
        None => "***".to_string(),
    };
    format!("{}{shown}@{}", &url[..scheme_end + 3], &rest[at + 1..])
}

/// Parses a Redis URL into redis-rs's connection settings, with an error that names the URL
/// (password hidden) and says what a valid one looks like.
///
/// ```
/// assert!(lockkit::parse_url("redis://127.0.0.1:6379/0").is_ok());
/// let e = lockkit::parse_url("http://u:pw@host").unwrap_err();
/// assert!(e.to_string().contains("u:***@host"), "{e}");
/// ```
///
/// # Errors
/// [`Error::InvalidOptions`] (field `url`) when the text is not a Redis URL.
pub fn parse_url(url: &str) -> Result<ConnectionInfo> {
    url.into_connection_info().map_err(|e| {
        Error::invalid(
            "url",
            format!(
                "`{}` is not a valid Redis URL: {}; expected redis://[user:password@]host[:port][/db], \
                 rediss:// for TLS, or redis+unix:///path/to/socket",
                redact_url(url),
                e,
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_hides_password_and_lone_userinfo() {
        assert_eq!(redact_url("redis://:pw@h:1"), "redis://:***@h:1");
        assert_eq!(redact_url("redis://secret@host"), "redis://***@host");
        assert_eq!(
            redact_url("redis://h:1/0?password=x"),
            "redis://h:1/0?password=x"
        );
        assert_eq!(redact_url("not a url"), "not a url");
        assert_eq!(redact_url("redis://u:p w@h"), "redis://u:***@h");
    }

    #[test]
    fn a_bad_url_says_what_redis_rs_found() {
        let e = parse_url("redis://").unwrap_err().to_string();
        assert!(
            e.contains("`redis://` is not a valid Redis URL: Missing hostname"),
            "{e}"
        );
    }

    #[test]
    fn bad_urls_are_invalid_options_naming_url() {
        for bad in ["", "localhost:6379", "http://h"] {
            match parse_url(bad) {
                Err(Error::InvalidOptions { field: "url", .. }) => {}
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }
}
