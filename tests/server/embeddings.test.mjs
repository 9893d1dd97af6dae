// POST /v1/embeddings through the official client (embeddings.create, which
// asks for base64 and decodes it): one unit vector per input, in order, with
// usage; llama.cpp's vectors for the same texts (mean and last-token pooling,
// refs/stories260K_embeddings.json); the same numbers as `nucleus embed` and
// as the float encoding; mean
// pooling equals the mean of the last-token states of the prefixes (a causal
// model's state at position i is the last one of the prefix ending there);
// token arrays; dimensions and bad inputs refused by name.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import { after, before, describe, test } from "node:test";
import { MODEL, MODEL_ID, NUCLEUS, assertCleanExit, client, request, startServer } from "./helpers.mjs";

const N_EMBD = 64; // stories260K's embedding length (its llama.embedding_length)
const norm = (v) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));

function assertClose(a, b, tol, what) {
    assert.equal(a.length, b.length, `${what}: lengths`);
    for (let i = 0; i < a.length; i++)
        assert.ok(Math.abs(a[i] - b[i]) <= tol * (1 + Math.abs(b[i])), `${what}[${i}]: ${a[i]} vs ${b[i]}`);
}

describe("embeddings", () => {
    let server, openai;
    const embed = (body) => request(server, "POST", "/v1/embeddings", { body });
    const tokens = async (text) =>
        (await request(server, "POST", "/tokenize", { body: { content: text, add_special: true } })).json.tokens;
    before(async () => {
        server = await startServer(["--parallel", "2", "--ctx", "256"]);
        openai = client(server);
    });
    after(async () => assertCleanExit(assert, await server.stop()));

    test("embeddings.create: a unit vector per input, in order, with usage", async () => {
        const input = ["Once upon a time", "The cat sat on the mat."];
        const r = await openai.embeddings.create({ model: MODEL_ID, input });
        assert.equal(r.object, "list");
        assert.equal(r.model, MODEL_ID);
        assert.equal(r.data.length, 2);
        r.data.forEach((d, i) => {
            assert.equal(d.object, "embedding");
            assert.equal(d.index, i);
            assert.equal(d.embedding.length, N_EMBD);
            assert.ok(Math.abs(norm(d.embedding) - 1) < 1e-5, `norm ${norm(d.embedding)}`);
        });
        const counts = (await tokens(input[0])).length + (await tokens(input[1])).length;
        assert.equal(r.usage.prompt_tokens, counts);
        assert.equal(r.usage.total_tokens, counts);
        const one = await openai.embeddings.create({ model: MODEL_ID, input: input[1] });
        assert.deepEqual(one.data[0].embedding, r.data[1].embedding, "batched or alone, the same vector");
    });

    test("llama.cpp's embeddings of the same texts, with mean and last-token pooling", async () => {
        const ref = JSON.parse(fs.readFileSync(new URL("./refs/stories260K_embeddings.json", import.meta.url)));
        for (const pooling of ["mean", "last"]) {
            const r = await openai.embeddings.create({ model: MODEL_ID, input: ref.texts, pooling });
            assert.equal(r.usage.prompt_tokens, ref[pooling].prompt_tokens);
            // llama.cpp's f16 KV cache and summation order: agreement to ~1e-4
            r.data.forEach((d, i) => assertClose(d.embedding, ref[pooling].vectors[i], 5e-4, `${pooling} ${i}`));
        }
        // stories260K's file names no pooling type: mean
        const byDefault = await openai.embeddings.create({ model: MODEL_ID, input: ref.texts });
        byDefault.data.forEach((d, i) => assertClose(d.embedding, ref.mean.vectors[i], 5e-4, `default ${i}`));
    });

    test("float and base64 encodings carry the same numbers", async () => {
        const f = await embed({ model: MODEL_ID, input: "Lily liked the sun.", encoding_format: "float" });
        const b = await embed({ model: MODEL_ID, input: "Lily liked the sun.", encoding_format: "base64" });
        assert.equal(f.status, 200, f.text);
        assert.equal(b.status, 200, b.text);
        const bytes = Buffer.from(b.json.data[0].embedding, "base64");
        const decoded = Array.from(new Float32Array(bytes.buffer, bytes.byteOffset, bytes.length / 4));
        assert.deepEqual(decoded, f.json.data[0].embedding.map(Math.fround));
    });

    test("the vectors are `nucleus embed`'s", async () => {
        const text = "Tom found a red ball in the garden.";
        const cli = spawnSync(NUCLEUS, ["embed", "-m", MODEL, "-p", text, "--json", "-t", "1"], { encoding: "utf8", timeout: 60000 });
        assert.equal(cli.status, 0, cli.stderr);
        const want = JSON.parse(cli.stdout)[0];
        const r = await embed({ model: MODEL_ID, input: text, encoding_format: "float" });
        assertClose(r.json.data[0].embedding, want, 1e-6, "server vs cli");
    });

    test("mean pooling is the mean of the prefixes' last-token states; token arrays", async () => {
        const ids = await tokens("Once upon a time there was a little dog named Max.");
        assert.ok(ids.length > 8);
        const prefixes = ids.map((_, i) => ids.slice(0, i + 1));
        const last = await embed({ model: MODEL_ID, input: prefixes, pooling: "last", normalize: false, encoding_format: "float" });
        assert.equal(last.status, 200, last.text);
        assert.equal(last.json.data.length, ids.length);
        assert.equal(last.json.usage.prompt_tokens, ids.length * (ids.length + 1) / 2);
        const want = new Array(N_EMBD).fill(0);
        for (const d of last.json.data) d.embedding.forEach((x, j) => { want[j] += x / ids.length; });
        const mean = await embed({ model: MODEL_ID, input: ids, pooling: "mean", normalize: false, encoding_format: "float" });
        assert.equal(mean.status, 200, mean.text);
        assertClose(mean.json.data[0].embedding, want, 1e-5, "mean pooling");
        // the first token's state is the last of the one-token prefix
        const first = await embed({ model: MODEL_ID, input: [ids], pooling: "first", normalize: false, encoding_format: "float" });
        assertClose(first.json.data[0].embedding, last.json.data[0].embedding, 1e-6, "first pooling");
        // a text and its tokens (BOS included) give the same vector
        const byText = await embed({ model: MODEL_ID, input: "Once upon a time there was a little dog named Max.", pooling: "mean", normalize: false, encoding_format: "float" });
        assert.deepEqual(byText.json.data[0].embedding, mean.json.data[0].embedding);
        // normalising divides by the length
        const unit = await embed({ model: MODEL_ID, input: ids, pooling: "mean", encoding_format: "float" });
        const n = norm(mean.json.data[0].embedding);
        assertClose(unit.json.data[0].embedding, mean.json.data[0].embedding.map((x) => x / n), 1e-6, "normalised");
    });

    test("dimensions: the model's own length is accepted, another is refused by name", async () => {
        const ok = await embed({ model: MODEL_ID, input: "hi", dimensions: N_EMBD });
        assert.equal(ok.status, 200, ok.text);
        await assert.rejects(openai.embeddings.create({ model: MODEL_ID, input: "hi", dimensions: 16 }), (e) => {
            assert.equal(e.status, 400);
            assert.equal(e.error?.param, "dimensions");
            assert.match(e.message, /64 dimensions/);
            return true;
        });
    });

    test("bad inputs are refused with the parameter named", async () => {
        const cases = [
            [{ input: "" }, 400, "input", /empty string/],
            [{ input: [] }, 400, "input", /empty array/],
            [{ input: [[]] }, 400, "input", /empty list/],
            [{}, 400, "input", /required/],
            [{ input: 3 }, 400, "input", /string or an array/],
            [{ input: [1, 100000] }, 400, "input", /token ids/],
            [{ input: [[1, 2], ["a"]] }, 400, "input", /input\[1\]/],
            [{ input: "hi", encoding_format: "binary" }, 400, "encoding_format", /float/],
            [{ input: "hi", pooling: "max" }, 400, "pooling", /mean/],
            [{ input: "hi", normalize: "yes" }, 400, "normalize", /boolean/],
            [{ input: "hi", temperature: 1 }, 400, "temperature", /Unrecognized/],
            [{ input: "Once upon a time ".repeat(80) }, 413, "input", /at most 256/],
        ];
        for (const [body, status, param, message] of cases) {
            const r = await embed({ model: MODEL_ID, ...body });
            assert.equal(r.status, status, `${JSON.stringify(body).slice(0, 80)}: ${r.text}`);
            assert.equal(r.json.error.param, param, r.text);
            assert.match(r.json.error.message, message);
        }
        const unknown = await embed({ model: "no-such-model", input: "hi" });
        assert.equal(unknown.status, 404, unknown.text);
        assert.equal(unknown.json.error.code, "model_not_found");
    });
});
