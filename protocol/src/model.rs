//! The documents and request/response bodies of API.md, exactly as they travel.
//!
//! Request bodies reject unknown fields so a typo never silently does nothing.

use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Deserializer, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

// ---------------------------------------------------------------- documents

#[derive(ts_rs::TS, Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OrderStatus {
    Draft,
    Confirmed,
    Cancelled,
}

impl OrderStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            OrderStatus::Draft => "draft",
            OrderStatus::Confirmed => "confirmed",
            OrderStatus::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "draft" => Some(OrderStatus::Draft),
            "confirmed" => Some(OrderStatus::Confirmed),
            "cancelled" => Some(OrderStatus::Cancelled),
            _ => None,
        }
    }
}

#[derive(ts_rs::TS, Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Line {
    pub id: Uuid,
    pub sku_id: Uuid,
    pub qty_ordered: i64,
    pub qty_allocated: i64,
    /// What this customer pays per unit, decided by the server when the line
    /// was added (the customer's price list, else the SKU's wholesale price)
    /// and never changed afterwards. Absent from documents written before
    /// v1.1 (read as 0 until the next pull).
    #[serde(default)]
    pub unit_price: i64,
}

#[derive(ts_rs::TS, Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Order {
    pub id: Uuid,
    pub customer_id: Uuid,
    pub customer_po: Option<String>,
    pub ship_window_start: Option<NaiveDate>,
    pub ship_window_end: Option<NaiveDate>,
    pub notes: Option<String>,
    pub status: OrderStatus,
    pub version: i64,
    pub invoice_id: Option<Uuid>,
    pub lines: Vec<Line>,
    /// Σ qty_ordered × unit_price over the lines; confirming invoices exactly this.
    #[serde(default)]
    pub total: i64,
    pub updated_at: DateTime<Utc>,
    pub updated_by: Uuid,
    pub updated_by_name: String,
    pub created_at: DateTime<Utc>,
}

#[derive(ts_rs::TS, Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Sku {
    pub id: Uuid,
    /// The tenant's own SKU/UPC string, unique per tenant.
    #[serde(default)]
    pub code: Option<String>,
    pub style: String,
    pub color: String,
    pub size: String,
    pub wholesale_price: i64,
    pub msrp: i64,
    pub on_hand: i64,
    pub on_order: i64,
    pub allocated: i64,
    /// Available to sell: on_hand + on_order − allocated.
    pub ats: i64,
    /// False = discontinued: no new lines; existing lines keep working.
    #[serde(default = "yes")]
    pub active: bool,
}

fn yes() -> bool {
    true
}

#[derive(ts_rs::TS, Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Customer {
    pub id: Uuid,
    pub name: String,
    /// Minor units; null means no limit.
    pub credit_limit: Option<i64>,
    /// Null = the SKUs' wholesale prices.
    #[serde(default)]
    pub price_list_id: Option<Uuid>,
    #[serde(default)]
    pub email: Option<String>,
    #[serde(default)]
    pub phone: Option<String>,
    /// False = takes no new orders; its open orders keep working.
    #[serde(default = "yes")]
    pub active: bool,
}

/// A customer-specific price list: what its customers pay for the SKUs it
/// lists (other SKUs: their wholesale price).
#[derive(ts_rs::TS, Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PriceList {
    pub id: Uuid,
    pub name: String,
    pub prices: Vec<Price>,
}

#[derive(ts_rs::TS, Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Price {
    pub sku_id: Uuid,
    /// Minor units, ≥ 0.
    #[schema(minimum = 0)]
    pub price: i64,
}

#[derive(ts_rs::TS, Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum InvoiceStatus {
    AwaitingPayment,
    Paid,
}

#[derive(ts_rs::TS, Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Invoice {
    pub id: Uuid,
    pub order_id: Uuid,
    pub amount: i64,
    pub status: InvoiceStatus,
    pub paid_at: Option<DateTime<Utc>>,
    /// What the payment provider has reported paid so far (v1.1, issue 15):
    /// below `amount` the invoice still awaits payment; above it, it was
    /// over-paid. Absent from servers before it: read as 0.
    #[serde(default)]
    pub amount_paid: i64,
}

// ---------------------------------------------------------------- sessions

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    AccountManager,
    Operator,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::AccountManager => "account_manager",
            Role::Operator => "operator",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "account_manager" => Some(Role::AccountManager),
            "operator" => Some(Role::Operator),
            _ => None,
        }
    }
}

#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LoginRequest {
    pub tenant: String,
    pub email: String,
    pub password: String,
    /// 1–200 characters, not all blank.
    #[schema(min_length = 1, max_length = 200, pattern = r"\S")]
    pub device_name: String,
}

