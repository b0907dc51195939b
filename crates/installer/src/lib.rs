//! `rivora`: Rivora's cluster lifecycle (install, upgrade, status, uninstall) over the Helm chart
//! in deploy/chart, embedded in the binary and rendered by [`rivora_gotmpl`], so an operator
//! needs neither the repository nor helm, and a cluster installed by `rivora` is one helm
//! recognises (same objects, a helm release record).
//!
//! Pure parts (values, schema, rendering, release records, status evaluation) are separate from
//! the API effects ([`apply`]) so they are tested without a cluster.

pub mod apply;
pub mod chart;
pub mod diff;
pub mod lifecycle;
pub mod release;
pub mod render;
pub mod schema;
pub mod status;
pub mod values;
pub mod yaml;

use anyhow::{Result, bail};
use serde_json::Value;

use crate::chart::Chart;

/// What the operator asked for on the command line, in helm's precedence order: `-f` files
/// (in order), then `--set`, then `--set-string` (each later one wins).
#[derive(Debug, Clone, Default)]
pub struct ValueInputs {
    /// `-f FILE`: (file name, contents).
    pub files: Vec<(String, String)>,
    /// `--set a.b=c` arguments.
    pub set: Vec<String>,
    /// `--set-string a.b=c` arguments.
    pub set_string: Vec<String>,
}

impl ValueInputs {
    /// The user-supplied values alone (what the release record keeps as `config`, and what an
    /// upgrade reuses).
    pub fn user_values(&self) -> Result<Value> {
        let mut out = Value::Object(Default::default());
        for (name, text) in &self.files {
            values::merge(&mut out, &values::parse_yaml(name, text)?);
        }
        for s in &self.set {
            values::merge_nulls(&mut out, &values::parse_set(s, true)?, values::Nulls::Keep);
        }
        for s in &self.set_string {
            values::merge_nulls(&mut out, &values::parse_set(s, false)?, values::Nulls::Keep);
        }
        Ok(out)
    }
}

/// The chart's defaults with `user` merged over them, checked against values.schema.json:
/// every violation is reported at once, naming the field.
pub fn effective_values(chart: &Chart, user: &Value) -> Result<Value> {
    let mut v = chart.default_values.clone();
    values::merge(&mut v, user);
    if let Some(schema) = &chart.schema {
        let mut errors = schema::validate(schema, &v);
        if errors.is_empty() {
            errors.extend(schema::cross_field(&v));
        }
        if !errors.is_empty() {
            bail!(
                "the values do not match the chart's values.schema.json:\n  - {}",
                errors.join("\n  - ")
            );
        }
    }
    Ok(v)
}
