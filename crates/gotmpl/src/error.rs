//! The error type every parse and render failure is reported as.

/// A template failure. Every variant names the template file and line (the
/// file that holds the failing action, also inside an `include`d define).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// The source could not be parsed (syntax, unknown function, undefined variable).
    #[error("{name}:{line}: {reason}")]
    Parse {
        name: String,
        line: usize,
        reason: String,
    },
    /// Executing an action failed (bad types, nil field access, function error).
    #[error("{name}:{line}: {reason}")]
    Exec {
        name: String,
        line: usize,
        reason: String,
    },
    /// Sprig/Helm `required` got nil or "": the chart's message for the user.
    #[error("{name}:{line}: required value: {message}")]
    Required {
        name: String,
        line: usize,
        message: String,
    },
    /// Sprig `fail` was called: the chart's message for the user.
    #[error("{name}:{line}: {message}")]
    Fail {
        name: String,
        line: usize,
        message: String,
    },
    /// `render` was asked for a name that was never added or defined.
    #[error("template {0:?} not defined")]
    NoTemplate(String),
}
