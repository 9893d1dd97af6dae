// Every error status, in the OpenAI error shape: 400 (bad JSON, wrong types,
// out-of-range values, unknown fields), 401, 404 (route, model), 405, 413
// (body, prompt), 503 with Retry-After when the queue is full; and a client
// that goes away frees its slot.
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import OpenAI from "openai";
import {
    MODEL_ID, assertCleanExit, client, request, sleep, startServer, withTimeout,
} from "./helpers.mjs";

// Checks {"error": {"message", "type", "param", "code"}}.
function assertError(r, status, param) {
    assert.equal(r.status, status, r.text);
    assert.equal(typeof r.json?.error?.message, "string", r.text);
    assert.ok(r.json.error.message.length > 0);
    assert.equal(typeof r.json.error.type, "string");
    assert.ok("param" in r.json.error && "code" in r.json.error, r.text);
    if (param !== undefined) assert.equal(r.json.error.param, param, r.text);
}

const chat = (extra) => ({ messages: [{ role: "user", content: "Hi" }], max_tokens: 4, ...extra });
const completion = (extra) => ({ prompt: "Once upon a time", max_tokens: 4, ...extra });

describe("errors", () => {
    let server;
    before(async () => {
        server = await startServer(["--parallel", "2", "--ctx", "256", "--max-body", "4096",
            "--max-prompt-tokens", "100", "--max-tokens-limit", "200"]);
    });
    after(async () => assertCleanExit(assert, await server.stop()));

    test("400 for bodies that are not JSON objects", async () => {
        for (const body of ["{", "not json", "[1,2]", "42", "", '{"prompt": "a"} trailing', '{"prompt": "a",}'])
            assertError(await request(server, "POST", "/v1/completions", { body }), 400);
    });

    test("400 for wrong types, with the field named", async () => {
        const cases = [
            [completion({ max_tokens: "10" }), "max_tokens"], [completion({ max_tokens: 1.5 }), "max_tokens"],
            [completion({ temperature: "hot" }), "temperature"], [completion({ top_p: true }), "top_p"],
            [completion({ n: [] }), "n"], [completion({ stream: "yes" }), "stream"],
            [completion({ stop: 5 }), "stop"], [completion({ stop: ["a", 1] }), "stop"],
            [completion({ seed: "1" }), "seed"], [completion({ logit_bias: [] }), "logit_bias"],
            [completion({ logit_bias: { x: 1 } }), "logit_bias"], [completion({ echo: 1 }), "echo"],
            [completion({ logprobs: true }), "logprobs"], [completion({ prompt: 5 }), "prompt"],
            [completion({ prompt: [] }), "prompt"], [completion({ prompt: [1, "a"] }), "prompt"],
            [completion({ prompt: [[1], ["a"]] }), "prompt"], [completion({ prompt: [99999] }), "prompt"],
            [completion({ model: 7 }), "model"], [completion({ user: {} }), "user"],
            [completion({ top_k: -1 }), "top_k"], [completion({ ignore_eos: "no" }), "ignore_eos"],
            [chat({ messages: "hi" }), "messages"], [chat({ messages: [] }), "messages"],
            [chat({ messages: [{ content: "x" }] }), "messages"], [chat({ messages: [{ role: "user", content: 5 }] }), "messages"],
            [chat({ messages: [{ role: "wizard", content: "x" }] }), "messages"],
            [chat({ messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "x" } }] }] }), "messages"],
            [chat({ logprobs: 2 }), "logprobs"], [chat({ top_logprobs: 2 }), "top_logprobs"],
            [chat({ response_format: "json" }), "response_format"], [chat({ stream_options: { include_usage: true } }), "stream_options"],
            [chat({ stream: true, stream_options: { include_usage: "yes" } }), "include_usage"],
            [chat({ temprature: 1 }), "temprature"], [chat({ echo: true }), "echo"], [chat({ tools: [{ type: "function" }] }), "tools[0].function"],
        ];
        for (const [body, param] of cases) {
            const url = body.messages ? "/v1/chat/completions" : "/v1/completions";
            assertError(await request(server, "POST", url, { body }), 400, param);
        }
    });

    test("400 for out-of-range values (refused, not clamped)", async () => {
        const cases = [
            [completion({ temperature: 2.5 }), "temperature"], [completion({ temperature: -0.1 }), "temperature"],
            [completion({ top_p: 1.5 }), "top_p"], [completion({ n: 0 }), "n"], [completion({ n: 1000 }), "n"],
            [completion({ presence_penalty: 3 }), "presence_penalty"], [completion({ frequency_penalty: -2.5 }), "frequency_penalty"],
            [completion({ max_tokens: -1 }), "max_tokens"], [completion({ max_tokens: 201 }), "max_tokens"],
            [completion({ max_tokens: 1e300 }), "max_tokens"], [completion({ seed: 1e300 }), "seed"],
            [completion({ logprobs: 6 }), "logprobs"], [completion({ logit_bias: { 1: 101 } }), "logit_bias"],
            [completion({ logit_bias: { 100000: 1 } }), "logit_bias"], [completion({ best_of: 1, n: 2 }), "best_of"],
            [completion({ stop: [""] }), "stop"], [completion({ stop: Array(17).fill("x") }), "stop"],
            [completion({ min_p: 2 }), "min_p"], [completion({ typical_p: 0 }), "typical_p"],
            [completion({ repetition_penalty: 0 }), "repetition_penalty"], [completion({ penalty_last_n: -2 }), "penalty_last_n"],
            [chat({ top_logprobs: 21, logprobs: true }), "top_logprobs"], [chat({ max_tokens: 0 }), "max_tokens"],
            [completion({ beam_width: 1000 }), "beam_width"], [completion({ length_penalty: 1 }), "beam_width"],
            [completion({ beam_width: 2, n: 3 }), "n"], [completion({ beam_width: 2, stop: "x" }), "stop"],
            [completion({ best_of: 3, stream: true }), "best_of"],
        ];
        for (const [body, param] of cases) {
            const url = body.messages ? "/v1/chat/completions" : "/v1/completions";
            assertError(await request(server, "POST", url, { body }), 400, param);
        }
    });

    test("400 for what is not available yet", async () => {
        assertError(await request(server, "POST", "/v1/completions", { body: completion({ watermark: true }) }), 400, "watermark");
        assertError(await request(server, "POST", "/v1/completions", { body: completion({ suffix: "end" }) }), 400, "suffix");
    });

    test("the client sees 400 as BadRequestError", async () => {
        const openai = client(server);
        await assert.rejects(openai.chat.completions.create({ model: MODEL_ID, messages: [{ role: "user", content: "x" }], temperature: 3 }),
            (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === "temperature");
    });

    test("404 for unknown routes and unknown models, 405 for the wrong method", async () => {
        assertError(await request(server, "GET", "/v1/nothing"), 404);
        assertError(await request(server, "POST", "/v2/completions", { body: completion() }), 404);
        assertError(await request(server, "POST", "/v1/completions", { body: completion({ model: "gpt-4" }) }), 404, "model");
        assertError(await request(server, "GET", "/v1/models/gpt-4"), 404);
        await assert.rejects(client(server).chat.completions.create({ model: "nope", messages: [{ role: "user", content: "x" }] }),
            (e) => e instanceof OpenAI.NotFoundError);
        const r = await request(server, "GET", "/v1/completions");
        assertError(r, 405);
        assert.equal(r.headers.allow, "POST");
    });

    test("413 for a body over --max-body and a prompt over --max-prompt-tokens", async () => {
        const big = await request(server, "POST", "/v1/completions", { body: completion({ prompt: "x".repeat(5000) }) });
        assertError(big, 413);
        const long = await request(server, "POST", "/v1/completions", { body: completion({ prompt: "Once upon a time ".repeat(40) }) });
        assertError(long, 413, "prompt");
        const ids = await request(server, "POST", "/v1/completions", { body: completion({ prompt: Array(101).fill(5) }) });
        assertError(ids, 413, "prompt");
        const ok = await request(server, "POST", "/v1/completions", { body: completion({ prompt: Array(100).fill(5) }) });
        assert.equal(ok.status, 200, ok.text);
    });

    test("max_tokens past the slot's context is refused, never cut short; up to it is generated in full", async () => {
        const over = await request(server, "POST", "/v1/completions", { body: completion({ prompt: Array(100).fill(5), max_tokens: 200, ignore_eos: true }) });
        assertError(over, 400, "max_tokens");
        assert.equal(over.json.error.code, "context_length_exceeded");
        const r = await request(server, "POST", "/v1/completions", { body: completion({ prompt: Array(100).fill(5), max_tokens: 156, ignore_eos: true }) });
        assert.equal(r.status, 200, r.text);
        assert.equal(r.json.choices[0].finish_reason, "length");
        assert.equal(r.json.usage.completion_tokens, 256 - 100);
    });
});

