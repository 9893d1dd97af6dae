// The promises issue 20 found broken, each kept: generated NUL bytes reach
// the client as \u0000; bodies with raw control characters, raw NUL bytes or
// a key twice are refused by name; deep nesting is named as such; broken
// body framing (RFC 9112 section 6.3) is refused and the connection closed;
// HEAD works where GET does; requests that trickle in are cut off at
// --timeout and one address cannot take every connection.
import assert from "node:assert/strict";
import net from "node:net";
import { after, before, describe, test } from "node:test";
import {
    MODEL, MODEL_ID, NUCLEUS, assertCleanExit, client, collectStream, rawExchange, rawPost, rawStatus,
    request, sleep, startServer,
} from "./helpers.mjs";

// The JSON body of a raw HTTP answer (plain or chunked).
const rawJson = (text) => JSON.parse(text.slice(text.indexOf("\r\n\r\n") + 4).replace(/^[0-9a-f]+\r\n/i, ""));

let server, openai;
before(async () => {
    server = await startServer(["--parallel", "4", "--ctx", "512"]);
    openai = client(server);
});
after(async () => assertCleanExit(assert, await server.stop()));

describe("NUL bytes in generated text", () => {
    // stories260K's token 3 is the byte-fallback token <0x00> (its vocabulary:
    // <unk>, <s>, </s>, then <0x00>..<0xFF>), so a bias of 100 makes NUL bytes.
    const nul = "\u0000";
    test("completions, chat and their streams keep them as \\u0000", async () => {
        const args = { model: MODEL_ID, max_tokens: 3, temperature: 0, logit_bias: { 3: 100 } };
        const c = await openai.completions.create({ ...args, prompt: "Once", logprobs: 1 });
        assert.equal(c.choices[0].text, nul.repeat(3));
        assert.deepEqual(c.choices[0].logprobs.tokens, [nul, nul, nul]);
        const ch = await openai.chat.completions.create({ ...args, messages: [{ role: "user", content: "Hi" }], logprobs: true });
        assert.equal(ch.choices[0].message.content, nul.repeat(3));
        assert.equal(ch.choices[0].logprobs.content[0].token, nul);
        assert.deepEqual(ch.choices[0].logprobs.content[0].bytes, [0]);
        const s = await collectStream(await openai.completions.create({ ...args, prompt: "Once", stream: true }), "completion");
        assert.equal(s.texts[0], nul.repeat(3));
        const sc = await collectStream(await openai.chat.completions.create({ ...args, messages: [{ role: "user", content: "Hi" }], stream: true }));
        assert.equal(sc.texts[0], nul.repeat(3));
    });

    test("/detokenize keeps them too", async () => {
        const d = await request(server, "POST", "/detokenize", { body: { tokens: [3, 3] } });
        assert.equal(d.status, 200);
        assert.equal(d.json.content, nul + nul);
        assert.match(d.text, /"\\u0000\\u0000"/);
    });
});

