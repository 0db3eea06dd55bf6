//! Standard Webhooks (<https://www.standardwebhooks.com>) signatures: the
//! relay signs every delivery to a partner, and test receivers and inbound
//! endpoints verify them with the same code.
//!
//! A signature is `v1,` + base64(HMAC-SHA256(key, "{id}.{timestamp}.{body}")),
//! where the key is the base64-decoded part of a `whsec_…` secret.

use base64::{engine::general_purpose::STANDARD, Engine as _};
use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

const SECRET_PREFIX: &str = "whsec_";
const SIGNATURE_VERSION: &str = "v1";

/// The tolerance the Standard Webhooks specification recommends for
/// `webhook-timestamp`: five minutes either way, so replays of a captured
/// request stop working soon while ordinary clock skew still passes.
pub const DEFAULT_TOLERANCE_SECS: i64 = 5 * 60;

/// Why a secret could not be read or a delivery could not be verified.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WebhookError {
    #[error(
        "a webhook header is missing or empty \
         (webhook-id, webhook-timestamp and webhook-signature are all required)"
    )]
    MissingHeader,
    #[error("webhook-timestamp is not an integer number of unix seconds")]
    BadTimestamp,
    #[error("webhook-timestamp is too far from the current time")]
    TimestampOutOfTolerance,
    #[error("no v1 entry in webhook-signature matches any of the secrets")]
    NoMatchingSignature,
    #[error(
        "the webhook secret is not standard base64, with or without a `whsec_` prefix, or is empty"
    )]
    BadSecret,
}

/// The secret as partners receive it: `whsec_` + standard base64 of the key.
pub fn format_secret(key_bytes: &[u8]) -> String {
    format!("{SECRET_PREFIX}{}", STANDARD.encode(key_bytes))
}

/// The key bytes of a secret written as `whsec_<base64>` or bare `<base64>`.
///
/// Surrounding whitespace is ignored because secrets are often pasted into
/// environment variables and files with a trailing newline.
pub fn parse_secret(s: &str) -> Result<Vec<u8>, WebhookError> {
    let s = s.trim();
    let encoded = s.strip_prefix(SECRET_PREFIX).unwrap_or(s);
    let key = STANDARD
        .decode(encoded)
        .map_err(|_| WebhookError::BadSecret)?;
    // An empty HMAC key is legal but signs with no secret at all.
    if key.is_empty() {
        return Err(WebhookError::BadSecret);
    }
    Ok(key)
}

/// The `webhook-signature` value for one delivery attempt: `v1,<base64>`.
pub fn sign(secret_key: &[u8], msg_id: &str, timestamp: i64, body: &[u8]) -> String {
    let tag = signing_mac(secret_key, msg_id, timestamp, body).finalize();
    format!("{SIGNATURE_VERSION},{}", STANDARD.encode(tag.into_bytes()))
}

/// Checks a delivery's headers against the receiver's secrets.
///
/// `signature_header` may hold several space-separated `v1,<base64>` entries
/// (the sender signs with old and new secrets while rotating), and `secrets`
/// may hold several keys (the receiver accepts old and new while rotating):
/// any entry matching any secret is enough. Entries with another version
/// prefix, or that are not base64, are skipped so future schemes can be added
/// alongside `v1`. The timestamp must be within `tolerance_secs` of
/// `now_unix` in either direction.
pub fn verify(
    secrets: &[&[u8]],
    msg_id: &str,
    timestamp_header: &str,
    signature_header: &str,
    body: &[u8],
    now_unix: i64,
    tolerance_secs: i64,
) -> Result<(), WebhookError> {
    if [msg_id, timestamp_header, signature_header]
        .iter()
        .any(|h| h.trim().is_empty())
    {
        return Err(WebhookError::MissingHeader);
    }
    let timestamp: i64 = timestamp_header
        .trim()
        .parse()
        .map_err(|_| WebhookError::BadTimestamp)?;
    // A negative tolerance can only be a configuration slip; treat it as 0.
    let tolerance = u64::try_from(tolerance_secs).unwrap_or(0);
    if now_unix.abs_diff(timestamp) > tolerance {
        return Err(WebhookError::TimestampOutOfTolerance);
    }

    let candidates: Vec<Vec<u8>> = signature_header
        .split_whitespace()
        .filter_map(|entry| {
            let (version, encoded) = entry.split_once(',')?;
            if version != SIGNATURE_VERSION {
                return None;
            }
            STANDARD.decode(encoded).ok()
        })
        .collect();

    for secret in secrets {
        let mac = signing_mac(secret, msg_id, timestamp, body);
        // verify_slice compares in constant time, so a forger learns nothing
        // from how long a wrong guess takes to be rejected.
        if candidates
            .iter()
            .any(|candidate| mac.clone().verify_slice(candidate).is_ok())
        {
            return Ok(());
        }
    }
    Err(WebhookError::NoMatchingSignature)
}

