// Ava's inspector (ava-bot/src/serve/inspect): talks to /inspect/api/ with the bearer token the
// user pasted, kept in this tab's sessionStorage. Every text from the server is put in the
// page with textContent, never parsed as HTML: memory text is written by whoever talked to
// the bot.
"use strict";

// `listing` counts requests for the memories table: an answer to an older one (the user
// changed the identity, then searched) is not drawn over a newer one's.
const state = { token: sessionStorage.getItem("ava-token") || "", me: null, listing: 0 };

function $(id) {
  return document.getElementById(id);
}

// An element with text (never HTML) and attributes.
function el(tag, text, attrs) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  return e;
}

function row(cells) {
  const tr = el("tr");
  for (const c of cells) {
    tr.appendChild(c instanceof Node ? wrap(c) : el("td", c));
  }
  return tr;
}

function wrap(node) {
  const td = el("td");
  td.appendChild(node);
  return td;
}

function num(x) {
  return typeof x === "number" ? x.toFixed(3) : "";
}

function showError(where, text) {
  $(where).textContent = text || "";
}

async function api(path, options) {
  const init = Object.assign({ headers: {} }, options || {});
  init.headers.Authorization = "Bearer " + state.token;
  if (init.body !== undefined) init.headers["Content-Type"] = "application/json";
  const response = await fetch("/inspect/api/" + path, init);
  let body = null;
  try {
    body = await response.json();
  } catch (e) {
    body = null;
  }
  if (!response.ok) {
    const why = body && body.error ? body.error : response.status + " " + response.statusText;
    throw new Error(why);
  }
  return body;
}

function scope() {
  return $("scope").value;
}

async function login() {
  showError("login-error", "");
  try {
    state.me = await api("me");
  } catch (e) {
    state.me = null;
    sessionStorage.removeItem("ava-token");
    showError("login-error", "Not logged in: " + e.message);
    return;
  }
  sessionStorage.setItem("ava-token", state.token);
  const me = state.me;
  let who = "user " + me.user + (me.chat ? ", chat " + me.chat : "");
  if (me.operator) who += " (operator of " + me.tenant + ")";
  if (me.read_only) who += " (read-only)";
  $("who").textContent = who;
  const select = $("scope");
  select.replaceChildren();
  for (const s of me.scopes) {
    const option = el("option", s.label, { value: s.key });
    if (s.key === me.scope) option.selected = true;
    select.appendChild(option);
  }
  $("login").hidden = true;
  $("app").hidden = false;
  $("logout").hidden = false;
  show("memories");
}

function logout() {
  // A fresh page: nothing of the last identity stays in it.
  sessionStorage.removeItem("ava-token");
  location.reload();
}

function show(view) {
  for (const v of document.querySelectorAll(".view")) v.hidden = v.id !== "view-" + view;
  for (const t of document.querySelectorAll(".tab")) {
    t.classList.toggle("active", t.dataset.view === view);
  }
  showError("error", "");
  if (view === "memories") memories();
  if (view === "store") store();
  if (view === "lifecycle") lifecycle();
  if (view === "prompt") prompts();
}

async function memories() {
  const params = new URLSearchParams({
    scope: scope(),
    q: $("q").value,
    kind: $("kind").value,
    tag: $("tag").value,
    replaced: $("replaced").checked ? "1" : "0",
    after: $("after").value,
    before: $("before").value,
    as_of: $("as-of").value,
  });
  const mine = ++state.listing;
  let data;
  try {
    data = await api("memories?" + params.toString());
  } catch (e) {
    if (mine === state.listing) showError("error", e.message);
    return;
  }
  if (mine !== state.listing) return;
  showError("error", "");
  const body = $("memories").querySelector("tbody");
  body.replaceChildren();
  for (const m of data.memories) {
    const text = el("a", m.content, { href: "#", class: "memory", "data-id": m.id });
    text.addEventListener("click", (event) => {
      event.preventDefault();
      history(m.id);
    });
    const search = m.search || { breakdown: {} };
    const tr = row([
      m.created_at.slice(0, 16).replace("T", " "),
      m.kind + (m.role ? " (" + m.role + ")" : ""),
      text,
      m.tags.join(" "),
      num(search.score),
      num(search.breakdown.semantic),
      num(search.breakdown.keyword),
      String(m.access_count),
    ]);
    if (m.superseded_by) tr.classList.add("replaced");
    body.appendChild(tr);
  }
  if (data.memories.length === 0) {
    body.appendChild(row(["", "", "nothing here", "", "", "", "", ""]));
  }
  // What the table shows now (the tests wait for it).
  $("memories").dataset.shown = data.scope + " " + data.query;
}

async function history(id) {
  let data;
  try {
    data = await api("history?" + new URLSearchParams({ scope: scope(), id }).toString());
  } catch (e) {
    showError("error", e.message);
    return;
  }
  const list = $("versions");
  list.replaceChildren();
  for (const v of data.versions) {
    const item = el("li", null, { class: v.id === id ? "chosen" : "" });
    item.appendChild(el("span", v.content, { class: "content" }));
    let when = " said " + v.created_at.slice(0, 16).replace("T", " ");
    if (v.valid_until) when += "; held until " + v.valid_until.slice(0, 16).replace("T", " ");
    if (v.superseded_by) when += "; replaced by " + v.superseded_by;
    else when += "; current";
    item.appendChild(el("span", when, { class: "when" }));
    list.appendChild(item);
  }
  $("history").hidden = false;
}

