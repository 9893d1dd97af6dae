// Malformed requests over raw sockets (bad JSON, wrong types, huge numbers,
// invalid UTF-8, truncated bodies, slow and stalled clients, garbage) each
// get the right answer, while a streaming client keeps being served and
// gets exactly the text it gets alone.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import {
    MODEL_ID, assertCleanExit, client, collectStream, rawExchange, rawPost, rawStatus, request, sleep,
    startServer, withTimeout,
} from "./helpers.mjs";

let server, openai;
before(async () => {
    server = await startServer(["--parallel", "4", "--ctx", "1024", "--timeout", "2", "--max-body", "262144",
        "--test-step-delay-ms", "2"]);
    openai = client(server);
});
after(async () => assertCleanExit(assert, await server.stop()));

const streamArgs = { model: MODEL_ID, prompt: "Once upon a time", max_tokens: 600, ignore_eos: true, temperature: 0.8, seed: 77 };
const streamText = async () => (await collectStream(await openai.completions.create({ ...streamArgs, stream: true }), "completion")).texts[0];

// Body of the JSON error in a raw answer.
const rawJson = (text) => JSON.parse(text.slice(text.indexOf("\r\n\r\n") + 4).replace(/^[0-9a-f]+\r\n/i, ""));

test("malformed requests get their errors while another client streams", async () => {
    const solo = await streamText();
    const background = streamText();
    const expect = async (bytes, status, what, opts) => {
        const ans = await rawExchange(server, [bytes], opts);
        assert.equal(rawStatus(ans), status, `${what}: ${ans.slice(0, 300)}`);
        return ans;
    };
    const okBody = JSON.stringify({ prompt: "Hi", max_tokens: 2 });
    await expect(rawPost("/v1/completions", okBody), 200, "a good request");
    await expect(rawPost("/v1/completions", "{\"prompt\": \"Hi\", "), 400, "truncated JSON");
    await expect(rawPost("/v1/completions", "{\"prompt\": \"Hi\" \"max_tokens\": 2}"), 400, "missing comma");
    await expect(rawPost("/v1/completions", Buffer.from([0x7b, 0x22, 0x70, 0x72, 0x6f, 0x6d, 0x70, 0x74, 0x22, 0x3a, 0x22, 0xff, 0xfe, 0x22, 0x7d])), 400, "invalid UTF-8");
    await expect(rawPost("/v1/completions", "{\"prompt\": \"\\ud800\"}"), 400, "lone surrogate");
    const nul = await expect(rawPost("/v1/completions", "{\"prompt\": \"a\\u0000b\"}"), 400, "NUL escape");
    assert.match(rawJson(nul).error.message, /NUL/);
    await expect(rawPost("/v1/completions", "{\"prompt\": \"Hi\", \"max_tokens\": 1e999}"), 400, "infinite number");
    await expect(rawPost("/v1/completions", "{\"prompt\": \"Hi\", \"max_tokens\": 123456789012345678901234567890}"), 400, "huge integer");
    await expect(rawPost("/v1/completions", "{\"prompt\": \"Hi\", \"seed\": -1e40}"), 400, "huge seed");
    await expect(rawPost("/v1/completions", "{\"prompt\": \"Hi\", \"temperature\": -0}"), 200, "negative zero is zero");
    await expect(rawPost("/v1/completions", JSON.stringify({ prompt: "Hi", logit_bias: { "1e3": 1 } })), 400, "logit_bias key not an id");
    await expect(rawPost("/v1/completions", "[".repeat(5000) + "]".repeat(5000)), 400, "deep nesting");
    await expect(rawPost("/v1/completions", JSON.stringify({ prompt: "Hi", stop: "x".repeat(2000) })), 400, "long stop string");
    await expect(rawPost("/v1/completions", "x".repeat(300000)), 413, "body over the limit");
    await expect(rawPost("/v1/chat/completions", JSON.stringify({ messages: [{ role: "user", content: "x".repeat(100000) }] })), 413, "prompt over the context");
    // what is not HTTP at all is libmicrohttpd's to refuse: a 400 or a closed
    // connection; or, when it waits for more of a request line that never
    // comes, the header deadline's 408 (--timeout 2 s; which of the two
    // comes first depends on timing)
    for (const junk of ["GARBAGE\r\n\r\n", "GET\r\n\r\n", "\x00\x01\x02\r\n\r\n", "POST /v1/completions HTTP/9.9\r\n\r\n"]) {
        const ans = await rawExchange(server, [Buffer.from(junk, "latin1")], { idleMs: 4000 });
        assert.ok([0, 400, 408, 505].includes(rawStatus(ans)), `junk ${JSON.stringify(junk)}: ${ans.slice(0, 200)}`);
    }
    const bigHeader = await rawExchange(server, [Buffer.from(`GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ${"a".repeat(200000)}\r\n\r\n`)]);
    assert.ok([0, 413, 431].includes(rawStatus(bigHeader)), bigHeader.slice(0, 200));
    // chunked upload over the limit: refused after reading, never buffered
    const chunk = "x".repeat(100000);
    const chunked = Buffer.from("POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n" +
        `${(100000).toString(16)}\r\n${chunk}\r\n`.repeat(3) + "0\r\n\r\n");
    await expect(chunked, 413, "chunked body over the limit");
    assert.equal(await withTimeout(background, 120000, "background stream"), solo, "the streaming client's text changed");
});

