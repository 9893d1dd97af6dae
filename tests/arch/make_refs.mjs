#!/usr/bin/env node
// Pins a reference engine's greedy continuations of tiny random-weight models.
//
// For every case of tests/arch/cases.json this script
//   1. writes the model with its generator (../shared/tools/synth_gguf.py or tests/arch/tiny_gguf.py)
//      into a scratch directory (models never go into git),
//   2. records the file's sha256,
//   3. starts llama-server on it (settings below), and for each prompt (a token id array, so
//      tokenization plays no part) asks /completion for n_predict greedy tokens with the top-5
//      log-probs of every step,
//   4. writes tests/arch/refs/<case>.json.
//
// The log-probs are the pre-sampling distribution: log-softmax of the raw logits over the whole
// vocabulary (request field post_sampling_probs = false, the server's default; see README.md).
//
// Usage:
//   node tests/arch/make_refs.mjs [--only a,b] [--check] [--keep DIR]
//   node tests/arch/make_refs.mjs --model FILE --prompt 1,2,3 [--cache-type f16] [--n-predict N]
// Environment: NU_SHARED_DIR (default <repo>/../shared), LLAMA_BIN_DIR (default
// <repo>/../peer/llama.cpp-src/build/bin), LLAMA_SRC_DIR (default LLAMA_BIN_DIR/../..).
// --check regenerates every case and compares it with the committed JSON instead of writing it.
// Only the Node 20 standard library is used.