describe("strict JSON bodies", () => {
    const refuse = async (bytes, pattern, what) => {
        const ans = await rawExchange(server, [rawPost("/v1/completions", bytes)]);
        assert.equal(rawStatus(ans), 400, `${what}: ${ans.slice(0, 300)}`);
        assert.match(rawJson(ans).error.message, pattern, what);
    };
    test("a raw NUL byte inside a string is refused, not a cut string", async () => {
        await refuse(Buffer.from('{"prompt":"a\u0000bcd","max_tokens":1}', "latin1"), /raw NUL byte inside a string at byte 12/, "raw NUL");
    });
    test("raw control characters inside strings are refused", async () => {
        for (const c of [1, 9, 10, 13, 31])
            await refuse(Buffer.from(`{"prompt":"a${String.fromCharCode(c)}b","max_tokens":1}`, "latin1"),
                new RegExp(`raw control character \\(U\\+00${c.toString(16).toUpperCase().padStart(2, "0")}\\)`), `U+${c}`);
    });
    test("a key twice in one object is refused, also when escaped differently", async () => {
        await refuse('{"prompt":"a","max_tokens":1,"max_tokens":5}', /key "max_tokens" twice/, "duplicate");
        await refuse('{"prompt":"a","max_tokens":1,"\\u006dax_tokens":5}', /key "max_tokens" twice/, "escaped duplicate");
        await refuse('{"prompt":"a","logit_bias":{"3":1,"3":2}}', /key "3" twice/, "nested duplicate");
        const chat = await request(server, "POST", "/v1/chat/completions", { body: '{"messages":[{"role":"user","role":"system","content":"x"}]}' });
        assert.equal(chat.status, 400);
        assert.match(chat.json.error.message, /key "role" twice/);
        const tok = await request(server, "POST", "/tokenize", { body: '{"content":"a","content":"b"}' });
        assert.equal(tok.status, 400);
        assert.match(tok.json.error.message, /key "content" twice/);
        // the same key in different objects is fine
        const ok = await request(server, "POST", "/v1/completions", { body: '{"prompt":"a","max_tokens":1,"logit_bias":{"max_tokens":1}}' });
        assert.equal(ok.status, 400); // a logit_bias key must be a token id ...
        assert.match(ok.json.error.message, /logit_bias/); // ... and that is what is said
    });
    test("nesting deeper than the limit is named, not 'not valid JSON'", async () => {
        const schema = "{\"type\":\"array\",\"items\":".repeat(1000) + "{}" + "}".repeat(1000);
        const body = `{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"n","schema":${schema}}}}`;
        const r = await request(server, "POST", "/v1/chat/completions", { body });
        assert.equal(r.status, 400);
        assert.match(r.json.error.message, /nests arrays and objects more than 256 deep/);
    });
});

describe("HTTP framing and methods", () => {
    const post = (headers, body) => Buffer.from(`POST /v1/completions HTTP/1.1\r\nHost: x\r\n${headers}\r\n${body}`);
    test("two different Content-Length headers: 400 and the connection closed", async () => {
        const body = '{"prompt":"Hi","max_tokens":1}';
        for (const headers of [`Content-Length: 5\r\nContent-Length: ${body.length}\r\n`,
            `Content-Length: ${body.length}\r\nContent-Length: 5\r\n`, `Content-Length: 5, ${body.length}\r\n`]) {
            // the connection is left open on our side: the server must close it
            const ans = await rawExchange(server, [post(headers, body)], { idleMs: 8000 });
            assert.equal(rawStatus(ans), 400, ans.slice(0, 300));
            assert.match(ans, /\r\nConnection: close\r\n/i);
            // (a list in one header is libmicrohttpd's to refuse, with its own page)
            if (!headers.includes(",")) assert.match(rawJson(ans).error.message, /Content-Length headers disagree/);
        }
        // the same length twice is one length (RFC 9110 section 8.6)
        const same = await rawExchange(server, [post(`Content-Length: ${body.length}\r\nContent-Length: ${body.length}\r\nConnection: close\r\n`, body)]);
        assert.equal(rawStatus(same), 200, same.slice(0, 300));
    });
    test("Content-Length with Transfer-Encoding: 400 and the connection closed", async () => {
        const chunk = '{"prompt":"Hi","max_tokens":1}';
        const body = `${chunk.length.toString(16)}\r\n${chunk}\r\n0\r\n\r\n`;
        const ans = await rawExchange(server, [post(`Content-Length: 4\r\nTransfer-Encoding: chunked\r\n`, body)], { idleMs: 8000 });
        assert.equal(rawStatus(ans), 400, ans.slice(0, 300));
        assert.match(ans, /\r\nConnection: close\r\n/i);
        assert.match(rawJson(ans).error.message, /both Content-Length and Transfer-Encoding/);
        assert.equal(ans.match(/HTTP\/1\.1/g).length, 1, "nothing after the refusal is read as a request");
    });
    test("HEAD goes where GET does; a long method name is named whole", async () => {
        for (const p of ["/health", "/v1/models", "/"]) {
            const r = await request(server, "HEAD", p);
            assert.equal(r.status, 200, p);
            assert.equal(r.text, "");
        }
        const post = await request(server, "HEAD", "/v1/completions");
        assert.equal(post.status, 405);
        assert.equal(post.headers.allow, "POST");
        const get = await request(server, "DELETE", "/health");
        assert.equal(get.status, 405);
        assert.equal(get.headers.allow, "GET, HEAD");
        const ans = await rawExchange(server, [Buffer.from("PROPPATCHX /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")]);
        assert.equal(rawStatus(ans), 405);
        assert.match(rawJson(ans).error.message, /^PROPPATCHX is not allowed on \/health/);
    });
});

