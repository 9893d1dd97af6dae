#!/usr/bin/env node
// peer_bench.mjs - nucleus and llama.cpp on the same GGUF files, side by side.
//
// For each model it runs `nucleus bench` and llama.cpp's `llama-bench` with the
// same prompt length, generation length and thread count, alternating the two
// programs for --rounds rounds (so both see the same machine conditions), and
// prints medians of all repetitions, the ratios nucleus / llama.cpp, and the
// generation speed as a fraction of the memory-bandwidth ceiling
// (bandwidth / bytes of weights read per token). The bandwidth is either given
// (--membw GB/s) or measured right before every run of either program with
// ../shared/tools/membw.c built as --membw-bin (recommended: on a shared
// machine the bandwidth itself moves by tens of percent from minute to
// minute, so each run is set against the ceiling measured next to it).
// Bytes per token = file size minus the token-embedding table (only one of
// its rows is read per token unless it is also the output matrix).
//
// usage: node bench/peer_bench.mjs --llama-bench PATH [--nucleus PATH] [-t THREADS]
//          [-p N] [-n N] [-r REPS] [--rounds N] [--membw GB/s | --membw-bin PATH]
//          [--json] MODEL.gguf...
// llama-bench needs its shared libraries: LD_LIBRARY_PATH is set to its directory.
import { execFileSync } from 'node:child_process';
import { statSync } from 'node:fs';
import { dirname, basename, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));

function usage(msg) {
  if (msg) console.error(`peer_bench: ${msg}`);
  console.error('usage: node bench/peer_bench.mjs --llama-bench PATH [--nucleus PATH] [-t N] ' +
                '[-p N] [-n N] [-r REPS] [--rounds N] [--membw GB/s] [--json] MODEL.gguf...');
  process.exit(2);
}

function parseArgs(argv) {
  const o = { nucleus: resolve(here, '../build/nucleus'), llama: null, threads: 2, prompt: 512,
              gen: 128, reps: 3, rounds: 2, membw: 0, membwBin: null, json: false, models: [] };
  const num = (v, name) => {
    const x = Number(v);
    if (!Number.isFinite(x) || x < 0) usage(`${name} needs a non-negative number, got '${v}'`);
    return x;
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i], next = () => (i + 1 < argv.length ? argv[++i] : usage(`${a} needs a value`));
    if (a === '--nucleus') o.nucleus = next();
    else if (a === '--llama-bench') o.llama = next();
    else if (a === '-t' || a === '--threads') o.threads = num(next(), a);
    else if (a === '-p') o.prompt = num(next(), a);
    else if (a === '-n') o.gen = num(next(), a);
    else if (a === '-r' || a === '--reps') o.reps = num(next(), a);
    else if (a === '--rounds') o.rounds = num(next(), a);
    else if (a === '--membw') o.membw = num(next(), a);
    else if (a === '--membw-bin') o.membwBin = next();
    else if (a === '--json') o.json = true;
    else if (a.startsWith('-')) usage(`unknown option ${a}`);
    else o.models.push(a);
  }
  if (!o.llama) usage('--llama-bench PATH is required (see ../shared/peer/build_llama_server.sh)');
  if (!o.models.length) usage('no model given');
  if (o.reps < 1 || o.rounds < 1) usage('--reps and --rounds must be at least 1');
  return o;
}

const median = (v) => {
  const s = [...v].sort((a, b) => a - b), n = s.length;
  return n ? (n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2) : NaN;
};

// Tokens per second of each repetition, by test name (ppN / tgN).
function runNucleus(o, model) {
  const args = ['bench', '-m', model, '-t', String(o.threads), '-r', String(o.reps),
                '-p', String(o.prompt), '-n', String(o.gen), '--json'];
  const out = execFileSync(o.nucleus, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'],
                                              maxBuffer: 1 << 24 });
  const res = {};
  for (const line of out.split('\n')) {
    if (!line.trim().startsWith('{')) continue;
    const r = JSON.parse(line);
    // nucleus reports medians; weight them as reps equal samples of the median
    res[r.test] = (res[r.test] || []).concat(Array(r.reps).fill(r.median_tps));
  }
  return res;
}

function runLlama(o, model) {
  const args = ['-m', model, '-t', String(o.threads), '-r', String(o.reps), '-o', 'json'];
  const tests = [];
  if (o.prompt) tests.push(['-p', String(o.prompt), '-n', '0']);
  if (o.gen) tests.push(['-p', '0', '-n', String(o.gen)]);
  const res = {};
  const env = { ...process.env, LD_LIBRARY_PATH: dirname(o.llama) };
  for (const t of tests) {
    const out = execFileSync(o.llama, args.concat(t), { encoding: 'utf8', env,
                                                        stdio: ['ignore', 'pipe', 'pipe'],
                                                        maxBuffer: 1 << 24 });
    for (const r of JSON.parse(out)) {
      const name = r.n_prompt > 0 ? `pp${r.n_prompt}` : `tg${r.n_gen}`;
      res[name] = (res[name] || []).concat(r.samples_ts);
    }
  }
  return res;
}

