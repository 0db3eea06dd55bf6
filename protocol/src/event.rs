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
    InvoicePaid,
}

impl EventType {
    pub const ALL: [EventType; 8] = [
        EventType::OrderCreated,
        EventType::OrderUpdated,
        EventType::OrderLineAllocated,
        EventType::OrderLineReleased,
        EventType::OrderConfirmed,
        EventType::OrderCancelled,
        EventType::SkuAtsChanged,
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
            EventType::InvoicePaid => "invoice.paid",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == s)
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

/// A subscription pattern's spelling: lower-case letters, `.`, `_` and `*`,
/// 1–100 characters. (A pattern naming no type of today is allowed: it picks
/// up a type added later.) The relay matches patterns against event types in
/// its fan-out SQL (`relay::claim::fan_out`).
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
    fn patterns_are_spelled_like_event_types() {
        assert!(check_pattern("order.*").is_ok());
        assert!(check_pattern("*").is_ok());
        assert!(check_pattern("Order.*").is_err());
        assert!(check_pattern("order-*").is_err());
        assert!(check_pattern("").is_err());
        assert!(check_pattern(&"a".repeat(101)).is_err());
    }
}
