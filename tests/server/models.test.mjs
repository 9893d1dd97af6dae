// Several models in one server: -m A -m NAME=B and --models-dir; requests
// routed by their model field (the first model when they name none, the id
// without .gguf or with :latest too); each model loaded on first use, with
// its own context and limits; /v1/models with each one's state; unknown
// models 404 in OpenAI's and Ollama's shapes; --max-memory unloading the
// least recently used idle model to load another (never one in use) and
// loading it again; --idle-unload and Ollama's keep_alive.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import {
    MODEL, MODEL_ID, NUCLEUS, SHARED, assertCleanExit, collectStream, client, request, sleep, startServer,
} from "./helpers.mjs";

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "nucleus-models-"));
const TINY = path.join(tmp, "tiny-llama.gguf");

// A second model: a tiny random-weight Llama with the first 1000 tokens of a
// real SentencePiece vocabulary and a training context of 256.
before(() => {
    const py = spawnSync("python3", [path.join(SHARED, "tools/synth_gguf.py"), "--shape", "tiny", "--arch", "llama",
        "--seed", "3", "--vocab-from", path.join(SHARED, "vocab/ggml-vocab-llama-spm.gguf"), "--vocab-size", "1000",
        "-o", TINY], { encoding: "utf8", timeout: 120000 });
    assert.equal(py.status, 0, py.stderr);
});

const models = async (server) => {
    const r = await request(server, "GET", "/v1/models");
    assert.equal(r.status, 200, r.text);
    return Object.fromEntries(r.json.data.map((m) => [m.id, m]));
};
const complete = (server, model, extra = {}) => request(server, "POST", "/v1/completions",
    { body: { model, prompt: "Once upon a time", max_tokens: 20, temperature: 0, ...extra } });
// llama.cpp's greedy continuation of "Once upon a time" on stories260K (../shared/refs)
const GREEDY = ", there was";

describe("two models", () => {
    let server;
    before(async () => { server = await startServer(["-m", MODEL, "-m", `tiny=${TINY}`, "--parallel", "2"], { model: false }); });
    after(async () => assertCleanExit(assert, await server.stop()));

    test("both are listed, unloaded until asked for", async () => {
        assert.match(server.stderr(), /2 models, each loaded on first use: stories260K\.gguf, tiny/);
        const m = await models(server);
        assert.deepEqual(Object.keys(m), [MODEL_ID, "tiny"]);
        assert.equal(m[MODEL_ID].state, "unloaded");
        assert.equal(m.tiny.state, "unloaded");
        assert.equal(m.tiny.meta.architecture, "llama");
        assert.equal(m.tiny.meta.n_ctx_train, 256);
        assert.equal(m.tiny.meta.file_bytes, fs.statSync(TINY).size);
    });

    test("a request to each goes to its model; each has its own context", async () => {
        const a = await complete(server, MODEL_ID);
        assert.equal(a.status, 200, a.text);
        assert.equal(a.json.model, MODEL_ID);
        assert.ok(a.json.choices[0].text.startsWith(GREEDY), a.json.choices[0].text);
        let m = await models(server);
        assert.equal(m[MODEL_ID].state, "loaded");
        assert.equal(m.tiny.state, "unloaded");
        const b = await request(server, "POST", "/v1/chat/completions",
            { body: { model: "tiny", messages: [{ role: "user", content: "Hello" }], max_tokens: 5, temperature: 0 } });
        assert.equal(b.status, 200, b.text);
        assert.equal(b.json.model, "tiny");
        assert.equal(b.json.usage.completion_tokens, 5);
        m = await models(server);
        assert.equal(m.tiny.state, "loaded");
        assert.equal(m.tiny.meta.n_ctx_slot, 256);
        assert.equal(m.tiny.meta.n_vocab, 1000);
        assert.equal(m[MODEL_ID].meta.n_ctx_slot, 2048);
        assert.equal(m[MODEL_ID].meta.n_vocab, 512);
        // a prompt longer than tiny's context but not stories260K's
        const long = "Once upon a time ".repeat(80);
        assert.equal((await complete(server, "tiny", { prompt: long, max_tokens: 1 })).status, 413);
        assert.equal((await complete(server, MODEL_ID, { prompt: long, max_tokens: 1 })).status, 200);
        // token ids are checked against each model's own vocabulary
        assert.equal((await complete(server, MODEL_ID, { prompt: [900], max_tokens: 1 })).status, 400);
        assert.equal((await complete(server, "tiny", { prompt: [900], max_tokens: 1 })).status, 200);
    });

    test("both generate at once", async () => {
        const openai = client(server);
        const [a, b] = await Promise.all([MODEL_ID, "tiny"].map(async (model) =>
            collectStream(await openai.chat.completions.create({ model, messages: [{ role: "user", content: "Hi" }],
                max_tokens: 30, temperature: 0, stream: true }))));
        assert.equal(a.finish[0], "length");
        assert.equal(b.finish[0], "length");
        const alone = await openai.chat.completions.create({ model: MODEL_ID, messages: [{ role: "user", content: "Hi" }],
            max_tokens: 30, temperature: 0 });
        assert.equal(a.texts[0], alone.choices[0].message.content, "the same text with another model running");
    });

    test("names: none is the first model; without .gguf; with :latest", async () => {
        const none = await request(server, "POST", "/v1/completions", { body: { prompt: "Once upon a time", temperature: 0, max_tokens: 4 } });
        assert.equal(none.json.model, MODEL_ID);
        for (const name of ["stories260K", "stories260K:latest", "tiny:latest"]) {
            const r = await complete(server, name, { max_tokens: 2 });
            assert.equal(r.status, 200, `${name}: ${r.text}`);
            assert.equal(r.json.model, name.startsWith("tiny") ? "tiny" : MODEL_ID);
        }
        const one = await request(server, "GET", "/v1/models/stories260K");
        assert.equal(one.json.id, MODEL_ID);
    });

    test("an unknown model is a 404 in each API's shape", async () => {
        const o = await complete(server, "gpt-4o");
        assert.equal(o.status, 404);
        assert.equal(o.json.error.code, "model_not_found");
        assert.equal(o.json.error.param, "model");
        assert.match(o.json.error.message, /'gpt-4o' does not exist .*'stories260K\.gguf', 'tiny'/);
        const l = await request(server, "GET", "/v1/models/gpt-4o");
        assert.equal(l.status, 404);
        const ol = await request(server, "POST", "/api/chat", { body: { model: "gpt-4o", messages: [{ role: "user", content: "hi" }] } });
        assert.equal(ol.status, 404);
        assert.equal(typeof ol.json.error, "string", ol.text);
        assert.match(ol.json.error, /'gpt-4o' does not exist/);
        const e = await request(server, "POST", "/v1/embeddings", { body: { model: "gpt-4o", input: "hi" } });
        assert.equal(e.status, 404);
        const t = await request(server, "POST", "/tokenize", { body: { model: "gpt-4o", content: "hi" } });
        assert.equal(t.status, 404);
    });
});

