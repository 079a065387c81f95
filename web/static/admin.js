// admin.js - the admin's page: a login (POST /api/admin/login; the token
// is kept in the tab's session storage until Log out or a 401), a form
// that creates a voucher (checked field by field with the API's own
// messages before it is sent; a flash sale is open to all or sold
// through a waiting room), the shop's vouchers with their numbers read
// once a second (GET /api/vouchers/{id}/stats with the token, else the
// voucher's stock; a queue sale's waiting room too) and a chart of the selected one's sales, the
// purchase counters (GET /api/admin/metrics with the token), and the
// refunds and the audit log (admin-records.js).

import { call, change, clock, describeError, el, localNow, localTime, money, rfc3339, say } from "./api.js";
import { initRecords, reloadRecords } from "./admin-records.js";
import { drawChart, soldBetween } from "./chart.js";

const SESSION_KEY = "seckill.admin-session";
const LIST_REFRESH_MS = 10000;
const STOCK_POLL_MS = 1000;
const METRICS_POLL_MS = 1000;
const HISTORY_MS = 10 * 60000;
// At most this many vouchers have their stock read every second.
const WATCH_MAX = 8;
const SECKILL_ROUTE = "/api/vouchers/{id}/seckill";

const $ = (id) => document.getElementById(id);

const state = {
    session: loadSession(),
    shopId: "1",
    vouchers: [], // the list, newest first
    history: new Map(), // voucher id -> [{t, stock, sold?}]
    stats: new Map(), // voucher id -> its last stats
    selected: null,
    metrics: [], // [{t, values}] of the last seconds
    // Counts the controls' answers applied: a list or stock read that left
    // before one is older than it, and is dropped (the next read comes
    // within a second).
    controlled: 0,
};

// ---- the session ----

// The session kept in the tab: {token, username, expiresAt}, with
// expiresAt on the reader's clock (epoch ms), for showing only. null
// when there is none or the stored one is damaged.
function loadSession() {
    try {
        const s = JSON.parse(sessionStorage.getItem(SESSION_KEY) || "null");
        if (s && typeof s.token === "string" && typeof s.username === "string") return s;
    } catch {
        // a damaged entry is dropped below
    }
    sessionStorage.removeItem(SESSION_KEY);
    return null;
}

// Keep s (or forget the session, for null) and show the form or who is
// logged in. The readings made with the old token go with it.
function saveSession(s) {
    state.session = s;
    if (s) sessionStorage.setItem(SESSION_KEY, JSON.stringify(s));
    else sessionStorage.removeItem(SESSION_KEY);
    state.stats.clear();
    state.metrics = [];
    if (!s) $("counters").replaceChildren();
    renderSession();
    renderList();
    reloadRecords();
}

function renderSession() {
    const s = state.session;
    $("login-form").hidden = !!s;
    $("login-hint").hidden = !!s;
    $("session").hidden = !s;
    if (s) {
        $("who-name").textContent = s.username;
        $("who-until").textContent = s.expiresAt
            ? ", until " + new Date(s.expiresAt).toLocaleTimeString(undefined, { timeStyle: "short" })
            : "";
    }
}

// The session's token, or null. An expired one is still sent: the server
// answers 401, which ends the session (sessionGone), within a second of
// the expiry since the counters are read every second.
function adminToken() {
    return state.session ? state.session.token : null;
}

// Forget the session and bring the form back with why. Focus goes to the
// form only when it was on what just disappeared, or when moveFocus
// says so (the admin's own action was refused), never while they type
// elsewhere.
function endSession(text, tone, moveFocus = false) {
    const lost = $("session").contains(document.activeElement) || document.activeElement === document.body;
    saveSession(null);
    say($("login-msg"), text, tone);
    if (moveFocus || lost) $("username").focus();
}

// An answer of 401 to a call made with token means that it expired or
// was refused (a logout elsewhere): back to the form, unless the session
// has changed since the call went out. True when it was a 401.
function sessionGone(res, token, moveFocus = false) {
    if (res.status !== 401) return false;
    if (!state.session || state.session.token !== token) return true;
    endSession(describeError(res).text, "bad", moveFocus);
    return true;
}

// The API's own message as a sentence: "The username or password is
// wrong."
function sentence(message) {
    const m = String(message || "").trim();
    return m ? m[0].toUpperCase() + m.slice(1) + (/[.!?]$/.test(m) ? "" : ".") : "";
}

// When a refusal with Retry-After of seconds ends: "in 40 s" or "in 15
// min, at 14:05".
function retryWhen(seconds) {
    if (seconds < 60) return `in ${seconds} s`;
    const at = new Date(localNow() + seconds * 1000).toLocaleTimeString(undefined, { timeStyle: "short" });
    return `in ${Math.ceil(seconds / 60)} min, at ${at}`;
}

