// tokenizer_peer.mjs - llama.cpp's tokenizing throughput on the same text, for
// comparison with bench_tokenizer (a measuring instrument, not part of nucleus).
//
// llama.cpp comes from the npm package node-llama-cpp (see ../shared/peer/README.md):
//   cd /tmp/peer && npm install --omit=optional --ignore-scripts --no-audit --no-fund
//   bench_tokenizer --write-text /tmp/text.txt VOCAB.gguf
//   node bench/tokenizer_peer.mjs --text /tmp/text.txt [--reps 5] [--peer /tmp/peer] VOCAB.gguf...
//
// Each vocabulary file is loaded vocab-only; the whole text is tokenized in
// one call (no BOS, special tokens not parsed), as bench_tokenizer does. Two
// figures are printed, medians of the repetitions, in MB/s (10^6 input bytes
// per second): "addon" times llama.cpp's tokenizer call alone (the native
// binding, which returns a typed array), "api" the public model.tokenize(),
// which also copies the ids into a JavaScript array.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { pathToFileURL } from "node:url";

function parseArgs(argv) {
    const o = { text: null, reps: 5, peer: "/tmp/peer", vocabs: [] };
    for (let i = 0; i < argv.length; i++) {
        const a = argv[i];
        if (a === "--text") o.text = argv[++i];
        else if (a === "--reps") o.reps = Number(argv[++i]);
        else if (a === "--peer") o.peer = argv[++i];
        else if (a.startsWith("-")) throw new Error(`unknown option ${a}`);
        else o.vocabs.push(a);
    }
    if (!o.text || o.vocabs.length === 0 || !(o.reps >= 1)) {
        throw new Error("usage: node tokenizer_peer.mjs --text FILE [--reps N] [--peer DIR] VOCAB.gguf...");
    }
    return o;
}

// node-llama-cpp is installed outside the project: resolve it from --peer.
async function loadPeer(dir) {
    const require = createRequire(path.join(path.resolve(dir), "package.json"));
    return import(pathToFileURL(require.resolve("node-llama-cpp")).href);
}

function median(values) {
    const v = [...values].sort((a, b) => a - b);
    const m = v.length >> 1;
    return v.length % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

// Runs fn reps times; the median MB/s over bytes of input.
function timeMBs(fn, bytes, reps) {
    const rates = [];
    let result;
    for (let r = 0; r < reps; r++) {
        const t0 = process.hrtime.bigint();
        result = fn();
        const s = Number(process.hrtime.bigint() - t0) / 1e9;
        rates.push(bytes / 1e6 / s);
    }
    return { mbs: median(rates), result };
}

async function main() {
    const o = parseArgs(process.argv.slice(2));
    const { getLlama } = await loadPeer(o.peer);
    const llama = await getLlama({ gpu: false, logLevel: "error" });
    const text = readFileSync(o.text, "utf8");
    const bytes = Buffer.byteLength(text, "utf8");
    for (const vocab of o.vocabs) {
        const model = await llama.loadModel({ modelPath: vocab, vocabOnly: true });
        const addon = model._model; // the native binding model.tokenize() calls
        const native = timeMBs(() => addon.tokenize(text, false), bytes, o.reps);
        const api = timeMBs(() => model.tokenize(text, false), bytes, o.reps);
        const n = api.result.length;
        console.log(
            `${path.basename(vocab).padEnd(34)} addon ${native.mbs.toFixed(2).padStart(8)} MB/s` +
                `  api ${api.mbs.toFixed(2).padStart(8)} MB/s  (median of ${o.reps}; ` +
                `${bytes} bytes -> ${n} tokens)`
        );
        await model.dispose();
    }
    await llama.dispose();
}

main().catch((e) => {
    console.error(e.message ?? e);
    process.exit(1);
});
