#!/usr/bin/env node
// Aggregate generation throughput of an OpenAI-compatible server (nucleus
// serve, llama.cpp's llama-server, ...) under N concurrent streaming
// requests. No dependencies: plain fetch and a small server-sent-events
// reader, so every server is measured the same way.
//
//   node bench/server_bench.mjs --base-url http://127.0.0.1:8080/v1
//        [--concurrency 1,4,8,16] [--max-tokens 64] [--reps 3] [--mode completion|chat]
//        [--model ID] [--api-key KEY] [--prompt TEXT] [--extra JSON] [--json]
//
// Each request asks for exactly max_tokens tokens (ignore_eos, temperature
// 0.8 with a per-request seed). For each concurrency level, all N requests
// start together; aggregate tok/s = generated tokens of all N / wall time
// from the first request sent to the last stream finished. The median over
// the repetitions is reported, with the median time to first token and the
// median per-stream decode rate. Only tokens the server reports in its
// usage chunk are counted (or, without one, the content chunks). --extra
// adds fields to every request (e.g. '{"top_k":40,"top_p":0.95,"min_p":0.05}'
// so that servers with different sampling defaults do the same work).

function parseArgs(argv) {
    const a = { baseUrl: "http://127.0.0.1:8080/v1", concurrency: [1, 4, 8, 16], maxTokens: 64, reps: 3,
        mode: "completion", model: undefined, apiKey: process.env.OPENAI_API_KEY ?? "sk-no-key",
        prompt: "Once upon a time, in a small village by the sea, there lived", json: false, timeoutMs: 600000,
        extra: {} };
    for (let i = 2; i < argv.length; i++) {
        const k = argv[i], v = () => argv[++i];
        if (k === "--base-url") a.baseUrl = v().replace(/\/$/, "");
        else if (k === "--concurrency") a.concurrency = v().split(",").map(Number);
        else if (k === "--max-tokens") a.maxTokens = Number(v());
        else if (k === "--reps") a.reps = Number(v());
        else if (k === "--mode") a.mode = v();
        else if (k === "--model") a.model = v();
        else if (k === "--api-key") a.apiKey = v();
        else if (k === "--prompt") a.prompt = v();
        else if (k === "--json") a.json = true;
        else if (k === "--extra") a.extra = JSON.parse(v());
        else if (k === "--timeout-ms") a.timeoutMs = Number(v());
        else if (k === "-h" || k === "--help") { console.log("see the header of bench/server_bench.mjs"); process.exit(0); }
        else { console.error(`unknown argument ${k}`); process.exit(2); }
    }
    if (a.concurrency.some((n) => !(n >= 1)) || !(a.maxTokens >= 1) || !(a.reps >= 1)) {
        console.error("bad --concurrency, --max-tokens or --reps");
        process.exit(2);
    }
    return a;
}

const median = (xs) => {
    const s = [...xs].sort((x, y) => x - y);
    return s.length ? (s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2) : NaN;
};

// The model id the server serves (the first of /models).
async function modelId(a) {
    const r = await fetch(`${a.baseUrl}/models`, { headers: { authorization: `Bearer ${a.apiKey}` } });
    if (!r.ok) throw new Error(`GET /models: ${r.status}`);
    return (await r.json()).data[0].id;
}

// One streaming request; resolves with its token count and timings (ms).
async function streamOne(a, i) {
    const body = { model: a.model, max_tokens: a.maxTokens, temperature: 0.8, seed: 1234 + i, ignore_eos: true,
        stream: true, stream_options: { include_usage: true }, ...a.extra };
    if (a.mode === "chat") body.messages = [{ role: "user", content: `${a.prompt} (${i})` }];
    else body.prompt = `${a.prompt} (${i})`;
    const t0 = performance.now();
    const r = await fetch(`${a.baseUrl}/${a.mode === "chat" ? "chat/completions" : "completions"}`, {
        method: "POST", body: JSON.stringify(body), signal: AbortSignal.timeout(a.timeoutMs),
        headers: { "content-type": "application/json", authorization: `Bearer ${a.apiKey}` } });
    if (!r.ok) throw new Error(`request ${i}: HTTP ${r.status} ${await r.text()}`);
    let first = null, chunks = 0, usage = null, buf = "";
    const decoder = new TextDecoder();
    for await (const part of r.body) {
        buf += decoder.decode(part, { stream: true });
        let end;
        while ((end = buf.indexOf("\n\n")) >= 0) {
            const event = buf.slice(0, end);
            buf = buf.slice(end + 2);
            for (const line of event.split("\n")) {
                if (!line.startsWith("data: ") || line === "data: [DONE]") continue;
                const d = JSON.parse(line.slice(6));
                if (d.usage) usage = d.usage;
                const c = d.choices?.[0];
                const text = c ? (c.delta?.content ?? c.text ?? "") : "";
                if (text) {
                    chunks++;
                    if (first === null) first = performance.now();
                }
            }
        }
    }
    const t1 = performance.now();
    return { tokens: usage?.completion_tokens ?? chunks, start: t0, first: first ?? t1, end: t1 };
}

// N requests at once: aggregate tok/s, median TTFT and per-stream decode rate.
async function round(a, n) {
    const t0 = performance.now();
    const rs = await Promise.all(Array.from({ length: n }, (_, i) => streamOne(a, i)));
    const wall = (Math.max(...rs.map((r) => r.end)) - t0) / 1e3;
    const tokens = rs.reduce((s, r) => s + r.tokens, 0);
    return { tokens, wall, aggregate: tokens / wall, ttft: median(rs.map((r) => r.first - r.start)),
        perStream: median(rs.map((r) => (r.tokens - 1) / Math.max(1e-9, (r.end - r.first) / 1e3))) };
}

async function main() {
    const a = parseArgs(process.argv);
    a.model ??= await modelId(a);
    await round(a, 1); // warm-up
    const rows = [];
    for (const n of a.concurrency) {
        const reps = [];
        for (let k = 0; k < a.reps; k++) reps.push(await round(a, n));
        rows.push({ concurrency: n, max_tokens: a.maxTokens, reps: a.reps,
            aggregate_tok_s: median(reps.map((r) => r.aggregate)), ttft_ms: median(reps.map((r) => r.ttft)),
            per_stream_tok_s: median(reps.map((r) => r.perStream)), tokens: reps[0].tokens });
        if (!a.json) {
            const r = rows.at(-1);
            console.log(`streams ${String(n).padStart(3)}: ${r.aggregate_tok_s.toFixed(2).padStart(8)} tok/s aggregate, ` +
                `${r.per_stream_tok_s.toFixed(2).padStart(7)} tok/s per stream, TTFT ${r.ttft_ms.toFixed(0).padStart(6)} ms ` +
                `(median of ${a.reps}, ${r.tokens} tokens per round)`);
        }
    }
    if (a.json) console.log(JSON.stringify({ base_url: a.baseUrl, model: a.model, mode: a.mode, rows }));
}

main().catch((e) => {
    console.error(`server_bench: ${e.message}`);
    process.exit(1);
});