describe("--max-memory", () => {
    let sizes; // each model's memory estimate, as /v1/models reports it once loaded
    before(async () => {
        const probe = await startServer(["-m", MODEL, "-m", `tiny=${TINY}`, "--parallel", "2"], { model: false });
        await complete(probe, MODEL_ID, { max_tokens: 1 });
        await complete(probe, "tiny", { max_tokens: 1 });
        const m = await models(probe);
        sizes = { [MODEL_ID]: m[MODEL_ID].meta.memory_bytes, tiny: m.tiny.meta.memory_bytes };
        assertCleanExit(assert, await probe.stop());
        assert.ok(sizes[MODEL_ID] > 0 && sizes.tiny > 0, JSON.stringify(sizes));
    });

    test("loading one unloads the other (idle) and the first comes back the same", async () => {
        // room for either model, not both
        const budget = Math.max(sizes[MODEL_ID], sizes.tiny) + Math.floor(Math.min(sizes[MODEL_ID], sizes.tiny) / 2);
        const server = await startServer(["-m", MODEL, "-m", `tiny=${TINY}`, "--parallel", "2",
            "--max-memory", String(budget)], { model: false });
        try {
            const first = await complete(server, MODEL_ID);
            assert.equal(first.status, 200, first.text);
            assert.equal((await complete(server, "tiny", { max_tokens: 3 })).status, 200);
            let m = await models(server);
            assert.equal(m.tiny.state, "loaded");
            assert.equal(m[MODEL_ID].state, "unloaded");
            assert.match(server.stderr(), /unloaded model stories260K\.gguf \(--max-memory: room for tiny\)/);
            const again = await complete(server, MODEL_ID);
            assert.equal(again.status, 200, again.text);
            assert.equal(again.json.choices[0].text, first.json.choices[0].text);
            m = await models(server);
            assert.equal(m[MODEL_ID].state, "loaded");
            assert.equal(m[MODEL_ID].meta.loads, 2);
            assert.equal(m.tiny.state, "unloaded");
        } finally {
            assertCleanExit(assert, await server.stop());
        }
    });

    test("a model in use is not unloaded: the other's request waits for it", async () => {
        const budget = Math.max(sizes[MODEL_ID], sizes.tiny) + Math.floor(Math.min(sizes[MODEL_ID], sizes.tiny) / 2);
        const server = await startServer(["-m", MODEL, "-m", `tiny=${TINY}`, "--parallel", "2",
            "--max-memory", String(budget), "--test-step-delay-ms", "20"], { model: false });
        try {
            const openai = client(server);
            const long = openai.chat.completions.create({ model: MODEL_ID, messages: [{ role: "user", content: "Hi" }],
                max_tokens: 40, temperature: 0, stream: true }).then((s) => collectStream(s));
            await sleep(300); // stories260K is loaded and generating
            const t0 = Date.now();
            const [a, b] = await Promise.all([long, complete(server, "tiny", { max_tokens: 2 })]);
            assert.equal(a.finish[0], "length", "the stream ran to its end");
            assert.equal(b.status, 200, b.text);
            assert.ok(Date.now() - t0 > 100, "the tiny model waited for the stream");
            assert.match(server.stderr(), /unloaded model stories260K\.gguf \(--max-memory/);
        } finally {
            assertCleanExit(assert, await server.stop());
        }
    });

    test("a model larger than the budget is refused by name", () => {
        const r = spawnSync(NUCLEUS, ["serve", "-m", MODEL, "--port", "0", "-t", "1", "--max-memory", "2M"],
            { encoding: "utf8", timeout: 60000 });
        assert.equal(r.status, 1, r.stderr);
        assert.match(r.stderr, /stories260K\.gguf' needs [\d.]+ MiB, more than --max-memory \(2\.0 MiB\)/);
        const bad = spawnSync(NUCLEUS, ["serve", "-m", MODEL, "--port", "0", "--max-memory", "lots"], { encoding: "utf8", timeout: 30000 });
        assert.equal(bad.status, 2, bad.stderr);
        assert.match(bad.stderr, /--max-memory: expects a size such as 4G/);
    });
});

describe("unloading idle models", () => {
    let server;
    before(async () => {
        server = await startServer(["-m", MODEL, "-m", `tiny=${TINY}`, "--idle-unload", "1"], { model: false });
    });
    after(async () => assertCleanExit(assert, await server.stop()));

    const waitState = async (id, state, ms) => {
        const end = Date.now() + ms;
        while (Date.now() < end) {
            if ((await models(server))[id].state === state) return true;
            await sleep(100);
        }
        return false;
    };

    test("--idle-unload unloads a model nobody used for that long; it loads again", async () => {
        assert.equal((await complete(server, "tiny", { max_tokens: 2 })).status, 200);
        assert.equal((await models(server)).tiny.state, "loaded");
        assert.ok(await waitState("tiny", "unloaded", 5000), "unloaded after 1 s idle");
        assert.match(server.stderr(), /unloaded model tiny \(idle for 1\.\d s\)/);
        assert.equal((await complete(server, "tiny", { max_tokens: 2 })).status, 200);
        const m = await models(server);
        assert.equal(m.tiny.state, "loaded");
        assert.equal(m.tiny.meta.loads, 2);
    });

    test("Ollama's keep_alive: 0 unloads after the request, -1 keeps it loaded", async () => {
        const r = await request(server, "POST", "/api/generate",
            { body: { model: MODEL_ID, prompt: "Once", stream: false, keep_alive: 0, options: { num_predict: 2 } } });
        assert.equal(r.status, 200, r.text);
        assert.ok(await waitState(MODEL_ID, "unloaded", 2000), "keep_alive 0");
        const k = await request(server, "POST", "/api/generate",
            { body: { model: MODEL_ID, prompt: "Once", stream: false, keep_alive: "-1m", options: { num_predict: 2 } } });
        assert.equal(k.status, 200, k.text);
        await sleep(1600);
        assert.equal((await models(server))[MODEL_ID].state, "loaded", "keep_alive -1m outlasts --idle-unload 1");
    });
});

describe("--models-dir and start-up checks", () => {
    const dir = path.join(tmp, "dir");
    before(() => {
        fs.mkdirSync(dir, { recursive: true });
        fs.symlinkSync(MODEL, path.join(dir, "a.gguf"));
        fs.symlinkSync(TINY, path.join(dir, "b.gguf"));
        fs.writeFileSync(path.join(dir, "notes.txt"), "not a model");
    });

    test("every .gguf file of the folder is served under its name", async () => {
        const server = await startServer(["--models-dir", dir], { model: false });
        try {
            assert.deepEqual(Object.keys(await models(server)), ["a.gguf", "b.gguf"]);
            const r = await complete(server, "a");
            assert.equal(r.status, 200, r.text);
            assert.ok(r.json.choices[0].text.startsWith(GREEDY));
            assert.equal((await complete(server, "b.gguf", { max_tokens: 2 })).status, 200);
        } finally {
            assertCleanExit(assert, await server.stop());
        }
    });

    test("options that cannot work are refused at start", () => {
        const serve = (args) => spawnSync(NUCLEUS, ["serve", "--port", "0", "-t", "1", ...args], { encoding: "utf8", timeout: 60000 });
        for (const [args, status, re] of [
            [["-m", MODEL, "-m", TINY, "--alias", "x"], 2, /--alias names the one model/],
            [["-m", MODEL, "-m", `x=${TINY}`, "--draft", MODEL], 2, /--draft serves a single model/],
            [["-m", MODEL, "-m", MODEL], 1, /two models are named 'stories260K\.gguf'/],
            [["--models-dir", path.join(tmp, "nowhere")], 1, /--models-dir .*nowhere: No such file/],
            [["--models-dir", tmp, "-m", "x=" + path.join(tmp, "missing.gguf")], 1, /missing\.gguf/],
        ]) {
            const r = serve(args);
            assert.equal(r.status, status, `${args.join(" ")}: ${r.stderr}`);
            assert.match(r.stderr, re);
        }
    });
});
