// The client of tests/cli_nginx.sh: a bounded stream of requests through
// nginx to two `nucleus serve` replicas on 127.0.0.1, one replica killed
// (SIGKILL) part-way, and a report of what happened to every request.
//
//   node loadtest.mjs --url http://127.0.0.1:PORT --kill-pid PID --kill-addr 127.0.0.1:P
//        --step-ms D [--requests N]
//        [--concurrency C] [--tokens M] [--kill-after K] [--json FILE]
//
// Mix: streamed completions (half), plain completions, and GET /v1/models
// (an idempotent request). Each request is classed as
//   answered  200 with a whole answer (a stream ends with data: [DONE]);
//   failed    anything else;
//   lost      failed although nginx could have retried it: every failure
//             except a stream whose answer had already begun from the killed
//             replica when it died (nginx cannot take back bytes the client
//             has; everything that failed before its first byte reached the
//             client is retried on the other replica, see
//             packaging/nginx/nucleus.conf).
// Streaming is checked by timing: the replicas sleep D ms after every
// engine step, so a stream of M tokens takes at least (M - 1) * D ms from
// its first token to its last. Every answered stream must have received its
// first text at least half of that before its last; a proxy that buffers
// the answer delivers everything at once. The same check is run on a few
// streams through a proxy that buffers (one made here, in front of nginx),
// where it must see the buffering: the check can fail.
// Exit status: 0 when nothing was lost and no stream was buffered.
import http from "node:http";
import fs from "node:fs";

const args = Object.fromEntries(process.argv.slice(2).reduce((acc, a, i, all) => {
    if (a.startsWith("--")) acc.push([a.slice(2), all[i + 1]]);
    return acc;
}, []));
const URL_BASE = args.url;
const KILL_PID = Number(args["kill-pid"]);
const KILL_ADDR = args["kill-addr"];
const STEP_MS = Number(args["step-ms"] ?? 10);
const N = Number(args.requests ?? 120);
const CONCURRENCY = Number(args.concurrency ?? 6);
const TOKENS = Number(args.tokens ?? 24);
const KILL_AFTER = Number(args["kill-after"] ?? Math.floor(N / 3));
const REQUEST_TIMEOUT_MS = 60000;
const DEADLINE_MS = 240000; // the whole run, whatever happens

if (!URL_BASE || !KILL_PID || !KILL_ADDR) {
    console.error("usage: loadtest.mjs --url URL --kill-pid PID --kill-addr ADDR [...]");
    process.exit(2);
}

const now = () => performance.now();

// One HTTP request; resolves with what the client saw, never rejects.
function send(base, id, kind) {
    const u = new URL(base);
    const streamed = kind === "stream";
    const body = kind === "models" ? undefined : JSON.stringify({
        prompt: "Once upon a time", max_tokens: TOKENS, ignore_eos: true, temperature: 0,
        stream: streamed,
    });
    const rec = { id, kind, start: now(), end: 0, status: 0, upstream: "", outcome: "failed",
                  reason: "", headersAt: 0, firstToken: 0, lastToken: 0, tokens: 0 };
    return new Promise((resolve) => {
        let settled = false;
        const done = (reason) => {
            if (settled) return;
            settled = true;
            rec.end = now();
            if (reason) rec.reason = reason;
            resolve(rec);
        };
        const req = http.request({
            host: u.hostname, port: u.port, agent: false,
            method: kind === "models" ? "GET" : "POST",
            path: (u.pathname.replace(/\/$/, "")) + (kind === "models" ? "/v1/models" : "/v1/completions"),
            headers: { "x-client-request": String(id),
                       ...(body ? { "content-type": "application/json", "content-length": Buffer.byteLength(body) } : {}) },
        }, (res) => {
            rec.status = res.statusCode;
            rec.headersAt = now();
            rec.upstream = String(res.headers["x-upstream"] ?? "");
            let text = "", pending = "";
            res.setEncoding("utf8");
            res.on("data", (chunk) => {
                text += chunk;
                if (!streamed) return;
                pending += chunk;
                let k;
                while ((k = pending.indexOf("\n\n")) >= 0) {
                    const event = pending.slice(0, k);
                    pending = pending.slice(k + 2);
                    if (!event.startsWith("data: ") || event === "data: [DONE]") continue;
                    try {
                        const j = JSON.parse(event.slice(6));
                        if ((j.choices?.[0]?.text ?? "") !== "") {
                            const t = now();
                            if (!rec.firstToken) rec.firstToken = t;
                            rec.lastToken = t;
                            rec.tokens++;
                        }
                    } catch { /* a cut event: judged below */ }
                }
            });
            res.on("end", () => {
                if (res.statusCode !== 200) return done(`HTTP ${res.statusCode}`);
                if (streamed) {
                    if (!text.includes("data: [DONE]")) return done("stream cut");
                } else {
                    try {
                        const j = JSON.parse(text);
                        const ok = kind === "models" ? Array.isArray(j.data) : typeof j.choices?.[0]?.text === "string";
                        if (!ok) return done("incomplete answer");
                    } catch { return done("answer is not JSON"); }
                }
                rec.outcome = "answered";
                done();
            });
            res.on("error", (e) => done(`response: ${e.code ?? e.message}`));
            res.on("aborted", () => done("response aborted"));
        });
        req.setTimeout(REQUEST_TIMEOUT_MS, () => { req.destroy(new Error("timeout")); });
        req.on("error", (e) => done(`request: ${e.code ?? e.message}`));
        if (body) req.write(body);
        req.end();
    });
}

