//! Times in queries: `now`, `now-15m` (s, m, h, d), unix seconds (`1763916000`, fractions allowed) or
//! RFC 3339 (`2026-11-23T17:00:00Z`, `2026-11-23T18:00:00.5+01:00`), all to unix nanoseconds.

/// Parses `s` relative to `now_ns`; the error says which forms are accepted.
pub fn parse(s: &str, now_ns: u64) -> Result<u64, String> {
    let bad =
        || format!("time '{s}' is not now, now-<N>[smhd], unix seconds or RFC 3339 (2026-11-23T17:00:00Z)");
    let s = s.trim();
    if s == "now" {
        return Ok(now_ns);
    }
    if let Some(ago) = s.strip_prefix("now-") {
        return duration_ns(ago).map(|d| now_ns.saturating_sub(d)).ok_or_else(bad);
    }
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        let secs: f64 = s.parse().map_err(|_| bad())?;
        if !(0.0..1e11).contains(&secs) {
            return Err(bad());
        }
        return Ok((secs * 1e9) as u64);
    }
    rfc3339(s).ok_or_else(bad)
}

/// `15m`, `2h`, `30s`, `7d` in nanoseconds.
pub fn duration_ns(s: &str) -> Option<u64> {
    let unit = s.chars().last()?;
    let n: u64 = s[..s.len() - unit.len_utf8()].parse().ok()?;
    let mult = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3600,
        'd' => 86400,
        _ => return None,
    };
    n.checked_mul(mult)?.checked_mul(1_000_000_000)
}

fn rfc3339(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let t = s.get(r)?;
        t.bytes().all(|c| c.is_ascii_digit()).then(|| t.parse().ok())?
    };
    let (y, mo, d, h, mi, sec) =
        (num(0..4)?, num(5..7)?, num(8..10)?, num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut rest = &s[19..];
    let mut frac_ns = 0i64;
    if let Some(f) = rest.strip_prefix('.') {
        let digits = f.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let padded: String = f[..digits].chars().chain(std::iter::repeat('0')).take(9).collect();
        frac_ns = padded.parse().ok()?;
        rest = &f[digits..];
    }
    let offset_s = match rest {
        "Z" | "z" => 0,
        _ if rest.len() == 6 && matches!(&rest[..1], "+" | "-") && &rest[3..4] == ":" => {
            let oh: i64 = rest[1..3].parse().ok()?;
            let om: i64 = rest[4..6].parse().ok()?;
            let o = oh * 3600 + om * 60;
            if rest.starts_with('-') {
                -o
            } else {
                o
            }
        }
        _ => return None,
    };
    // Days from the civil date (Howard Hinnant's algorithm).
    let (y2, m2) = if mo <= 2 { (y - 1, mo + 9) } else { (y, mo - 3) };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let doy = (153 * m2 + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146097 + doe - 719468;
    let secs = days * 86400 + h * 3600 + mi * 60 + sec - offset_s;
    u64::try_from(secs).ok()?.checked_mul(1_000_000_000)?.checked_add(frac_ns as u64)
}

#[cfg(test)]
mod tests {
    use super::parse;
    const NOW: u64 = 1_763_917_200_000_000_000; // 2025-11-23T17:00:00Z

    #[test]
    fn every_form_gives_unix_nanoseconds() {
        assert_eq!(parse("now", NOW), Ok(NOW));
        assert_eq!(parse("now-15m", NOW), Ok(NOW - 900_000_000_000));
        assert_eq!(parse("now-2d", NOW), Ok(NOW - 2 * 86_400_000_000_000));
        assert_eq!(parse("1763917200", NOW), Ok(NOW));
        assert_eq!(parse("1763917200.5", NOW), Ok(NOW + 500_000_000));
        assert_eq!(parse("2025-11-23T17:00:00Z", NOW), Ok(NOW));
        assert_eq!(parse("2025-11-23T18:00:00.25+01:00", NOW), Ok(NOW + 250_000_000));
        assert_eq!(parse("1970-01-01T00:00:00Z", NOW), Ok(0));
        assert_eq!(parse("2000-02-29T00:00:00Z", NOW), Ok(951_782_400_000_000_000));
        for bad in
            ["", "yesterday", "now-15", "now-5y", "2025-13-01T00:00:00Z", "2025-11-23 17:00", "1e99", "-5"]
        {
            assert!(parse(bad, NOW).is_err(), "{bad}");
        }
    }
}
