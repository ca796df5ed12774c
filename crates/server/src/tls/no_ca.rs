//! An `mtls:` listener without `ssl_ca_cert`: memcached starts, asks every client for a
//! certificate and, with no CA to check one against, accepts none (OpenSSL's verification
//! against an empty store). rustls's WebPKI verifier refuses to be built without a root, so
//! this verifier says the same thing directly: a certificate is required, and none verifies.

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::CryptoProvider;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, Error, SignatureScheme};
use rustls_pki_types::{CertificateDer, UnixTime};

#[derive(Debug)]
pub(super) struct NoCa {
    /// The schemes the provider can check, offered in the CertificateRequest as usual.
    schemes: Vec<SignatureScheme>,
}

impl NoCa {
    pub(super) fn new(provider: &CryptoProvider) -> NoCa {
        NoCa {
            schemes: provider
                .signature_verification_algorithms
                .supported_schemes(),
        }
    }
}

impl ClientCertVerifier for NoCa {
    fn client_auth_mandatory(&self) -> bool {
        true
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: UnixTime,
    ) -> Result<ClientCertVerified, Error> {
        Err(Error::InvalidCertificate(CertificateError::UnknownIssuer))
    }

    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        Err(Error::InvalidCertificate(CertificateError::UnknownIssuer))
    }

    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        Err(Error::InvalidCertificate(CertificateError::UnknownIssuer))
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.schemes.clone()
    }
}
