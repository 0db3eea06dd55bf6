//! Retry delays shared by the server's webhook relay and the desktop sync
//! loop: exponential backoff with full jitter, and reading `Retry-After`.
//!
//! API.md's rule: attempt k waits a random time in [0, min(base·2^k, cap)].
//! Full jitter (rather than a fixed or "equal" jitter) spreads retries from
//! many clients that failed together, so they do not come back together.
//! Randomness is the caller's: these functions take it as an argument so they
//! stay pure and testable.

use chrono::{DateTime, NaiveDateTime, Utc};
use std::time::Duration;

/// The upper bound of attempt `attempt`'s wait: min(base·2^attempt, cap).
///
/// `attempt` is k in API.md's rule, counted from 0, so the first retry waits
/// at most `base_ms`. Saturates instead of overflowing: once base·2^k passes
/// `u64::MAX` it is past any cap anyway.
pub fn backoff_ceiling_ms(attempt: u32, base_ms: u64, cap_ms: u64) -> u64 {
    base_ms
        .saturating_mul(2u64.saturating_pow(attempt))
        .min(cap_ms)
}

/// Attempt k waits a random time in [0, min(base·2^k, cap)] (API.md).
///
/// `unit_random` is a uniform random number in [0, 1) supplied by the caller
/// (e.g. `rand::random::<f64>()`); it picks one of the whole milliseconds
/// 0..=ceiling with equal chance. Values outside [0, 1) are clamped and NaN
/// counts as 0, so a bad random source still yields a delay within bounds.
pub fn full_jitter_ms(attempt: u32, base_ms: u64, cap_ms: u64, unit_random: f64) -> u64 {
    let ceiling = backoff_ceiling_ms(attempt, base_ms, cap_ms);
    let r = if unit_random.is_nan() {
        0.0
    } else {
        unit_random.clamp(0.0, 1.0)
    };
    // Scaling by ceiling + 1 makes the top millisecond as likely as the rest;
    // `min` absorbs r = 1 and f64 rounding near u64::MAX (`as` saturates).
    let ms = (r * (ceiling as f64 + 1.0)).floor() as u64;
    ms.min(ceiling)
}

/// How long a `Retry-After` header value asks us to wait, measured from `now`.
///
/// Accepts delta-seconds (`120`) and an HTTP-date: the IMF-fixdate form
/// (`Wed, 21 Oct 2015 07:28:00 GMT`) and, as RFC 9110 asks recipients to, the
/// obsolete RFC 850 and asctime forms. A date in the past means "now" (zero).
/// Returns `None` for anything else, so the caller falls back to its own
/// backoff. Delta-seconds too large for a `u64` saturate; callers should cap
/// the result with their own maximum delay before using it.
pub fn parse_retry_after(value: &str, now: DateTime<Utc>) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // All digits, so the only way parsing fails is overflow.
        return Some(Duration::from_secs(value.parse().unwrap_or(u64::MAX)));
    }
    let at = parse_http_date(value)?;
    Some((at - now).to_std().unwrap_or(Duration::ZERO))
}

