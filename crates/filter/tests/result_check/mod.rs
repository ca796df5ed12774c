//! Checker for what a WebAssembly filter hands back to the host: the result record (status,
//! flags, pointer, length) and the memory it points into, all chosen by the fuzzer.
//!
//! One guest module serves every input: it copies the request's arguments after their first
//! four bytes to address 0 of its memory and returns those first four bytes as the address of
//! the result record. So the fuzzer writes the record, the output and the message, and picks
//! where the host must look. The checker replays the same steps on a model of the guest's
//! memory (zeroed pages, the input where the host writes it) and demands the host's exact
//! answer: the output bytes, a sanitized message, or the refusal the record deserves. Each
//! input is checked on a new instance (a trapping call first makes the host drop the one it
//! had), then again on the instance that call leaves, which must answer the same.
//!
//! Used by fuzz/fuzz_targets/filter_result.rs and tests/result_fuzz_replay.rs.

use std::sync::OnceLock;
use std::time::Duration;

use mnemo_filter::{FilterError, FilterHost, FilterKind, FilterSpec, Limits};

const GUEST: &str = r#"(module
  (memory (export "memory") 1)
  (func (export "mnemo_abi_version") (result i32) (i32.const 1))
  (func (export "mnemo_filter") (param $p i32) (param $l i32) (result i32)
    (memory.copy (i32.const 0) (i32.add (local.get $p) (i32.const 8))
                 (i32.sub (i32.load (local.get $p)) (i32.const 4)))
    (i32.load (i32.add (local.get $p) (i32.const 4)))))"#;

const PAGE: usize = 65536;
const OUTPUT_MAX: usize = 4096;
/// The host grows memory by at least 16 pages for the input.
const GROWN_PAGES: usize = 16;

fn host() -> &'static FilterHost {
    static HOST: OnceLock<FilterHost> = OnceLock::new();
    HOST.get_or_init(|| {
        let path =
            std::env::temp_dir().join(format!("mnemo-result-check-{}.wat", std::process::id()));
        std::fs::write(&path, GUEST).expect("write the guest module");
        let limits = Limits {
            deadline: Duration::from_secs(5),
            output_max: OUTPUT_MAX,
            ..Limits::default()
        };
        let spec = FilterSpec {
            name: "g".into(),
            path: path.clone(),
            kind: FilterKind::Wasm,
        };
        let host = FilterHost::new(limits, vec![spec]).expect("load the guest module");
        let _ = std::fs::remove_file(&path);
        host
    })
}

fn word(mem: &[u8], at: usize) -> Option<u32> {
    mem.get(at..at.checked_add(4)?)
        .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
}

/// What the host must answer for these arguments.
fn model(args: &[u8]) -> Result<(u32, Vec<u8>), FilterError> {
    if args.len() < 4 {
        // memory.copy of (len - 4) as u32 bytes: far out of bounds.
        return Err(FilterError::Trapped);
    }
    let base = PAGE;
    let mut mem = vec![0u8; PAGE * (1 + GROWN_PAGES.max((args.len() + 8).div_ceil(PAGE)))];
    mem[base..base + 4].copy_from_slice(&(args.len() as u32).to_le_bytes());
    mem[base + 4..base + 4 + args.len()].copy_from_slice(args);
    // nkeys = 0 follows: already zero.
    let n = args.len() - 4;
    mem.copy_within(base + 8..base + 8 + n, 0);
    let rec = word(args, 0).unwrap() as usize;
    let field = |i: usize| {
        rec.checked_add(4 * i)
            .and_then(|at| word(&mem, at))
            .ok_or(FilterError::BadResult)
    };
    let (status, flags, ptr, len) = (field(0)?, field(1)?, field(2)? as usize, field(3)? as usize);
    let bytes = ptr
        .checked_add(len)
        .and_then(|end| mem.get(ptr..end))
        .ok_or(FilterError::BadResult)?;
    match status {
        0 if len > OUTPUT_MAX => Err(FilterError::OutputTooLarge),
        0 => Ok((flags, bytes.to_vec())),
        1 => Err(FilterError::Failed(
            bytes
                .iter()
                .take(200)
                .map(|&b| {
                    if (0x20..0x7f).contains(&b) {
                        b as char
                    } else {
                        '?'
                    }
                })
                .collect(),
        )),
        _ => Err(FilterError::BadResult),
    }
}

fn same(a: &Result<(u32, Vec<u8>), FilterError>, b: &Result<(u32, Vec<u8>), FilterError>) -> bool {
    match (a, b) {
        (Ok(x), Ok(y)) => x == y,
        (Err(FilterError::Failed(x)), Err(FilterError::Failed(y))) => x == y,
        (Err(x), Err(y)) => std::mem::discriminant(x) == std::mem::discriminant(y),
        _ => false,
    }
}

fn call(args: &[u8]) -> Result<(u32, Vec<u8>), FilterError> {
    let f = host().get(b"g").expect("installed");
    let mut out = b"before".to_vec();
    let got = f
        .call(args, 0, &mut |_| {}, &mut out)
        .map(|flags| (flags, out[6..].to_vec()));
    assert!(
        out.starts_with(b"before"),
        "the host changed output it did not own"
    );
    if got.is_err() {
        assert_eq!(out, b"before", "a failed call appended output");
    }
    got
}

pub fn check(data: &[u8]) {
    // Inputs larger than the 64 KiB argument limit of fget never reach a filter.
    let args = &data[..data.len().min(64 * 1024)];
    // A call that traps first: the host drops that instance, so the checked call runs in a
    // new one whatever earlier inputs did (the model's zeroed memory), and each input is
    // judged alone.
    assert!(matches!(call(b""), Err(FilterError::Trapped)));
    let got = call(args);
    let want = model(args);
    let brief = |r: &Result<(u32, Vec<u8>), FilterError>| match r {
        Ok((flags, out)) => format!(
            "Ok(flags {flags}, {} bytes {:02x?}...)",
            out.len(),
            &out[..out.len().min(16)]
        ),
        Err(e) => format!("Err({e:?})"),
    };
    assert!(
        same(&got, &want),
        "host {}, model {}",
        brief(&got),
        brief(&want)
    );
    // The same input again: on the instance the first call left (reused after a success) the
    // memory it sees is the same, so the answer is too.
    let again = call(args);
    assert!(
        same(&again, &want),
        "second call: host {}, model {}",
        brief(&again),
        brief(&want)
    );
}
