//! Names of the Secrets a TenantControlPlane owns, and of its tenant on the datastore.

use super::*;

/// `<tcp>-ca`.
pub fn ca_secret_name(tcp: &TenantControlPlane) -> String {
    format!("{}-ca", tcp.name_any())
}

/// `<tcp>-api-server-certificate`.
pub fn apiserver_secret_name(tcp: &TenantControlPlane) -> String {
    format!("{}-api-server-certificate", tcp.name_any())
}

/// `<tcp>-api-server-kubelet-client-certificate`.
pub fn kubelet_client_secret_name(tcp: &TenantControlPlane) -> String {
    format!("{}-api-server-kubelet-client-certificate", tcp.name_any())
}

/// `<tcp>-front-proxy-ca-certificate`.
pub fn front_proxy_ca_secret_name(tcp: &TenantControlPlane) -> String {
    format!("{}-front-proxy-ca-certificate", tcp.name_any())
}

/// `<tcp>-front-proxy-client-certificate`.
pub fn front_proxy_client_secret_name(tcp: &TenantControlPlane) -> String {
    format!("{}-front-proxy-client-certificate", tcp.name_any())
}

/// `<tcp>-sa-certificate`.
pub fn sa_secret_name(tcp: &TenantControlPlane) -> String {
    format!("{}-sa-certificate", tcp.name_any())
}

/// `<tcp>-admin-kubeconfig`.
pub fn admin_kubeconfig_name(tcp: &TenantControlPlane) -> String {
    format!("{}-admin-kubeconfig", tcp.name_any())
}

/// `<tcp>-controller-manager-kubeconfig`.
pub fn controller_manager_kubeconfig_name(tcp: &TenantControlPlane) -> String {
    format!("{}-controller-manager-kubeconfig", tcp.name_any())
}

/// `<tcp>-scheduler-kubeconfig`.
pub fn scheduler_kubeconfig_name(tcp: &TenantControlPlane) -> String {
    format!("{}-scheduler-kubeconfig", tcp.name_any())
}

/// Every PKI and kubeconfig Secret name, in generation order (Konnectivity's with the addon).
pub fn pki_secret_names(tcp: &TenantControlPlane) -> Vec<String> {
    let mut names = vec![
        ca_secret_name(tcp),
        front_proxy_ca_secret_name(tcp),
        sa_secret_name(tcp),
        apiserver_secret_name(tcp),
        kubelet_client_secret_name(tcp),
        front_proxy_client_secret_name(tcp),
        admin_kubeconfig_name(tcp),
        controller_manager_kubeconfig_name(tcp),
        scheduler_kubeconfig_name(tcp),
    ];
    if konnectivity(tcp).is_some() {
        names.extend([
            konnectivity_certificate_name(tcp),
            konnectivity_kubeconfig_name(tcp),
        ]);
    }
    names
}

/// Name of the kine environment Secret.
pub fn config_secret_name(tcp: &TenantControlPlane) -> String {
    format!("{}-datastore-config", tcp.name_any())
}

/// Name of the datastore certificate Secret.
pub fn certificate_secret_name(tcp: &TenantControlPlane) -> String {
    format!("{}-datastore-certificate", tcp.name_any())
}

/// Schema and user of the tenant: what status recorded for the primary (names never change under a
/// running tenant), else `spec.dataStoreSchema`/`dataStoreUsername`, else the UID.
pub fn tenant_names(tcp: &TenantControlPlane) -> Result<(String, String), Error> {
    let uid = tcp.uid().ok_or(Error::MissingObjectKey(".metadata.uid"))?;
    let setup = tcp
        .status
        .as_ref()
        .and_then(|s| s.storage.as_ref())
        .and_then(|s| s.setup.as_ref());
    let pick = |recorded: Option<&String>, spec: Option<&String>| {
        recorded
            .or(spec)
            .filter(|s| !s.is_empty())
            .cloned()
            .unwrap_or_else(|| uid.clone())
    };
    Ok((
        pick(
            setup.and_then(|s| s.schema.as_ref()),
            tcp.spec.data_store_schema.as_ref(),
        ),
        pick(
            setup.and_then(|s| s.user.as_ref()),
            tcp.spec.data_store_username.as_ref(),
        ),
    ))
}

/// Schema and user as the spec names them (else the UID), ignoring status.
pub fn spec_names(tcp: &TenantControlPlane) -> Result<(String, String), Error> {
    let uid = tcp.uid().ok_or(Error::MissingObjectKey(".metadata.uid"))?;
    let pick = |spec: Option<&String>| {
        spec.filter(|s| !s.is_empty())
            .cloned()
            .unwrap_or_else(|| uid.clone())
    };
    Ok((
        pick(tcp.spec.data_store_schema.as_ref()),
        pick(tcp.spec.data_store_username.as_ref()),
    ))
}

/// The owner of the tenant's datastore names: the TenantControlPlane's UID and `namespace/name`.
pub fn datastore_owner(tcp: &TenantControlPlane) -> Result<Owner, Error> {
    let uid = tcp.uid().ok_or(Error::MissingObjectKey(".metadata.uid"))?;
    let namespace = tcp
        .namespace()
        .ok_or(Error::MissingObjectKey(".metadata.namespace"))?;
    Ok(Owner::new(&uid, &namespace, &tcp.name_any())?)
}
