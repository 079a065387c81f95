// buyer.js - the buyer's page: log in with a phone code, the vouchers of a
// shop with their stock and a countdown on the server's clock, a buy
// button per voucher, the outcome in words, and my orders.
//
// A voucher's button opens when the server's clock has surely reached the
// sale's start (api.js, clock) and is disabled while its purchase is in
// flight, so one click is one request. It is not disabled by a stock of
// 0: the stock shown is as old as the last refresh, and the server's
// answer ("sold out", "already purchased") is what counts.

import {
    call,
    clock,
    describeError,
    duration,
    el,
    localTime,
    money,
    say,
    tightenClock,
} from "./api.js";

const SESSION_KEY = "seckill.session";
const LIST_REFRESH_MS = 5000;
const ORDERS_REFRESH_MS = 15000;
const TICK_MS = 100;
// Start narrowing the clock this long before a sale opens.
const CLOCK_LEAD_MS = 20000;

const $ = (id) => document.getElementById(id);

// The timers redraw every card ten times a second: touch the page only
// where something changed.
function setText(node, text) {
    if (node.textContent !== text) node.textContent = text;
}

function setClass(node, name) {
    if (node.className !== name) node.className = name;
}

const state = {
    session: loadSession(),
    shopId: initialShop(),
    vouchers: new Map(), // id -> voucher (API object)
    cards: new Map(), // id -> {node, refs}
    purchase: new Map(), // id -> {inFlight, waitUntil}
    titles: new Map(), // voucher id -> title, for the orders
    tightening: false,
};

// ---- session ----

function loadSession() {
    try {
        const s = JSON.parse(localStorage.getItem(SESSION_KEY) || "null");
        if (s && s.token && s.expiresAt > Date.now()) return s;
    } catch {
        // a damaged entry is dropped below
    }
    localStorage.removeItem(SESSION_KEY);
    return null;
}

function saveSession(s) {
    state.session = s;
    if (s) localStorage.setItem(SESSION_KEY, JSON.stringify(s));
    else localStorage.removeItem(SESSION_KEY);
    renderSession();
}

function renderSession() {
    const s = state.session;
    $("who").hidden = !s;
    $("login").hidden = !!s;
    $("orders").hidden = !s;
    if (s) {
        $("who-phone").textContent = s.phone;
        loadOrders();
    } else {
        $("order-list").replaceChildren();
    }
    for (const id of state.cards.keys()) renderVoucher(id);
}

// An answer of 401 means the token is gone: back to the login form.
function expired(res) {
    if (res.status !== 401 || !state.session) return false;
    saveSession(null);
    say($("login-msg"), describeError(res).text, "bad");
    return true;
}

// ---- log in ----

$("code-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const phone = $("phone").value.trim();
    const button = $("send-code");
    button.disabled = true;
    say($("login-msg"), "Sending…");
    const res = await call("POST", "/api/auth/code", { body: { phone } });
    button.disabled = false;
    if (!res.ok) {
        say($("login-msg"), describeError(res).text, "bad");
        return;
    }
    $("login-form").hidden = false;
    const minutes = Math.round(res.data.expiresIn / 60);
    if (res.data.code) {
        // Development mode: the service answers with the code.
        $("dev-code-value").textContent = res.data.code;
        $("dev-code").hidden = false;
        $("code").value = res.data.code;
    }
    say($("login-msg"), `Code sent to ${res.data.phone}; valid for ${minutes} min.`, "ok");
    $("code").focus();
});

$("login-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const phone = $("phone").value.trim();
    const code = $("code").value.trim();
    const button = $("login-button");
    button.disabled = true;
    say($("login-msg"), "Logging in…");
    const res = await call("POST", "/api/auth/login", { body: { phone, code } });
    button.disabled = false;
    if (!res.ok) {
        const words =
            res.error.code === "UNAUTHORIZED"
                ? "Wrong or expired code: ask for a new one."
                : describeError(res).text;
        say($("login-msg"), words, "bad");
        return;
    }
    $("dev-code").hidden = true;
    $("login-form").hidden = true;
    $("code").value = "";
    say($("login-msg"), "");
    saveSession({
        token: res.data.token,
        phone: res.data.user.phone,
        userId: res.data.user.id,
        expiresAt: Date.now() + res.data.expiresIn * 1000,
    });
});

$("logout").addEventListener("click", () => saveSession(null));

// ---- the shop's vouchers ----

function initialShop() {
    const q = new URLSearchParams(location.search).get("shop");
    return /^[1-9][0-9]{0,17}$/.test(q || "") ? q : "1";
}

$("shop-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const v = $("shop-id").value.trim();
    if (!/^[1-9][0-9]{0,17}$/.test(v)) {
        say($("shop-msg"), "A shop is a positive whole number.", "bad");
        return;
    }
    state.shopId = v;
    const url = new URL(location.href);
    url.searchParams.set("shop", v);
    history.replaceState(null, "", url);
    state.vouchers.clear();
    for (const c of state.cards.values()) c.node.remove();
    state.cards.clear();
    loadVouchers();
});

