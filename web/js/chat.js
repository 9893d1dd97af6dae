// chat.js - the chat view: conversations kept in this browser's storage,
// streamed replies (POST /v1/chat/completions with stream: true) coloured
// by token probability, stop, regenerate, edit, copy, a system prompt,
// sampling settings, JSON-schema mode, token counts and speed.
import { postStream, isAbort } from "./api.js";
import { $, el, fmt, tokenSpan } from "./util.js";

const STORE = "nucleus.conversations";
let convs = [];
let current = null;
let controller = null;

function load() {
    try { convs = JSON.parse(localStorage.getItem(STORE)) || []; } catch { convs = []; }
    if (!Array.isArray(convs)) convs = [];
}

function save() {
    try { localStorage.setItem(STORE, JSON.stringify(convs)); } catch { /* storage full: keep going */ }
}

function newConversation() {
    const c = { id: `c${Date.now().toString(36)}${Math.random().toString(36).slice(2, 6)}`, title: "New chat", messages: [] };
    convs.unshift(c);
    current = c;
    save();
    render();
    $("chat-input").focus();
}

function renderList() {
    const ul = $("chat-list");
    ul.replaceChildren();
    for (const c of convs) {
        const li = el("li", { class: c === current ? "current" : "" },
            el("a", { href: "#chat", text: c.title, onclick: (e) => { e.preventDefault(); current = c; render(); } }),
            el("button", { type: "button", title: "Delete this conversation", "aria-label": `Delete ${c.title}`,
                onclick: () => {
                    convs = convs.filter((x) => x !== c);
                    if (current === c) current = convs[0] || null;
                    save();
                    render();
                } }, "×"));
        ul.append(li);
    }
}

// The body of an assistant message: token spans when the tokens spell the
// text exactly, else the text.
function assistantBody(m) {
    const body = el("div", { class: "body" });
    const toks = m.tokens || [];
    if (toks.length && toks.map((t) => t.t).join("") === m.content) {
        for (const t of toks)
            body.append(tokenSpan(t.t, Math.exp(t.lp), (t.top || []).map(([text, lp]) => ({ text, p: Math.exp(lp) }))));
    } else {
        body.textContent = m.content;
    }
    return body;
}

function messageView(m, i) {
    const div = el("div", { class: `msg ${m.role}${m.error ? " error" : ""}`,
        "data-testid": m.role === "assistant" ? "chat-message-assistant" : `chat-message-${m.role}` });
    div.append(m.role === "assistant" ? assistantBody(m) : el("div", { class: "body", text: m.content }));
    if (m.stats) div.append(el("div", { class: "meta", text: m.stats }));
    const tools = el("div", { class: "tools" },
        el("button", { type: "button", class: "small", title: "Copy the text", onclick: () => copy(m.content) }, "copy"));
    if (m.role === "user")
        tools.append(el("button", { type: "button", class: "small", onclick: () => edit(div, i) }, "edit"));
    if (m.role === "assistant" && i === current.messages.length - 1)
        tools.append(el("button", { type: "button", class: "small", "data-testid": "chat-regenerate", onclick: regenerate }, "regenerate"));
    div.append(tools);
    return div;
}

async function copy(text) {
    try { await navigator.clipboard.writeText(text); } catch { /* no clipboard permission: nothing to do */ }
}

function render() {
    if (!current) {
        if (!convs.length) { newConversation(); return; }
        current = convs[0];
    }
    renderList();
    $("chat-system").value = current.system || "";
    const box = $("chat-messages");
    box.replaceChildren(...current.messages.map(messageView));
    box.scrollTop = box.scrollHeight;
}

function edit(div, i) {
    const m = current.messages[i];
    const ta = el("textarea", { rows: "3" });
    ta.value = m.content;
    const done = () => {
        m.content = ta.value;
        current.messages.length = i + 1; /* what followed answered the old text */
        save();
        render();
        generate();
    };
    div.replaceChildren(ta, el("div", { class: "tools" },
        el("button", { type: "button", class: "small", onclick: done }, "save and resend"),
        el("button", { type: "button", class: "small", onclick: render }, "cancel")));
    ta.addEventListener("keydown", (e) => {
        if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); done(); }
        if (e.key === "Escape") render();
    });
    ta.focus();
}

function num(id) {
    const v = $(id).value.trim();
    return v === "" ? undefined : Number(v);
}

