// Checks the example filters built for wasm32 against the fget ABI, with node's own
// WebAssembly engine standing in for the host:
//   cargo build -p mnemo-filter-examples --examples --release --target wasm32-unknown-unknown
//   node crates/filter-sdk/scripts/check-wasm.mjs [target/wasm32-unknown-unknown/release/examples]
// Each module must import nothing (the host provides no imports) and export memory,
// mnemo_abi_version and mnemo_filter. Then each is called the way the host calls it: memory
// grown by the host, the input written into the new pages, the result record read back.
// Prints "N passed, M failed" and exits non-zero on a failure.

import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Worker, isMainThread, parentPort, workerData } from "node:worker_threads";
import v8 from "node:v8";

// A memory cap for every module, as the host has one (128 MiB: room for hostile_output's
// 64 MiB), so that hostile_memory fails its allocation instead of taking 4 GiB.
v8.setFlagsFromString("--wasm-max-mem-pages=2048");

const dir = process.argv[2] ?? "target/wasm32-unknown-unknown/release/examples";
const PAGE = 65536;

function encodeInput(args, entries) {
  const enc = new TextEncoder();
  const a = enc.encode(args);
  const parts = [u32(a.length), a, u32(entries.length)];
  for (const e of entries) {
    if (e === null) parts.push(u32(0), u32(0xffffffff));
    else parts.push(u32(e.flags ?? 0), u32(e.data.length), e.data);
  }
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) { out.set(p, at); at += p.length; }
  return out;
}

function u32(n) {
  const b = new Uint8Array(4);
  new DataView(b.buffer).setUint32(0, n, true);
  return b;
}

function records(list) {
  const b = new Uint8Array(24 * list.length);
  const v = new DataView(b.buffer);
  list.forEach(([user, article, ts], i) => {
    v.setBigUint64(24 * i, BigInt(user), true);
    v.setBigUint64(24 * i + 8, BigInt(article), true);
    v.setBigUint64(24 * i + 16, BigInt(ts), true);
  });
  return b;
}

function decode(bytes) {
  const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const out = [];
  for (let i = 0; i + 24 <= bytes.length; i += 24)
    out.push([v.getBigUint64(i, true), v.getBigUint64(i + 8, true), v.getBigUint64(i + 16, true)].map(Number));
  return out;
}

// One call as the host makes it, in a fresh instance. Returns {status, flags, data} or
// {bad: reason} when the result record or its bytes are out of bounds, or {trap: message}.
function call(module, args, entries) {
  const inst = new WebAssembly.Instance(module, {});
  const { memory, mnemo_filter, mnemo_abi_version } = inst.exports;
  if (mnemo_abi_version() !== 1) return { bad: "abi version " + mnemo_abi_version() };
  const input = encodeInput(args, entries);
  const at = memory.grow(Math.ceil((input.length || 1) / PAGE)) * PAGE;
  new Uint8Array(memory.buffer).set(input, at);
  let rec;
  try {
    rec = mnemo_filter(at, input.length) >>> 0;
  } catch (e) {
    return { trap: String(e) };
  }
  const size = memory.buffer.byteLength;
  if (rec % 4 !== 0 || rec + 16 > size) return { bad: "record at " + rec };
  const v = new DataView(memory.buffer);
  const [status, flags, ptr, len] = [0, 4, 8, 12].map((o) => v.getUint32(rec + o, true));
  if (ptr + len > size) return { bad: `bytes ${ptr}+${len} past ${size}` };
  return { status, flags, data: new Uint8Array(memory.buffer.slice(ptr, ptr + len)) };
}

if (!isMainThread) {
  // A worker runs one call that may never end; the main thread terminates it.
  const { path, args } = workerData;
  const module = new WebAssembly.Module(readFileSync(path));
  const r = call(module, args, []);
  parentPort.postMessage({ ...r, data: r.data ? r.data.length : undefined });
} else {
  await main();
}

function inWorker(path, args, ms) {
  return new Promise((resolve) => {
    const w = new Worker(new URL(import.meta.url), { workerData: { path, args } });
    const timer = setTimeout(() => { w.terminate(); resolve({ timeout: true }); }, ms);
    w.on("message", (m) => { clearTimeout(timer); w.terminate(); resolve(m); });
    w.on("error", (e) => { clearTimeout(timer); resolve({ trap: String(e) }); });
  });
}

