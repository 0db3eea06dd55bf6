//! Who is calling ([`Caller`]), passwords (argon2id) and device tokens (256
//! random bits, stored as SHA-256).

use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use holdfast_protocol::model::Role;
use rand::RngCore;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::error::Error;

/// Who is calling: resolved from the bearer token on every request, so a
/// revoked token stops working at once. Every query a handler runs takes
/// `tenant_id` from here, never from the request.
#[derive(Debug, Clone)]
pub struct Caller {
    pub tenant_id: Uuid,
    pub user_id: Uuid,
    pub token_id: Uuid,
    pub role: Role,
    pub display_name: String,
    /// The primary's WAL insert position when the token was looked up (None
    /// when the database is not a primary): a read on a replica waits until
    /// the replica has replayed past it, so it sees every write that had
    /// finished when the request arrived (`db/reads.rs`).
    pub primary_wal: Option<crate::db::reads::WalPosition>,
}

impl Caller {
    pub fn require(&self, role: Role) -> Result<(), Error> {
        if self.role == role {
            Ok(())
        } else {
            Err(Error::forbidden(format!(
                "this route needs the {} role; you are {}",
                role.as_str(),
                self.role.as_str()
            )))
        }
    }
}

/// argon2id with the crate's defaults (OWASP's m=19 MiB, t=2, p=1).
pub fn hash_password(password: &str) -> anyhow::Result<String> {
    let salt = SaltString::generate(&mut OsRng);
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| anyhow::anyhow!("hashing a password: {e}"))
}

pub fn verify_password(password: &str, phc: &str) -> bool {
    PasswordHash::new(phc)
        .map(|hash| {
            Argon2::default()
                .verify_password(password.as_bytes(), &hash)
                .is_ok()
        })
        .unwrap_or(false)
}

/// A hash to verify against when the user does not exist, so an unknown
/// email costs the same time as a wrong password and the two cannot be told
/// apart by timing.
pub fn dummy_hash() -> &'static str {
    static DUMMY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DUMMY.get_or_init(|| hash_password("holdfast-no-such-user").unwrap_or_default())
}

/// A fresh bearer token: `hf_` + 32 random bytes, base64url.
pub fn new_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    format!("hf_{}", URL_SAFE_NO_PAD.encode(bytes))
}

/// What the server stores and looks up: never the token itself.
pub fn token_digest(token: &str) -> Vec<u8> {
    Sha256::digest(token.as_bytes()).to_vec()
}

/// A webhook secret in the Standard Webhooks form (`whsec_` + base64 of 32 bytes).
pub fn new_webhook_secret() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    holdfast_protocol::webhook::format_secret(&bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_verify_only_themselves() {
        let h = hash_password("holdfast-demo").expect("hash");
        assert!(h.starts_with("$argon2id$"));
        assert!(verify_password("holdfast-demo", &h));
        assert!(!verify_password("holdfast-demo ", &h));
        assert!(!verify_password("x", "not a phc string"));
    }

    #[test]
    fn tokens_carry_256_bits_and_differ() {
        let a = new_token();
        let b = new_token();
        assert_ne!(a, b);
        assert_eq!(URL_SAFE_NO_PAD.decode(&a[3..]).expect("b64").len(), 32);
        assert_eq!(token_digest(&a).len(), 32);
    }
}
