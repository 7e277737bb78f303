//! Which requests are "the same": the user extractor and the key builder.
//!
//! The default key is `{prefix}:{user}:{METHOD}:{host}:{path}:{digest}`, where `digest` is the
//! first 16 bytes (32 hex digits) of SHA-256 over the query string and the body, and `path` is
//! the request's full path as the client sent it (before a router such as axum's `nest` strips a
//! prefix). User, host and path are escaped so that none can forge another's key (`:` and every
//! byte outside a small safe set become `%XX`), and replaced by a digest when they are too long
//! for a readable key.

use std::fmt;
use std::net::SocketAddr;
use std::ops::Deref;
use std::sync::Arc;

use http::request::Parts;
use http::{header, Extensions, HeaderName, Uri};
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
/// # Trust
/// A header is what the client says it is: any client can send `X-User-Id: alice`. Use it only
/// behind a gateway that authenticates the caller, sets the header, and strips it from what
/// clients send; otherwise plug in an extractor that reads your authenticated user (any
/// `Fn(&Parts) -> Option<String>`). A client that can choose its user id can block another
/// user's identical requests for a TTL and, with idempotency on, read that user's stored
/// responses if it also knows the idempotency key.
///
/// # The client address
/// Without the header, the user is the client's IP address, read from the request extensions:
/// - with the cargo feature `axum`: axum's `ConnectInfo<SocketAddr>` (present when the app is
///   served with `into_make_service_with_connect_info::<SocketAddr>()`), else a `SocketAddr`;
/// - without it: a `SocketAddr` extension;
/// - [`client_addr_from`](Self::client_addr_from) names another extension type, and
///   [`client_addr`](Self::client_addr) takes any function.
///
/// Clients behind one NAT or proxy share an address, and so share a user. When neither the
/// header nor an address is found, the user is unknown: requests then share the lock namespace
/// [`ANONYMOUS`], and an `Idempotency-Key` is ignored (no stored response is ever replayed to
/// an unknown user; see the [module docs](super)).
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

/// The client IP from the extensions, where the server put the connection's address.
fn default_client_addr(ext: &Extensions) -> Option<String> {
    #[cfg(feature = "axum")]
    if let Some(info) = ext.get::<axum::extract::ConnectInfo<SocketAddr>>() {
        return Some(info.0.ip().to_string());
    }
    ext.get::<SocketAddr>().map(|a| a.ip().to_string())
}

