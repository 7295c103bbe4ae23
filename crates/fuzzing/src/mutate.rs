//! A small deterministic mutator for the stable smoke run: byte flips, truncations,
//! inserted and deleted runs, hostile length fields, numbers at the edges of their
//! types, splices of two seeds, and deep nesting. It is no substitute for libFuzzer's coverage-guided search; it makes sure
//! that the obvious hostile shapes reach every target on every `cargo test`.

/// SplitMix64: a seeded generator with no dependencies, so a run repeats exactly.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number below `n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Lengths that break naive decoders: bincode varints (251–254 prefixes) and protobuf
/// varints claiming far more than the input holds.
const HOSTILE_LENGTHS: &[&[u8]] = &[
    &[253, 0, 0, 0, 0, 0, 0, 0, 0x40],
    &[253, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
    &[252, 0xff, 0xff, 0xff, 0x7f],
    &[251, 0xff, 0xff],
    &[
        254, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 1,
    ],
    &[0xff, 0xff, 0xff, 0xff, 0x0f],
    &[0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01],
    &[0x7f, 0xff, 0xff, 0xff],
];

/// Numbers at the edges of the integer types, for text inputs.
const EDGE_NUMBERS: &[&[u8]] = &[
    b"0",
    b"4294967295",
    b"4294967296",
    b"9223372036854775807",
    b"18446744073709551615",
    b"400000000",
];

/// Openers that nest: TOML arrays, inline tables and dotted keys; a protobuf
/// length-delimited field (field 1 and field 5).
const NESTERS: &[&[u8]] = &[
    b"[",
    b"{a=",
    b"a.",
    b"[[",
    &[0x0a, 0x80, 0x01],
    &[0x2a, 0x02],
];

/// Replaces `out` with a mutation of one of `seeds`. With `framed`, the 4-byte length
/// prefix is usually fixed up afterwards so that the decoder gets past it.
pub fn mutate(rng: &mut Rng, seeds: &[Vec<u8>], framed: bool, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&seeds[rng.below(seeds.len())]);
    for _ in 0..1 + rng.below(4) {
        let pos = rng.below(out.len() + 1);
        match rng.below(10) {
            0 if !out.is_empty() => {
                let i = pos.min(out.len() - 1);
                out[i] ^= 1 << rng.below(8);
            }
            1 if !out.is_empty() => {
                let i = pos.min(out.len() - 1);
                out[i] = [0, 1, 0x7f, 0x80, 0xff, 251, 252, 253, 254][rng.below(9)];
            }
            2 => out.truncate(pos),
            3 => {
                let n = 1 + rng.below(8);
                let bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                out.splice(pos..pos, bytes);
            }
            4 => {
                let end = (pos + 1 + rng.below(16)).min(out.len());
                out.drain(pos.min(end)..end);
            }
            5 => {
                let field = HOSTILE_LENGTHS[rng.below(HOSTILE_LENGTHS.len())];
                out.splice(pos..pos, field.iter().copied());
            }
            6 if !out.is_empty() => {
                let start = rng.below(out.len());
                let end = (start + 1 + rng.below(32)).min(out.len());
                let chunk = out[start..end].to_vec();
                out.splice(pos..pos, chunk);
            }
            7 => {
                let other = &seeds[rng.below(seeds.len())];
                let from = rng.below(other.len() + 1);
                out.truncate(pos);
                out.extend_from_slice(&other[from..]);
            }
            8 if rng.below(2) == 0 => {
                // A number in text at the edge of its type.
                if let Some(start) = (pos..out.len()).find(|&i| out[i].is_ascii_digit()) {
                    let end = (start..out.len())
                        .find(|&i| !out[i].is_ascii_digit())
                        .unwrap_or(out.len());
                    let edge = EDGE_NUMBERS[rng.below(EDGE_NUMBERS.len())];
                    out.splice(start..end, edge.iter().copied());
                }
            }
            _ => {
                let nester = NESTERS[rng.below(NESTERS.len())];
                let depth = [8, 40, 200, 5_000][rng.below(4)];
                let deep: Vec<u8> = nester.repeat(depth);
                out.splice(pos..pos, deep);
            }
        }
    }
    if framed && out.len() >= 6 && rng.below(4) != 0 {
        let len = (out.len() - 4) as u32;
        out[..4].copy_from_slice(&len.to_be_bytes());
    }
}
