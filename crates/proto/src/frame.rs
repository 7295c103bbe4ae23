//! Frames: every message on every Tranche stream is one frame.
//!
//! A frame is a 4-byte big-endian length, a 2-byte big-endian protocol version, then
//! the bincode (standard configuration) encoding of the message. The length counts the
//! version and the body. A reader refuses a frame longer than its limit before reading
//! the body, a version it does not speak, a body that does not decode, and a body with
//! bytes left over.
//!
//! Clients and agents speak version 7 with the controllers. The client port answers a
//! version-6 request with a version-6 error that tells the user to upgrade the client;
//! and a client that gets a version-6 answer says the controllers are older.
//!
//! Controllers speak [`PEER_PROTOCOL_VERSION`] (9) with each other: its frames are laid
//! out as version 7's, but the writes they forward and the log entries they carry are
//! of stored format 9, which a controller of the previous release cannot apply. Such a
//! controller refuses version-9 frames whole (so it never meets an entry it cannot
//! read), while this build still reads version-8, -7, -6 and -5 frames from controllers
//! not yet upgraded.

use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The protocol version this build speaks on every stream.
pub const PROTOCOL_VERSION: u16 = 7;

/// The previous release's protocol version: the client port tells such clients to
/// upgrade; controllers still read its frames from each other.
pub const PREVIOUS_PROTOCOL_VERSION: u16 = 6;

/// The protocol version between controllers (see the module's head).
pub const PEER_PROTOCOL_VERSION: u16 = 9;

/// The largest client request or response frame (16 MiB).
pub const MAX_CLIENT_FRAME: usize = 16 << 20;

/// The largest request frame of an agent's log port (a `LogRequest` is a few dozen
/// bytes; 64 KiB).
pub const MAX_LOG_REQUEST: usize = 64 << 10;

/// The largest frame between controllers; a state-machine snapshot travels in one
/// (512 MiB).
pub const MAX_PEER_FRAME: usize = 512 << 20;

/// Why a frame could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame of {len} bytes exceeds the limit of {limit} bytes")]
    TooLarge { len: usize, limit: usize },
    #[error("frame is shorter than its 2-byte version header ({len} bytes)")]
    TooShort { len: usize },
    #[error(
        "protocol version {got} is not supported (this build speaks version {PROTOCOL_VERSION})"
    )]
    Version { got: u16 },
    #[error("frame body does not decode: {0}")]
    Decode(String),
    #[error("frame body has {0} trailing bytes")]
    Trailing(usize),
    #[error("stream ended before a whole frame was read")]
    Truncated,
    #[error("stream error: {0}")]
    Io(String),
    /// A limit of the reader's refused the frame; the text names it and its value.
    #[error("{0}")]
    Refused(String),
    #[error(
        "no whole frame arrived within {secs} s of the stream's opening (the limit is \
         frame_timeout_s = {secs})"
    )]
    Deadline { secs: u64 },
}

fn config() -> bincode::config::Configuration {
    bincode::config::standard()
}

/// Encodes `msg` as a whole frame (header included).
pub fn encode<T: Serialize>(msg: &T) -> Vec<u8> {
    encode_as(msg, PROTOCOL_VERSION)
}

/// Encodes `msg` as a whole frame of protocol `version` (the body is the caller's to
/// lay out as that version does).
pub fn encode_as<T: Serialize>(msg: &T, version: u16) -> Vec<u8> {
    let mut out = vec![0u8; 6];
    bincode::serde::encode_into_std_write(msg, &mut out, config())
        .expect("writing to a Vec cannot fail");
    let len = (out.len() - 4) as u32;
    out[0..4].copy_from_slice(&len.to_be_bytes());
    out[4..6].copy_from_slice(&version.to_be_bytes());
    out
}