// Read bandwidth in GB/s from membw.c's output ("read_bw_best=41.4 GB/s").
function measureBandwidth(o) {
  if (!o.membwBin) return o.membw;
  const out = execFileSync(o.membwBin, ['2048'], { encoding: 'utf8',
    env: { ...process.env, OMP_NUM_THREADS: String(o.threads) } });
  const m = out.match(/read_bw_best=([0-9.]+)/);
  if (!m) throw new Error(`cannot read the bandwidth from: ${out}`);
  return Number(m[1]);
}

// Bytes a generated token reads: every weight except the embedding table's
// other rows (a tied table is the output matrix too, read whole).
function bytesPerToken(model, fileBytes) {
  const info = execFileSync(resolve(here, '../build/nucleus'), ['info', '-m', model],
                            { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'],
                              maxBuffer: 1 << 26 });
  const emb = info.match(/^\s*token_embd\.weight\s+\S+\s+\[[^\]]*\]\s+([0-9]+)/m);
  const tied = !/^\s*output\.weight\s/m.test(info);
  return emb && !tied ? fileBytes - Number(emb[1]) : fileBytes;
}

// Runs one program's tests, each sample paired with the bandwidth measured
// just before: returns { test: [{ tps, bw }] }.
function withBandwidth(o, run) {
  const bw = measureBandwidth(o);
  const res = run();
  const out = {};
  for (const [k, v] of Object.entries(res)) out[k] = v.map((tps) => ({ tps, bw }));
  return out;
}

function merge(into, from) {
  for (const [k, v] of Object.entries(from)) into[k] = (into[k] || []).concat(v);
}

function main() {
  const o = parseArgs(process.argv.slice(2));
  const rows = [];
  for (const model of o.models) {
    const bytes = statSync(model).size;
    let perToken = bytes;
    try { perToken = bytesPerToken(model, bytes); } catch { /* older nucleus: whole file */ }
    const nu = {}, ll = {};
    const runNu = () => withBandwidth(o, () => runNucleus(o, model));
    const runLl = () => withBandwidth(o, () => runLlama(o, model));
    for (let round = 0; round < o.rounds; round++) {
      // alternate which program goes first, so neither always runs warmer
      if (round % 2 === 0) { merge(nu, runNu()); merge(ll, runLl()); }
      else { merge(ll, runLl()); merge(nu, runNu()); }
    }
    for (const test of [`pp${o.prompt}`, `tg${o.gen}`]) {
      if (!nu[test] || !ll[test]) continue;
      const n = median(nu[test].map((s) => s.tps)), l = median(ll[test].map((s) => s.tps));
      const row = { model: basename(model), bytes, bytes_per_token: perToken, test,
                    nucleus_tps: n, llama_tps: l, ratio: n / l,
                    samples: [nu[test].length, ll[test].length] };
      if (test.startsWith('tg') && (o.membw > 0 || o.membwBin)) {
        // each sample against the ceiling measured next to it
        const frac = (v) => median(v.map((s) => (s.tps * perToken) / (s.bw * 1e9)));
        row.bandwidth_gbps = median(nu[test].concat(ll[test]).map((s) => s.bw));
        row.nucleus_of_ceiling = frac(nu[test]);
        row.llama_of_ceiling = frac(ll[test]);
      }
      rows.push(row);
    }
  }
  if (o.json) {
    for (const r of rows) console.log(JSON.stringify(r));
    return;
  }
  const pct = (x) => (x === undefined ? '' : `${(100 * x).toFixed(1)}%`);
  console.log(`threads ${o.threads}, ${o.reps} reps x ${o.rounds} rounds, medians (tokens/s); ` +
              'ceiling = bandwidth / weight bytes read per token' +
              (o.membwBin ? ', bandwidth measured before every run' : ''));
  console.log('| model | MiB | test | nucleus | llama.cpp | ratio | GB/s | nucleus / ceiling | llama.cpp / ceiling |');
  console.log('|---|---:|---|---:|---:|---:|---:|---:|---:|');
  for (const r of rows)
    console.log(`| ${r.model} | ${(r.bytes / 1048576).toFixed(0)} | ${r.test} | ` +
                `${r.nucleus_tps.toFixed(2)} | ${r.llama_tps.toFixed(2)} | ${r.ratio.toFixed(2)}x | ` +
                `${r.bandwidth_gbps ? r.bandwidth_gbps.toFixed(1) : ''} | ` +
                `${pct(r.nucleus_of_ceiling)} | ${pct(r.llama_of_ceiling)} |`);
}

main();
