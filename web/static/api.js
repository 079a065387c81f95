// api.js - what both pages share: API calls that read the error envelope,
// the server's clock from the Date header, words for every error code, the
// proof of work before a login code, the service's settings (currency),
// and the formats of money, counts, times and durations.

// Local milliseconds that never jump (unlike Date.now() when the user sets
// the clock), on the same scale as Date.now().
export function localNow() {
    return performance.timeOrigin + performance.now();
}

// The server's clock, learnt from the Date header of every answer. Date
// has whole seconds, so one answer only says that the offset (server minus
// local time) lies in an interval: the server wrote Date = d, meaning a
// time in [d, d + 1 s), at some moment between sending and receiving, so
// offset is in (d - received, d + 1 s - sent). Intersecting the intervals
// of many answers, taken at different fractions of a second, narrows it
// to about a round trip. A sale's button opens when even the lowest
// estimate of the server's time has passed the start, so a purchase never
// arrives before the sale opens.
export const clock = {
    lo: -Infinity,
    hi: Infinity,
    samples: 0,

    observe(dateHeader, sent, received) {
        const d = Date.parse(dateHeader || "");
        if (Number.isNaN(d)) return;
        const lo = d - received;
        const hi = d + 1000 - sent;
        // Disjoint: a clock moved (the server's, or a suspended laptop).
        if (lo > this.hi || hi < this.lo) {
            this.lo = lo;
            this.hi = hi;
        } else {
            this.lo = Math.max(this.lo, lo);
            this.hi = Math.min(this.hi, hi);
        }
        this.samples++;
    },
    known() {
        return Number.isFinite(this.lo) && Number.isFinite(this.hi);
    },
    // The best estimate of the server's time, in epoch milliseconds.
    now() {
        return localNow() + (this.known() ? (this.lo + this.hi) / 2 : 0);
    },
    // The earliest time the server's clock can show now.
    earliest() {
        return localNow() + (this.known() ? this.lo : 0);
    },
    // True once the server's clock has certainly reached t.
    surelyReached(t) {
        return this.known() && this.earliest() >= t;
    },
    uncertainty() {
        return this.known() ? this.hi - this.lo : Infinity;
    },
};

// Take clock samples until the offset is known to within targetMs, with
// pauses at random fractions of a second between them (GET /healthz is
// cheap, answered from memory and not rate limited).
export async function tightenClock(targetMs = 60, maxSamples = 12) {
    for (let i = 0; i < maxSamples && clock.uncertainty() > targetMs; i++) {
        await call("GET", "/healthz");
        await sleep(90 + Math.random() * 310);
    }
}

export function sleep(ms) {
    return new Promise((resolve) => setTimeout(resolve, ms));
}

// One API call. Resolves (never rejects) to
//   { ok, status, data, error: {code, message}, retryAfter }
// where error is the envelope's (or NETWORK when nothing came back) and
// retryAfter the Retry-After header in seconds (0 without one). headers
// adds request headers of the caller's; a body always goes out as JSON
// with its Content-Type, which the service requires.
export async function call(method, path, { body, token, headers: extra } = {}) {
    const headers = { ...extra };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    if (token) headers.Authorization = "Bearer " + token;
    const sent = localNow();
    let resp;
    try {
        resp = await fetch(path, {
            method,
            headers,
            body:
                body === undefined
                    ? undefined
                    : typeof body === "string"
                      ? body
                      : JSON.stringify(body),
            cache: "no-store",
        });
    } catch (e) {
        return {
            ok: false,
            status: 0,
            data: null,
            error: { code: "NETWORK", message: String(e.message || e) },
            retryAfter: 0,
        };
    }
    clock.observe(resp.headers.get("Date"), sent, localNow());
    const text = await resp.text();
    let data = null;
    try {
        data = JSON.parse(text);
    } catch {
        data = null;
    }
    const retryAfter = parseInt(resp.headers.get("Retry-After") || "0", 10);
    const result = {
        ok: resp.ok,
        status: resp.status,
        data,
        error: null,
        retryAfter: retryAfter > 0 ? retryAfter : 0,
        text,
    };
    if (!resp.ok) {
        const e = data && data.error;
        result.error =
            e && typeof e.code === "string"
                ? e
                : {
                      code: "HTTP_" + resp.status,
                      message: text.slice(0, 200) || resp.statusText,
                  };
    }
    return result;
}

// ---- proof of work ----

