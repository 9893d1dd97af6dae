// Liveness and readiness for load balancers: GET /health answers 200 while
// the server answers at all; GET /health/ready answers 503 (with Retry-After)
// when a request would be refused (the queue is full) or the server is
// shutting down. With --drain-delay, SIGTERM first turns readiness off while
// requests are still served, then shuts down as usual. /metrics carries
// nucleus_ready and nucleus_slots gauges (per replica: sums make the fleet's).
import assert from "node:assert/strict";
import { test } from "node:test";
import { assertCleanExit, request, sleep, startServer, withTimeout } from "./helpers.mjs";

const gauge = (text, name) => Number((text.match(new RegExp(`^${name} (\\S+)$`, "m")) ?? [])[1]);

test("ready when idle; /health and /health/ready answer without a key", async () => {
    const server = await startServer(["--api-key", "k", "--parallel", "3"]);
    const live = await request(server, "GET", "/health");
    assert.equal(live.status, 200);
    const ready = await request(server, "GET", "/health/ready");
    assert.equal(ready.status, 200);
    assert.deepEqual(ready.json, { status: "ready", queued: 0, max_queue: 64, slots_busy: 0, slots: 3 });
    const m = await request(server, "GET", "/metrics", { headers: { authorization: "Bearer k" } });
    assert.equal(gauge(m.text, "nucleus_ready"), 1);
    assert.equal(gauge(m.text, "nucleus_slots"), 3);
    assertCleanExit(assert, await server.stop());
});

test("not ready while the queue is full, ready again after", async () => {
    const server = await startServer(["--parallel", "1", "--max-queue", "1", "--test-step-delay-ms", "20"]);
    const body = { prompt: "Once upon a time", max_tokens: 60, ignore_eos: true };
    const first = request(server, "POST", "/v1/completions", { body });
    for (let i = 0; i < 200 && gauge((await request(server, "GET", "/metrics")).text, "nucleus_slots_busy") !== 1; i++)
        await sleep(10);
    assert.equal((await request(server, "GET", "/health/ready")).status, 200, "one running, none waiting");
    const second = request(server, "POST", "/v1/completions", { body });
    let ready;
    for (let i = 0; i < 200; i++) {
        ready = await request(server, "GET", "/health/ready");
        if (ready.status === 503) break;
        await sleep(10);
    }
    assert.equal(ready.status, 503);
    assert.equal(ready.json.status, "queue_full");
    assert.equal(ready.headers["retry-after"], "1");
    assert.equal(gauge((await request(server, "GET", "/metrics")).text, "nucleus_ready"), 0);
    const third = await request(server, "POST", "/v1/completions", { body });
    assert.equal(third.status, 503, "what readiness announced: a request now is refused");
    assert.equal((await first).status, 200);
    assert.equal((await second).status, 200);
    assert.equal((await request(server, "GET", "/health/ready")).status, 200);
    assertCleanExit(assert, await server.stop());
});

test("SIGTERM with --drain-delay: not ready but still serving, then exit 0", async () => {
    const server = await startServer(["--drain-delay", "3"]);
    const t0 = Date.now();
    server.proc.kill("SIGTERM");
    let ready;
    for (let i = 0; i < 100; i++) {
        ready = await request(server, "GET", "/health/ready");
        if (ready.status === 503) break;
        await sleep(10);
    }
    assert.equal(ready.status, 503);
    assert.equal(ready.json.status, "draining");
    assert.equal((await request(server, "GET", "/health")).status, 200, "still alive");
    const served = await request(server, "POST", "/v1/completions", { body: { prompt: "Once", max_tokens: 4 } });
    assert.equal(served.status, 200, "requests are still served during the delay");
    // wait for the exit without a second signal (which would cut the delay short)
    if (server.proc.exitCode === null && server.proc.signalCode === null)
        await withTimeout(new Promise((r) => server.proc.once("exit", r)), 30000, "exit after the delay");
    const st = await server.stop();
    assertCleanExit(assert, st);
    assert.ok(Date.now() - t0 >= 2500, "the delay was kept");
    assert.match(st.stderr, /not ready; serving for 3 s more/);
});

test("a second signal cuts the drain delay short", async () => {
    const server = await startServer(["--drain-delay", "60"]);
    server.proc.kill("SIGTERM");
    for (let i = 0; i < 100 && (await request(server, "GET", "/health/ready")).status !== 503; i++) await sleep(10);
    const t0 = Date.now();
    server.proc.kill("SIGTERM");
    assertCleanExit(assert, await withTimeout(server.stop(), 20000, "exit after the second signal"));
    assert.ok(Date.now() - t0 < 15000);
});
