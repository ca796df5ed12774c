//! The host against hand-written modules (WebAssembly text): every limit and every way a
//! guest can misbehave, without depending on a Rust toolchain for wasm32.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use mnemo_filter::{input, FilterError, FilterHost, FilterKind, FilterSpec, InputSink, Limits};

/// A module exporting the ABI, whose `mnemo_filter` body is `body` (params $p $l, result i32:
/// the address of the result record). `extra` adds module fields.
fn module(body: &str, extra: &str) -> String {
    format!(
        r#"(module
  (memory (export "memory") 1)
  {extra}
  (func (export "mnemo_abi_version") (result i32) (i32.const 1))
  (func (export "mnemo_filter") (param $p i32) (param $l i32) (result i32)
    {body}))"#
    )
}

/// Writes a result record at address 0 and returns 0.
fn result(status: &str, flags: &str, ptr: &str, len: &str) -> String {
    format!(
        "(i32.store (i32.const 0) {status}) (i32.store (i32.const 4) {flags})
         (i32.store (i32.const 8) {ptr}) (i32.store (i32.const 12) {len}) (i32.const 0)"
    )
}

fn echo() -> String {
    module(
        &result(
            "(i32.const 0)",
            "(i32.const 7)",
            "(local.get $p)",
            "(local.get $l)",
        ),
        "",
    )
}

struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Dir {
        let d =
            std::env::temp_dir().join(format!("mnemo-filter-test-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn limits() -> Limits {
    // A deadline far above what these guests need: on a loaded machine a thread can be
    // preempted for milliseconds, and only the endless loop may time out.
    Limits {
        deadline: Duration::from_millis(200),
        memory: 4 << 20,
        output_max: 64 << 10,
        ..Limits::default()
    }
}

fn host(tag: &str, text: &str, limits: Limits) -> (Dir, FilterHost) {
    let dir = Dir::new(tag);
    let path = dir.write("f.wat", text);
    let host = FilterHost::new(
        limits,
        vec![FilterSpec {
            name: "f".into(),
            path,
            kind: FilterKind::Wasm,
        }],
    )
    .unwrap();
    (dir, host)
}

type Entries<'a> = &'a [Option<(u32, &'a [u8])>];

/// Feeds `entries` to a call: a value or a missing mark each.
fn filler<'a>(entries: Entries<'a>) -> impl FnMut(&mut dyn InputSink) + 'a {
    move |sink: &mut dyn InputSink| {
        for e in entries {
            match e {
                Some((flags, v)) => sink.value(*flags, v),
                None => sink.missing(),
            }
        }
    }
}

fn call(
    host: &FilterHost,
    args: &[u8],
    entries: Entries<'_>,
) -> Result<(u32, Vec<u8>), FilterError> {
    let f = host.get(b"f").expect("installed");
    let mut out = b"prefix".to_vec();
    let mut fill = filler(entries);
    let r = f.call(args, entries.len() as u32, &mut fill, &mut out);
    assert!(out.starts_with(b"prefix"), "earlier output untouched");
    match r {
        Ok(flags) => Ok((flags, out[6..].to_vec())),
        Err(e) => {
            assert_eq!(out, b"prefix", "nothing appended on error");
            Err(e)
        }
    }
}

#[test]
fn the_guest_sees_exactly_the_documented_layout() {
    let (_d, h) = host(
        "echo",
        &echo(),
        Limits {
            output_max: 1 << 20,
            ..limits()
        },
    );
    let entries: Entries<'_> = &[Some((3, b"abc")), None, Some((u32::MAX, b""))];
    let (flags, out) = call(&h, b"args!", entries).unwrap();
    assert_eq!(flags, 7);
    assert_eq!(out, input::encode(b"args!", entries));
    // A value spanning many pages arrives whole.
    let big = vec![0xabu8; 300_000];
    let (_, out) = call(&h, b"", &[Some((1, &big))]).unwrap();
    assert_eq!(out, input::encode(b"", &[Some((1, &big))]));
}

#[test]
fn endless_loop_times_out_within_the_deadline_and_the_next_call_works() {
    let text = module("(loop $l (br $l)) (i32.const 0)", "");
    let (_d, h) = host("loop", &text, limits());
    for _ in 0..3 {
        let t = Instant::now();
        assert!(matches!(call(&h, b"", &[]), Err(FilterError::Timeout)));
        // 200 ms deadline at 1 ms ticks; generous bound for a loaded machine.
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    }
    let s = h.totals();
    assert_eq!((s.calls, s.errors, s.timeouts), (3, 3, 3));
}

#[test]
fn memory_bomb_fails_with_out_of_memory() {
    // Grow one page at a time until refused, then trap as an allocator would.
    let body = "(block $done (loop $l (br_if $done (i32.eq (memory.grow (i32.const 1)) (i32.const -1))) (br $l)))
                unreachable";
    let (_d, h) = host("bomb", &module(body, ""), limits());
    assert!(matches!(call(&h, b"", &[]), Err(FilterError::OutOfMemory)));
    assert_eq!(h.totals().out_of_memory, 1);
}

#[test]
fn input_larger_than_the_memory_cap_is_refused() {
    let (_d, h) = host("biginput", &echo(), limits());
    let big = vec![1u8; 5 << 20];
    assert!(matches!(
        call(&h, b"", &[Some((0, &big))]),
        Err(FilterError::OutOfMemory)
    ));
    // A small one still goes through on the same filter.
    assert!(call(&h, b"", &[Some((0, b"x"))]).is_ok());
}

#[test]
fn trap_fails_only_that_call() {
    // Traps when the argument is "boom", echoes otherwise; state from a trapped call never leaks.
    let body = format!(
        "(if (i32.eq (i32.load8_u (i32.add (local.get $p) (i32.const 4))) (i32.const 98)) (then unreachable))
         {}",
        result("(i32.const 0)", "(i32.const 0)", "(local.get $p)", "(local.get $l)")
    );
    let (_d, h) = host("trap", &module(&body, ""), limits());
    assert!(matches!(call(&h, b"boom", &[]), Err(FilterError::Trapped)));
    assert!(call(&h, b"fine", &[]).is_ok());
}

#[test]
fn stack_overflow_is_a_trap() {
    let extra = "(func $r (param i32) (result i32) (i32.add (call $r (i32.add (local.get 0) (i32.const 1))) (i32.const 1)))";
    let (_d, h) = host(
        "stack",
        &module("(drop (call $r (i32.const 0))) (i32.const 0)", extra),
        limits(),
    );
    assert!(matches!(call(&h, b"", &[]), Err(FilterError::Trapped)));
}

#[test]
fn results_out_of_bounds_or_over_the_cap_are_refused() {
    let cases = [
        // Result record itself past the end of memory.
        (module("(i32.const -8)", ""), "bad"),
        // Output pointer past the end (the host grew memory for the input: far past it).
        (
            module(
                &result(
                    "(i32.const 0)",
                    "(i32.const 0)",
                    "(i32.const 0x7fff0000)",
                    "(i32.const 100)",
                ),
                "",
            ),
            "bad",
        ),
        // Length that wraps around the address space.
        (
            module(
                &result(
                    "(i32.const 0)",
                    "(i32.const 0)",
                    "(i32.const 16)",
                    "(i32.const -1)",
                ),
                "",
            ),
            "bad",
        ),
        // Unknown status.
        (
            module(
                &result(
                    "(i32.const 9)",
                    "(i32.const 0)",
                    "(i32.const 0)",
                    "(i32.const 0)",
                ),
                "",
            ),
            "bad",
        ),
        // In bounds, over the 64 KiB output cap (the memory has two pages).
        (
            module(
                &result(
                    "(i32.const 0)",
                    "(i32.const 0)",
                    "(i32.const 0)",
                    "(i32.const 70000)",
                ),
                "",
            )
            .replace(
                "(memory (export \"memory\") 1)",
                "(memory (export \"memory\") 2)",
            ),
            "large",
        ),
    ];
    for (i, (text, want)) in cases.iter().enumerate() {
        let (_d, h) = host(&format!("result{i}"), text, limits());
        let r = call(&h, b"", &[]);
        match *want {
            "bad" => assert!(matches!(r, Err(FilterError::BadResult)), "case {i}: {r:?}"),
            _ => assert!(
                matches!(r, Err(FilterError::OutputTooLarge)),
                "case {i}: {r:?}"
            ),
        }
    }
}

#[test]
fn a_filter_error_message_is_sanitized_and_bounded() {
    let msg = format!("bad \"argument\"\r\nSTORED{}", "x".repeat(500));
    let data = msg
        .bytes()
        .map(|b| format!("\\{b:02x}"))
        .collect::<String>();
    let text = module(
        &result(
            "(i32.const 1)",
            "(i32.const 0)",
            "(i32.const 64)",
            &format!("(i32.const {})", msg.len()),
        ),
        &format!("(data (i32.const 64) \"{data}\")"),
    );
    let (_d, h) = host("msg", &text, limits());
    match call(&h, b"", &[]) {
        Err(FilterError::Failed(m)) => {
            assert!(m.starts_with("bad \"argument\"??STORED"), "{m}");
            assert_eq!(m.len(), mnemo_filter::MESSAGE_MAX);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn modules_that_break_the_abi_do_not_load() {
    let cases = [
        ("garbage", "this is not wasm".to_string()),
        (
            "import",
            format!(
                "(module (import \"env\" \"f\" (func)) {})",
                &echo()["(module".len()..echo().len() - 1]
            ),
        ),
        (
            "noexport",
            "(module (memory (export \"memory\") 1))".to_string(),
        ),
        (
            "version",
            echo().replace("(i32.const 1))\n", "(i32.const 2))\n"),
        ),
        (
            "bigmem",
            echo().replace(
                "(memory (export \"memory\") 1)",
                "(memory (export \"memory\") 100)",
            ),
        ),
    ];
    for (tag, text) in cases {
        let dir = Dir::new(tag);
        let path = dir.write("f.wat", &text);
        let spec = FilterSpec {
            name: "f".into(),
            path,
            kind: FilterKind::Wasm,
        };
        let r = FilterHost::new(limits(), vec![spec]);
        assert!(r.is_err(), "{tag} loaded");
        let msg = r.err().unwrap().to_string();
        match tag {
            "import" => assert!(msg.contains("imports env::f"), "{msg}"),
            "version" => assert!(msg.contains("ABI version 2"), "{msg}"),
            "noexport" => assert!(msg.contains("mnemo_filter"), "{msg}"),
            _ => {}
        }
    }
}

#[test]
fn reload_swaps_good_filters_and_keeps_the_old_one_on_failure() {
    let dir = Dir::new("reload");
    let path = dir.write("f.wat", &echo());
    let spec = FilterSpec {
        name: "f".into(),
        path: path.clone(),
        kind: FilterKind::Wasm,
    };
    let h = FilterHost::new(limits(), vec![spec]).unwrap();
    let old = h.get(b"f").unwrap();
    assert_eq!(call(&h, b"", &[]).unwrap().0, 7);
    // A new version: flags 9.
    std::fs::write(&path, echo().replace("(i32.const 7)", "(i32.const 9)")).unwrap();
    assert!(h.reload().is_empty());
    assert_eq!(call(&h, b"", &[]).unwrap().0, 9);
    // A broken file: the reload reports it and the last good version keeps serving.
    std::fs::write(&path, "(module").unwrap();
    let failed = h.reload();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].0, "f");
    assert_eq!(call(&h, b"", &[]).unwrap().0, 9);
    // A caller holding the version it looked up before the reload finishes on it.
    let mut out = Vec::new();
    assert_eq!(old.call(b"", 0, &mut |_| {}, &mut out).unwrap(), 7);
    assert!(h.get(b"nope").is_none());
}

#[test]
fn concurrent_calls_beyond_the_idle_pool_are_all_served() {
    // More threads than Limits::concurrency, each calling repeatedly: instances are reused
    // or made, never shared, and every call sees exactly its own input.
    let (_d, h) = host(
        "conc",
        &echo(),
        Limits {
            concurrency: 2,
            ..limits()
        },
    );
    std::thread::scope(|s| {
        for t in 0..4u8 {
            let h = &h;
            s.spawn(move || {
                for i in 0..50u8 {
                    // Inputs of varying size move the input region around.
                    let v = vec![t ^ i; usize::from(i) * 997];
                    let (_, out) = call(h, &[t, i], &[Some((1, &v))]).unwrap();
                    assert_eq!(out, input::encode(&[t, i], &[Some((1, &v))]));
                }
            });
        }
    });
}

#[test]
fn a_reused_instance_keeps_serving_after_its_heap_grows_past_the_input_region() {
    // Each call grows the guest's memory by one page (as a heap would), so the next input no
    // longer sits at the top of memory and must move; the echo must stay exact.
    let body = format!(
        "(drop (memory.grow (i32.const 1))) {}",
        result(
            "(i32.const 0)",
            "(i32.const 0)",
            "(local.get $p)",
            "(local.get $l)"
        )
    );
    let (_d, h) = host(
        "regrow",
        &module(&body, ""),
        Limits {
            output_max: 1 << 20,
            ..limits()
        },
    );
    for i in 0..40usize {
        let v = vec![i as u8; (i % 7) * 40_000];
        let (_, out) = call(&h, b"", &[Some((0, &v))]).unwrap();
        assert_eq!(out, input::encode(b"", &[Some((0, &v))]), "call {i}");
    }
}

/// A call its caller answered as a timeout before it ended (the server's watchdog) counts as
/// that timeout, whatever its own result; one answered without running counts the same.
#[test]
fn a_call_answered_as_a_timeout_counts_as_one() {
    let (_d, h) = host("answered", &echo(), limits());
    let f = h.get(b"f").expect("installed");
    let mut out = Vec::new();
    let r = f.call_answered(b"x", 0, &mut |_| {}, &mut out, &|| false);
    assert_eq!(r.ok(), Some(7));
    let s = h.totals();
    assert_eq!(
        (s.calls, s.errors, s.timeouts),
        (1, 0, 0),
        "answered by itself: a success"
    );
    let r = f.call_answered(b"x", 0, &mut |_| {}, &mut out, &|| true);
    assert_eq!(
        r.ok(),
        Some(7),
        "the call's own result, for the caller to drop"
    );
    let s = h.totals();
    assert_eq!(
        (s.calls, s.errors, s.timeouts),
        (2, 1, 1),
        "the client got a timeout"
    );
    f.count_timeout();
    let s = h.totals();
    assert_eq!((s.calls, s.errors, s.timeouts), (3, 2, 2));
}

/// `call_brief` with the entries of `call`: None if it gave up.
fn call_brief(
    host: &FilterHost,
    args: &[u8],
    entries: Entries<'_>,
) -> Option<Result<(u32, Vec<u8>), FilterError>> {
    let f = host.get(b"f").expect("installed");
    let mut out = b"prefix".to_vec();
    let mut fill = filler(entries);
    let r = f.call_brief(args, entries.len() as u32, &mut fill, &mut out);
    if !matches!(r, Some(Ok(_))) {
        assert_eq!(out, b"prefix", "nothing appended unless answered");
    }
    r.map(|r| r.map(|flags| (flags, out[6..].to_vec())))
}

#[test]
fn a_brief_call_answers_as_a_full_one_or_gives_up_and_is_not_counted() {
    // A short call: the same answer either way, counted once each.
    let (_d, h) = host("brief-echo", &echo(), limits());
    let entries: Entries<'_> = &[Some((3, b"abc")), None];
    let brief = call_brief(&h, b"a", entries).expect("brief").unwrap();
    assert_eq!(brief, call(&h, b"a", entries).unwrap());
    assert_eq!(h.totals().calls, 2);

    // An endless loop gives up within a couple of epoch ticks, uncounted; for SLOW_HOLD the
    // filter is not tried briefly again; the full call still times out as ever.
    let text = module("(loop $l (br $l)) (i32.const 0)", "");
    let (_d, h) = host("brief-loop", &text, limits());
    let t = Instant::now();
    assert!(call_brief(&h, b"", &[]).is_none());
    // 1-2 ms of ticks; generous for a loaded machine, far under the 200 ms deadline.
    assert!(
        t.elapsed() < Duration::from_millis(100),
        "{:?}",
        t.elapsed()
    );
    let (spent, t) = (h.totals().usec, Instant::now());
    assert!(call_brief(&h, b"", &[]).is_none());
    if t.elapsed() < mnemo_filter::SLOW_HOLD_MIN {
        assert_eq!(h.totals().usec, spent, "held slow: not run at all");
    }
    assert!(matches!(call(&h, b"", &[]), Err(FilterError::Timeout)));
    let s = h.totals();
    assert_eq!((s.calls, s.timeouts), (1, 1));

    // The guest growing past BRIEF_GROWTH gives up, where the full call decides: out of
    // memory for a memory bomb. The input the host writes does not count: 2 MiB of it under
    // a 4 MiB cap is a brief call.
    let body = "(block $done (loop $l (br_if $done (i32.eq (memory.grow (i32.const 1)) (i32.const -1))) (br $l)))
                unreachable";
    let (_d, h) = host("brief-bomb", &module(body, ""), limits());
    assert!(call_brief(&h, b"", &[]).is_none());
    assert!(matches!(call(&h, b"", &[]), Err(FilterError::OutOfMemory)));
    let empty = module(
        &result(
            "(i32.const 0)",
            "(i32.const 0)",
            "(i32.const 0)",
            "(i32.const 0)",
        ),
        "",
    );
    let (_d, h) = host("brief-input", &empty, limits());
    let big = vec![1u8; 2 << 20];
    assert!(matches!(
        call_brief(&h, b"", &[Some((0, &big))]),
        Some(Ok(_))
    ));
    assert_eq!((h.totals().calls, h.totals().brief), (1, 1));
}