const COLOURS = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#9c755f"];

function tokensOf(action) {
  if (action.action === "kept") return action.tokens;
  if (action.action === "truncated") return action.to;
  return 0;
}

async function explain() {
  let data;
  try {
    data = await api("explain", {
      method: "POST",
      body: JSON.stringify({ scope: scope(), message: $("message").value }),
    });
  } catch (e) {
    showError("error", e.message);
    return;
  }
  showError("error", "");
  render(data, "built in " + data.ms.toFixed(1) + " ms");
}

// What a provider's prompt cache can make of a prompt (`report.cache`), as text.
function cacheText(cache) {
  if (!cache) return "";
  let text = "; stable part: the first " + cache.stable_messages + " message(s), " +
    cache.stable_tokens + " tokens";
  if (cache.shared_prefix_tokens !== undefined && cache.shared_prefix_tokens !== null) {
    text += "; " + cache.shared_prefix_tokens + " of " + cache.prompt_tokens +
      " tokens repeat the previous prompt's start";
  }
  return text;
}

// Shows one prompt's explain report (`data.report`, the candidates' texts in
// `data.memories`, the messages in `data.messages` when there are some).
function render(data, when) {
  const report = data.report;
  $("summary").textContent =
    report.estimated_prompt_tokens + " of " + report.budget.total + " tokens (" +
    report.budget.available + " for what is recalled); " +
    (report.fits ? "fits" : "does not fit") + "; " + when + cacheText(report.cache);

  // The budget as a bar: one part per block, in tokens kept.
  const used = new Map();
  for (const s of report.sections) {
    used.set(s.block, (used.get(s.block) || 0) + tokensOf(s));
  }
  const bar = $("budget");
  const legend = $("legend");
  bar.replaceChildren();
  legend.replaceChildren();
  let i = 0;
  for (const [block, tokens] of used) {
    if (tokens === 0) continue;
    const colour = COLOURS[i++ % COLOURS.length];
    const part = el("span", null, { class: "part", title: block + ": " + tokens + " tokens" });
    part.style.width = (100 * tokens / Math.max(1, report.budget.total)).toFixed(2) + "%";
    part.style.background = colour;
    bar.appendChild(part);
    const key = el("span", block + " " + tokens, { class: "key" });
    key.style.borderColor = colour;
    legend.appendChild(key);
  }

  const body = $("sections").querySelector("tbody");
  body.replaceChildren();
  for (const s of report.sections) {
    let fate = s.action;
    if (s.action === "truncated") fate = s.excerpt ? "excerpt" : "cut";
    const tokens = s.action === "truncated" ? s.from + " -> " + s.to : String(s.tokens);
    const memory = s.memory_id ? data.memories[s.memory_id] : null;
    const text = memory ? memory.content : s.label;
    const scores = s.scores || {};
    const value = num(s.value) + (typeof scores.similarity === "number" ? " (similarity " + num(scores.similarity) + ")" : "");
    const tr = row([fate, (s.found_by || []).join(", "), s.block, text, value, tokens, s.reason]);
    tr.classList.add("fate-" + s.action);
    body.appendChild(tr);
  }

  const sources = $("sources").querySelector("tbody");
  sources.replaceChildren();
  for (const s of report.sources) {
    sources.appendChild(row([s.kind, s.provider || "", s.status, String(s.kept), s.elapsed_ms.toFixed(1)]));
  }
  const degradations = $("degradations");
  degradations.replaceChildren();
  for (const d of report.degradations) {
    degradations.appendChild(el("li", (d.source ? d.source + ": " : "") + d.message));
  }
  if (report.degradations.length === 0) degradations.appendChild(el("li", "none"));

  const messages = $("messages");
  messages.replaceChildren();
  $("messages-title").hidden = !data.messages;
  for (const m of data.messages || []) {
    const box = el("div", null, { class: "message" });
    box.appendChild(el("div", m.role + " · " + m.block, { class: "role" }));
    box.appendChild(el("pre", m.content));
    messages.appendChild(box);
  }
  $("explained").hidden = false;
}

async function prompts() {
  let data;
  try {
    data = await api("prompts?" + new URLSearchParams({ scope: scope() }).toString());
  } catch (e) {
    showError("error", e.message);
    return;
  }
  const list = $("recent");
  list.replaceChildren();
  for (const p of data.prompts) {
    const r = p.report;
    const by = "built by " + ({ bot: "the bot", proxy: "the proxy", chat: "ava chat" }[p.by] || p.by) +
      (p.member ? " for member " + p.member : "");
    const link = el("a", p.at.slice(0, 19).replace("T", " ") + ": " + r.estimated_prompt_tokens +
      " of " + r.budget.total + " tokens, " + r.sections.filter((s) => s.action === "dropped").length +
      " dropped (" + by + ")", { href: "#", class: "built" });
    link.addEventListener("click", (event) => {
      event.preventDefault();
      render(p, by + " at " + p.at.slice(0, 19).replace("T", " "));
    });
    const item = el("li");
    item.appendChild(link);
    list.appendChild(item);
  }
  if (data.prompts.length === 0) list.appendChild(el("li", "none yet for this identity"));
}