// A proxy on 127.0.0.1 that forwards each request to base and answers only
// once the whole answer has arrived: what a buffering proxy does to a stream.
function bufferingProxy(base) {
    const target = new URL(base);
    const server = http.createServer((req, res) => {
        const body = [];
        req.on("data", (c) => body.push(c));
        req.on("end", () => {
            const up = http.request({ host: target.hostname, port: target.port, method: req.method,
                                      path: req.url, headers: req.headers, agent: false }, (ures) => {
                const parts = [];
                ures.on("data", (c) => parts.push(c));
                ures.on("end", () => {
                    const all = Buffer.concat(parts);
                    const headers = { ...ures.headers, "content-length": all.length };
                    delete headers["transfer-encoding"];
                    res.writeHead(ures.statusCode, headers);
                    res.end(all);
                });
            });
            up.on("error", () => { res.writeHead(502); res.end(); });
            up.end(Buffer.concat(body));
        });
    });
    return new Promise((resolve) => server.listen(0, "127.0.0.1",
        () => resolve({ server, url: `http://127.0.0.1:${server.address().port}` })));
}

const KINDS = ["stream", "plain", "stream", "plain", "stream", "models", "stream", "plain", "stream", "plain"];

async function main() {
    const t0 = now();
    const records = [];
    let next = 0, finished = 0, killAt = 0;
    const kill = () => {
        if (killAt) return;
        killAt = now();
        try { process.kill(KILL_PID, "SIGKILL"); } catch (e) { console.error(`kill ${KILL_PID}: ${e.message}`); }
    };
    async function worker() {
        while (next < N && now() - t0 < DEADLINE_MS) {
            const id = next++;
            const r = await send(URL_BASE, id, KINDS[id % KINDS.length]);
            records.push(r);
            if (++finished >= KILL_AFTER) kill();
        }
    }
    await Promise.all(Array.from({ length: CONCURRENCY }, worker));
    kill();

    // Streaming: the first text at least half the generation time before the last.
    const minSpread = 0.5 * (TOKENS - 1) * STEP_MS;
    // The check itself must see a buffering proxy: a few streams through
    // one (bufferingProxy, in front of nginx) are judged the same way.
    const control = [];
    const proxy = await bufferingProxy(URL_BASE);
    for (let i = 0; i < 3; i++) control.push(await send(proxy.url, N + i, "stream"));
    proxy.server.close();
    const controlSeen = control.filter((r) => r.outcome === "answered" && r.lastToken - r.firstToken < minSpread);

    // Classes.
    const answered = records.filter((r) => r.outcome === "answered");
    const failed = records.filter((r) => r.outcome !== "answered");
    // A failure nginx could not retry: a stream from the killed replica whose
    // answer had begun (headers at the client) before the kill.
    // A stream whose headers reached the client from the killed replica cannot
    // be retried, whenever they arrived: headers the replica wrote just before
    // the kill may reach this event loop just after killAt was taken.
    const notRetriable = (r) => r.kind === "stream" && r.headersAt &&
        r.upstream.split(/,\s*/).pop() === KILL_ADDR;
    const cut = failed.filter(notRetriable);
    const lost = failed.filter((r) => !notRetriable(r));
    const inFlight = records.filter((r) => r.start <= killAt && r.end >= killAt);

    // Streams delivered at once (a text piece may carry more than one token:
    // pieces are counted, not tokens).
    const streams = answered.filter((r) => r.kind === "stream");
    const buffered = streams.filter((r) => r.tokens < 2 || r.lastToken - r.firstToken < minSpread);

    const q = (xs, p) => {
        if (!xs.length) return NaN;
        const s = [...xs].sort((a, b) => a - b);
        return s[Math.min(s.length - 1, Math.ceil(p * s.length) - 1)];
    };
    const lat = answered.map((r) => r.end - r.start);
    const ttft = streams.map((r) => r.firstToken - r.start);
    const perReplica = {};
    for (const r of answered) {
        const a = r.upstream.split(/,\s*/).pop() || "?";
        perReplica[a] = (perReplica[a] ?? 0) + 1;
    }
    const retried = answered.filter((r) => r.upstream.includes(",")).length;
    // Completions (generation jobs) each replica answered, the control's too:
    // to compare with the replica's own nucleus_generation_requests_total.
    const jobsByReplica = {};
    for (const r of [...answered, ...control.filter((c) => c.outcome === "answered")]) {
        if (r.kind === "models") continue;
        const a = r.upstream.split(/,\s*/).pop() || "?";
        jobsByReplica[a] = (jobsByReplica[a] ?? 0) + 1;
    }
    const report = {
        sent: records.length, answered: answered.length, failed: failed.length,
        failed_not_retriable: cut.length, lost: lost.length,
        in_flight_at_kill: inFlight.length, answered_after_retry: retried,
        latency_ms: { p50: q(lat, 0.5), p99: q(lat, 0.99) },
        stream_first_token_ms: { p50: q(ttft, 0.5), p99: q(ttft, 0.99) },
        streams_answered: streams.length, streams_buffered: buffered.length,
        min_token_spread_ms: minSpread,
        control_buffered_detected: `${controlSeen.length}/${control.length}`,
        answered_by_replica: perReplica, completions_by_replica: jobsByReplica,
        kill_after_ms: Math.round(killAt - t0), total_ms: Math.round(now() - t0),
        failures: failed.map((r) => ({ id: r.id, kind: r.kind, reason: r.reason, upstream: r.upstream,
                                        retriable: !notRetriable(r) })),
    };
    if (args.json) fs.writeFileSync(args.json, JSON.stringify({ report, records }, null, 1));
    const f = (x) => Number.isFinite(x) ? x.toFixed(0) : "n/a";
    console.log(`requests: sent ${report.sent}, answered ${report.answered}, failed ${report.failed} ` +
        `(${report.failed_not_retriable} streams cut on the killed replica), lost ${report.lost}`);
    console.log(`in flight at the kill: ${report.in_flight_at_kill}; answered after a retry: ${retried}; ` +
        `answered by replica: ${JSON.stringify(perReplica)}`);
    console.log(`latency: p50 ${f(report.latency_ms.p50)} ms, p99 ${f(report.latency_ms.p99)} ms; ` +
        `stream first token: p50 ${f(report.stream_first_token_ms.p50)} ms, p99 ${f(report.stream_first_token_ms.p99)} ms`);
    console.log(`streaming: ${streams.length - buffered.length}/${streams.length} streams had their first token ` +
        `>= ${minSpread} ms before their last; a buffering proxy was detected in ${report.control_buffered_detected}`);
    for (const r of failed) console.log(`  failed #${r.id} ${r.kind}: ${r.reason} (upstream ${r.upstream || "-"})` +
        `${notRetriable(r) ? "" : "  <- LOST: nginx could have retried it"}`);
    for (const r of buffered.slice(0, 5)) console.log(`  buffered #${r.id}: ${r.tokens} pieces, first-to-last ` +
        `${f(r.lastToken - r.firstToken)} ms`);

    let ok = true;
    const check = (what, cond) => { console.log(`${cond ? "ok" : "FAIL"}: ${what}`); ok &&= cond; };
    check("every request got an outcome", report.sent === N);
    check("no request that nginx could retry was lost", lost.length === 0);
    check("most requests were answered", answered.length >= 0.8 * N);
    check("both replicas answered", Object.keys(perReplica).length >= 2);
    check("streams were passed through unbuffered", streams.length > 0 && buffered.length === 0);
    check("the buffering check sees a buffering proxy", controlSeen.length === control.length);
    process.exit(ok ? 0 : 1);
}

main().catch((e) => { console.error(e); process.exit(1); });
