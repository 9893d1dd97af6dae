// Shared helpers of the server tests: start `nucleus serve` on 127.0.0.1 with
// a free port, talk to it with the official OpenAI client, with plain HTTP
// requests or with raw sockets, and stop it (SIGTERM: it must exit 0 with no
// sanitizer report). Everything only talks to 127.0.0.1 and every wait is
// bounded in time.
import { execFileSync, spawn } from "node:child_process";
import fs from "node:fs";
import http from "node:http";
import net from "node:net";
import path from "node:path";
import OpenAI from "openai";

export const NUCLEUS = process.env.NUCLEUS_BIN;
export const SHARED = process.env.NUCLEUS_SHARED ?? path.resolve(import.meta.dirname, "../../../shared");
export const MODEL = path.join(SHARED, "models/stories260K.gguf");
export const MODEL_ID = "stories260K.gguf";
export const HOST = "127.0.0.1";

if (!NUCLEUS) throw new Error("set NUCLEUS_BIN to the nucleus executable");

// Resolves with the value of p, or rejects after ms.
export function withTimeout(p, ms, what) {
    let timer;
    return Promise.race([
        p.finally(() => clearTimeout(timer)),
        new Promise((_, reject) => { timer = setTimeout(() => reject(new Error(`timeout: ${what}`)), ms); }),
    ]);
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Starts the server with extra arguments, serving model (a file; false: no
// -m, the arguments name the models); resolves once it listens.
export async function startServer(args = [], { startMs = 60000, model = MODEL } = {}) {
    const argv = ["serve", ...(model ? ["-m", model] : []), "--host", HOST, "--port", "0", "-t", "1", ...args];
    const proc = spawn(NUCLEUS, argv, { stdio: ["ignore", "ignore", "pipe"] });
    let stderr = "";
    const exited = new Promise((resolve) => {
        proc.on("exit", (code, signal) => resolve({ code, signal }));
        proc.on("error", (e) => resolve({ code: -1, signal: null, error: e }));
    });
    const port = await withTimeout(new Promise((resolve, reject) => {
        proc.stderr.on("data", (d) => {
            stderr += d.toString();
            const m = stderr.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
            if (m) resolve(Number(m[1]));
        });
        exited.then(({ code, error }) => reject(new Error(`server exited (${code}) before listening: ${error ?? ""}\n${stderr}`)));
    }), startMs, "server start");
    const server = {
        port,
        proc,
        baseURL: `http://${HOST}:${port}/v1`,
        stderr: () => stderr,
        // SIGTERM, then the exit status and what was logged.
        async stop({ timeoutMs = 60000 } = {}) {
            if (proc.exitCode === null && proc.signalCode === null) proc.kill("SIGTERM");
            const st = await withTimeout(exited, timeoutMs, "server exit");
            return { ...st, stderr };
        },
    };
    return server;
}

// Asserts a stopped server's exit was clean: status 0 and no sanitizer report.
export function assertCleanExit(assert, st) {
    assert.equal(st.signal, null, `server died of ${st.signal}:\n${st.stderr.slice(-4000)}`);
    assert.equal(st.code, 0, `server exit code ${st.code}:\n${st.stderr.slice(-4000)}`);
    assert.doesNotMatch(st.stderr, /AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|ThreadSanitizer|runtime error:/,
        "sanitizer report in the server's log");
}

// The official client, no retries (a 503 must reach the test).
export function client(server, apiKey = "sk-no-key") {
    return new OpenAI({ baseURL: server.baseURL, apiKey, maxRetries: 0, timeout: 120000 });
}

// A plain HTTP request; resolves with {status, headers, text, json}.
export function request(server, method, urlPath, { body, headers = {}, timeoutMs = 60000 } = {}) {
    return withTimeout(new Promise((resolve, reject) => {
        const data = body === undefined ? undefined
            : Buffer.isBuffer(body) ? body : Buffer.from(typeof body === "string" ? body : JSON.stringify(body));
        const req = http.request({ host: HOST, port: server.port, method, path: urlPath, agent: false,
            headers: { ...(data ? { "content-type": "application/json", "content-length": data.length } : {}), ...headers } },
        (res) => {
            const chunks = [];
            res.on("data", (c) => chunks.push(c));
            res.on("end", () => {
                const text = Buffer.concat(chunks).toString();
                let json;
                try { json = JSON.parse(text); } catch { json = undefined; }
                resolve({ status: res.statusCode, headers: res.headers, text, json });
            });
            res.on("error", reject);
        });
        req.on("error", reject);
        if (data) req.write(data);
        req.end();
    }), timeoutMs, `${method} ${urlPath}`);
}

// Sends raw bytes over a socket (pieces with pauses between them) and
// resolves with everything the server sent back before closing (or
// after idleMs without news). halfClose ends our side after sending.
export function rawExchange(server, pieces, { pauseMs = 0, halfClose = false, idleMs = 5000, timeoutMs = 60000 } = {}) {
    return withTimeout(new Promise((resolve, reject) => {
        const sock = net.connect(server.port, HOST);
        const chunks = [];
        let idle;
        const finish = () => { clearTimeout(idle); sock.destroy(); resolve(Buffer.concat(chunks).toString("latin1")); };
        const arm = () => { clearTimeout(idle); idle = setTimeout(finish, idleMs); };
        sock.on("data", (d) => { chunks.push(d); arm(); });
        sock.on("close", finish);
        sock.on("error", (e) => (e.code === "ECONNRESET" || e.code === "EPIPE" ? finish() : reject(e)));
        sock.on("connect", async () => {
            for (const p of pieces) {
                if (sock.destroyed) break;
                sock.write(p);
                if (pauseMs) await sleep(pauseMs);
            }
            if (halfClose && !sock.destroyed) sock.end();
            arm();
        });
    }), timeoutMs, "raw exchange");
}

// The status code of a raw HTTP answer ("HTTP/1.1 400 Bad Request" -> 400), or 0.
export function rawStatus(text) {
    const m = text.match(/^HTTP\/1\.[01] (\d{3})/);
    return m ? Number(m[1]) : 0;
}

// A POST request as raw bytes, with a body of any bytes and any declared length.
export function rawPost(urlPath, body, { length, headers = "" } = {}) {
    const b = Buffer.isBuffer(body) ? body : Buffer.from(body);
    const head = `POST ${urlPath} HTTP/1.1\r\nHost: ${HOST}\r\nContent-Type: application/json\r\n` +
        `Content-Length: ${length ?? b.length}\r\nConnection: close\r\n${headers}\r\n`;
    return Buffer.concat([Buffer.from(head), b]);
}

// Reads a chat or completions stream from the OpenAI client into text per
// choice index, with the finish reasons and the usage chunk.
export async function collectStream(stream, kind = "chat") {
    const texts = [], finish = [], logprobs = [];
    let usage = null, chunks = 0;
    for await (const chunk of stream) {
        chunks++;
        if (chunk.usage) usage = chunk.usage;
        for (const c of chunk.choices ?? []) {
            const piece = kind === "chat" ? (c.delta?.content ?? "") : (c.text ?? "");
            texts[c.index] = (texts[c.index] ?? "") + piece;
            if (c.finish_reason) finish[c.index] = c.finish_reason;
            if (c.logprobs) logprobs[c.index] = [...(logprobs[c.index] ?? []),
                ...(kind === "chat" ? c.logprobs.content ?? [] : c.logprobs.tokens ?? [])];
        }
    }
    return { texts, finish, usage, chunks, logprobs };
}

// A tiny Qwen3 with random weights and the real Qwen2/2.5/3 tokenizer
// (shared/vocab), for the chat templates of reasoning models: made once by
// shared/tools/synth_gguf.py and kept in NU_ARCH_CACHE (or TMPDIR). Its text
// is meaningless; the tests force what they need with a regex.
export function thinkingModel() {
    const dir = process.env.NU_ARCH_CACHE ?? process.env.TMPDIR ?? "/tmp";
    const file = path.join(dir, "server-qwen3-tiny-qwen2vocab-seed3.gguf");
    if (!fs.existsSync(file)) {
        fs.mkdirSync(dir, { recursive: true });
        const part = `${file}.${process.pid}.part`;
        execFileSync("python3", [path.join(SHARED, "tools/synth_gguf.py"), "--shape", "tiny", "--arch", "qwen3",
            "--seed", "3", "--vocab-from", path.join(SHARED, "vocab/ggml-vocab-qwen2.gguf"), "-o", part],
        { stdio: ["ignore", "ignore", "inherit"], timeout: 300000 });
        fs.renameSync(part, file); // whole or not at all, even with two builds testing at once
    }
    return file;
}

// A tiny model of the architectures tests/arch/tiny_gguf.py writes (random
// weights, a vocabulary of shared/vocab cut to 2048 tokens), made once and
// kept in NU_ARCH_CACHE (or TMPDIR) as server-NAME.gguf.
export function archModel(name, arch, seed, vocab, extra = []) {
    const dir = process.env.NU_ARCH_CACHE ?? process.env.TMPDIR ?? "/tmp";
    const file = path.join(dir, `server-${name}.gguf`);
    if (!fs.existsSync(file)) {
        fs.mkdirSync(dir, { recursive: true });
        const part = `${file}.${process.pid}.part`;
        execFileSync("python3", [path.resolve(import.meta.dirname, "../arch/tiny_gguf.py"), "--arch", arch,
            "--seed", String(seed), "--vocab-from", path.join(SHARED, "vocab", vocab), "--vocab-size", "2048",
            ...extra, "-o", part], { stdio: ["ignore", "ignore", "inherit"], timeout: 300000 });
        fs.renameSync(part, file);
    }
    return file;
}

// A chat template of shared/chat_templates.
export const template = (name) => path.join(SHARED, "chat_templates", `${name}.jinja`);
