//! What the commands' options mean: durations (`--time`, `--ttl`), memory sizes
//! (`--mem`), and points in time (`--since`, `--until`). Each error names the option's
//! value and the forms it takes.

/// An option's value in none of the forms the option takes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}`{value}`: use {forms}", option.map(|o| format!("{o} ")).unwrap_or_default())]
pub struct BadValue {
    /// The option, when the value's parser knows it.
    pub option: Option<&'static str>,
    pub value: String,
    /// The forms it takes, e.g. "4h, 90m, 30s".
    pub forms: &'static str,
}

impl BadValue {
    fn new(option: Option<&'static str>, value: &str, forms: &'static str) -> BadValue {
        BadValue {
            option,
            value: value.to_string(),
            forms,
        }
    }

    /// The same error, for the option the value was given to.
    pub fn for_option(self, option: &'static str) -> BadValue {
        BadValue {
            option: Some(option),
            ..self
        }
    }
}

impl From<BadValue> for crate::exit::CliError {
    fn from(e: BadValue) -> Self {
        crate::exit::CliError::Usage(e.to_string())
    }
}

/// `4h`, `90m`, `30s`, `2d`, `1-00:00:00`, `HH:MM:SS`, `MM:SS` or plain seconds.
pub fn parse_duration(s: &str) -> Result<u64, BadValue> {
    let bad = || {
        BadValue::new(
            Some("--time"),
            s,
            "4h, 90m, 30s, 2d, D-HH:MM:SS, HH:MM:SS or seconds",
        )
    };
    let s = s.trim();
    if let Some((n, unit)) = s
        .char_indices()
        .last()
        .filter(|(_, c)| c.is_ascii_alphabetic())
        .map(|(i, c)| (&s[..i], c))
    {
        let n: u64 = n.parse().map_err(|_| bad())?;
        let mult = match unit {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            _ => return Err(bad()),
        };
        return Ok(n * mult);
    }
    let (days, rest) = match s.split_once('-') {
        Some((d, r)) => (d.parse::<u64>().map_err(|_| bad())?, r),
        None => (0, s),
    };
    let parts: Result<Vec<u64>, _> = rest.split(':').map(|p| p.parse::<u64>()).collect();
    let parts = parts.map_err(|_| bad())?;
    let secs = match parts[..] {
        [x] if days == 0 => x,
        [m, sec] => m * 60 + sec,
        [h, m, sec] => h * 3600 + m * 60 + sec,
        _ => return Err(bad()),
    };
    Ok(days * 86_400 + secs)
}

/// `64G`, `4000M`, `1T`, or a plain number of MiB (sbatch's `--mem`).
pub fn parse_mem(s: &str) -> Result<u64, BadValue> {
    let bad = || {
        BadValue::new(
            Some("--mem"),
            s,
            "a size such as 64G, 4000M or 1T (plain numbers are MiB)",
        )
    };
    let t = s.trim();
    let (n, mult) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => (
            &t[..i],
            match c.to_ascii_uppercase() {
                'K' => {
                    return t[..i]
                        .parse::<u64>()
                        .map(|k| k.div_ceil(1024))
                        .map_err(|_| bad())
                }
                'M' => 1,
                'G' => 1024,
                'T' => 1024 * 1024,
                _ => return Err(bad()),
            },
        ),
        _ => (t, 1),
    };
    let n: u64 = n.parse().map_err(|_| bad())?;
    if n == 0 {
        return Err(bad());
    }
    Ok(n * mult)
}

