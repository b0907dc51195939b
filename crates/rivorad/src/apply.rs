//! Applying a [`DesiredState`], whichever source produced it: the one place
//! that turns desired state into kernel settings, dataplane maps, probe
//! targets and (through [`crate::announce::reconfigure`]) announcements.
//!
//! Order, at start and on every change:
//! 1. [`program`]: interface sysctls, tunnel source, the VIPs, the
//!    node-wide SYN limit. All or nothing for what the dataplane holds.
//! 2. [`probes`]: the prober follows the new checks.
//! 3. the daemon records the outcome in its status, then, outside the state
//!    lock (it may wait for a BGP speaker to say goodbye), the announcer is
//!    reconfigured.
//!
//! At start the datapath is attached between 1 and 2 (the maps are
//! programmed before the first packet meets them, and the prober only
//! starts once the datapath forwards); on a running daemon
//! [`while_running`] does 1 and 2 together, attaching tc_nat first if the
//! first NAT VIP needs it.

use std::collections::BTreeSet;

use rivora_dataplane::{ApplyReport, BackendKey, Datapath, Dataplane, VipKey};
use rivora_desired::{ApplyMode, DesiredState};
use rivora_health::Prober;
use tracing::{error, info, warn};

use crate::kernel;
use crate::state::{Shared, programs};

/// Programs everything `desired` asks of the kernel and the dataplane: the
/// interface's sysctls, the tunnel source, the VIPs, then the node-wide SYN
/// rate limit (which only takes effect for VIPs without their own). With
/// [`ApplyMode::KeepUnclaimed`], adopted VIPs nothing claims stay as they
/// are ([`Dataplane::apply_keeping`]); with [`ApplyMode::Prune`] they go. A
/// state that breaks the model's rules, or that the dataplane refuses,
/// leaves the dataplane as it was.
pub fn program(
    dataplane: &mut Dataplane,
    desired: &DesiredState,
    mode: ApplyMode,
    interface: &str,
) -> anyhow::Result<ApplyReport> {
    if let Err(problems) = desired.validate() {
        let lines: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
        anyhow::bail!("inconsistent desired state:\n{}", lines.join("\n"));
    }
    // Everything the classifier could refuse is refused before anything
    // is written: the VIPs and the classifier are applied together or not
    // (refuse-alone mode, the Kubernetes source: a group or rule that is
    // invalid or does not fit is refused alone when the classifier is applied).
    if !dataplane.refuses_alone() {
        dataplane.check_classifier(&desired.classifier)?;
    }
    match kernel::prepare_forwarding(interface, desired) {
        Ok(set) if !set.is_empty() => info!(
            settings = set.join(", "),
            "switched forwarding on: the classifier forwards to its targets as a router"
        ),
        Ok(_) => {}
        Err(e) => warn!("{e}"),
    }
    match kernel::prepare_tunnel_fallback(interface, desired) {
        Ok(kernel::Prepared::AcceptLocalSet) => info!(
            interface,
            "set accept_local=1: IPv4 L3 DSR and source-translated packets handed to the kernel carry a \
             local source address"
        ),
        Ok(kernel::Prepared::Unchanged) => {}
        Err(e) => warn!("{e}"),
    }
    let tunnel = desired.node.tunnel_source;
    let before = dataplane.tunnel_source();
    dataplane.set_tunnel_source(tunnel.v4, tunnel.v6)?;
    let snat_before = dataplane.snat_source().clone();
    let snat = rivora_dataplane::snat::SnatSource {
        v4: desired.node.snat.v4,
        v6: desired.node.snat.v6,
        ..snat_before.clone()
    };
    if snat != snat_before
        && let Err(e) = dataplane.set_snat_source(snat)
    {
        let _ = dataplane.set_tunnel_source(before.0, before.1);
        return Err(e.into());
    }
    let applied = match mode {
        ApplyMode::Prune => dataplane.apply(&desired.specs()),
        ApplyMode::KeepUnclaimed => {
            let unclaimed: BTreeSet<VipKey> = dataplane
                .vips()
                .filter(|v| v.adopted)
                .map(|v| v.spec.key)
                .collect();
            dataplane.apply_keeping(&desired.specs(), &unclaimed)
        }
    };
    let report = match applied {
        Ok(r) => r,
        Err(e) => {
            // Nothing of a rejected state may stay in force.
            let _ = dataplane.set_tunnel_source(before.0, before.1);
            let _ = dataplane.set_snat_source(snat_before);
            return Err(e.into());
        }
    };
    let prune = mode == ApplyMode::Prune;
    let cls = if dataplane.refuses_alone() {
        dataplane.apply_classifier_alone(&desired.classifier, prune)?
    } else {
        dataplane.apply_classifier(&desired.classifier, prune)?
    };
    if !cls.is_empty() {
        info!(
            groups_added = cls.groups_added,
            groups_changed = cls.groups_changed,
            groups_removed = cls.groups_removed,
            rules_written = cls.rules_written,
            rules_removed = cls.rules_removed,
            vips_written = cls.vips_written,
            vips_removed = cls.vips_removed,
            adopted_freed = cls.legacy_freed,
            "classifier programmed"
        );
    }
    dataplane.set_node_syn_rate_limit(desired.node.syn_rate_limit)?;
    Ok(report)
}