// The login form's words for a refused login: the API's own message for
// a wrong pair, and when to try again for a refusal that passes (after
// too many failures, a wait of up to 15 minutes).
function loginRefusal(res) {
    const wait = res.retryAfter || 1;
    switch (res.error.code) {
        case "UNAUTHORIZED":
            return sentence(res.error.message);
        case "RATE_LIMITED":
            return `Too many attempts: you can try again ${retryWhen(wait)}.`;
        case "BUSY":
            return `Another login is being checked: try again ${retryWhen(wait)}.`;
        default:
            return describeError(res).text;
    }
}

$("login-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const username = $("username").value.trim();
    const password = $("password").value;
    const button = $("login-button");
    button.disabled = true;
    say($("login-msg"), "Logging in…");
    const res = await call("POST", "/api/admin/login", { body: { username, password } });
    button.disabled = false;
    if (!res.ok) {
        say($("login-msg"), loginRefusal(res), res.status === 429 ? "warn" : "bad");
        // A wrong pair: the password is typed again; a name the API
        // refuses: the name is corrected.
        if (res.error.code === "UNAUTHORIZED") {
            $("password").value = "";
            $("password").focus();
        } else if (res.error.code === "BAD_REQUEST") {
            $("username").focus();
        }
        return;
    }
    $("password").value = "";
    say($("login-msg"), "");
    saveSession({
        token: res.data.token,
        username: res.data.admin.username,
        expiresAt: localNow() + res.data.expiresIn * 1000,
    });
    $("who").focus();
    pollMetrics();
});

$("logout").addEventListener("click", async () => {
    const button = $("logout");
    const token = adminToken();
    button.disabled = true;
    say($("login-msg"), "Logging out…");
    const res = await call("POST", "/api/auth/logout", { token });
    button.disabled = false;
    // The tab forgets the token whatever the answer; a 401 means the
    // server refuses it already.
    if (res.ok || res.status === 401) endSession("Logged out.", "ok", true);
    else endSession(`Logged out of this tab, but the server did not confirm it: ${describeError(res).text}`, "warn", true);
});

// ---- the new voucher's fields, checked as the API checks them ----

const INT64_MAX = 9223372036854775807n;
const MONEY_MAX = 100000000000n; // a billion in cents
const STOCK_MAX = 1000000000n;
const TIME_EXAMPLE = 'must be an RFC 3339 time such as "2026-11-21T10:00:00Z"';

// An integer field: null when fine, else the API's message for it.
function checkInt(name, raw, required, min, max) {
    if (raw === "") return required ? `${name}: is required` : null;
    const what = `${name}: must be an integer from ${min} to ${max}`;
    if (!/^-?[0-9]+$/.test(raw)) return what;
    const n = BigInt(raw);
    return n < min || n > max ? what : null;
}

// A text field; lengths are in characters (code points), as the API
// counts them.
function checkStr(name, raw, required, max) {
    if (raw === "") return required ? `${name}: is required` : null;
    const n = [...raw].length;
    if (n > max) {
        return `${name}: must be a string of ${required ? "1 to " : "at most "}${max} characters`;
    }
    return null;
}

// A datetime-local value ("2026-11-21T18:00:05", the reader's time) as
// epoch ms, or NaN.
function localInputTime(raw) {
    return /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2})?$/.test(raw) ? new Date(raw).getTime() : NaN;
}

function formValues() {
    const v = {};
    for (const name of [
        "shopId",
        "title",
        "subTitle",
        "rules",
        "payValue",
        "actualValue",
        "type",
        "stock",
        "beginTime",
        "endTime",
        "admission",
    ]) {
        const input = $("f-" + name);
        v[name] = name === "title" || name === "subTitle" || name === "rules" ? input.value : input.value.trim();
    }
    return v;
}

