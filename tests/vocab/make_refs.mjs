#!/usr/bin/env node
// Pins llama.cpp's token ids for our own tokenizer test strings.
//
// tests/vocab/llamacpp.inp holds the strings in the layout of ../shared/vocab's .inp files (each
// string followed by "\n__ggml_vocab_test__\n"): code, numbers, CJK, emoji, whitespace runs,
// mixed scripts, combining marks, special-token-looking text. For every vocabulary named below
// this script runs llama.cpp's llama-tokenize on each string (the file's bytes verbatim, no BOS,
// special-token text not parsed, no escape processing) and writes tests/vocab/llamacpp-NAME.out,
// one line of space-separated ids per string (the layout of ../shared/vocab's .out files).
// test_tokenizer_vectors compares our tokenizer with those lines.
//
// Usage: node tests/vocab/make_refs.mjs [--check] [--only name,name]
// Environment: NU_SHARED_DIR (default <repo>/../shared), LLAMA_BIN_DIR (default
// <repo>/../peer/llama.cpp-src/build/bin). --check compares with the committed files instead of
// writing them. Only the Node standard library is used.

import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const REPO = path.resolve(HERE, '..', '..');
const SHARED = path.resolve(process.env.NU_SHARED_DIR || path.join(REPO, '..', 'shared'));
const BIN = path.resolve(process.env.LLAMA_BIN_DIR ||
                         path.join(REPO, '..', 'peer', 'llama.cpp-src', 'build', 'bin'));

// The vocabularies of ../shared/vocab the strings are pinned for.
const VOCABS = ['qwen35', 'gemma-4', 'qwen2', 'llama-bpe', 'llama-spm', 'gpt-2', 'command-r'];
const SEPARATOR = '\n__ggml_vocab_test__\n';

function die(msg) {
  process.stderr.write(`make_refs: ${msg}\n`);
  process.exit(1);
}

function readStrings() {
  const data = fs.readFileSync(path.join(HERE, 'llamacpp.inp'));
  const sep = Buffer.from(SEPARATOR);
  const out = [];
  for (let at = 0; at < data.length;) {
    const end = data.indexOf(sep, at);
    if (end < 0) die('llamacpp.inp does not end with the separator');
    out.push(data.subarray(at, end));
    at = end + sep.length;
  }
  return out;
}

// llama-tokenize --ids prints "[1, 2, 3]" on its last line.
function tokenize(vocab, text, tmp) {
  fs.writeFileSync(tmp, text);
  const out = execFileSync(path.join(BIN, 'llama-tokenize'),
    ['-m', vocab, '-f', tmp, '--ids', '--no-bos', '--no-parse-special', '--no-escape',
     '--log-disable'],
    { env: { ...process.env, LD_LIBRARY_PATH: BIN }, stdio: ['ignore', 'pipe', 'pipe'] });
  const lines = out.toString('utf8').trim().split('\n');
  const last = lines[lines.length - 1].trim();
  if (!last.startsWith('[') || !last.endsWith(']')) die(`unexpected llama-tokenize output: ${last}`);
  return last.slice(1, -1).split(',').map(s => s.trim()).filter(s => s.length).join(' ');
}

const args = process.argv.slice(2);
const check = args.includes('--check');
const onlyAt = args.indexOf('--only');
const names = onlyAt >= 0 ? args[onlyAt + 1].split(',') : VOCABS;
const strings = readStrings();
const tmp = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'nu-vocab-')), 'text.txt');
let failed = false;
for (const name of names) {
  const vocab = path.join(SHARED, 'vocab', `ggml-vocab-${name}.gguf`);
  const lines = strings.map(s => tokenize(vocab, s, tmp));
  const text = lines.join('\n') + '\n';
  const file = path.join(HERE, `llamacpp-${name}.out`);
  if (check) {
    const same = fs.existsSync(file) && fs.readFileSync(file, 'utf8') === text;
    process.stdout.write(`${name}: ${same ? 'same' : 'DIFFERENT'}\n`);
    failed ||= !same;
  } else {
    fs.writeFileSync(file, text);
    process.stdout.write(`${name}: ${lines.length} strings -> ${path.relative(REPO, file)}\n`);
  }
}
fs.rmSync(path.dirname(tmp), { recursive: true });
process.exit(failed ? 1 : 0);