/// Points the prober at the checks `desired` asks for, and lets backends
/// that lost their check come back up. `existed_before` are the backends
/// programmed before this apply (they start up, not unknown).
pub fn probes(
    desired: &DesiredState,
    dataplane: &mut Dataplane,
    prober: &mut Prober<BackendKey>,
    existed_before: &BTreeSet<BackendKey>,
) {
    let targets = crate::health::targets(desired, dataplane, existed_before);
    for key in crate::health::unchecked_but_down(&targets, dataplane) {
        match dataplane.set_probe_down(&key, false) {
            Ok(_) => info!(backend = %key, "no health check any more: back in service"),
            Err(e) => error!(backend = %key, "clearing probe state: {e}"),
        }
    }
    prober.set_targets(targets);
}

/// Steps 1 and 2 on a running daemon, under the state lock: tc_nat for
/// the first NAT VIP, the datapath, the probes, and a warning if the
/// Maglev table got too crowded. An error leaves the running state in
/// force and says why.
pub fn while_running(
    s: &mut Shared,
    datapath: &mut Datapath,
    desired: &DesiredState,
    mode: ApplyMode,
) -> Result<ApplyReport, String> {
    if desired.has_nat_vip()
        && datapath.attachment().is_some_and(|a| !a.egress)
        && let Err(e) = datapath.attach_egress()
    {
        // Without tc_nat a NAT VIP's replies would leave with the
        // backend's address: keep the running configuration.
        return Err(format!(
            "the first NAT VIP needs tc_nat (TCX egress), which failed to attach: {e}"
        ));
    }
    if let Some(a) = datapath.attachment().filter(|a| a.egress)
        && s.status.programs.iter().all(|p| p.name != "tc_nat")
    {
        info!(
            tc_prog_id = a.tc_program_id,
            tc_link_id = a.tc_link_id,
            "tc_nat attached for the first NAT VIP"
        );
        s.status.programs = programs(a);
    }
    let existed_before: BTreeSet<BackendKey> = s.dataplane.backends().map(|b| b.key).collect();
    let interface = s.status.interface.clone();
    let refused_before = refused_by_name(&s.dataplane);
    let cls_refused_before = s.dataplane.classifier_refused().to_vec();
    let report = program(&mut s.dataplane, desired, mode, &interface).map_err(|e| e.to_string())?;
    log_refusals(&refused_before, &refused_by_name(&s.dataplane));
    log_classifier_refusals(&cls_refused_before, s.dataplane.classifier_refused());
    let Shared {
        dataplane, prober, ..
    } = s;
    probes(desired, dataplane, prober, &existed_before);
    if !report.is_empty() {
        warn_if_crowded(dataplane);
    }
    Ok(report)
}

/// The VIPs the dataplane refused alone in its last apply: name -> why.
fn refused_by_name(
    dataplane: &rivora_dataplane::Dataplane,
) -> std::collections::BTreeMap<String, String> {
    dataplane
        .refused()
        .iter()
        .map(|r| (r.name.clone(), r.reason.clone()))
        .collect()
}

/// One line per refusal when it starts or its reason changes, and one when the VIP fits
/// again: not one per apply while it stands (the status and the RivoraNode show it all along).
fn log_refusals(
    before: &std::collections::BTreeMap<String, String>,
    now: &std::collections::BTreeMap<String, String>,
) {
    for (name, why) in now {
        if before.get(name) != Some(why) {
            warn!("VIP {name} refused alone (everything else is applied): {why}");
        }
    }
    for name in before.keys().filter(|n| !now.contains_key(*n)) {
        info!("VIP {name} is no longer refused");
    }
}

/// As [`log_refusals`], for the classifier's groups (DistributionGroups) and rules
/// (L34Routes).
fn log_classifier_refusals(
    before: &[rivora_dataplane::classifier::RefusedObject],
    now: &[rivora_dataplane::classifier::RefusedObject],
) {
    for r in now.iter().filter(|r| !before.contains(r)) {
        warn!(
            "classifier {} {} refused alone (everything else is applied): {}",
            r.kind, r.name, r.reason
        );
    }
    for r in before {
        if !now.iter().any(|n| n.kind == r.kind && n.name == r.name) {
            info!("classifier {} {} is no longer refused", r.kind, r.name);
        }
    }
}

/// One warning per apply (not one per VIP) when the shared Maglev table is
/// too crowded for the VIPs to balance within the threshold, naming the
/// `--maglev-table-size` that fixes it.
pub fn warn_if_crowded(dataplane: &Dataplane) {
    if let Some(w) =
        dataplane.imbalance_warning(rivora_dataplane::imbalance::IMBALANCE_WARN_THRESHOLD)
    {
        warn!("{w}");
    }
}
