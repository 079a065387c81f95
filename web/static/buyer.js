// buyer.js - the buyer's page: log in with a phone code, the sales on now
// and those beginning within a day across shops (GET /api/sales), or with
// a shop chosen all of that shop's vouchers, with their stock and a
// countdown on the server's clock, a buy button per voucher, the outcome
// in words, and my orders.
//
// A voucher's button follows the buyer's state: "View my order" while
// the buyer has an order of it that is not closed (being recorded,
// unpaid or paid; it takes the buyer to the order), "Buy now" again once
// that order was cancelled or expired, and disabled "Sold out" while the
// last stock read was 0 (read again every few seconds: a cancelled unit
// comes back). It opens when the server's clock has surely reached the
// sale's start (api.js, clock) and is disabled while its purchase is in
// flight, so one click is one request.
//
// Logged out, the login form comes before the vouchers; logged in, the
// header links to My orders, and a bar that stays at the top of the
// screen names the unpaid orders, the amount and the time left to pay.
// Only messages that matter are live regions (a purchase's outcome, an
// error, a place in a queue now and then): countdowns are not.
//
// A queue sale (admission "queue") is bought through its waiting room
// instead: the card's button joins the queue (with the proof of work the
// service may want), the page reads the buyer's place as often as the
// service's Retry-After says (never more than once a second), and when
// the place is admitted it buys once with the room's ticket. That the
// buyer joined is kept in the tab's session storage per voucher, so a
// reload reads the place again instead of joining anew.
//
// An unpaid order counts down to its pay deadline on the server's clock
// and has a cancel button (asked again before it cancels), and in
// development mode (the service showed the login code) a pay button for
// the simulated payment provider. My orders shows the newest 50, and
// older ones a page at a time (the API's cursor).

import {
    call,
    clock,
    clockTime,
    count,
    describeError,
    duration,
    el,
    joinQueue,
    localNow,
    localRange,
    localTime,
    money,
    requestCode,
    say,
    siteReady,
    tightenClock,
} from "./api.js";

const SESSION_KEY = "seckill.session";
const LIST_REFRESH_MS = 5000;
const ORDERS_REFRESH_MS = 15000;
const TICK_MS = 100;
// Start narrowing the clock this long before a sale opens.
const CLOCK_LEAD_MS = 20000;
// Where the tab keeps that its buyer joined the queue of voucher id.
const QUEUE_KEY_PREFIX = "seckill.queue.";
// How long before the begin a waiting room takes buyers, when a voucher
// does not say (its queueOpensAt does): the service's default
// SECKILL_WAITROOM_OPEN_S. A join refused as too early says when the room
// really opens, and the page takes that instead (kept in the tab under
// WAITROOM_OPEN_KEY).
const WAITROOM_OPEN_MS = 600 * 1000;
const WAITROOM_OPEN_KEY = "seckill.waitroom-open-ms";
// A buyer's place is read at most once a second (the service's limit).
const POLL_MIN_MS = 1000;
// After a failed read, the next waits up to this long.
const POLL_BACKOFF_MAX_MS = 10000;
// A place is announced to screen readers at most this often (an
// admission at once).
const ANNOUNCE_GAP_MS = 5000;

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
    queues: new Map(), // id -> this buyer's place in its waiting room
    waitroomOpenMs: learntWaitroomOpenMs(),
    codeRequest: null, // {phone, id}: the last code asked for, for its login
    known: new Map(), // voucher id -> {title, payValue}, for the orders
    orders: new Map(), // order id -> {order, refs, busy, older}
    olderCursor: null, // where the next page of older orders starts
    olderShown: false, // the buyer asked for older orders
    tightening: false,
    devMode: false, // the service showed the login code
};

// ---- session ----

function learntWaitroomOpenMs() {
    const ms = parseInt(sessionStorage.getItem(WAITROOM_OPEN_KEY) || "", 10);
    return ms >= 0 ? ms : WAITROOM_OPEN_MS;
}

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
    else {
        localStorage.removeItem(SESSION_KEY);
        // The places were the old session's: stop reading them.
        for (const id of [...state.queues.keys()]) stopQueue(id);
        forgetQueueMarks();
    }
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
        state.olderCursor = null;
        state.olderShown = false;
        $("orders-more").hidden = true;
    }
    for (const id of state.cards.keys()) renderVoucher(id);
    renderUnpaidBar();
}

// An answer of 401 means the token is gone: back to the login form.
function sessionGone(res) {
    if (res.status !== 401 || !state.session) return false;
    saveSession(null);
    say($("login-msg"), describeError(res).text, "bad");
    return true;
}

// ---- log in ----