import { spawn, execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const REPO = path.resolve(HERE, '..', '..');
const SHARED = path.resolve(process.env.NU_SHARED_DIR || path.join(REPO, '..', 'shared'));
const BIN = path.resolve(process.env.LLAMA_BIN_DIR || path.join(REPO, '..', 'peer', 'llama.cpp-src', 'build', 'bin'));
const LLAMA_SRC = path.resolve(process.env.LLAMA_SRC_DIR || path.join(BIN, '..', '..'));
const NUCLEUS = path.resolve(process.env.NUCLEUS_BIN || path.join(REPO, 'build', 'nucleus'));

function die(msg) {
  process.stderr.write(`make_refs: ${msg}\n`);
  process.exit(1);
}

function parseArgs(argv) {
  const a = { only: null, check: false, keep: null, model: null, prompts: [], cacheType: 'f32', nPredict: null,
              cases: path.join(HERE, 'cases.json'), outDir: path.join(HERE, 'refs'), out: null };
  for (let i = 0; i < argv.length; i++) {
    const k = argv[i];
    const v = () => { if (i + 1 >= argv.length) die(`${k} needs a value`); return argv[++i]; };
    if (k === '--only') a.only = new Set(v().split(','));
    else if (k === '--check') a.check = true;
    else if (k === '--keep') a.keep = path.resolve(v());
    else if (k === '--cases') a.cases = path.resolve(v());
    else if (k === '--out-dir') a.outDir = path.resolve(v());
    else if (k === '--model') a.model = path.resolve(v());
    else if (k === '--prompt') a.prompts.push(v().split(',').map(Number));
    else if (k === '--cache-type') a.cacheType = v();
    else if (k === '--n-predict') a.nPredict = Number(v());
    else if (k === '--out') a.out = path.resolve(v());
    else die(`unknown argument ${k}`);
  }
  return a;
}

// ---------- GGUF metadata (header only) ----------
// Returns {kv: Map(key -> value), arrays keep their values}; tensors are not read.
function readGgufMeta(buf) {
  let o = 0;
  const u32 = () => { const v = buf.readUInt32LE(o); o += 4; return v; };
  const u64 = () => { const v = buf.readBigUInt64LE(o); o += 8; return Number(v); };
  const str = () => { const n = u64(); const s = buf.toString('utf8', o, o + n); o += n; return s; };
  const scalar = {
    0: () => buf.readUInt8(o++), 1: () => buf.readInt8(o++),
    2: () => { const v = buf.readUInt16LE(o); o += 2; return v; },
    3: () => { const v = buf.readInt16LE(o); o += 2; return v; },
    4: u32, 5: () => { const v = buf.readInt32LE(o); o += 4; return v; },
    6: () => { const v = buf.readFloatLE(o); o += 4; return v; },
    7: () => buf.readUInt8(o++) !== 0,
    10: u64, 11: () => { const v = buf.readBigInt64LE(o); o += 8; return Number(v); },
    12: () => { const v = buf.readDoubleLE(o); o += 8; return v; },
  };
  const val = (t) => {
    if (t === 8) return str();
    if (t === 9) {
      const et = u32(); const n = u64(); const out = new Array(n);
      for (let i = 0; i < n; i++) out[i] = val(et);
      return out;
    }
    if (!(t in scalar)) throw new Error(`GGUF value type ${t} unknown`);
    return scalar[t]();
  };
  if (buf.toString('latin1', 0, 4) !== 'GGUF') throw new Error('not a GGUF file');
  o = 4;
  const version = u32(); const nTensors = u64(); const nKv = u64();
  const kv = new Map();
  for (let i = 0; i < nKv; i++) { const k = str(); const t = u32(); kv.set(k, val(t)); }
  const tensors = [];
  for (let i = 0; i < nTensors; i++) {
    const name = str(); const nd = u32(); const ne = [];
    for (let d = 0; d < nd; d++) ne.push(u64());
    tensors.push({ name, ne, type: u32(), offset: u64() });
  }
  const align = kv.get('general.alignment') ?? 32;
  const dataStart = Math.ceil(o / align) * align;
  return { version, nTensors, kv, tensors, dataStart };
}

// ggml type id -> [elements per block, bytes per block], for the types the quantised cases use.
const BLOCKS = { 0: [1, 4], 1: [1, 2], 2: [32, 18], 3: [32, 20], 6: [32, 22], 7: [32, 24], 8: [32, 34],
                 10: [256, 84], 11: [256, 110], 12: [256, 144], 13: [256, 176], 14: [256, 210],
                 20: [32, 18], 23: [256, 136], 30: [1, 2], 39: [32, 17] };

// Each tensor's type and bytes, by name (the data only: padding and metadata left out).
function tensorData(file) {
  const buf = fs.readFileSync(file);
  const meta = readGgufMeta(buf);
  const out = new Map();
  for (const t of meta.tensors) {
    const [bs, bb] = BLOCKS[t.type] ?? die(`${file}: tensor ${t.name} of ggml type ${t.type} unknown here`);
    const n = t.ne.reduce((x, y) => x * y, 1);
    const start = meta.dataStart + t.offset;
    out.set(t.name, { type: t.type, bytes: buf.subarray(start, start + n / bs * bb) });
  }
  return out;
}

function sameTensorData(a, b) {
  const x = tensorData(a), y = tensorData(b), diffs = [];
  for (const [name, t] of x) {
    const u = y.get(name);
    if (!u) diffs.push(`${name} missing`);
    else if (u.type !== t.type) diffs.push(`${name}: type ${t.type} vs ${u.type}`);
    else if (!u.bytes.equals(t.bytes)) diffs.push(`${name}: bytes differ`);
  }
  if (y.size !== x.size) diffs.push(`${x.size} vs ${y.size} tensors`);
  return diffs;
}

// ---------- llama-server ----------
function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => resolve(p)); });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// The server settings every reference is made with (recorded in each JSON).
function serverArgs(model, port, ctx, cacheType) {
  return ['-m', model, '--host', '127.0.0.1', '--port', String(port),
          '-fa', 'off', '--cache-type-k', cacheType, '--cache-type-v', cacheType,
          '-t', '2', '-tb', '2', '-np', '1', '-c', String(ctx),
          '--no-cache-prompt', '--cache-ram', '0', '--ctx-checkpoints', '0', '--swa-full',
          '--no-warmup', '--no-webui', '-fit', 'off', '-lv', '4'];
}

