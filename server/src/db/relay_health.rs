//! The relay's last hour, partner by partner, for the charts on the
//! operator's page: deliveries per minute, how long events took from their
//! commit to the partner's 2xx (p50 and p99 per ten minutes), how long the
//! oldest waiting delivery has waited, and what is wrong with the partner
//! if anything is ([`PartnerHealth::troubles`]).
//!
//! Everything is computed by Postgres from the rows the relay keeps anyway
//! (`deliveries.delivered_at`, `outbox.created_at`), so the page tells the
//! same story whichever server or relay did the work and survives restarts,
//! unlike the process-local Prometheus histograms. "Commit" is the outbox
//! row's `created_at`: the start of the transaction that wrote it, which is
//! its commit less the few milliseconds a mutation runs.
//!
//! The last hour's delivered rows are found by the partial index of
//! migration `relay_health` (tenant, delivered_at), not by walking the
//! week of delivered rows the outbox retention keeps.

use sqlx::PgConnection;
use uuid::Uuid;

/// The charts' span, in one-minute buckets.
pub const MINUTES: usize = 60;
/// The latency chart's bucket: p50 and p99 of ten minutes each.
pub const WINDOW_MINUTES: usize = 10;
/// Latency buckets in the hour.
pub const WINDOWS: usize = MINUTES / WINDOW_MINUTES;

/// Commit → 2xx over one window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Latency {
    /// Deliveries that got their 2xx in the window.
    pub delivered: i64,
    pub p50_seconds: f64,
    pub p99_seconds: f64,
}

/// One partner's last hour.
#[derive(Debug, Clone)]
pub struct PartnerHealth {
    pub partner_id: Uuid,
    pub name: String,
    pub enabled: bool,
    /// Why the relay paused it (410 Gone); none when an operator did.
    pub paused_reason: Option<String>,
    /// Deliveries that got a 2xx, per minute, oldest first: the last entry
    /// is the minute just gone.
    pub per_minute: Vec<i64>,
    /// Commit → 2xx per ten minutes, oldest first; none where nothing was
    /// delivered in the window.
    pub latency: Vec<Option<Latency>>,
    /// How long the oldest pending delivery has waited; none when nothing waits.
    pub oldest_pending_age_seconds: Option<f64>,
    /// Pending deliveries whose last attempt failed (their next one is a retry).
    pub retrying: i64,
    /// Deliveries dead-lettered in the last hour.
    pub dead_last_hour: i64,
    /// The newest error among the retrying deliveries.
    pub last_error: Option<String>,
}

/// Why a partner's row is marked on the page.
#[derive(Debug, Clone, PartialEq)]
pub enum Trouble {
    /// Not being delivered to: the relay paused it (with why) or an operator did.
    Paused { reason: Option<String> },
    /// Deliveries are failing and waiting for their retry.
    Failing {
        retrying: i64,
        last_error: Option<String>,
    },
    /// Deliveries ran out of attempts in the last hour.
    DeadLettering { last_hour: i64 },
}

impl PartnerHealth {
    /// Deliveries with a 2xx in the hour.
    pub fn delivered(&self) -> i64 {
        self.per_minute.iter().sum()
    }

    /// Everything that needs an operator's eye, most serious first; empty
    /// for a healthy partner (or one with nothing to do).
    pub fn troubles(&self) -> Vec<Trouble> {
        let mut troubles = Vec::new();
        if !self.enabled {
            troubles.push(Trouble::Paused {
                reason: self.paused_reason.clone(),
            });
        }
        if self.dead_last_hour > 0 {
            troubles.push(Trouble::DeadLettering {
                last_hour: self.dead_last_hour,
            });
        }
        if self.retrying > 0 {
            troubles.push(Trouble::Failing {
                retrying: self.retrying,
                last_error: self.last_error.clone(),
            });
        }
        troubles
    }
}

