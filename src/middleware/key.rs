//! Which requests are "the same": the user extractor and the key builder.
//!
//! The default key is `{prefix}:{user}:{METHOD}:{path}:{digest}`, where `digest` is the first
//! 16 bytes (32 hex digits) of SHA-256 over the query string and the body. User and path are
//! escaped so that no user or path can forge another's key (`:` and every byte outside a small
//! safe set become `%XX`), and replaced by a digest when they are too long for a readable key.

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;

use http::request::Parts;
use http::{Extensions, HeaderName};
use sha2::{Digest, Sha256};

/// The user segment used when the extractor finds nobody.
pub const ANONYMOUS: &str = "-";

/// Escaped user or path segments longer than this are replaced by `#` + a digest.
const MAX_SEGMENT: usize = 200;

/// Tells who sent a request; requests of different users never block each other.
///
/// Implemented for closures `Fn(&Parts) -> Option<String>`, so an authenticated user id put into
/// the request extensions by an earlier layer can be read with one line:
///
/// ```
/// # #[derive(Clone)] struct UserId(String);
/// use lockkit::middleware::UserExtractor;
/// let from_auth = |parts: &http::request::Parts| parts.extensions.get::<UserId>().map(|u| u.0.clone());
/// # fn takes(_: impl UserExtractor) {}
/// # takes(from_auth);
/// ```
pub trait UserExtractor: Send + Sync + 'static {
    /// The user's id, or `None` when unknown (the key then uses [`ANONYMOUS`]).
    fn user(&self, parts: &Parts) -> Option<String>;
}

impl<F> UserExtractor for F
where
    F: Fn(&Parts) -> Option<String> + Send + Sync + 'static,
{
    fn user(&self, parts: &Parts) -> Option<String> {
        self(parts)
    }
}

type AddrFn = dyn Fn(&Extensions) -> Option<String> + Send + Sync;

/// The default user extractor: a header (default `x-user-id`), falling back to the client
/// address.
///
/// The address comes from a `SocketAddr` in the request extensions unless
/// [`client_addr`](Self::client_addr) says otherwise; with axum's
/// `into_make_service_with_connect_info::<SocketAddr>()` point it at `ConnectInfo`:
///
/// ```ignore
/// HeaderUser::new("x-user-id").client_addr(|ext| {
///     ext.get::<axum::extract::ConnectInfo<SocketAddr>>().map(|c| c.0.ip().to_string())
/// })
/// ```
///
/// A header is what the client says it is: use it when a gateway in front sets it after
/// authentication, or plug in an extractor that reads your authenticated user.
#[derive(Clone)]
pub struct HeaderUser {
    header: HeaderName,
    addr: Arc<AddrFn>,
}

impl fmt::Debug for HeaderUser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HeaderUser")
            .field("header", &self.header)
            .finish_non_exhaustive()
    }
}

impl Default for HeaderUser {
    fn default() -> Self {
        HeaderUser::new(HeaderName::from_static("x-user-id"))
    }
}

impl HeaderUser {
    /// Reads `header`; falls back to the client IP from a `SocketAddr` extension.
    pub fn new(header: HeaderName) -> Self {
        HeaderUser {
            header,
            addr: Arc::new(|ext: &Extensions| ext.get::<SocketAddr>().map(|a| a.ip().to_string())),
        }
    }

    /// How to find the client address when the header is absent.
    #[must_use]
    pub fn client_addr<F>(mut self, f: F) -> Self
    where
        F: Fn(&Extensions) -> Option<String> + Send + Sync + 'static,
    {
        self.addr = Arc::new(f);
        self
    }
}

impl UserExtractor for HeaderUser {
    fn user(&self, parts: &Parts) -> Option<String> {
        let from_header = parts
            .headers
            .get(&self.header)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).trim().to_string())
            .filter(|v| !v.is_empty());
        from_header.or_else(|| (self.addr)(&parts.extensions))
    }
}

/// What a key builder sees of a request.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct KeyInput<'a> {
    /// The configured key prefix, e.g. `lockkit:submit`.
    pub prefix: &'a str,
    /// The user, as the extractor found it ([`ANONYMOUS`] when it found nobody).
    pub user: &'a str,
    /// Method, URI, headers and extensions.
    pub parts: &'a Parts,
    /// The whole body, as buffered.
    pub body: &'a [u8],
}