// Every field's problem, in the API's words: {field: message}.
export function validate(v) {
    const errors = {};
    const put = (name, msg) => {
        if (msg) errors[name] = msg;
    };
    put("shopId", checkInt("shopId", v.shopId, true, 1n, INT64_MAX));
    put("title", checkStr("title", v.title, true, 255));
    put("subTitle", checkStr("subTitle", v.subTitle, false, 255));
    put("rules", checkStr("rules", v.rules, false, 1024));
    put("payValue", checkInt("payValue", v.payValue, true, 0n, MONEY_MAX));
    put("actualValue", checkInt("actualValue", v.actualValue, true, 0n, MONEY_MAX));
    if (!errors.payValue && !errors.actualValue && (BigInt(v.payValue) === 0n || BigInt(v.payValue) > BigInt(v.actualValue)))
        put("payValue", "payValue: must be at least 1 and at most actualValue");
    if (v.type !== "seckill" && v.type !== "normal") put("type", 'type: must be "normal" or "seckill"');
    if (v.type === "seckill") {
        put("stock", checkInt("stock", v.stock, true, 0n, STOCK_MAX));
        const begin = localInputTime(v.beginTime);
        const end = localInputTime(v.endTime);
        if (v.beginTime === "") put("beginTime", "beginTime: is required");
        else if (Number.isNaN(begin)) put("beginTime", "beginTime: " + TIME_EXAMPLE);
        if (v.endTime === "") put("endTime", "endTime: is required");
        else if (Number.isNaN(end)) put("endTime", "endTime: " + TIME_EXAMPLE);
        if (!errors.beginTime && !errors.endTime && Math.floor(end / 1000) <= Math.floor(begin / 1000))
            put("endTime", "endTime: must be after beginTime");
        if (v.admission !== "open" && v.admission !== "queue") put("admission", 'admission: must be "open" or "queue"');
    }
    return errors;
}

// The request body. Integers go in as the digits typed (normalised), so
// ids beyond 2^53 keep every digit.
export function voucherBody(v) {
    const parts = [`"shopId":${BigInt(v.shopId)}`, `"title":${JSON.stringify(v.title)}`];
    if (v.subTitle) parts.push(`"subTitle":${JSON.stringify(v.subTitle)}`);
    if (v.rules) parts.push(`"rules":${JSON.stringify(v.rules)}`);
    parts.push(`"payValue":${BigInt(v.payValue)}`, `"actualValue":${BigInt(v.actualValue)}`);
    parts.push(`"type":${JSON.stringify(v.type)}`);
    if (v.type === "seckill") {
        parts.push(`"stock":${BigInt(v.stock)}`);
        parts.push(`"beginTime":"${rfc3339(localInputTime(v.beginTime))}"`);
        parts.push(`"endTime":"${rfc3339(localInputTime(v.endTime))}"`);
        parts.push(`"admission":${JSON.stringify(v.admission)}`);
    }
    return "{" + parts.join(",") + "}";
}

function showFieldErrors(errors) {
    for (const span of document.querySelectorAll(".field-error")) {
        const name = span.dataset.for;
        span.textContent = errors[name] || "";
        const input = $("f-" + name);
        if (input) input.setAttribute("aria-invalid", errors[name] ? "true" : "false");
    }
}

function syncType() {
    const seckill = $("f-type").value === "seckill";
    for (const n of document.querySelectorAll(".seckill-only")) n.hidden = !seckill;
}

function showMoney() {
    for (const name of ["payValue", "actualValue"]) {
        const raw = $("f-" + name).value.trim();
        $(`f-${name}-money`).textContent = /^[0-9]{1,12}$/.test(raw) ? `= ${money(raw)}` : "";
    }
}

// The reader's local time of epoch ms t, as a datetime-local value.
function toLocalInput(t) {
    const d = new Date(t);
    const two = (n) => String(n).padStart(2, "0");
    return (
        `${d.getFullYear()}-${two(d.getMonth() + 1)}-${two(d.getDate())}` +
        `T${two(d.getHours())}:${two(d.getMinutes())}:${two(d.getSeconds())}`
    );
}

function setStart(inSeconds) {
    // Whole seconds on the server's clock, as the API stores them; "now"
    // is a second the server's clock has surely reached, so the sale is
    // open at once.
    const begin = Math.floor((clock.earliest() + inSeconds * 1000) / 1000) * 1000;
    $("f-beginTime").value = toLocalInput(begin);
    $("f-endTime").value = toLocalInput(begin + 3600 * 1000);
}

for (const b of document.querySelectorAll("[data-start]"))
    b.addEventListener("click", () => setStart(Number(b.dataset.start)));
$("f-type").addEventListener("change", syncType);
for (const name of ["payValue", "actualValue"]) $("f-" + name).addEventListener("input", showMoney);

