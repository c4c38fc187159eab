//! A tiny certificate authority for local processes: CA, serving and client certificates (ECDSA P-256).

use std::net::IpAddr;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

/// A PEM certificate with its PEM private key.
#[derive(Clone)]
pub struct CertKey {
    /// The certificate, PEM.
    pub cert_pem: String,
    /// The private key, PEM (PKCS#8).
    pub key_pem: String,
}

impl std::fmt::Debug for CertKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertKey")
            .field("cert_pem", &"<pem>")
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

/// A self-signed CA that signs leaf certificates.
pub struct TinyCa {
    issuer: Issuer<'static, KeyPair>,
    /// The CA certificate and key.
    pub ca: CertKey,
}

impl std::fmt::Debug for TinyCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TinyCa").field("ca", &self.ca).finish()
    }
}

impl TinyCa {
    /// Creates a new CA with the given common name.
    pub fn new(common_name: &str) -> Result<Self, rcgen::Error> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, common_name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::CrlSign,
        ];
        let cert = params.self_signed(&key)?;
        let ca = CertKey {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        };
        Ok(Self {
            issuer: Issuer::new(params, key),
            ca,
        })
    }

    /// Loads an existing CA from its PEM certificate and PEM private key (PKCS#8, or SEC1 for EC keys).
    ///
    /// Certificates it issues name the CA certificate's exact subject as their issuer (read from the PEM,
    /// keeping each attribute's string type, so verifiers that compare raw names find the CA) and carry its
    /// subject key identifier as their authority key identifier. It does not check that the key belongs to
    /// the certificate; callers that take both from users should.
    pub fn from_pem(ca: CertKey) -> Result<Self, rcgen::Error> {
        let key = KeyPair::from_pem(&ca.key_pem)?;
        let issuer = Issuer::from_ca_cert_pem(&ca.cert_pem, key)?;
        Ok(Self { issuer, ca })
    }

    /// Issues a serving certificate for the given DNS names and IP addresses (also usable as a client).
    pub fn server(&self, common_name: &str, dns: &[&str], ips: &[IpAddr]) -> Result<CertKey, rcgen::Error> {
        let mut params = CertificateParams::new(dns.iter().map(|s| s.to_string()).collect::<Vec<_>>())?;
        params
            .subject_alt_names
            .extend(ips.iter().map(|ip| SanType::IpAddress(*ip)));
        params.distinguished_name.push(DnType::CommonName, common_name);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        self.sign(params)
    }

    /// Issues a client certificate with CN = `user` (none when empty) and O = each of `groups`.
    pub fn client(&self, user: &str, groups: &[&str]) -> Result<CertKey, rcgen::Error> {
        self.sign(client_params(user, groups)?)
    }

    /// Like [`TinyCa::client`], valid from five minutes ago (clock skew) for `validity`.
    pub fn client_valid_for(
        &self,
        user: &str,
        groups: &[&str],
        validity: std::time::Duration,
    ) -> Result<CertKey, rcgen::Error> {
        let mut params = client_params(user, groups)?;
        let now = time::OffsetDateTime::now_utc();
        params.not_before = now - time::Duration::minutes(5);
        params.not_after = now + validity;
        self.sign(params)
    }

    fn sign(&self, params: CertificateParams) -> Result<CertKey, rcgen::Error> {
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(CertKey {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

fn client_params(user: &str, groups: &[&str]) -> Result<CertificateParams, rcgen::Error> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    if !user.is_empty() {
        params.distinguished_name.push(DnType::CommonName, user);
    }
    for group in groups {
        params.distinguished_name.push(DnType::OrganizationName, *group);
    }
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    Ok(params)
}

/// A fresh key pair in PEM (private PKCS#8, public SPKI), for service-account token signing.
pub fn key_pair_pem() -> Result<(String, String), rcgen::Error> {
    let key = KeyPair::generate()?;
    Ok((key.serialize_pem(), key.public_key_pem()))
}
