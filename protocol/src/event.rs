//! The partner event types of API.md, and the subscription patterns that
//! choose among them.

use std::fmt;

/// Every event type the outbox records and partners can subscribe to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    OrderCreated,
    /// Header or lines changed.
    OrderUpdated,
    OrderLineAllocated,
    OrderLineReleased,
    OrderConfirmed,
    OrderCancelled,
    SkuAtsChanged,
    /// Catalog fields changed (code, prices, active), or the SKU was created.
    SkuUpdated,
    CustomerUpdated,
    PriceListUpdated,
    InvoicePaid,
}

impl EventType {
    pub const ALL: [EventType; 11] = [
        EventType::OrderCreated,
        EventType::OrderUpdated,
        EventType::OrderLineAllocated,
        EventType::OrderLineReleased,
        EventType::OrderConfirmed,
        EventType::OrderCancelled,
        EventType::SkuAtsChanged,
        EventType::SkuUpdated,
        EventType::CustomerUpdated,
        EventType::PriceListUpdated,
        EventType::InvoicePaid,
    ];

    /// The name on the wire (`"type"` of the body) and in the outbox.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::OrderCreated => "order.created",
            EventType::OrderUpdated => "order.updated",
            EventType::OrderLineAllocated => "order.line_allocated",
            EventType::OrderLineReleased => "order.line_released",
            EventType::OrderConfirmed => "order.confirmed",
            EventType::OrderCancelled => "order.cancelled",
            EventType::SkuAtsChanged => "sku.ats_changed",
            EventType::SkuUpdated => "sku.updated",
            EventType::CustomerUpdated => "customer.updated",
            EventType::PriceListUpdated => "price_list.updated",
            EventType::InvoicePaid => "invoice.paid",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == s)
    }

    /// Whether a partner subscribed with `pattern` gets events of this type.
    pub fn matches(self, pattern: &str) -> bool {
        pattern_matches(pattern, self.as_str())
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a subscription pattern was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not an event type or pattern")]
pub struct PatternError(pub String);

/// Whether a subscription pattern picks an event type by name: `*` stands
/// for any run of characters (`order.*`, `*.paid`, `*`), every other
/// character for itself. It takes the name rather than an [`EventType`] so a
/// relay still fans out an event type newer than its own build (several
/// server versions share one outbox during a rolling upgrade).
///
/// Linear in both lengths: a pattern of many `*` cannot make it explode.
pub fn pattern_matches(pattern: &str, event_type: &str) -> bool {
    let (p, t) = (pattern.as_bytes(), event_type.as_bytes());
    let (mut pi, mut ti) = (0, 0);
    // After the last `*` seen: where the pattern resumes, and the next text
    // position that `*` may stretch to.
    let mut retry: Option<(usize, usize)> = None;
    while ti < t.len() {
        if p.get(pi) == Some(&b'*') {
            pi += 1;
            retry = Some((pi, ti + 1));
        } else if p.get(pi) == Some(&t[ti]) {
            pi += 1;
            ti += 1;
        } else if let Some((resume, next)) = retry {
            pi = resume;
            ti = next;
            retry = Some((resume, next + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// A subscription pattern's spelling: lower-case letters, `.`, `_` and `*`,
/// 1–100 characters. (A pattern naming no type of today is allowed: it picks
/// up a type added later.)
pub fn check_pattern(pattern: &str) -> Result<(), PatternError> {
    let ok = !pattern.is_empty()
        && pattern.len() <= 100
        && pattern
            .chars()
            .all(|c| c.is_ascii_lowercase() || c == '.' || c == '_' || c == '*');
    if ok {
        Ok(())
    } else {
        Err(PatternError(pattern.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_type_parses_back_from_its_name() {
        for t in EventType::ALL {
            assert_eq!(EventType::parse(t.as_str()), Some(t));
        }
        assert_eq!(EventType::parse("order.shipped"), None);
    }

    #[test]
    fn patterns_pick_types_by_name() {
        let picked = |p: &str| -> Vec<&str> {
            EventType::ALL
                .into_iter()
                .filter(|t| t.matches(p))
                .map(EventType::as_str)
                .collect()
        };
        assert_eq!(picked("*").len(), EventType::ALL.len());
        assert_eq!(picked("order.*").len(), 6);
        assert_eq!(picked("*.paid"), ["invoice.paid"]);
        assert_eq!(picked("sku.ats_changed"), ["sku.ats_changed"]);
        assert_eq!(
            picked("order.line_*"),
            ["order.line_allocated", "order.line_released"]
        );
        assert_eq!(
            picked("*line*ed"),
            ["order.line_allocated", "order.line_released"]
        );
        assert!(picked("order").is_empty());
        assert!(picked("order.").is_empty());
        assert!(picked("").is_empty());
        // A type this build does not know is matched by name all the same.
        assert!(pattern_matches("order.*", "order.shipped"));
        assert!(!pattern_matches("invoice.*", "order.shipped"));
        // Many stars that fail late finish at once.
        let stars = format!("{}x", "*o".repeat(50));
        assert!(!pattern_matches(&stars, &"o".repeat(100)));
        assert!(pattern_matches(&"*o".repeat(50), &"o".repeat(100)));
    }

    #[test]
    fn patterns_are_spelled_like_event_types() {
        assert!(check_pattern("order.*").is_ok());
        assert!(check_pattern("*").is_ok());
        assert!(check_pattern("Order.*").is_err());
        assert!(check_pattern("order-*").is_err());
        assert!(check_pattern("").is_err());
        assert!(check_pattern(&"a".repeat(101)).is_err());
    }
}
