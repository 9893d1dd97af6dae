// End-to-end tests of the web page `nucleus serve` serves at /, in Debian's
// headless Chromium driven by playwright-core, against stories260K on
// 127.0.0.1. Every request the browser makes is checked to stay on the
// server's own origin, and any console error or page error fails the test.
// Screenshots go to $SHOTS (the build's tmp dir).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { chromium } from "playwright-core";

const NUCLEUS = process.env.NUCLEUS_BIN;
const SHARED = process.env.NUCLEUS_SHARED;
const SHOTS = process.env.SHOTS ?? os.tmpdir();
const MODEL = path.join(SHARED ?? "", "models/stories260K.gguf");
if (!NUCLEUS || !SHARED) throw new Error("set NUCLEUS_BIN and NUCLEUS_SHARED");

let server, browser, base, profile;
let stderr = "";

function withTimeout(p, ms, what) {
    let t;
    return Promise.race([p.finally(() => clearTimeout(t)),
        new Promise((_, reject) => { t = setTimeout(() => reject(new Error(`timeout: ${what}`)), ms); })]);
}

before(async () => {
    // a slow model (--test-step-delay-ms) so that "stop" has a generation to stop
    server = spawn(NUCLEUS, ["serve", "-m", MODEL, "--host", "127.0.0.1", "--port", "0", "-t", "1",
        "--test-step-delay-ms", "15"], { stdio: ["ignore", "ignore", "pipe"] });
    const port = await withTimeout(new Promise((resolve, reject) => {
        server.stderr.on("data", (d) => {
            stderr += d;
            const m = stderr.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
            if (m) resolve(Number(m[1]));
        });
        server.on("exit", (code) => reject(new Error(`server exited (${code}):\n${stderr}`)));
        server.on("error", (e) => reject(new Error(`cannot start ${NUCLEUS}: ${e.message}`)));
    }), 60000, "server start");
    base = `http://127.0.0.1:${port}`;
    profile = fs.mkdtempSync(path.join(os.tmpdir(), "nucleus-chromium-"));
    // a fresh profile (playwright passes it as --user-data-dir)
    browser = await chromium.launchPersistentContext(profile, {
        executablePath: "/usr/bin/chromium",
        headless: true,
        args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync"],
    });
});

after(async () => {
    if (browser) await browser.close();
    if (profile) fs.rmSync(profile, { recursive: true, force: true });
    if (server && server.exitCode === null) {
        const exited = new Promise((r) => server.on("exit", (code, signal) => r({ code, signal })));
        server.kill("SIGTERM");
        const st = await withTimeout(exited, 60000, "server exit");
        assert.equal(st.code, 0, `server exit ${st.code} ${st.signal}\n${stderr.slice(-3000)}`);
        assert.doesNotMatch(stderr, /AddressSanitizer|runtime error:/);
    }
});

// A page that records console errors, page errors and every request's URL.
async function openPage(hash = "", viewport = { width: 1280, height: 900 }) {
    const page = await browser.newPage();
    await page.setViewportSize(viewport);
    const context = page; /* closed at the end of each test */
    const problems = [], urls = [];
    page.on("console", (m) => { if (m.type() === "error") problems.push(`console: ${m.text()}`); });
    page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
    page.on("request", (r) => urls.push(r.url()));
    page.on("requestfailed", (r) => {
        const f = r.failure();
        if (!(f && /ERR_ABORTED/.test(f.errorText))) problems.push(`request failed: ${r.url()} ${f && f.errorText}`);
    });
    await page.goto(`${base}/${hash}`);
    const check = () => {
        assert.deepEqual(problems.slice(0, 5), [], "console or page errors");
        const foreign = urls.filter((u) => !u.startsWith(`${base}/`) && !u.startsWith("data:"));
        assert.deepEqual(foreign, [], "requests that left the server");
    };
    return { page, context, check };
}

async function shot(page, name) {
    fs.mkdirSync(SHOTS, { recursive: true });
    await page.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage: true });
}

test("the page and its files are served with types and revalidation", async () => {
    const r = await fetch(`${base}/`);
    assert.equal(r.status, 200);
    assert.match(r.headers.get("content-type"), /^text\/html/);
    assert.equal(r.headers.get("cache-control"), "no-cache");
    assert.match(r.headers.get("content-security-policy"), /connect-src 'self'/);
    const etag = r.headers.get("etag");
    assert.ok(etag);
    const again = await fetch(`${base}/`, { headers: { "If-None-Match": etag } });
    assert.equal(again.status, 304);
    const js = await fetch(`${base}/js/app.js`);
    assert.match(js.headers.get("content-type"), /^text\/javascript/);
    const css = await fetch(`${base}/app.css`);
    assert.match(css.headers.get("content-type"), /^text\/css/);
    assert.equal((await fetch(`${base}/nothing.js`)).status, 404);
    assert.equal((await fetch(`${base}/`, { method: "POST" })).status, 405);
});

