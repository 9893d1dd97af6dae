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
// minute, so each run is set against the ceiling measured next to it: before
// and after it, and only runs whose two readings agree count). For nucleus it
// also reports `nucleus bench --ceiling`: a plain read of the same weights
// after every generated token, in the same process, and generation's
// fraction of it token by token.
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

// One test ('pp' or 'tg') of nucleus: { tps: [per rep], ceiling } where
// ceiling is nucleus's own token-by-token fraction of a plain read of its
// weights (with --ceiling, generation only).
function runNucleus(o, model, test, ceiling) {
  const args = ['bench', '-m', model, '-t', String(o.threads), '-r', String(o.reps),
                '-p', test === 'pp' ? String(o.prompt) : '0',
                '-n', test === 'tg' ? String(o.gen) : '0', '--json'];
  if (ceiling) args.push('--ceiling');
  const out = execFileSync(o.nucleus, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'],
                                              maxBuffer: 1 << 24 });
  const res = { tps: [], ceiling: undefined, readGbps: undefined };
  for (const line of out.split('\n')) {
    if (!line.trim().startsWith('{')) continue;
    const r = JSON.parse(line);
    // nucleus reports medians; weight them as reps equal samples of the median
    res.tps = res.tps.concat(Array(r.reps).fill(r.median_tps));
    res.ceiling = r.ceiling_fraction;
    res.readGbps = r.read_gbps;
  }
  return res;
}

function runLlama(o, model, test) {
  const args = ['-m', model, '-t', String(o.threads), '-r', String(o.reps), '-o', 'json',
                '-p', test === 'pp' ? String(o.prompt) : '0',
                '-n', test === 'tg' ? String(o.gen) : '0'];
  const env = { ...process.env, LD_LIBRARY_PATH: dirname(o.llama) };
  const out = execFileSync(o.llama, args, { encoding: 'utf8', env, stdio: ['ignore', 'pipe', 'pipe'],
                                            maxBuffer: 1 << 24 });
  return { tps: JSON.parse(out).flatMap((r) => r.samples_ts) };
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

// Runs fn between two bandwidth readings (the reading after a run is the
// next run's reading before) and tags its samples with their mean and
// whether the two agreed within 15% (a steady run: the machine's bandwidth
// did not jump while it ran).
function bracketed(o, state, fn) {
  const before = state.bw ?? measureBandwidth(o);
  const res = fn();
  const after = (state.bw = measureBandwidth(o));
  const steady = Math.abs(before - after) <= 0.15 * Math.max(before, after);
  return { ...res, samples: res.tps.map((tps) => ({ tps, bw: (before + after) / 2, steady })) };
}

function main() {
  const o = parseArgs(process.argv.slice(2));
  const rows = [];
  for (const model of o.models) {
    const bytes = statSync(model).size;
    let perToken = bytes;
    try { perToken = bytesPerToken(model, bytes); } catch { /* older nucleus: whole file */ }
    const state = { bw: null };
    for (const test of ['pp', 'tg']) {
      const n = test === 'pp' ? o.prompt : o.gen;
      if (!n) continue;
      const nu = [], ll = [], own = [], paired = [];
      for (let round = 0; round < o.rounds; round++) {
        // alternate which program goes first, so neither always runs warmer
        let a, b;
        const runs = [() => { a = bracketed(o, state, () => runNucleus(o, model, test, false)).samples; },
                      () => { b = bracketed(o, state, () => runLlama(o, model, test)).samples; }];
        if (round % 2) runs.reverse();
        runs.forEach((r) => r());
        nu.push(...a);
        ll.push(...b);
        // the two runs of a round are next to each other in time: their ratio
        // sees (nearly) the same machine
        paired.push(median(a.map((s) => s.tps)) / median(b.map((s) => s.tps)));
        if (test === 'tg') own.push(runNucleus(o, model, test, true));
      }
      const name = `${test}${n}`;
      const tn = median(nu.map((s) => s.tps)), tl = median(ll.map((s) => s.tps));
      const row = { model: basename(model), bytes, bytes_per_token: perToken, test: name,
                    nucleus_tps: tn, llama_tps: tl, ratio: tn / tl,
                    paired_ratio: median(paired), paired_ratios: paired,
                    samples: [nu.length, ll.length] };
      if (test === 'tg' && (o.membw > 0 || o.membwBin)) {
        // each steady sample against the ceiling measured around it (all
        // samples if no run was steady)
        const pick = (v) => (v.some((s) => s.steady) ? v.filter((s) => s.steady) : v);
        const frac = (v) => median(pick(v).map((s) => (s.tps * perToken) / (s.bw * 1e9)));
        row.bandwidth_gbps = median(pick(nu.concat(ll)).map((s) => s.bw));
        row.nucleus_of_ceiling = frac(nu);
        row.llama_of_ceiling = frac(ll);
        row.steady_samples = [pick(nu).length, pick(ll).length];
      }
      if (test === 'tg') {
        row.nucleus_of_own_reads = median(own.map((r) => r.ceiling));
        row.own_read_gbps = median(own.map((r) => r.readGbps));
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
              (o.membwBin ? ', bandwidth measured before and after every run (steady runs: ' +
                            'the two within 15%)' : '') +
              '; own reads = nucleus bench --ceiling (a plain read of the weights after every token)');
  console.log('paired = median over rounds of the ratio of the round\'s two adjacent runs');
  console.log('| model | MiB | test | nucleus | llama.cpp | ratio | paired | GB/s | nucleus / ceiling | ' +
              'llama.cpp / ceiling | steady runs | nucleus / own reads (GB/s) |');
  console.log('|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
  for (const r of rows)
    console.log(`| ${r.model} | ${(r.bytes / 1048576).toFixed(0)} | ${r.test} | ` +
                `${r.nucleus_tps.toFixed(2)} | ${r.llama_tps.toFixed(2)} | ${r.ratio.toFixed(2)}x | ` +
                `${r.paired_ratio.toFixed(2)}x | ` +
                `${r.bandwidth_gbps ? r.bandwidth_gbps.toFixed(1) : ''} | ` +
                `${pct(r.nucleus_of_ceiling)} | ${pct(r.llama_of_ceiling)} | ` +
                `${r.steady_samples ? r.steady_samples.map((n) => n / o.reps).join(' / ') : ''} | ` +
                `${r.nucleus_of_own_reads === undefined ? '' : `${pct(r.nucleus_of_own_reads)} (${r.own_read_gbps.toFixed(1)})`} |`);
}

main();
