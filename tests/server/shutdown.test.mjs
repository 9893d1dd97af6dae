// Graceful shutdown: on SIGTERM / SIGINT the server stops accepting, lets
// in-flight requests finish within --shutdown-grace (then cancels them with
// an error), and exits 0. Also the start-up options: --chat-template, and a
// bad option is a clear error (--draft: speculative.test.mjs).
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { test } from "node:test";
import path from "node:path";
import { MODEL, MODEL_ID, NUCLEUS, SHARED, assertCleanExit, client, request, sleep, startServer, withTimeout } from "./helpers.mjs";

test("SIGTERM: in-flight streams finish, then exit 0", async () => {
    const server = await startServer(["--parallel", "2", "--test-step-delay-ms", "5"]);
    const openai = client(server);
    const stream = await openai.completions.create({ model: MODEL_ID, prompt: "Once upon a time", max_tokens: 120,
        ignore_eos: true, stream: true, stream_options: { include_usage: true } });
    const it = stream[Symbol.asyncIterator]();
    await it.next();
    server.proc.kill("SIGTERM");
    let usage = null, finish = null;
    for (;;) {
        const x = await withTimeout(it.next(), 30000, "stream after SIGTERM");
        if (x.done) break;
        if (x.value.usage) usage = x.value.usage;
        for (const c of x.value.choices) if (c.finish_reason) finish = c.finish_reason;
    }
    assert.equal(finish, "length");
    assert.equal(usage.completion_tokens, 120);
    const st = await server.stop();
    assertCleanExit(assert, st);
    assert.match(st.stderr, /shutting down/);
    await assert.rejects(request(server, "GET", "/health", { timeoutMs: 5000 }), "no longer listening");
});

test("SIGINT past the grace period: unfinished work is cancelled with an error, exit 0", async () => {
    const server = await startServer(["--parallel", "1", "--test-step-delay-ms", "5", "--shutdown-grace", "1"]);
    const openai = client(server);
    const stream = await openai.completions.create({ model: MODEL_ID, prompt: "Once upon a time", max_tokens: 1900,
        ignore_eos: true, stream: true });
    const queued = request(server, "POST", "/v1/completions", { body: { prompt: "The cat", max_tokens: 4 } });
    const it = stream[Symbol.asyncIterator]();
    await it.next();
    // the second request must be waiting in the queue before the signal
    for (let i = 0; i < 250; i++) {
        const m = await request(server, "GET", "/metrics");
        if (/^nucleus_queue_depth 1$/m.test(m.text)) break;
        await sleep(20);
    }
    const t0 = Date.now();
    server.proc.kill("SIGINT");
    await assert.rejects(async () => {
        for (;;) if ((await withTimeout(it.next(), 30000, "stream after SIGINT")).done) break;
    }, "the cut stream ends with an error event");
    const q = await queued;
    assert.equal(q.status, 503);
    assertCleanExit(assert, await server.stop());
    assert.ok(Date.now() - t0 < 15000);
});

test("--chat-template takes a built-in name or a Jinja file", async () => {
    const msgs = [{ role: "user", content: "Hello there" }];
    const tokens = async (args) => {
        const server = await startServer(args);
        try {
            const r = await client(server).chat.completions.create({ model: MODEL_ID, messages: msgs, max_tokens: 1 });
            const m = await request(server, "GET", "/v1/models");
            return [r.usage.prompt_tokens, m.json.data[0].meta.chat_template];
        } finally {
            assertCleanExit(assert, await server.stop());
        }
    };
    const [plain, plainName] = await tokens([]);
    const [chatml, chatmlName] = await tokens(["--chat-template", "chatml"]);
    const [file, fileName] = await tokens(["--chat-template", path.join(SHARED, "chat_templates/zephyr_tinyllama.jinja")]);
    assert.equal(plainName, "plain");
    assert.equal(chatmlName, "chatml");
    assert.equal(fileName, "file");
    assert.ok(chatml > plain && file > plain, `${plain} ${chatml} ${file}`);
    const bad = spawnSync(NUCLEUS, ["serve", "-m", MODEL, "--port", "0", "--chat-template", "no-such-template"], { encoding: "utf8", timeout: 30000 });
    assert.equal(bad.status, 1);
    assert.match(bad.stderr, /chat-template/);
});

test("a bad start-up option is refused", () => {
    const bad = spawnSync(NUCLEUS, ["serve", "-m", MODEL, "--parallel", "0"], { encoding: "utf8", timeout: 30000 });
    assert.equal(bad.status, 2);
});