async function startServer(model, ctx, cacheType) {
  const port = await freePort();
  const args = serverArgs(model, port, ctx, cacheType);
  const exe = path.join(BIN, 'llama-server');
  if (!fs.existsSync(exe)) die(`no llama-server at ${exe} (set LLAMA_BIN_DIR)`);
  const env = { ...process.env, LD_LIBRARY_PATH: BIN + (process.env.LD_LIBRARY_PATH ? ':' + process.env.LD_LIBRARY_PATH : '') };
  const child = spawn(exe, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  child.stdout.on('data', (d) => { log += d; });
  child.stderr.on('data', (d) => { log += d; });
  let exited = null;
  child.on('exit', (code, sig) => { exited = { code, sig }; });
  const base = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 600; i++) {
    if (exited) return { error: `llama-server exited (${exited.code ?? exited.sig}) before it was ready`, log };
    try {
      const r = await fetch(`${base}/health`);
      if (r.status === 200) return { child, base, log: () => log, args: ['-m', 'MODEL', ...args.slice(6)], exitedRef: () => exited };
    } catch { /* not listening yet */ }
    await sleep(100);
  }
  child.kill('SIGKILL');
  return { error: 'llama-server not ready after 60 s', log };
}

async function stopServer(srv) {
  if (!srv.child || srv.exitedRef()) return;
  srv.child.kill('SIGTERM');
  for (let i = 0; i < 100 && !srv.exitedRef(); i++) await sleep(50);
  if (!srv.exitedRef()) srv.child.kill('SIGKILL');
}

const REQUEST = {
  temperature: 0, n_probs: 5, post_sampling_probs: false, return_tokens: true, ignore_eos: true,
  cache_prompt: false, stream: false, seed: 1,
  top_k: 40, top_p: 0.95, min_p: 0.05, repeat_penalty: 1.0, presence_penalty: 0.0, frequency_penalty: 0.0,
  dry_multiplier: 0.0,
};

async function request(base, prompt, nPredict, extra = {}) {
  const body = { ...REQUEST, ...extra, prompt, n_predict: nPredict };
  const r = await fetch(`${base}/completion`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body),
  });
  const text = await r.text();
  if (r.status !== 200) throw new Error(`/completion ${r.status}: ${text.slice(0, 500)}`);
  return JSON.parse(text);
}

// ---------- token pieces, to know which steps the server reports ----------
// The server attaches log-probs to a generated token only when the text generated so far does
// not end inside a UTF-8 sequence (server-context.cpp: process_token, validate_utf8); tokens that
// leave a multi-byte character open (byte tokens, partial byte-level BPE pieces) get none. To
// find those steps we render each token's bytes as the server does (special tokens render empty).
function byteLevelDecoder() {
  const bs = [];
  for (let b = 33; b <= 126; b++) bs.push(b);
  for (let b = 161; b <= 172; b++) bs.push(b);
  for (let b = 174; b <= 255; b++) bs.push(b);
  const map = new Map();
  let n = 0;
  for (let b = 0; b < 256; b++) {
    if (bs.includes(b)) map.set(String.fromCodePoint(b), b);
    else map.set(String.fromCodePoint(256 + n++), b);
  }
  return (text) => {
    const out = [];
    for (const ch of text) {
      if (map.has(ch)) out.push(map.get(ch));
      else out.push(...Buffer.from(ch, 'utf8'));
    }
    return Buffer.from(out);
  };
}

