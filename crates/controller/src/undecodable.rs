//! The objects a replica's watches leave out because they do not decode (a value another tool
//! wrote, a field of a newer schema: rivora_k8s_source::lenient), gathered from every watch,
//! and the Warning Events the leader records on them.
//!
//! Why Events besides the log line and `rivora_controller_undecodable_objects`: the owner of
//! such an object looks at the object (`kubectl describe`), not at the controller's log, and
//! must learn there that Rivora ignores it and why. One Event per object version: a relist
//! sends every object again, and a pass runs every few seconds, neither is a new cause. Only
//! the leader records (every replica watches, one writes); a replica that leads again does not
//! repeat what it recorded before.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use kube::runtime::events::{Event, EventType, Recorder};
use rivora_k8s_source::lenient::BadObject;
use tracing::warn;

/// The Event reason (the node agent records the same on the objects it leaves out).
pub const REASON: &str = "Undecodable";
/// The Event action.
pub const ACTION: &str = "Decode";
/// Longest Event note the API server takes (events.k8s.io/v1: 1 kB).
const MAX_NOTE: usize = 1024;

/// What identifies one version of one object: kind, `namespace/name`, resourceVersion.
type Version = (String, String, String);

/// The undecodable objects of every watch of a replica, and which of them have an Event.
#[derive(Debug, Default)]
pub struct UndecodableObjects {
    by_kind: Mutex<BTreeMap<String, BTreeMap<String, BadObject>>>,
    recorded: Mutex<BTreeSet<Version>>,
}

impl UndecodableObjects {
    /// None yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The watch of `kind` leaves out `objects` now (by `namespace/name`). Call it only with a
    /// complete view (not in the middle of a relist).
    pub fn set(&self, kind: &str, objects: &BTreeMap<String, BadObject>) {
        let mut by_kind = self.by_kind.lock().unwrap_or_else(|p| p.into_inner());
        if objects.is_empty() {
            by_kind.remove(kind);
        } else {
            by_kind.insert(kind.to_string(), objects.clone());
        }
    }

    /// Records a Warning Event on each object version that has none yet; one that fails to
    /// record is tried again at the next call.
    pub async fn record(&self, recorder: &Recorder) {
        let due = {
            let by_kind = self.by_kind.lock().unwrap_or_else(|p| p.into_inner());
            let mut recorded = self.recorded.lock().unwrap_or_else(|p| p.into_inner());
            due(&by_kind, &mut recorded)
        };
        for (version, bad) in due {
            let ev = event(&bad);
            if let Err(e) = recorder.publish(&ev, &bad.reference).await {
                warn!(kind = %version.0, object = %version.1, error = %e, "could not record an Event");
                continue;
            }
            self.recorded
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(version);
        }
    }
}

/// The object versions in `by_kind` without an Event yet; `recorded` is cut to the versions
/// still undecodable (an object fixed or deleted is forgotten).
fn due(
    by_kind: &BTreeMap<String, BTreeMap<String, BadObject>>,
    recorded: &mut BTreeSet<Version>,
) -> Vec<(Version, BadObject)> {
    let now: BTreeMap<Version, &BadObject> = by_kind
        .iter()
        .flat_map(|(kind, objects)| {
            objects.iter().map(move |(name, bad)| {
                let version = bad.reference.resource_version.clone().unwrap_or_default();
                ((kind.clone(), name.clone(), version), bad)
            })
        })
        .collect();
    recorded.retain(|v| now.contains_key(v));
    now.into_iter()
        .filter(|(v, _)| !recorded.contains(v))
        .map(|(v, bad)| (v, bad.clone()))
        .collect()
}

/// The Warning Event for `bad`.
fn event(bad: &BadObject) -> Event {
    let mut note = format!(
        "rivora-controller cannot decode this object and leaves it out (everything else is \
         served): {}",
        bad.error
    );
    if note.len() > MAX_NOTE {
        let mut cut = MAX_NOTE - 3;
        while !note.is_char_boundary(cut) {
            cut -= 1;
        }
        note.truncate(cut);
        note.push_str("...");
    }
    Event {
        type_: EventType::Warning,
        reason: REASON.into(),
        note: Some(note),
        action: ACTION.into(),
        secondary: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ObjectReference;

    fn bad(name: &str, version: &str) -> BadObject {
        BadObject {
            reference: ObjectReference {
                kind: Some("AddressPool".into()),
                name: Some(name.into()),
                resource_version: Some(version.into()),
                ..Default::default()
            },
            error: "status.conditions[0].lastTransitionTime: invalid".into(),
        }
    }

    fn objects(list: &[(&str, &str)]) -> BTreeMap<String, BTreeMap<String, BadObject>> {
        let pools = list
            .iter()
            .map(|(n, v)| (n.to_string(), bad(n, v)))
            .collect();
        [("AddressPool".to_string(), pools)].into()
    }

    fn names(d: &[(Version, BadObject)]) -> Vec<String> {
        d.iter().map(|(v, _)| format!("{}@{}", v.1, v.2)).collect()
    }

    /// Each version of each object is due once; a new version is due again; an object fixed
    /// and broken again at a later version is due again; nothing is due twice.
    #[test]
    fn each_object_version_gets_one_event() {
        let mut recorded = BTreeSet::new();
        let mut record = |now: &[(&str, &str)]| {
            let d = due(&objects(now), &mut recorded);
            recorded.extend(d.iter().map(|(v, _)| v.clone()));
            names(&d)
        };
        assert_eq!(record(&[("a", "1"), ("b", "5")]), ["a@1", "b@5"]);
        assert!(record(&[("a", "1"), ("b", "5")]).is_empty(), "a pass again");
        assert_eq!(record(&[("a", "2"), ("b", "5")]), ["a@2"], "a new version");
        assert!(record(&[("b", "5")]).is_empty(), "a fixed");
        assert_eq!(record(&[("a", "7"), ("b", "5")]), ["a@7"], "a broken again");
    }

    #[test]
    fn the_note_names_the_reason_and_fits_an_event() {
        let mut b = bad("a", "1");
        let e = event(&b);
        assert_eq!((e.reason.as_str(), e.action.as_str()), (REASON, ACTION));
        assert!(e.note.unwrap().ends_with("lastTransitionTime: invalid"));
        b.error = "é".repeat(2000);
        let note = event(&b).note.unwrap();
        assert!(
            note.len() <= MAX_NOTE && note.ends_with("..."),
            "{}",
            note.len()
        );
    }
}
