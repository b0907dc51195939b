//! The API server as rivorad would reach it (`--kubeconfig`, else the
//! in-cluster ServiceAccount config, as rivorad reads them): the version
//! call, and one SelfSubjectAccessReview per permission rivorad needs.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::facts::{KubeFacts, Permission};

/// How long one call may take: a doctor must not hang on a dead server.
const TIMEOUT: Duration = Duration::from_secs(5);

async fn client(kubeconfig: Option<&Path>) -> Result<(String, Client), String> {
    let mut config = match kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path)
                .map_err(|e| format!("--kubeconfig {}: {e}", path.display()))?;
            Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .map_err(|e| format!("--kubeconfig {}: {e}", path.display()))?
        }
        None => Config::incluster().map_err(|e| {
            format!(
                "no --kubeconfig and no in-cluster config (KUBERNETES_SERVICE_HOST and the \
                 ServiceAccount token): {e}"
            )
        })?,
    };
    config.connect_timeout = Some(TIMEOUT);
    config.read_timeout = Some(TIMEOUT);
    config.write_timeout = Some(TIMEOUT);
    let server = config.cluster_url.to_string();
    let client =
        Client::try_from(config).map_err(|e| format!("building the Kubernetes client: {e}"))?;
    Ok((server, client))
}

async fn review(client: &Client, p: &Permission) -> Result<bool, String> {
    let r = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                namespace: p.namespace.clone(),
                group: Some(p.group.clone()),
                resource: Some(p.resource.clone()),
                subresource: p.subresource.clone(),
                verb: Some(p.verb.clone()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let answer = tokio::time::timeout(TIMEOUT, api.create(&PostParams::default(), &r))
        .await
        .map_err(|_| format!("no answer within {TIMEOUT:?}"))?
        .map_err(|e| chain(&e))?;
    Ok(answer.status.map(|s| s.allowed).unwrap_or(false))
}

/// `e` and its causes in one line, each text once (the client's own error
/// only says "client error (Connect)"; the cause says why).
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut cur = Some(e);
    while let Some(c) = cur {
        let text = c.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        cur = c.source();
    }
    parts.join(": ")
}

/// How a version-call error that is the API server's own answer starts (then the HTTP code).
pub const ANSWERED_HTTP: &str = "answered HTTP ";

/// The version call, then (if it answered) a review of every permission.
pub async fn probe(kubeconfig: Option<&Path>, permissions: &[Permission]) -> KubeFacts {
    let (server, client) = match client(kubeconfig).await {
        Ok(c) => c,
        Err(e) => {
            return KubeFacts {
                server: None,
                version: Err(e),
                reviews: Vec::new(),
            };
        }
    };
    let version = match tokio::time::timeout(TIMEOUT, client.apiserver_version()).await {
        Ok(Ok(info)) => Ok(info.git_version),
        // It answered, with a refusal: say so, with the code (checks::kube_api words it).
        Ok(Err(kube::Error::Api(s))) => Err(format!("{ANSWERED_HTTP}{}: {}", s.code, s.message)),
        Ok(Err(e)) => Err(chain(&e)),
        Err(_) => Err(format!("no answer within {TIMEOUT:?}")),
    };
    let mut reviews = Vec::new();
    if version.is_ok() {
        for p in permissions {
            reviews.push((p.clone(), review(&client, p).await));
        }
    }
    KubeFacts {
        server: Some(server),
        version,
        reviews,
    }
}