function pieceRenderer(meta) {
  const tokens = meta.kv.get('tokenizer.ggml.tokens');
  const types = meta.kv.get('tokenizer.ggml.token_type') || [];
  const model = meta.kv.get('tokenizer.ggml.model');
  const pre = meta.kv.get('tokenizer.ggml.pre') || '';
  const escaped = model === 'llama' || model === 'gemma4' || pre === 'gemma4';
  const byteLevel = byteLevelDecoder();
  return (id) => {
    const t = types[id] ?? 1;
    const text = tokens[id];
    if (t === 6) { const m = /^<0x([0-9A-Fa-f]{2})>$/.exec(text); return Buffer.from([m ? parseInt(m[1], 16) : 0]); }
    if (t === 4) return Buffer.from(text, 'utf8');
    if (t !== 1) return Buffer.alloc(0);
    return escaped ? Buffer.from(text.replaceAll('\u2581', ' '), 'utf8') : byteLevel(text);
  };
}

// server-common.cpp validate_utf8: does the text end inside a multi-byte sequence?
function endsIncomplete(bytes) {
  const len = bytes.length;
  for (let i = 1; i <= 4 && i <= len; i++) {
    const c = bytes[len - i];
    if ((c & 0xE0) === 0xC0) { if (i < 2) return true; }
    else if ((c & 0xF0) === 0xE0) { if (i < 3) return true; }
    else if ((c & 0xF8) === 0xF0) { if (i < 4) return true; }
  }
  return false;
}

function stepOf(p, id) {
  if (!Array.isArray(p.top_logprobs) || p.top_logprobs.length !== 5) throw new Error('no top-5 log-probs');
  const top = p.top_logprobs.map((t) => [t.id, t.logprob]);
  const hit = top.find((t) => t[0] === id);
  return { id, logprob: p.id === id ? p.logprob : (hit ? hit[1] : null), top };
}

// Greedy generation with the top-5 log-probs of every step. Steps the server leaves without
// log-probs are recomputed by a one-token request on prompt + the tokens generated before them,
// with a logit bias that makes the server emit a plain ASCII token (so it reports the step); the
// bias acts on the sampler only, the reported log-probs are still those of the raw logits.
async function generateWithProbs(base, prompt, nPredict, piece, safeId) {
  const j = await request(base, prompt, nPredict);
  const gen = j.tokens;
  if (!Array.isArray(gen) || gen.length !== nPredict) throw new Error(`expected ${nPredict} tokens, got ${gen && gen.length}`);
  const probs = j.completion_probabilities || [];
  let text = Buffer.alloc(0);
  let kept = gen.map((id) => { text = Buffer.concat([text, piece(id)]); return !endsIncomplete(text); });
  const keptIds = gen.filter((_, i) => kept[i]);
  if (keptIds.length !== probs.length || keptIds.some((id, i) => probs[i].id !== id)) {
    process.stderr.write(`  (could not align the server's log-probs with the tokens; recomputing every step)\n`);
    kept = gen.map(() => false);
  }
  const steps = [];
  let k = 0;
  for (let i = 0; i < gen.length; i++) {
    if (kept[i]) { steps.push(stepOf(probs[k++], gen[i])); continue; }
    const f = await request(base, [...prompt, ...gen.slice(0, i)], 1, { logit_bias: [[safeId, 1000]] });
    const p = (f.completion_probabilities || [])[0];
    if (!p || p.id !== safeId) throw new Error(`step ${i}: the one-token request did not report the step`);
    steps.push({ ...stepOf(p, gen[i]), prefill: true });
  }
  return { steps, tokensEvaluated: j.tokens_evaluated };
}

// ---------- one case ----------
function sha256(buf) { return createHash('sha256').update(buf).digest('hex'); }

function expandArgs(args, out) {
  return args.map((s) => s.replaceAll('{shared}', SHARED).replaceAll('{out}', out).replaceAll('{here}', HERE));
}

function generate(c, dir) {
  const out = path.join(dir, `${c.name}${c.quantize ? '.base' : ''}.gguf`);
  const script = c.generator === 'synth_gguf' ? path.join(SHARED, 'tools', 'synth_gguf.py')
               : c.generator === 'tiny_gguf' ? path.join(HERE, 'tiny_gguf.py') : null;
  if (!script) die(`${c.name}: unknown generator '${c.generator}'`);
  execFileSync('python3', [script, ...expandArgs(c.args, out)], { stdio: ['ignore', 'ignore', 'inherit'] });
  return out;
}

