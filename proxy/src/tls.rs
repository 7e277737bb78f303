//! TLS on the listener (`--tls-cert FILE --tls-key FILE [--tls-ca FILE]`), with rustls as on the
//! upstream side: clients connect as to a Redis with `tls-port` (`redis-cli --tls`,
//! `rediss://`). With `--tls-ca`, every client must present a certificate that CA signed (as
//! Redis's `tls-auth-clients yes`).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use tokio_rustls::TlsAcceptor;

/// How long a client may take over its TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The listener's TLS: its certificate and key, and optionally the CA that client certificates
/// must be signed by.
#[derive(Clone)]
pub struct ListenerTls {
    acceptor: TlsAcceptor,
    client_certs: bool,
}

impl std::fmt::Debug for ListenerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListenerTls")
            .field("client_certs", &self.client_certs)
            .finish_non_exhaustive()
    }
}

/// The same configuration, not just an equal one.
impl PartialEq for ListenerTls {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(self.acceptor.config(), other.acceptor.config())
    }
}

impl Eq for ListenerTls {}

impl ListenerTls {
    /// Reads the PEM files: `cert` (the chain, leaf first), `key` (PKCS#8, PKCS#1 or SEC1) and
    /// `ca` (the CAs client certificates must be signed by; without it no client certificate is
    /// asked for).
    ///
    /// # Errors
    /// A file that cannot be read or holds no certificate or key, a key that does not match the
    /// certificate; the text names the file.
    pub fn from_pem_files(cert: &Path, key: &Path, ca: Option<&Path>) -> Result<Self, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let chain = read_certs(cert)?;
        let key = PrivateKeyDer::from_pem_file(key)
            .map_err(|e| format!("--tls-key {}: {e}", key.display()))?;
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?;
        let builder = match ca {
            None => builder.with_no_client_auth(),
            Some(ca) => {
                let mut roots = rustls::RootCertStore::empty();
                for c in read_certs(ca)? {
                    roots
                        .add(c)
                        .map_err(|e| format!("--tls-ca {}: {e}", ca.display()))?;
                }
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                        .build()
                        .map_err(|e| format!("--tls-ca {}: {e}", ca.display()))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let config = builder
            .with_single_cert(chain, key)
            .map_err(|e| format!("--tls-cert {} with --tls-key: {e}", cert.display()))?;
        Ok(ListenerTls {
            acceptor: TlsAcceptor::from(Arc::new(config)),
            client_certs: ca.is_some(),
        })
    }

    /// Whether clients must present a certificate signed by `--tls-ca`.
    pub fn requires_client_certs(&self) -> bool {
        self.client_certs
    }

    pub(crate) fn acceptor(&self) -> &TlsAcceptor {
        &self.acceptor
    }
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<_, _>>())
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no certificate in it", path.display()));
    }
    Ok(certs)
}
