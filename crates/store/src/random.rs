//! Bytes from the OS random number generator, and the ids made of them:
//! what every token, id and key the store makes is built from.

use rand::TryRng;
use rand::rngs::SysRng;

use crate::StoreError;

/// `N` bytes straight from the operating system's generator (never a
/// user-space PRNG), for tokens, ids and key material.
pub fn random_bytes<const N: usize>() -> Result<[u8; N], StoreError> {
    let mut buf = [0u8; N];
    SysRng
        .try_fill_bytes(&mut buf)
        .map_err(|e| StoreError::Random(e.to_string()))?;
    Ok(buf)
}

/// A fresh random identifier: `prefix` followed by 16 hex digits (64 bits
/// from the OS generator) — for step, session and apply ids, which must
/// never collide across processes sharing a store.
pub fn new_id(prefix: &str) -> Result<String, StoreError> {
    let bytes: [u8; 8] = random_bytes()?;
    Ok(format!("{prefix}{}", hex::encode(bytes)))
}
