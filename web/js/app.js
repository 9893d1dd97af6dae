// app.js - the page's entry: views by URL hash (#chat, #lab[/chapter],
// #compare), the served model's name, the API key dialog, keyboard use.
import { getJSON, apiKey, setApiKey } from "./api.js";
import { initChat } from "./chat.js";
import { initLab, showLab, labKey } from "./lab.js";
import { initCompare } from "./compare.js";
import { $, installTooltips } from "./util.js";

const VIEWS = ["chat", "lab", "compare"];

function route() {
    const [view, sub] = (location.hash.slice(1) || "chat").split("/");
    const v = VIEWS.includes(view) ? view : "chat";
    for (const name of VIEWS) {
        $(`view-${name}`).hidden = name !== v;
        $(`tab-${name}`).setAttribute("aria-selected", name === v ? "true" : "false");
    }
    if (v === "lab") showLab(sub);
}

async function showModel() {
    try {
        const m = await getJSON("/v1/models");
        const d = m.data && m.data[0];
        if (d) $("model-name").textContent = d.id;
    } catch (e) {
        $("model-name").textContent = e.status === 401 ? "API key needed (key button)" : "";
    }
}

function initKey() {
    const dlg = $("key-dialog");
    $("key-button").addEventListener("click", () => { $("key-input").value = apiKey(); dlg.showModal(); });
    dlg.addEventListener("close", () => {
        if (dlg.returnValue === "save") { setApiKey($("key-input").value.trim()); showModel(); }
    });
}

document.addEventListener("DOMContentLoaded", () => {
    installTooltips();
    initChat();
    initLab();
    initCompare();
    initKey();
    addEventListener("hashchange", route);
    document.addEventListener("keydown", (e) => {
        if (!$("view-lab").hidden) labKey(e);
    });
    route();
    showModel();
});
