//! Opaque paging cursors: base64url of a small JSON value. Opaque so clients
//! never build them; JSON so a future field is an additive change.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::Error;

pub(super) fn encode<T: Serialize>(key: &T) -> String {
    URL_SAFE_NO_PAD.encode(serde_json::to_vec(key).unwrap_or_default())
}

/// Decodes `after=`; anything we did not mint is a 400 naming the parameter.
pub(super) fn decode<T: DeserializeOwned>(param: &str, cursor: &str) -> Result<T, Error> {
    URL_SAFE_NO_PAD
        .decode(cursor)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .ok_or_else(|| Error::validation(param, "not a cursor this server issued"))
}

/// `limit=` within 1..=max, defaulting when absent.
pub(super) fn limit(requested: Option<i64>, default: i64, max: i64) -> Result<i64, Error> {
    match requested {
        None => Ok(default),
        Some(n) if (1..=max).contains(&n) => Ok(n),
        Some(_) => Err(Error::validation(
            "limit",
            format!("must be between 1 and {max}"),
        )),
    }
}
