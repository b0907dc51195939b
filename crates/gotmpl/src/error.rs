//! The error type every parse and render failure is reported as.

/// A template failure. Every variant names the template file and line (the
/// file that holds the failing action, also inside an `include`d define),
/// so `rivora install` can point the user at the chart source.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// The source could not be parsed (syntax, unknown function, undefined variable).
    #[error("{name}:{line}: {reason}")]
    Parse {
        /// Template file name as given to `Templates::add`.
        name: String,
        /// 1-based source line.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// Executing an action failed (bad types, nil field access, function error).
    #[error("{name}:{line}: {reason}")]
    Exec {
        /// Template file holding the failing action.
        name: String,
        /// 1-based source line of the action.
        line: usize,
        /// What went wrong, worded like Go's text/template where possible.
        reason: String,
    },
    /// Sprig/Helm `required` got nil or "": the chart's message for the user.
    #[error("{name}:{line}: required value: {message}")]
    Required {
        /// Template file holding the `required` call.
        name: String,
        /// 1-based source line of the call.
        line: usize,
        /// The chart's message (first argument of `required`).
        message: String,
    },
    /// Sprig `fail` was called: the chart's message for the user.
    #[error("{name}:{line}: {message}")]
    Fail {
        /// Template file holding the `fail` call.
        name: String,
        /// 1-based source line of the call.
        line: usize,
        /// The chart's message (argument of `fail`).
        message: String,
    },
    /// `render` was asked for a name that was never added or defined.
    #[error("template {0:?} not defined")]
    NoTemplate(String),
}