$("create-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const v = formValues();
    const errors = validate(v);
    showFieldErrors(errors);
    const msg = $("create-msg");
    if (Object.keys(errors).length) {
        say(msg, "Correct the marked fields.", "bad");
        return;
    }
    const token = adminToken();
    if (!token) {
        say(msg, "Log in first: creating vouchers needs an admin login.", "bad");
        $("username").focus();
        return;
    }
    const button = $("create-button");
    button.disabled = true;
    say(msg, "Creating…");
    const res = await change("POST", "/api/vouchers", { body: voucherBody(v), token });
    button.disabled = false;
    if (!res.ok) {
        if (sessionGone(res, token, true)) {
            say(msg, "Log in again to create the voucher.", "bad");
            return;
        }
        // A 400 names its field first ("stock: ..."): show it there.
        const m = /^([A-Za-z]+): /.exec(res.error.message || "");
        if (res.error.code === "BAD_REQUEST" && m && $("f-" + m[1])) {
            showFieldErrors({ [m[1]]: res.error.message });
            say(msg, "The server refused a field: see above.", "bad");
        } else {
            say(msg, describeError(res).text, "bad");
        }
        return;
    }
    say(msg, `Created voucher ${res.data.id} in shop ${v.shopId}.`, "ok");
    state.shopId = String(BigInt(v.shopId));
    $("shop-id").value = state.shopId;
    state.selected = res.data.id;
    await loadList();
});

// ---- the shop's vouchers, their stock and the chart ----

$("shop-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const v = $("shop-id").value.trim();
    if (!/^[1-9][0-9]{0,17}$/.test(v)) {
        say($("list-msg"), "A shop is a positive whole number.", "bad");
        return;
    }
    state.shopId = v;
    state.selected = null;
    loadList();
});

async function loadList() {
    const shop = state.shopId;
    const seen = state.controlled;
    const res = await call("GET", `/api/vouchers?shopId=${shop}&limit=20`);
    if (shop !== state.shopId || seen !== state.controlled) return;
    if (!res.ok) {
        say($("list-msg"), "Could not load the vouchers: " + describeError(res).text, "warn");
        return;
    }
    state.vouchers = res.data.items;
    say($("list-msg"), state.vouchers.length ? "" : `Shop ${shop} has no vouchers yet.`);
    if (!state.selected) {
        const first = state.vouchers.find((v) => v.type === "seckill");
        state.selected = first ? first.id : null;
    }
    for (const v of state.vouchers) record(v);
    renderList();
}

// Remember a reading of v's stock (and of its sold count, from stats) on
// the server's clock.
function record(v, stats) {
    if (v.type !== "seckill") return;
    const h = state.history.get(v.id) || [];
    const t = clock.now();
    h.push(stats ? { t, stock: stats.stock, sold: stats.sold } : { t, stock: v.stock });
    while (h.length && t - h[0].t > HISTORY_MS) h.shift();
    state.history.set(v.id, h);
}

// Vouchers worth reading every second: flash sales not over for a minute.
function watched() {
    const now = clock.now();
    return state.vouchers
        .filter((v) => v.type === "seckill" && Date.parse(v.endTime) + 60000 > now)
        .slice(0, WATCH_MAX);
}

// One voucher's reading: its stats while logged in, else the voucher.
async function readOne(v) {
    const tok = adminToken();
    if (tok) {
        const res = await call("GET", `/api/vouchers/${v.id}/stats`, { token: tok });
        if (res.ok && adminToken() === tok) {
            state.stats.set(v.id, res.data);
            return { ...v, stock: res.data.stock, stats: res.data };
        }
        sessionGone(res, tok);
    }
    const res = await call("GET", `/api/vouchers/${v.id}`);
    return res.ok ? res.data : null;
}

async function pollStock() {
    const list = watched();
    const seen = state.controlled;
    const answers = await Promise.all(list.map(readOne));
    if (seen !== state.controlled) return;
    answers.forEach((got, i) => {
        if (!got) return;
        const { stats, ...voucher } = got;
        const idx = state.vouchers.findIndex((v) => v.id === list[i].id);
        if (idx >= 0) state.vouchers[idx] = voucher;
        record(voucher, stats);
    });
    renderList();
}

function soldPerSecond(id, overMs = 10000) {
    const h = state.history.get(id) || [];
    const now = clock.now();
    let sold = 0;
    for (let i = 1; i < h.length; i++) {
        const n = soldBetween(h[i - 1], h[i]);
        if (n > 0 && now - h[i].t <= overMs) sold += n;
    }
    return sold / (overMs / 1000);
}

function saleStatus(v) {
    if (v.type !== "seckill") return "regular";
    const now = clock.now();
    if (now < Date.parse(v.beginTime)) return v.paused ? "starts soon, paused" : "starts soon";
    if (now >= Date.parse(v.endTime)) return "ended";
    if (v.paused) return "paused";
    return v.stock > 0 ? "on sale" : "sold out";
}

// Rows are kept and updated in place, so that a click is not lost to a
// redraw between pressing and releasing the button.
const rows = new Map(); // voucher id -> {tr, cells}

