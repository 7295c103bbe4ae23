//! The one encoding of replicated and stored values (log entries, state images): bincode
//! with its standard configuration. Decoding is bounded: whatever lengths hostile bytes
//! declare, a decoder claims (allocates) at most [`MAX_DECODE_BYTES`], and a value must
//! use every byte it is given.

use serde::de::DeserializeOwned;
use serde::Serialize;

/// The most memory one decode may claim: 512 MiB, the largest frame between
/// controllers, which is where a state image travels.
pub const MAX_DECODE_BYTES: usize = 512 << 20;

/// Encodes a value (bincode, standard configuration).
pub fn encode<T: Serialize>(v: &T) -> Vec<u8> {
    bincode::serde::encode_to_vec(v, bincode::config::standard()).expect("encodes")
}

/// Decodes a value that must take all of `bytes`, claiming at most
/// [`MAX_DECODE_BYTES`].
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    let config = bincode::config::standard().with_limit::<MAX_DECODE_BYTES>();
    let (v, used): (T, usize) =
        bincode::serde::decode_from_slice(bytes, config).map_err(|e| e.to_string())?;
    if used != bytes.len() {
        return Err(format!("{} trailing bytes", bytes.len() - used));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_lengths_are_refused_not_allocated() {
        // A string that claims 2^62 bytes and a vector that claims 2^40 elements: both
        // must fail cleanly (an unbounded decoder aborts trying to allocate them).
        let mut huge_string = vec![253u8];
        huge_string.extend_from_slice(&(1u64 << 62).to_le_bytes());
        assert!(decode::<String>(&huge_string).is_err());
        let mut huge_vec = vec![253u8];
        huge_vec.extend_from_slice(&(1u64 << 40).to_le_bytes());
        assert!(decode::<Vec<(u64, String)>>(&huge_vec).is_err());
        assert_eq!(decode::<(u64, u64)>(&encode(&(7u64, 9u64))), Ok((7, 9)));
        let mut trailing = encode(&5u64);
        trailing.push(0);
        assert_eq!(
            decode::<u64>(&trailing),
            Err("1 trailing bytes".to_string())
        );
    }
}