impl std::fmt::Debug for LoginRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoginRequest")
            .field("tenant", &self.tenant)
            .field("email", &self.email)
            .field("password", &"<redacted>")
            .field("device_name", &self.device_name)
            .finish()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SessionUser {
    pub id: Uuid,
    pub email: String,
    pub display_name: String,
    pub role: Role,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SessionTenant {
    pub id: Uuid,
    pub slug: String,
    pub name: String,
}

#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct LoginResponse {
    pub token: String,
    pub user: SessionUser,
    pub tenant: SessionTenant,
}

impl std::fmt::Debug for LoginResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoginResponse")
            .field("token", &"<redacted>")
            .field("user", &self.user)
            .field("tenant", &self.tenant)
            .finish()
    }
}

// ---------------------------------------------------------------- reads

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct OrdersPage {
    pub orders: Vec<Order>,
    /// Opaque cursor for `after=`; null on the last page.
    pub next: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SkusPage {
    pub skus: Vec<Sku>,
    pub next: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CustomerList {
    pub customers: Vec<Customer>,
}

// ---------------------------------------------------------------- history

/// `GET /v1/orders/{id}/history` (API.md v1.1, "The order's history").
#[derive(ts_rs::TS, Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct OrderHistory {
    /// One entry per version of the order, oldest first. Versions made
    /// before the server kept a history have no entry.
    pub entries: Vec<HistoryEntry>,
}

/// One version of an order: who made it, when, with which request, and what
/// became of the partner events it produced.
#[derive(ts_rs::TS, Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct HistoryEntry {
    /// The order's version this change made (1: created).
    pub version: i64,
    /// When the change was made: the order's `updated_at` at this version.
    pub at: DateTime<Utc>,
    /// The user who made the change; null for a change the system made.
    pub by: Option<Uuid>,
    /// That user's display name (as it is now); null when `by` is null.
    pub by_name: Option<String>,
    /// The partner event type naming the change: `order.created`,
    /// `order.updated`, `order.line_allocated`, `order.line_released`,
    /// `order.confirmed` or `order.cancelled`.
    pub event_type: String,
    /// What changed: the facts of that partner event (an object; e.g.
    /// `change`, `line_id`, `qty_ordered` for a line edit, `line_id`,
    /// `sku_id`, `qty`, `ats_after` for an allocation).
    #[schema(value_type = Object)]
    #[ts(type = "Record<string, unknown>")]
    pub facts: serde_json::Value,
    /// The `Idempotency-Key` of the request that made the change (a batch
    /// push item's `idempotency_key`); null for a change the system made.
    pub idempotency_key: Option<String>,
    /// Every partner's delivery of every event this change produced, in the
    /// order the events were recorded. Empty when no partner subscribed, and
    /// once delivered events have outlived the server's outbox retention.
    pub deliveries: Vec<HistoryDelivery>,
}

/// One partner's delivery of one event.
#[derive(ts_rs::TS, Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct HistoryDelivery {
    pub partner_id: Uuid,
    pub partner_name: String,
    /// The `webhook-id` header the partner receives (`evt_<id>`), the same on
    /// every attempt: what the partner dedupes on.
    pub webhook_id: String,
    pub state: HistoryDeliveryState,
    /// Attempts made so far.
    pub attempts: i32,
    /// The HTTP status of the last attempt; null before the first, or when
    /// the last one got no answer.
    pub last_status: Option<i32>,
    /// When the partner accepted it; null until then.
    pub delivered_at: Option<DateTime<Utc>>,
}

/// Where a delivery stands, in words.
#[derive(ts_rs::TS, Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum HistoryDeliveryState {
    /// Not attempted yet.
    Pending,
    /// Attempted and failed; another attempt is scheduled.
    Retrying,
    /// The partner is disabled or paused: it goes once re-enabled.
    Held,
    /// The partner answered 2xx.
    Delivered,
    /// Every attempt failed; waits for an operator to requeue it.
    DeadLettered,
}

// ---------------------------------------------------------------- dead letters

/// `GET /v1/orders/dead-lettered`: the tenant's orders that have at least one
/// partner delivery dead-lettered now, longest waiting first.
#[derive(ts_rs::TS, Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DeadLetteredOrders {
    /// One per order with a dead letter, ordered by `oldest_at` (then by
    /// `order_id`). Empty when every partner event has been delivered, is
    /// still being retried, or was requeued by an operator.
    pub orders: Vec<DeadLetteredOrder>,
}

/// An order some partner was never told about: its events' deliveries that
/// used every attempt and wait for an operator to requeue them.
#[derive(ts_rs::TS, Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DeadLetteredOrder {
    pub order_id: Uuid,
    /// How many of the order's partner deliveries are dead-lettered now
    /// (one per event and partner; at least 1).
    #[schema(minimum = 1)]
    pub dead_lettered: i64,
    /// When the earliest of them was dead-lettered.
    pub oldest_at: DateTime<Utc>,
}

// ---------------------------------------------------------------- mutations