/// `2026-11-01`, `2026-11-01T08:00[:00]` (local time), or `7d`, `24h`, `90m` before now.
pub fn parse_when(s: &str, now: u64) -> Result<u64, BadValue> {
    let bad = || {
        BadValue::new(
            None,
            s,
            "a local date or time (2026-11-01, 2026-11-01T08:00) or a span back from now (7d, 24h, 90m)",
        )
    };
    let t = s.trim();
    if let Some((n, unit)) = t.char_indices().last().map(|(i, c)| (&t[..i], c)) {
        if unit.is_ascii_alphabetic() && !n.contains('-') {
            let n: u64 = n.parse().map_err(|_| bad())?;
            let ms = match unit {
                'd' => 86_400_000,
                'h' => 3_600_000,
                'm' => 60_000,
                _ => return Err(bad()),
            };
            return Ok(now.saturating_sub(n * ms));
        }
    }
    let (date, time) = t.split_once(['T', ' ']).unwrap_or((t, "00:00"));
    let d: Vec<i32> = date
        .split('-')
        .map(|p| p.parse().map_err(|_| bad()))
        .collect::<Result<_, _>>()?;
    let h: Vec<i32> = time
        .split(':')
        .map(|p| p.parse().map_err(|_| bad()))
        .collect::<Result<_, _>>()?;
    let [y, mo, day] = <[i32; 3]>::try_from(d).map_err(|_| bad())?;
    let (hh, mm, ss) = match h[..] {
        [hh, mm] => (hh, mm, 0),
        [hh, mm, ss] => (hh, mm, ss),
        _ => return Err(bad()),
    };
    if !(1..=12).contains(&mo)
        || !(1..=31).contains(&day)
        || !(0..24).contains(&hh)
        || !(0..60).contains(&mm)
        || !(0..61).contains(&ss)
    {
        return Err(bad());
    }
    // SAFETY: a zeroed `tm` is a valid value of the plain C struct; `mktime` reads and
    // normalizes it in place, and it lives for the call.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    tm.tm_year = y - 1900;
    tm.tm_mon = mo - 1;
    tm.tm_mday = day;
    tm.tm_hour = hh;
    tm.tm_min = mm;
    tm.tm_sec = ss;
    tm.tm_isdst = -1;
    let secs = unsafe { libc::mktime(&mut tm) };
    if secs < 0 {
        return Err(bad());
    }
    Ok(secs as u64 * 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_in_slurm_and_short_forms() {
        assert_eq!(parse_duration("4h"), Ok(4 * 3600));
        assert_eq!(parse_duration("90m"), Ok(5400));
        assert_eq!(parse_duration("2d"), Ok(2 * 86_400));
        assert_eq!(parse_duration("1-00:00:00"), Ok(86_400));
        assert_eq!(parse_duration("1:30:00"), Ok(5400));
        assert_eq!(parse_duration("10:00"), Ok(600));
        assert_eq!(parse_duration("45"), Ok(45));
        for bad in ["4x", "h", "1-2", "a:b", ""] {
            assert!(
                parse_duration(bad).unwrap_err().to_string().contains(bad),
                "{bad}"
            );
        }
    }

    #[test]
    fn spans_and_dates() {
        let now = 10 * 86_400_000;
        assert_eq!(parse_when("7d", now), Ok(3 * 86_400_000));
        assert_eq!(parse_when("24h", now), Ok(9 * 86_400_000));
        let a = parse_when("2026-11-01", now).unwrap();
        let b = parse_when("2026-11-01T08:30", now).unwrap();
        assert_eq!(b - a, (8 * 60 + 30) * 60_000);
        for bad in ["yesterday", "2026-13-01", "2026-11-01T25:00", "5x"] {
            assert!(
                parse_when(bad, now).unwrap_err().to_string().contains(bad),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_bad_value_names_its_option() {
        let e = parse_duration("4x").unwrap_err();
        assert_eq!(e.option, Some("--time"));
        assert_eq!(
            e.clone().for_option("--ttl").to_string(),
            "--ttl `4x`: use 4h, 90m, 30s, 2d, D-HH:MM:SS, HH:MM:SS or seconds"
        );
        assert_eq!(
            parse_mem("0").unwrap_err().to_string(),
            "--mem `0`: use a size such as 64G, 4000M or 1T (plain numbers are MiB)"
        );
        let when = parse_when("5x", 0).unwrap_err();
        assert_eq!(when.option, None);
        assert!(when
            .for_option("--since")
            .to_string()
            .starts_with("--since `5x`: use a local date"));
        assert!(matches!(
            crate::exit::CliError::from(e),
            crate::exit::CliError::Usage(_)
        ));
    }
}
