//! The one encoding of replicated and stored values (log entries, state images,
//! membership records): bincode with its standard configuration, inside a versioned
//! envelope. Decoding is bounded: whatever lengths hostile bytes declare, a decoder
//! claims (allocates) at most [`MAX_DECODE_BYTES`], and a value must use every byte it
//! is given.
//!
//! # Stored format versions
//!
//! A stored value is `FF 54 52` (the magic), a 2-byte big-endian format version, then the
//! bincode body. Format 1 had no envelope: its values are bare bincode, and no bare value
//! can begin with `FF` (bincode's varint never starts with it, and every stored value
//! begins with an integer or a length), so [`open`] tells the two apart. A build reads
//! the formats in [`FORMATS_READ`] (its own and the earlier ones) and migrates the older
//! on load; anything else is refused by [`FormatError::Unknown`], which names the
//! version found and the versions this build reads.

use serde::de::DeserializeOwned;
use serde::Serialize;

/// The most memory one decode may claim: 512 MiB, the largest frame between
/// controllers, which is where a state image travels.
pub const MAX_DECODE_BYTES: usize = 512 << 20;

/// The stored format this build writes.
pub const FORMAT: u16 = 9;

/// The stored formats this build reads: its own and the earlier releases' (each read
/// through the newer ones' migrations, see [`crate::format`]).
pub const FORMATS_READ: [u16; 9] = [1, 2, 3, 4, 5, 6, 7, 8, 9];

/// The envelope's first bytes.
pub const MAGIC: [u8; 3] = [0xFF, b'T', b'R'];

/// Why stored bytes could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error(
        "stored format version {found} is not readable by this build, which reads versions {}",
        versions_read()
    )]
    Unknown { found: u16 },
    #[error("stored value of format {version} does not decode: {reason}")]
    Decode { version: u16, reason: String },
}

/// "1 and 2": the versions this build reads, for messages.
pub fn versions_read() -> String {
    let v: Vec<String> = FORMATS_READ.iter().map(|v| v.to_string()).collect();
    match v.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => v.join(""),
    }
}

/// Encodes a value (bincode, standard configuration), with no envelope.
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

/// Encodes a value to store or replicate: the envelope of [`FORMAT`], then its body.
pub fn seal<T: Serialize>(v: &T) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&FORMAT.to_be_bytes());
    bincode::serde::encode_into_std_write(v, &mut out, bincode::config::standard())
        .expect("writing to a Vec cannot fail");
    out
}

/// The format version of stored bytes and their body: 1 for bare bytes (no envelope),
/// else the envelope's version, which must be one this build reads.
pub fn open(bytes: &[u8]) -> Result<(u16, &[u8]), FormatError> {
    let version = match bytes.first() {
        Some(0xFF) if bytes.len() >= 5 && bytes[..3] == MAGIC => {
            u16::from_be_bytes([bytes[3], bytes[4]])
        }
        Some(0xFF) => {
            return Err(FormatError::Decode {
                version: 0,
                reason: "a broken envelope".into(),
            });
        }
        _ => return Ok((1, bytes)),
    };
    if !FORMATS_READ.contains(&version) {
        return Err(FormatError::Unknown { found: version });
    }
    Ok((version, &bytes[5..]))
}

/// Decodes a stored value whose body is the same in every format this build reads.
pub fn unseal<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, FormatError> {
    let (version, body) = open(bytes)?;
    decode(body).map_err(|reason| FormatError::Decode { version, reason })
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

    #[test]
    fn envelopes_bare_bytes_and_unknown_versions() {
        let v = (7u64, "x".to_string());
        let sealed = seal(&v);
        assert_eq!(&sealed[..5], &[0xFF, b'T', b'R', 0, FORMAT as u8]);
        assert_eq!(open(&sealed).unwrap().0, FORMAT);
        assert_eq!(unseal::<(u64, String)>(&sealed), Ok(v.clone()));
        // Format 1: the same value, bare.
        let bare = encode(&v);
        assert_eq!(open(&bare).unwrap(), (1, &bare[..]));
        assert_eq!(unseal::<(u64, String)>(&bare), Ok(v));
        // No bare integer, length or enum tag begins with FF.
        for n in [0u64, 250, 251, 1 << 16, 1 << 32, u64::MAX] {
            assert_ne!(encode(&n)[0], 0xFF, "{n}");
        }
        let mut future = sealed.clone();
        future[3..5].copy_from_slice(&10u16.to_be_bytes());
        let e = unseal::<(u64, String)>(&future).unwrap_err();
        assert_eq!(e, FormatError::Unknown { found: 10 });
        assert_eq!(
            e.to_string(),
            "stored format version 10 is not readable by this build, which reads versions 1, 2, 3, 4, 5, 6, 7, 8 and 9"
        );
        assert!(open(&[0xFF, b'T']).is_err());
    }
}
