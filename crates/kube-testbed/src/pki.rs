//! The throw-away key material one test bed needs: a CA, the API server's serving certificate, an
//! admin client certificate and the ServiceAccount token signing key.
//!
//! Why generated per start (as controller-runtime's envtest does): nothing secret is committed or
//! shared between runs, and a certificate can carry exactly the addresses this instance listens on.

use std::net::IpAddr;

use anyhow::{Context, Result};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};

/// PEM texts for one test bed, written into its directory and into kubeconfigs.
#[derive(Debug, Clone)]
pub struct Pki {
    /// The CA certificate: clients trust it for the serving certificate, and the API server trusts
    /// it for client certificates (`--client-ca-file`).
    pub ca_cert_pem: String,
    /// The serving certificate (`--tls-cert-file`), valid for every address in `serving_ips`.
    pub serving_cert_pem: String,
    /// Its key (`--tls-private-key-file`).
    pub serving_key_pem: String,
    /// A client certificate with organisation `system:masters`: the admin identity, for which
    /// RBAC allows everything without any binding.
    pub admin_cert_pem: String,
    /// Its key.
    pub admin_key_pem: String,
    /// Private key that signs ServiceAccount tokens (`--service-account-signing-key-file`).
    pub sa_key_pem: String,
    /// Its public half, for verifying them (`--service-account-key-file`).
    pub sa_pub_pem: String,
    /// The CA's parameters and key, kept so [`Pki::client_cert`] can sign more identities later
    /// (a test cluster's kubelets, controller-manager and scheduler).
    ca_params: CertificateParams,
    ca_key_pem: String,
}

/// Name the admin client certificate carries; shows up as the user in audit and RBAC errors.
pub const ADMIN_USER: &str = "rivora-testbed-admin";

impl Pki {
    /// Generates all of it. `serving_ips` become IP SANs of the serving certificate (plus
    /// `localhost` and the in-cluster DNS names, so a client using either verifies it).
    pub fn generate(serving_ips: &[IpAddr]) -> Result<Pki> {
        let ca_key = KeyPair::generate().context("generating the CA key")?;
        let mut ca_params = CertificateParams::default();
        ca_params.distinguished_name = dn("rivora-testbed-ca", None);
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca_params
            .self_signed(&ca_key)
            .context("self-signing the CA")?;
        let ca_key_pem = ca_key.serialize_pem();
        let ca = Issuer::from_params(&ca_params, ca_key);

        let serving_key = KeyPair::generate().context("generating the serving key")?;
        let mut serving = CertificateParams::new(vec![
            "localhost".to_string(),
            "kubernetes".to_string(),
            "kubernetes.default".to_string(),
            "kubernetes.default.svc".to_string(),
        ])
        .context("serving certificate names")?;
        serving
            .subject_alt_names
            .extend(serving_ips.iter().map(|ip| SanType::IpAddress(*ip)));
        serving.distinguished_name = dn("kube-apiserver", None);
        serving.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let serving_cert = serving
            .signed_by(&serving_key, &ca)
            .context("signing the serving certificate")?;

        let (admin_cert_pem, admin_key_pem) = sign_client(&ca, ADMIN_USER, Some("system:masters"))?;

        let sa_key = KeyPair::generate().context("generating the ServiceAccount signing key")?;

        Ok(Pki {
            ca_cert_pem: ca_cert.pem(),
            serving_cert_pem: serving_cert.pem(),
            serving_key_pem: serving_key.serialize_pem(),
            admin_cert_pem,
            admin_key_pem,
            sa_key_pem: sa_key.serialize_pem(),
            sa_pub_pem: sa_key.public_key_pem(),
            ca_params,
            ca_key_pem,
        })
    }

    /// A client certificate and key (PEM) for user `common_name` in group `organisation`, signed
    /// by this CA: how kubelets (`system:node:NAME` in `system:nodes`, which the Node authorizer
    /// and NodeRestriction recognise), the controller-manager and the scheduler authenticate.
    pub fn client_cert(
        &self,
        common_name: &str,
        organisation: Option<&str>,
    ) -> Result<(String, String)> {
        let key = KeyPair::from_pem(&self.ca_key_pem).context("reading the CA key back")?;
        sign_client(
            &Issuer::from_params(&self.ca_params, key),
            common_name,
            organisation,
        )
    }

    /// The CA's private key (PEM): the controller-manager signs certificate requests with it.
    pub fn ca_key_pem(&self) -> &str {
        &self.ca_key_pem
    }
}

/// A client-auth certificate for `common_name` (group `organisation`) and its new key, as PEM.
fn sign_client(
    ca: &Issuer<'_, KeyPair>,
    common_name: &str,
    organisation: Option<&str>,
) -> Result<(String, String)> {
    let key = KeyPair::generate().context("generating a client key")?;
    let mut params = CertificateParams::default();
    params.distinguished_name = dn(common_name, organisation);
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let cert = params
        .signed_by(&key, ca)
        .with_context(|| format!("signing the client certificate of {common_name}"))?;
    Ok((cert.pem(), key.serialize_pem()))
}

fn dn(common_name: &str, organisation: Option<&str>) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    if let Some(o) = organisation {
        dn.push(DnType::OrganizationName, o);
    }
    dn
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generates_distinct_pem_material() {
        let ip: IpAddr = "10.250.0.1".parse().unwrap();
        let a = Pki::generate(&[ip]).unwrap();
        let b = Pki::generate(&[ip]).unwrap();
        for pem in [&a.ca_cert_pem, &a.serving_cert_pem, &a.admin_cert_pem] {
            assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"), "{pem}");
        }
        assert!(a.sa_key_pem.starts_with("-----BEGIN PRIVATE KEY-----"));
        assert!(a.sa_pub_pem.starts_with("-----BEGIN PUBLIC KEY-----"));
        assert_ne!(a.ca_cert_pem, b.ca_cert_pem, "every start has its own CA");
        assert_ne!(a.sa_key_pem, b.sa_key_pem);
    }
}
