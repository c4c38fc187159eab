use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::*;
use crate::{
    build::ResolvedTls,
    datastore::{EtcdCredentials, NatsCredentials, Owner, SqlCredentials, nats::HeldBucket},
    k8s::crd::TenantControlPlaneStatus,
};

fn tcp(ns: &str, name: &str, uid: &str) -> TenantControlPlane {
    tenantplane_testkit::tcp(ns, name)
        .uid(uid)
        .created("2026-01-01T00:00:00Z")
        .datastore("primary")
        .build()
}

fn resolved(name: &str, driver: Driver, ca: Option<&str>) -> ResolvedDataStore {
    ResolvedDataStore {
        name: name.into(),
        driver,
        endpoints: vec!["127.0.0.1:2379".into()],
        username: None,
        password: None,
        tls: ca.map(|ca| ResolvedTls {
            ca_cert: ca.into(),
            ca_key: None,
            client: None,
        }),
    }
}

#[test]
fn provision_fingerprint_changes_with_credentials_and_overrides_only() {
    let t = tcp("ns", "a", "u1");
    let mut ds = resolved("primary", Driver::PostgreSQL, None);
    ds.password = Some(Sealed::new("one".to_string()));
    let base = provision_fingerprint(&t, "s", "u", &ds, &[]);
    assert_eq!(base.len(), 64);
    assert_eq!(base, provision_fingerprint(&t, "s", "u", &ds.clone(), &[]));
    let mut rotated = ds.clone();
    rotated.password = Some(Sealed::new("two".to_string()));
    assert_ne!(base, provision_fingerprint(&t, "s", "u", &rotated, &[]));
    assert_ne!(base, provision_fingerprint(&t, "s", "other", &ds, &[]));
    assert_ne!(
        base,
        provision_fingerprint(&tcp("ns", "a", "u2"), "s", "u", &ds, &[])
    );
    let events = DataStoreOverride {
        resource: "/events".into(),
        data_store: "events".into(),
    };
    let with_override = provision_fingerprint(&t, "s", "u", &ds, &[(events.clone(), None)]);
    assert_ne!(base, with_override);
    let target = resolved("events", Driver::Etcd, Some("ca"));
    assert_ne!(
        with_override,
        provision_fingerprint(&t, "s", "u", &ds, &[(events, Some(target))])
    );
}

#[test]
fn tenant_names_prefer_status_then_spec_then_uid() {
    let mut t = tcp("ns", "a", "the-uid");
    assert_eq!(tenant_names(&t).unwrap(), ("the-uid".into(), "the-uid".into()));
    t.spec.data_store_schema = Some("schema".into());
    assert_eq!(tenant_names(&t).unwrap(), ("schema".into(), "the-uid".into()));
    t.status = Some(TenantControlPlaneStatus {
        storage: Some(StorageStatus {
            setup: Some(SetupStatus {
                schema: Some("old".into()),
                user: Some("olduser".into()),
                ..SetupStatus::default()
            }),
            ..StorageStatus::default()
        }),
        ..TenantControlPlaneStatus::default()
    });
    assert_eq!(tenant_names(&t).unwrap(), ("old".into(), "olduser".into()));
}

#[test]
fn the_owner_of_the_servers_bucket_holds_a_nats_datastore_and_before_it_the_older_tcp() {
    let first = tcp("ns", "first", "u1");
    let mut second = tcp("ns", "second", "u2");
    second.metadata.creation_timestamp = Some(Time("2026-02-01T00:00:00Z".parse().unwrap()));
    let all = vec![first.clone(), second.clone()];
    // The server holds no bucket: the older one naming it wins.
    assert_eq!(nats_holder(&first, "primary", None, &all), None);
    assert_eq!(
        nats_holder(&second, "primary", None, &all),
        Some("ns/first".into())
    );
    // The server holds the second's bucket: the second keeps it.
    let held = |owner: Option<Owner>| HeldBucket {
        bucket: "kine-u2".into(),
        owner,
    };
    let seconds = held(Some(Owner::new("u2", "ns", "second").unwrap()));
    assert_eq!(
        nats_holder(&first, "primary", Some(&seconds), &all),
        Some("ns/second".into())
    );
    assert_eq!(nats_holder(&second, "primary", Some(&seconds), &all), None);
    // A status that records the DataStore counts for nothing.
    let mut forger = tcp("ns", "forger", "u3");
    forger.status = Some(TenantControlPlaneStatus {
        storage: Some(StorageStatus {
            data_store_name: Some("primary".into()),
            ..StorageStatus::default()
        }),
        ..TenantControlPlaneStatus::default()
    });
    let all = vec![first.clone(), second.clone(), forger];
    assert_eq!(nats_holder(&first, "primary", None, &all), None);
    assert_eq!(
        nats_holder(&first, "primary", Some(&seconds), &all),
        Some("ns/second".into())
    );
    // An unmarked bucket names no holder (provisioning refuses it by its markers).
    assert_eq!(nats_holder(&first, "primary", Some(&held(None)), &all), None);
}

