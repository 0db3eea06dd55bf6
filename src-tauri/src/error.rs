//! The error a failed command rejects with: `{kind, message, code?}`, as
//! ui/src/lib/backend.ts (`BackendError`) documents. The UI branches on
//! `kind`, shows `message`, and may look at the API.md problem `code`.

use holdfast_client::api::ApiError;
use holdfast_client::Error;
use serde::Serialize;

#[derive(ts_rs::TS)]
#[ts(rename = "BackendError")]
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CommandError {
    #[ts(
        type = r#""offline" | "not_signed_in" | "unauthorized" | "busy" | "not_found" | "invalid" | "resolve" | "internal""#
    )]
    pub kind: &'static str,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[ts(optional, as = "Option<holdfast_protocol::problem::ProblemCode>")]
    pub code: Option<String>,
}

impl CommandError {
    pub fn internal(message: impl Into<String>) -> Self {
        CommandError {
            kind: "internal",
            message: message.into(),
            code: None,
        }
    }
}

impl From<Error> for CommandError {
    fn from(e: Error) -> Self {
        let code = match &e {
            Error::Api(ApiError::Status {
                problem: Some(p), ..
            }) => serde_json::to_value(p.code)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned)),
            _ => None,
        };
        let kind = match &e {
            _ if e.is_offline() => "offline",
            Error::NotSignedIn => "not_signed_in",
            Error::Unauthorized => "unauthorized",
            // A wrong password on sign-in is a 401 from the API itself.
            Error::Api(api) if api.is_unauthorized() => "unauthorized",
            Error::Busy => "busy",
            Error::NotFound(_) => "not_found",
            Error::Invalid(_) => "invalid",
            Error::Resolve(_) => "resolve",
            _ => "internal",
        };
        CommandError {
            kind,
            message: e.to_string(),
            code,
        }
    }
}

pub type CmdResult<T> = Result<T, CommandError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_kinds() {
        let e: CommandError = Error::NotSignedIn.into();
        assert_eq!(e.kind, "not_signed_in");
        let e: CommandError = Error::Api(ApiError::Network("refused".into())).into();
        assert_eq!(e.kind, "offline");
        let e: CommandError = Error::Invalid("bad".into()).into();
        assert_eq!(
            (e.kind, e.message.as_str(), e.code),
            ("invalid", "bad", None)
        );
        let json = serde_json::to_value(CommandError::internal("x")).expect("serializes");
        assert_eq!(
            json,
            serde_json::json!({"kind": "internal", "message": "x"})
        );
    }
}
