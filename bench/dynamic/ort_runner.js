#!/usr/bin/env node
// ONNX Runtime (onnxruntime-node) side of bench/dynamic: loads MODEL.onnx with all graph
// optimizations, --threads intra-op threads, sequential execution, default CPU arena and
// memory patterns, and times session.run per input shape.
//
//   node ort_runner.js MODEL.onnx --threads N --shapes SHAPES.json [--warmup W] [--reps R]
//       SHAPES.json: [{"shapes": [[dims of input 0], ...], "dtypes": ["float32"|"int64:HIGH", ...]}, ...]
//       prints one JSON object: {"results": [{"times_ms": [...]}, ...], "vmhwm_kb", "vmrss_kb"}
//   node ort_runner.js MODEL.onnx --threads N           (serve: one JSON command a line on stdin)
//       {"cmd": "run", "shapes": [...], "dtypes": [...], "warmup": W, "reps": R, "seed": S,
//        "inputs": [raw little-endian files, optional], "out": "file for output 0, optional"}
//         -> {"ok": true, "times_ms": [...], "vmhwm_kb": K, "vmrss_kb": K}
//       {"cmd": "mem"} -> {"ok": true, "vmhwm_kb": K, "vmrss_kb": K};   {"cmd": "quit"}
//       a failure answers {"ok": false, "error": "..."} and the runner goes on.
// Only session.run is inside the timed region (process.hrtime.bigint); input data is made
// before it (seeded pseudo-random: ids uniform in [0, HIGH), floats standard normal).
'use strict';
const fs = require('fs');
const path = require('path');
const readline = require('readline');

function requireOrt() {
  const here = path.join(__dirname, '.node', 'node_modules', 'onnxruntime-node');
  try { return require(here); } catch (e) { return require('onnxruntime-node'); }
}

function procStatus() {
  const s = fs.readFileSync('/proc/self/status', 'utf8');
  const get = (k) => { const m = s.match(new RegExp('^' + k + ':\\s+(\\d+) kB', 'm')); return m ? Number(m[1]) : null; };
  return { vmhwm_kb: get('VmHWM'), vmrss_kb: get('VmRSS') };
}

function mulberry32(a) {
  return function () {
    a |= 0; a = a + 0x6D2B79F5 | 0;
    let t = Math.imul(a ^ a >>> 15, 1 | a);
    t = t + Math.imul(t ^ t >>> 7, 61 | t) ^ t;
    return ((t ^ t >>> 14) >>> 0) / 4294967296;
  };
}

function makeTensor(ort, dtype, dims, rand, file) {
  let n = 1;
  for (const d of dims) n *= d;
  if (dtype.startsWith('int64')) {
    let data;
    if (file) {
      const b = fs.readFileSync(file);
      data = new BigInt64Array(b.buffer, b.byteOffset, n);
    } else {
      const high = Number(dtype.split(':')[1] || 2);
      data = new BigInt64Array(n);
      for (let i = 0; i < n; i++) data[i] = BigInt(Math.floor(rand() * high));
    }
    return new ort.Tensor('int64', data, dims);
  }
  let data;
  if (file) {
    const b = fs.readFileSync(file);
    data = new Float32Array(b.buffer.slice(b.byteOffset, b.byteOffset + 4 * n));
  } else {
    data = new Float32Array(n);
    for (let i = 0; i < n; i += 2) {  // Box-Muller
      const u = Math.max(rand(), 1e-12), v = rand();
      const r = Math.sqrt(-2 * Math.log(u));
      data[i] = r * Math.cos(2 * Math.PI * v);
      if (i + 1 < n) data[i + 1] = r * Math.sin(2 * Math.PI * v);
    }
  }
  return new ort.Tensor('float32', data, dims);
}

async function runOne(ort, sess, req) {
  const rand = mulberry32((req.seed || 0) >>> 0);
  const feeds = {};
  sess.inputNames.forEach((name, i) => {
    feeds[name] = makeTensor(ort, (req.dtypes || [])[i] || 'float32', req.shapes[i], rand,
                             req.inputs ? req.inputs[i] : null);
  });
  const times = [];
  const warmup = req.warmup || 0, reps = req.reps === undefined ? 1 : req.reps;
  let out = null;
  for (let i = 0; i < warmup + reps; i++) {
    const t0 = process.hrtime.bigint();
    out = await sess.run(feeds);
    const t1 = process.hrtime.bigint();
    if (i >= warmup) times.push(Number(t1 - t0) / 1e6);
  }
  if (req.out && out) {
    const o = out[sess.outputNames[0]];
    fs.writeFileSync(req.out, Buffer.from(o.data.buffer, o.data.byteOffset, o.data.byteLength));
  }
  return Object.assign({ ok: true, times_ms: times }, procStatus());
}

async function main() {
  const argv = process.argv.slice(2);
  const opt = { threads: 1, warmup: 1, reps: 3, shapes: null };
  let model = null;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--threads') opt.threads = Number(argv[++i]);
    else if (a === '--warmup') opt.warmup = Number(argv[++i]);
    else if (a === '--reps') opt.reps = Number(argv[++i]);
    else if (a === '--shapes') opt.shapes = argv[++i];
    else if (!model) model = a;
    else throw new Error('unexpected argument ' + a);
  }
  if (!model) throw new Error('usage: node ort_runner.js MODEL.onnx --threads N [--shapes FILE]');
  const ort = requireOrt();
  const sess = await ort.InferenceSession.create(model, {
    graphOptimizationLevel: 'all',
    intraOpNumThreads: opt.threads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
  });
  const hello = Object.assign({ ok: true, ready: true, ort: ort.env.versions,
                                inputs: sess.inputNames, outputs: sess.outputNames }, procStatus());
  if (opt.shapes) {
    const list = JSON.parse(fs.readFileSync(opt.shapes, 'utf8'));
    const results = [];
    for (const r of list) {
      results.push(await runOne(ort, sess, Object.assign({ warmup: opt.warmup, reps: opt.reps }, r)));
    }
    process.stdout.write(JSON.stringify(Object.assign({ results, ort: hello.ort }, procStatus())) + '\n');
    return;
  }
  process.stdout.write(JSON.stringify(hello) + '\n');
  const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
  for await (const line of rl) {
    if (!line.trim()) continue;
    let reply;
    try {
      const req = JSON.parse(line);
      if (req.cmd === 'quit') break;
      if (req.cmd === 'mem') reply = Object.assign({ ok: true }, procStatus());
      else if (req.cmd === 'run') reply = await runOne(ort, sess, req);
      else reply = { ok: false, error: 'unknown cmd ' + req.cmd };
    } catch (e) {
      reply = { ok: false, error: String(e && e.message || e) };
    }
    process.stdout.write(JSON.stringify(reply) + '\n');
  }
  rl.close();
}

main().then(() => process.exit(0), (e) => {
  process.stdout.write(JSON.stringify({ ok: false, error: String(e && e.message || e) }) + '\n');
  process.exit(1);
});