async function loadVouchers() {
    const shop = state.shopId;
    const res = await call("GET", `/api/vouchers?shopId=${shop}&limit=50`);
    if (shop !== state.shopId) return; // the shop changed meanwhile
    if (!res.ok) {
        say($("shop-msg"), "Could not load the vouchers: " + describeError(res).text, "warn");
        return;
    }
    const items = res.data.items;
    say($("shop-msg"), items.length ? "" : `Shop ${shop} has no vouchers yet.`);
    const seen = new Set();
    const list = $("vouchers");
    items.forEach((v, i) => {
        seen.add(v.id);
        state.vouchers.set(v.id, v);
        state.titles.set(v.id, v.title);
        if (!state.cards.has(v.id)) state.cards.set(v.id, makeCard(v));
        const node = state.cards.get(v.id).node;
        if (list.children[i] !== node) list.insertBefore(node, list.children[i] || null);
        renderVoucher(v.id);
    });
    for (const [id, c] of state.cards)
        if (!seen.has(id)) {
            c.node.remove();
            state.cards.delete(id);
            state.vouchers.delete(id);
        }
}

function makeCard(v) {
    const refs = {
        title: el("h3"),
        sub: el("div", { class: "sub" }),
        price: el("div", { class: "price" }),
        pill: el("span", { class: "pill" }),
        stock: el("span"),
        bar: el("div"),
        when: el("div", { class: "hint" }),
        countdown: el("span", { class: "countdown" }),
        button: el("button", { type: "button", class: "buy" }, "Buy now"),
        msg: el("p", { class: "msg", role: "status" }),
    };
    refs.button.addEventListener("click", () => buy(v.id));
    const node = el(
        "li",
        { class: "voucher", "data-voucher-id": v.id },
        refs.title,
        refs.sub,
        refs.price,
        el("div", { class: "row spread" }, refs.pill, refs.stock),
        el("div", { class: "stockbar" }, refs.bar),
        refs.when,
        el("div", {}, refs.countdown),
        refs.button,
        refs.msg,
    );
    return { node, refs, initialStock: v.stock };
}

// Where a voucher's sale stands on the server's clock now.
function phase(v) {
    if (v.type !== "seckill") return "regular";
    const begin = Date.parse(v.beginTime);
    const end = Date.parse(v.endTime);
    const now = clock.now();
    if (!clock.surelyReached(begin)) return now < begin - 1000 ? "upcoming" : "opening";
    if (now >= end) return "ended";
    return "live";
}

function renderVoucher(id) {
    const v = state.vouchers.get(id);
    const card = state.cards.get(id);
    if (!v || !card) return;
    const r = card.refs;
    const p = state.purchase.get(id) || {};
    setText(r.title, v.title);
    setText(r.sub, [v.subTitle, v.rules].filter(Boolean).join(" · "));
    const price = `${v.payValue}/${v.actualValue}`;
    if (card.price !== price) {
        card.price = price;
        r.price.replaceChildren(money(v.payValue), el("small", {}, money(v.actualValue)));
    }
    const ph = phase(v);
    const now = clock.now();

    if (ph === "regular") {
        setText(r.pill, "Regular voucher");
        setClass(r.pill, "pill");
        setText(r.stock, "");
        r.bar.parentElement.hidden = true;
        setText(r.when, "Not part of the flash sale.");
        setText(r.countdown, "");
        r.button.hidden = true;
        return;
    }
    r.bar.parentElement.hidden = false;
    card.initialStock = Math.max(card.initialStock || 0, v.stock);
    setText(r.stock, v.stock > 0 ? `${v.stock} left` : "none left");
    r.bar.style.width = card.initialStock
        ? `${Math.round((100 * v.stock) / card.initialStock)}%`
        : "0";
    setText(r.when, `${localTime(v.beginTime)} – ${localTime(v.endTime)}`);

    const begin = Date.parse(v.beginTime);
    const end = Date.parse(v.endTime);
    let label = "Buy now";
    let enabled = false;
    if (ph === "upcoming" || ph === "opening") {
        const left = ph === "opening" ? "Opening…" : `Starts in ${duration(begin - now)}`;
        setText(r.pill, "Starts soon");
        setClass(r.pill, "pill soon");
        setText(r.countdown, left);
        label = left;
    } else if (ph === "ended") {
        setText(r.pill, "Ended");
        setClass(r.pill, "pill gone");
        setText(r.countdown, "The sale is over.");
        label = "Ended";
    } else {
        setText(r.pill, v.stock > 0 ? "On sale" : "Sold out");
        setClass(r.pill, v.stock > 0 ? "pill live" : "pill gone");
        setText(r.countdown, `Ends in ${duration(end - now)}`);
        enabled = true;
    }
    if (enabled && !state.session) {
        label = "Log in to buy";
    } else if (p.inFlight) {
        label = "Buying…";
        enabled = false;
    } else if (p.waitUntil && p.waitUntil > Date.now()) {
        label = `Wait ${Math.ceil((p.waitUntil - Date.now()) / 1000)} s`;
        enabled = false;
    }
    r.button.hidden = false;
    r.button.disabled = !enabled;
    setText(r.button, label);
}