// A quantised case ("quantize": {"type": "q4_0"}): the generated F32 model is written again with
// every matrix in that type by `nucleus quantize --pure` (what the test does to get the same file)
// and by llama.cpp's `llama-quantize --pure` (no importance matrix); the reference is computed on
// nucleus's file, and whether the two tools wrote the same tensor bytes is recorded.
// With "file": "tests/arch/quantized/X.gguf" the reference is computed on llama-quantize's own
// file instead, which is committed at that path (the test reads it; it cannot run llama-quantize):
// written there, or with --check compared with the committed bytes.
function quantize(c, base, dir, check) {
  const type = c.quantize.type;
  const ours = path.join(dir, `${c.name}.gguf`), theirs = path.join(dir, `${c.name}.llama-quantize.gguf`);
  if (!fs.existsSync(NUCLEUS)) die(`no nucleus at ${NUCLEUS} (set NUCLEUS_BIN)`);
  execFileSync(NUCLEUS, ['quantize', '--pure', base, ours, type], { stdio: ['ignore', 'ignore', 'inherit'] });
  const env = { ...process.env, LD_LIBRARY_PATH: BIN };
  execFileSync(path.join(BIN, 'llama-quantize'), ['--pure', base, theirs, type.toUpperCase()],
               { stdio: ['ignore', 'ignore', 'ignore'], env });
  const diffs = sameTensorData(ours, theirs);
  const q = { file: ours, baseSha: sha256(fs.readFileSync(base)), identical: diffs.length === 0,
              differences: diffs.length, firstDifference: diffs[0] ?? null };
  if (c.quantize.file) {
    const committed = path.join(REPO, c.quantize.file);
    const bytes = fs.readFileSync(theirs);
    if (check) {
      if (!fs.existsSync(committed) || !fs.readFileSync(committed).equals(bytes))
        q.fileDiffers = `${c.quantize.file} differs from what llama-quantize writes now`;
    } else {
      fs.mkdirSync(path.dirname(committed), { recursive: true });
      fs.writeFileSync(committed, bytes);
    }
    fs.rmSync(ours, { force: true });
    fs.renameSync(theirs, ours);  // the reference runs on llama-quantize's file
  } else {
    fs.rmSync(theirs, { force: true });
  }
  return q;
}

function commitOf(dir) {
  try { return execFileSync('git', ['-C', dir, 'rev-parse', 'HEAD'], { encoding: 'utf8' }).trim(); }
  catch { return 'unknown'; }
}

function eogIds(log) {
  const ids = new Set();
  for (const m of log.matchAll(/EOG token\s+=\s+(\d+)/g)) ids.add(Number(m[1]));
  return [...ids].sort((a, b) => a - b);
}

async function runModel({ name, model, prompts, nPredict, ctx, cacheType }) {
  const buf = fs.readFileSync(model);
  const meta = readGgufMeta(buf);
  const arch = meta.kv.get('general.architecture');
  const tokens = meta.kv.get('tokenizer.ggml.tokens');
  const addBos = meta.kv.get('tokenizer.ggml.add_bos_token') === true;
  const bos = meta.kv.get('tokenizer.ggml.bos_token_id');
  const fed = prompts.map((p) => (addBos ? [bos, ...p] : [...p]));
  for (const p of fed) for (const t of p) if (!(t >= 0 && t < tokens.length)) throw new Error(`${name}: prompt token ${t} outside the vocabulary (${tokens.length})`);
  const piece = pieceRenderer(meta);
  const types = meta.kv.get('tokenizer.ggml.token_type') || [];
  let safeId = -1;
  for (let id = 0; id < tokens.length && safeId < 0; id++) {
    if ((types[id] ?? 1) === 1 && /^[A-Za-z]{2,}$/.test(piece(id).toString('latin1'))) safeId = id;
  }
  if (safeId < 0) throw new Error(`${name}: no plain ASCII token in the vocabulary`);
  const srv = await startServer(model, ctx, cacheType);
  if (srv.error) return { refused: srv.error, log: srv.log };
  const results = [];
  try {
    for (const p of fed) results.push(await generateWithProbs(srv.base, p, nPredict, piece, safeId));
  } catch (e) {
    const log = srv.log();
    await stopServer(srv);
    return { refused: String(e.message || e), log };
  }
  const log = srv.log();
  await stopServer(srv);
  return { arch, sha: sha256(buf), size: buf.length, nVocab: tokens.length, addBos, bos, fed, results,
           eog: eogIds(log), serverArgs: srv.args };
}

