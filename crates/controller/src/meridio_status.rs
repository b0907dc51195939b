//! DistributionGroup status for Meridio-2's Gateways, opt-in (`--distribution-group-status`,
//! chart value `meridio.distributionGroupStatus`): the `Ready` and `CapacityExceeded`
//! conditions as Meridio-2 defines them (`shared/research/meridio2.md` §1.1), for clusters where
//! Rivora serves Meridio-2's model without Meridio-2's controller-manager.
//!
//! Who writes what: in a cluster running Meridio-2, its DistributionGroup controller owns these
//! two conditions (and the LoadBalancerEndpointSlices); rivorad only reads. Hence off by
//! default: two writers of one condition would overwrite each other on every pass. With the
//! flag, rivora-controller's leader owns them, and still nothing else of the group (never its
//! spec, never a slice: identifiers stay whoever writes the slices').
//!
//! The rules:
//!
//! - Meridio-2's Gateways are those whose GatewayClass has `controllerName`
//!   [`GATEWAY_CONTROLLER_NAME`] (acceptance is not looked at: without Meridio-2's gateway
//!   controller nobody accepts them).
//! - Each one's groups and conditions are [`rivora_k8s_source::meridio::translate()`]'s, the
//!   function rivorad serves the Gateway with, so the status says what the nodes do: which
//!   groups belong to the Gateway, `MultipleGateways` (counting every existing Gateway that
//!   reaches the group, as rivorad does), the targets behind `Ready` and the identifiers
//!   behind `CapacityExceeded`.
//! - A group no Meridio-2 Gateway claims gets nothing written: its status stays as it is.
//! - `observedGeneration` is the group's generation; `lastTransitionTime` is kept while a
//!   condition's status does not change ([`stamp`]).
//! - A condition type this writer owns that the report leaves out (`CapacityExceeded` of a
//!   group not served, which Meridio-2 removes) goes away with the next write, when this field
//!   manager is the one that wrote it (server-side apply removes what the applier owned and no
//!   longer applies; another writer's is left alone).
//! - Nothing is written when the conditions already say the same ([`status_update`]).
//!
//! This module is the pure part; [`watch`] holds the watches and the writes of the leader's
//! pass.

pub mod watch;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use gateway_api::gatewayclasses::GatewayClass;
use gateway_api::gateways::Gateway;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use rivora_k8s_api::meridio::distribution_group::condition;
use rivora_k8s_api::meridio::{DistributionGroup, GATEWAY_CONTROLLER_NAME, GROUP, VERSION};
use rivora_k8s_source::meridio::status::stamp;
use rivora_k8s_source::meridio::{GatewayRef, GroupReport, MeridioSnapshot, translate};
use serde_json::json;

use crate::observe::FIELD_MANAGER;

/// The condition types this writer owns on a DistributionGroup.
pub const OWNED_CONDITIONS: [&str; 2] = [condition::READY, condition::CAPACITY_EXCEEDED];

/// A group by namespace and name.
pub type GroupKey = (String, String);

/// The report of a group a Meridio-2 Gateway claims, with that Gateway.
#[derive(Clone, Debug, PartialEq)]
pub struct Claimed {
    /// The Gateway whose translation reported the group (the first by namespace and name when
    /// several did: they then all say `MultipleGateways`, alike).
    pub gateway: GatewayRef,
    /// What [`translate()`] said of the group; its conditions are what to write, unstamped.
    pub report: GroupReport,
}

fn name_of(meta: &ObjectMeta) -> &str {
    meta.name.as_deref().unwrap_or_default()
}

fn namespace_of(meta: &ObjectMeta) -> &str {
    meta.namespace.as_deref().unwrap_or_default()
}

/// Whether a GatewayClass is Meridio-2's ([`GATEWAY_CONTROLLER_NAME`]).
pub fn is_meridio_class(class: &GatewayClass) -> bool {
    class.spec.controller_name == GATEWAY_CONTROLLER_NAME
}

