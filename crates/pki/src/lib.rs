//! Keys and X.509 certificates: the one certificate authority type behind every certificate Tenantplane
//! mints (tenant control-plane PKI, datastore tenant client certificates, the local test environment).
//!
//! Every key follows one [`KeyAlgorithm`]; a [`Ca`] signs its leaves with keys of its own algorithm.

use std::{net::IpAddr, time::Duration};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

/// A failure to make a key or a certificate.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    /// rcgen refused the parameters, the PEM or the key.
    #[error("generating a certificate failed: {0}")]
    Certificate(#[from] rcgen::Error),
    /// The RSA key could not be generated or encoded.
    #[error("generating an RSA key failed: {0}")]
    Rsa(String),
    /// A validity bound is outside the representable time range.
    #[error("invalid certificate validity: {0}")]
    Validity(String),
}

/// The key type of every generated certificate and of the service-account key pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum KeyAlgorithm {
    /// ECDSA on P-256 (fast; the default).
    #[default]
    EcdsaP256,
    /// RSA 2048 (for consumers that accept only RSA, like kubeadm's default).
    Rsa2048,
}

/// A new private key of `alg`.
pub fn new_key(alg: KeyAlgorithm) -> Result<KeyPair, PkiError> {
    match alg {
        KeyAlgorithm::EcdsaP256 => Ok(KeyPair::generate()?),
        KeyAlgorithm::Rsa2048 => {
            use rsa::pkcs8::EncodePrivateKey as _;
            let key = rsa::PrivateKey::new(&mut getrandom::SysRng, 2048)
                .map_err(|e| PkiError::Rsa(e.to_string()))?;
            let der = key.to_pkcs8_der().map_err(|e| PkiError::Rsa(e.to_string()))?;
            Ok(KeyPair::from_pkcs8_der_and_sign_algo(
                &rustls::pki_types::PrivatePkcs8KeyDer::from(der.as_bytes()),
                &rcgen::PKCS_RSA_SHA256,
            )?)
        }
    }
}

/// A fresh key pair of `alg` in PEM (private PKCS#8, public SPKI), for service-account token signing.
pub fn key_pair_pem(alg: KeyAlgorithm) -> Result<(String, String), PkiError> {
    let key = new_key(alg)?;
    Ok((key.serialize_pem(), key.public_key_pem()))
}

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

/// When a certificate is valid: from five minutes before `now` (clock skew) for `secs` seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Validity {
    /// Unix seconds the certificate is issued at.
    pub now: i64,
    /// Seconds it stays valid from `now`.
    pub secs: i64,
}

impl Validity {
    /// Valid for `days` days from `now` (Unix seconds).
    pub fn days(now: i64, days: i64) -> Self {
        Self {
            now,
            secs: days * 24 * 3600,
        }
    }

    /// Valid for `duration` from the current time.
    pub fn from_now(duration: Duration) -> Self {
        Self {
            now: time::OffsetDateTime::now_utc().unix_timestamp(),
            secs: i64::try_from(duration.as_secs()).unwrap_or(i64::MAX / 2),
        }
    }

    /// The last valid second, Unix time.
    pub fn not_after(&self) -> i64 {
        self.now.saturating_add(self.secs)
    }

    fn apply(&self, params: &mut CertificateParams) -> Result<(), PkiError> {
        let at = |secs| {
            time::OffsetDateTime::from_unix_timestamp(secs).map_err(|e| PkiError::Validity(e.to_string()))
        };
        params.not_before = at(self.now - 300)?;
        params.not_after = at(self.not_after())?;
        Ok(())
    }
}

/// What a leaf certificate is for.
#[derive(Debug, Clone, Copy)]
pub enum Usage<'a> {
    /// A TLS client (CN = user, O = groups).
    Client,
    /// A TLS server for these DNS names and IP addresses.
    Server { dns: &'a [String], ips: &'a [IpAddr] },
    /// A server for these names that may also act as a client (the local test environment's peers).
    ServerAndClient { dns: &'a [String], ips: &'a [IpAddr] },
}

/// A certificate authority that signs leaf certificates with fresh keys of its [`KeyAlgorithm`].
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    keys: KeyAlgorithm,
    /// The CA certificate and key.
    pub ca: CertKey,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca")
            .field("ca", &self.ca)
            .field("keys", &self.keys)
            .finish()
    }
}

impl Ca {
    /// A new self-signed ECDSA P-256 CA with rcgen's default validity (the local test environment).
    pub fn new(common_name: &str) -> Result<Self, PkiError> {
        Self::create(common_name, KeyAlgorithm::EcdsaP256, None)
    }

