//! TLS setup: the `ring` crypto provider and the bundled Mozilla root certificates.

use std::sync::Once;

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
}
