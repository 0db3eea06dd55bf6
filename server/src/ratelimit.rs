//! Sign-in throttling: failures per account and per client address within a
//! sliding window. Only failures count, and they age out, so a guesser is
//! slowed to a crawl while the real user is at worst asked to wait a few
//! minutes, never locked out for good. In memory, per process: a guesser
//! spread over N servers gets N times the budget, which is still tiny.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct LoginLimiter {
    window: Duration,
    per_account: usize,
    per_address: usize,
    failures: Mutex<HashMap<String, VecDeque<Instant>>>,
}

/// Keys stop being tracked beyond this many (memory bound under a flood).
const MAX_KEYS: usize = 100_000;

impl Default for LoginLimiter {
    fn default() -> Self {
        LoginLimiter::new(Duration::from_secs(300), 5, 30)
    }
}

impl LoginLimiter {
    pub fn new(window: Duration, per_account: usize, per_address: usize) -> Self {
        LoginLimiter {
            window,
            per_account,
            per_address,
            failures: Mutex::default(),
        }
    }

    fn keys(tenant: &str, email: &str, address: &str) -> [(String, usize); 2] {
        [
            (
                format!("account:{}/{}", tenant.trim(), email.trim().to_lowercase()),
                0,
            ),
            (format!("address:{address}"), 1),
        ]
    }

    /// `Err(wait)` while the account or the address is over its budget.
    pub fn check(&self, tenant: &str, email: &str, address: &str) -> Result<(), Duration> {
        let now = Instant::now();
        let mut map = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let mut wait = Duration::ZERO;
        for (key, kind) in Self::keys(tenant, email, address) {
            let limit = if kind == 0 {
                self.per_account
            } else {
                self.per_address
            };
            if let Some(times) = map.get_mut(&key) {
                while times
                    .front()
                    .is_some_and(|t| now.duration_since(*t) >= self.window)
                {
                    times.pop_front();
                }
                if times.len() >= limit {
                    if let Some(oldest) = times.front() {
                        wait = wait.max(self.window - now.duration_since(*oldest));
                    }
                }
            }
        }
        if wait.is_zero() {
            Ok(())
        } else {
            Err(wait)
        }
    }

    pub fn record_failure(&self, tenant: &str, email: &str, address: &str) {
        let now = Instant::now();
        let mut map = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() >= MAX_KEYS {
            let window = self.window;
            map.retain(|_, times| {
                times
                    .back()
                    .is_some_and(|t| now.duration_since(*t) < window)
            });
        }
        for (key, _) in Self::keys(tenant, email, address) {
            map.entry(key).or_default().push_back(now);
        }
    }

    /// A right password clears the account's failures (not the address's).
    pub fn record_success(&self, tenant: &str, email: &str) {
        let [(account, _), _] = Self::keys(tenant, email, "");
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&account);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn five_failures_block_the_account_then_age_out() {
        let l = LoginLimiter::new(Duration::from_millis(200), 5, 100);
        for _ in 0..5 {
            assert!(l.check("acme", "dana@acme.test", "1.2.3.4").is_ok());
            l.record_failure("acme", "dana@acme.test", "1.2.3.4");
        }
        let wait = l
            .check("acme", " Dana@acme.test", "5.6.7.8")
            .expect_err("blocked from any address");
        assert!(wait <= Duration::from_millis(200));
        assert!(
            l.check("acme", "priya@acme.test", "1.2.3.4").is_ok(),
            "other accounts unaffected"
        );
        std::thread::sleep(Duration::from_millis(210));
        assert!(
            l.check("acme", "dana@acme.test", "1.2.3.4").is_ok(),
            "not locked out forever"
        );
    }

    #[test]
    fn one_address_spraying_many_accounts_is_blocked() {
        let l = LoginLimiter::new(Duration::from_secs(60), 5, 3);
        for i in 0..3 {
            l.record_failure("acme", &format!("u{i}@acme.test"), "9.9.9.9");
        }
        assert!(l.check("acme", "new@acme.test", "9.9.9.9").is_err());
        assert!(l.check("acme", "new@acme.test", "8.8.8.8").is_ok());
    }
}
