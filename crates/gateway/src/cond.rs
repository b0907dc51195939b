//! Conditions as the evaluation decides them: type, status, the standard
//! reason, a message for the operator. The edge adds observedGeneration and
//! lastTransitionTime (kept when the status does not change).

/// One condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Condition {
    /// `type` (`Accepted`, `ResolvedRefs`, ...).
    pub type_: &'static str,
    /// `status`: true is "True".
    pub status: bool,
    /// `reason`, one of Gateway API's for the type.
    pub reason: &'static str,
    /// `message`: what it means here, naming the field or object.
    pub message: String,
}

impl Condition {
    /// A True condition.
    pub fn yes(type_: &'static str, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            type_,
            status: true,
            reason,
            message: message.into(),
        }
    }

    /// A False condition.
    pub fn no(type_: &'static str, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            type_,
            status: false,
            reason,
            message: message.into(),
        }
    }
}