// Show words under the field with id (the input's aria-describedby names
// that element, id + "-error"), and mark the input invalid; "" clears it.
// The element is a live region: the error is said once, as it comes.
function fieldError(id, words) {
    setText($(id + "-error"), words);
    if (words) $(id).setAttribute("aria-invalid", "true");
    else $(id).removeAttribute("aria-invalid");
}

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
    fieldError("phone", "");
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
        const words = describeError(res).text;
        if (res.error.code === "BAD_REQUEST") {
            fieldError("phone", words);
            say($("login-msg"), "");
        } else say($("login-msg"), words, "bad");
        return;
    }
    fieldError("phone", "");
    $("login-form").hidden = false;
    // The login carries it: checked against this code alone, it is not
    // held up by someone else guessing codes for the phone.
    state.codeRequest = { phone, id: res.data.codeRequest };
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
    const asked = state.codeRequest && state.codeRequest.phone === phone ? state.codeRequest.id : null;
    let res = await call("POST", "/api/auth/login", { body: asked ? { phone, code, codeRequest: asked } : { phone, code } });
    // A code from an earlier SMS is not the last request's: try it alone.
    if (!res.ok && asked && res.error.code === "UNAUTHORIZED")
        res = await call("POST", "/api/auth/login", { body: { phone, code } });
    button.disabled = false;
    if (!res.ok) {
        if (res.error.code === "UNAUTHORIZED" || res.error.code === "BAD_REQUEST") {
            fieldError("code", res.error.code === "UNAUTHORIZED" ? "Wrong or expired code: ask for a new one." : describeError(res).text);
            say($("login-msg"), "");
        } else say($("login-msg"), describeError(res).text, "bad");
        return;
    }
    fieldError("code", "");
    state.codeRequest = null;
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

// Log out on the server first (the token is refused from then on), and
// forget the session whatever the answer: a 401 means the server refuses
// the token already.
$("logout").addEventListener("click", async () => {
    const s = state.session;
    if (!s) return;
    const button = $("logout");
    button.disabled = true;
    for (const id of [...state.queues.keys()]) stopQueue(id);
    const res = await call("POST", "/api/auth/logout", { token: s.token });
    button.disabled = false;
    if (state.session === s) saveSession(null);
    $("phone").focus();
    if (res.ok || res.status === 401) say($("login-msg"), "Logged out.", "ok");
    else
        say(
            $("login-msg"),
            `Logged out of this page, but the server did not confirm it: ${describeError(res).text}`,
            "warn",
        );
});

// ---- the sales, or one shop's vouchers ----

// The shop of the address (?shop=N), or "" for every shop's sales.
function initialShop() {
    const q = new URLSearchParams(location.search).get("shop");
    return /^[1-9][0-9]{0,17}$/.test(q || "") ? q : "";
}

$("shop-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const v = $("shop-id").value.trim();
    if (v !== "" && !/^[1-9][0-9]{0,17}$/.test(v)) {
        fieldError("shop-id", "A shop is a positive whole number, or empty for every shop.");
        return;
    }
    fieldError("shop-id", "");
    state.shopId = v;
    const url = new URL(location.href);
    if (v) url.searchParams.set("shop", v);
    else url.searchParams.delete("shop");
    history.replaceState(null, "", url);
    state.vouchers.clear();
    for (const [id, c] of state.cards) {
        c.node.remove();
        stopQueue(id);
    }
    state.cards.clear();
    loadVouchers();
});

// Without a shop: the sales on now (ending soonest first), then those
// beginning within a day (soonest first), across shops. With one: all of
// that shop's vouchers, newest first.
async function fetchVouchers(shop) {
    if (shop) {
        const res = await call("GET", `/api/vouchers?shopId=${shop}&limit=50`);
        return res.ok ? { items: res.data.items } : { res };
    }
    const [live, upcoming] = await Promise.all([
        call("GET", "/api/sales?status=live&limit=50"),
        call("GET", "/api/sales?status=upcoming&within=86400&limit=50"),
    ]);
    if (!live.ok) return { res: live };
    if (!upcoming.ok) return { res: upcoming };
    return { items: live.data.items.concat(upcoming.data.items) };
}

async function loadVouchers() {
    const shop = state.shopId;
    const { items, res } = await fetchVouchers(shop);
    if (shop !== state.shopId) return; // the shop changed meanwhile
    if (!items) {
        say($("shop-msg"), "Could not load the vouchers: " + describeError(res).text, "warn");
        return;
    }
    $("shop-title").textContent = shop ? `Shop ${shop}` : "On sale now and today";
    say(
        $("shop-msg"),
        items.length ? "" : shop ? `Shop ${shop} has no vouchers yet.` : "No sale is on now or begins today.",
    );
    const seen = new Set();
    const list = $("vouchers");
    items.forEach((v, i) => {
        seen.add(v.id);
        state.vouchers.set(v.id, v);
        state.known.set(v.id, { title: v.title, payValue: v.payValue });
        if (!state.cards.has(v.id)) state.cards.set(v.id, makeCard(v));
        const node = state.cards.get(v.id).node;
        if (list.children[i] !== node) list.insertBefore(node, list.children[i] || null);
        renderVoucher(v.id);
    });
    for (const [id, c] of state.cards)
        if (!seen.has(id)) {
            c.node.remove();
            stopQueue(id);
            state.cards.delete(id);
            state.vouchers.delete(id);
        }
}

function isQueueSale(v) {
    return v.type === "seckill" && v.admission === "queue";
}

