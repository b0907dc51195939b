//! What a check concludes ([`Finding`]), the whole run ([`Report`]) and how
//! both are shown: a table for people, JSON for tools.

use comfy_table::presets::ASCII_FULL_CONDENSED;
use comfy_table::{ContentArrangement, Table};
use serde::Serialize;

/// A check's verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Status {
    /// Ready.
    Pass,
    /// Works, with a cost or a risk the reason names.
    Warn,
    /// rivorad (or a part of it the reason names) cannot work like this.
    Fail,
    /// Not applicable to what was asked (no `--interface`, no L3 DSR VIP,
    /// ...), or impossible to observe; the reason says which.
    Skip,
}

impl Status {
    /// As printed: `PASS`, `WARN`, `FAIL`, `SKIP`.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "PASS",
            Status::Warn => "WARN",
            Status::Fail => "FAIL",
            Status::Skip => "SKIP",
        }
    }
}

/// One check's conclusion.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// Stable identifier (`kernel`, `bpffs`, `xdp-attached`, ...).
    pub id: &'static str,
    /// What is checked, in a few words.
    pub title: &'static str,
    /// The verdict.
    pub status: Status,
    /// What was observed and what it means for rivorad.
    pub reason: String,
    /// The exact command or setting that makes it PASS; empty when nothing
    /// is to be done.
    pub fix: String,
}

impl Finding {
    /// A finding of check `check` (its id and title).
    pub fn new(
        check: Check,
        status: Status,
        reason: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Finding {
            id: check.0,
            title: check.1,
            status,
            reason: reason.into(),
            fix: fix.into(),
        }
    }

    /// PASS, nothing to fix.
    pub fn pass(check: Check, reason: impl Into<String>) -> Self {
        Self::new(check, Status::Pass, reason, "")
    }

    /// SKIP, nothing to fix.
    pub fn skip(check: Check, reason: impl Into<String>) -> Self {
        Self::new(check, Status::Skip, reason, "")
    }
}

/// A check's identity: (id, title).
pub type Check = (&'static str, &'static str);

/// Counts per status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// PASS findings.
    pub pass: usize,
    /// WARN findings.
    pub warn: usize,
    /// FAIL findings.
    pub fail: usize,
    /// SKIP findings.
    pub skip: usize,
}

/// Every finding of one run, in check order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Report {
    /// The findings.
    pub findings: Vec<Finding>,
    /// Counts per status.
    pub summary: Summary,
    /// No finding is FAIL.
    pub ready: bool,
}

impl Report {
    /// A report of `findings`.
    pub fn new(findings: Vec<Finding>) -> Self {
        let mut summary = Summary::default();
        for f in &findings {
            match f.status {
                Status::Pass => summary.pass += 1,
                Status::Warn => summary.warn += 1,
                Status::Fail => summary.fail += 1,
                Status::Skip => summary.skip += 1,
            }
        }
        Report {
            ready: summary.fail == 0,
            findings,
            summary,
        }
    }

    /// The process exit code: 0 when nothing FAILs, 1 otherwise (2, usage
    /// errors, is clap's).
    pub fn exit_code(&self) -> i32 {
        if self.ready { 0 } else { 1 }
    }

    /// The one-line summary under the table.
    pub fn summary_line(&self) -> String {
        let s = &self.summary;
        let verdict = if s.fail == 0 {
            "ready for rivorad".to_string()
        } else if s.fail == 1 {
            "NOT ready: 1 check fails".to_string()
        } else {
            format!("NOT ready: {} checks fail", s.fail)
        };
        format!(
            "{} PASS, {} WARN, {} FAIL, {} SKIP: {verdict}",
            s.pass, s.warn, s.fail, s.skip
        )
    }

    /// The human table (check, status, reason, fix) and the summary line,
    /// laid out for `width` columns.
    pub fn render_table(&self, width: u16) -> String {
        let mut t = Table::new();
        t.load_style(ASCII_FULL_CONDENSED);
        t.set_content_arrangement(ContentArrangement::Dynamic);
        t.set_width(width);
        t.set_header(["Check", "Status", "Reason", "Fix"]);
        for f in &self.findings {
            t.add_row([
                format!("{}\n({})", f.title, f.id),
                f.status.as_str().to_string(),
                f.reason.clone(),
                f.fix.clone(),
            ]);
        }
        format!("{t}\n{}\n", self.summary_line())
    }

    /// The report as pretty JSON (`-o json`).
    pub fn render_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("a report always serialises");
        s.push('\n');
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Check = ("a", "Check A");
    const B: Check = ("b", "Check B");

    #[test]
    fn a_report_is_ready_unless_something_fails() {
        let ok = Report::new(vec![
            Finding::pass(A, "fine"),
            Finding::new(B, Status::Warn, "meh", "do this"),
            Finding::skip(A, "n/a"),
        ]);
        assert!(ok.ready);
        assert_eq!(ok.exit_code(), 0);
        assert_eq!(
            ok.summary_line(),
            "1 PASS, 1 WARN, 0 FAIL, 1 SKIP: ready for rivorad"
        );
        let bad = Report::new(vec![
            Finding::new(A, Status::Fail, "broken", "fix it"),
            Finding::new(B, Status::Fail, "broken", "fix it"),
        ]);
        assert!(!bad.ready);
        assert_eq!(bad.exit_code(), 1);
        assert!(bad.summary_line().ends_with("NOT ready: 2 checks fail"));
    }

    #[test]
    fn the_table_and_json_carry_every_field() {
        let r = Report::new(vec![Finding::new(
            A,
            Status::Fail,
            "the reason",
            "`the fix`",
        )]);
        let t = r.render_table(100);
        for want in [
            "Check A",
            "(a)",
            "FAIL",
            "the reason",
            "`the fix`",
            "0 PASS, 0 WARN, 1 FAIL",
        ] {
            assert!(t.contains(want), "{want:?} missing in\n{t}");
        }
        let v: serde_json::Value = serde_json::from_str(&r.render_json()).unwrap();
        assert_eq!(v["findings"][0]["id"], "a");
        assert_eq!(v["findings"][0]["title"], "Check A");
        assert_eq!(v["findings"][0]["status"], "FAIL");
        assert_eq!(v["findings"][0]["reason"], "the reason");
        assert_eq!(v["findings"][0]["fix"], "`the fix`");
        assert_eq!(v["summary"]["fail"], 1);
        assert_eq!(v["ready"], false);
    }
}
