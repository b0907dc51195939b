//! The conditions of a DistributionGroup, as Meridio-2 defines them
//! (`shared/research/meridio2.md` §1.1; reasons in
//! [`rivora_k8s_api::meridio::distribution_group::condition`]):
//!
//! - `Ready`: `True/EndpointsAvailable` with at least one usable target, `False/NoEndpoints`
//!   without, `False/MultipleGateways` when more than one Gateway reaches the group (it is then
//!   not served). Rivora adds `False/Refused` for a group the datapath cannot hold (say,
//!   maxEndpoints above its limit), with the reason in the message.
//! - `CapacityExceeded`: `True/MaglevCapacityExceeded` when ready endpoints were left out
//!   because their identifier is not below maxEndpoints ("5/37 endpoints excluded (32
//!   capacity)"), else `False/WithinCapacity`. Meridio-2 removes the condition instead of
//!   writing False; a False condition says the same and shows that the check ran.
//!
//! Why no timestamps here: [`crate::meridio::translate()`] is a pure function of the snapshot,
//! and `lastTransitionTime` depends on the previous status. The writer calls [`stamp`] with
//! the conditions it read and the time it writes.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use rivora_k8s_api::meridio::distribution_group::condition::{self, reason};

/// `lastTransitionTime` of the conditions [`crate::meridio::translate()`] returns (the Unix
/// epoch): a placeholder that [`stamp`] replaces, never written as is.
pub const UNSET_TIME: Time = Time(Timestamp::UNIX_EPOCH);

/// `CapacityExceeded=False`: every ready endpoint has a slot (Rivora's reason; Meridio-2
/// removes the condition instead).
pub const REASON_WITHIN_CAPACITY: &str = "WithinCapacity";

/// `Ready=False`: the datapath cannot serve the group as written (Rivora's reason; the message
/// says why).
pub const REASON_REFUSED: &str = "Refused";

/// `Ready=False/NoEndpoints`'s message (Meridio-2's text).
pub const MESSAGE_NO_ENDPOINTS: &str = "No endpoints available";

/// `Ready=False/MultipleGateways`'s message (Meridio-2's text); the Gateways follow it.
pub const MESSAGE_MULTIPLE_GATEWAYS: &str =
    "DistributionGroup is referenced by multiple Gateways; only a single Gateway is supported";

fn cond(type_: &str, status: bool, reason: &str, message: String, generation: i64) -> Condition {
    Condition {
        type_: type_.into(),
        status: if status { "True" } else { "False" }.into(),
        reason: reason.into(),
        message,
        observed_generation: Some(generation),
        last_transition_time: UNSET_TIME,
    }
}

/// `Ready` of a served group with `usable` targets.
pub fn ready(usable: usize, generation: i64) -> Condition {
    if usable == 0 {
        return cond(
            condition::READY,
            false,
            reason::NO_ENDPOINTS,
            MESSAGE_NO_ENDPOINTS.into(),
            generation,
        );
    }
    let noun = if usable == 1 { "endpoint" } else { "endpoints" };
    cond(
        condition::READY,
        true,
        reason::ENDPOINTS_AVAILABLE,
        format!("{usable} {noun} available"),
        generation,
    )
}

/// `Ready=False/MultipleGateways` of a group that `gateways` (`NS/NAME`, sorted) all reach.
pub fn multiple_gateways(gateways: &[String], generation: i64) -> Condition {
    cond(
        condition::READY,
        false,
        reason::MULTIPLE_GATEWAYS,
        format!("{MESSAGE_MULTIPLE_GATEWAYS} ({})", gateways.join(", ")),
        generation,
    )
}

/// `Ready=False/Refused`: the group cannot be served, `why`.
pub fn refused(why: String, generation: i64) -> Condition {
    cond(condition::READY, false, REASON_REFUSED, why, generation)
}

/// The `CapacityExceeded` message: "`excluded`/`total` endpoints excluded (`capacity`
/// capacity)", Meridio-2's form with endpoints for Pods.
pub fn capacity_message(excluded: usize, total: usize, capacity: u32) -> String {
    format!("{excluded}/{total} endpoints excluded ({capacity} capacity)")
}

