//! A few connections kept in hand for the hottest statement, handed out
//! most recently used first and without the pool's pings.
//!
//! sqlx's pool tests a connection with a round trip to Postgres when it
//! hands it out (`test_before_acquire`, which the server's pool sets so a
//! Postgres restart does not break requests) and again when it takes it
//! back, and hands out its idle connections first in, first out. For a
//! request that is one statement, the allocation on a known order
//! (`engine::known`), that is three round trips instead of one, each on
//! the least recently used of the pool's backends.
//!
//! [`Warm`] keeps up to a quarter of the pool (at most four) out of it,
//! last in, first out. What a ping would have caught, a connection that
//! broke while it sat here, shows as an error on its first statement
//! instead: [`Lease::is_warm`] tells the caller that the statement can be
//! retried on a fresh connection, which the idempotency key makes safe.
//! A connection that ended its statement with any error other than the
//! database declining it goes back to the pool, whose ping on release
//! closes it if it is broken.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use sqlx::pool::PoolConnection;
use sqlx::{PgPool, Postgres};

/// The most connections kept out of the pool.
const MOST: u32 = 4;

/// A connection idle here longer than this goes back to the pool (whose
/// reaper and pings look after connections that sit unused).
const IDLE_LIMIT: Duration = Duration::from_secs(10);

/// A kept connection and when it was given back.
type Kept = (PoolConnection<Postgres>, Instant);

pub struct Warm {
    pool: PgPool,
    most: usize,
    /// `None` once [`Warm::close`] ran: nothing is kept any more.
    held: Mutex<Option<Vec<Kept>>>,
}

/// A connection taken from [`Warm`]: give it back with [`Warm::give_back`]
/// once its statement succeeded, or drop it to return it to the pool.
pub struct Lease {
    pub conn: PoolConnection<Postgres>,
    warm: bool,
}

impl Lease {
    /// True when the connection came from [`Warm`] rather than from the
    /// pool's tested hand-out: an error that says the connection is gone
    /// may mean only that it broke while it waited.
    pub fn is_warm(&self) -> bool {
        self.warm
    }
}

impl Warm {
    pub fn new(pool: PgPool) -> Self {
        let most = (pool.options().get_max_connections() / 4).min(MOST) as usize;
        Warm {
            pool,
            most,
            held: Mutex::new(Some(Vec::new())),
        }
    }

    /// The most recently given back connection, or one from the pool.
    pub async fn take(&self) -> Result<Lease, sqlx::Error> {
        let now = Instant::now();
        let mut stale = Vec::new();
        let warm = {
            let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
            held.as_mut().and_then(|held| {
                // The most recent is last; anything idle too long is older.
                let fresh_from = held
                    .iter()
                    .position(|(_, since)| now.duration_since(*since) <= IDLE_LIMIT)
                    .unwrap_or(held.len());
                stale.extend(held.drain(..fresh_from).map(|(conn, _)| conn));
                held.pop().map(|(conn, _)| conn)
            })
        };
        // Dropped outside the lock: each goes back to the pool.
        drop(stale);
        match warm {
            Some(conn) => Ok(Lease { conn, warm: true }),
            None => Ok(Lease {
                conn: self.pool.acquire().await?,
                warm: false,
            }),
        }
    }

    /// Keeps `lease`'s connection for the next [`Warm::take`], or returns it
    /// to the pool when enough are kept.
    pub fn give_back(&self, lease: Lease) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(held) = held.as_mut().filter(|held| held.len() < self.most) {
            held.push((lease.conn, Instant::now()));
            return;
        }
        drop(held);
        // `lease` drops here: sqlx pings its connection and puts it back.
    }

    /// Returns every kept connection to the pool and keeps none from now
    /// on: `PgPool::close` waits for every connection to come back, so a
    /// server stopping calls this first.
    pub fn close(&self) {
        let kept = self.held.lock().unwrap_or_else(|e| e.into_inner()).take();
        drop(kept);
    }

    /// How many connections are kept out of the pool now.
    #[cfg(test)]
    fn held(&self) -> usize {
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.as_ref().map_or(0, Vec::len)
    }
}

#[cfg(test)]
mod tests {
    use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

    use super::*;

    async fn backend(lease: &mut Lease) -> i32 {
        sqlx::query_scalar("select pg_backend_pid()")
            .fetch_one(&mut *lease.conn)
            .await
            .expect("pid")
    }

    #[sqlx::test]
    async fn the_connection_given_back_last_is_taken_first(
        _: PgPoolOptions,
        connect: PgConnectOptions,
    ) {
        let pool = crate::pool_options(8, Duration::from_secs(5))
            .connect_with(connect)
            .await
            .expect("pool");
        let warm = Warm::new(pool);
        let (mut a, mut b) = (warm.take().await.expect("a"), warm.take().await.expect("b"));
        assert!(!a.is_warm() && !b.is_warm(), "nothing was kept yet");
        let (pid_a, pid_b) = (backend(&mut a).await, backend(&mut b).await);
        warm.give_back(a);
        warm.give_back(b);
        assert_eq!(warm.held(), 2, "a quarter of a pool of 8");

        let mut again = warm.take().await.expect("again");
        assert!(again.is_warm());
        assert_eq!(backend(&mut again).await, pid_b, "the last given back");
        let mut then = warm.take().await.expect("then");
        assert_eq!(backend(&mut then).await, pid_a);
        warm.give_back(again);
        warm.give_back(then);
        let third = warm.take().await.expect("third");
        let (mut x, mut y) = (warm.take().await.expect("x"), third);
        assert!(x.is_warm() && y.is_warm());
        let mut z = warm.take().await.expect("z");
        assert!(!z.is_warm(), "two kept, both out");
        let pid_z = backend(&mut z).await;
        assert!(pid_z != pid_a && pid_z != pid_b);
        let _ = (backend(&mut x).await, backend(&mut y).await);
        for lease in [x, y, z] {
            warm.give_back(lease);
        }
        assert_eq!(warm.held(), 2, "no more than a quarter of the pool is kept");

        // Closing: the pool's close waits for them, so they go back first.
        warm.close();
        let lease = warm.take().await.expect("after close");
        assert!(!lease.is_warm());
        warm.give_back(lease);
        assert_eq!(warm.held(), 0, "nothing is kept once closed");
        tokio::time::timeout(Duration::from_secs(10), warm.pool.close())
            .await
            .expect("the pool closes: nothing is held out of it");
    }

    #[sqlx::test]
    async fn a_small_pool_keeps_nothing_out(_: PgPoolOptions, connect: PgConnectOptions) {
        let pool = crate::pool_options(2, Duration::from_secs(5))
            .connect_with(connect)
            .await
            .expect("pool");
        let warm = Warm::new(pool);
        let lease = warm.take().await.expect("lease");
        warm.give_back(lease);
        assert_eq!(warm.held(), 0, "the rest of the server would wait for it");
    }
}