describe("API keys", () => {
    let server, keyServer;
    const keyFile = path.join(os.tmpdir(), `nucleus-key-${process.pid}`);
    before(async () => {
        fs.writeFileSync(keyFile, "  sk-file-key \n");
        server = await startServer(["--api-key", "sk-secret"]);
        keyServer = await startServer(["--api-key-file", keyFile]);
    });
    after(async () => {
        fs.rmSync(keyFile, { force: true });
        assertCleanExit(assert, await server.stop());
        assertCleanExit(assert, await keyServer.stop());
    });

    test("401 without the right Bearer key", async () => {
        assertError(await request(server, "POST", "/v1/completions", { body: completion() }), 401);
        assertError(await request(server, "POST", "/v1/completions", { body: completion(), headers: { authorization: "Bearer sk-wrong" } }), 401);
        assertError(await request(server, "GET", "/v1/models", { headers: { authorization: "Basic sk-secret" } }), 401);
        await assert.rejects(client(server, "sk-wrong").models.list(), (e) => e instanceof OpenAI.AuthenticationError);
        const ok = await client(server, "sk-secret").completions.create({ model: MODEL_ID, prompt: "Hi", max_tokens: 2 });
        assert.equal(ok.choices.length, 1);
        assert.equal((await request(server, "GET", "/health")).status, 200, "health needs no key");
    });

    test("--api-key-file", async () => {
        assertError(await request(keyServer, "GET", "/v1/models", { headers: { authorization: "Bearer sk-secret" } }), 401);
        const r = await request(keyServer, "GET", "/v1/models", { headers: { authorization: "Bearer sk-file-key" } });
        assert.equal(r.status, 200);
    });
});

