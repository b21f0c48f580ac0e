//! TLS setup: the `ring` crypto provider, the bundled Mozilla root certificates, and the rustls
//! client configuration of the HTTP clients.
//!
//! The roots are parsed once per process into one certificate verifier (it holds no lock, so a
//! forked child can share it). Every client gets a configuration of its own around that
//! verifier, with its own session cache, so nothing else is shared between datasets.

// The reqwest configuration is the `http` feature's only.
#![cfg_attr(not(feature = "http"), allow(dead_code))]

use std::sync::{Arc, Once, OnceLock};

use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::CertificateDer;

use crate::error::Error;

/// Installs rustls' `ring` provider as the process default, unless one is installed already.
///
/// reqwest (and object_store's reqwest client) are built without a provider of their own, so
/// this must run before any client is built.
pub(crate) fn install_crypto_provider() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        // An error means another provider was installed first: that one is used.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// The Mozilla root certificates bundled by `webpki-root-certs`, in DER.
pub(crate) fn mozilla_roots() -> impl Iterator<Item = &'static [u8]> {
    webpki_root_certs::TLS_SERVER_ROOT_CERTS
        .iter()
        .map(|cert| cert.as_ref())
}

/// The process's crypto provider (installing `ring` if none is).
fn provider() -> Arc<CryptoProvider> {
    install_crypto_provider();
    CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()))
}

/// The verifier of server certificates against the bundled roots, built on first use.
pub(crate) fn verifier() -> Result<Arc<WebPkiServerVerifier>, Error> {
    static VERIFIER: OnceLock<Result<Arc<WebPkiServerVerifier>, String>> = OnceLock::new();
    VERIFIER
        .get_or_init(|| {
            let mut roots = rustls::RootCertStore::empty();
            for der in mozilla_roots() {
                roots
                    .add(CertificateDer::from(der))
                    .map_err(|e| format!("bad bundled root certificate: {e}"))?;
            }
            WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider())
                .build()
                .map_err(|e| format!("cannot build the certificate verifier: {e}"))
        })
        .clone()
        .map_err(Error::Runtime)
}

/// A rustls client configuration for one HTTP client: the bundled roots (shared), TLS 1.2 and
/// 1.3, SNI, ALPN `http/1.1` (the clients speak HTTP/1.1 only), no client certificate.
pub(crate) fn client_config() -> Result<rustls::ClientConfig, Error> {
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(rustls::ALL_VERSIONS)
        .map_err(|e| Error::Runtime(format!("cannot configure TLS: {e}")))?
        .with_webpki_verifier(verifier()?)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roots_are_bundled_and_parse() {
        let roots: Vec<_> = mozilla_roots().collect();
        assert!(roots.len() > 100, "{} roots", roots.len());
        for der in roots {
            reqwest::Certificate::from_der(der).unwrap();
        }
        install_crypto_provider();
        assert!(rustls::crypto::CryptoProvider::get_default().is_some());
    }

    #[test]
    fn the_verifier_is_built_once() {
        let config = client_config().unwrap();
        assert!(Arc::ptr_eq(&verifier().unwrap(), &verifier().unwrap()));
        assert_eq!(config.alpn_protocols, [b"http/1.1".to_vec()]);
        assert!(config.enable_sni);
        assert!(!config.client_auth_cert_resolver.has_certs());
    }
}