fn parse_http_date(value: &str) -> Option<DateTime<Utc>> {
    if let Ok(at) = DateTime::parse_from_rfc2822(value) {
        return Some(at.with_timezone(&Utc));
    }
    // RFC 850 (`Sunday, 06-Nov-94 08:49:37 GMT`) and asctime
    // (`Sun Nov  6 08:49:37 1994`), both always in UTC.
    ["%A, %d-%b-%y %H:%M:%S GMT", "%a %b %e %H:%M:%S %Y"]
        .iter()
        .find_map(|format| NaiveDateTime::parse_from_str(value, format).ok())
        .map(|naive| naive.and_utc())
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use proptest::prelude::*;

    const BASE: u64 = 1_000;
    const CAP: u64 = 3_600_000;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s)
            .expect("RFC 3339 date")
            .with_timezone(&Utc)
    }

    #[test]
    fn ceiling_doubles_from_base_until_the_cap() {
        let ceilings: Vec<u64> = (0..14).map(|k| backoff_ceiling_ms(k, BASE, CAP)).collect();
        assert_eq!(
            ceilings,
            [
                1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 64_000, 128_000, 256_000, 512_000,
                1_024_000, 2_048_000, CAP, CAP
            ]
        );
    }

    #[test]
    fn ceiling_saturates_instead_of_overflowing() {
        assert_eq!(backoff_ceiling_ms(63, 4, u64::MAX), u64::MAX);
        assert_eq!(backoff_ceiling_ms(64, 1, u64::MAX), u64::MAX);
        assert_eq!(backoff_ceiling_ms(u32::MAX, u64::MAX, CAP), CAP);
        assert_eq!(backoff_ceiling_ms(u32::MAX, 0, CAP), 0);
        assert_eq!(backoff_ceiling_ms(3, BASE, 0), 0);
    }

    #[test]
    fn jitter_spans_zero_to_the_ceiling() {
        assert_eq!(full_jitter_ms(2, BASE, CAP, 0.0), 0);
        assert_eq!(full_jitter_ms(2, BASE, CAP, 0.5), 2_000);
        assert_eq!(full_jitter_ms(2, BASE, CAP, 0.999_999_9), 4_000);
        assert_eq!(full_jitter_ms(2, BASE, CAP, 1.0), 4_000);
        assert_eq!(full_jitter_ms(2, BASE, CAP, f64::NAN), 0);
        assert_eq!(full_jitter_ms(2, BASE, CAP, -3.0), 0);
        assert_eq!(full_jitter_ms(2, BASE, CAP, f64::INFINITY), 4_000);
        assert_eq!(full_jitter_ms(0, 0, CAP, 0.9), 0);
    }

    #[test]
    fn retry_after_delta_seconds() {
        let now = at("2015-10-21T07:00:00Z");
        assert_eq!(
            parse_retry_after("120", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(parse_retry_after(" 0 ", now), Some(Duration::ZERO));
        assert_eq!(
            parse_retry_after("99999999999999999999999", now),
            Some(Duration::from_secs(u64::MAX))
        );
        for bad in ["", "-5", "1.5", "+3", "soon", "12 s"] {
            assert_eq!(parse_retry_after(bad, now), None, "{bad:?}");
        }
    }

    #[test]
    fn retry_after_http_dates() {
        let now = at("2015-10-21T07:00:00Z");
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now),
            Some(Duration::from_secs(28 * 60))
        );
        assert_eq!(
            parse_retry_after("Wednesday, 21-Oct-15 07:28:00 GMT", now),
            Some(Duration::from_secs(28 * 60))
        );
        assert_eq!(
            parse_retry_after("Wed Oct 21 07:28:00 2015", now),
            Some(Duration::from_secs(28 * 60))
        );
        assert_eq!(
            parse_retry_after("Sun Nov  6 08:49:37 1994", now),
            Some(Duration::ZERO)
        );
        assert_eq!(
            parse_retry_after("Tue, 20 Oct 2015 07:28:00 GMT", now),
            Some(Duration::ZERO)
        );
    }

    proptest! {
        #[test]
        fn jitter_never_exceeds_cap_nor_ceiling(
            attempt in any::<u32>(),
            base in any::<u64>(),
            cap in any::<u64>(),
            r in any::<f64>(),
        ) {
            let ceiling = backoff_ceiling_ms(attempt, base, cap);
            prop_assert!(ceiling <= cap);
            let wait = full_jitter_ms(attempt, base, cap, r);
            prop_assert!(wait <= ceiling);
            prop_assert!(wait <= cap);
        }

        #[test]
        fn ceiling_is_exact_below_the_cap(attempt in 0u32..200, base in any::<u64>(), cap in any::<u64>()) {
            let exact = if attempt < 128 {
                u128::from(base).saturating_mul(1u128 << attempt)
            } else if base == 0 { 0 } else { u128::MAX };
            let expected = u64::try_from(exact.min(u128::from(cap))).expect("at most cap");
            prop_assert_eq!(backoff_ceiling_ms(attempt, base, cap), expected);
        }

        #[test]
        fn ceiling_is_monotone_in_attempt(
            a in any::<u32>(),
            b in any::<u32>(),
            base in any::<u64>(),
            cap in any::<u64>(),
        ) {
            let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
            prop_assert!(backoff_ceiling_ms(lo, base, cap) <= backoff_ceiling_ms(hi, base, cap));
            prop_assert!(
                backoff_ceiling_ms(lo, base, cap) <= backoff_ceiling_ms(lo.saturating_add(1), base, cap)
            );
        }

        #[test]
        fn jitter_covers_the_range(attempt in 0u32..40, base in 1u64..10_000, r in 0.0f64..1.0) {
            let ceiling = backoff_ceiling_ms(attempt, base, CAP);
            let wait = full_jitter_ms(attempt, base, CAP, r);
            // Within one millisecond of r·(ceiling + 1): uniform, not clumped.
            let target = r * (ceiling as f64 + 1.0);
            prop_assert!((wait as f64 - target).abs() <= 1.0);
        }

        #[test]
        fn retry_after_dates_round_trip(secs in -10_000_000i64..10_000_000) {
            let now = at("2015-10-21T07:00:00Z");
            let when = Utc.timestamp_opt(now.timestamp() + secs, 0).single().expect("in range");
            let header = when.format("%a, %d %b %Y %H:%M:%S GMT").to_string();
            let expected = Duration::from_secs(u64::try_from(secs.max(0)).expect("non-negative"));
            prop_assert_eq!(parse_retry_after(&header, now), Some(expected));
        }

        #[test]
        fn retry_after_never_panics(value in any::<String>(), secs in any::<i32>()) {
            let now = Utc.timestamp_opt(i64::from(secs), 0).single().expect("in range");
            let _ = parse_retry_after(&value, now);
        }
    }
}