test("truncated, slow and stalled clients do not hold up others", async () => {
    const background = streamText();
    // a body shorter than its Content-Length, then our side closes: no answer needed, no harm done
    const truncated = rawExchange(server, [rawPost("/v1/completions", "{\"prompt\": \"Hi\"", { length: 200 })], { halfClose: true, idleMs: 4000 });
    // a stalled client: half a body and then silence; the idle timeout (2 s) closes it
    const t0 = Date.now();
    const stalled = rawExchange(server, [rawPost("/v1/completions", "{\"prompt\":", { length: 100 })], { idleMs: 10000 });
    // a slow client: its request in 12 pieces 40 ms apart (all of it well
    // within the 2 s the whole request may take), still answered in full
    const body = JSON.stringify({ prompt: "Once", max_tokens: 3, temperature: 0 });
    const whole = rawPost("/v1/completions", body);
    const step = Math.ceil(whole.length / 12);
    const slow = rawExchange(server, Array.from({ length: 12 }, (_, k) => whole.subarray(k * step, (k + 1) * step)), { pauseMs: 40 });
    // many idle connections at once
    const idle = Array.from({ length: 20 }, () => rawExchange(server, [Buffer.from("GET /health HTTP/1.1\r\nHost: x\r\n")], { idleMs: 8000 }));
    for (let i = 0; i < 5; i++) {
        const r = await request(server, "POST", "/v1/completions", { body: { prompt: "The cat", max_tokens: 3 } });
        assert.equal(r.status, 200, "others are served meanwhile");
    }
    await truncated;
    await stalled;
    assert.ok(Date.now() - t0 < 9000, "the stalled connection was closed by the idle timeout");
    const slowAnswer = await slow;
    assert.equal(rawStatus(slowAnswer), 200, slowAnswer.slice(0, 200));
    await Promise.all(idle);
    const bg = await withTimeout(background, 120000, "background stream");
    assert.ok(bg.length > 0);
    const h = await request(server, "GET", "/health");
    assert.equal(h.status, 200);
});

test("a client that closes mid-request (non-streaming) is cancelled", async () => {
    const r0 = await request(server, "GET", "/metrics");
    const before = Number(r0.text.match(/^nucleus_requests_cancelled_total (\d+)/m)[1]);
    const body = JSON.stringify({ prompt: "Once upon a time", max_tokens: 900, ignore_eos: true });
    await rawExchange(server, [rawPost("/v1/completions", body)], { idleMs: 300 }); // gives up after 300 ms
    let after = before;
    for (let i = 0; i < 100 && after === before; i++) {
        await sleep(20);
        after = Number((await request(server, "GET", "/metrics")).text.match(/^nucleus_requests_cancelled_total (\d+)/m)[1]);
    }
    assert.equal(after, before + 1);
});