// Solve a challenge of GET /api/pow ({algorithm, challenge, maxnumber,
// salt, signature}) in a module Web Worker (pow-worker.js), so the page
// stays responsive meanwhile. Resolves to the value of the Seckill-PoW
// header: base64 of the solution's JSON. onProgress(fraction), if given,
// hears how much of 0..maxnumber has been searched: 0 at the start, then
// every 2000 numbers. Rejects when no number fits or the worker cannot
// run; either way the worker is ended.
export function solvePow(challenge, onProgress) {
    return new Promise((resolve, reject) => {
        let worker;
        try {
            worker = new Worker(new URL("./pow-worker.js", import.meta.url), { type: "module" });
        } catch (e) {
            reject(e);
            return;
        }
        worker.onmessage = (ev) => {
            const m = ev.data;
            if ("progress" in m) {
                if (onProgress) onProgress(m.progress);
                return;
            }
            worker.terminate();
            if (!("number" in m)) {
                reject(new Error(m.failed));
                return;
            }
            const json = JSON.stringify({
                algorithm: challenge.algorithm,
                challenge: challenge.challenge,
                number: m.number,
                salt: challenge.salt,
                signature: challenge.signature,
            });
            // btoa takes one character per byte: hand it the UTF-8 bytes.
            const bytes = new TextEncoder().encode(json);
            resolve(btoa(String.fromCharCode(...bytes)));
        };
        worker.onerror = (ev) => {
            worker.terminate();
            reject(new Error(ev.message || "the proof-of-work worker failed"));
        };
        if (onProgress) onProgress(0);
        worker.postMessage({ challenge });
    });
}

// An admin's change (a create, a control, a refund done): call() with an
// Idempotency-Key. The same change sent again before it succeeded (a
// double click, a retry after a lost answer) carries the same key, so the
// service makes it once and answers the retry as the first; once it
// succeeded, the next one of the same kind is a new change with a new key.
const changeKeys = new Map();