impl HeaderUser {
    /// Reads `header`; falls back to the client IP (see [the client address](Self#the-client-address)).
    pub fn new(header: HeaderName) -> Self {
        HeaderUser {
            header,
            addr: Arc::new(default_client_addr),
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

    /// Reads the client address from an extension of type `E` that dereferences to a
    /// `SocketAddr`, such as axum's `ConnectInfo<SocketAddr>`, without lockkit depending on the
    /// framework that defines it.
    ///
    /// ```ignore
    /// HeaderUser::default().client_addr_from::<axum::extract::ConnectInfo<SocketAddr>>()
    /// ```
    #[must_use]
    pub fn client_addr_from<E>(self) -> Self
    where
        E: Deref<Target = SocketAddr> + Send + Sync + 'static,
    {
        self.client_addr(|ext| ext.get::<E>().map(|a| a.ip().to_string()))
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
    /// Method, URI, headers and extensions, as the layer sees them (a nested router's URI has
    /// its prefix stripped: use [`path`](Self::path)).
    pub parts: &'a Parts,
    /// The whole body, as buffered.
    pub body: &'a [u8],
    /// The host name the request was sent to, lowercase, without the port (URI authority, else
    /// `Host` header; empty when neither is there).
    pub host: &'a str,
    /// The full path as the client sent it (the original URI's, when the router left one).
    pub path: &'a str,
    /// The query string of that URI (empty when none).
    pub query: &'a str,
}

/// Host, full path and query of a request: what tells two endpoints apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    pub(crate) host: String,
    pub(crate) path: String,
    pub(crate) query: String,
}

impl Target {
    /// From the original URI when a router kept one (the URI before any prefix was stripped),
    /// else from the request's own.
    pub(crate) fn of(parts: &Parts, original: Option<&Uri>) -> Target {
        let uri = original.unwrap_or(&parts.uri);
        // The host name without the port: instances of one service reached on different ports
        // (directly, or behind a balancer that passes its own port on) serve one site.
        let host = parts
            .uri
            .host()
            .or(uri.host())
            .map(str::to_string)
            .or_else(|| {
                let h = parts.headers.get(header::HOST)?;
                let h = String::from_utf8_lossy(h.as_bytes()).trim().to_string();
                Some(match h.parse::<http::uri::Authority>() {
                    Ok(a) => a.host().to_string(),
                    Err(_) => h,
                })
            })
            .unwrap_or_default()
            .to_ascii_lowercase();
        Target {
            host,
            path: uri.path().to_string(),
            query: uri.query().unwrap_or("").to_string(),
        }
    }
}

/// Turns a request into its lock key; `None` lets the request through without a duplicate
/// lock. A request that carries an `Idempotency-Key` (with idempotency on) is served by its key
/// whatever the builder says: replay does not depend on the builder.
pub trait KeyBuilder: Send + Sync + 'static {
    /// The lock key for this request, or `None` to skip the duplicate lock.
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

/// The default key: `{prefix}:{user}:{METHOD}:{host}:{path}:{digest of query and body}`.
#[derive(Debug, Clone, Copy, Default)]
pub struct DefaultKeyBuilder;

impl KeyBuilder for DefaultKeyBuilder {
    fn key(&self, input: &KeyInput<'_>) -> Option<String> {
        Some(request_key(
            input.prefix,
            input.user,
            input.parts.method.as_str(),
            input.host,
            input.path,
            input.query,
            input.body,
        ))
    }
}

/// The default key from its pieces.
///
/// ```
/// let k = lockkit::middleware::request_key(
///     "lockkit:submit", "alice", "POST", "shop.example", "/v1/orders", "", b"{}",
/// );
/// assert_eq!(k, "lockkit:submit:alice:POST:shop.example:/v1/orders:9bf2cdb8cad05b1300c3c1eb12770a9a");
/// ```
pub fn request_key(
    prefix: &str,
    user: &str,
    method: &str,
    host: &str,
    path: &str,
    query: &str,
    body: &[u8],
) -> String {
    format!(
        "{prefix}:{}:{}:{}:{}:{}",
        segment(user),
        segment(method),
        segment(host),
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
/// host, full path, query and body, each length-prefixed so that no part can shift into another.
pub(crate) fn request_fingerprint(method: &str, target: &Target, body: &[u8]) -> String {
    let mut h = Sha256::new();
    let parts = [
        method.as_bytes(),
        target.host.as_bytes(),
        target.path.as_bytes(),
        target.query.as_bytes(),
        body,
    ];
    for part in parts {
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
        let t = Target::of(p, None);
        DefaultKeyBuilder
            .key(&KeyInput {
                prefix: "p",
                user,
                parts: p,
                body,
                host: &t.host,
                path: &t.path,
                query: &t.query,
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
        assert!(k.starts_with("p:alice:POST::/orders:"), "{k}");
        let p = parts("POST", "/orders", &[("host", "Shop.Example:8080")]);
        let k = key("alice", &p, b"{}");
        assert!(k.starts_with("p:alice:POST:shop.example:/orders:"), "{k}");
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
        assert!(forged.starts_with("p:a%3APOST%3A/x:POST::/y:"), "{forged}");
        assert_eq!(forged.matches(':').count(), 5);
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
        let k = request_key("p", &long, "POST", &long, &format!("/{long}"), "", b"");
        assert!(k.len() < 200, "{k}");
    }

    #[test]
    fn fingerprint_parts_cannot_be_shifted_into_each_other() {
        let t = |host: &str, path: &str, query: &str| Target {
            host: host.into(),
            path: path.into(),
            query: query.into(),
        };
        let base = request_fingerprint("POST", &t("h", "/a", "q"), b"body");
        assert_eq!(base.len(), 32);
        assert_eq!(
            base,
            request_fingerprint("POST", &t("h", "/a", "q"), b"body")
        );
        // Each shifts a byte from one part into its neighbour, or changes the method.
        let shifted: [(&str, Target, &[u8]); 4] = [
            ("POST", t("h", "/aq", ""), b"body"),
            ("POST", t("h", "/a", "qb"), b"ody"),
            ("POST", t("h/a", "", "q"), b"body"),
            ("PUT", t("h", "/a", "q"), b"body"),
        ];
        for (i, (method, target, body)) in shifted.iter().enumerate() {
            assert_ne!(base, request_fingerprint(method, target, body), "case {i}");
        }
    }

    #[test]
    fn target_prefers_the_original_uri_and_finds_the_host() {
        let p = parts("POST", "/orders?x=1", &[("host", "Shop.Example")]);
        let original: Uri = "/v1/orders?x=1".parse().unwrap();
        let t = Target::of(&p, Some(&original));
        assert_eq!(
            (t.host.as_str(), t.path.as_str()),
            ("shop.example", "/v1/orders")
        );
        assert_eq!(t.query, "x=1");
        assert_eq!(Target::of(&p, None).path, "/orders");
        // HTTP/2 puts the authority in the URI.
        let h2 = parts("POST", "https://api.example/orders", &[]);
        assert_eq!(Target::of(&h2, None).host, "api.example");
        assert_eq!(Target::of(&parts("POST", "/", &[]), None).host, "");
    }

    #[test]
    fn client_addr_from_reads_a_typed_extension() {
        #[derive(Clone)]
        struct Peer(SocketAddr);
        impl Deref for Peer {
            type Target = SocketAddr;
            fn deref(&self) -> &SocketAddr {
                &self.0
            }
        }
        let mut p = parts("POST", "/", &[]);
        p.extensions.insert(Peer("192.0.2.9:4000".parse().unwrap()));
        let users = HeaderUser::default().client_addr_from::<Peer>();
        assert_eq!(users.user(&p).as_deref(), Some("192.0.2.9"));
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

    #[cfg(feature = "axum")]
    #[test]
    fn header_user_finds_axums_connect_info_by_default() {
        let mut p = parts("POST", "/", &[]);
        let addr: SocketAddr = "198.51.100.4:6000".parse().unwrap();
        p.extensions.insert(axum::extract::ConnectInfo(addr));
        assert_eq!(
            HeaderUser::default().user(&p).as_deref(),
            Some("198.51.100.4")
        );
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
            host: "",
            path: "/",
            query: "",
        };
        assert_eq!(only_posts.key(&input(&get)), None);
        assert_eq!(only_posts.key(&input(&post)).as_deref(), Some("p:u"));
    }
}