test("chat: a message gets a streamed reply", async () => {
    const { page, context, check } = await openPage("#chat");
    assert.ok(await page.locator("#view-lab").isHidden(), "only the chat view shows");
    // a fixed seed: this conversation then runs to max_tokens (256), a stream long enough to watch
    await page.locator("#chat-settings summary").click();
    await page.locator("#chat-seed").fill("1");
    await page.getByTestId("chat-input").fill("Tell me a story about a cat.");
    // the reply must grow while it streams: watch its text over time
    await page.getByTestId("chat-send").click();
    const reply = page.getByTestId("chat-message-assistant").last();
    await reply.waitFor();
    const seen = new Set();
    for (let i = 0; i < 200 && !(await page.getByTestId("chat-stop").isDisabled()); i++) {
        seen.add(await reply.locator(".body").innerText());
        await page.waitForTimeout(25);
    }
    await page.getByTestId("chat-send").waitFor({ state: "visible" });
    await page.waitForFunction(() => !document.querySelector("[data-testid=chat-send]").disabled);
    const text = await page.getByTestId("chat-message-assistant").last().locator(".body").innerText();
    assert.ok(text.trim().length > 0, "the reply has text");
    assert.ok(seen.size >= 3, `the reply was seen growing (${seen.size} different texts)`);
    // tokens are coloured spans with alternatives on hover
    const tok = page.getByTestId("chat-message-assistant").last().locator(".tok").first();
    await tok.hover();
    await page.locator("#tooltip table").waitFor();
    await shot(page, "web-chat");
    check();
    await context.close();
});

test("chat: stop ends a generation", async () => {
    const { page, context, check } = await openPage("#chat");
    await page.getByTestId("chat-new").click(); // the same conversation every run
    await page.locator("#chat-settings summary").click();
    await page.locator("#chat-max").fill("1500");
    await page.locator("#chat-seed").fill("1"); // runs to max_tokens unless stopped
    await page.getByTestId("chat-input").fill("A very long story, please.");
    await page.getByTestId("chat-send").click();
    await page.waitForFunction(() => !document.querySelector("[data-testid=chat-stop]").disabled);
    const reply = page.getByTestId("chat-message-assistant").last();
    await page.waitForFunction(() => {
        const r = [...document.querySelectorAll("[data-testid=chat-message-assistant]")].pop();
        return r && r.querySelector(".body").innerText.length > 10;
    });
    await page.getByTestId("chat-stop").click();
    await page.waitForFunction(() => document.querySelector("[data-testid=chat-stop]").disabled, null, { timeout: 10000 });
    const stopped = await reply.locator(".body").innerText();
    await page.waitForTimeout(500);
    assert.equal(await page.getByTestId("chat-message-assistant").last().locator(".body").innerText(), stopped,
        "no text arrives after stop");
    assert.match(await page.locator("#chat-stats").innerText(), /stopped/);
    // 1500 tokens at 15 ms a step would take over 20 s: it was cut short
    assert.ok(stopped.length < 4000);
    check();
    await context.close();
});

// The bars of the lab's chart, as text: it changes when the distribution does.
async function chartState(page) {
    return page.getByTestId("lab-chart").evaluate((e) => e.innerHTML);
}

async function setRange(page, testid, value) {
    await page.getByTestId(testid).evaluate((e, v) => {
        e.value = String(v);
        e.dispatchEvent(new Event("input", { bubbles: true }));
    }, value);
}

test("lab: steps through tokens; the chart follows temperature and top-p", async () => {
    const { page, context, check } = await openPage("#lab/temperature");
    await page.getByTestId("lab-prompt").fill("Once upon a time, there was a little");
    await page.getByTestId("lab-prompt").dispatchEvent("change");
    for (let i = 1; i <= 4; i++) {
        await page.getByTestId("lab-step").click();
        await page.waitForFunction((n) => document.querySelectorAll("[data-testid=lab-token]").length === n, i);
    }
    // back removes the last token, step brings one again
    await page.getByTestId("lab-back").click();
    assert.equal(await page.getByTestId("lab-token").count(), 3);
    await page.keyboard.press("ArrowRight"); // the keyboard steps too
    await page.waitForFunction(() => document.querySelectorAll("[data-testid=lab-token]").length === 4);
    const atOne = await chartState(page);
    assert.match(atOne, /<svg/);
    await setRange(page, "lab-temperature", 1.8);
    await page.waitForFunction((old) => document.querySelector("[data-testid=lab-chart]").innerHTML !== old, atOne);
    const hot = await chartState(page);
    assert.notEqual(hot, atOne);
    await shot(page, "web-lab-temperature");

    await page.getByTestId("lab-chapter-filters").click();
    await page.waitForFunction(() => document.querySelector("[data-testid=lab-chart]").innerHTML.includes("cumulative"));
    const before = await chartState(page);
    await setRange(page, "lab-top-p", 0.5);
    await page.waitForFunction((old) => document.querySelector("[data-testid=lab-chart]").innerHTML !== old, before);
    assert.match(await chartState(page), /p = 0\.50/);
    await shot(page, "web-lab-top-p");

    await page.getByTestId("lab-chapter-loop").click();
    await page.getByTestId("lab-token").last().hover();
    await page.locator("#tooltip table").waitFor();
    await shot(page, "web-lab-loop");
    check();
    await context.close();
});

