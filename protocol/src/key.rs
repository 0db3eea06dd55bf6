//! The idempotency key: one per intention, checked once where a request
//! enters, and carried as this type from there on.

use std::fmt;

use crate::problem::{Problem, ProblemCode};

/// 1–255 characters, no NUL (API.md; Postgres could not store a NUL).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(String);

/// Why a key was refused (`idempotency_key_invalid`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("Idempotency-Key must be 1–255 characters")]
    Length,
    #[error("Idempotency-Key must not contain the NUL character")]
    Nul,
}

impl KeyError {
    pub fn to_problem(self) -> Problem {
        Problem::new(ProblemCode::IdempotencyKeyInvalid, self.to_string())
    }
}

impl IdempotencyKey {
    pub const MAX_CHARS: usize = 255;

    pub fn new(key: impl Into<String>) -> Result<Self, KeyError> {
        let key = key.into();
        let len = key.chars().count();
        if len == 0 || len > Self::MAX_CHARS {
            return Err(KeyError::Length);
        }
        if key.contains('\0') {
            return Err(KeyError::Nul);
        }
        Ok(IdempotencyKey(key))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for IdempotencyKey {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_one_to_255_characters_without_nul() {
        assert_eq!(IdempotencyKey::new(""), Err(KeyError::Length));
        assert!(IdempotencyKey::new("k".repeat(255)).is_ok());
        // Characters, not bytes: 255 two-byte characters are a valid key.
        assert!(IdempotencyKey::new("é".repeat(255)).is_ok());
        assert_eq!(IdempotencyKey::new("k".repeat(256)), Err(KeyError::Length));
        assert_eq!(IdempotencyKey::new("a\0b"), Err(KeyError::Nul));
        assert_eq!(IdempotencyKey::new("a").expect("valid").to_string(), "a");
    }
}
