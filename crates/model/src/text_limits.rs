//! Limits on the TOML files admins hand to Tranche (the policy file, the scenario file),
//! checked before the text reaches the TOML parser: a size cap, and a cap on nesting
//! (arrays, inline tables and dotted keys), so that a hostile file cannot exhaust memory
//! or the parser's stack.

/// The largest policy or scenario file: 4 MiB.
pub const MAX_FILE_BYTES: usize = 4 << 20;

/// The deepest nesting of tables and arrays a file may have. Tranche's own files need
/// three or four levels.
pub const MAX_NESTING: usize = 32;

/// Checks `text` against [`MAX_FILE_BYTES`] and [`MAX_NESTING`]. The error names the
/// file kind (`what`, e.g. "policy file"), the rule, and the line where nesting broke it.
pub fn check_toml(what: &str, text: &str) -> Result<(), String> {
    if text.len() > MAX_FILE_BYTES {
        return Err(format!(
            "{what}: {} bytes exceeds the limit of {} MiB",
            text.len(),
            MAX_FILE_BYTES >> 20
        ));
    }
    match toml_nesting(text.as_bytes(), MAX_NESTING) {
        Ok(()) => Ok(()),
        Err(line) => Err(format!(
            "{what}: line {line}: nesting deeper than {MAX_NESTING} levels"
        )),
    }
}

/// Scans TOML for nesting deeper than `max`, without parsing it: strings and comments
/// are skipped; a key's dotted parts, arrays and inline tables each add a level; a
/// table header sets the level of the keys under it. `Err(line)` where the limit is
/// passed. Malformed text is left to the parser.
fn toml_nesting(b: &[u8], max: usize) -> Result<(), usize> {
    // Open arrays (false) and inline tables (true), each with its level.
    let mut open: Vec<(bool, usize)> = Vec::new();
    let mut line = 1;
    // The level of top-level keys (set by the latest table header).
    let mut header_level = 0;
    // Whether a key is being read, and its parts so far.
    let mut in_key = true;
    let mut parts = 1;
    // The level of the next value.
    let mut value_level = 0;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        match c {
            b'#' => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b'"' | b'\'' => {
                i = skip_string(b, i, &mut line);
                continue;
            }
            b'\n' => {
                line += 1;
                if open.is_empty() {
                    in_key = true;
                    parts = 1;
                }
            }
            b'.' if in_key => parts += 1,
            b'=' if in_key => {
                in_key = false;
                value_level = open.last().map_or(header_level, |o| o.1) + parts;
                if value_level > max {
                    return Err(line);
                }
            }
            b'[' if in_key && open.is_empty() => {
                // A table header, `[a.b]` or `[[a.b]]`: its parts set the level.
                let array = b.get(i + 1) == Some(&b'[');
                i += 1 + usize::from(array);
                let mut parts = 1;
                while i < b.len() && b[i] != b']' && b[i] != b'\n' {
                    match b[i] {
                        b'"' | b'\'' => {
                            i = skip_string(b, i, &mut line);
                            continue;
                        }
                        b'.' => parts += 1,
                        _ => {}
                    }
                    i += 1;
                }
                header_level = parts + usize::from(array);
                if header_level > max {
                    return Err(line);
                }
                // Past the closing bracket(s); the rest of the line is left as is.
                while i < b.len() && b[i] == b']' {
                    i += 1;
                }
                continue;
            }
            b'[' | b'{' => {
                let level = match open.last() {
                    Some(&(false, level)) if !in_key => level + 1,
                    _ => value_level,
                };
                let level = level.max(1);
                if level > max {
                    return Err(line);
                }
                let table = c == b'{';
                open.push((table, level));
                in_key = table;
                parts = 1;
            }
            b']' | b'}' => {
                open.pop();
            }
            b',' => match open.last() {
                Some(&(true, _)) => {
                    in_key = true;
                    parts = 1;
                }
                _ => in_key = false,
            },
            _ => {}
        }
        i += 1;
    }
    Ok(())
}

/// Skips the string that starts at `b[i]` (basic or literal, one line or multi-line);
/// returns the index just past it, counting the newlines it spans.
fn skip_string(b: &[u8], mut i: usize, line: &mut usize) -> usize {
    let q = b[i];
    let triple = b.len() >= i + 3 && b[i + 1] == q && b[i + 2] == q;
    i += if triple { 3 } else { 1 };
    while i < b.len() {
        let c = b[i];
        if c == b'\\' && q == b'"' {
            i += 2;
            continue;
        }
        if c == b'\n' {
            if !triple {
                return i;
            }
            *line += 1;
        }
        if c == q && (!triple || (b.len() >= i + 3 && b[i + 1] == q && b[i + 2] == q)) {
            return i + if triple { 3 } else { 1 };
        }
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    fn depth_ok(text: &str, max: usize) -> bool {
        toml_nesting(text.as_bytes(), max).is_ok()
    }

    #[test]
    fn ordinary_files_pass() {
        let policy = "[[shares]]\nname = \"a\" # [[[[\ncapacity_limits = [ { unit = \"h100\", max = 16 } ]\nselector = { rack = \"r[12]\" }\nx = '''\n[[[[[[\n'''\n";
        // shares, its element, capacity_limits, its element, unit: five levels.
        assert!(depth_ok(policy, 5));
        assert!(!depth_ok(policy, 4));
        assert!(check_toml("policy file", policy).is_ok());
    }

    #[test]
    fn deep_nesting_is_refused_with_its_line() {
        let deep = format!("a = 1\nb = {}", "[".repeat(10_000));
        assert_eq!(
            check_toml("policy file", &deep),
            Err("policy file: line 2: nesting deeper than 32 levels".to_string())
        );
        let inline = format!("a = {}1{}", "{b=".repeat(40), "}".repeat(40));
        assert!(check_toml("scenario file", &inline).is_err());
        let dotted = format!("{} = 1", vec!["a"; 40].join("."));
        assert!(check_toml("scenario file", &dotted).is_err());
        let header = format!("[{}]\n", vec!["a"; 40].join("."));
        assert!(check_toml("scenario file", &header).is_err());
        // Exactly at the limit passes.
        let at_limit = format!("a = {}{}", "[".repeat(32), "]".repeat(32));
        assert!(check_toml("scenario file", &at_limit).is_ok());
        let over = format!("a = {}{}", "[".repeat(33), "]".repeat(33));
        assert!(check_toml("scenario file", &over).is_err());
    }

    #[test]
    fn oversized_files_are_refused() {
        let big = "#".repeat(MAX_FILE_BYTES + 1);
        assert_eq!(
            check_toml("scenario file", &big),
            Err(format!(
                "scenario file: {} bytes exceeds the limit of 4 MiB",
                MAX_FILE_BYTES + 1
            ))
        );
    }
}