/// The protocol version of a frame's payload (the part after its length prefix).
pub fn payload_version(payload: &[u8]) -> Result<u16, FrameError> {
    if payload.len() < 2 {
        return Err(FrameError::TooShort { len: payload.len() });
    }
    Ok(u16::from_be_bytes([payload[0], payload[1]]))
}

/// Decodes the part of a frame after its length prefix: version and body. Only this
/// build's version is accepted.
pub fn decode_payload<T: DeserializeOwned>(payload: &[u8]) -> Result<T, FrameError> {
    decode_payload_of(payload, &[PROTOCOL_VERSION]).map(|(_, v)| v)
}

/// Decodes a payload whose version is one of `versions` (whose bodies the caller knows
/// to lay out alike for `T`); returns the version too.
pub fn decode_payload_of<T: DeserializeOwned>(
    payload: &[u8],
    versions: &[u16],
) -> Result<(u16, T), FrameError> {
    let version = payload_version(payload)?;
    if !versions.contains(&version) {
        return Err(FrameError::Version { got: version });
    }
    let body = &payload[2..];
    // The decoder may not claim (allocate) more than the frame limit, whatever lengths
    // a hostile body declares.
    let decoded = if body.len() <= MAX_CLIENT_FRAME {
        bincode::serde::decode_from_slice(body, config().with_limit::<MAX_CLIENT_FRAME>())
    } else {
        bincode::serde::decode_from_slice(body, config().with_limit::<MAX_PEER_FRAME>())
    };
    let (msg, used): (T, usize) = decoded.map_err(|e| FrameError::Decode(e.to_string()))?;
    if used != body.len() {
        return Err(FrameError::Trailing(body.len() - used));
    }
    Ok((version, msg))
}

/// Decodes a whole frame held in memory (length prefix included).
pub fn decode<T: DeserializeOwned>(frame: &[u8], limit: usize) -> Result<T, FrameError> {
    if frame.len() < 4 {
        return Err(FrameError::Truncated);
    }
    let len = u32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]) as usize;
    if len > limit {
        return Err(FrameError::TooLarge { len, limit });
    }
    if frame.len() - 4 < len {
        return Err(FrameError::Truncated);
    }
    if frame.len() - 4 > len {
        return Err(FrameError::Trailing(frame.len() - 4 - len));
    }
    decode_payload(&frame[4..])
}

/// What a reader allocates for a frame before its bytes arrive.
const READ_CHUNK: usize = 64 << 10;

/// Reads one frame's payload from a stream. `Ok(None)` when the stream ended cleanly
/// before any byte of a new frame.
pub async fn read_payload<R: AsyncRead + Unpin>(
    r: &mut R,
    limit: usize,
) -> Result<Option<Vec<u8>>, FrameError> {
    match read_len(r, limit).await? {
        Some(len) => read_body(r, len).await.map(Some),
        None => Ok(None),
    }
}

/// Reads one frame's payload as [`read_payload`] does, with two more limits: the frame
/// must arrive whole within `deadline` (a peer that sends a length and stalls is
/// cut), and `reserve` is asked for the frame's length before its body is read, so
/// that a reader can bound the bytes it holds for all its peers' frames together.
/// What `reserve` gives back is returned with the payload (hold it while the payload
/// is in use); its refusal is [`FrameError::Refused`].
pub async fn read_payload_within<R: AsyncRead + Unpin, P>(
    r: &mut R,
    limit: usize,
    deadline: std::time::Duration,
    reserve: impl FnOnce(usize) -> Result<P, String>,
) -> Result<Option<(Vec<u8>, P)>, FrameError> {
    let read = async {
        let Some(len) = read_len(r, limit).await? else {
            return Ok(None);
        };
        let held = reserve(len).map_err(FrameError::Refused)?;
        let buf = read_body(r, len).await?;
        Ok(Some((buf, held)))
    };
    match tokio::time::timeout(deadline, read).await {
        Ok(r) => r,
        Err(_) => Err(FrameError::Deadline {
            secs: deadline.as_secs(),
        }),
    }
}