describe("slow clients", () => {
    let slow;
    before(async () => {
        slow = await startServer(["--timeout", "2", "--max-connections", "8", "--max-connections-per-address", "6"]);
    });
    after(async () => assertCleanExit(assert, await slow.stop()));
    // Sends a request one byte every pauseMs, leaving the socket open.
    const trickle = (bytes, pauseMs) => rawExchange(slow, [...Buffer.from(bytes)].map((b) => Buffer.from([b])), { pauseMs, idleMs: 15000, timeoutMs: 30000 });

    test("headers sent a byte at a time are cut off at --timeout with 408", async () => {
        const t0 = Date.now();
        const ans = await trickle(`GET /health HTTP/1.1\r\nHost: x\r\nX-Pad: ${"y".repeat(60)}\r\n\r\n`, 100);
        const ms = Date.now() - t0;
        assert.equal(rawStatus(ans), 408, ans.slice(0, 200));
        assert.ok(ms >= 1800 && ms < 12000, `closed after ${ms} ms, want about 2000`);
    });
    test("a body sent a byte at a time is cut off too; a quick slow client is served", async () => {
        const body = JSON.stringify({ prompt: "Once", max_tokens: 2, pad: "z".repeat(60) });
        const cut = await trickle(rawPost("/v1/completions", body), 50);
        assert.equal(rawStatus(cut), 408, cut.slice(0, 200));
        // in 10 pieces 50 ms apart: slow, but whole well within the 2 s
        const whole = rawPost("/v1/completions", JSON.stringify({ prompt: "Once", max_tokens: 2 }));
        const step = Math.ceil(whole.length / 10);
        const ok = await rawExchange(slow, Array.from({ length: 10 }, (_, k) => whole.subarray(k * step, (k + 1) * step)), { pauseMs: 50 });
        assert.equal(rawStatus(ok), 200, ok.slice(0, 200));
    });
    test("connections from one address are bounded, and trickling ones do not lock others out", async () => {
        // six trickling sockets fill this address's share ...
        const hogs = Array.from({ length: 6 }, () => trickle(`GET /health HTTP/1.1\r\nHost: x\r\nX-Pad: ${"y".repeat(200)}\r\n\r\n`, 100));
        await sleep(300);
        // ... so a seventh is closed at once, without an answer
        const seventh = await rawExchange(slow, [Buffer.from("GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")], { idleMs: 3000 });
        assert.equal(rawStatus(seventh), 0, seventh.slice(0, 200));
        // and within the deadline they are gone: requests are served again
        const answers = await Promise.all(hogs);
        for (const a of answers) assert.equal(rawStatus(a), 408);
        const r = await request(slow, "GET", "/health");
        assert.equal(r.status, 200);
    });
});

describe("requests are checked whole before the first byte", () => {
    test("a stream that the engine would refuse is a 400, as without stream", async () => {
        const bodies = [
            { prompt: "Once", max_tokens: 2, regex: "abcdefghij" },
            { prompt: "Once", max_tokens: 3, choice: ["a very long answer indeed", "another long answer"] },
        ];
        for (const b of bodies) {
            const plain = await request(server, "POST", "/v1/completions", { body: b });
            assert.equal(plain.status, 400, plain.text);
            const streamed = await request(server, "POST", "/v1/completions", { body: { ...b, stream: true } });
            assert.equal(streamed.status, 400, streamed.text);
            assert.equal(streamed.json.error.message, plain.json.error.message);
            assert.match(streamed.json.error.message, /cannot finish this grammar/);
            assert.ok(["regex", "choice"].includes(streamed.json.error.param), streamed.text);
        }
    });
});

