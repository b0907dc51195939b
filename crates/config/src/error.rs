//! Error types: every problem found in a configuration file, with where it is.

use std::fmt;

/// One problem in a configuration file.
///
/// An operator fixing a file needs to know *which* value is wrong (the
/// `path`), *where* it is (`line`/`column`, to jump there in an editor) and
/// *why* (the `message`), so each error carries all three.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// Where in the document the problem is, e.g. `vips[1].backends[0].port`
    /// (indices are 0-based). Empty when the problem is not about one field,
    /// such as a YAML syntax error or an unreadable file.
    pub path: String,
    /// 1-based line of the offending value or key, when known (not for I/O
    /// errors, nor for a key that is missing from an empty document).
    pub line: Option<usize>,
    /// 1-based column (in characters) of the offending value or key.
    pub column: Option<usize>,
    /// Why the value is wrong, phrased so the fix is obvious.
    pub message: String,
}

impl fmt::Display for FieldError {
    /// Prints `line:column: path: message`, leaving out the parts that are
    /// unknown. [`ConfigError`] prefixes each with the file name.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.line, self.column) {
            (Some(line), Some(column)) => write!(f, "{line}:{column}: ")?,
            (Some(line), None) => write!(f, "{line}: ")?,
            _ => {}
        }
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        f.write_str(&self.message)
    }
}

/// Why a configuration was rejected: all the problems found in one pass.
///
/// Validation does not stop at the first problem, so that an operator can fix
/// a file in one go. Its [`Display`](fmt::Display) prints one problem per line
/// in the `file:line:column: path: message` form that editors and terminals
/// recognise, e.g.
/// `rivora.yaml:12:9: vips[1].backends[0].port: 70000 is not a valid port (1-65535)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// Name of the configuration source as given to [`parse`](crate::parse)
    /// or the path given to [`load`](crate::load); used in messages.
    pub file: String,
    /// Every problem found, sorted by position in the file (problems without
    /// a position last). Never empty.
    pub errors: Vec<FieldError>,
}

impl ConfigError {
    /// Builds an error for a single problem, e.g. an unreadable file.
    pub(crate) fn single(file: &str, error: FieldError) -> Self {
        ConfigError {
            file: file.to_string(),
            errors: vec![error],
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, error) in self.errors.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            // "file:line:col: ..." when the position is known, "file: ..."
            // otherwise.
            if error.line.is_some() {
                write!(f, "{}:{error}", self.file)?;
            } else {
                write!(f, "{}: {error}", self.file)?;
            }
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}