function row(v) {
    let r = rows.get(v.id);
    if (r) return r;
    const cells = {};
    for (const k of ["id", "title", "type", "stock", "sold", "paid", "returned", "rate", "queue", "window", "status"])
        cells[k] = el("td", {
            class:
                k === "id" ? "mono" : k === "title" ? "title" : ["type", "queue", "window", "status"].includes(k) ? k : "num " + k,
        });
    const tr = el("tr", { "data-voucher-id": v.id }, ...Object.values(cells));
    tr.addEventListener("click", () => {
        state.selected = v.id;
        renderList();
    });
    r = { tr, cells };
    rows.set(v.id, r);
    return r;
}

function setText(node, text) {
    if (node.textContent !== text) node.textContent = text;
}

// A cell's value, or a dash with why it has none (said on hover and to
// screen readers).
function setValue(node, text, why) {
    setText(node, text === null ? "–" : text);
    const label = text === null ? why : null;
    if (label) node.setAttribute("aria-label", `– (${label})`);
    else node.removeAttribute("aria-label");
    if (label) node.title = label;
    else node.removeAttribute("title");
}

// A queue sale's waiting room from its stats st, as the parts of its
// cell: how many joined and how many places are admitted by now ("–" for
// a sale open to all).
function queueParts(v, st) {
    if (v.type !== "seckill" || v.admission !== "queue") return ["–"];
    // Logged out (the numbers need the admin's token), or Redis could
    // not say.
    if (!st || !st.queue) return ["waiting room"];
    const n = (x) => Number(x).toLocaleString();
    return [`${n(st.queue.length)} joined`, `${n(st.queue.admitted)} admitted`];
}

// The queue's cell: "1,234 joined · 120 admitted", which may break only
// between its two parts.
function setQueueCell(td, parts) {
    const text = parts.join(" · ");
    if (td.textContent === text) return;
    const spans = parts.map((p) => el("span", { class: "part" }, p));
    td.replaceChildren(...spans.flatMap((s, i) => (i ? [" · ", s] : [s])));
}

function renderList() {
    const keep = new Set();
    const body = $("voucher-rows");
    state.vouchers.forEach((v, i) => {
        const seckill = v.type === "seckill";
        const r = row(v);
        keep.add(v.id);
        setText(r.cells.id, v.id);
        setText(r.cells.title, v.title);
        setText(r.cells.type, seckill ? "flash sale" : "regular");
        const none = "a regular voucher has no sale";
        setValue(r.cells.stock, seckill ? String(v.stock) : null, none);
        const st = seckill ? state.stats.get(v.id) : null;
        const unknown = !seckill
            ? none
            : !adminToken()
              ? "log in to see the sale's stats"
              : watched().some((w) => w.id === v.id)
                ? "the sale's stats are not read yet"
                : "the stats are read only for the newest sales on now or ended less than a minute ago";
        setValue(r.cells.sold, st ? String(st.sold) : null, unknown);
        setValue(r.cells.paid, st ? String(st.orders.paid) : null, unknown);
        setValue(r.cells.returned, st ? String(st.returned) : null, unknown);
        setValue(r.cells.rate, seckill ? soldPerSecond(v.id).toFixed(1) : null, none);
        setQueueCell(r.cells.queue, queueParts(v, st));
        setText(r.cells.window, seckill ? `${localTime(v.beginTime)} – ${localTime(v.endTime)}` : "–");
        setText(r.cells.status, saleStatus(v));
        r.tr.className = v.id === state.selected ? "selected" : "";
        if (body.children[i] !== r.tr) body.insertBefore(r.tr, body.children[i] || null);
    });
    for (const [id, r] of rows)
        if (!keep.has(id)) {
            r.tr.remove();
            rows.delete(id);
        }
    const sel = state.vouchers.find((v) => v.id === state.selected);
    if (sel && sel.type === "seckill") {
        setText($("chart-title"), `Voucher ${sel.id}, “${sel.title}”: stock and units sold`);
        drawChart($("chart"), state.history.get(sel.id) || [], clock.now());
    } else {
        setText($("chart-title"), "Select a flash-sale voucher to see its sales.");
        $("chart").replaceChildren();
    }
    saleOrdersFollow();
    renderControls(sel);
}

// ---- the controls of the selected sale ----
//
// Pause or resume, stop (confirmed), restock, and before the start edit
// and delete (confirmed): one API call each (POST /api/vouchers/{id}/
// pause, /resume, /stop, /restock, PATCH and DELETE /api/vouchers/{id}),
// whose answer (the voucher as it is now) replaces the list's copy.

const controls = { id: null, busy: false };

