//! Warning Events the node agent records on the objects it cannot serve.
//!
//! Why Events as well as the RivoraNode report: a user looks at the object (`kubectl describe
//! service`), not at every node's report. A Service this node refuses (a capacity it does not
//! fit, an endpoint it cannot program, a key another Service holds) and an object its watches
//! leave out because it does not decode each get one Warning Event per cause, naming the node
//! and the reason; the rest keeps being served. What to warn about is computed here from the
//! observed state (pure, [`warnings`]); [`publish`] is the edge that records them, once per
//! cause while it holds (a cause that clears and comes back is recorded again).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{ObjectReference, Service};
use kube::Client;
use kube::Resource;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{ObjectRef, Store};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::initsync::Kind;
use crate::lenient::BadObject;
use crate::translate::{Outcome, ServiceKey, TranslateError};

/// Longest Event note the API server takes (events.k8s.io/v1 `note`: 1 kB), with room to spare.
const MAX_NOTE: usize = 1000;

/// One Warning Event to record.
#[derive(Clone, Debug, PartialEq)]
pub struct Warning {
    /// The object it is about.
    pub regarding: ObjectReference,
    /// A CamelCase reason (`CapacityExceeded`, `Undecodable`, ...).
    pub reason: String,
    /// What happened, naming the node, the field and why.
    pub note: String,
    /// What this node was doing (`Program`, `Decode`).
    pub action: &'static str,
}

impl Warning {
    /// What makes two warnings the same cause: the object (its uid, and for an undecodable
    /// object its resourceVersion: each version is reported) and the reason. The note is left
    /// out: a capacity refusal's figures change at every retry and are not a new cause.
    fn cause(&self) -> (String, String) {
        let r = &self.regarding;
        let object = format!(
            "{}/{}/{}/{}/{}",
            r.kind.as_deref().unwrap_or(""),
            r.namespace.as_deref().unwrap_or(""),
            r.name.as_deref().unwrap_or(""),
            r.uid.as_deref().unwrap_or(""),
            if self.action == DECODE {
                r.resource_version.as_deref().unwrap_or("")
            } else {
                ""
            }
        );
        (object, self.reason.clone())
    }
}

/// The action of a Service this node does not program.
const PROGRAM: &str = "Program";
/// The action of an object left out because it does not decode.
const DECODE: &str = "Decode";

/// The Event reason for a Service this node does not program.
pub fn event_reason(e: &TranslateError) -> &'static str {
    match e {
        TranslateError::Capacity { .. } => "CapacityExceeded",
        TranslateError::Endpoint(_) => "InvalidEndpoint",
        TranslateError::IngressAddress(_) => "InvalidIngressAddress",
        TranslateError::SourceRange(_) => "InvalidSourceRange",
        TranslateError::ServicePort(_) => "InvalidServicePort",
        TranslateError::EndpointIsVip { .. } => "EndpointIsVIP",
        TranslateError::EndpointIsNode { .. } => "EndpointIsNode",
        TranslateError::KeyConflict { .. } | TranslateError::KeyHeld { .. } => "KeyConflict",
        TranslateError::Policy { .. } => "InvalidServicePolicy",
        TranslateError::InvalidVip { .. } => "InvalidVIP",
    }
}

fn clip(mut note: String) -> String {
    if note.len() > MAX_NOTE {
        let mut cut = MAX_NOTE - 3;
        while !note.is_char_boundary(cut) {
            cut -= 1;
        }
        note.truncate(cut);
        note.push_str("...");
    }
    note
}

/// An object (a DistributionGroup or L34Route) whose part of the datapath rivorad refused
/// alone.
#[derive(Clone, Debug, PartialEq)]
pub struct ObjectRefusal {
    /// The object.
    pub regarding: ObjectReference,
    /// The Event reason (`CapacityExceeded`, `Invalid`).
    pub reason: &'static str,
    /// Why, as the datapath said.
    pub why: String,
}

/// The warnings of the observed state: each failing Service (as the report shows it, so a
/// Service refused for capacity counts) that `services` holds, each object a watch left out,
/// and each Meridio-2 object whose classifier group or rule the datapath refused alone.
pub fn warnings(
    node: &str,
    results: &BTreeMap<ServiceKey, Outcome>,
    services: &Store<Service>,
    undecodable: &[(Kind, BTreeMap<String, BadObject>)],
    classifier: &[ObjectRefusal],
) -> Vec<Warning> {
    let mut out = Vec::new();
    for (key, outcome) in results {
        let Outcome::Failed(e) = outcome else {
            continue;
        };
        let Some(svc) = services.get(&ObjectRef::new(&key.name).within(&key.namespace)) else {
            continue;
        };
        out.push(Warning {
            regarding: svc.object_ref(&()),
            reason: event_reason(e).to_string(),
            note: clip(format!("node {node} does not program this Service: {e}")),
            action: PROGRAM,
        });
    }
    for (kind, objects) in undecodable {
        for bad in objects.values() {
            out.push(Warning {
                regarding: bad.reference.clone(),
                reason: "Undecodable".into(),
                note: clip(format!(
                    "node {node} leaves this {kind} out (everything else is served): it does \
                     not decode: {}",
                    bad.error
                )),
                action: DECODE,
            });
        }
    }
    for r in classifier {
        let kind = r.regarding.kind.as_deref().unwrap_or("object");
        out.push(Warning {
            regarding: r.regarding.clone(),
            reason: r.reason.to_string(),
            note: clip(format!(
                "node {node} does not program this {kind} (everything else is applied): {}",
                r.why
            )),
            action: PROGRAM,
        });
    }
    out
}