#[test]
fn overrides_must_be_etcd_sharing_the_primarys_ca() {
    let o = |ds: &str| DataStoreOverride {
        resource: "/events".into(),
        data_store: ds.into(),
    };
    let primary = resolved("p", Driver::Etcd, Some("CA1\n"));
    assert!(validate_overrides(&primary, &[]).is_ok());
    assert!(
        validate_overrides(
            &primary,
            &[(o("s"), Some(resolved("s", Driver::Etcd, Some("CA1"))))]
        )
        .is_ok()
    );
    let err = validate_overrides(
        &primary,
        &[(o("s"), Some(resolved("s", Driver::Etcd, Some("CA2"))))],
    )
    .unwrap_err();
    assert_eq!(err.reason(), "OverrideCANotShared");
    assert!(err.to_string().contains("different CA certificate"), "{err}");
    let err = validate_overrides(
        &primary,
        &[(o("m"), Some(resolved("m", Driver::MySQL, Some("CA1"))))],
    )
    .unwrap_err();
    assert_eq!(err.reason(), "OverrideNotEtcd");
    let err = validate_overrides(&primary, &[(o("x"), None)]).unwrap_err();
    assert_eq!(err.to_string(), "override /events: DataStore x not found");
    let pg = resolved("pg", Driver::PostgreSQL, None);
    let err = validate_overrides(&pg, &[(o("s"), Some(resolved("s", Driver::Etcd, None)))]).unwrap_err();
    assert_eq!(err.reason(), "PrimaryNotEtcd");
    assert!(!err.is_transient());
}

#[test]
fn config_secret_carries_upstreams_kine_environment_and_is_owned_by_the_tcp() {
    let t = tcp("ns", "cp", "uid-1");
    let space = TenantSpace::from_owner(Owner::new("uid-1", "ns", "cp").unwrap()).unwrap();
    let creds = TenantCredentials::Sql(SqlCredentials {
        user: "uid-1".into(),
        password: Sealed::new("pw".into()),
        database: "uid-1".into(),
        endpoint: "db:5432".into(),
    });
    let secret = config_secret(&t, &space, &creds).unwrap();
    assert_eq!(secret.metadata.name.as_deref(), Some("cp-datastore-config"));
    let data = secret.data.clone().unwrap();
    let get = |k: &str| String::from_utf8(data[k].0.clone()).unwrap();
    assert_eq!(get("DB_CONNECTION_STRING"), "db:5432");
    assert_eq!(get("DB_SCHEMA"), "uid-1");
    assert_eq!(get("DB_USER"), "uid-1");
    assert_eq!(get("DB_PASSWORD"), "pw");
    let owner = &secret.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!((owner.uid.as_str(), owner.controller), ("uid-1", Some(true)));
    assert!(untampered(&secret));
    assert_eq!(reusable_password(Some(&secret), "uid-1").unwrap().expose(), "pw");
    assert!(reusable_password(Some(&secret), "someone-else").is_none());
    let mut edited = secret.clone();
    edited
        .data
        .as_mut()
        .unwrap()
        .insert("DB_PASSWORD".into(), ByteString(b"x".to_vec()));
    assert!(reusable_password(Some(&edited), "uid-1").is_none());

    let nats = TenantCredentials::Nats(NatsCredentials {
        bucket: "uid-1".into(),
        endpoints: vec!["n:4222".into(), "m:4222".into()],
        username: Some("root".into()),
        password: Some(Sealed::new("rootpw".into())),
    });
    let data = config_secret(&t, &space, &nats).unwrap().data.unwrap();
    assert_eq!(data["DB_CONNECTION_STRING"].0, b"n:4222");
    assert_eq!(data["DB_USER"].0, b"root");
}