// A step whose two best tokens are closer than this (in log-prob) is a near tie: an engine whose
// logits differ by float rounding may pick the other token there, and every later step differs.
const NEAR_TIE = 0.005;

function describePrompt(tokens, r) {
  let minGap = Infinity, minGapStep = -1, notTop1 = [];
  r.steps.forEach((s, i) => {
    const gap = s.top[0][1] - s.top[1][1];
    if (gap < minGap) { minGap = gap; minGapStep = i; }
    if (s.top[0][0] !== s.id) notTop1.push(i);
  });
  return {
    prompt_tokens: tokens,
    n_prompt: tokens.length,
    n_generated: r.steps.length,
    tokens_evaluated: r.tokensEvaluated,
    generated_ids: r.steps.map((s) => s.id),
    min_top1_top2_gap: { step: minGapStep, gap: Number(minGap.toFixed(6)) },
    near_ties: r.steps.map((s, i) => (s.top[0][1] - s.top[1][1] < NEAR_TIE ? i : -1)).filter((i) => i >= 0),
    steps_where_chosen_is_not_top1: notTop1,
    steps_from_prefill: r.steps.map((s, i) => (s.prefill ? i : -1)).filter((i) => i >= 0),
    steps: r.steps,
  };
}

// JSON with one step per line and number arrays on one line: small diffs, readable.
function inline(v) {
  if (Array.isArray(v)) return `[${v.map(inline).join(', ')}]`;
  if (v && typeof v === 'object') return `{${Object.entries(v).map(([k, x]) => `${JSON.stringify(k)}: ${inline(x)}`).join(', ')}}`;
  return JSON.stringify(v);
}

function flat(v) {
  return Array.isArray(v) ? v.every((x) => typeof x !== 'object' || x === null || flat(x)) : false;
}

function pretty(v, ind = '') {
  const next = ind + ' ';
  if (Array.isArray(v)) {
    if (flat(v) && v.every((x) => typeof x !== 'string')) return inline(v);
    if (v.every((x) => typeof x === 'string') && inline(v).length < 400) return inline(v);
    if (!v.length) return '[]';
    return `[\n${v.map((x) => next + pretty(x, next)).join(',\n')}\n${ind}]`;
  }
  if (v && typeof v === 'object') {
    if ('top' in v) return inline(v);
    const e = Object.entries(v);
    if (!e.length) return '{}';
    return `{\n${e.map(([k, x]) => `${next}${JSON.stringify(k)}: ${pretty(x, next)}`).join(',\n')}\n${ind}}`;
  }
  return JSON.stringify(v);
}

function stringify(obj) { return pretty(obj) + '\n'; }