test("lab: beam search and speculative decoding render real data", async () => {
    const { page, context, check } = await openPage("#lab/beam");
    await page.getByTestId("lab-beam-run").click();
    const table = page.getByTestId("lab-beam-hypotheses");
    await table.waitFor({ timeout: 30000 });
    const best = (await table.locator("tr").nth(1).locator("code").innerText());
    // the server's own beam search (/v1/completions) finds the same best hypothesis
    const prompt = await page.getByTestId("lab-prompt").inputValue();
    const r = await (await fetch(`${base}/v1/completions`, { method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ prompt, beam_width: 3, max_tokens: 10 }) })).json();
    assert.equal(best, r.choices[0].text);
    assert.ok(await page.getByTestId("lab-beam-tree").locator("text").count() > 10);
    await shot(page, "web-lab-beam");

    await page.getByTestId("lab-chapter-speculative").click();
    await page.locator("#spec-draft").selectOption("self");
    await setRange(page, "lab-temperature", 0);
    await page.getByTestId("lab-spec-run").click();
    await page.waitForFunction(() => document.querySelector("[data-testid=lab-chart]").innerText.includes("same text as plain greedy"), null, { timeout: 30000 });
    assert.ok(await page.getByTestId("lab-spec-pass").count() >= 2);
    assert.ok(await page.locator(".chip.ok").count() > 0, "accepted proposals are shown");
    assert.match(await page.getByTestId("lab-chart").innerText(), /same text as plain greedy yes/);
    await shot(page, "web-lab-speculative");
    check();
    await context.close();
});

test("lab: self-consistency, constrained output and watermark chapters", async () => {
    const { page, context, check } = await openPage("#lab/vote");
    await page.getByTestId("lab-vote-run").click();
    await page.waitForFunction(() => document.querySelector("[data-testid=lab-chart]").innerText.includes("votes"), null, { timeout: 30000 });
    assert.equal(await page.getByTestId("lab-vote-path").count(), 5);
    await shot(page, "web-lab-vote");

    await page.getByTestId("lab-chapter-constrained").click();
    await page.getByTestId("lab-constraint-on").check();
    for (let i = 1; i <= 3; i++) {
        await page.getByTestId("lab-step").click();
        await page.waitForFunction((n) => document.querySelectorAll("[data-testid=lab-token]").length === n, i);
    }
    assert.match(await page.getByTestId("lab-chart").innerText(), /Refused/);
    await shot(page, "web-lab-constrained");

    await page.getByTestId("lab-chapter-watermark").click();
    await page.getByTestId("lab-watermark-on").check();
    for (let i = 1; i <= 6; i++) {
        await page.getByTestId("lab-step").click();
        await page.waitForFunction((n) => document.querySelectorAll("[data-testid=lab-token]").length === n, i);
    }
    assert.match(await page.getByTestId("lab-chart").innerText(), /running z-score/);
    await shot(page, "web-lab-watermark");
    check();
    await context.close();
});

test("compare: two settings side by side with log-probs", async () => {
    const { page, context, check } = await openPage("#compare");
    await page.getByTestId("cmp-run").click();
    await page.waitForFunction(() => !document.querySelector("[data-testid=cmp-run]").disabled, null, { timeout: 30000 });
    assert.ok(await page.getByTestId("cmp-token-a").count() > 5);
    assert.ok(await page.getByTestId("cmp-token-b").count() > 5);
    assert.match(await page.locator("#cmp-sum-a").innerText(), /sum log-prob/);
    await shot(page, "web-compare");
    check();
    await context.close();
});

test("phone width: the views fit and stay usable", async () => {
    const { page, context, check } = await openPage("#lab/filters", { width: 390, height: 844 });
    await page.getByTestId("lab-step").click();
    await page.waitForFunction(() => document.querySelectorAll("[data-testid=lab-token]").length === 1);
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - innerWidth);
    assert.ok(overflow <= 1, `the page is ${overflow}px wider than the phone`);
    await shot(page, "web-phone-lab");
    await page.goto(`${base}/#chat`);
    await page.getByTestId("chat-input").fill("Hi");
    await page.keyboard.press("Enter");
    await page.getByTestId("chat-message-assistant").last().waitFor();
    await page.waitForFunction(() => !document.querySelector("[data-testid=chat-send]").disabled, null, { timeout: 30000 });
    await shot(page, "web-phone-chat");
    check();
    await context.close();
});
