//! The datastore Secrets: `<tcp>-datastore-config` and `<tcp>-datastore-certificate`.

use super::*;

fn data_value(secret: Option<&Secret>, key: &str) -> Option<String> {
    secret
        .and_then(|s| s.data.as_ref())
        .and_then(|d| d.get(key))
        .and_then(|v| String::from_utf8(v.0.clone()).ok())
}

/// The SQL password to keep: the one in the existing config Secret, if it is for `user` and untampered
/// (as upstream: an edited Secret gets a fresh password).
pub fn reusable_password(existing: Option<&Secret>, user: &str) -> Option<Sealed<String>> {
    let secret = existing.filter(|s| untampered(s))?;
    if data_value(Some(secret), "DB_USER").as_deref() != Some(user) {
        return None;
    }
    data_value(Some(secret), "DB_PASSWORD")
        .filter(|p| !p.is_empty())
        .map(Sealed::new)
}

/// The etcd client certificate to keep: the existing Secret's, when it is untampered, for the same CA
/// and user, and valid for at least 30 more days. Keeping it keeps the Secret (and the pods) stable.
pub fn reusable_certificate(
    existing: Option<&Secret>,
    ca_cert: &str,
    user: &str,
) -> Option<(String, String)> {
    let secret = existing.filter(|s| untampered(s))?;
    if data_value(Some(secret), "ca.crt")?.trim() != ca_cert.trim() {
        return None;
    }
    let cert = data_value(Some(secret), "server.crt")?;
    let key = data_value(Some(secret), "server.key")?;
    let (_, pem) = x509_parser::pem::parse_x509_pem(cert.as_bytes()).ok()?;
    let parsed = pem.parse_x509().ok()?;
    let cn_matches = parsed
        .subject()
        .iter_common_name()
        .filter_map(|cn| cn.as_str().ok())
        .eq([user]);
    let remaining = parsed.validity().not_after.timestamp() - Timestamp::now().as_second();
    (cn_matches && remaining > 30 * 24 * 3600).then_some((cert, key))
}

fn owned_secret(
    tcp: &TenantControlPlane,
    owner: OwnerReference,
    name: String,
    data: BTreeMap<String, ByteString>,
) -> Secret {
    let annotations = BTreeMap::from([(CHECKSUM_ANNOTATION.to_string(), checksum(&data))]);
    let labels = BTreeMap::from([
        (TCP_NAME_LABEL.to_string(), tcp.name_any()),
        (MANAGED_BY_LABEL.0.to_string(), MANAGED_BY_LABEL.1.to_string()),
    ]);
    Secret {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: tcp.namespace(),
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        data: Some(data),
        type_: Some("Opaque".into()),
        ..Secret::default()
    }
}

fn bytes(value: impl Into<String>) -> ByteString {
    ByteString(value.into().into_bytes())
}

/// `<tcp>-datastore-config`: upstream's kine environment (`DB_CONNECTION_STRING`, `DB_SCHEMA`,
/// `DB_USER`, `DB_PASSWORD`). For etcd the connection string and password are empty, as upstream.
pub fn config_secret(
    tcp: &TenantControlPlane,
    space: &TenantSpace,
    credentials: &TenantCredentials,
) -> Result<Secret, Error> {
    let (connection, user, password) = match credentials {
        TenantCredentials::Etcd(c) => (String::new(), c.user.clone(), String::new()),
        TenantCredentials::Sql(c) => (c.endpoint.clone(), c.user.clone(), c.password.expose().clone()),
        TenantCredentials::Nats(c) => (
            c.endpoints.first().cloned().unwrap_or_default(),
            c.username.clone().unwrap_or_default(),
            c.password
                .as_ref()
                .map(|p| p.expose().clone())
                .unwrap_or_default(),
        ),
    };
    let schema = match credentials {
        TenantCredentials::Nats(c) => c.bucket.clone(),
        _ => space.schema().to_string(),
    };
    let data = BTreeMap::from([
        ("DB_CONNECTION_STRING".to_string(), bytes(connection)),
        ("DB_SCHEMA".to_string(), bytes(schema)),
        ("DB_USER".to_string(), bytes(user)),
        ("DB_PASSWORD".to_string(), bytes(password)),
    ]);
    Ok(owned_secret(tcp, owner(tcp)?, config_secret_name(tcp), data))
}

/// `<tcp>-datastore-certificate` with upstream's keys `ca.crt`, `server.crt`, `server.key`: for etcd the
/// tenant's client certificate (`cert` overrides the freshly minted one to keep it stable); for SQL and
/// NATS the CA certificate and, when the DataStore gives its CA key, a client certificate of the
/// tenant's own (CN = the tenant user). The DataStore's own client certificate and key never leave
/// the DataStore. `None` when the DataStore has no TLS.
pub fn certificate_secret(
    tcp: &TenantControlPlane,
    space: &TenantSpace,
    ds: &ResolvedDataStore,
    credentials: &TenantCredentials,
    cert: Option<(String, String)>,
    alg: KeyAlgorithm,
) -> Result<Option<Secret>, Error> {
    let mut data = BTreeMap::new();
    match credentials {
        TenantCredentials::Etcd(c) => {
            let (cert, key) =
                cert.unwrap_or_else(|| (c.client_cert_pem.clone(), c.client_key_pem.expose().clone()));
            data.insert("ca.crt".to_string(), bytes(c.ca_cert_pem.clone()));
            data.insert("server.crt".to_string(), bytes(cert));
            data.insert("server.key".to_string(), bytes(key));
        }
        _ => {
            let Some(tls) = &ds.tls else {
                return Ok(None);
            };
            data.insert("ca.crt".to_string(), bytes(tls.ca_cert.clone()));
            if let Some(ca_key) = &tls.ca_key {
                let (cert, key) = match cert {
                    Some(kept) => kept,
                    None => tenant_client_certificate(ds, &tls.ca_cert, ca_key, space.user(), alg)?,
                };
                data.insert("server.crt".to_string(), bytes(cert));
                data.insert("server.key".to_string(), bytes(key));
            }
        }
    }
    Ok(Some(owned_secret(
        tcp,
        owner(tcp)?,
        certificate_secret_name(tcp),
        data,
    )))
}

/// A client certificate for `user` (CN), signed with the DataStore's CA key, valid for a year.
fn tenant_client_certificate(
    ds: &ResolvedDataStore,
    ca_cert: &str,
    ca_key: &Sealed<String>,
    user: &str,
    alg: KeyAlgorithm,
) -> Result<(String, String), Error> {
    let invalid = |e: PkiError| {
        Error::Datastore(invalid_config(
            ds.driver,
            format!("cannot mint the tenant's client certificate with the DataStore's CA: {e}"),
        ))
    };
    let ca = Ca::from_pem(CertKey {
        cert_pem: ca_cert.to_string(),
        key_pem: ca_key.expose().clone(),
    })
    .map_err(invalid)?
    .with_key_algorithm(alg);
    let cert = ca
        .client_valid_for(user, &[], crate::datastore::etcd::DEFAULT_CERTIFICATE_VALIDITY)
        .map_err(invalid)?;
    Ok((cert.cert_pem, cert.key_pem))
}