/// Records the warnings `wanted` holds as Warning Events from `rivorad` on `node`, each cause
/// once while it holds. Ends when the sender is dropped.
pub async fn publish(client: Client, node: String, mut wanted: watch::Receiver<Vec<Warning>>) {
    let recorder = Recorder::new(
        client,
        Reporter {
            controller: rivora_k8s_api::rivora_node::FIELD_MANAGER.into(),
            instance: Some(node),
        },
    );
    let mut recorded: BTreeSet<(String, String)> = BTreeSet::new();
    // Failures are logged once per error text, not per Event.
    let mut failures: BTreeSet<String> = BTreeSet::new();
    while wanted.changed().await.is_ok() {
        let now = wanted.borrow_and_update().clone();
        let causes: BTreeSet<(String, String)> = now.iter().map(Warning::cause).collect();
        // A cause that cleared is recorded again if it comes back.
        recorded.retain(|c| causes.contains(c));
        for w in now {
            let cause = w.cause();
            if recorded.contains(&cause) {
                continue;
            }
            let ev = Event {
                type_: EventType::Warning,
                reason: w.reason.clone(),
                note: Some(w.note.clone()),
                action: w.action.into(),
                secondary: None,
            };
            match recorder.publish(&ev, &w.regarding).await {
                Ok(()) => {}
                Err(e) => {
                    let text = e.to_string();
                    if failures.insert(text.clone()) {
                        warn!(
                            reason = %w.reason,
                            error = %text,
                            "could not record a Warning Event (later ones failing the same way \
                             are not logged)"
                        );
                    }
                }
            }
            // Recorded or not, it is not retried while the cause holds: one try per cause.
            recorded.insert(cause);
        }
        if failures.len() > 64 {
            info!("clearing the remembered Event failures");
            failures.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector;
    use kube::runtime::watcher;

    fn service(ns: &str, name: &str, uid: &str) -> Service {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"namespace": ns, "name": name, "uid": uid},
        }))
        .unwrap()
    }

    fn store(svcs: &[Service]) -> Store<Service> {
        let (reader, mut writer) = reflector::store::<Service>();
        for s in svcs {
            writer.apply_watcher_event(&watcher::Event::Apply(s.clone()));
        }
        reader
    }

    fn key(ns: &str, name: &str) -> ServiceKey {
        ServiceKey {
            namespace: ns.into(),
            name: name.into(),
        }
    }

    #[test]
    fn a_refused_service_an_undecodable_object_and_a_refused_route_each_get_one_warning() {
        let services = store(&[service("a", "big", "u1"), service("a", "ok", "u2")]);
        let mut results = BTreeMap::new();
        results.insert(
            key("a", "big"),
            Outcome::Failed(TranslateError::Capacity {
                name: "k8s/a/big/http/tcp/10.0.0.1".into(),
                reason: "maglev_table: no room".into(),
            }),
        );
        // A failing Service the store no longer holds: nothing to name.
        results.insert(
            key("a", "gone"),
            Outcome::Failed(TranslateError::Capacity {
                name: "x".into(),
                reason: "y".into(),
            }),
        );
        let bad = BadObject {
            reference: ObjectReference {
                api_version: Some("rivora.dev/v1alpha1".into()),
                kind: Some("ServicePolicy".into()),
                namespace: Some("a".into()),
                name: Some("odd".into()),
                uid: Some("u3".into()),
                resource_version: Some("7".into()),
                field_path: None,
            },
            error: "spec.port: invalid value 70000".into(),
        };
        let undecodable = vec![(
            Kind::ServicePolicy,
            [("a/odd".to_string(), bad)].into_iter().collect(),
        )];
        let route = ObjectRefusal {
            regarding: ObjectReference {
                kind: Some("L34Route".into()),
                namespace: Some("red".into()),
                name: Some("r1".into()),
                uid: Some("u4".into()),
                ..Default::default()
            },
            reason: "CapacityExceeded",
            why: "classifier tables need 409597 more entries of cls_table".into(),
        };
        let w = warnings("n1", &results, &services, &undecodable, &[route]);
        assert_eq!(w.len(), 3, "{w:#?}");
        assert_eq!(w[2].reason, "CapacityExceeded");
        assert_eq!(w[2].regarding.name.as_deref(), Some("r1"));
        assert_eq!(
            w[2].note,
            "node n1 does not program this L34Route (everything else is applied): classifier \
             tables need 409597 more entries of cls_table"
        );
        assert_eq!(w[0].reason, "CapacityExceeded");
        assert_eq!(w[0].regarding.uid.as_deref(), Some("u1"));
        assert!(
            w[0].note.contains("node n1") && w[0].note.contains("maglev_table"),
            "{}",
            w[0].note
        );
        assert_eq!(w[1].reason, "Undecodable");
        assert_eq!(w[1].regarding.kind.as_deref(), Some("ServicePolicy"));
        assert!(w[1].note.contains("invalid value 70000"), "{}", w[1].note);
    }

    #[test]
    fn the_cause_ignores_the_changing_figures_but_not_a_new_version() {
        let w = |note: &str, rv: &str, action: &'static str| Warning {
            regarding: ObjectReference {
                uid: Some("u".into()),
                resource_version: Some(rv.into()),
                ..Default::default()
            },
            reason: "R".into(),
            note: note.into(),
            action,
        };
        assert_eq!(
            w("free run 4", "1", PROGRAM).cause(),
            w("free run 3", "2", PROGRAM).cause()
        );
        assert_ne!(w("x", "1", DECODE).cause(), w("x", "2", DECODE).cause());
    }

    #[test]
    fn a_long_note_is_clipped_on_a_character_boundary() {
        let n = clip("é".repeat(MAX_NOTE));
        assert!(n.len() <= MAX_NOTE && n.ends_with("..."), "{}", n.len());
    }
}
