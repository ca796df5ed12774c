//! The result as a text table or one JSON object (hand-written: flat numbers and a few strings).

use std::fmt::Write;

use hdrhistogram::Histogram;

use super::engine::Stats;
use super::Config;

const QUANTILES: [(&str, f64); 4] = [
    ("p50", 0.50),
    ("p90", 0.90),
    ("p99", 0.99),
    ("p99.9", 0.999),
];

struct Rates {
    secs: f64,
    ops: f64,
    keys: f64,
    hits: f64,
    value_bytes: f64,
    hit_ratio: Option<f64>,
}

fn rates(s: &Stats) -> Rates {
    let secs = (s.elapsed_ns as f64 / 1e9).max(1e-9);
    Rates {
        secs,
        ops: s.ops as f64 / secs,
        keys: (s.get_keys + s.sets) as f64 / secs,
        hits: s.hits as f64 / secs,
        value_bytes: s.value_bytes as f64 / secs,
        hit_ratio: (s.get_keys > 0).then(|| s.hits as f64 / s.get_keys as f64),
    }
}

fn describe(cfg: &Config) -> String {
    let value = if cfg.value_min == cfg.value_max {
        format!("{} B", cfg.value_min)
    } else {
        format!("{}-{} B", cfg.value_min, cfg.value_max)
    };
    let mode = match cfg.rate {
        Some(r) => format!("fixed rate {r:.0}/s"),
        None => "closed loop".to_string(),
    };
    format!(
        "{} | {} conns, {} thread(s), pipeline {}{} | {} keys of {} B{}, values {} | set:get {}:{}{}, multiget {} | {}",
        cfg.server,
        cfg.connections,
        cfg.threads,
        cfg.pipeline,
        if cfg.refill { " (refill)" } else { "" },
        cfg.keys,
        cfg.key_format.len(),
        if cfg.zipf.is_some() { " (zipf)" } else { "" },
        value,
        cfg.set_weight,
        cfg.get_weight,
        if cfg.look_aside { " + a set after each miss" } else { "" },
        cfg.multiget,
        mode
    )
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

fn group(v: f64) -> String {
    let n = v.round() as u64;
    let s = n.to_string();
    let mut out = String::new();
    let head = s.len() % 3;
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && i % 3 == head % 3 {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

pub fn table(cfg: &Config, s: &Stats) -> String {
    let r = rates(s);
    let mut o = String::new();
    let _ = writeln!(o, "{}", describe(cfg));
    let _ = writeln!(
        o,
        "{} requests in {:.2} s: {} gets ({} keys), {} sets ({} after a miss); errors {}, not stored {}",
        s.ops, r.secs, s.gets, s.get_keys, s.sets, s.refills, s.errors, s.not_stored
    );
    let _ = writeln!(o);
    let _ = writeln!(
        o,
        "{:>14} {:>14} {:>10} {:>14} {:>16}",
        "ops/s", "keys/s", "hit ratio", "hits/s", "value bytes/s"
    );
    let hit = r
        .hit_ratio
        .map_or("-".to_string(), |h| format!("{:.2}%", h * 100.0));
    let _ = writeln!(
        o,
        "{:>14} {:>14} {:>10} {:>14} {:>16}",
        group(r.ops),
        group(r.keys),
        hit,
        group(r.hits),
        group(r.value_bytes)
    );
    let _ = writeln!(o);
    let _ = write!(o, "{:<8}", "latency");
    for (name, _) in QUANTILES {
        let _ = write!(o, " {:>10}", name);
    }
    let _ = writeln!(o, " {:>10} {:>10}   (microseconds)", "max", "mean");
    // In fixed-rate mode latencies count from each request's due time; "send lag" is how much
    // of that the client itself added before the request left.
    for (name, h) in [
        ("all", &s.all),
        ("get", &s.get),
        ("set", &s.set),
        ("send lag", &s.lag),
    ] {
        if h.is_empty() {
            continue;
        }
        let _ = write!(o, "{name:<8}");
        for (_, q) in QUANTILES {
            let _ = write!(o, " {:>10.1}", us(h.value_at_quantile(q)));
        }
        let _ = writeln!(o, " {:>10.1} {:>10.1}", us(h.max()), h.mean() / 1000.0);
    }
    o
}

fn json_hist(h: &Histogram<u64>) -> String {
    if h.is_empty() {
        return "null".into();
    }
    let mut o = String::from("{");
    for (name, q) in QUANTILES {
        let _ = write!(o, "\"{name}\":{:.3},", us(h.value_at_quantile(q)));
    }
    let _ = write!(
        o,
        "\"max\":{:.3},\"mean\":{:.3},\"count\":{}}}",
        us(h.max()),
        h.mean() / 1000.0,
        h.len()
    );
    o
}

fn json_str(s: &str) -> String {
    let mut o = String::from("\"");
    for ch in s.chars() {
        match ch {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

pub fn json(cfg: &Config, s: &Stats) -> String {
    let r = rates(s);
    let mut o = String::from("{");
    let _ = write!(
        o,
        "\"server\":{},\"connections\":{},\"threads\":{},\"pipeline\":{},\"refill\":{},\"keys\":{},\
         \"key_size\":{},\"value_min\":{},\"value_max\":{},\"set_weight\":{},\"get_weight\":{},\
         \"multiget\":{},\"look_aside\":{},\"rate\":{},\"seed\":{},",
        json_str(&cfg.server.to_string()),
        cfg.connections,
        cfg.threads,
        cfg.pipeline,
        cfg.refill,
        cfg.keys,
        cfg.key_format.len(),
        cfg.value_min,
        cfg.value_max,
        cfg.set_weight,
        cfg.get_weight,
        cfg.multiget,
        cfg.look_aside,
        cfg.rate.map_or("null".to_string(), |r| format!("{r}")),
        cfg.seed
    );
    let _ = write!(
        o,
        "\"seconds\":{:.6},\"requests\":{},\"gets\":{},\"sets\":{},\"refills\":{},\"get_keys\":{},\
         \"hits\":{},\"value_bytes\":{},\"errors\":{},\"not_stored\":{},\"ops_per_sec\":{:.1},\
         \"keys_per_sec\":{:.1},\"hits_per_sec\":{:.1},\"value_bytes_per_sec\":{:.1},\"hit_ratio\":{},",
        r.secs,
        s.ops,
        s.gets,
        s.sets,
        s.refills,
        s.get_keys,
        s.hits,
        s.value_bytes,
        s.errors,
        s.not_stored,
        r.ops,
        r.keys,
        r.hits,
        r.value_bytes,
        r.hit_ratio.map_or("null".to_string(), |h| format!("{h:.6}"))
    );
    let _ = write!(
        o,
        "\"latency_us\":{{\"all\":{},\"get\":{},\"set\":{},\"send_lag\":{}}}}}",
        json_hist(&s.all),
        json_hist(&s.get),
        json_hist(&s.set),
        json_hist(&s.lag)
    );
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands() {
        assert_eq!(group(0.0), "0");
        assert_eq!(group(999.0), "999");
        assert_eq!(group(1000.0), "1,000");
        assert_eq!(group(1234567.4), "1,234,567");
    }

    #[test]
    fn json_strings_escape() {
        assert_eq!(json_str("a\"b\\c\n"), "\"a\\\"b\\\\c\\u000a\"");
    }
}
