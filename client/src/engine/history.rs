//! An order's history (API.md v1.1), fetched from the server when asked: who
//! made each version, under which key, and what partners were told. The
//! desk keeps no copy (it would be stale the moment a partner's delivery
//! moved on), so it is online only.

use holdfast_protocol::model::OrderHistory;
use uuid::Uuid;

use super::{Engine, Error, Result};
use crate::api::ApiError;
use crate::store::{orders, pending};

impl Engine {
    /// The order's history as the server has it, oldest version first.
    ///
    /// Errors: [`Error::OnlineOnly`] when the server cannot be reached (its
    /// `is_offline()` is true); [`Error::NotFound`] when the server has no
    /// such order — with its own words when the order exists here only as
    /// queued acts that have not been sent yet; [`Error::Unauthorized`] when
    /// the server refused the desk's token (the desk is signed out, its queue
    /// kept, as a sync would do).
    pub async fn order_history(&self, order_id: Uuid) -> Result<OrderHistory> {
        let api = self.api()?;
        match api.order_history(order_id).await {
            Ok(history) => Ok(history),
            Err(ApiError::Network(cause)) => Err(Error::OnlineOnly {
                what: "the order's history",
                cause,
            }),
            Err(e) if e.is_unauthorized() => {
                self.session_ended(&api)?;
                Err(Error::Unauthorized)
            }
            Err(ApiError::Status { status: 404, .. }) => {
                let only_here = self.inner.store.read(|tx| {
                    Ok(orders::get(tx, order_id)?.is_none()
                        && !pending::for_order(tx, order_id)?.is_empty())
                })?;
                Err(Error::NotFound(if only_here {
                    "this order has not reached the server yet: its history starts once it is sent"
                        .to_owned()
                } else {
                    format!("the server has no order {order_id}")
                }))
            }
            Err(e) => Err(e.into()),
        }
    }
}