describe("a full queue", () => {
    let server;
    before(async () => {
        // one slot, one waiting request; each step takes >= 5 ms, so a long request lasts seconds
        server = await startServer(["--parallel", "1", "--max-queue", "1", "--test-step-delay-ms", "5", "--ctx", "2048"]);
    });
    after(async () => assertCleanExit(assert, await server.stop()));

    test("503 with Retry-After when the queue is full; the queued request still completes", async () => {
        const openai = client(server);
        const long = { model: MODEL_ID, prompt: "Once upon a time", max_tokens: 400, ignore_eos: true, stream: true };
        const running = await openai.completions.create(long);
        const it = running[Symbol.asyncIterator]();
        await it.next(); // the first request holds the slot
        const queued = openai.completions.create({ model: MODEL_ID, prompt: "The cat", max_tokens: 4 });
        await sleep(200);
        const refused = await request(server, "POST", "/v1/completions", { body: completion() });
        assertError(refused, 503);
        assert.equal(refused.headers["retry-after"], "1");
        await assert.rejects(openai.completions.create({ model: MODEL_ID, prompt: "x", max_tokens: 1 }),
            (e) => e instanceof OpenAI.InternalServerError && e.status === 503);
        let n = 0;
        for (;;) { const x = await it.next(); if (x.done) break; n++; }
        assert.ok(n > 0);
        const q = await withTimeout(queued, 60000, "queued request");
        assert.equal(q.choices.length, 1);
    });

    test("a client that disconnects frees its slot at once", async () => {
        const controller = new AbortController();
        const openai = client(server);
        const stream = await openai.completions.create({ model: MODEL_ID, prompt: "Once upon a time", max_tokens: 1500,
            ignore_eos: true, stream: true }, { signal: controller.signal });
        const it = stream[Symbol.asyncIterator]();
        await it.next();
        controller.abort();
        await it.next().catch(() => {});
        // the slot is free again well before the 1500 tokens (>= 7.5 s) would have run
        const t0 = Date.now();
        let busy = 1;
        while (busy !== 0 && Date.now() - t0 < 5000) {
            const m = await request(server, "GET", "/metrics");
            busy = Number(m.text.match(/^nucleus_slots_busy (\d+)/m)[1]);
            if (busy) await sleep(20);
        }
        assert.equal(busy, 0, "the slot was not freed");
        const r = await openai.completions.create({ model: MODEL_ID, prompt: "The cat", max_tokens: 4 });
        assert.equal(r.choices.length, 1);
        const m = await request(server, "GET", "/metrics");
        assert.match(m.text, /^nucleus_requests_cancelled_total [1-9]/m);
    });
});
