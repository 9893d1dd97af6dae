// The promises issue 20 found broken, each kept: generated NUL bytes reach
// the client as \u0000; bodies with raw control characters, raw NUL bytes or
// a key twice are refused by name; deep nesting is named as such.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import {
    MODEL_ID, assertCleanExit, client, collectStream, rawExchange, rawPost, rawStatus, request,
    startServer,
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