// The request's sampling fields; throws on an unreadable schema.
function settings() {
    const body = {
        temperature: num("chat-temperature"), top_k: num("chat-top-k"), top_p: num("chat-top-p"),
        min_p: num("chat-min-p"), repetition_penalty: num("chat-rep"), presence_penalty: num("chat-presence"),
        frequency_penalty: num("chat-frequency"), seed: num("chat-seed"), max_tokens: num("chat-max"),
    };
    if ($("chat-json").checked) {
        let schema;
        try { schema = JSON.parse($("chat-schema").value); } catch (e) { throw new Error(`the JSON schema does not parse: ${e.message}`); }
        body.response_format = { type: "json_schema", json_schema: { name: "answer", schema } };
    }
    for (const k of Object.keys(body)) if (body[k] === undefined) delete body[k];
    return body;
}

function setBusy(busy) {
    $("chat-send").disabled = busy;
    $("chat-stop").disabled = !busy;
}

function regenerate() {
    if (controller) return;
    const msgs = current.messages;
    if (msgs.length && msgs[msgs.length - 1].role === "assistant") msgs.pop();
    save();
    render();
    generate();
}

function send() {
    const text = $("chat-input").value.trim();
    if (!text || controller) return;
    $("chat-input").value = "";
    if (!current.messages.length) current.title = text.slice(0, 40);
    current.messages.push({ role: "user", content: text });
    save();
    render();
    generate();
}

// Streams the assistant's answer to the conversation so far.
async function generate() {
    const conv = current;
    const messages = [];
    if (conv.system) messages.push({ role: "system", content: conv.system });
    for (const m of conv.messages) if (!m.error) messages.push({ role: m.role, content: m.content });
    const reply = { role: "assistant", content: "", tokens: [] };
    let body;
    try {
        body = { ...settings(), messages, logprobs: true, top_logprobs: 5, stream_options: { include_usage: true } };
    } catch (e) {
        $("chat-stats").textContent = e.message;
        return;
    }
    conv.messages.push(reply);
    const box = $("chat-messages");
    let view = messageView(reply, conv.messages.length - 1);
    box.append(view);
    controller = new AbortController();
    setBusy(true);
    const t0 = performance.now();
    let tFirst = 0, usage = null, finish = null;
    const refresh = () => {
        const v = messageView(reply, conv.messages.length - 1);
        view.replaceWith(v);
        view = v;
        box.scrollTop = box.scrollHeight;
    };
    try {
        await postStream("/v1/chat/completions", body, (ev) => {
            if (ev.usage) usage = ev.usage;
            const ch = ev.choices && ev.choices[0];
            if (!ch) return;
            if (ch.finish_reason) finish = ch.finish_reason;
            const piece = ch.delta && ch.delta.content;
            if (piece) {
                if (!tFirst) tFirst = performance.now();
                reply.content += piece;
            }
            for (const lp of (ch.logprobs && ch.logprobs.content) || [])
                reply.tokens.push({ t: lp.token, lp: lp.logprob, top: (lp.top_logprobs || []).map((x) => [x.token, x.logprob]) });
            if (piece) refresh();
        }, { signal: controller.signal });
    } catch (e) {
        if (isAbort(e)) finish = "stopped";
        else { reply.error = true; reply.content += (reply.content ? "\n" : "") + `error: ${e.message}`; }
    }
    const t1 = performance.now();
    const n = usage ? usage.completion_tokens : reply.tokens.length;
    const speed = tFirst && t1 > tFirst && n > 1 ? (n - 1) / ((t1 - tFirst) / 1000) : null;
    reply.stats = `${n} tokens` + (usage ? ` · prompt ${usage.prompt_tokens}` : "") +
        (tFirst ? ` · first token ${fmt((tFirst - t0) / 1000, 2)} s` : "") +
        (speed ? ` · ${fmt(speed, 1)} tokens/s` : "") + (finish ? ` · ${finish}` : "");
    $("chat-stats").textContent = reply.stats;
    controller = null;
    setBusy(false);
    save();
    if (current === conv) render();
}

export function initChat() {
    load();
    $("chat-form").addEventListener("submit", (e) => { e.preventDefault(); send(); });
    $("chat-input").addEventListener("keydown", (e) => {
        if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); send(); }
    });
    $("chat-stop").addEventListener("click", () => controller && controller.abort());
    $("chat-new").addEventListener("click", newConversation);
    $("chat-system").addEventListener("change", () => { current.system = $("chat-system").value; save(); });
    $("chat-json").addEventListener("change", () => { $("chat-schema").hidden = !$("chat-json").checked; });
    document.addEventListener("keydown", (e) => {
        if (e.key === "Escape" && controller) controller.abort();
    });
    render();
}
