//! Refuse-alone admission for the classifier (the Kubernetes source, where each group is a
//! DistributionGroup and each rule an L34Route of some Gateway): a group or rule that is
//! invalid or does not fit is refused alone, and everything else is programmed, instead of the
//! node's whole apply failing (VIPs included) as the strict check does.
//!
//! How: start from what the maps hold now, without what the new spec drops (that only frees
//! IDs and room), then add the new spec's groups and then its rules one at a time, by name,
//! each kept only if the whole checks ([`Classifier::check`]: validation and every capacity).
//! A group or rule refused keeps its programmed version if it has one; a rule whose group is
//! refused is refused too (its check fails for the missing group). Each check is linear in the
//! spec, so admission is quadratic, but it only runs when the strict check fails.

use std::collections::BTreeSet;

use super::model::{ClassifierSpec, GroupSpec, RuleSpec};
use super::writer::Classifier;

/// A classifier object left out by [`Classifier::admit`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefusedObject {
    /// `group` (a DistributionGroup) or `rule` (an L34Route).
    pub kind: &'static str,
    /// Its name.
    pub name: String,
    /// Why, as the check said.
    pub reason: String,
    /// Whether a capacity refused it (it fits once room is made); otherwise it is invalid.
    pub capacity: bool,
}

impl Classifier {
    /// `spec` cut to what is valid and fits, and the groups and rules refused (see the module
    /// documentation). A spec the strict check accepts comes back whole with no refusal.
    pub fn admit(&self, spec: &ClassifierSpec) -> (ClassifierSpec, Vec<RefusedObject>) {
        if self.check(spec).is_ok() {
            return (spec.clone(), Vec::new());
        }
        let groups: BTreeSet<&str> = spec.groups.iter().map(|g| g.name.as_str()).collect();
        let rules: BTreeSet<&str> = spec.rules.iter().map(|r| r.name.as_str()).collect();
        let applied = self.applied();
        let mut base = ClassifierSpec {
            groups: applied
                .groups
                .iter()
                .filter(|g| groups.contains(g.name.as_str()))
                .cloned()
                .collect(),
            rules: applied
                .rules
                .iter()
                .filter(|r| rules.contains(r.name.as_str()) && groups.contains(r.group.as_str()))
                .cloned()
                .collect(),
        };
        if self.check(&base).is_err() {
            // What is programmed no longer passes on its own (cannot happen with the maps
            // as this writer left them): build up from nothing instead.
            base = ClassifierSpec::default();
        }
        let mut refused = Vec::new();
        let mut sorted_groups: Vec<&GroupSpec> = spec.groups.iter().collect();
        sorted_groups.sort_by(|a, b| a.name.cmp(&b.name));
        for g in sorted_groups {
            let mut trial = base.clone();
            match trial.groups.iter_mut().find(|o| o.name == g.name) {
                Some(o) if o == g => continue,
                Some(o) => *o = g.clone(),
                None => trial.groups.push(g.clone()),
            }
            match self.check(&trial) {
                Ok(()) => base = trial,
                Err(e) => refused.push(RefusedObject {
                    kind: "group",
                    name: g.name.clone(),
                    capacity: matches!(e, crate::Error::Capacity(_)),
                    reason: e.to_string(),
                }),
            }
        }
        let mut sorted_rules: Vec<&RuleSpec> = spec.rules.iter().collect();
        sorted_rules.sort_by(|a, b| a.name.cmp(&b.name));
        for r in sorted_rules {
            let mut trial = base.clone();
            match trial.rules.iter_mut().find(|o| o.name == r.name) {
                Some(o) if o == r => continue,
                Some(o) => *o = r.clone(),
                None => trial.rules.push(r.clone()),
            }
            match self.check(&trial) {
                Ok(()) => base = trial,
                Err(e) => refused.push(RefusedObject {
                    kind: "rule",
                    name: r.name.clone(),
                    capacity: matches!(e, crate::Error::Capacity(_)),
                    reason: e.to_string(),
                }),
            }
        }
        (base, refused)
    }
}