#[derive(sqlx::FromRow)]
struct PartnerRow {
    id: Uuid,
    name: String,
    enabled: bool,
    paused_reason: Option<String>,
    oldest_pending_age_seconds: Option<f64>,
    retrying: i64,
    dead_last_hour: i64,
    last_error: Option<String>,
}

/// Every partner of the tenant, by name, with its last hour. Three
/// statements in the caller's transaction (the same `now()` for all).
pub async fn last_hour(
    conn: &mut PgConnection,
    tenant_id: Uuid,
) -> Result<Vec<PartnerHealth>, sqlx::Error> {
    // Pending and dead rows only: delivered ones (the bulk) are not read here.
    let partners: Vec<PartnerRow> = sqlx::query_as(
        "select p.id, p.name, p.enabled, p.paused_reason,
                extract(epoch from now() - least(min(d.created_at) filter (where d.state = 'pending'),
                                                 max(s.oldest)))::float8
                    as oldest_pending_age_seconds,
                count(*) filter (where d.state = 'pending' and d.attempts > 0) as retrying,
                count(*) filter (where d.state = 'dead' and d.dead_lettered_at > now() - interval '1 hour')
                    as dead_last_hour,
                (array_agg(d.last_error order by d.id desc)
                    filter (where d.state = 'pending' and d.attempts > 0 and d.last_error is not null))[1]
                    as last_error
           from partners p
           -- A first attempt a relay holds in memory is pending without its row.
           cross join lateral (
                select min(created_at) as oldest from relay_sending_events s
                 where s.tenant_id = p.tenant_id and s.partner_id = p.id) s
           left join deliveries d on d.tenant_id = p.tenant_id and d.partner_id = p.id
                                 and d.state in ('pending', 'dead')
          where p.tenant_id = $1
          group by p.tenant_id, p.id
          order by p.name, p.id",
    )
    .bind(tenant_id)
    .fetch_all(&mut *conn)
    .await?;

    // `now()` is the transaction's start; a delivery recorded since is
    // counted in the latest bucket rather than outside the chart.
    let per_minute: Vec<(Uuid, i32, i64)> = sqlx::query_as(
        "select partner_id,
                greatest(0, least($2 - 1, floor(extract(epoch from now() - delivered_at) / 60)))::int4
                    as minutes_ago,
                count(*)
           from deliveries
          where tenant_id = $1 and state = 'delivered'
            and delivered_at > now() - make_interval(mins => $2)
          group by 1, 2",
    )
    .bind(tenant_id)
    .bind(MINUTES as i32)
    .fetch_all(&mut *conn)
    .await?;

    // Each delivery's event by its primary key, in a subquery the planner
    // keeps per row: as a join it chose to hash the whole outbox (the
    // week's retention) for the hour's few rows. Materialized, so the
    // latency is computed once for both percentiles.
    let latency: Vec<(Uuid, i32, i64, f64, f64)> = sqlx::query_as(
        "with recent as materialized (
            select d.partner_id, d.delivered_at,
                   extract(epoch from d.delivered_at - (
                       select o.created_at from outbox o
                        where o.tenant_id = d.tenant_id and o.id = d.outbox_id))::float8 as latency
              from deliveries d
             where d.tenant_id = $1 and d.state = 'delivered'
               and d.delivered_at > now() - make_interval(mins => $2 * $3))
         select partner_id,
                greatest(0, least($2 - 1, floor(extract(epoch from now() - delivered_at) / ($3 * 60))))::int4
                    as windows_ago,
                count(*),
                percentile_cont(0.5) within group (order by latency),
                percentile_cont(0.99) within group (order by latency)
           from recent
          group by 1, 2",
    )
    .bind(tenant_id)
    .bind(WINDOWS as i32)
    .bind(WINDOW_MINUTES as i32)
    .fetch_all(&mut *conn)
    .await?;

    Ok(assemble(partners, &per_minute, &latency))
}

