#!/usr/bin/env node
// peer_bench.mjs - nucleus and llama.cpp on the same GGUF files, side by side.
//
// For each model it runs `nucleus bench` and llama.cpp's `llama-bench` with the
// same prompt length, generation length and thread count, alternating the two
// programs for --rounds rounds (so both see the same machine conditions), and
// prints medians of all repetitions, the ratios nucleus / llama.cpp, and the
// generation speed as a fraction of the memory-bandwidth ceiling
// (bandwidth / bytes of weights read per token) when --membw is given.
//
// usage: node bench/peer_bench.mjs --llama-bench PATH [--nucleus PATH] [-t THREADS]
//          [-p N] [-n N] [-r REPS] [--rounds N] [--membw GB/s] [--json] MODEL.gguf...
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
              gen: 128, reps: 3, rounds: 2, membw: 0, json: false, models: [] };
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

function merge(into, from) {
  for (const [k, v] of Object.entries(from)) into[k] = (into[k] || []).concat(v);
}

function main() {
  const o = parseArgs(process.argv.slice(2));
  const rows = [];
  for (const model of o.models) {
    const bytes = statSync(model).size;
    const nu = {}, ll = {};
    for (let round = 0; round < o.rounds; round++) {
      // alternate which program goes first, so neither always runs warmer
      if (round % 2 === 0) { merge(nu, runNucleus(o, model)); merge(ll, runLlama(o, model)); }
      else { merge(ll, runLlama(o, model)); merge(nu, runNucleus(o, model)); }
    }
    for (const test of [`pp${o.prompt}`, `tg${o.gen}`]) {
      if (!nu[test] || !ll[test]) continue;
      const n = median(nu[test]), l = median(ll[test]);
      const row = { model: basename(model), bytes, test, nucleus_tps: n, llama_tps: l,
                    ratio: n / l, samples: [nu[test].length, ll[test].length] };
      if (test.startsWith('tg') && o.membw > 0) {
        const ceiling = (o.membw * 1e9) / bytes;
        row.ceiling_tps = ceiling;
        row.nucleus_of_ceiling = n / ceiling;
        row.llama_of_ceiling = l / ceiling;
      }
      rows.push(row);
    }
  }
  if (o.json) {
    for (const r of rows) console.log(JSON.stringify(r));
    return;
  }
  const pct = (x) => (x === undefined ? '' : `${(100 * x).toFixed(1)}%`);
  console.log(`threads ${o.threads}, ${o.reps} reps x ${o.rounds} rounds, medians (tokens/s)` +
              (o.membw ? `, ceiling = ${o.membw} GB/s / file bytes` : ''));
  console.log('| model | MiB | test | nucleus | llama.cpp | ratio | nucleus / ceiling | llama.cpp / ceiling |');
  console.log('|---|---:|---|---:|---:|---:|---:|---:|');
  for (const r of rows)
    console.log(`| ${r.model} | ${(r.bytes / 1048576).toFixed(0)} | ${r.test} | ` +
                `${r.nucleus_tps.toFixed(2)} | ${r.llama_tps.toFixed(2)} | ${r.ratio.toFixed(2)}x | ` +
                `${pct(r.nucleus_of_ceiling)} | ${pct(r.llama_of_ceiling)} |`);
}

main();
