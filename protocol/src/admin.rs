//! The master-data bodies of API.md "Additions in v1.1": what an operator
//! sends to onboard users, the catalog, customers and price lists, and what
//! comes back. Request bodies reject unknown fields, as everywhere.

use serde::{Deserialize, Deserializer, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::model::{Price, Role};

/// Distinguishes "absent" (outer None) from "null" (Some(None)) in a PATCH.
fn double_option<'de, T, D>(de: D) -> Result<Option<Option<T>>, D::Error>
where
    T: Deserialize<'de>,
    D: Deserializer<'de>,
{
    Option::<T>::deserialize(de).map(Some)
}

// ---------------------------------------------------------------- catalog

/// `POST /v1/admin/skus/import`, `POST /v1/admin/customers/import`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ImportSummary {
    pub created: u64,
    pub updated: u64,
    pub unchanged: u64,
}

/// `PATCH /v1/admin/skus/{id}`: at least one field.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SkuPatch {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0)]
    pub wholesale_price: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0)]
    pub msrp: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active: Option<bool>,
    /// 1–100 characters; null removes the code.
    #[serde(
        default,
        deserialize_with = "double_option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<String>, min_length = 1, max_length = 100)]
    pub code: Option<Option<String>>,
}

// ---------------------------------------------------------------- customers

/// `POST /v1/admin/customers`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateCustomer {
    pub id: Uuid,
    /// 1–200 characters, unique in the tenant.
    #[schema(min_length = 1, max_length = 200, pattern = r"\S")]
    pub name: String,
    /// Minor units; absent or null = no limit.
    #[serde(default)]
    #[schema(minimum = 0)]
    pub credit_limit: Option<i64>,
    #[serde(default)]
    pub price_list_id: Option<Uuid>,
    #[serde(default)]
    #[schema(max_length = 320)]
    pub email: Option<String>,
    #[serde(default)]
    #[schema(max_length = 50)]
    pub phone: Option<String>,
}

/// `PATCH /v1/admin/customers/{id}`: at least one field; null clears an
/// optional one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PatchCustomer {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 200, pattern = r"\S")]
    pub name: Option<String>,
    #[serde(
        default,
        deserialize_with = "double_option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<i64>, minimum = 0)]
    pub credit_limit: Option<Option<i64>>,
    #[serde(
        default,
        deserialize_with = "double_option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<Uuid>)]
    pub price_list_id: Option<Option<Uuid>>,
    #[serde(
        default,
        deserialize_with = "double_option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<String>, max_length = 320)]
    pub email: Option<Option<String>>,
    #[serde(
        default,
        deserialize_with = "double_option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<String>, max_length = 50)]
    pub phone: Option<Option<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active: Option<bool>,
}

// ---------------------------------------------------------------- price lists

/// `POST /v1/admin/price-lists`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreatePriceList {
    pub id: Uuid,
    /// 1–200 characters, unique in the tenant.
    #[schema(min_length = 1, max_length = 200, pattern = r"\S")]
    pub name: String,
}

/// `PUT /v1/admin/price-lists/{id}/prices` as JSON (or CSV `code,price`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PriceListPrices {
    pub prices: Vec<Price>,
}

/// The answer to replacing a price list's entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PriceListEntries {
    pub entries: u64,
}

// ---------------------------------------------------------------- users

/// A user of the tenant as operators see them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct User {
    pub id: Uuid,
    pub email: String,
    pub display_name: String,
    pub role: Role,
    /// False = deactivated: cannot sign in, every token revoked.
    pub active: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct UserList {
    pub users: Vec<User>,
}

/// `POST /v1/admin/users`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateUser {
    /// Unique in the tenant, case-insensitive.
    #[schema(min_length = 3, max_length = 320)]
    pub email: String,
    #[schema(min_length = 1, max_length = 200, pattern = r"\S")]
    pub display_name: String,
    pub role: Role,
}

/// `PATCH /v1/admin/users/{id}`: at least one field.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PatchUser {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 200, pattern = r"\S")]
    pub display_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active: Option<bool>,
}

/// `POST /v1/admin/users` → 201: the user and their generated password,
/// shown once. A replay of the same key answers `password: null`: the
/// server never stores a password it could show again.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CreatedUser {
    pub user: User,
    pub password: Option<String>,
}

impl std::fmt::Debug for CreatedUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CreatedUser")
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// `POST /v1/admin/users/{id}/reset-password` → the new password, shown once
/// (null on a replay, as for [`CreatedUser`]).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct NewPassword {
    pub password: Option<String>,
}

impl std::fmt::Debug for NewPassword {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NewPassword(<redacted>)")
    }
}

/// `POST /v1/sessions/current/password`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChangePassword {
    pub current: String,
    /// At least 12 characters.
    #[schema(min_length = 12, max_length = 1000)]
    pub new: String,
}

impl std::fmt::Debug for ChangePassword {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ChangePassword(<redacted>)")
    }
}