/// The Gateways of Meridio-2's GatewayClasses, sorted.
pub fn meridio_gateways(
    classes: &[Arc<GatewayClass>],
    gateways: &[Arc<Gateway>],
) -> Vec<GatewayRef> {
    let ours: BTreeSet<&str> = classes
        .iter()
        .filter(|c| is_meridio_class(c))
        .map(|c| name_of(&c.metadata))
        .collect();
    let mut out: Vec<GatewayRef> = gateways
        .iter()
        .filter(|g| ours.contains(g.spec.gateway_class_name.as_str()))
        .map(|g| GatewayRef::new(namespace_of(&g.metadata), name_of(&g.metadata)))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Every group a Meridio-2 Gateway claims, with its report: [`translate()`] of each Gateway of
/// [`meridio_gateways`] over `snap` (which holds every Gateway, so that any existing Gateway
/// reaching a group counts towards `MultipleGateways`, as in rivorad).
pub fn claimed_groups(
    classes: &[Arc<GatewayClass>],
    snap: &MeridioSnapshot,
) -> BTreeMap<GroupKey, Claimed> {
    let gateways = meridio_gateways(classes, &snap.gateways);
    // translate() reads the Gateway's namespace only: hand each namespace just its objects,
    // so many Gateways do not each scan every object of the cluster.
    let mut by_ns: BTreeMap<&str, MeridioSnapshot> = gateways
        .iter()
        .map(|g| {
            (
                g.namespace.as_str(),
                MeridioSnapshot {
                    gateways: snap.gateways.clone(),
                    ..MeridioSnapshot::default()
                },
            )
        })
        .collect();
    for dg in &snap.distribution_groups {
        if let Some(s) = by_ns.get_mut(namespace_of(&dg.metadata)) {
            s.distribution_groups.push(Arc::clone(dg));
        }
    }
    for r in &snap.routes {
        if let Some(s) = by_ns.get_mut(namespace_of(&r.metadata)) {
            s.routes.push(Arc::clone(r));
        }
    }
    for l in &snap.lb_slices {
        if let Some(s) = by_ns.get_mut(namespace_of(&l.metadata)) {
            s.lb_slices.push(Arc::clone(l));
        }
    }
    for c in &snap.core_slices {
        if let Some(s) = by_ns.get_mut(namespace_of(&c.metadata)) {
            s.core_slices.push(Arc::clone(c));
        }
    }
    let mut out = BTreeMap::new();
    for gw in &gateways {
        let outcome = translate(gw, &by_ns[gw.namespace.as_str()]);
        for report in outcome.groups {
            out.entry((report.namespace.clone(), report.name.clone()))
                .or_insert_with(|| Claimed {
                    gateway: gw.clone(),
                    report,
                });
        }
    }
    out
}

/// Whether this controller's field manager owns condition `type_` of the object's status (so
/// an apply without it removes it).
pub fn owns_condition(meta: &ObjectMeta, type_: &str) -> bool {
    let key = format!("k:{}", json!({ "type": type_ }));
    meta.managed_fields.iter().flatten().any(|m| {
        m.manager.as_deref() == Some(FIELD_MANAGER)
            && m.subresource.as_deref() == Some("status")
            && m.fields_v1
                .as_ref()
                .and_then(|f| f.0.get("f:status"))
                .and_then(|s| s.get("f:conditions"))
                .and_then(|c| c.as_object())
                .is_some_and(|c| c.contains_key(&key))
    })
}

/// Whether two conditions say the same (`lastTransitionTime` aside).
fn same(a: &Condition, b: &Condition) -> bool {
    a.type_ == b.type_
        && a.status == b.status
        && a.reason == b.reason
        && a.message == b.message
        && a.observed_generation == b.observed_generation
}

/// The conditions to apply to `dg` for the `desired` ones of its report, stamped against those
/// it has at `now`; None when its status already says the same, and no condition this writer
/// owns and no longer wants is left to remove.
pub fn status_update(
    dg: &DistributionGroup,
    desired: &[Condition],
    now: Timestamp,
) -> Option<Vec<Condition>> {
    let current: &[Condition] = dg.status.as_ref().map_or(&[], |s| &s.conditions[..]);
    let all_current = desired.iter().all(|d| current.iter().any(|c| same(c, d)));
    let left_to_remove = OWNED_CONDITIONS.iter().any(|t| {
        !desired.iter().any(|d| d.type_ == *t)
            && current.iter().any(|c| c.type_ == *t)
            && owns_condition(&dg.metadata, t)
    });
    if all_current && !left_to_remove {
        return None;
    }
    Some(stamp(desired, current, now))
}

/// The server-side apply body of a group's status: these conditions, and nothing else.
pub fn apply_body(conditions: &[Condition]) -> serde_json::Value {
    json!({
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "kind": "DistributionGroup",
        "status": {"conditions": conditions},
    })
}
