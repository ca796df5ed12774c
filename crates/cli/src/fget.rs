//! `mnemo fget`: run an installed server-side filter over keys on every server that holds
//! them, merge the servers' partial results, and print the merge (raw bytes, or seed 001's
//! records one per line).

use clap::Args;
use mnemo_client::{blocking, filter};
use mnemo_filter_sdk::records;
use std::io::Write;

#[derive(Args, Debug)]
pub struct FgetArgs {
    /// The filter, by the name the server's operator installed it under.
    pub filter: String,
    /// The filter's arguments as text (`topk`: `K`; `select`: `user=N`, `article=N`, `ts=N`).
    #[arg(long, conflicts_with = "arg_hex")]
    pub arg: Option<String>,
    /// The filter's arguments as hex bytes (`00ff...`).
    #[arg(long, value_name = "HEX", value_parser = parse_hex)]
    pub arg_hex: Option<Hex>,
    /// How the servers' results combine: `concat` (server order) or `topk:K` (the K newest
    /// records over all servers).
    #[arg(long, default_value = "concat", value_parser = parse_merge)]
    pub merge: Merge,
    /// Print the result as records, `user<TAB>article<TAB>ts` per 24-byte record (trailing
    /// bytes short of a record are ignored), instead of raw bytes.
    #[arg(long)]
    pub records: bool,
    /// Keys whose values the filter reads (`-`: one per line from stdin).
    #[arg(required = true)]
    pub keys: Vec<String>,
}

/// Argument bytes given in hex (a newtype: clap would take a bare `Vec<u8>` for many values).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hex(pub Vec<u8>);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Merge {
    Concat,
    TopK(usize),
}

fn parse_hex(s: &str) -> Result<Hex, String> {
    let digit = |c: u8| {
        (c as char)
            .to_digit(16)
            .ok_or(format!("not a hex digit: {:?}", c as char))
    };
    if !s.len().is_multiple_of(2) {
        return Err("an odd number of hex digits".into());
    }
    s.as_bytes()
        .chunks(2)
        .map(|p| Ok((digit(p[0])? * 16 + digit(p[1])?) as u8))
        .collect::<Result<_, String>>()
        .map(Hex)
}

fn parse_merge(s: &str) -> Result<Merge, String> {
    if s == "concat" {
        return Ok(Merge::Concat);
    }
    let bad = || format!("{s:?}: want concat or topk:K (K a whole number >= 1)");
    let k = s.strip_prefix("topk:").ok_or_else(bad)?;
    match k.parse::<usize>() {
        Ok(k) if k >= 1 => Ok(Merge::TopK(k)),
        _ => Err(bad()),
    }
}

/// Run the filter over `keys` (already read from stdin where asked) and print the merge.
pub fn run(
    c: &blocking::Client,
    args: &FgetArgs,
    keys: &[String],
    out: &mut impl Write,
) -> Result<(), mnemo_client::Error> {
    let fargs: &[u8] = match (&args.arg, &args.arg_hex) {
        (Some(t), _) => t.as_bytes(),
        (None, Some(Hex(b))) => b,
        (None, None) => b"",
    };
    let merged = match args.merge {
        Merge::Concat => c.fget_merge(&args.filter, fargs, keys, filter::concat)?,
        Merge::TopK(k) => c.fget_merge(&args.filter, fargs, keys, filter::top_k(k))?,
    };
    // Output errors (a closed pipe) are not the servers' failure, as for the other commands.
    if args.records {
        for r in records::iter(&merged) {
            let _ = writeln!(out, "{}\t{}\t{}", r.user, r.article, r.ts);
        }
    } else {
        let _ = out.write_all(&merged);
    }
    let _ = out.flush();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        a: FgetArgs,
    }

    fn parse(args: &[&str]) -> Result<FgetArgs, clap::Error> {
        T::try_parse_from(std::iter::once("fget").chain(args.iter().copied())).map(|t| t.a)
    }

    #[test]
    fn arguments() {
        let a = parse(&[
            "topk",
            "--arg",
            "10",
            "--merge",
            "topk:10",
            "--records",
            "a",
            "b",
        ])
        .unwrap();
        assert_eq!((a.filter.as_str(), a.arg.as_deref()), ("topk", Some("10")));
        assert_eq!(
            (a.merge, a.records, a.keys),
            (Merge::TopK(10), true, vec!["a".into(), "b".into()])
        );

        let a = parse(&["select", "--arg-hex", "00fF0a", "k"]).unwrap();
        assert_eq!(a.arg_hex, Some(Hex(vec![0, 0xff, 0x0a])));
        assert_eq!((a.merge, a.records), (Merge::Concat, false));

        for bad in [
            &["f"][..],                                   // no keys
            &["f", "--arg", "1", "--arg-hex", "01", "k"], // both argument forms
            &["f", "--arg-hex", "abc", "k"],              // odd digits
            &["f", "--arg-hex", "zz", "k"],               // not hex
            &["f", "--merge", "topk:0", "k"],
            &["f", "--merge", "topk:", "k"],
            &["f", "--merge", "top", "k"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