function newKey() {
    if (crypto.randomUUID) return crypto.randomUUID();
    const b = crypto.getRandomValues(new Uint8Array(16));
    return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

export async function change(method, path, opts = {}) {
    const what = `${method} ${path} ${typeof opts.body === "string" ? opts.body : JSON.stringify(opts.body ?? null)}`;
    let key = changeKeys.get(what);
    if (!key) {
        key = newKey();
        changeKeys.set(what, key);
    }
    const res = await call(method, path, {
        ...opts,
        headers: { ...opts.headers, "Idempotency-Key": key },
    });
    if (res.ok) changeKeys.delete(what);
    return res;
}

// One API call that carries the proof of work the service wants
// (Seckill-PoW): a challenge from GET /api/pow, solved unless its
// maxnumber is 0 (the service asks for none). A refusal with POW_REQUIRED
// (the challenge ran out or was spent meanwhile) carries a fresh
// challenge in error.details: that one is solved and the call made once
// more. opts and the answer as in call(); onProgress(fraction) as in
// solvePow. A challenge the page cannot solve is error POW_UNSOLVED.
export async function callWithPow(method, path, opts = {}, onProgress) {
    const got = await call("GET", "/api/pow");
    if (!got.ok) return got;
    let challenge = got.data;
    for (let attempt = 0; ; attempt++) {
        const headers = { ...opts.headers };
        if (challenge.maxnumber > 0) {
            try {
                headers["Seckill-PoW"] = await solvePow(challenge, onProgress);
            } catch (e) {
                return {
                    ok: false,
                    status: 0,
                    data: null,
                    error: { code: "POW_UNSOLVED", message: String(e.message || e) },
                    retryAfter: 0,
                };
            }
        }
        const res = await call(method, path, { ...opts, headers });
        const details = res.error && res.error.code === "POW_REQUIRED" && res.error.details;
        if (attempt > 0 || !details) return res;
        challenge = details;
    }
}

// Ask for a login code for phone (POST /api/auth/code), with the proof of
// work before it (callWithPow).
export function requestCode(phone, onProgress) {
    return callWithPow("POST", "/api/auth/code", { body: { phone } }, onProgress);
}

// Join the waiting room of queue sale voucherId (POST
// /api/vouchers/{id}/queue) as the holder of token, with the proof of
// work the service may want (callWithPow). Joining again keeps the place.
export function joinQueue(voucherId, token, onProgress) {
    return callWithPow("POST", `/api/vouchers/${voucherId}/queue`, { token }, onProgress);
}

// The error codes of the API (README, docs/openapi.yaml) in words a buyer
// understands, and how to present them: "bad" for a final refusal, "warn"
// for one that passes (retry, wait). res is what call() resolved to.
export function describeError(res) {
    const e = res.error || { code: "", message: "" };
    const wait = res.retryAfter || 1;
    switch (e.code) {
        case "SOLD_OUT":
            return { text: "Sold out: every voucher has been taken.", tone: "bad" };
        case "ALREADY_PURCHASED":
            return {
                text: "Already purchased: it is one per person, and you have yours.",
                tone: "bad",
            };
        case "BUSY":
            return {
                text: "Busy: the sale is crowded or another purchase of yours is in progress. Retry in a moment.",
                tone: "warn",
            };
        case "RATE_LIMITED":
            return {
                text: `Rate limited: too many requests. Wait ${wait} s.`,
                tone: "warn",
                wait,
            };
        case "SMS_BUDGET":
            return {
                text: `Many people are asking for login codes right now. Try again in ${wait} s.`,
                tone: "warn",
                wait,
            };
        case "NOT_STARTED":
            return { text: "Not started yet: the sale has not opened.", tone: "warn" };
        case "ENDED":
            return { text: "Ended: the sale is over.", tone: "bad" };
        case "SALE_PAUSED":
            return { text: "Paused: the sale is paused for now. Try again later.", tone: "warn" };
        case "SALE_STARTED":
            return { text: "Too late, the sale has begun: " + e.message + ".", tone: "bad" };
        case "NOT_SECKILL":
            return {
                text: "Not in the flash sale: this voucher is not sold here.",
                tone: "bad",
            };
        case "NOT_FOUND":
            return { text: "Not found: it no longer exists.", tone: "bad" };
        case "ORDER_PAID":
            return { text: "Already paid: a paid order cannot be cancelled.", tone: "bad" };
        case "ORDER_CLOSED":
            return {
                text: "Closed: the order was cancelled, or its time to pay ran out.",
                tone: "bad",
            };
        case "IDEMPOTENCY_KEY_IN_USE":
            return {
                text: `Still being done: this change was sent a moment ago and has not finished. Wait ${wait} s.`,
                tone: "warn",
                wait,
            };
        case "IDEMPOTENCY_KEY_REUSED":
            return {
                text: "Refused: this change was already sent with other values. Reload and make it again.",
                tone: "bad",
            };
        case "UNAUTHORIZED":
            return {
                text: "Please log in again: your session is missing or has expired.",
                tone: "bad",
            };
        case "FORBIDDEN":
            // A buyer's token on an admin's route, or a banned buyer.
            return { text: "Not allowed: this account may not do this.", tone: "bad" };
        case "BAD_REQUEST":
            return { text: "Refused: " + e.message + ".", tone: "bad" };
        case "METHOD_NOT_ALLOWED":
            return {
                text: "Refused: the page sent a request this server does not take.",
                tone: "bad",
            };
        case "PAYLOAD_TOO_LARGE":
            return { text: "Refused: the request is larger than 64 KiB.", tone: "bad" };
        case "TICKET_REQUIRED":
            return {
                text: "This sale lets buyers in through its waiting room: join the queue, and buy once you are admitted.",
                tone: "bad",
            };
        case "POW_REQUIRED":
            return {
                text: "Refused: the page's proof of work was missing, used up or too old. Try again.",
                tone: "bad",
            };
        case "URI_TOO_LONG":
            return { text: "Refused: the page sent an address that is too long or has too many parameters.", tone: "bad" };
        case "HEADERS_TOO_LARGE":
            return {
                text: "Refused: the browser sent more headers (cookies, extensions' additions) than the server takes. Clear this site's cookies and try again.",
                tone: "bad",
            };
        case "POW_UNSOLVED":
            // The page's own: the worker found no answer or could not run.
            return {
                text: "This browser could not finish the check that comes before a code. Reload the page and try again.",
                tone: "bad",
            };
        case "UNSUPPORTED_MEDIA_TYPE":
            return {
                text: "Refused: the page sent a body that is not labelled as JSON.",
                tone: "bad",
            };
        case "NOT_IMPLEMENTED":
            return {
                text: "Refused: the browser sent a request this server does not support.",
                tone: "bad",
            };
        case "INTERNAL":
            return {
                text: "Something went wrong on our side. Retry in a moment.",
                tone: "bad",
            };
        case "UNAVAILABLE":
            if (/outcome is unknown/.test(e.message))
                return {
                    text: "We could not confirm the outcome: look at My orders before you retry.",
                    tone: "warn",
                    checkOrders: true,
                };
            return {
                text: `The service is busy or down. Retry in ${wait} s.`,
                tone: "warn",
                wait,
            };
        case "NETWORK":
            return {
                text: "Network error: check your connection and retry.",
                tone: "warn",
            };
        case "HTTP_502":
        case "HTTP_504":
            // A load balancer's own answer: the instance behind it died or
            // went silent in the middle of the request, which may have
            // gone through (a purchase is never sent to a second one).
            return {
                text: "We could not confirm the outcome: look at My orders before you retry.",
                tone: "warn",
                checkOrders: true,
            };
        default:
            return { text: `Error ${res.status}: ${e.message}`, tone: "bad" };
    }
}

// What the service says of itself (GET /api/config): the currency its
// prices are in, development mode, and whether a login code needs a proof
// of work. Read once, when a page loads this module; until the answer
// comes (or if it never does) money is shown without a currency.
export const site = { currency: "", dev: false, pow: true };

export const siteReady = call("GET", "/api/config").then((res) => {
    if (res.ok && res.data) Object.assign(site, res.data);
    moneyFormat = null;
    return site;
});

let moneyFormat = null;

// Cents as the reader's way of writing an amount in the service's
// currency: "¥47.50", "CN¥47.50", "47,50 €"; "47.50" before the currency
// is known.
export function money(cents) {
    const n = Number(cents);
    if (!Number.isFinite(n)) return "";
    if (!moneyFormat) {
        try {
            moneyFormat = site.currency
                ? new Intl.NumberFormat(undefined, { style: "currency", currency: site.currency })
                : new Intl.NumberFormat(undefined, { minimumFractionDigits: 2, maximumFractionDigits: 2 });
        } catch {
            // A currency code this browser does not know: the number alone.
            moneyFormat = new Intl.NumberFormat(undefined, { minimumFractionDigits: 2, maximumFractionDigits: 2 });
        }
    }
    return moneyFormat.format(n / 100);
}

const countFormat = new Intl.NumberFormat();

// A count with the reader's grouping: 5000000 as "5,000,000".
export function count(n) {
    return countFormat.format(Number(n));
}

// Milliseconds as the one countdown format of the pages, largest unit
// first and rounded up to the second: "2 d 3 h", "1 h 05 min",
// "14 min 58 s", "9 s". Minutes and seconds after a larger unit have two
// digits, so a ticking countdown keeps its width.
export function duration(ms) {
    let s = Math.max(0, Math.ceil(ms / 1000));
    const d = Math.floor(s / 86400);
    s -= d * 86400;
    const h = Math.floor(s / 3600);
    s -= h * 3600;
    const m = Math.floor(s / 60);
    s -= m * 60;
    const two = (n) => String(n).padStart(2, "0");
    if (d) return `${d} d ${h} h`;
    if (h) return `${h} h ${two(m)} min`;
    if (m) return `${m} min ${two(s)} s`;
    return `${s} s`;
}

const TIME_PARTS = {
    day: "numeric",
    month: "short",
    year: "numeric",
    hour: "2-digit",
    minute: "2-digit",
    second: "2-digit",
    timeZoneName: "short",
};

// An RFC 3339 time as the reader's local date and time, with the zone:
// "26 Nov 2026, 14:05:00 GMT+8".
export function localTime(iso) {
    const t = Date.parse(iso);
    if (Number.isNaN(t)) return iso || "";
    return new Date(t).toLocaleString(undefined, TIME_PARTS);
}

// Two RFC 3339 times as one range of the reader's, the date and zone
// written once when they are the same: "26 Nov 2026, 14:05:00 – 15:05:00
// GMT+8".
export function localRange(from, to) {
    const a = Date.parse(from);
    const b = Date.parse(to);
    if (Number.isNaN(a) || Number.isNaN(b)) return `${localTime(from)} – ${localTime(to)}`;
    rangeFormat = rangeFormat || new Intl.DateTimeFormat(undefined, TIME_PARTS);
    const f = rangeFormat;
    return f.formatRange ? f.formatRange(a, b) : `${f.format(a)} – ${f.format(b)}`;
}

// Made once: the cards redraw their range ten times a second.
let rangeFormat = null;

// Epoch ms t as the reader's time of day, with the zone: "14:05 GMT+8".
export function clockTime(t) {
    return new Date(t).toLocaleTimeString(undefined, {
        hour: "2-digit",
        minute: "2-digit",
        timeZoneName: "short",
    });
}

// A Date (or epoch ms) as the API's time: "2026-11-21T10:00:00Z".
export function rfc3339(t) {
    return new Date(Math.floor(Number(t) / 1000) * 1000)
        .toISOString()
        .replace(/\.\d{3}Z$/, "Z");
}

// document.createElement with attributes, properties and children in one
// call; text is always set as text, never parsed as HTML.
export function el(tag, props = {}, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(props)) {
        if (v === undefined || v === null || v === false) continue;
        if (k === "class") node.className = v;
        else if (k === "text") node.textContent = v;
        else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
        else if (k in node && typeof v !== "string") node[k] = v;
        else node.setAttribute(k, v === true ? "" : v);
    }
    for (const c of children.flat())
        if (c !== undefined && c !== null && c !== false)
            node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    return node;
}

// Show a message in a status element with a tone ("ok", "warn", "bad").
export function say(node, text, tone = "") {
    node.textContent = text;
    node.className = "msg" + (tone ? " " + tone : "");
}