async function lifecycle() {
  let data;
  try {
    data = await api("lifecycle?" + new URLSearchParams({ scope: scope() }).toString());
  } catch (e) {
    showError("error", e.message);
    return;
  }
  // A read-only token gets no buttons (and the server refuses its changes anyway).
  for (const b of document.querySelectorAll("#view-lifecycle .write")) b.hidden = !data.may_write;
  const merges = $("merges");
  merges.replaceChildren();
  for (const m of data.would_merge) {
    const item = el("li", null);
    item.appendChild(el("span", "keep: " + m.kept.content));
    for (const d of m.merged) item.appendChild(el("div", "fold in: " + d.content, { class: "when" }));
    item.appendChild(el("div", m.why, { class: "when" }));
    merges.appendChild(item);
  }
  if (data.would_merge.length === 0) merges.appendChild(el("li", "nothing to merge"));
  $("consolidate").disabled = data.would_merge.length === 0;
  const body = $("facts").querySelector("tbody");
  body.replaceChildren();
  const byId = new Map(data.facts.map((f) => [f.id, f]));
  for (const f of data.facts) {
    let now = f.state;
    if (f.state === "replaced") {
      const by = byId.get(f.superseded_by);
      now += " by " + (by ? "\u201c" + by.content + "\u201d" : f.superseded_by);
    }
    if (f.state === "ended" && f.valid_until) now += " " + f.valid_until.slice(0, 16).replace("T", " ");
    let action = el("span");
    if (data.may_write) {
      const restore = f.state !== "current";
      action = el("button", restore ? "Restore" : "End", {
        type: "button",
        class: "change",
        "data-id": f.id,
        "data-what": restore ? "restore" : "end",
      });
      action.addEventListener("click", () => change(action.dataset.what, f.id));
    }
    const tr = row([f.created_at.slice(0, 16).replace("T", " "), f.content, now, action]);
    tr.classList.add("state-" + f.state);
    body.appendChild(tr);
  }
  $("view-lifecycle").dataset.shown = data.scope;
}

async function change(what, id) {
  const body = { scope: scope() };
  if (id) body.id = id;
  let data;
  try {
    data = await api(what, { method: "POST", body: JSON.stringify(body) });
  } catch (e) {
    showError("error", e.message);
    return;
  }
  let said = what === "restore" ? "Restored: " + data.restored.content
    : what === "end" ? "Ended: " + data.ended.content
    : what === "undo" ? (data.undone ? data.undone.join("; ") : "Learning changed nothing here since the server started.")
    : "Merged.";
  $("changed").textContent = said;
  lifecycle();
}

async function store() {
  let data;
  try {
    data = await api("store");
  } catch (e) {
    showError("error", e.message);
    return;
  }
  const counts = $("counts").querySelector("tbody");
  counts.replaceChildren();
  for (const s of data.scopes) counts.appendChild(row([s.label, String(s.memories)]));
  const settings = $("settings").querySelector("tbody");
  settings.replaceChildren();
  settings.appendChild(row(["store", data.store + (data.durable ? "" : " (not durable)")]));
  settings.appendChild(row(["embedding space", data.embedding_space || "none (keyword search only)"]));
  if (data.totals) {
    const t = data.totals;
    settings.appendChild(row(["whole store", (t.file_bytes / 1048576).toFixed(1) + " MiB, " +
      t.memories + " memories (" + t.facts + " facts) of " + t.users + " people in " + t.scopes + " scopes"]));
    settings.appendChild(row(["without a vector", String(t.without_vectors) +
      (t.without_vectors > 0 ? " (embedded when their chat is next searched, or by ava reembed --missing)" : "")]));
  }
  for (const [k, v] of Object.entries(data.settings)) {
    settings.appendChild(row([k, typeof v === "string" ? v : JSON.stringify(v)]));
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("login-go").addEventListener("click", () => {
    state.token = $("token").value.trim();
    login();
  });
  $("token").addEventListener("keydown", (e) => {
    if (e.key === "Enter") $("login-go").click();
  });
  $("logout").addEventListener("click", logout);
  for (const t of document.querySelectorAll(".tab")) {
    t.addEventListener("click", () => show(t.dataset.view));
  }
  $("scope").addEventListener("change", () => {
    $("history").hidden = true;
    const active = document.querySelector(".tab.active");
    show(active ? active.dataset.view : "memories");
  });
  $("search").addEventListener("click", memories);
  $("q").addEventListener("keydown", (e) => {
    if (e.key === "Enter") memories();
  });
  $("explain").addEventListener("click", explain);
  $("consolidate").addEventListener("click", () => change("consolidate"));
  $("undo").addEventListener("click", () => change("undo"));
  if (state.token) login();
});
