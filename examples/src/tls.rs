//! The rustls server configuration of the example servers.
//!
//! rustls 0.23 with the `ring` provider chosen explicitly, ALPN `h2` then `http/1.1`, and
//! either the certificate and key given with `--cert/--key` or a self-signed certificate
//! generated at start for `localhost` and `127.0.0.1`; and, for test clients only,
//! [`AcceptAnyCert`], a verifier that accepts any server certificate.

use std::fs::File;
use std::io::{self, BufReader};
use std::path::Path;
use std::sync::Arc;

use rcgen::{CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, ServerConfig, SignatureScheme};

use crate::cli::Args;
use crate::BoxError;

/// ALPN protocol id of HTTP/2.
pub const ALPN_H2: &[u8] = b"h2";
/// ALPN protocol id of HTTP/1.1.
pub const ALPN_HTTP11: &[u8] = b"http/1.1";

/// Names the generated certificate is valid for.
pub const SELF_SIGNED_NAMES: [&str; 2] = ["localhost", "127.0.0.1"];

/// A certificate chain (leaf first) and its private key.
#[derive(Debug)]
pub struct Identity {
    /// The chain, leaf first.
    pub chain: Vec<CertificateDer<'static>>,
    /// The leaf's private key.
    pub key: PrivateKeyDer<'static>,
}

/// Generates a self-signed end-entity certificate for `localhost` and `127.0.0.1`
/// (ECDSA P-256, `CA:FALSE`, extended key usage `serverAuth`).
///
/// It is deliberately not a CA certificate: webpki-based clients reject a CA certificate
/// used as the end entity, even when they trust it as a root.
pub fn self_signed() -> Result<Identity, rcgen::Error> {
    let (cert, key_pair) = generate_self_signed()?;
    Ok(Identity {
        chain: vec![cert.der().clone()],
        key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key_pair.serialize_der())),
    })
}

/// The same certificate as [`self_signed`], as PEM for servers that read files: the
/// certificate (DER, to trust in clients), the certificate (PEM) and the key (PEM, PKCS#8).
///
/// ```
/// let (der, cert_pem, key_pem) = examples::tls::self_signed_pem().unwrap();
/// assert!(!der.is_empty() && cert_pem.contains("CERTIFICATE") && key_pem.contains("PRIVATE KEY"));
/// ```
pub fn self_signed_pem() -> Result<(CertificateDer<'static>, String, String), rcgen::Error> {
    let (cert, key_pair) = generate_self_signed()?;
    Ok((cert.der().clone(), cert.pem(), key_pair.serialize_pem()))
}

fn generate_self_signed() -> Result<(rcgen::Certificate, KeyPair), rcgen::Error> {
    let mut params = CertificateParams::new(
        SELF_SIGNED_NAMES
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>(),
    )?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "localhost");
    params.distinguished_name = dn;
    params.is_ca = IsCa::ExplicitNoCa;
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key_pair = KeyPair::generate()?;
    let cert = params.self_signed(&key_pair)?;
    Ok((cert, key_pair))
}

/// A client-side certificate verifier that accepts any server certificate, for tests and
/// measurements against the generated self-signed certificate ([`self_signed`]) or servers
/// whose certificate the client does not have.
///
/// **Test code only: it disables server authentication.** The certificate chain, the server
/// name and the validity period are not checked, so a client using it talks to whoever
/// answers, a man in the middle included. Only the handshake signatures are verified (with
/// the provider's algorithms), which proves the peer holds the key of the certificate it
/// sent, not that the certificate is the right one. Never use it in a real client.
///
/// ```
/// use std::sync::Arc;
/// use examples::tls::AcceptAnyCert;
///
/// let provider = Arc::new(rustls::crypto::ring::default_provider());
/// let _config = rustls::ClientConfig::builder_with_provider(provider.clone())
///     .with_safe_default_protocol_versions()
///     .unwrap()
///     .dangerous()
///     .with_custom_certificate_verifier(Arc::new(AcceptAnyCert(provider)))
///     .with_no_client_auth();
/// ```
#[derive(Debug)]
pub struct AcceptAnyCert(pub Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAnyCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Reads a PEM certificate chain and a PEM private key (PKCS#8, PKCS#1 or SEC1).
pub fn load_pem(cert: &Path, key: &Path) -> Result<Identity, BoxError> {
    let open = |p: &Path| {
        File::open(p)
            .map(BufReader::new)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", p.display())))
    };
    let chain = rustls_pemfile::certs(&mut open(cert)?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{}: {e}", cert.display()))?;
    if chain.is_empty() {
        return Err(format!("{}: no certificate found", cert.display()).into());
    }
    let key = rustls_pemfile::private_key(&mut open(key)?)
        .map_err(|e| format!("{}: {e}", key.display()))?
        .ok_or_else(|| format!("{}: no private key found", key.display()))?;
    Ok(Identity { chain, key })
}

/// Builds the server configuration: ring provider, safe default protocol versions, no client
/// auth, ALPN `h2` and `http/1.1`, and `max_fragment_size = record_size` (rustls counts the
/// 5-byte record header in it; `None` means the TLS maximum).
pub fn server_config(
    identity: Identity,
    record_size: Option<usize>,
) -> Result<ServerConfig, BoxError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(identity.chain, identity.key)?;
    config.alpn_protocols = vec![ALPN_H2.to_vec(), ALPN_HTTP11.to_vec()];
    config.max_fragment_size = record_size;
    Ok(config)
}

/// The server configuration the command line asks for: `--cert/--key` or a generated
/// self-signed certificate, and `--record-size`.
pub fn config_from_args(args: &Args) -> Result<Arc<ServerConfig>, BoxError> {
    let identity = match (&args.cert, &args.key) {
        (Some(cert), Some(key)) => load_pem(cert, key)?,
        (None, None) => {
            tracing::info!(names = ?SELF_SIGNED_NAMES, "no --cert/--key: generated a self-signed certificate");
            self_signed()?
        }
        _ => return Err("--cert and --key must be given together".into()),
    };
    Ok(Arc::new(server_config(
        identity,
        args.record_size.map(usize::from),
    )?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::client::WebPkiServerVerifier;
    use rustls::RootCertStore;

    #[test]
    fn self_signed_is_a_valid_leaf_for_both_names() {
        let id = self_signed().unwrap();
        let leaf = id.chain[0].clone();
        let mut roots = RootCertStore::empty();
        roots.add(leaf.clone()).unwrap();
        let verifier = WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .unwrap();
        for name in SELF_SIGNED_NAMES {
            let name = ServerName::try_from(name).unwrap();
            verifier
                .verify_server_cert(&leaf, &[], &name, &[], UnixTime::now())
                .unwrap_or_else(|e| panic!("{name:?}: {e}"));
        }
        let other = ServerName::try_from("example.com").unwrap();
        assert!(verifier
            .verify_server_cert(&leaf, &[], &other, &[], UnixTime::now())
            .is_err());
    }

    #[test]
    fn config_has_alpn_and_record_size() {
        let c = server_config(self_signed().unwrap(), Some(4096)).unwrap();
        assert_eq!(c.alpn_protocols, vec![b"h2".to_vec(), b"http/1.1".to_vec()]);
        assert_eq!(c.max_fragment_size, Some(4096));
    }
}
