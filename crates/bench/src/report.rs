//! The result model every part fills in, printed as a terminal table and
//! written as markdown.

use comfy_table::{ContentArrangement, Table, presets::UTF8_FULL_CONDENSED};

/// Whether a row had a target and met it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// No target: shown for reference.
    Info,
    /// Target met.
    Met,
    /// Target missed.
    Missed,
    /// Could not be measured (the reason is in the evidence column).
    NotRun,
}

impl Verdict {
    /// From a boolean comparison against a target.
    pub fn from_met(met: bool) -> Self {
        if met { Verdict::Met } else { Verdict::Missed }
    }

    fn label(self) -> &'static str {
        match self {
            Verdict::Info => "",
            Verdict::Met => "met",
            Verdict::Missed => "MISSED",
            Verdict::NotRun => "n/a",
        }
    }
}

/// One measured figure.
#[derive(Clone, Debug)]
pub struct Row {
    /// What was measured.
    pub case: String,
    /// The absolute figure with its unit.
    pub figure: String,
    /// The ratio against the section's baseline (see `Section::ratio_label`).
    pub ratio: String,
    /// The target, if any, in words.
    pub target: String,
    /// Met / missed.
    pub verdict: Verdict,
    /// How it was checked: path proof, counters, sample sizes.
    pub evidence: String,
}

impl Row {
    /// A row without a target.
    pub fn info(case: impl Into<String>, figure: impl Into<String>) -> Self {
        Row {
            case: case.into(),
            figure: figure.into(),
            ratio: String::new(),
            target: String::new(),
            verdict: Verdict::Info,
            evidence: String::new(),
        }
    }

    /// Sets the ratio column.
    pub fn ratio(mut self, r: impl Into<String>) -> Self {
        self.ratio = r.into();
        self
    }

    /// Sets the target and whether it was met.
    pub fn target(mut self, target: impl Into<String>, met: bool) -> Self {
        self.target = target.into();
        self.verdict = Verdict::from_met(met);
        self
    }

    /// Sets the evidence column.
    pub fn evidence(mut self, e: impl Into<String>) -> Self {
        self.evidence = e.into();
        self
    }

    /// Marks the row as not measured.
    pub fn not_run(mut self) -> Self {
        self.verdict = Verdict::NotRun;
        self
    }
}

/// One table of results.
#[derive(Clone, Debug, Default)]
pub struct Section {
    /// Heading.
    pub title: String,
    /// Markdown before the table: what was measured and how.
    pub method: String,
    /// Header of the ratio column ("vs floor", "vs plain routing", ...).
    pub ratio_label: String,
    /// The rows.
    pub rows: Vec<Row>,
    /// Markdown bullets after the table: missed targets and why, caveats.
    pub notes: Vec<String>,
}

impl Section {
    /// Prints the table to stdout.
    pub fn print(&self) {
        println!("\n== {} ==", self.title);
        let mut t = Table::new();
        t.load_style(UTF8_FULL_CONDENSED);
        t.set_content_arrangement(ContentArrangement::Dynamic);
        t.set_width(180);
        t.set_header(vec![
            "case",
            "figure",
            &self.ratio_label,
            "target",
            "result",
            "evidence",
        ]);
        for r in &self.rows {
            t.add_row(vec![
                r.case.as_str(),
                r.figure.as_str(),
                r.ratio.as_str(),
                r.target.as_str(),
                r.verdict.label(),
                r.evidence.as_str(),
            ]);
        }
        println!("{t}");
        for n in &self.notes {
            println!("  * {n}");
        }
    }

    /// The section as markdown (heading, method, table, notes).
    pub fn markdown(&self) -> String {
        let mut s = format!("## {}\n\n", self.title);
        if !self.method.is_empty() {
            s.push_str(self.method.trim_end());
            s.push_str("\n\n");
        }
        s.push_str(&format!(
            "| case | figure | {} | target | result | evidence |\n|---|---:|---:|---|---|---|\n",
            self.ratio_label
        ));
        for r in &self.rows {
            s.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} |\n",
                md_cell(&r.case),
                md_cell(&r.figure),
                md_cell(&r.ratio),
                md_cell(&r.target),
                match r.verdict {
                    Verdict::Missed => "**missed**".to_string(),
                    v => v.label().to_string(),
                },
                md_cell(&r.evidence)
            ));
        }
        if !self.notes.is_empty() {
            s.push('\n');
            for n in &self.notes {
                s.push_str(&format!("- {n}\n"));
            }
        }
        s.push('\n');
        s
    }
}

/// Escapes what would break a markdown table cell.
fn md_cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', "<br>")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_escapes_and_marks_missed() {
        let sec = Section {
            title: "T".into(),
            ratio_label: "vs x".into(),
            rows: vec![
                Row::info("a|b", "1 ns")
                    .ratio("2.00x")
                    .target("<= 1x", false),
            ],
            ..Default::default()
        };
        let md = sec.markdown();
        assert!(md.contains("| a\\|b | 1 ns | 2.00x | <= 1x | **missed** |"));
        assert_eq!(sec.rows[0].verdict, Verdict::Missed);
    }
}