// Show the controls of sel (a voucher of the list, or undefined).
function renderControls(sel) {
    const box = $("controls");
    if (!sel || sel.type !== "seckill") {
        box.hidden = true;
        controls.id = null;
        return;
    }
    box.hidden = false;
    const now = clock.now();
    const started = now >= Date.parse(sel.beginTime);
    const ended = now >= Date.parse(sel.endTime);
    setText($("controls-title"), `Control voucher ${sel.id}${sel.paused ? " (paused)" : ""}`);
    setText($("ctl-pause"), sel.paused ? "Resume" : "Pause");
    for (const id of ["ctl-pause", "ctl-stop", "ctl-restock"]) $(id).disabled = controls.busy || ended;
    $("ctl-delete").disabled = controls.busy || started;
    $("ctl-delete").hidden = started;
    for (const n of document.querySelectorAll("#ctl-edit .before-start")) n.hidden = started;
    $("c-endTime").disabled = ended;
    setText(
        $("ctl-edit-hint"),
        ended
            ? "The sale has ended: only its texts may change."
            : started
              ? "The sale has started: its texts and its end may change."
              : "Before the start, every field may change.",
    );
    // The form is filled when another voucher is selected, not on every
    // redraw (that would undo what is being typed).
    if (controls.id !== sel.id) {
        controls.id = sel.id;
        fillEdit(sel);
        say($("ctl-msg"), "");
    }
}

function fillEdit(v) {
    $("c-title").value = v.title;
    $("c-subTitle").value = v.subTitle;
    $("c-rules").value = v.rules;
    $("c-payValue").value = String(v.payValue);
    $("c-actualValue").value = String(v.actualValue);
    $("c-stock").value = String(v.stock);
    $("c-beginTime").value = toLocalInput(Date.parse(v.beginTime));
    $("c-endTime").value = toLocalInput(Date.parse(v.endTime));
}

// The edit's body: the fields that differ from v (null: none).
export function editBody(v, form) {
    const out = {};
    for (const k of ["title", "subTitle", "rules"]) if (form[k] !== v[k]) out[k] = form[k];
    const started = form.started;
    if (!started) {
        for (const k of ["payValue", "actualValue", "stock"])
            if (form[k] !== "" && form[k] !== String(v[k])) out[k] = Number(form[k]);
        const b = localInputTime(form.beginTime);
        if (!Number.isNaN(b) && Math.floor(b / 1000) !== Math.floor(Date.parse(v.beginTime) / 1000))
            out.beginTime = rfc3339(b);
    }
    const e = localInputTime(form.endTime);
    if (!form.ended && !Number.isNaN(e) && Math.floor(e / 1000) !== Math.floor(Date.parse(v.endTime) / 1000))
        out.endTime = rfc3339(e);
    return Object.keys(out).length ? out : null;
}

// Send one control of the selected voucher; its answer replaces the
// list's copy. what: the words for the message.
async function control(method, tail, body, what) {
    const id = controls.id;
    const token = adminToken();
    const msg = $("ctl-msg");
    if (!id) return;
    if (!token) {
        say(msg, "Log in first: the controls need an admin login.", "bad");
        return;
    }
    controls.busy = true;
    renderList();
    say(msg, `${what}…`);
    const res = await change(method, `/api/vouchers/${id}${tail}`, { body, token });
    controls.busy = false;
    if (!res.ok) {
        if (!sessionGone(res, token, true)) say(msg, describeError(res).text, "bad");
        renderList();
        return;
    }
    if (method === "DELETE") {
        state.vouchers = state.vouchers.filter((v) => v.id !== id);
        state.selected = null;
        say(msg, "");
        say($("list-msg"), `Deleted voucher ${id}.`, "ok");
        await loadList();
        return;
    }
    const idx = state.vouchers.findIndex((v) => v.id === id);
    if (idx >= 0) state.vouchers[idx] = res.data;
    state.controlled++;
    fillEdit(res.data);
    record(res.data);
    say(msg, `${what}: done.`, "ok");
    renderList();
}

function selectedVoucher() {
    return state.vouchers.find((v) => v.id === controls.id);
}