/// The HMAC over the signed content, ready to finalize or verify.
fn signing_mac(secret_key: &[u8], msg_id: &str, timestamp: i64, body: &[u8]) -> HmacSha256 {
    // HMAC hashes long keys and pads short ones, so every length is valid.
    let mut mac = HmacSha256::new_from_slice(secret_key).expect("HMAC accepts keys of any length");
    mac.update(msg_id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // The test vector published by the Standard Webhooks project.
    const VECTOR_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const VECTOR_ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const VECTOR_TIMESTAMP: i64 = 1614265330;
    const VECTOR_BODY: &[u8] = br#"{"test": 2432232314}"#;
    const VECTOR_SIGNATURE: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    const NOW: i64 = 1_700_000_000;

    #[test]
    fn matches_the_standard_webhooks_test_vector() {
        let key = parse_secret(VECTOR_SECRET).expect("vector secret parses");
        assert_eq!(
            sign(&key, VECTOR_ID, VECTOR_TIMESTAMP, VECTOR_BODY),
            VECTOR_SIGNATURE
        );
        assert_eq!(
            verify(
                &[&key],
                VECTOR_ID,
                &VECTOR_TIMESTAMP.to_string(),
                VECTOR_SIGNATURE,
                VECTOR_BODY,
                VECTOR_TIMESTAMP,
                DEFAULT_TOLERANCE_SECS,
            ),
            Ok(())
        );
    }

    #[test]
    fn secrets_round_trip_with_or_without_prefix() {
        let key: Vec<u8> = (0u8..32).collect();
        let formatted = format_secret(&key);
        assert!(formatted.starts_with("whsec_"));
        assert_eq!(parse_secret(&formatted), Ok(key.clone()));
        assert_eq!(parse_secret(&formatted["whsec_".len()..]), Ok(key.clone()));
        assert_eq!(parse_secret(&format!("{formatted}\n")), Ok(key));
    }

    #[test]
    fn bad_secrets_are_rejected() {
        for bad in ["", "whsec_", "whsec_not base64!", "whsec_abc"] {
            assert_eq!(parse_secret(bad), Err(WebhookError::BadSecret), "{bad:?}");
        }
    }

    #[test]
    fn round_trip_within_tolerance_either_way() {
        let key = b"partner-key";
        let ts = NOW - 299;
        let sig = sign(key, "evt_1", ts, b"{}");
        assert_eq!(
            verify(&[key], "evt_1", &ts.to_string(), &sig, b"{}", NOW, 300),
            Ok(())
        );
        let ts = NOW + 300;
        let sig = sign(key, "evt_1", ts, b"{}");
        assert_eq!(
            verify(&[key], "evt_1", &ts.to_string(), &sig, b"{}", NOW, 300),
            Ok(())
        );
    }

    #[test]
    fn tampering_with_body_id_or_timestamp_fails() {
        let key = b"partner-key";
        let sig = sign(key, "evt_1", NOW, br#"{"qty":1}"#);
        let ts = NOW.to_string();
        let check = |id: &str, ts: &str, body: &[u8]| verify(&[key], id, ts, &sig, body, NOW, 300);
        assert_eq!(check("evt_1", &ts, br#"{"qty":1}"#), Ok(()));
        assert_eq!(
            check("evt_1", &ts, br#"{"qty":9}"#),
            Err(WebhookError::NoMatchingSignature)
        );
        assert_eq!(
            check("evt_2", &ts, br#"{"qty":1}"#),
            Err(WebhookError::NoMatchingSignature)
        );
        assert_eq!(
            check("evt_1", &(NOW + 1).to_string(), br#"{"qty":1}"#),
            Err(WebhookError::NoMatchingSignature)
        );
        assert_eq!(
            verify(
                &[b"other-key"],
                "evt_1",
                &ts,
                &sig,
                br#"{"qty":1}"#,
                NOW,
                300
            ),
            Err(WebhookError::NoMatchingSignature)
        );
    }

    #[test]
    fn old_and_future_timestamps_fail_even_when_correctly_signed() {
        let key = b"partner-key";
        for ts in [NOW - 301, NOW + 301, 0, i64::MIN, i64::MAX] {
            let sig = sign(key, "evt_1", ts, b"{}");
            assert_eq!(
                verify(&[key], "evt_1", &ts.to_string(), &sig, b"{}", NOW, 300),
                Err(WebhookError::TimestampOutOfTolerance),
                "{ts}"
            );
        }
    }

    #[test]
    fn malformed_headers_are_reported() {
        let key = b"partner-key";
        let sig = sign(key, "evt_1", NOW, b"{}");
        let ts = NOW.to_string();
        assert_eq!(
            verify(&[key], "", &ts, &sig, b"{}", NOW, 300),
            Err(WebhookError::MissingHeader)
        );
        assert_eq!(
            verify(&[key], "evt_1", " ", &sig, b"{}", NOW, 300),
            Err(WebhookError::MissingHeader)
        );
        assert_eq!(
            verify(&[key], "evt_1", &ts, "", b"{}", NOW, 300),
            Err(WebhookError::MissingHeader)
        );
        for bad in ["soon", "1.5", "1e9", "99999999999999999999"] {
            assert_eq!(
                verify(&[key], "evt_1", bad, &sig, b"{}", NOW, 300),
                Err(WebhookError::BadTimestamp),
                "{bad}"
            );
        }
    }

    #[test]
    fn rotation_accepts_any_signature_under_any_secret() {
        let (old, new) = (b"old-key".as_slice(), b"new-key".as_slice());
        let ts = NOW.to_string();
        let by_old = sign(old, "evt_1", NOW, b"{}");
        let by_new = sign(new, "evt_1", NOW, b"{}");

        // Receiver holds both secrets; sender signed with either one.
        for sig in [&by_old, &by_new] {
            assert_eq!(
                verify(&[old, new], "evt_1", &ts, sig, b"{}", NOW, 300),
                Ok(())
            );
        }
        // Sender signs with both; receiver holds only one of them.
        let both = format!("{by_old} {by_new}");
        for secret in [old, new] {
            assert_eq!(
                verify(&[secret], "evt_1", &ts, &both, b"{}", NOW, 300),
                Ok(())
            );
        }
        assert_eq!(
            verify(&[b"third-key"], "evt_1", &ts, &both, b"{}", NOW, 300),
            Err(WebhookError::NoMatchingSignature)
        );
        assert_eq!(
            verify(&[], "evt_1", &ts, &both, b"{}", NOW, 300),
            Err(WebhookError::NoMatchingSignature)
        );
    }

    #[test]
    fn unknown_versions_and_garbage_entries_are_ignored() {
        let key = b"partner-key";
        let ts = NOW.to_string();
        let good = sign(key, "evt_1", NOW, b"{}");
        let b64 = &good["v1,".len()..];
        let header = format!("v2,{b64} v1a,{b64} v1,!!notbase64 nocomma {good}");
        assert_eq!(
            verify(&[key], "evt_1", &ts, &header, b"{}", NOW, 300),
            Ok(())
        );
        // The right bytes under another version prefix do not count.
        assert_eq!(
            verify(&[key], "evt_1", &ts, &format!("v2,{b64}"), b"{}", NOW, 300),
            Err(WebhookError::NoMatchingSignature)
        );
    }

    proptest! {
        #[test]
        fn sign_then_verify_round_trips(
            key in prop::collection::vec(any::<u8>(), 1..100),
            id in "evt_[A-Za-z0-9]{1,30}",
            skew in -300i64..=300,
            body in prop::collection::vec(any::<u8>(), 0..200),
        ) {
            let secret = format_secret(&key);
            let parsed = parse_secret(&secret).expect("formatted secret parses");
            prop_assert_eq!(&parsed, &key);
            let ts = NOW + skew;
            let sig = sign(&parsed, &id, ts, &body);
            prop_assert_eq!(
                verify(&[&parsed], &id, &ts.to_string(), &sig, &body, NOW, 300),
                Ok(())
            );
        }

        #[test]
        fn any_changed_body_byte_is_rejected(
            body in prop::collection::vec(any::<u8>(), 1..200),
            pick in any::<prop::sample::Index>(),
            flip in 1u8..=255,
        ) {
            let sig = sign(b"k", "evt_1", NOW, &body);
            let mut tampered = body.clone();
            tampered[pick.index(body.len())] ^= flip;
            prop_assert_eq!(
                verify(&[b"k"], "evt_1", &NOW.to_string(), &sig, &tampered, NOW, 300),
                Err(WebhookError::NoMatchingSignature)
            );
        }
    }
}