/// Turns a request into its lock key; `None` lets the request through unguarded.
pub trait KeyBuilder: Send + Sync + 'static {
    /// The lock key for this request, or `None` to skip the guard.
    fn key(&self, input: &KeyInput<'_>) -> Option<String>;
}

impl<F> KeyBuilder for F
where
    F: Fn(&KeyInput<'_>) -> Option<String> + Send + Sync + 'static,
{
    fn key(&self, input: &KeyInput<'_>) -> Option<String> {
        self(input)
    }
}

/// The default key: `{prefix}:{user}:{METHOD}:{path}:{digest of query and body}`.
#[derive(Debug, Clone, Copy, Default)]
pub struct DefaultKeyBuilder;

impl KeyBuilder for DefaultKeyBuilder {
    fn key(&self, input: &KeyInput<'_>) -> Option<String> {
        let uri = &input.parts.uri;
        Some(request_key(
            input.prefix,
            input.user,
            input.parts.method.as_str(),
            uri.path(),
            uri.query().unwrap_or(""),
            input.body,
        ))
    }
}

/// The default key from its pieces.
///
/// ```
/// let k = lockkit::middleware::request_key("lockkit:submit", "alice", "POST", "/orders", "", b"{}");
/// assert_eq!(k, "lockkit:submit:alice:POST:/orders:9bf2cdb8cad05b1300c3c1eb12770a9a");
/// ```
pub fn request_key(
    prefix: &str,
    user: &str,
    method: &str,
    path: &str,
    query: &str,
    body: &[u8],
) -> String {
    format!(
        "{prefix}:{}:{}:{}:{}",
        segment(user),
        segment(method),
        segment(path),
        body_digest(query.as_bytes(), body)
    )
}

/// The first 16 bytes of SHA-256 over `query`, a separator and `body`, as 32 hex digits.
pub fn body_digest(query: &[u8], body: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update((query.len() as u64).to_be_bytes());
    h.update(query);
    h.update(body);
    hex(&h.finalize()[..16])
}

/// The idempotency fingerprint of a request: the first 16 bytes of SHA-256 over its method,
/// path, query and body, each length-prefixed so that no part can shift into another.
pub(crate) fn request_fingerprint(method: &str, path: &str, query: &str, body: &[u8]) -> String {
    let mut h = Sha256::new();
    for part in [method.as_bytes(), path.as_bytes(), query.as_bytes(), body] {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part);
    }
    hex(&h.finalize()[..16])
}