    /// A new self-signed CA whose own key and leaf keys are of `alg`, valid for `validity`.
    pub fn generate(common_name: &str, alg: KeyAlgorithm, validity: Validity) -> Result<Self, PkiError> {
        Self::create(common_name, alg, Some(validity))
    }

    fn create(common_name: &str, alg: KeyAlgorithm, validity: Option<Validity>) -> Result<Self, PkiError> {
        let key = new_key(alg)?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, common_name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::CrlSign,
        ];
        if let Some(validity) = validity {
            validity.apply(&mut params)?;
        }
        let cert = params.self_signed(&key)?;
        let ca = CertKey {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        };
        Ok(Self {
            issuer: Issuer::new(params, key),
            keys: alg,
            ca,
        })
    }

    /// Loads an existing CA from its PEM certificate and PEM private key (PKCS#8, or SEC1 for EC keys);
    /// its leaves get ECDSA P-256 keys unless [`Ca::with_key_algorithm`] says otherwise.
    ///
    /// Certificates it issues name the CA certificate's exact subject as their issuer (read from the PEM,
    /// keeping each attribute's string type, so verifiers that compare raw names find the CA) and carry its
    /// subject key identifier as their authority key identifier. It does not check that the key belongs to
    /// the certificate; callers that take both from users should.
    pub fn from_pem(ca: CertKey) -> Result<Self, PkiError> {
        let key = KeyPair::from_pem(&ca.key_pem)?;
        let issuer = Issuer::from_ca_cert_pem(&ca.cert_pem, key)?;
        Ok(Self {
            issuer,
            keys: KeyAlgorithm::default(),
            ca,
        })
    }

    /// The same CA, signing leaves with keys of `alg`.
    pub fn with_key_algorithm(mut self, alg: KeyAlgorithm) -> Self {
        self.keys = alg;
        self
    }

    /// The algorithm of the keys of the leaves it issues.
    pub fn key_algorithm(&self) -> KeyAlgorithm {
        self.keys
    }

    /// Issues a leaf with CN = `common_name` (none when empty), O = each of `groups`, for `usage`;
    /// `validity` None keeps rcgen's default.
    pub fn issue(
        &self,
        common_name: &str,
        groups: &[&str],
        usage: Usage<'_>,
        validity: Option<Validity>,
    ) -> Result<CertKey, PkiError> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name = rcgen::DistinguishedName::new();
        if !common_name.is_empty() {
            params.distinguished_name.push(DnType::CommonName, common_name);
        }
        for group in groups {
            params.distinguished_name.push(DnType::OrganizationName, *group);
        }
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = match usage {
            Usage::Client => vec![ExtendedKeyUsagePurpose::ClientAuth],
            Usage::Server { dns, ips } => {
                add_sans(&mut params, dns, ips)?;
                vec![ExtendedKeyUsagePurpose::ServerAuth]
            }
            Usage::ServerAndClient { dns, ips } => {
                add_sans(&mut params, dns, ips)?;
                vec![
                    ExtendedKeyUsagePurpose::ServerAuth,
                    ExtendedKeyUsagePurpose::ClientAuth,
                ]
            }
        };
        if let Some(validity) = validity {
            validity.apply(&mut params)?;
        }
        let key = new_key(self.keys)?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(CertKey {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    /// Issues a serving certificate for the given DNS names and IP addresses (also usable as a client).
    pub fn server(&self, common_name: &str, dns: &[&str], ips: &[IpAddr]) -> Result<CertKey, PkiError> {
        let dns: Vec<String> = dns.iter().map(|s| s.to_string()).collect();
        self.issue(common_name, &[], Usage::ServerAndClient { dns: &dns, ips }, None)
    }

    /// Issues a client certificate with CN = `user` (none when empty) and O = each of `groups`.
    pub fn client(&self, user: &str, groups: &[&str]) -> Result<CertKey, PkiError> {
        self.issue(user, groups, Usage::Client, None)
    }

    /// Like [`Ca::client`], valid from five minutes ago (clock skew) for `validity`.
    pub fn client_valid_for(
        &self,
        user: &str,
        groups: &[&str],
        validity: Duration,
    ) -> Result<CertKey, PkiError> {
        self.issue(user, groups, Usage::Client, Some(Validity::from_now(validity)))
    }
}

fn add_sans(params: &mut CertificateParams, dns: &[String], ips: &[IpAddr]) -> Result<(), PkiError> {
    for name in dns {
        params
            .subject_alt_names
            .push(SanType::DnsName(name.clone().try_into()?));
    }
    params
        .subject_alt_names
        .extend(ips.iter().map(|ip| SanType::IpAddress(*ip)));
    Ok(())
}
