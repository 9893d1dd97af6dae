// api.js - talking to the server that served this page: JSON requests and
// server-sent event streams (fetch + a reader, so requests can be POSTs and
// be aborted). Every path is relative to this origin: the page never talks
// to anyone else.

const KEY = "nucleus.key";

export function apiKey() {
    return localStorage.getItem(KEY) || "";
}

export function setApiKey(k) {
    if (k) localStorage.setItem(KEY, k);
    else localStorage.removeItem(KEY);
}

function headers() {
    const h = { "Content-Type": "application/json" };
    const k = apiKey();
    if (k) h.Authorization = `Bearer ${k}`;
    return h;
}

// An error answer of the server ({"error": {"message", "param", ...}}).
export class ApiError extends Error {
    constructor(status, body) {
        const e = body && body.error ? body.error : null;
        super(e ? e.message : `HTTP ${status}`);
        this.status = status;
        this.param = e ? e.param : null;
    }
}

async function failure(resp) {
    let body = null;
    try { body = await resp.json(); } catch { /* not JSON */ }
    return new ApiError(resp.status, body);
}

export async function getJSON(path, { signal } = {}) {
    const resp = await fetch(path, { headers: headers(), signal });
    if (!resp.ok) throw await failure(resp);
    return resp.json();
}

export async function postJSON(path, body, { signal } = {}) {
    const resp = await fetch(path, { method: "POST", headers: headers(), body: JSON.stringify(body), signal });
    if (!resp.ok) throw await failure(resp);
    return resp.json();
}

// Streams a POST answered with server-sent events: calls onEvent with each
// parsed `data:` object until [DONE]. An error event rejects.
export async function postStream(path, body, onEvent, { signal } = {}) {
    const resp = await fetch(path, {
        method: "POST", headers: headers(), body: JSON.stringify({ ...body, stream: true }), signal,
    });
    if (!resp.ok) throw await failure(resp);
    const reader = resp.body.getReader();
    const decoder = new TextDecoder();
    let buf = "";
    for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += decoder.decode(value, { stream: true });
        let cut;
        while ((cut = buf.indexOf("\n\n")) >= 0) {
            const block = buf.slice(0, cut);
            buf = buf.slice(cut + 2);
            for (const line of block.split("\n")) {
                if (!line.startsWith("data: ")) continue;
                const data = line.slice(6);
                if (data === "[DONE]") return;
                const ev = JSON.parse(data);
                if (ev.error) throw new ApiError(500, ev);
                onEvent(ev);
            }
        }
    }
}

export function isAbort(e) {
    return e && (e.name === "AbortError" || e.name === "TimeoutError");
}