/// Puts the grouped rows into each partner's oldest-first series.
fn assemble(
    partners: Vec<PartnerRow>,
    per_minute: &[(Uuid, i32, i64)],
    latency: &[(Uuid, i32, i64, f64, f64)],
) -> Vec<PartnerHealth> {
    partners
        .into_iter()
        .map(|p| {
            let mut minutes = vec![0; MINUTES];
            for &(_, ago, n) in per_minute.iter().filter(|r| r.0 == p.id) {
                if let Some(slot) = oldest_first(ago, MINUTES) {
                    minutes[slot] += n;
                }
            }
            let mut windows = vec![None; WINDOWS];
            for &(_, ago, delivered, p50, p99) in latency.iter().filter(|r| r.0 == p.id) {
                if let Some(slot) = oldest_first(ago, WINDOWS) {
                    windows[slot] = Some(Latency {
                        delivered,
                        p50_seconds: p50,
                        p99_seconds: p99,
                    });
                }
            }
            PartnerHealth {
                partner_id: p.id,
                name: p.name,
                enabled: p.enabled,
                paused_reason: p.paused_reason,
                per_minute: minutes,
                latency: windows,
                oldest_pending_age_seconds: p.oldest_pending_age_seconds,
                retrying: p.retrying,
                dead_last_hour: p.dead_last_hour,
                last_error: p.last_error,
            }
        })
        .collect()
}

/// "n buckets ago" → the index in an oldest-first series of `len`.
fn oldest_first(ago: i32, len: usize) -> Option<usize> {
    let ago = usize::try_from(ago).ok()?;
    (ago < len).then(|| len - 1 - ago)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn partner(enabled: bool) -> PartnerRow {
        PartnerRow {
            id: Uuid::from_u128(1),
            name: "EDI gateway".into(),
            enabled,
            paused_reason: None,
            oldest_pending_age_seconds: None,
            retrying: 0,
            dead_last_hour: 0,
            last_error: None,
        }
    }

    #[test]
    fn buckets_land_oldest_first_and_strays_are_dropped() {
        let id = Uuid::from_u128(1);
        let other = Uuid::from_u128(2);
        let health = assemble(
            vec![partner(true)],
            &[
                (id, 0, 3),
                (id, 59, 1),
                (id, 60, 9),
                (id, -1, 9),
                (other, 0, 5),
            ],
            &[(id, 0, 2, 0.1, 0.4), (id, 6, 9, 1.0, 1.0)],
        );
        let h = &health[0];
        assert_eq!(h.per_minute.len(), MINUTES);
        assert_eq!(h.per_minute[MINUTES - 1], 3, "the minute just gone is last");
        assert_eq!(h.per_minute[0], 1, "an hour ago is first");
        assert_eq!(
            h.delivered(),
            4,
            "other partners' and out-of-range rows ignored"
        );
        assert_eq!(h.latency.len(), WINDOWS);
        assert_eq!(
            h.latency[WINDOWS - 1].map(|l| l.delivered),
            Some(2),
            "the last ten minutes"
        );
        assert!(h.latency[..WINDOWS - 1].iter().all(Option::is_none));
    }

    #[test]
    fn troubles_name_paused_dead_lettering_and_failing() {
        let mut h = assemble(vec![partner(true)], &[], &[]).remove(0);
        assert!(h.troubles().is_empty(), "healthy and idle");
        h.enabled = false;
        h.paused_reason = Some("410 Gone".into());
        h.retrying = 2;
        h.last_error = Some("HTTP 503".into());
        h.dead_last_hour = 1;
        assert_eq!(
            h.troubles(),
            vec![
                Trouble::Paused {
                    reason: Some("410 Gone".into())
                },
                Trouble::DeadLettering { last_hour: 1 },
                Trouble::Failing {
                    retrying: 2,
                    last_error: Some("HTTP 503".into())
                },
            ]
        );
    }
}
