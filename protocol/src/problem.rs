//! RFC 9457 problem details and the stable problem codes of API.md.
//!
//! `code` is what programs branch on; the client and the server both use this
//! enum so a code can never be spelled two ways.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

/// Every problem code in API.md's error table.
#[derive(ts_rs::TS, Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProblemCode {
    MalformedJson,
    ValidationFailed,
    IdempotencyKeyMissing,
    IdempotencyKeyInvalid,
    Unauthorized,
    Forbidden,
    NotFound,
    VersionConflict,
    RequestInFlight,
    MethodNotAllowed,
    PayloadTooLarge,
    UnsupportedMediaType,
    IdempotencyKeyReused,
    InsufficientAts,
    OverAllocation,
    InvalidState,
    CreditLimitExceeded,
    BlockedByEarlier,
    RateLimited,
    Internal,
    /// The database is unreachable, restarting, read-only, out of disk or
    /// connections: retry after `Retry-After` (with the same key; a retry
    /// never doubles anything).
    ServiceUnavailable,
    /// The server's database was restored from a backup since the desk last
    /// pulled: the cursor (or the `Holdfast-History` of a push) names the
    /// history before the restore. Nothing was applied; pull again from the
    /// start and re-send what the restored server lacks.
    ServerRestored,
}

impl ProblemCode {
    pub fn status(self) -> u16 {
        use ProblemCode::*;
        match self {
            MalformedJson | ValidationFailed | IdempotencyKeyMissing | IdempotencyKeyInvalid => 400,
            Unauthorized => 401,
            Forbidden => 403,
            NotFound => 404,
            MethodNotAllowed => 405,
            VersionConflict | RequestInFlight => 409,
            PayloadTooLarge => 413,
            UnsupportedMediaType => 415,
            IdempotencyKeyReused | InsufficientAts | OverAllocation | InvalidState
            | CreditLimitExceeded => 422,
            ServerRestored => 410,
            BlockedByEarlier => 424,
            RateLimited => 429,
            Internal => 500,
            ServiceUnavailable => 503,
        }
    }

    pub fn as_str(self) -> &'static str {
        use ProblemCode::*;
        match self {
            MalformedJson => "malformed_json",
            ValidationFailed => "validation_failed",
            IdempotencyKeyMissing => "idempotency_key_missing",
            IdempotencyKeyInvalid => "idempotency_key_invalid",
            Unauthorized => "unauthorized",
            Forbidden => "forbidden",
            NotFound => "not_found",
            MethodNotAllowed => "method_not_allowed",
            VersionConflict => "version_conflict",
            RequestInFlight => "request_in_flight",
            PayloadTooLarge => "payload_too_large",
            UnsupportedMediaType => "unsupported_media_type",
            IdempotencyKeyReused => "idempotency_key_reused",
            InsufficientAts => "insufficient_ats",
            OverAllocation => "over_allocation",
            InvalidState => "invalid_state",
            CreditLimitExceeded => "credit_limit_exceeded",
            BlockedByEarlier => "blocked_by_earlier",
            RateLimited => "rate_limited",
            Internal => "internal",
            ServiceUnavailable => "service_unavailable",
            ServerRestored => "server_restored",
        }
    }

    /// A short human title, the same for every occurrence of the code.
    pub fn title(self) -> &'static str {
        use ProblemCode::*;
        match self {
            MalformedJson => "Body is not valid JSON",
            ValidationFailed => "Request failed validation",
            IdempotencyKeyMissing => "Idempotency-Key header is required",
            IdempotencyKeyInvalid => "Idempotency-Key header is invalid",
            Unauthorized => "Authentication required",
            Forbidden => "Not allowed for this role",
            NotFound => "Not found",
            MethodNotAllowed => "Method not allowed",
            VersionConflict => "Someone else changed this first",
            RequestInFlight => "The same request is still running",
            PayloadTooLarge => "Request body too large",
            UnsupportedMediaType => "Unsupported content type",
            IdempotencyKeyReused => "Idempotency-Key was used for a different request",
            InsufficientAts => "Not enough stock available to sell",
            OverAllocation => "Would allocate more than the line ordered",
            InvalidState => "Not possible in the document's current state",
            CreditLimitExceeded => "Customer credit limit exceeded",
            BlockedByEarlier => "An earlier mutation on this order did not succeed",
            RateLimited => "Too many requests",
            Internal => "Internal server error",
            ServiceUnavailable => "Service temporarily unavailable",
            ServerRestored => "The server was restored from a backup",
        }
    }

    /// Outcomes API.md says are stored on the idempotency key and replayed.
    pub fn is_stored_outcome(self) -> bool {
        use ProblemCode::*;
        matches!(
            self,
            VersionConflict | InsufficientAts | OverAllocation | InvalidState | CreditLimitExceeded
        )
    }
}

impl std::fmt::Display for ProblemCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One entry of `validation_failed`'s `errors` member.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

/// An RFC 9457 problem document as Holdfast sends it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Problem {
    #[serde(rename = "type")]
    pub type_: String,
    pub title: String,
    pub status: u16,
    pub code: ProblemCode,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Extension members listed per code in API.md.
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extensions: Map<String, Value>,
}

impl Problem {
    pub fn new(code: ProblemCode, detail: impl Into<String>) -> Self {
        Problem {
            type_: "about:blank".to_owned(),
            title: code.title().to_owned(),
            status: code.status(),
            code,
            detail: Some(detail.into()),
            extensions: Map::new(),
        }
    }

    pub fn with(mut self, member: &str, value: impl Serialize) -> Self {
        // Serializing our own plain types cannot fail; Null keeps it total.
        let value = serde_json::to_value(value).unwrap_or(Value::Null);
        self.extensions.insert(member.to_owned(), value);
        self
    }

    pub fn extension(&self, member: &str) -> Option<&Value> {
        self.extensions.get(member)
    }
}

pub const PROBLEM_CONTENT_TYPE: &str = "application/problem+json";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problem_round_trips_with_extensions() {
        let p = Problem::new(ProblemCode::InsufficientAts, "only 2 left")
            .with("ats_available", 2)
            .with("requested", 6);
        let json = serde_json::to_value(&p).expect("serialize");
        assert_eq!(json["type"], "about:blank");
        assert_eq!(json["status"], 422);
        assert_eq!(json["code"], "insufficient_ats");
        assert_eq!(json["ats_available"], 2);
        let back: Problem = serde_json::from_value(json).expect("deserialize");
        assert_eq!(back, p);
    }

    #[test]
    fn serde_names_match_as_str() {
        for code in [
            ProblemCode::MalformedJson,
            ProblemCode::VersionConflict,
            ProblemCode::BlockedByEarlier,
            ProblemCode::CreditLimitExceeded,
            ProblemCode::ServiceUnavailable,
        ] {
            let json = serde_json::to_value(code).expect("serialize");
            assert_eq!(json, code.as_str());
        }
    }
}