async function main() {
  let passed = 0, failed = 0;
  const check = (name, ok, detail) => {
    if (ok) passed++;
    else { failed++; console.log(`FAIL ${name}: ${JSON.stringify(detail, (k, v) => (v instanceof Uint8Array ? `${v.length} bytes` : v))}`); }
  };
  const text = (r) => (r.data ? new TextDecoder().decode(r.data) : "");
  const mods = {};
  for (const name of ["topk", "select", "hostile_loop", "hostile_memory", "hostile_trap", "hostile_output", "hostile_stack"]) {
    const path = join(dir, name + ".wasm");
    const m = new WebAssembly.Module(readFileSync(path));
    mods[name] = { m, path };
    const imports = WebAssembly.Module.imports(m);
    check(`${name} imports nothing`, imports.length === 0, imports);
    const exports = Object.fromEntries(WebAssembly.Module.exports(m).map((e) => [e.name, e.kind]));
    check(`${name} exports`, exports.memory === "memory" && exports.mnemo_abi_version === "function" && exports.mnemo_filter === "function", exports);
  }

  // topk: against a plain sort, over values with a missing key and a partial trailing record.
  const all = [];
  for (let i = 0; i < 3000; i++) all.push([(i * 7919) % 13, (i * 104729) % 17, (i * 31) % 97]);
  const newest = [...all].sort((a, b) => b[2] - a[2] || a[0] - b[0] || a[1] - b[1]);
  const tail = new Uint8Array([...records(all.slice(1500)), 1, 2, 3]);
  const entries = [{ data: records(all.slice(0, 1500)), flags: 5 }, null, { data: tail }];
  for (const k of [1, 10, 2999, 3000, 100000]) {
    const r = call(mods.topk.m, String(k), entries);
    check(`topk ${k}`, r.status === 0 && r.flags === 0 && JSON.stringify(decode(r.data)) === JSON.stringify(newest.slice(0, k)), r);
  }
  for (const bad of ["", "0", "100001", "-1", " 5", "x"]) {
    const r = call(mods.topk.m, bad, entries);
    check(`topk bad ${JSON.stringify(bad)}`, r.status === 1 && text(r).startsWith("bad argument: "), r);
  }
  check("topk no keys", call(mods.topk.m, "5", []).data?.length === 0, {});
  const t0 = performance.now();
  const topkModule = mods.topk.m;
  for (let i = 0; i < 200; i++) call(topkModule, "10", entries);
  console.log(`topk K=10 over 3000 records: ${((performance.now() - t0) / 200 * 1000).toFixed(0)} us per call (instance included)`);

  // select
  for (const [arg, field, value] of [["user=3", 0, 3], ["article=16", 1, 16], ["ts=96", 2, 96], ["ts=1000", 2, 1000]]) {
    const r = call(mods.select.m, arg, entries);
    const want = all.filter((rec) => rec[field] === value);
    check(`select ${arg}`, r.status === 0 && JSON.stringify(decode(r.data)) === JSON.stringify(want), r);
  }
  for (const bad of ["", "user", "user=", "users=1", "user=1x", "ts=18446744073709551616"]) {
    const r = call(mods.select.m, bad, entries);
    check(`select bad ${JSON.stringify(bad)}`, r.status === 1 && text(r).startsWith("bad argument: "), r);
  }
  // A malformed input is reported, not trusted.
  {
    const inst = new WebAssembly.Instance(mods.select.m, {});
    const { memory, mnemo_filter } = inst.exports;
    const at = memory.grow(1) * PAGE;
    new Uint8Array(memory.buffer).set([9, 0, 0, 0, 1], at);
    const rec = mnemo_filter(at, 5);
    const v = new DataView(memory.buffer);
    const [status, , ptr, len] = [0, 4, 8, 12].map((o) => v.getUint32(rec + o, true));
    const msg = new TextDecoder().decode(new Uint8Array(memory.buffer, ptr, len));
    check("malformed input", status === 1 && msg.startsWith("bad input: "), { status, msg });
  }

  // Hostile ones.
  check("hostile_trap", /unreachable/.test(call(mods.hostile_trap.m, "", []).trap ?? ""), call(mods.hostile_trap.m, "", []));
  const stack = call(mods.hostile_stack.m, "", []);
  check("hostile_stack", stack.trap !== undefined, stack);
  check("hostile_loop", (await inWorker(mods.hostile_loop.path, "", 1000)).timeout === true, {});
  const huge = call(mods.hostile_output.m, "huge", []);
  check("hostile_output huge", huge.status === 0 && huge.data.length === 64 << 20 && huge.data.every((b) => b === 0x78), huge);
  for (const a of ["", "wrap", "record"]) {
    const r = call(mods.hostile_output.m, a, []);
    check(`hostile_output ${JSON.stringify(a)}`, r.bad !== undefined, r);
  }
  const hog = call(mods.hostile_memory.m, "", []);
  check("hostile_memory", /unreachable/.test(hog.trap ?? ""), hog);
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}