$("ctl-pause").addEventListener("click", () => {
    const v = selectedVoucher();
    if (!v) return;
    if (v.paused) control("POST", "/resume", undefined, "Resumed");
    else control("POST", "/pause", undefined, "Paused");
});
$("ctl-stop").addEventListener("click", () => {
    if (controls.id && window.confirm(`End the sale of voucher ${controls.id} now? It cannot be undone.`))
        control("POST", "/stop", undefined, "Stopped");
});
$("ctl-restock").addEventListener("click", () => {
    const raw = $("ctl-restock-n").value.trim();
    if (!/^[1-9][0-9]{0,6}$/.test(raw) || Number(raw) > 1000000) {
        say($("ctl-msg"), "Add a whole number of units from 1 to 1,000,000.", "bad");
        return;
    }
    control("POST", "/restock", `{"add":${Number(raw)}}`, `Restocked ${raw}`);
});
$("ctl-delete").addEventListener("click", () => {
    if (controls.id && window.confirm(`Delete voucher ${controls.id}? It cannot be undone.`))
        control("DELETE", "", undefined, "Deleted");
});
$("ctl-edit").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const v = selectedVoucher();
    if (!v) return;
    const now = clock.now();
    const form = {
        started: now >= Date.parse(v.beginTime),
        ended: now >= Date.parse(v.endTime),
    };
    for (const k of ["title", "subTitle", "rules"]) form[k] = $("c-" + k).value;
    for (const k of ["payValue", "actualValue", "stock", "beginTime", "endTime"]) form[k] = $("c-" + k).value.trim();
    const body = editBody(v, form);
    if (!body) {
        say($("ctl-msg"), "Nothing to save: no field changed.", "warn");
        return;
    }
    control("PATCH", "", JSON.stringify(body), "Saved");
});

// ---- the counters of /metrics ----

// The samples of a Prometheus text page: [{name, labels: {}, value}].
export function parseMetrics(text) {
    const out = [];
    for (const line of text.split("\n")) {
        if (!line || line.startsWith("#")) continue;
        const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line);
        if (!m) continue;
        const labels = {};
        for (const kv of (m[2] || "").matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[kv[1]] = kv[2];
        out.push({ name: m[1], labels, value: Number(m[3]) });
    }
    return out;
}

// The counters the page shows, from one scrape.
function outcomeValues(samples) {
    const get = (name, label, value) =>
        samples
            .filter((s) => s.name === name && (!label || s.labels[label] === value))
            .reduce((a, s) => a + s.value, 0);
    const code = (c) =>
        samples
            .filter((s) => s.name === "seckill_http_requests_total" && s.labels.route === SECKILL_ROUTE && s.labels.code === c)
            .reduce((a, s) => a + s.value, 0);
    const busy = get("seckill_lock_acquisitions_total", "outcome", "busy");
    const shed = get("seckill_purchases_total", "outcome", "shed");
    return {
        requests: get("seckill_http_requests_total", "route", SECKILL_ROUTE),
        ok: get("seckill_purchases_total", "outcome", "ok"),
        sold_out: get("seckill_purchases_total", "outcome", "sold_out"),
        sold_out_cached: get("seckill_purchases_total", "outcome", "sold_out_cached"),
        duplicate: get("seckill_purchases_total", "outcome", "duplicate"),
        busy,
        shed,
        rate_limited: Math.max(0, code("429") - busy - shed),
        unavailable: code("503"),
        paid: get("seckill_order_transitions_total", "to", "paid"),
        cancelled: get("seckill_order_transitions_total", "to", "cancelled"),
        expired: get("seckill_order_transitions_total", "to", "expired"),
    };
}

const COUNTERS = [
    ["requests", "purchase requests"],
    ["ok", "orders placed"],
    ["sold_out_cached", "sold out, answered from memory"],
    ["sold_out", "sold out, checked in MySQL"],
    ["duplicate", "already purchased"],
    ["busy", "busy (one user, two requests)"],
    ["shed", "busy (the voucher's queue full)"],
    ["rate_limited", "rate limited"],
    ["unavailable", "unavailable (503)"],
    ["paid", "orders paid"],
    ["cancelled", "orders cancelled"],
    ["expired", "orders expired unpaid"],
];

async function pollMetrics() {
    const tok = adminToken();
    if (!tok) {
        say($("metrics-msg"), "Log in to see the counters.", "warn");
        return;
    }
    const res = await call("GET", "/api/admin/metrics", { token: tok });
    if (sessionGone(res, tok) || adminToken() !== tok) {
        // The session ended meanwhile: the counters say so again.
        if (!state.session) say($("metrics-msg"), "Log in to see the counters.", "warn");
        return;
    }
    if (!res.ok) {
        say($("metrics-msg"), "Could not read the counters: " + describeError(res).text, "warn");
        return;
    }
    say($("metrics-msg"), "");
    const values = outcomeValues(parseMetrics(res.text));
    const t = clock.now();
    state.metrics.push({ t, values });
    while (state.metrics.length > 1 && t - state.metrics[0].t > 5000) state.metrics.shift();
    const old = state.metrics[0];
    const dt = (t - old.t) / 1000;
    $("counters").replaceChildren(
        ...COUNTERS.map(([key, label]) =>
            el(
                "div",
                { class: "counter", "data-counter": key },
                el("div", { class: "n" }, String(values[key])),
                el("div", { class: "label" }, label),
                el("div", { class: "rate" }, dt > 0 ? `${((values[key] - old.values[key]) / dt).toFixed(1)}/s` : "–"),
            ),
        ),
    );
}