// ---- buying ----

async function buy(id) {
    const card = state.cards.get(id);
    const p = state.purchase.get(id) || {};
    if (!card || p.inFlight) return;
    if (!state.session) {
        say(card.refs.msg, "Log in first: enter your phone number.", "warn");
        $("phone").focus();
        return;
    }
    p.inFlight = true;
    state.purchase.set(id, p);
    say(card.refs.msg, "Buying…");
    renderVoucher(id);
    const res = await call("POST", `/api/vouchers/${id}/seckill`, {
        token: state.session.token,
    });
    p.inFlight = false;
    if (res.ok) {
        say(card.refs.msg, `Bought! Order ${res.data.orderId}.`, "ok");
        loadOrders();
        refreshVoucher(id);
    } else {
        const d = describeError(res);
        say(card.refs.msg, d.text, d.tone);
        if (d.wait && res.error.code === "RATE_LIMITED")
            p.waitUntil = Date.now() + d.wait * 1000;
        if (d.checkOrders) loadOrders();
        if (res.error.code === "SOLD_OUT") refreshVoucher(id);
        expired(res);
    }
    renderVoucher(id);
}

async function refreshVoucher(id) {
    const res = await call("GET", `/api/vouchers/${id}`);
    if (res.ok && state.vouchers.has(id)) {
        state.vouchers.set(id, res.data);
        renderVoucher(id);
    }
}

// ---- my orders ----

const STATUS_WORDS = {
    unpaid: "Unpaid",
    paid: "Paid",
    used: "Used",
    cancelled: "Cancelled",
    refunding: "Refunding",
    refunded: "Refunded",
};

// The buttons of an order. Paying and cancelling come with the order's
// lifecycle; each returns an element for the order's row.
function orderActions(order) {
    void order;
    return [];
}

async function voucherTitle(id) {
    if (state.titles.has(id)) return state.titles.get(id);
    const res = await call("GET", `/api/vouchers/${id}`);
    const title = res.ok ? res.data.title : `Voucher ${id}`;
    state.titles.set(id, title);
    return title;
}

let ordersLoading = false;

async function loadOrders() {
    if (!state.session || ordersLoading) return;
    ordersLoading = true;
    try {
        const res = await call("GET", "/api/orders?limit=50", {
            token: state.session.token,
        });
        if (expired(res)) return;
        if (!res.ok) {
            say($("orders-msg"), describeError(res).text, "warn");
            return;
        }
        const items = res.data.items;
        say($("orders-msg"), items.length ? "" : "No orders yet.");
        const rows = [];
        for (const o of items) {
            const title = await voucherTitle(o.voucherId);
            rows.push(
                el(
                    "li",
                    { "data-order-id": o.id },
                    el(
                        "div",
                        {},
                        el("div", {}, title),
                        el("div", { class: "hint mono" }, `Order ${o.id}`),
                    ),
                    el(
                        "div",
                        {},
                        el(
                            "div",
                            { class: `status ${o.status}` },
                            STATUS_WORDS[o.status] || o.status,
                        ),
                        el("div", { class: "hint" }, localTime(o.createTime)),
                    ),
                    ...orderActions(o),
                ),
            );
        }
        $("order-list").replaceChildren(...rows);
    } finally {
        ordersLoading = false;
    }
}

$("orders-refresh").addEventListener("click", loadOrders);

// ---- the clock and the timers ----

function tick() {
    const c = $("clock");
    if (clock.known()) {
        const t = new Date(clock.now()).toLocaleTimeString();
        const pm = Math.round(clock.uncertainty() / 2);
        c.textContent = `Server clock: ${t} (±${pm} ms)`;
    }
    let soon = false;
    for (const [id, v] of state.vouchers) {
        renderVoucher(id);
        if (v.type === "seckill") {
            const dt = Date.parse(v.beginTime) - clock.now();
            if (dt > -2000 && dt < CLOCK_LEAD_MS) soon = true;
        }
    }
    // A sale opens soon: know the server's time to a few tens of ms.
    if (soon && !state.tightening && clock.uncertainty() > 60) {
        state.tightening = true;
        tightenClock(60, 12).finally(() => {
            state.tightening = false;
        });
    }
}

$("shop-id").value = state.shopId;
renderSession();
loadVouchers().then(() => tightenClock(200, 4));
setInterval(tick, TICK_MS);
setInterval(() => {
    if (document.visibilityState === "visible") loadVouchers();
}, LIST_REFRESH_MS);
setInterval(() => {
    if (document.visibilityState === "visible") loadOrders();
}, ORDERS_REFRESH_MS);