/// Reads a frame's 4-byte length and checks it against `limit`; `None` when the
/// stream ended cleanly first.
async fn read_len<R: AsyncRead + Unpin>(
    r: &mut R,
    limit: usize,
) -> Result<Option<usize>, FrameError> {
    let mut len = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        let n = r
            .read(&mut len[got..])
            .await
            .map_err(|e| FrameError::Io(e.to_string()))?;
        if n == 0 {
            return if got == 0 {
                Ok(None)
            } else {
                Err(FrameError::Truncated)
            };
        }
        got += n;
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > limit {
        return Err(FrameError::TooLarge { len, limit });
    }
    Ok(Some(len))
}

/// Reads a frame's body of `len` bytes. The buffer grows as bytes arrive: a header
/// alone cannot make the reader allocate up to the limit.
async fn read_body<R: AsyncRead + Unpin>(r: &mut R, len: usize) -> Result<Vec<u8>, FrameError> {
    let mut buf = Vec::with_capacity(len.min(READ_CHUNK));
    (&mut *r)
        .take(len as u64)
        .read_to_end(&mut buf)
        .await
        .map_err(|e| FrameError::Io(e.to_string()))?;
    if buf.len() < len {
        return Err(FrameError::Truncated);
    }
    Ok(buf)
}

/// Reads and decodes one frame. A clean end of stream is `Truncated` here.
pub async fn read<T: DeserializeOwned, R: AsyncRead + Unpin>(
    r: &mut R,
    limit: usize,
) -> Result<T, FrameError> {
    match read_payload(r, limit).await? {
        Some(p) => decode_payload(&p),
        None => Err(FrameError::Truncated),
    }
}

/// Encodes and writes one frame.
pub async fn write<T: Serialize, W: AsyncWrite + Unpin>(
    w: &mut W,
    msg: &T,
) -> Result<(), FrameError> {
    w.write_all(&encode(msg))
        .await
        .map_err(|e| FrameError::Io(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_refusals() {
        let f = encode(&("hello".to_string(), 7u32));
        let v: (String, u32) = decode(&f, 1024).unwrap();
        assert_eq!(v, ("hello".to_string(), 7));
        assert!(matches!(
            decode::<(String, u32)>(&f, 4),
            Err(FrameError::TooLarge { .. })
        ));
        assert!(matches!(
            decode::<(String, u32)>(&f[..f.len() - 1], 1024),
            Err(FrameError::Truncated)
        ));
        let mut old = f.clone();
        old[5] = PREVIOUS_PROTOCOL_VERSION as u8;
        assert!(matches!(
            decode::<(String, u32)>(&old, 1024),
            Err(FrameError::Version {
                got: PREVIOUS_PROTOCOL_VERSION
            })
        ));
        assert_eq!(
            decode_payload_of::<(String, u32)>(
                &old[4..],
                &[PREVIOUS_PROTOCOL_VERSION, PROTOCOL_VERSION]
            )
            .unwrap(),
            (PREVIOUS_PROTOCOL_VERSION, ("hello".to_string(), 7))
        );
        let mut bad = f.clone();
        bad[5] = 9;
        assert!(matches!(
            decode::<(String, u32)>(&bad, 1024),
            Err(FrameError::Version { got: 9 })
        ));
        let mut extra = f.clone();
        extra.push(0);
        let n = (extra.len() - 4) as u32;
        extra[0..4].copy_from_slice(&n.to_be_bytes());
        assert!(matches!(
            decode::<(String, u32)>(&extra, 1024),
            Err(FrameError::Trailing(1))
        ));
        let garbage = [0, 0, 0, 4, 0, PROTOCOL_VERSION as u8, 0xff, 0xff];
        assert!(matches!(
            decode::<(String, u32)>(&garbage, 1024),
            Err(FrameError::Decode(_))
        ));
    }
}