// ---- a sale's orders (GET /api/vouchers/{id}/orders) ----
//
// The selected voucher's newest orders, and a download of all of them as
// CSV: the export needs the admin's token, which a plain link cannot
// send, so the page fetches it with the header and saves it as a Blob.

const saleOrders = { shown: null, key: "" };

// The orders shown follow the selection and the login.
function saleOrdersFollow() {
    if (`${state.selected}:${!!adminToken()}` !== saleOrders.key) loadSaleOrders();
}

function saleOrdersStatus() {
    return $("sale-orders-status").value;
}

async function loadSaleOrders() {
    const id = state.selected;
    const body = $("sale-orders-rows");
    saleOrders.shown = id;
    saleOrders.key = `${id}:${!!adminToken()}`;
    $("sale-orders-csv").disabled = !id || !adminToken();
    if (!id) {
        body.replaceChildren();
        say($("sale-orders-msg"), "Select a voucher above.");
        return;
    }
    const tok = adminToken();
    if (!tok) {
        body.replaceChildren();
        say($("sale-orders-msg"), "Log in to see the orders.");
        return;
    }
    const res = await call("GET", `/api/vouchers/${id}/orders?limit=50&status=${saleOrdersStatus()}`, { token: tok });
    if (saleOrders.shown !== id) return; // another was selected meanwhile
    if (!res.ok) {
        if (sessionGone(res, tok)) return;
        say($("sale-orders-msg"), "Could not load the orders: " + describeError(res).text, "warn");
        return;
    }
    const t = (x) => (x ? localTime(x) : "–");
    body.replaceChildren(
        ...res.data.items.map((o) =>
            el(
                "tr",
                { "data-order-id": o.id },
                el("td", { class: "mono" }, o.id),
                el("td", { class: "mono" }, o.userId),
                el("td", {}, o.status),
                el("td", { class: "num" }, money(o.amount)),
                el("td", {}, t(o.createTime)),
                el("td", {}, t(o.payDeadline)),
                el("td", {}, t(o.payTime)),
                el("td", {}, t(o.closeTime)),
            ),
        ),
    );
    const more = res.data.nextCursor ? " (the newest 50: the CSV has them all)" : "";
    say($("sale-orders-msg"), res.data.items.length ? `Voucher ${id}${more}.` : `Voucher ${id} has no orders yet.`);
}

async function downloadSaleOrders() {
    const id = state.selected;
    const tok = adminToken();
    const button = $("sale-orders-csv");
    if (!id || !tok) return;
    button.disabled = true;
    say($("sale-orders-msg"), `Downloading the orders of voucher ${id}…`);
    try {
        const resp = await fetch(`/api/vouchers/${id}/orders?status=${saleOrdersStatus()}`, {
            headers: { Authorization: `Bearer ${tok}`, Accept: "text/csv" },
        });
        if (!resp.ok) {
            say($("sale-orders-msg"), `The download was refused (HTTP ${resp.status}).`, "warn");
            return;
        }
        // A body cut short (the server closed the stream early) rejects
        // here rather than saving half a file.
        const blob = await resp.blob();
        const url = URL.createObjectURL(blob);
        const a = el("a", { href: url, download: `voucher-${id}-orders.csv`, hidden: "" });
        document.body.append(a);
        a.click();
        a.remove();
        setTimeout(() => URL.revokeObjectURL(url), 60000);
        say($("sale-orders-msg"), `Saved voucher-${id}-orders.csv (${blob.size.toLocaleString()} bytes).`, "ok");
    } catch (e) {
        say($("sale-orders-msg"), `The download failed: ${e.message}`, "warn");
    } finally {
        button.disabled = false;
    }
}

$("sale-orders-csv").addEventListener("click", downloadSaleOrders);
$("sale-orders-refresh").addEventListener("click", loadSaleOrders);
$("sale-orders-status").addEventListener("change", loadSaleOrders);

// ---- start ----

// The chart is drawn to the page's width: again when that changes.
window.addEventListener("resize", renderList);

$("shop-id").value = state.shopId;
syncType();
showMoney();
renderSession();
initRecords(adminToken, sessionGone);
loadList().then(() => setStart(60));
pollMetrics();
setInterval(() => {
    if (document.visibilityState === "visible") loadList();
}, LIST_REFRESH_MS);
setInterval(() => {
    if (document.visibilityState === "visible") pollStock();
}, STOCK_POLL_MS);
setInterval(() => {
    if (document.visibilityState === "visible") pollMetrics();
}, METRICS_POLL_MS);