/// Distinguishes "absent" (outer None) from "null" (Some(None)) in a PATCH.
fn double_option<'de, T, D>(de: D) -> Result<Option<Option<T>>, D::Error>
where
    T: Deserialize<'de>,
    D: Deserializer<'de>,
{
    Option::<T>::deserialize(de).map(Some)
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateOrder {
    pub id: Uuid,
    pub customer_id: Uuid,
    #[serde(default)]
    #[schema(max_length = 100)]
    pub customer_po: Option<String>,
    #[serde(default)]
    pub ship_window_start: Option<NaiveDate>,
    /// Not before `ship_window_start`.
    #[serde(default)]
    pub ship_window_end: Option<NaiveDate>,
    #[serde(default)]
    #[schema(max_length = 4000)]
    pub notes: Option<String>,
}

/// The header fields a PATCH may set (at least one); an absent field is left
/// alone, a null clears it.
#[derive(ts_rs::TS, Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OrderHeaderSet {
    /// A customer cannot be cleared: null means "leave it".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    #[ts(optional)]
    pub customer_id: Option<Uuid>,
    #[serde(
        default,
        deserialize_with = "double_option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<String>, max_length = 100)]
    #[ts(optional)]
    pub customer_po: Option<Option<String>>,
    #[serde(
        default,
        deserialize_with = "double_option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<NaiveDate>)]
    #[ts(optional)]
    pub ship_window_start: Option<Option<NaiveDate>>,
    #[serde(
        default,
        deserialize_with = "double_option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<NaiveDate>)]
    #[ts(optional)]
    pub ship_window_end: Option<Option<NaiveDate>>,
    #[serde(
        default,
        deserialize_with = "double_option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<String>, max_length = 4000)]
    #[ts(optional)]
    pub notes: Option<Option<String>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PatchOrder {
    #[schema(minimum = 1)]
    pub base_version: i64,
    pub set: OrderHeaderSet,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AddLine {
    pub id: Uuid,
    pub sku_id: Uuid,
    #[schema(minimum = 1)]
    pub qty_ordered: i64,
    #[schema(minimum = 1)]
    pub base_version: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChangeLine {
    #[schema(minimum = 1)]
    pub base_version: i64,
    /// Not below the line's `qty_allocated`.
    #[schema(minimum = 1)]
    pub qty_ordered: i64,
}

/// Body of remove-line, confirm and cancel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BaseVersion {
    #[schema(minimum = 1)]
    pub base_version: i64,
}

/// Body of allocate and release.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Quantity {
    #[schema(minimum = 1)]
    pub qty: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AllocationResult {
    pub order: Order,
    pub ats_after: i64,
}

// ---------------------------------------------------------------- batch push

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PushItem {
    pub idempotency_key: String,
    pub method: String,
    pub path: String,
    #[schema(value_type = Object)]
    pub body: serde_json::Value,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PushRequest {
    #[schema(min_items = 1, max_items = 500)]
    pub mutations: Vec<PushItem>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PushResult {
    pub idempotency_key: String,
    pub status: u16,
    #[schema(value_type = Object)]
    pub body: serde_json::Value,
    pub replayed: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PushResponse {
    pub results: Vec<PushResult>,
}

// ---------------------------------------------------------------- pull

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    Order,
    Sku,
    Customer,
    Invoice,
    PriceList,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Change {
    pub kind: ChangeKind,
    pub id: Uuid,
    pub version: i64,
    #[schema(value_type = Option<Object>)]
    pub data: Option<serde_json::Value>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PullResponse {
    pub changes: Vec<Change>,
    pub cursor: String,
    pub has_more: bool,
    /// The history of the server's database this page was read in. A
    /// restore from a backup starts a new one; a desk sends the one it last
    /// pulled in as `Holdfast-History` on its pushes, and a server of another
    /// history answers 410 `server_restored` rather than apply them. Absent
    /// from servers that predate it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<Uuid>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patch_tells_absent_from_null() {
        let p: PatchOrder = serde_json::from_str(
            r#"{"base_version": 3, "set": {"notes": null, "customer_po": "PO-1"}}"#,
        )
        .expect("parse");
        assert_eq!(p.set.notes, Some(None));
        assert_eq!(p.set.customer_po, Some(Some("PO-1".into())));
        assert_eq!(p.set.ship_window_end, None);
    }

    #[test]
    fn unknown_fields_are_rejected() {
        let err =
            serde_json::from_str::<Quantity>(r#"{"qty": 1, "qyt": 2}"#).expect_err("must fail");
        assert!(err.to_string().contains("unknown field `qyt`"), "{err}");
    }

    #[test]
    fn login_debug_never_shows_the_password() {
        let req = LoginRequest {
            tenant: "acme".into(),
            email: "dana@acme.test".into(),
            password: "hunter2".into(),
            device_name: "desk".into(),
        };
        assert!(!format!("{req:?}").contains("hunter2"));
    }
}