function makeCard(v) {
    const queue = isQueueSale(v);
    const titleId = `voucher-${v.id}-title`;
    const buttonId = `voucher-${v.id}-button`;
    const refs = {
        title: el("h3", { id: titleId }),
        sub: el("div", { class: "sub" }),
        price: el("div", { class: "price" }),
        pill: el("span", { class: "pill" }),
        stock: el("span", { class: "stock" }),
        bar: el("div"),
        when: el("div", { class: "hint" }),
        countdown: el("span", { class: "countdown" }),
        // The buyer's order of this voucher, a link to it in My orders.
        mine: el("a", { class: "mine", href: "#orders" }),
        // Named with the voucher's title too ("Buy now 50 off"): every
        // card has one, and a list of buttons must tell them apart.
        button: el(
            "button",
            { type: "button", class: queue ? "buy join" : "buy", id: buttonId, "aria-labelledby": `${buttonId} ${titleId}` },
            queue ? "Join the queue" : "Buy now",
        ),
        msg: el("p", { class: "msg", role: "status" }),
    };
    if (queue) {
        // The place as it stands, redrawn as the clock runs: hidden from
        // screen readers, which hear it from the live region below, said
        // at most every few seconds.
        refs.place = el("p", { class: "place", "aria-hidden": "true" });
        refs.live = el("span", { class: "sr-only", role: "status", "aria-live": "polite", "aria-atomic": "true" });
    }
    refs.button.addEventListener("click", () => {
        const mine = activeOrder(v.id);
        if (mine) showOrder(mine.id);
        else if (queue) queueClick(v.id);
        else buy(v.id);
    });
    refs.mine.addEventListener("click", (ev) => {
        const mine = activeOrder(v.id);
        if (!mine) return;
        ev.preventDefault();
        showOrder(mine.id);
    });
    const node = el(
        "li",
        { class: queue ? "voucher queue-sale" : "voucher", "data-voucher-id": v.id },
        refs.title,
        refs.sub,
        refs.price,
        el(
            "div",
            { class: "row spread" },
            queue ? el("span", { class: "pills" }, refs.pill, " ", el("span", { class: "pill queue" }, "Waiting room")) : refs.pill,
            refs.stock,
        ),
        el("div", { class: "stockbar" }, refs.bar),
        refs.when,
        el("div", {}, refs.countdown),
        refs.place,
        refs.button,
        refs.live,
        refs.msg,
        refs.mine,
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
    const price = `${money(v.payValue)}/${money(v.actualValue)}`;
    if (card.price !== price) {
        card.price = price;
        r.price.replaceChildren(
            money(v.payValue),
            el("small", {}, el("span", { class: "sr-only" }, "instead of "), money(v.actualValue)),
        );
    }
    renderMine(id, card);
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
    setText(r.stock, v.stock > 0 ? `${count(v.stock)} left` : "none left");
    r.bar.style.width = card.initialStock
        ? `${Math.round((100 * v.stock) / card.initialStock)}%`
        : "0";
    setText(r.when, localRange(v.beginTime, v.endTime));

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
    const mine = activeOrder(id);
    if (mine && !p.inFlight) {
        // Bought (or on its way): the button leads to the order.
        if (r.place) r.place.hidden = true;
        r.button.hidden = false;
        r.button.disabled = false;
        setText(r.button, "View my order");
        setClass(r.button, "buy view");
        return;
    }
    if (isQueueSale(v)) {
        setClass(r.button, "buy join");
        renderQueue(v, card, ph);
        return;
    }
    setClass(r.button, "buy");
    if (enabled && v.stock <= 0) {
        label = "Sold out";
        enabled = false;
    } else if (enabled && !state.session) {
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

// Buy voucher id; a queue sale's purchase carries the ticket of the
// buyer's admitted place. Resolves to the answer (null when nothing was
// sent: not logged in, or a purchase already in flight).
async function buy(id, ticket) {
    const card = state.cards.get(id);
    const p = state.purchase.get(id) || {};
    if (!card || p.inFlight) return null;
    if (!state.session) {
        say(card.refs.msg, "Log in first: enter your phone number.", "warn");
        $("phone").focus();
        return null;
    }
    p.inFlight = true;
    state.purchase.set(id, p);
    say(card.refs.msg, "Buying…");
    renderVoucher(id);
    const res = await call("POST", `/api/vouchers/${id}/seckill`, {
        token: state.session.token,
        headers: ticket ? { "Seckill-Ticket": ticket } : undefined,
    });
    p.inFlight = false;
    if (res.ok && res.data.status === "pending") {
        // An async sale: sold, and the order is being written to the
        // database; it shows in My orders a moment later.
        say(card.refs.msg, `Bought! Order ${res.data.orderId} is being recorded: pay for it in My orders.`, "ok");
        setTimeout(loadOrders, 500);
        refreshVoucher(id);
    } else if (res.ok) {
        say(card.refs.msg, `Bought! Order ${res.data.orderId}. Pay for it in My orders.`, "ok");
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
    return res;
}

async function refreshVoucher(id) {
    const res = await call("GET", `/api/vouchers/${id}`);
    if (res.ok && state.vouchers.has(id)) {
        state.vouchers.set(id, res.data);
        renderVoucher(id);
    }
}

// ---- the waiting room of a queue sale ----

// A buyer's place in the waiting room of one voucher, while logged in:
//   stage   "none" (not joined), "joining", "queued" (waiting for the
//           place's turn), "buying" (admitted: the purchase is in
//           flight), "admitted" (the automatic purchase failed in a way
//           worth retrying: the button buys with the ticket), "done"
//   place   the last answer {position, admitted, etaSeconds, ticket}
//   etaAt   when the place is admitted, on the server's clock
//   end     how a "done" place ended, and endText its words
//   timer   the next read of the place; failures in a row; stopped once
//           the card leaves the page or the buyer logs out
//   live    what the card's live region said last, and when
function newQueue() {
    return {
        stage: "none",
        place: null,
        etaAt: 0,
        end: "",
        endText: "",
        timer: null,
        failures: 0,
        stopped: false,
        waitUntil: 0,
        live: { text: "", at: -Infinity, timer: null, admitted: false },
    };
}

// The tab's note that its buyer joined the queue of id (or bought
// through it), or null. Another buyer's note is not read.
function queueMark(id) {
    try {
        const m = JSON.parse(sessionStorage.getItem(QUEUE_KEY_PREFIX + id) || "null");
        if (m && state.session && m.userId === state.session.userId) return m;
    } catch {
        // a damaged note is as good as none
    }
    return null;
}

function setQueueMark(id, mark) {
    if (mark && state.session)
        sessionStorage.setItem(QUEUE_KEY_PREFIX + id, JSON.stringify({ userId: state.session.userId, ...mark }));
    else sessionStorage.removeItem(QUEUE_KEY_PREFIX + id);
}

function forgetQueueMarks() {
    const keys = [];
    for (let i = 0; i < sessionStorage.length; i++) {
        const k = sessionStorage.key(i);
        if (k && k.startsWith(QUEUE_KEY_PREFIX)) keys.push(k);
    }
    for (const k of keys) sessionStorage.removeItem(k);
}

// The buyer's place in the queue of id, made on first use from the tab's
// note: a buyer who joined before a reload has the place read again, one
// who bought sees so. null when logged out.
function queueOf(id) {
    if (!state.session) return null;
    let q = state.queues.get(id);
    if (q) return q;
    q = newQueue();
    state.queues.set(id, q);
    const mark = queueMark(id);
    if (mark && mark.bought) {
        q.stage = "done";
        q.end = "bought";
        q.endText = mark.orderId ? `You bought it through the queue: order ${mark.orderId}.` : "You bought it through the queue.";
    } else if (mark) {
        q.stage = "queued";
        schedulePoll(id, q, 0);
    }
    return q;
}

// Stop reading the place of id and forget it (the tab's note stays).
function stopQueue(id) {
    const q = state.queues.get(id);
    if (!q) return;
    q.stopped = true;
    clearTimeout(q.timer);
    clearTimeout(q.live.timer);
    state.queues.delete(id);
}

function schedulePoll(id, q, ms) {
    clearTimeout(q.timer);
    q.timer = setTimeout(() => pollQueue(id, q), ms);
}

async function pollQueue(id, q) {
    q.timer = null;
    if (q.stopped || !state.session) return;
    const res = await call("GET", `/api/vouchers/${id}/queue`, { token: state.session.token });
    if (!q.stopped) onPlace(id, q, res, false);
}

// The card's button: join, or buy with the ticket of an admitted place
// whose automatic purchase did not go through.
function queueClick(id) {
    const q = queueOf(id);
    if (q && q.stage === "admitted") buyAdmitted(id, q);
    else join(id);
}

async function join(id) {
    const card = state.cards.get(id);
    if (!card) return;
    if (!state.session) {
        say(card.refs.msg, "Log in first: enter your phone number.", "warn");
        $("phone").focus();
        return;
    }
    const q = queueOf(id);
    if (q.stage !== "none") return;
    q.stage = "joining";
    say(card.refs.msg, "Joining the queue…");
    renderVoucher(id);
    let checking = false;
    const res = await joinQueue(id, state.session.token, () => {
        // Said once, when the work starts.
        if (!checking) say(card.refs.msg, "Checking this browser before joining…");
        checking = true;
    });
    if (!q.stopped) onPlace(id, q, res, true);
}

// The answer res of a join (joining) or of a read of the place.
function onPlace(id, q, res, joining) {
    const card = state.cards.get(id);
    if (!card) return;
    const msg = card.refs.msg;
    if (res.ok) {
        q.failures = 0;
        q.stage = "queued";
        q.place = res.data;
        q.etaAt = clock.now() + res.data.etaSeconds * 1000;
        setQueueMark(id, {});
        if (joining || msg.classList.contains("warn")) say(msg, "");
        if (res.data.admitted) {
            admitted(id, q);
            return;
        }
        announcePlace(id, q);
        // As the service says (before the begin: at the begin; while
        // waiting: about half the wait), never sooner than a second.
        schedulePoll(id, q, Math.max(POLL_MIN_MS, res.retryAfter * 1000));
        renderVoucher(id);
        return;
    }
    if (sessionGone(res)) return;
    const code = res.error.code;
    const d = describeError(res);
    if (code === "RATE_LIMITED" && !joining) {
        // Read a moment ago (another tab, or just before a reload).
        schedulePoll(id, q, Math.max(POLL_MIN_MS, res.retryAfter * 1000));
    } else if (code === "NOT_FOUND" && !joining) {
        // The room has no place of this buyer's (the note is older
        // than the room's memory): joining again is the way in.
        setQueueMark(id, null);
        q.stage = "none";
        q.place = null;
        say(msg, "Your place in the queue was not found: join the queue again.", "warn");
    } else if (code === "NOT_STARTED" && joining) {
        // The room opens later than the page assumed: the answer says
        // when, and the room of every sale opens as long before it.
        const v = state.vouchers.get(id);
        const opensAt = clock.now() + Math.max(1, res.retryAfter) * 1000;
        if (v) {
            state.waitroomOpenMs = Math.max(0, Date.parse(v.beginTime) - opensAt);
            sessionStorage.setItem(WAITROOM_OPEN_KEY, String(state.waitroomOpenMs));
        }
        q.stage = "none";
        say(msg, `The waiting room is not open yet: it opens at ${clockTime(opensAt)}.`, "warn");
    } else if (code === "SOLD_OUT" || code === "ENDED" || code === "FORBIDDEN") {
        finishQueue(id, q, code === "SOLD_OUT" ? "sold-out" : code === "ENDED" ? "ended" : "refused", d.text);
        say(msg, d.text, d.tone);
        if (code === "SOLD_OUT") refreshVoucher(id);
    } else if (joining) {
        q.stage = "none";
        if (code === "RATE_LIMITED") q.waitUntil = Date.now() + d.wait * 1000;
        say(msg, d.text, d.tone);
    } else {
        // The service or the network failed: the place is still there,
        // read it again a little later each time.
        q.failures++;
        say(msg, `${d.text} The page keeps trying.`, "warn");
        schedulePoll(id, q, Math.min(POLL_BACKOFF_MAX_MS, Math.max(res.retryAfter * 1000, POLL_MIN_MS * 2 ** q.failures)));
    }
    renderVoucher(id);
}

// The place of id was admitted: buy once with its ticket.
function admitted(id, q) {
    const v = state.vouchers.get(id);
    if (!q.live.admitted) {
        q.live.admitted = true;
        announce(id, q, `Your turn has come for ${v ? v.title : "the voucher"}: buying it now.`, true);
    }
    buyAdmitted(id, q);
}

async function buyAdmitted(id, q) {
    const card = state.cards.get(id);
    if (!card || !q.place || !q.place.ticket) return;
    q.stage = "buying";
    const res = await buy(id, q.place.ticket);
    if (q.stopped) return;
    if (!res) {
        // Nothing was sent: the button offers it again.
        q.stage = "admitted";
        renderVoucher(id);
        return;
    }
    const msg = card.refs.msg;
    const code = res.ok ? "" : res.error.code;
    if (res.ok) {
        const orderId = res.data.orderId;
        finishQueue(id, q, "bought", `You bought it through the queue: order ${orderId}.`, { bought: true, orderId });
        say(
            msg,
            res.data.status === "pending"
                ? `Bought for you when your turn came: order ${orderId} is being recorded.`
                : `Bought for you when your turn came: order ${orderId}.`,
            "ok",
        );
    } else if (code === "ALREADY_PURCHASED") {
        finishQueue(id, q, "bought", "You bought it already: see My orders.", { bought: true });
    } else if (code === "TICKET_REQUIRED") {
        // The ticket is good for a short while after the admission; the
        // place keeps the same one, so there is no second chance. Said
        // once, in the card's message (a status, read out); the place
        // line stays empty under the "Turn passed" button.
        finishQueue(id, q, "expired", "");
        say(msg, "Your turn has passed: the queue's ticket is good only for a short while after your turn comes.", "bad");
    } else if (code === "SOLD_OUT" || code === "ENDED" || code === "FORBIDDEN") {
        finishQueue(id, q, code === "SOLD_OUT" ? "sold-out" : code === "ENDED" ? "ended" : "refused", describeError(res).text);
    } else if (res.status !== 401) {
        // Busy, rate limited, unavailable, or an outcome to look up in
        // My orders: buy() said so; the button retries with the ticket.
        q.stage = "admitted";
    }
    renderVoucher(id);
}

// The place of id has no more to do: how it ended (bought, sold-out,
// ended, expired, refused) and the words for its place line ("": none);
// mark is the tab's note to keep (none: the note goes).
function finishQueue(id, q, end, text, mark = null) {
    clearTimeout(q.timer);
    q.timer = null;
    q.stage = "done";
    q.end = end;
    q.endText = text;
    setQueueMark(id, mark);
}

// Say text in the card's live region: at most once every
// ANNOUNCE_GAP_MS (a newer text waits for its turn and replaces one
// waiting), or at once when urgent.
function announce(id, q, text, urgent = false) {
    const card = state.cards.get(id);
    const live = q.live;
    clearTimeout(live.timer);
    live.timer = null;
    if (!card || q.stopped || text === live.text) return;
    const wait = urgent ? 0 : live.at + ANNOUNCE_GAP_MS - localNow();
    if (wait > 0) {
        live.timer = setTimeout(() => announce(id, q, text), wait);
        return;
    }
    live.text = text;
    live.at = localNow();
    card.refs.live.textContent = text;
}

// Announce the place of id as it stands, in words that change only when
// the place does, or the wait by a minute: a wait read every second or
// two is not read out each time.
function announcePlace(id, q) {
    if (q.live.admitted) return;
    const v = state.vouchers.get(id);
    const title = v ? v.title : "the voucher";
    const pos = q.place && q.place.position;
    if (!pos) {
        announce(id, q, `You're in the queue for ${title}. Places are drawn when the sale starts.`);
        return;
    }
    const s = q.place.etaSeconds;
    const wait = s >= 90 ? `about ${Math.round(s / 60)} minutes` : s >= 45 ? "about a minute" : "less than a minute";
    announce(id, q, `Place ${pos} of the queue for ${title}: ${wait} to wait.`);
}

// The line of a queued place: drawn or not, and the wait.
function placeLine(v, q, now) {
    const pos = q.place && q.place.position;
    if (!q.place) return "You're in the queue. Reading your place…";
    if (!pos) {
        const begin = Date.parse(v.beginTime);
        return now < begin
            ? `You're in the queue. Places are drawn when the sale starts (in ${duration(begin - now)}).`
            : "You're in the queue. Places are being drawn…";
    }
    const s = Math.ceil((q.etaAt - now) / 1000);
    if (s <= 0) return `Place ${pos} of the queue — your turn any moment now`;
    return `Place ${pos} of the queue — about ${s < 90 ? `${s} s` : `${Math.round(s / 60)} min`}`;
}

// The button and the place's line of a queue sale's card, in phase ph.
function renderQueue(v, card, ph) {
    const r = card.refs;
    const q = queueOf(v.id);
    const p = state.purchase.get(v.id) || {};
    const now = clock.now();
    const begin = Date.parse(v.beginTime);
    const opensAt = v.queueOpensAt ? Date.parse(v.queueOpensAt) : begin - state.waitroomOpenMs;
    const stage = q ? q.stage : "none";
    let label = "Join the queue";
    let enabled = false;
    let line = "";
    if (stage === "none") {
        if (ph === "ended") {
            label = "Ended";
        } else if (now < opensAt) {
            label = `Queue opens in ${duration(opensAt - now)}`;
            line = `The waiting room opens at ${clockTime(opensAt)}; everyone who joins before the start gets a place drawn at random.`;
        } else {
            enabled = true;
            line =
                now < begin
                    ? "The waiting room is open: everyone who joins before the start gets a place drawn at random."
                    : "Join the queue: places are let in in turn, and the page buys for you when yours comes.";
            if (!state.session) label = "Log in to join the queue";
            else if (q.waitUntil > Date.now()) {
                label = `Wait ${Math.ceil((q.waitUntil - Date.now()) / 1000)} s`;
                enabled = false;
            }
        }
    } else if (stage === "joining") {
        label = "Joining…";
    } else if (stage === "queued") {
        label = "In the queue";
        line = placeLine(v, q, now);
    } else if (stage === "buying") {
        label = "Buying…";
        line = "Your turn has come: buying…";
    } else if (stage === "admitted") {
        label = "Buy now";
        line = "Your turn has come: buy now, while your ticket is good.";
        if (p.inFlight) label = "Buying…";
        else if (p.waitUntil && p.waitUntil > Date.now())
            label = `Wait ${Math.ceil((p.waitUntil - Date.now()) / 1000)} s`;
        else enabled = true;
    } else {
        label = { bought: "Bought", "sold-out": "Sold out", ended: "Ended", expired: "Turn passed" }[q.end] || "Closed";
        line = q.endText;
    }
    setText(r.place, line);
    r.place.hidden = !line;
    r.button.hidden = false;
    r.button.disabled = !enabled;
    setText(r.button, label);
}

// ---- my orders ----

const STATUS_WORDS = {
    pending: "Being recorded",
    unpaid: "Unpaid",
    paid: "Paid",
    cancelled: "Cancelled",
    expired: "Expired: not paid in time",
};

// Orders that hold the voucher: one a buyer has, and may not buy again.
const HOLDS = new Set(["pending", "unpaid", "paid"]);

// Ids are decimal strings of up to 19 digits: compare them as numbers.
function newer(a, b) {
    return a.length !== b.length ? a.length > b.length : a > b;
}

// The buyer's newest order of voucher id that is not closed, or null.
function activeOrder(id) {
    let best = null;
    for (const { order } of state.orders.values())
        if (order.voucherId === id && HOLDS.has(order.status) && (!best || newer(order.id, best.id))) best = order;
    return best;
}

// The buyer's unpaid orders, the one to pay first (the nearest deadline)
// first.
function unpaidOrders() {
    return [...state.orders.values()]
        .map((row) => row.order)
        .filter((o) => o.status === "unpaid" && o.payDeadline)
        .sort((a, b) => Date.parse(a.payDeadline) - Date.parse(b.payDeadline));
}

// The amount of order o, from its voucher: "¥47.50", or "" while unknown.
function amountOf(o) {
    const k = state.known.get(o.voucherId);
    return k && k.payValue !== undefined ? money(k.payValue) : "";
}

// Words for the time left to pay order o: "pay ¥47.50 within 14 min 58 s".
function payWords(o) {
    const left = Date.parse(o.payDeadline) - clock.now();
    const amount = amountOf(o);
    if (left <= 0) return "time to pay is up";
    return `pay ${amount ? amount + " " : ""}within ${duration(left)}`;
}

// The line of a card under its button: the buyer's order of the voucher,
// a link to it with the amount and the time left to pay.
function renderMine(id, card) {
    const a = card.refs.mine;
    const o = activeOrder(id);
    a.hidden = !o;
    if (!o) return;
    a.href = `#order-${o.id}`;
    const words =
        o.status === "unpaid"
            ? `Your order: ${payWords(o)}`
            : o.status === "paid"
              ? "Your order: paid"
              : "Your order: being recorded";
    setText(a, words);
}

// The bar at the top of the screen while orders wait for payment.
function renderUnpaidBar() {
    const bar = $("unpaid-bar");
    const list = state.session ? unpaidOrders() : [];
    bar.hidden = !list.length;
    if (!list.length) return;
    const first = list[0];
    bar.href = `#order-${first.id}`;
    bar.dataset.orderId = first.id;
    const n = list.length;
    setText(
        $("unpaid-text"),
        n === 1 ? `1 unpaid order · ${payWords(first)}` : `${n} unpaid orders · the first: ${payWords(first)}`,
    );
}

$("unpaid-bar").addEventListener("click", (ev) => {
    ev.preventDefault();
    showOrder($("unpaid-bar").dataset.orderId);
});

// Bring order id into view and give it the focus (a screen reader reads
// it from there).
function showOrder(id) {
    const row = state.orders.get(id);
    if (!row) {
        $("orders").scrollIntoView();
        return;
    }
    row.node.scrollIntoView({ block: "center" });
    row.node.focus({ preventScroll: true });
}

// The buttons of an order: cancel an unpaid one, and in development mode
// pay it with the simulated provider. A cancel is asked again first.
function orderActions(row) {
    const order = row.order;
    if (order.status !== "unpaid") return [];
    const title = titleOf(order);
    if (row.confirming)
        return [
            el("span", { class: "ask", id: `order-${order.id}-ask` }, "Cancel this order? The voucher goes back on sale."),
            el(
                "button",
                {
                    type: "button",
                    class: "danger confirm-cancel",
                    "aria-describedby": `order-${order.id}-ask`,
                    onclick: () => orderAction(order.id, "cancel"),
                },
                "Yes, cancel it",
            ),
            el("button", { type: "button", class: "secondary keep", onclick: () => confirmCancel(row, false) }, "Keep it"),
        ];
    const buttons = [];
    if (state.session && state.session.dev)
        buttons.push(
            el(
                "button",
                { type: "button", class: "pay", "aria-label": `Pay (dev) for ${title}`, onclick: () => orderAction(order.id, "pay") },
                "Pay (dev)",
            ),
        );
    buttons.push(
        el(
            "button",
            {
                type: "button",
                class: "secondary cancel",
                "aria-label": `Cancel the order of ${title}`,
                onclick: () => confirmCancel(row, true),
            },
            "Cancel",
        ),
    );
    return buttons;
}

// Ask (on) or stop asking whether to cancel the order of row; the focus
// goes to the question's safe answer, and back to Cancel after it.
function confirmCancel(row, on) {
    row.confirming = on;
    row.refs.actions.replaceChildren(...orderActions(row));
    row.refs.actions.querySelector(on ? "button.keep" : "button.cancel")?.focus();
}

async function orderAction(id, verb) {
    const row = state.orders.get(id);
    if (!row || row.busy || !state.session) return;
    row.busy = true;
    for (const b of row.refs.actions.querySelectorAll("button")) b.disabled = true;
    say(row.refs.msg, verb === "pay" ? "Paying…" : "Cancelling…");
    const res = await call("POST", `/api/orders/${id}/${verb}`, { token: state.session.token });
    row.busy = false;
    row.confirming = false;
    if (res.ok) {
        say(row.refs.msg, verb === "pay" ? "Paid." : "Cancelled: the voucher is back on sale.", "ok");
        renderOrder(res.data);
        if (verb === "cancel") refreshVoucher(res.data.voucherId);
        return;
    }
    if (sessionGone(res)) return;
    say(row.refs.msg, describeError(res).text, describeError(res).tone);
    row.refs.actions.replaceChildren(...orderActions(row));
    loadOrders();
}

function titleOf(o) {
    const k = state.known.get(o.voucherId);
    return k ? k.title : `Voucher ${o.voucherId}`;
}

// Create or update the row of order o in the list (at position i, if
// given; rows of older pages go at the end).
function renderOrder(o, i) {
    let row = state.orders.get(o.id);
    if (!row) {
        const refs = {
            title: el("div", { class: "title" }),
            amount: el("div", { class: "amount" }),
            status: el("div"),
            when: el("div", { class: "hint" }),
            deadline: el("div", { class: "hint countdown" }),
            actions: el("div", { class: "row" }),
            msg: el("p", { class: "msg", role: "status" }),
        };
        const node = el(
            "li",
            { "data-order-id": o.id, id: `order-${o.id}`, tabindex: "-1" },
            el("div", {}, refs.title, refs.amount, el("div", { class: "hint mono" }, `Order ${o.id}`)),
            el("div", {}, refs.status, refs.when, refs.deadline),
            refs.actions,
            refs.msg,
        );
        row = { node, refs, order: o, busy: false, confirming: false, older: i === undefined };
        state.orders.set(o.id, row);
    }
    const was = row.order.status;
    const changed = was !== o.status || !row.node.isConnected;
    row.order = o;
    setText(row.refs.title, titleOf(o));
    setText(row.refs.amount, amountOf(o));
    setText(row.refs.status, STATUS_WORDS[o.status] || o.status);
    setClass(row.refs.status, `status ${o.status}`);
    setText(row.refs.when, `Bought ${localTime(o.createTime)}`);
    if (changed) row.confirming = false;
    if (changed || !row.refs.actions.children.length) row.refs.actions.replaceChildren(...orderActions(row));
    // A card's old words ("Bought!", "Already purchased") are over once
    // its order closed: the card offers the voucher again.
    if (was !== o.status && !HOLDS.has(o.status)) {
        const card = state.cards.get(o.voucherId);
        if (card) say(card.refs.msg, "");
    }
    const list = $("order-list");
    if (i !== undefined && list.children[i] !== row.node) list.insertBefore(row.node, list.children[i] || null);
    else if (i === undefined && !row.node.isConnected) list.append(row.node);
    tickOrder(row);
    if (changed) {
        renderVoucher(o.voucherId);
        renderUnpaidBar();
    }
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
        setText(row.refs.deadline, `Pay within ${duration(left)}, by ${clockTime(Date.parse(o.payDeadline))}`);
        return;
    }
    setText(row.refs.deadline, "Time to pay is up");
    for (const b of row.refs.actions.querySelectorAll("button.pay")) b.disabled = true;
    // The service expires it: read it again shortly.
    if (!row.recheck) row.recheck = setTimeout(() => ((row.recheck = null), loadOrders()), 1500);
}

// The title and price of voucher id, for its orders.
async function learnVoucher(id) {
    if (state.known.has(id)) return;
    const res = await call("GET", `/api/vouchers/${id}`);
    state.known.set(id, res.ok ? { title: res.data.title, payValue: res.data.payValue } : { title: `Voucher ${id}` });
}

let ordersLoading = false;

// Read the newest page of my orders again; rows of older pages read with
// "Show older orders" stay.
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
        await Promise.all([...new Set(items.map((o) => o.voucherId))].map(learnVoucher));
        // Orders are never deleted: one missing from the first page was
        // pushed down by newer ones. Until older pages are shown it goes,
        // and the next older page starts after this first page; after,
        // it stays where it is, among the older ones.
        const keep = new Set(items.map((o) => o.id));
        for (const [id, row] of state.orders)
            if (!keep.has(id)) {
                if (state.olderShown) {
                    row.older = true;
                    continue;
                }
                row.node.remove();
                state.orders.delete(id);
                renderVoucher(row.order.voucherId);
            }
        items.forEach((o, i) => renderOrder(o, i));
        if (!state.olderShown) state.olderCursor = res.data.nextCursor || null;
        $("orders-more").hidden = !state.olderCursor;
        renderUnpaidBar();
    } finally {
        ordersLoading = false;
    }
}

// The next page of older orders, after those shown.
async function loadOlderOrders() {
    if (!state.session || !state.olderCursor) return;
    const button = $("orders-more");
    button.disabled = true;
    const res = await call("GET", `/api/orders?limit=50&cursor=${encodeURIComponent(state.olderCursor)}`, {
        token: state.session.token,
    });
    button.disabled = false;
    if (sessionGone(res)) return;
    if (!res.ok) {
        say($("orders-msg"), describeError(res).text, "warn");
        return;
    }
    await Promise.all([...new Set(res.data.items.map((o) => o.voucherId))].map(learnVoucher));
    for (const o of res.data.items) if (!state.orders.has(o.id)) renderOrder(o);
    state.olderShown = true;
    state.olderCursor = res.data.nextCursor || null;
    button.hidden = !state.olderCursor;
    say($("orders-msg"), `${count(state.orders.size)} orders shown${state.olderCursor ? "" : ": all of them"}.`);
}

$("orders-refresh").addEventListener("click", loadOrders);
$("orders-more").addEventListener("click", loadOlderOrders);

// ---- the clock and the timers ----

// The line over the vouchers: the times are the reader's, the countdowns
// the shop's; a device clock that is off is said in words.
function clockLine() {
    const part = new Intl.DateTimeFormat(undefined, { timeZoneName: "short" })
        .formatToParts(new Date(clock.now()))
        .find((x) => x.type === "timeZoneName");
    const zone = part ? part.value : "";
    const skew = clock.known() ? localNow() - clock.now() : 0;
    let words = `Times are in your time zone${zone ? ` (${zone})` : ""}; countdowns follow the shop's clock.`;
    if (Math.abs(skew) >= 60000)
        words += ` This device's clock is ${duration(Math.abs(skew))} ${skew > 0 ? "fast" : "slow"}.`;
    return words;
}

function tick() {
    setText($("clock"), clockLine());
    for (const row of state.orders.values()) tickOrder(row);
    renderUnpaidBar();
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
// The currency is known: show the prices with it.
siteReady.then(() => {
    for (const id of state.cards.keys()) renderVoucher(id);
    for (const row of state.orders.values()) setText(row.refs.amount, amountOf(row.order));
});
loadVouchers().then(() => tightenClock(200, 4));
setInterval(tick, TICK_MS);
setInterval(() => {
    if (document.visibilityState === "visible") loadVouchers();
}, LIST_REFRESH_MS);
setInterval(() => {
    if (document.visibilityState === "visible") loadOrders();
}, ORDERS_REFRESH_MS);
