//! Watches that survive objects they cannot decode.
//!
//! A typed watch decodes a whole list page at once: one object the Rust type refuses (an
//! L34Route with `protocols: [tcp]`, which Meridio-2's own CRD admits, a field of a newer
//! schema, a value another tool wrote) fails the page, the watcher retries for ever, and the
//! store never fills, so the agent offers nothing at all. Here every object is decoded on its
//! own ([`Decoded`]): one that does not decode is left out of the store (or, when the store
//! holds an earlier version of it that did decode, that version stays: what was served keeps
//! being served), reported once per object version (a log line, and the watch's
//! [`Undecodable`] list the status and the RivoraNode show), and everything else is served.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use serde::Deserialize;
use serde::de::{DeserializeOwned, Deserializer};

/// An object of kind `K` as the API server sent it: decoded, or why not (with its metadata,
/// which names it).
#[derive(Clone, Debug)]
pub enum Decoded<K> {
    /// It decoded.
    Ok(K),
    /// It did not: its metadata (as far as it decodes) and the decoder's error.
    Bad {
        /// The object's metadata (boxed: the bad case is the rare one).
        metadata: Box<ObjectMeta>,
        /// Why it does not decode as `K` (serde's message, naming the field).
        error: String,
    },
}

impl<'de, K: DeserializeOwned> Deserialize<'de> for Decoded<K> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(d)?;
        Ok(match K::deserialize(&value) {
            Ok(k) => Decoded::Ok(k),
            Err(e) => Decoded::Bad {
                metadata: Box::new(
                    value
                        .get("metadata")
                        .and_then(|m| ObjectMeta::deserialize(m).ok())
                        .unwrap_or_default(),
                ),
                error: with_path::<K>(&value).unwrap_or_else(|| e.to_string()),
            },
        })
    }
}

/// Why `value` does not decode as `K`, led by the path of the field that failed
/// (`status.conditions[0].lastTransitionTime: ...`): serde's own message names the value but
/// not always where it is. Decoded a second time, only for an object that failed.
fn with_path<K: DeserializeOwned>(value: &serde_json::Value) -> Option<String> {
    let e = serde_path_to_error::deserialize::<_, K>(value).err()?;
    let path = e.path().to_string();
    Some(if path.is_empty() || path == "." {
        e.inner().to_string()
    } else {
        format!("{path}: {}", e.inner())
    })
}

impl<K: Resource> Resource for Decoded<K> {
    type DynamicType = K::DynamicType;
    type Scope = K::Scope;

    fn kind(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::kind(dt)
    }
    fn group(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::group(dt)
    }
    fn version(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::version(dt)
    }
    fn plural(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        match self {
            Decoded::Ok(k) => k.meta(),
            Decoded::Bad { metadata, .. } => metadata.as_ref(),
        }
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        match self {
            Decoded::Ok(k) => k.meta_mut(),
            Decoded::Bad { metadata, .. } => metadata.as_mut(),
        }
    }
}

/// One object of a watch that does not decode: what names it to a user (and carries an Event)
/// and why it was left out.
#[derive(Clone, Debug, PartialEq)]
pub struct BadObject {
    /// The object: apiVersion, kind, namespace, name, uid and the resourceVersion seen (what
    /// an Event's `regarding` needs).
    pub reference: ObjectReference,
    /// Why it does not decode (serde's message, naming the field).
    pub error: String,
}

/// The objects of one watch that do not decode, by `namespace/name` (or `name`). An object
/// leaves the list when a version of it decodes or it is deleted.
///
/// Why more than a map: a relist (after a watch error or an expired resourceVersion) sends
/// every object again; one still undecodable at the same version was already reported and is
/// not logged again. What the previous list held waits in `before` until the new list ends.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Undecodable {
    objects: BTreeMap<String, BadObject>,
    before: Option<BTreeMap<String, BadObject>>,
}

impl Undecodable {
    /// None yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The objects that do not decode now, by `namespace/name`.
    pub fn objects(&self) -> &BTreeMap<String, BadObject> {
        &self.objects
    }

    /// How many objects do not decode now.
    pub fn len(&self) -> usize {
        self.objects.len()
    }

    /// Whether a relist is under way (what [`Self::objects`] holds is partial).
    pub fn relisting(&self) -> bool {
        self.before.is_some()
    }