#[test]
fn etcd_certificate_secret_is_kept_while_it_fits_and_replaced_when_the_ca_changes() {
    let t = tcp("ns", "cp", "uid-1");
    let ca = Ca::new("ca").unwrap();
    let client = ca.client("uid-1", &["system:masters"]).unwrap();
    let creds = TenantCredentials::Etcd(EtcdCredentials {
        user: "uid-1".into(),
        prefix: "/uid-1/".into(),
        client_cert_pem: client.cert_pem.clone(),
        client_key_pem: Sealed::new(client.key_pem.clone()),
        ca_cert_pem: ca.ca.cert_pem.clone(),
    });
    let ds = resolved("p", Driver::Etcd, Some(&ca.ca.cert_pem));
    let space = TenantSpace::from_owner(Owner::new("uid-1", "ns", "cp").unwrap()).unwrap();
    let secret = certificate_secret(&t, &space, &ds, &creds, None, KeyAlgorithm::EcdsaP256)
        .unwrap()
        .unwrap();
    let keys: Vec<_> = secret.data.as_ref().unwrap().keys().cloned().collect();
    assert_eq!(keys, vec!["ca.crt", "server.crt", "server.key"]);
    let kept = reusable_certificate(Some(&secret), &ca.ca.cert_pem, "uid-1").unwrap();
    assert_eq!(kept.0, client.cert_pem);
    assert!(reusable_certificate(Some(&secret), &ca.ca.cert_pem, "other").is_none());
    let other = Ca::new("other").unwrap();
    assert!(reusable_certificate(Some(&secret), &other.ca.cert_pem, "uid-1").is_none());
    // SQL without TLS: no certificate Secret.
    let sql = TenantCredentials::Sql(SqlCredentials {
        user: "u".into(),
        password: Sealed::new("p".into()),
        database: "d".into(),
        endpoint: "e:1".into(),
    });
    assert!(
        certificate_secret(
            &t,
            &space,
            &resolved("pg", Driver::PostgreSQL, None),
            &sql,
            None,
            KeyAlgorithm::EcdsaP256
        )
        .unwrap()
        .is_none()
    );
}

#[test]
fn a_sql_tenant_gets_its_own_client_certificate_never_the_datastores() {
    let t = tcp("ns", "cp", "uid-1");
    let space = TenantSpace::from_owner(Owner::new("uid-1", "ns", "cp").unwrap()).unwrap();
    let ca = Ca::new("sql-ca").unwrap();
    let admin = ca.client("postgres", &[]).unwrap();
    let mut ds = resolved("pg", Driver::PostgreSQL, Some(&ca.ca.cert_pem));
    ds.tls.as_mut().unwrap().client = Some((admin.cert_pem.clone(), Sealed::new(admin.key_pem.clone())));
    let sql = TenantCredentials::Sql(SqlCredentials {
        user: "uid-1".into(),
        password: Sealed::new("p".into()),
        database: "uid-1".into(),
        endpoint: "e:1".into(),
    });
    let text = |secret: &Secret| -> BTreeMap<String, String> {
        secret
            .data
            .clone()
            .unwrap()
            .into_iter()
            .map(|(k, v)| (k, String::from_utf8(v.0).unwrap()))
            .collect()
    };
    // Without the CA key: the CA certificate only.
    let secret = certificate_secret(&t, &space, &ds, &sql, None, KeyAlgorithm::EcdsaP256)
        .unwrap()
        .unwrap();
    assert_eq!(
        text(&secret),
        BTreeMap::from([("ca.crt".to_string(), ca.ca.cert_pem.clone())])
    );
    // With it: a certificate for the tenant user, signed by the CA; the DataStore's pair is absent.
    ds.tls.as_mut().unwrap().ca_key = Some(Sealed::new(ca.ca.key_pem.clone()));
    let data = text(
        &certificate_secret(&t, &space, &ds, &sql, None, KeyAlgorithm::EcdsaP256)
            .unwrap()
            .unwrap(),
    );
    assert_eq!(
        data.keys().collect::<Vec<_>>(),
        ["ca.crt", "server.crt", "server.key"]
    );
    assert_ne!(data["server.crt"], admin.cert_pem);
    assert_ne!(data["server.key"], admin.key_pem);
    let (_, pem) = x509_parser::pem::parse_x509_pem(data["server.crt"].as_bytes()).unwrap();
    let cert = pem.parse_x509().unwrap();
    let cns: Vec<&str> = cert
        .subject()
        .iter_common_name()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert_eq!(cns, ["uid-1"]);
    let (_, ca_pem) = x509_parser::pem::parse_x509_pem(ca.ca.cert_pem.as_bytes()).unwrap();
    assert_eq!(
        cert.issuer().as_raw(),
        ca_pem.parse_x509().unwrap().subject().as_raw()
    );
}

#[test]
fn stale_overrides_are_those_removed_or_moved() {
    let rec = |r: &str, ds: &str| OverrideStorageStatus {
        resource: r.into(),
        data_store_name: Some(ds.into()),
        setup: None,
    };
    let recorded = vec![rec("/events", "a"), rec("/leases", "b"), rec("/pods", "c")];
    let spec = vec![
        DataStoreOverride {
            resource: "/events".into(),
            data_store: "a".into(),
        },
        DataStoreOverride {
            resource: "/leases".into(),
            data_store: "z".into(),
        },
    ];
    let stale: Vec<_> = stale_overrides(&recorded, &spec)
        .iter()
        .map(|o| o.resource.clone())
        .collect();
    assert_eq!(stale, vec!["/leases", "/pods"]);
}