/// SHA-256 of `data`, shortened to 16 bytes of hex.
pub(crate) fn short_digest(data: &[u8]) -> String {
    hex(&Sha256::digest(data)[..16])
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// Escapes a key segment: keeps `A-Z a-z 0-9 - _ . ~ / @ + =`, writes every other byte as `%XX`
/// (so `:` can only ever be a separator); too long a segment becomes `#` + its digest.
pub(crate) fn segment(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    for &b in raw.as_bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~/@+=".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    if out.len() > MAX_SEGMENT {
        format!("#{}", short_digest(raw.as_bytes()))
    } else {
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Request;

    fn parts(method: &str, uri: &str, headers: &[(&str, &str)]) -> Parts {
        let mut b = Request::builder().method(method).uri(uri);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap().into_parts().0
    }

    fn key(user: &str, p: &Parts, body: &[u8]) -> String {
        DefaultKeyBuilder
            .key(&KeyInput {
                prefix: "p",
                user,
                parts: p,
                body,
            })
            .unwrap()
    }

    #[test]
    fn same_request_gives_same_key() {
        let a = parts("POST", "/orders", &[]);
        let b = parts("POST", "/orders", &[("x-other", "1")]);
        assert_eq!(key("u", &a, b"{\"x\":1}"), key("u", &b, b"{\"x\":1}"));
    }

    #[test]
    fn key_has_readable_layout() {
        let p = parts("POST", "/orders", &[]);
        let k = key("alice", &p, b"{}");
        assert!(k.starts_with("p:alice:POST:/orders:"), "{k}");
        assert_eq!(k.rsplit(':').next().unwrap().len(), 32);
    }

    #[test]
    fn body_user_method_path_and_query_each_change_the_key() {
        let base = key("u", &parts("POST", "/orders", &[]), b"a");
        assert_ne!(base, key("u", &parts("POST", "/orders", &[]), b"b"));
        assert_ne!(base, key("v", &parts("POST", "/orders", &[]), b"a"));
        assert_ne!(base, key("u", &parts("PUT", "/orders", &[]), b"a"));
        assert_ne!(base, key("u", &parts("POST", "/orders/1", &[]), b"a"));
        assert_ne!(base, key("u", &parts("POST", "/orders?x=1", &[]), b"a"));
    }

    #[test]
    fn query_and_body_cannot_be_shifted_into_each_other() {
        assert_ne!(body_digest(b"ab", b"c"), body_digest(b"a", b"bc"));
    }

    #[test]
    fn a_user_cannot_forge_another_users_key() {
        // Without escaping, user "a:POST:/x" + path "/y" would read like user "a" + ... .
        let p = parts("POST", "/y", &[]);
        let forged = key("a:POST:/x", &p, b"");
        assert!(forged.starts_with("p:a%3APOST%3A/x:POST:/y:"), "{forged}");
        assert_eq!(forged.matches(':').count(), 4);
    }

    #[test]
    fn non_ascii_and_control_bytes_are_escaped() {
        assert_eq!(segment("zoë\n"), "zo%C3%AB%0A");
        assert_eq!(segment("100%"), "100%25");
    }

    #[test]
    fn long_segments_become_a_digest() {
        let long = "x".repeat(5000);
        let s = segment(&long);
        assert_eq!(s.len(), 33);
        assert!(s.starts_with('#'));
        assert_ne!(s, segment(&"x".repeat(5001)));
        let k = request_key("p", &long, "POST", &format!("/{long}"), "", b"");
        assert!(k.len() < 200, "{k}");
    }

    #[test]
    fn fingerprint_parts_cannot_be_shifted_into_each_other() {
        let base = request_fingerprint("POST", "/a", "q", b"body");
        assert_eq!(base.len(), 32);
        assert_eq!(base, request_fingerprint("POST", "/a", "q", b"body"));
        assert_ne!(base, request_fingerprint("POST", "/aq", "", b"body"));
        assert_ne!(base, request_fingerprint("POST", "/a", "qb", b"ody"));
        assert_ne!(base, request_fingerprint("PUT", "/a", "q", b"body"));
    }

    #[test]
    fn digest_is_sha256_prefix() {
        // SHA-256 of 8 zero bytes (the query length) and nothing else.
        assert_eq!(short_digest(&[0u8; 8]), body_digest(b"", b""));
        assert_eq!(
            short_digest(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223" // SHA-256("abc"), first 16 bytes
        );
    }

    #[test]
    fn header_user_prefers_header_then_socket_addr() {
        let mut p = parts("POST", "/", &[("x-user-id", " alice ")]);
        p.extensions
            .insert("10.0.0.7:5555".parse::<SocketAddr>().unwrap());
        assert_eq!(HeaderUser::default().user(&p).as_deref(), Some("alice"));
        p.headers.clear();
        assert_eq!(HeaderUser::default().user(&p).as_deref(), Some("10.0.0.7"));
        p.extensions.clear();
        assert_eq!(HeaderUser::default().user(&p), None);
    }

    #[test]
    fn header_user_with_custom_client_addr() {
        #[derive(Clone)]
        struct Peer(&'static str);
        let mut p = parts("POST", "/", &[("x-user-id", "")]);
        p.extensions.insert(Peer("192.0.2.1"));
        let users = HeaderUser::default().client_addr(|e| e.get::<Peer>().map(|p| p.0.into()));
        assert_eq!(users.user(&p).as_deref(), Some("192.0.2.1"));
    }

    #[test]
    fn closures_are_key_builders() {
        let only_posts = |i: &KeyInput<'_>| {
            (i.parts.method == http::Method::POST).then(|| format!("{}:{}", i.prefix, i.user))
        };
        let get = parts("GET", "/", &[]);
        let post = parts("POST", "/", &[]);
        let input = |p| KeyInput {
            prefix: "p",
            user: "u",
            parts: p,
            body: b"",
        };
        assert_eq!(only_posts.key(&input(&get)), None);
        assert_eq!(only_posts.key(&input(&post)).as_deref(), Some("p:u"));
    }
}