    /// Whether every object decodes.
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    /// Records `name` as undecodable; true when this version of it is new (to be logged).
    fn record(&mut self, name: String, bad: BadObject) -> bool {
        let seen = |m: &BTreeMap<String, BadObject>| {
            m.get(&name)
                .is_some_and(|b| b.reference.resource_version == bad.reference.resource_version)
        };
        let new = !seen(&self.objects) && !self.before.as_ref().is_some_and(seen);
        self.objects.insert(name, bad);
        new
    }

    /// `name` decodes (or is gone).
    fn forget(&mut self, name: &str) {
        self.objects.remove(name);
        if let Some(b) = &mut self.before {
            b.remove(name);
        }
    }

    /// A relist starts: what it does not list again leaves when it ends.
    fn relist(&mut self) {
        let before = std::mem::take(&mut self.objects);
        self.before = Some(before);
    }

    /// The relist ended.
    fn listed(&mut self) {
        self.before = None;
    }
}

/// `namespace/name`, or `name` for a cluster-scoped object.
fn label(meta: &ObjectMeta) -> String {
    match &meta.namespace {
        Some(ns) => format!("{ns}/{}", meta.name.as_deref().unwrap_or("")),
        None => meta.name.clone().unwrap_or_default(),
    }
}

/// Turns an event of [`Decoded`] objects into one of `K` for the store `reader` reads: a
/// decoded object passes; one that does not is recorded in `bad` (and logged when this
/// version is new) and stands for the version the store holds, if any: re-applied at a
/// relist, deleted on a delete, left alone otherwise. None: nothing for the store.
pub fn decoded_event<K>(
    kind: &str,
    ev: watcher::Event<Decoded<K>>,
    reader: &Store<K>,
    bad: &mut Undecodable,
) -> Option<watcher::Event<K>>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    use watcher::Event as E;
    let split = |d: Decoded<K>, bad: &mut Undecodable| match d {
        Decoded::Ok(k) => {
            bad.forget(&label(k.meta()));
            Ok(k)
        }
        Decoded::Bad { metadata, error } => {
            let name = label(&metadata);
            let version = metadata.resource_version.clone().unwrap_or_default();
            let entry = BadObject {
                reference: ObjectReference {
                    api_version: Some(K::api_version(&()).into_owned()),
                    kind: Some(K::kind(&()).into_owned()),
                    namespace: metadata.namespace.clone(),
                    name: metadata.name.clone(),
                    uid: metadata.uid.clone(),
                    resource_version: Some(version.clone()),
                    field_path: None,
                },
                error: error.clone(),
            };
            if bad.record(name.clone(), entry) {
                tracing::warn!(
                    kind,
                    object = %name,
                    resource_version = %version,
                    "cannot decode this object: left out, everything else is served \
                     (an earlier version that decoded stays in force): {error}"
                );
            }
            let held = metadata.name.as_ref().and_then(|n| {
                let mut r = ObjectRef::<K>::new(n);
                if let Some(ns) = &metadata.namespace {
                    r = r.within(ns);
                }
                reader.get(&r)
            });
            Err((metadata, held))
        }
    };
    match ev {
        E::Init => {
            // A relist: what is still undecodable is listed again (and not logged again).
            bad.relist();
            Some(E::Init)
        }
        E::InitDone => {
            bad.listed();
            Some(E::InitDone)
        }
        E::InitApply(d) => match split(d, bad) {
            Ok(k) => Some(E::InitApply(k)),
            Err((_, held)) => held.map(|k| E::InitApply((*k).clone())),
        },
        E::Apply(d) => match split(d, bad) {
            Ok(k) => Some(E::Apply(k)),
            Err(_) => None,
        },
        E::Delete(d) => match split(d, bad) {
            Ok(k) => Some(E::Delete(k)),
            Err((metadata, held)) => {
                bad.forget(&label(&metadata));
                held.map(|k| E::Delete((*k).clone()))
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector;
    use rivora_k8s_api::meridio::L34Route;

    fn route(name: &str, rv: &str, protocols: &str) -> Decoded<L34Route> {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "meridio-2.nordix.org/v1alpha1",
            "kind": "L34Route",
            "metadata": {"name": name, "namespace": "red", "resourceVersion": rv},
            "spec": {
                "parentRefs": [{"name": "gw"}],
                "backendRefs": [{"name": "dg", "kind": "DistributionGroup"}],
                "destinationCIDRs": ["20.0.0.1/32"],
                "protocols": serde_json::from_str::<serde_json::Value>(protocols).unwrap(),
                "priority": 1,
            }
        }))
        .expect("a Decoded never fails on an object")
    }

    #[test]
    fn an_object_that_does_not_decode_is_named_and_left_out() {
        let ok = route("a", "1", r#"["TCP"]"#);
        assert!(matches!(ok, Decoded::Ok(_)), "{ok:?}");
        // A protocol value the Rust type refuses: the object is named, not lost.
        let bad = route("b", "2", r#"[17]"#);
        let Decoded::Bad { metadata, error } = &bad else {
            panic!("{bad:?}")
        };
        assert_eq!(label(metadata), "red/b");
        // The message leads with the field's path.
        assert!(error.starts_with("spec.protocols[0]: "), "{error}");
    }

    #[test]
    fn the_store_keeps_what_decoded_and_lists_what_did_not() {
        let (reader, mut writer) = reflector::store::<L34Route>();
        let mut bad = Undecodable::new();
        let mut feed = |ev: watcher::Event<Decoded<L34Route>>, bad: &mut Undecodable| {
            if let Some(e) = decoded_event("L34Route", ev, &reader, bad) {
                writer.apply_watcher_event(&e);
            }
        };
        use watcher::Event as E;
        feed(E::Init, &mut bad);
        feed(E::InitApply(route("a", "1", r#"["TCP"]"#)), &mut bad);
        feed(E::InitApply(route("b", "2", r#"[17]"#)), &mut bad);
        feed(E::InitDone, &mut bad);
        let names = |r: &Store<L34Route>| {
            let mut v: Vec<String> = r
                .state()
                .iter()
                .map(|o| o.meta().name.clone().unwrap())
                .collect();
            v.sort();
            v
        };
        assert_eq!(
            names(&reader),
            ["a"],
            "the bad one left out, the list served"
        );
        assert_eq!(bad.objects().keys().collect::<Vec<_>>(), ["red/b"]);
        // `a` turns bad: its decoded version stays (and a relist keeps it); `b` is fixed.
        feed(E::Apply(route("a", "3", r#"[17]"#)), &mut bad);
        feed(E::Apply(route("b", "4", r#"["UDP"]"#)), &mut bad);
        assert_eq!(names(&reader), ["a", "b"]);
        assert_eq!(bad.objects().keys().collect::<Vec<_>>(), ["red/a"]);
        feed(E::Init, &mut bad);
        feed(E::InitApply(route("a", "3", r#"[17]"#)), &mut bad);
        feed(E::InitApply(route("b", "4", r#"["UDP"]"#)), &mut bad);
        feed(E::InitDone, &mut bad);
        assert_eq!(
            names(&reader),
            ["a", "b"],
            "the last good `a` stays across a relist"
        );
        // Deleted while undecodable: gone from the store and from the list.
        feed(E::Delete(route("a", "5", r#"[17]"#)), &mut bad);
        assert_eq!(names(&reader), ["b"]);
        assert!(bad.is_empty());
    }

    #[test]
    fn a_relist_reports_an_object_again_only_at_a_new_version() {
        let bad = |v: &str| BadObject {
            reference: ObjectReference {
                resource_version: Some(v.into()),
                ..Default::default()
            },
            error: "e".into(),
        };
        let mut u = Undecodable::new();
        assert!(u.record("red/b".into(), bad("2")), "first seen: logged");
        assert!(
            !u.record("red/b".into(), bad("2")),
            "same version: not again"
        );
        u.relist();
        assert!(u.is_empty(), "during a relist only what it listed so far");
        assert!(
            !u.record("red/b".into(), bad("2")),
            "listed again: not logged"
        );
        u.listed();
        u.relist();
        assert!(
            u.record("red/b".into(), bad("3")),
            "a new version is logged"
        );
        u.listed();
        u.relist();
        u.listed();
        assert!(u.is_empty(), "gone from the list: gone");
        assert!(
            u.record("red/b".into(), bad("3")),
            "back after it was gone: logged"
        );
    }
}