/// `CapacityExceeded` of a served group: `excluded` of `total` ready endpoints (distinct
/// identifiers) had no slot among `capacity` (maxEndpoints).
pub fn capacity(excluded: usize, total: usize, capacity: u32, generation: i64) -> Condition {
    if excluded == 0 {
        return cond(
            condition::CAPACITY_EXCEEDED,
            false,
            REASON_WITHIN_CAPACITY,
            format!("every ready endpoint has a slot ({capacity} capacity)"),
            generation,
        );
    }
    cond(
        condition::CAPACITY_EXCEEDED,
        true,
        reason::MAGLEV_CAPACITY_EXCEEDED,
        capacity_message(excluded, total, capacity),
        generation,
    )
}

/// `desired` with `lastTransitionTime` filled in: kept from the `previous` condition of the
/// same type when its status is unchanged, else `now` (what `meta.SetStatusCondition` does in
/// Meridio-2's controllers, and what every Kubernetes API asks of the field).
pub fn stamp(desired: &[Condition], previous: &[Condition], now: Timestamp) -> Vec<Condition> {
    desired
        .iter()
        .map(|c| {
            let since = previous
                .iter()
                .find(|p| p.type_ == c.type_ && p.status == c.status)
                .map(|p| p.last_transition_time.clone())
                .unwrap_or(Time(now));
            Condition {
                last_transition_time: since,
                ..c.clone()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn ready_follows_the_usable_targets() {
        let c = ready(2, 7);
        assert_eq!(
            (c.type_.as_str(), c.status.as_str(), c.reason.as_str()),
            ("Ready", "True", "EndpointsAvailable")
        );
        assert_eq!(c.message, "2 endpoints available");
        assert_eq!(c.observed_generation, Some(7));
        assert_eq!(c.last_transition_time, UNSET_TIME);
        assert_eq!(ready(1, 7).message, "1 endpoint available");
        let c = ready(0, 7);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str(), c.message.as_str()),
            ("False", "NoEndpoints", "No endpoints available")
        );
        let c = multiple_gateways(&["red/gw-a".into(), "red/gw-b".into()], 1);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "MultipleGateways")
        );
        assert!(
            c.message
                .ends_with("only a single Gateway is supported (red/gw-a, red/gw-b)")
        );
        let c = refused("too big".into(), 1);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str(), c.message.as_str()),
            ("False", "Refused", "too big")
        );
    }

    #[test]
    fn capacity_says_how_many_were_left_out() {
        let c = capacity(5, 37, 32, 4);
        assert_eq!(
            (c.type_.as_str(), c.status.as_str(), c.reason.as_str()),
            ("CapacityExceeded", "True", "MaglevCapacityExceeded")
        );
        assert_eq!(c.message, "5/37 endpoints excluded (32 capacity)");
        assert_eq!(c.observed_generation, Some(4));
        let c = capacity(0, 3, 32, 4);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "WithinCapacity")
        );
    }

    #[test]
    fn stamp_keeps_the_time_of_an_unchanged_status() {
        let earlier = Time(t("2026-07-01T10:00:00Z"));
        let mut was_ready = ready(1, 1);
        was_ready.last_transition_time = earlier.clone();
        let mut was_within = capacity(0, 1, 32, 1);
        was_within.last_transition_time = earlier.clone();
        let now = t("2026-07-02T10:00:00Z");
        let got = stamp(
            &[ready(3, 2), capacity(1, 4, 3, 2)],
            &[was_ready, was_within],
            now,
        );
        // Ready stayed True (message and generation change, the time does not).
        assert_eq!(got[0].last_transition_time, earlier);
        assert_eq!(got[0].message, "3 endpoints available");
        assert_eq!(got[0].observed_generation, Some(2));
        // CapacityExceeded went False -> True: now.
        assert_eq!(got[1].last_transition_time, Time(now));
        // Nothing before: now.
        assert_eq!(
            stamp(&[ready(0, 1)], &[], now)[0].last_transition_time,
            Time(now)
        );
    }
}
