// buyer.js - the buyer's page: log in with a phone code, the vouchers of a
// shop with their stock and a countdown on the server's clock, a buy
// button per voucher, the outcome in words, and my orders.
//
// A voucher's button opens when the server's clock has surely reached the
// sale's start (api.js, clock) and is disabled while its purchase is in
// flight, so one click is one request. It is not disabled by a stock of
// 0: the stock shown is as old as the last refresh, and the server's
// answer ("sold out", "already purchased") is what counts.
//
// An unpaid order counts down to its pay deadline on the server's clock
// and has a cancel button, and in development mode (the service showed
// the login code) a pay button for the simulated payment provider.

import {
    call,
    clock,
    describeError,
    duration,
    el,
    localTime,
    money,
    requestCode,
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
    orders: new Map(), // order id -> {order, refs, busy}
    tightening: false,
    devMode: false, // the service showed the login code
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
        state.orders.clear();
    }
    for (const id of state.cards.keys()) renderVoucher(id);
}

// An answer of 401 means the token is gone: back to the login form.
function sessionGone(res) {
    if (res.status !== 401 || !state.session) return false;
    saveSession(null);
    say($("login-msg"), describeError(res).text, "bad");
    return true;
}

// ---- log in ----

// The bar of the proof of work that comes before a code, at fraction f of
// the numbers searched (null hides it).
function showPow(f) {
    $("pow").hidden = f === null;
    if (f === null) return;
    const pct = Math.min(100, Math.round(f * 100));
    $("pow-progress").value = pct;
    setText($("pow-percent"), `${pct}%`);
}

$("code-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const phone = $("phone").value.trim();
    const button = $("send-code");
    button.disabled = true;
    say($("login-msg"), "Sending…");
    const res = await requestCode(phone, (f) => {
        // Said once, when the work starts: the bar changes too often to
        // be read out as it goes.
        if ($("pow").hidden) say($("login-msg"), "Checking this browser before sending the code…");
        showPow(f);
    });
    showPow(null);
    button.disabled = false;
    if (!res.ok) {
        say($("login-msg"), describeError(res).text, "bad");
        return;
    }
    $("login-form").hidden = false;
    const minutes = Math.round(res.data.expiresIn / 60);
    state.devMode = !!res.data.code;
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
        // The service showed the code: development mode, where orders
        // can be paid with the simulated provider.
        dev: state.devMode,
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
    if (res.ok && res.data.status === "pending") {
        // An async sale: sold, and the order is being written to the
        // database; it shows in My orders a moment later.
        say(card.refs.msg, `Bought! Order ${res.data.orderId} is being recorded.`, "ok");
        setTimeout(loadOrders, 500);
        refreshVoucher(id);
    } else if (res.ok) {
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
        sessionGone(res);
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
    pending: "Being recorded",
    unpaid: "Unpaid",
    paid: "Paid",
    cancelled: "Cancelled",
    expired: "Expired",
};

// The buttons of an order: cancel an unpaid one, and in development mode
// pay it with the simulated provider.
function orderActions(order) {
    if (order.status !== "unpaid") return [];
    const buttons = [];
    if (state.session && state.session.dev)
        buttons.push(
            el("button", { type: "button", class: "pay", onclick: () => orderAction(order.id, "pay") }, "Pay (dev)"),
        );
    buttons.push(
        el(
            "button",
            { type: "button", class: "secondary cancel", onclick: () => orderAction(order.id, "cancel") },
            "Cancel",
        ),
    );
    return buttons;
}

async function orderAction(id, verb) {
    const row = state.orders.get(id);
    if (!row || row.busy || !state.session) return;
    row.busy = true;
    for (const b of row.refs.actions.querySelectorAll("button")) b.disabled = true;
    say(row.refs.msg, verb === "pay" ? "Paying…" : "Cancelling…");
    const res = await call("POST", `/api/orders/${id}/${verb}`, { token: state.session.token });
    row.busy = false;
    if (res.ok) {
        say(row.refs.msg, verb === "pay" ? "Paid." : "Cancelled: the voucher is back on sale.", "ok");
        renderOrder(res.data);
        if (verb === "cancel") refreshVoucher(res.data.voucherId);
        return;
    }
    if (sessionGone(res)) return;
    say(row.refs.msg, describeError(res).text, describeError(res).tone);
    loadOrders();
}

// Create or update the row of order o in the list (at position i, if
// given).
function renderOrder(o, i) {
    let row = state.orders.get(o.id);
    if (!row) {
        const refs = {
            title: el("div"),
            status: el("div"),
            when: el("div", { class: "hint" }),
            deadline: el("div", { class: "hint countdown" }),
            actions: el("div", { class: "row" }),
            msg: el("p", { class: "msg", role: "status" }),
        };
        const node = el(
            "li",
            { "data-order-id": o.id },
            el("div", {}, refs.title, el("div", { class: "hint mono" }, `Order ${o.id}`)),
            el("div", {}, refs.status, refs.when, refs.deadline),
            refs.actions,
            refs.msg,
        );
        row = { node, refs, order: o, busy: false };
        state.orders.set(o.id, row);
    }
    const changed = !row.order || row.order.status !== o.status || !row.node.isConnected;
    row.order = o;
    setText(row.refs.title, state.titles.get(o.voucherId) || `Voucher ${o.voucherId}`);
    setText(row.refs.status, STATUS_WORDS[o.status] || o.status);
    setClass(row.refs.status, `status ${o.status}`);
    setText(row.refs.when, localTime(o.createTime));
    if (changed || !row.refs.actions.children.length) row.refs.actions.replaceChildren(...orderActions(o));
    const list = $("order-list");
    if (i !== undefined && list.children[i] !== row.node) list.insertBefore(row.node, list.children[i] || null);
    tickOrder(row);
}

// The countdown to an unpaid order's deadline, on the server's clock.
function tickOrder(row) {
    const o = row.order;
    if (o.status !== "unpaid" || !o.payDeadline) {
        setText(row.refs.deadline, o.payTime ? `Paid ${localTime(o.payTime)}` : "");
        return;
    }
    const left = Date.parse(o.payDeadline) - clock.now();
    if (left > 0) {
        setText(row.refs.deadline, `Pay within ${duration(left)}`);
        return;
    }
    setText(row.refs.deadline, "Time to pay is up");
    for (const b of row.refs.actions.querySelectorAll("button.pay")) b.disabled = true;
    // The service expires it: read it again shortly.
    if (!row.recheck) row.recheck = setTimeout(() => ((row.recheck = null), loadOrders()), 1500);
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
        if (sessionGone(res)) return;
        if (!res.ok) {
            say($("orders-msg"), describeError(res).text, "warn");
            return;
        }
        const items = res.data.items;
        say($("orders-msg"), items.length ? "" : "No orders yet.");
        for (const o of items) await voucherTitle(o.voucherId);
        const keep = new Set(items.map((o) => o.id));
        for (const [id, row] of state.orders)
            if (!keep.has(id)) {
                row.node.remove();
                state.orders.delete(id);
            }
        items.forEach((o, i) => renderOrder(o, i));
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
    for (const row of state.orders.values()) tickOrder(row);
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