function refJson(c, run, commit, defaults) {
  const rel = (s) => s.replaceAll('{shared}', '../shared').replaceAll('{here}', 'tests/arch');
  return {
    case: c.name,
    description: c.description,
    model: {
      generator: c.generator === 'synth_gguf' ? '../shared/tools/synth_gguf.py' : 'tests/arch/tiny_gguf.py',
      args: c.args.map(rel),
      sha256: run.sha,
      bytes: run.size,
      architecture: run.arch,
      n_vocab: run.nVocab,
      add_bos_token: run.addBos,
      bos_token_id: run.addBos ? run.bos : null,
    },
    ...(run.quant ? { quantized: c.quantize.file ? {
      type: c.quantize.type,
      file: c.quantize.file,
      how: `llama-quantize --pure BASE ${c.quantize.file} ${c.quantize.type.toUpperCase()} (no importance matrix), llama.cpp ${commit}; the file is committed (the test cannot run llama-quantize) and model.sha256 is its sha256, base_sha256 the generator's F32 file's`,
      base_sha256: run.quant.baseSha,
      nucleus_quantize: `nucleus quantize --pure BASE OUT ${c.quantize.type}`,
      tensor_data_identical_to_nucleus_quantize: run.quant.identical,
      ...(run.quant.identical ? {} : { tensors_that_differ: run.quant.differences }),
    } : {
      type: c.quantize.type,
      how: `nucleus quantize --pure BASE OUT ${c.quantize.type} (the test does the same); model.sha256 is that file's, base_sha256 the generator's F32 file's`,
      base_sha256: run.quant.baseSha,
      tensor_data_identical_to_llama_quantize: run.quant.identical,
      llama_quantize: `llama-quantize --pure BASE OUT ${c.quantize.type.toUpperCase()} (no importance matrix)`,
      ...(run.quant.identical ? {} : { tensors_that_differ: run.quant.differences }),
    } } : {}),
    reference_engine: {
      project: 'llama.cpp',
      commit,
      binary: 'llama-server (native CPU build)',
      server_args: run.serverArgs,
      request: { ...REQUEST, n_predict: c.n_predict ?? defaults.n_predict, prompt: '<token id array, below>' },
    },
    notes: [
      'prompt_tokens are exactly the tokens the model saw (a token array prompt gets no BOS from the server; BOS is included here when the file says add_bos_token).',
      'Each step: id = the token generated (greedy), logprob = its log-probability, top = the 5 most likely [id, logprob] pairs, highest first.',
      'Log-probs are pre-sampling: log of the softmax of the raw logits over the whole vocabulary (post_sampling_probs false; server get_token_probabilities). They are float32 values printed by the server.',
      'ignore_eos puts a -inf logit bias on every end-of-generation token (eog_token_ids) for the sampler only, so the generated token is the argmax over the other tokens; the log-probs still include EOG tokens. steps_where_chosen_is_not_top1 lists steps where this mattered.',
      `near_ties lists the steps whose top-1 and top-2 log-probs are closer than ${NEAR_TIE}: there an engine with slightly different rounding may pick the other token, and the continuation after it then differs.`,
      'KV cache f32 (unless stated otherwise), flash attention off, 2 threads, one slot; the prompt is evaluated in one batch, then one token per batch.',
      'The server reports no log-probs for a token that leaves a UTF-8 character open (byte tokens, partial byte-level pieces). Those steps (steps_from_prefill, marked "prefill": true) were recomputed by a one-token request on prompt + the tokens generated before them, evaluated as one batch, with a logit bias on an unrelated ASCII token so that the server reports the step; a logit bias does not change the reported log-probs. Their values come from a prefill pass instead of a one-token decode pass (differences are float rounding).',
    ],
    eog_token_ids: run.eog,
    prompts: run.fed.map((p, i) => describePrompt(p, run.results[i])),
  };
}

function compareRefs(a, b) {
  // Same tokens, log-probs equal to the printed precision.
  const diffs = [];
  if (a.model.sha256 !== b.model.sha256) diffs.push(`sha256 ${a.model.sha256} != ${b.model.sha256}`);
  a.prompts.forEach((p, i) => {
    const q = b.prompts[i];
    if (!q) { diffs.push(`prompt ${i} missing`); return; }
    if (JSON.stringify(p.steps) !== JSON.stringify(q.steps)) diffs.push(`prompt ${i}: steps differ`);
  });
  return diffs;
}