describe("no silent truncation", () => {
    // this server: --parallel 4 --ctx 512, a KV cache of 2048 cells
    const ids = (n) => [1, ...Array(n - 1).fill(261)]; // <s> then " a" (token 261) n - 1 times
    test("a prompt near the context with max_tokens past it is a 400, not cut short", async () => {
        const r = await request(server, "POST", "/v1/completions", { body: { prompt: ids(500), max_tokens: 20 } });
        assert.equal(r.status, 400, r.text);
        assert.equal(r.json.error.param, "max_tokens");
        assert.equal(r.json.error.code, "context_length_exceeded");
        assert.match(r.json.error.message, /the prompt has 500 tokens and max_tokens is 20: 520 tokens, more than a request's context of 512 .*at most 12/);
        const ok = await request(server, "POST", "/v1/completions", { body: { prompt: ids(500), max_tokens: 12, ignore_eos: true } });
        assert.equal(ok.status, 200, ok.text);
        assert.equal(ok.json.usage.completion_tokens, 12);
        const streamed = await request(server, "POST", "/v1/completions", { body: { prompt: ids(500), max_tokens: 20, stream: true } });
        assert.equal(streamed.status, 400, streamed.text);
    });
    test("n x max_tokens beyond the KV cache is a 400 naming the figures", async () => {
        for (const stream of [false, true]) {
            const r = await request(server, "POST", "/v1/completions", { body: { prompt: "Once", n: 8, max_tokens: 500, ignore_eos: true, stream } });
            assert.equal(r.status, 400, r.text);
            assert.equal(r.json.error.code, "context_length_exceeded");
            assert.match(r.json.error.message, /8 samples .* of up to 500 tokens after 2 prompt tokens need 4002 KV cache cells; the cache holds 2048 \(--ctx 512 x --parallel 4\).*at most 255 each/);
        }
        const best = await request(server, "POST", "/v1/completions", { body: { prompt: "Once", n: 2, best_of: 6, max_tokens: 400 } });
        assert.equal(best.status, 400, best.text);
    });
    test("what fits is generated in full: every choice gets all its tokens", async () => {
        const r = await openai.completions.create({ model: MODEL_ID, prompt: "Once", n: 8, max_tokens: 250, ignore_eos: true, temperature: 1, seed: 3 });
        assert.equal(r.choices.length, 8);
        assert.equal(r.usage.completion_tokens, 8 * 250);
        for (const c of r.choices) assert.equal(c.finish_reason, "length");
        // with max_tokens left out, each of n = 8 chat choices gets an equal share of the cache
        const ch = await request(server, "POST", "/v1/chat/completions", { body: { messages: [{ role: "user", content: "Hi" }], n: 8, ignore_eos: true, temperature: 0 } });
        assert.equal(ch.status, 200, ch.text);
        const share = Math.floor((2048 - ch.json.usage.prompt_tokens) / 8);
        assert.equal(ch.json.usage.completion_tokens, 8 * share);
    });
});

describe("messages say what happened", () => {
    test("a value just past its maximum is shown as sent", async () => {
        const r = await request(server, "POST", "/v1/completions", { body: '{"prompt":"a","temperature":2.0000001}' });
        assert.equal(r.status, 400);
        assert.equal(r.json.error.message, "'temperature' is 2.0000001, greater than the maximum of 2");
    });
    test("every 64-bit seed is taken exactly", async () => {
        const run = async (seed) => {
            const r = await request(server, "POST", "/v1/completions", { body: `{"prompt":"Once","max_tokens":24,"temperature":1.5,"seed":${seed}}` });
            assert.equal(r.status, 200, `${seed}: ${r.text}`);
            return r.json.choices[0].text;
        };
        for (const seed of ["-9223372036854775808", "9223372036854775807"]) assert.equal(await run(seed), await run(seed));
        // 2^53 + 1 is not 2^53 (a double would make them one seed)
        assert.notEqual(await run("9007199254740993"), await run("9007199254740992"));
        assert.notEqual(await run("-9223372036854775808"), await run("-9223372036854775807"));
        for (const [seed, want] of [["9223372036854775808", /greater than the maximum of 9223372036854775807/],
            ["-9223372036854775809", /less than the minimum of -9223372036854775808/],
            ["9.3e18", /written as digits/], ["1.5", /must be an integer/]]) {
            const r = await request(server, "POST", "/v1/completions", { body: `{"prompt":"a","seed":${seed}}` });
            assert.equal(r.status, 400, seed);
            assert.match(r.json.error.message, want, seed);
        }
    });
    test("the log counts a cancelled request's tokens and does not call it an internal error", async () => {
        const logged = await startServer(["--test-step-delay-ms", "5"]);
        try {
            for (const stream of [false, true]) {
                // sends the request, then hangs up after a second (the answer still coming)
                const body = JSON.stringify({ prompt: "Once", max_tokens: 2000, ignore_eos: true, stream });
                const sock = net.connect(logged.port, "127.0.0.1");
                sock.on("error", () => {});
                sock.write(rawPost("/v1/completions", body));
                await sleep(1000);
                sock.destroy();
            }
            let lines = [];
            for (let i = 0; i < 100 && lines.length < 2; i++) {
                await sleep(50);
                lines = logged.stderr().split("\n").filter((l) => /POST \/v1\/completions/.test(l));
            }
            assert.equal(lines.length, 2, logged.stderr());
            for (const l of lines) {
                assert.match(l, /\(connection closed early\)/);
                const made = Number(l.match(/completion=(\d+)/)[1]);
                assert.ok(made > 0 && made < 2000, l);
            }
            assert.match(lines[0], / 499 /);
            assert.doesNotMatch(logged.stderr(), /internal error|application error/i);
        } finally {
            assertCleanExit(assert, await logged.stop());
        }
    });
    test("a busy port is named in the error", async () => {
        const { spawnSync } = await import("node:child_process");
        const r = spawnSync(NUCLEUS, ["serve", "-m", MODEL, "--host", "127.0.0.1", "--port", String(server.port), "-t", "1"],
            { encoding: "utf8", timeout: 60000 });
        assert.equal(r.status, 1);
        assert.match(r.stderr, new RegExp(`cannot listen on 127\\.0\\.0\\.1:${server.port} \\(Address already in use\\)`));
        assert.doesNotMatch(r.stderr, /port 0\b/);
    });
});

describe("JSON Schema errors name the real problem", () => {
    const ask = (schema) => request(server, "POST", "/v1/chat/completions", { body: {
        messages: [{ role: "user", content: "x" }], max_tokens: 4,
        response_format: { type: "json_schema", json_schema: { name: "s", schema } } } });
    test("too many anyOf / oneOf branches, too many allOf schemas, a $ref cycle", async () => {
        const branches = Array.from({ length: 300 }, (_, i) => ({ const: i }));
        for (const key of ["anyOf", "oneOf"]) {
            const r = await ask({ [key]: branches });
            assert.equal(r.status, 400, r.text);
            assert.match(r.json.error.message, new RegExp(`'${key}' has 300 branches; at most 256 are supported`));
        }
        const all = await ask({ allOf: Array.from({ length: 300 }, (_, i) => ({ properties: { [`p${i}`]: { type: "integer" } } })) });
        assert.equal(all.status, 400, all.text);
        assert.match(all.json.error.message, /combine more than 256 schemas/);
        const cycle = await ask({ $defs: { a: { allOf: [{ $ref: "#/$defs/a" }] } }, $ref: "#/$defs/a" });
        assert.equal(cycle.status, 400, cycle.text);
        assert.match(cycle.json.error.message, /nested more than 64 deep \(or a \$ref that refers to itself\)/);
        assert.equal(all.json.error.param, "response_format");
    });
});