async function main() {
  const a = parseArgs(process.argv.slice(2));
  const commit = commitOf(LLAMA_SRC);
  if (a.model) {  // ad hoc: one model file, prompts from the command line
    if (!a.prompts.length) die('--model needs at least one --prompt');
    const run = await runModel({ name: path.basename(a.model), model: a.model, prompts: a.prompts,
                                 nPredict: a.nPredict ?? 32, ctx: 2048, cacheType: a.cacheType });
    if (run.refused) die(`${a.model}: ${run.refused}\n${run.log.split('\n').slice(-30).join('\n')}`);
    const c = { name: path.basename(a.model, '.gguf'), description: 'ad hoc run', generator: 'file', args: [a.model], n_predict: a.nPredict ?? 32 };
    const j = refJson(c, run, commit, { n_predict: 32 });
    j.model.generator = 'none (existing file)';
    j.reference_engine.server_args = run.serverArgs;
    const s = stringify(j);
    if (a.out) fs.writeFileSync(a.out, s); else process.stdout.write(s);
    return;
  }
  const spec = JSON.parse(fs.readFileSync(a.cases, 'utf8'));
  const defaults = spec.defaults;
  const tmp = a.keep || fs.mkdtempSync(path.join(os.tmpdir(), 'archrefs-'));
  fs.mkdirSync(tmp, { recursive: true });
  fs.mkdirSync(a.outDir, { recursive: true });
  const summary = { written: [], same: [], differ: [], refused: [] };
  for (const c of spec.cases) {
    if (a.only && !a.only.has(c.name)) continue;
    const t0 = Date.now();
    let model;
    let quant = null;
    try {
      model = generate(c, tmp);
      if (c.quantize) {
        const base = model;
        quant = quantize(c, base, tmp, a.check);
        if (!a.keep) fs.rmSync(base, { force: true });
        model = quant.file;
      }
    } catch (e) { summary.refused.push([c.name, `generator failed: ${e.message}`]); continue; }
    const prompts = spec.prompt_sets[c.prompts];
    if (!prompts) die(`${c.name}: no prompt set '${c.prompts}'`);
    const run = await runModel({ name: c.name, model, prompts, nPredict: c.n_predict ?? defaults.n_predict,
                                 ctx: c.ctx ?? defaults.ctx, cacheType: 'f32' });
    if (!a.keep) fs.rmSync(model, { force: true });
    if (run.refused) {
      const tail = run.log.split('\n').filter((l) => /error|fail|abort|assert|exception/i.test(l)).slice(-8).join('\n');
      summary.refused.push([c.name, `${run.refused}\n${tail}`]);
      process.stderr.write(`${c.name}: REFUSED ${run.refused}\n${tail}\n`);
      continue;
    }
    run.quant = quant;
    const j = refJson(c, run, commit, defaults);
    const file = path.join(a.outDir, `${c.name}.json`);
    if (a.check) {
      if (!fs.existsSync(file)) { summary.differ.push([c.name, 'no committed reference']); continue; }
      const d = compareRefs(JSON.parse(fs.readFileSync(file, 'utf8')), j);
      if (quant && quant.fileDiffers) d.push(quant.fileDiffers);
      (d.length ? summary.differ : summary.same).push(d.length ? [c.name, d.join('; ')] : c.name);
    } else {
      fs.writeFileSync(file, stringify(j));
      summary.written.push(c.name);
    }
    const gaps = j.prompts.map((p) => p.min_top1_top2_gap.gap).join(', ');
    process.stderr.write(`${c.name}: ${run.arch} sha ${run.sha.slice(0, 12)} ${((Date.now() - t0) / 1000).toFixed(1)} s; min top1-top2 gaps ${gaps}\n`);
  }
  if (!a.keep) fs.rmSync(tmp, { recursive: true, force: true });
  process.stdout.write(JSON.stringify(summary, null, 1) + '\n');
  if (summary.differ.length) process.exitCode = 1;
}

main().catch((e) => die(e.stack || String(e)));
